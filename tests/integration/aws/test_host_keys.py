"""The first SSH connection to an EC2 workspace is pinned to the host keys the instance published in its console
output, through the shipped create playbook on the try-out cloud (tests/localcloud: the proxy answers
GetConsoleOutput with the block cloud-init prints, holding the key the guest's sshd serves; the console_key fault
makes the console show a key that no sshd serves, as when something else answers at the instance's address)."""

import os

import pytest

from tests.integration.playbooks import make_repo

from .awsrun import AwsSite

SOURCE = 'the console output (GetConsoleOutput)'


@pytest.fixture(scope='module')
def site(localcloud, tmp_path_factory):
    directory = tmp_path_factory.mktemp('aws-host-keys')
    site = AwsSite(localcloud, directory)
    site.repo = make_repo(str(directory / 'repo'))
    yield site


@pytest.fixture()
def cloud(site):
    site.cloud.clear()
    yield site.cloud
    site.cloud.clear()


def served_key(site, address):
    """The host key the guest's sshd at ``address`` serves, as the cloud wrote it when it started that sshd."""
    with open(site.cloud.info['ssh_known_hosts'], encoding='utf-8') as known:
        for line in known:
            name, key = line.split(' ', 1)
            if name in (address, '[%s]:%s' % (address, site.cloud.info['ssh_port'])):
                return ' '.join(key.split()[:2])
    raise AssertionError('no sshd known at %s' % address)


def published(site, name):
    return [e['detail'] for e in site.events(name) if e['action'] == 'host_keys_published']


def guest_root(site, instance_id):
    return site.cloud.info['guest_root'].replace('{vmid}', instance_id)


def test_the_first_ssh_is_pinned_to_the_keys_the_console_published(site, cloud):
    run = site.create('aws-pinned', site.repo, agent='tool', ephemera_agents={'tool': ['true']})
    assert run.ok, run.explain()
    ws = site.workspace('aws-pinned')
    assert ws['status'] == 'ready'
    # Read before the first connection, from EC2's API: the key the guest's sshd serves, and nothing else.
    [seen] = published(site, 'aws-pinned')
    assert seen == {'source': SOURCE, 'host_keys': [served_key(site, ws['address'])]}
    actions = [e['action'] for e in site.events('aws-pinned')]
    assert actions.index('host_keys_published') < actions.index('host_keys')
    assert 'host keys from %s' % SOURCE in run.output
    # What the bootstrap leaves in a guest it reached (the other test looks for it in one it must not reach).
    assert os.path.isdir(os.path.join(guest_root(site, ws['resource_id']), 'var', 'lib', 'ephemera'))


def test_a_guest_whose_key_is_not_the_published_one_is_refused_before_anything_is_sent(site, cloud):
    cloud.console_key()
    run = site.create('aws-other-key', site.repo, agent='tool', ephemera_agents={'tool': ['true']})
    assert not run.ok
    ws = site.workspace('aws-other-key')
    instance_id = ws['resource_id']
    [seen] = published(site, 'aws-other-key')
    assert seen['host_keys'] and served_key(site, ws['address']) not in seen['host_keys']
    # The ssh step refused the key it was shown, and said what to do; nothing after it ran.
    assert ws['failure']['step'] == 'ssh', ws['failure']
    message = ws['failure']['message']
    assert 'not one of those it published in %s' % SOURCE in message and 'nothing was sent' in message
    assert 'destroy this workspace' in message and message in run.output
    assert not ws['facts'].get('host_key') and 'bootstrap' not in ws['progress']
    # The guest's sshd saw the connections end before any login: no key was offered to it, nothing was run.
    with open(os.path.join(os.path.dirname(guest_root(site, instance_id)), 'sshd.log'), encoding='utf-8',
              errors='replace') as log:
        said = log.read()
    assert 'preauth' in said and 'Accepted' not in said and 'publickey' not in said, said
    assert not os.path.exists(os.path.join(guest_root(site, instance_id), 'var', 'lib', 'ephemera'))
    run = site.destroy('aws-other-key')
    assert run.ok, run.explain()


def test_an_instance_that_publishes_no_key_is_reached_on_first_use_with_a_warning(site, cloud):
    cloud.console_key(silent=True)
    run = site.create('aws-silent', site.repo, agent='tool', ephemera_agents={'tool': ['true']},
                      ephemera_ssh_timeout=8)
    assert run.ok, run.explain()
    ws = site.workspace('aws-silent')
    [seen] = published(site, 'aws-silent')
    assert seen['host_keys'] == [] and 'trusts the key it is shown' in seen['reason']
    assert 'published no SSH host key in %s within 8 s' % SOURCE in run.output
    assert ws['status'] == 'ready'
