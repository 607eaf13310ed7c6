"""The first SSH connection to a Compute Engine workspace is pinned to the host keys the instance published in its
guest attributes, through the shipped create playbook on the try-out cloud's Compute Engine fake (the insert enables
guest attributes; the fake's guest writes its sshd's host key to hostkeys/<type> as the Google guest agent does, and
getGuestAttributes reads it; the ``other`` host key fault makes the guest publish a key that no sshd serves, as when
something else answers at the instance's address, and ``silent`` none, as an image without the guest agent)."""

import os

import pytest

from tests.integration.playbooks import make_repo

from .gcprun import GcpSite

SOURCE = 'the guest attributes (getGuestAttributes, hostkeys/)'


@pytest.fixture(scope='module')
def site(localcloud, tmp_path_factory):  # pylint: disable=redefined-outer-name
    directory = tmp_path_factory.mktemp('gcp-host-keys')
    site = GcpSite(localcloud, directory)
    site.repo = make_repo(str(directory / 'repo'))
    yield site
    assert localcloud.gcp('violations') == []


@pytest.fixture()
def cloud(site):
    site.cloud.clear()
    yield site.cloud
    site.cloud.clear()


def served_key(site, address):
    """The host key the guest's sshd at ``address`` serves, as the cloud wrote it when it started that sshd."""
    with open(site.cloud.info['gcp']['ssh_known_hosts'], encoding='utf-8') as known:
        for line in known:
            name, key = line.split(' ', 1)
            if name in (address, '[%s]:%s' % (address, site.cloud.info['ssh_port'])):
                return ' '.join(key.split()[:2])
    raise AssertionError('no sshd known at %s' % address)


def published(site, name):
    return [e['detail'] for e in site.events(name) if e['action'] == 'host_keys_published']


def guest_root(site, instance):
    return site.cloud.info['gcp']['guest_prefix'].replace('{vmid}', instance)


def test_the_first_ssh_is_pinned_to_the_keys_of_the_guest_attributes(site, cloud):
    run = site.create('gce-pinned', site.repo, agent='tool', ephemera_agents={'tool': ['true']})
    assert run.ok, run.explain()
    ws = site.workspace('gce-pinned')
    assert ws['status'] == 'ready'
    [instance] = site.instances('gce-pinned')
    assert instance['metadata'].get('enable-guest-attributes') == 'TRUE'
    # Read before the first connection, from Compute Engine's API: the key the guest's sshd serves, and nothing else.
    [seen] = published(site, 'gce-pinned')
    assert seen == {'source': SOURCE, 'host_keys': [served_key(site, ws['address'])]}
    kind, blob = seen['host_keys'][0].split()
    assert cloud.gcp('guest_attributes', name=ws['resource_id']) == {'hostkeys': {kind: blob}}
    actions = [e['action'] for e in site.events('gce-pinned')]
    assert actions.index('host_keys_published') < actions.index('host_keys')
    assert 'host keys from %s' % SOURCE in run.output
    assert any(m == 'GET' and p.endswith('/instances/%s/getGuestAttributes' % ws['resource_id'])
               and q.get('queryPath') == 'hostkeys/' for m, p, q in cloud.gcp('calls'))
    # What the bootstrap leaves in a guest it reached (the other test looks for it in one it must not reach).
    assert os.path.isdir(os.path.join(guest_root(site, ws['resource_id']), 'var', 'lib', 'ephemera'))


def test_a_guest_whose_key_is_not_the_published_one_is_refused_before_anything_is_sent(site, cloud):
    site.host_keys_fault()
    run = site.create('gce-other-key', site.repo, agent='tool', ephemera_agents={'tool': ['true']})
    assert not run.ok
    ws = site.workspace('gce-other-key')
    name = ws['resource_id']
    [seen] = published(site, 'gce-other-key')
    assert seen['host_keys'] and served_key(site, ws['address']) not in seen['host_keys']
    # The ssh step refused the key it was shown, and said what to do; nothing after it ran.
    assert ws['failure']['step'] == 'ssh', ws['failure']
    message = ws['failure']['message']
    assert 'not one of those it published in %s' % SOURCE in message and 'nothing was sent' in message
    assert 'destroy this workspace' in message and message in run.output
    assert not ws['facts'].get('host_key') and 'bootstrap' not in ws['progress']
    # The guest's sshd saw the connections end before any login: no key was offered to it, nothing was run.
    with open(os.path.join(os.path.dirname(guest_root(site, name)), 'sshd.log'), encoding='utf-8',
              errors='replace') as log:
        said = log.read()
    assert 'preauth' in said and 'Accepted' not in said and 'publickey' not in said, said
    assert not os.path.exists(os.path.join(guest_root(site, name), 'var', 'lib', 'ephemera'))
    run = site.destroy('gce-other-key')
    assert run.ok, run.explain()
    assert site.instances('gce-other-key') == []


def test_an_instance_that_publishes_no_key_is_reached_on_first_use_with_a_warning(site, cloud):
    site.host_keys_fault(silent=True)
    run = site.create('gce-silent', site.repo, agent='tool', ephemera_agents={'tool': ['true']},
                      ephemera_ssh_timeout=8)
    assert run.ok, run.explain()
    ws = site.workspace('gce-silent')
    [seen] = published(site, 'gce-silent')
    assert seen['host_keys'] == [] and 'trusts the key it is shown' in seen['reason']
    assert 'published no SSH host key in %s within 8 s' % SOURCE in run.output
    assert 'Google guest agent' in run.output
    assert ws['status'] == 'ready'
