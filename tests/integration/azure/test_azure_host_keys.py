"""The first SSH connection to an Azure workspace is pinned to the host keys its VM published in the serial log of
boot diagnostics, through the shipped create playbook on the try-out cloud's ARM fake (tests/localcloud/azure.py:
retrieveBootDiagnosticsData answers a SAS link on the fake, whose blob holds the block cloud-init prints with the key
the guest's sshd serves; the console_key fault makes the log show a key that no sshd serves, as when something else
answers at the VM's address; console_silent: no key at all)."""

import json
import os

import pytest

from .test_azure_playbooks import AGENTS, Site, make_repo

SOURCE = 'the serial log of boot diagnostics (retrieveBootDiagnosticsData)'


@pytest.fixture(scope='module')
def site(localcloud, tmp_path_factory):
    directory = tmp_path_factory.mktemp('azure-host-keys')
    site = Site(localcloud, directory)
    site.repo = make_repo(directory)
    return site


@pytest.fixture()
def cloud(site):
    site.cloud.clear()
    yield site.cloud
    site.cloud.clear()


def create(site, name, **extra):
    return site.playbook('create.yml', fail=False, workspace=name, repo=site.repo, purpose='work on %s' % name,
                         agent='fake', ephemera_agents=AGENTS, **extra)


def events(site, name):
    with site.journal() as journal:
        return journal.events(name)


def published(site, name):
    return [e['detail'] for e in events(site, name) if e['action'] == 'host_keys_published']


def served_key(site, address):
    """The host key the guest's sshd at ``address`` serves, as the cloud wrote it when it started that sshd."""
    with open(site.cloud.info['azure']['ssh_known_hosts'], encoding='utf-8') as known:
        for line in known:
            name, key = line.split(' ', 1)
            if name in (address, '[%s]:%s' % (address, site.cloud.info['ssh_port'])):
                return ' '.join(key.split()[:2])
    raise AssertionError('no sshd known at %s' % address)


def guest_root(site, vm_id):
    return site.cloud.info['azure']['guest_prefix'].replace('{vmid}', vm_id)


def boot_reads(site, vm_id):
    return [r for r in site.cloud.azure('boot')['reads'] if (r['vm'] or '').lower() == vm_id.lower()]


def test_the_first_ssh_is_pinned_to_the_keys_of_the_serial_log(site, cloud):
    run = create(site, 'azpin')
    assert run.ok, run.explain()
    ws = site.workspace('azpin')
    assert ws['status'] == 'ready'
    # Read before the first connection, from boot diagnostics: the key the guest's sshd serves, and nothing else.
    [seen] = published(site, 'azpin')
    assert seen == {'source': SOURCE, 'host_keys': [served_key(site, ws['address'])]}
    actions = [e['action'] for e in events(site, 'azpin')]
    assert actions.index('host_keys_published') < actions.index('host_keys')
    assert 'host keys from %s' % SOURCE in run.output
    # The link was asked for with a short life, and the blob read with a plain GET: no Authorization header (no
    # bearer token of Resource Manager), the first MiB at most.
    boot = cloud.azure('boot')
    asked = [r for r in boot['requests'] if r['vm'].lower() == ws['resource_id'].lower()]
    assert asked and all(r['minutes'] == 5 for r in asked)
    reads = boot_reads(site, ws['resource_id'])
    assert reads and all(not r['authorization'] and r['range'] == 'bytes=0-1048575' for r in reads), reads
    assert any(r['status'] == 206 for r in reads)
    # The SAS link is a credential: it is in no journal event and not in what the playbook printed.
    assert '/bootdiagnostics/' not in json.dumps(events(site, 'azpin')) and 'sig=' not in json.dumps(
        events(site, 'azpin'))
    assert '/bootdiagnostics/' not in run.output and '/bootdiagnostics/' not in run.stdout
    # What the bootstrap leaves in a guest it reached (the other test looks for it in one it must not reach).
    assert os.path.isdir(os.path.join(guest_root(site, ws['resource_id']), 'var', 'lib', 'ephemera'))


def test_a_guest_whose_key_is_not_the_one_of_the_serial_log_is_refused_before_anything_is_sent(site, cloud):
    cloud.azure_console_key()
    run = create(site, 'azother')
    assert not run.ok
    ws = site.workspace('azother')
    vm_id = ws['resource_id']
    [seen] = published(site, 'azother')
    assert seen['host_keys'] and served_key(site, ws['address']) not in seen['host_keys']
    # The ssh step refused the key it was shown, and said what to do; nothing after it ran.
    assert ws['failure']['step'] == 'ssh', ws['failure']
    message = ws['failure']['message']
    assert 'not one of those it published in %s' % SOURCE in message and 'nothing was sent' in message
    assert 'destroy this workspace' in message and message in run.output
    assert not ws['facts'].get('host_key') and 'bootstrap' not in ws['progress']
    # The guest's sshd saw the connections end before any login: no key was offered to it, nothing was run.
    with open(os.path.join(os.path.dirname(guest_root(site, vm_id)), 'sshd.log'), encoding='utf-8',
              errors='replace') as log:
        said = log.read()
    assert 'preauth' in said and 'Accepted' not in said and 'publickey' not in said, said
    assert not os.path.exists(os.path.join(guest_root(site, vm_id), 'var', 'lib', 'ephemera'))
    assert '/bootdiagnostics/' not in run.output
    run = site.playbook('destroy.yml', fail=False, workspace='azother')
    assert run.ok, run.explain()
    assert site.resources('azother') == []


def test_a_vm_that_publishes_no_key_is_reached_on_first_use_with_a_warning(site, cloud):
    cloud.azure_console_key(silent=True)
    run = create(site, 'azsilent', ephemera_ssh_timeout=8)
    assert run.ok, run.explain()
    ws = site.workspace('azsilent')
    [seen] = published(site, 'azsilent')
    assert seen['host_keys'] == [] and 'trusts the key it is shown' in seen['reason']
    assert 'published no SSH host key in %s within 8 s' % SOURCE in run.output
    assert ws['status'] == 'ready'
    # The log was there (the VM booted), only without a key block.
    assert any(r['status'] == 206 for r in boot_reads(site, ws['resource_id']))
