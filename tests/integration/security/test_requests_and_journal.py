"""The untrusted parties of docs/internals/security.md against the try-out cluster, through the shipped playbooks: another
Proxmox user who writes a crafted description onto a tagged container or restores a destroyed workspace's
container at its VMID, a request with a token in its repository URL or a purpose that reads as an option, and a
journal that others may write. One cluster and two workspaces for the whole file."""

import os

import pytest

from ansible_collections.ephemera.workspaces.plugins.module_utils.core import ownership
from tests.integration.playbooks import site_with_workspaces

NAMES = ['sec-live', 'sec-gone']
TOKEN = 'glpat-Q7rT9vX2kM4nB6pL8sW1'


@pytest.fixture(scope='module')
def site(tmp_path_factory):
    with site_with_workspaces(str(tmp_path_factory.mktemp('security')), NAMES, forks=2) as site:
        yield site


def reconcile(site):
    result = site.playbook('reconcile.yml')
    assert result.ok, result.output[-3000:]
    return result.task('Compare the journal with the cluster')


def containers(site):
    return {int(g['vmid']): g for g in site.cluster.api().get('/cluster/resources', type='vm')}


def config(site, vmid):
    guest = containers(site)[vmid]
    return site.cluster.api().get('/nodes/%s/lxc/%d/config' % (guest['node'], vmid))


def test_a_crafted_description_on_a_tagged_container_does_not_stop_reconcile(site):
    ours = ownership.controller_id(site.secret())
    # A version 1 marker (what controllers before nonces wrote) whose token is not ASCII.
    crafted = '%s v1 workspace=sec-live controller=%s vmid=%d token=%s' % (ownership.PREFIX, ours, 4242, '\u00e9' * 64)
    vmid = site.cluster.control.foreign_create(pool=site.cluster.info['pool'], description=crafted)['vmid']
    found = reconcile(site)
    kinds = {f['workspace'] or f['vmid']: f['kind'] for f in found['findings']}
    assert kinds['sec-live'] == 'ok' and kinds['sec-gone'] == 'ok'
    assert kinds[vmid] == 'foreign'
    assert vmid in containers(site)


def test_a_destroyed_workspaces_container_restored_at_its_vmid_is_reported_never_deleted(site):
    gone = site.workspace('sec-gone')
    description = config(site, gone['vmid'])['description']
    destroyed = site.playbook('destroy.yml', workspace='sec-gone')
    assert destroyed.ok, destroyed.output[-3000:]
    assert site.workspace('sec-gone')['status'] == 'destroyed' and gone['vmid'] not in containers(site)
    # Another user restores the destroyed workspace's container (its backup carries the genuine marker).
    site.cluster.control.foreign_create(vmid=gone['vmid'], pool=site.cluster.info['pool'], description=description,
                                        start=True)
    found = reconcile(site)
    [finding] = [f for f in found['findings'] if f['vmid'] == gone['vmid']]
    assert (finding['kind'], finding['workspace']) == ('destroyed_present', 'sec-gone')
    assert found['changed'] is False
    assert containers(site)[gone['vmid']]['status'] == 'running'
    assert config(site, gone['vmid'])['description'] == description


@pytest.mark.parametrize('changes, said', [
    ({'repo': 'https://%s@127.0.0.1:9/team/app.git' % TOKEN}, 'git_token'),
    ({'purpose': '--dangerously-skip-permissions and push'}, 'starts with "-"'),
    ({'ephemera_checkout_path': '/repo'}, 'must not be "/" or a system directory'),
], ids=['token-in-url', 'purpose-option', 'checkout-in-root'])
def test_a_hostile_request_is_refused_before_anything_is_recorded_or_cloned(site, changes, said):
    before = sorted(containers(site))
    values = site.create_vars('sec-hostile', site.repo)
    values.update(changes)
    run = site.playbook('create.yml', **values)
    assert not run.ok, run.output[-3000:]
    assert site.workspace('sec-hostile') is None and sorted(containers(site)) == before
    # Not in the journal (its records, events, queue), and not in what the failure says; Ansible itself echoes a
    # failed task's arguments (the request as given) in its result.
    for suffix in ('', '-wal'):
        if os.path.exists(site.journal_path + suffix):
            with open(site.journal_path + suffix, 'rb') as journal:
                assert TOKEN.encode() not in journal.read()
    assert any(said in (message or '') for message in run.failed_messages()), run.failed_messages()
    assert not any(TOKEN in (message or '') for message in run.failed_messages())


def test_a_journal_others_may_write_is_refused_by_every_playbook(site):
    os.chmod(site.journal_path, 0o666)
    try:
        for playbook in ('reconcile.yml', 'status.yml'):
            run = site.playbook(playbook)
            assert not run.ok, playbook
            assert 'The journal %s is not safe to trust: others may write it (mode 0666)' % site.journal_path \
                in run.output, run.output[-3000:]
    finally:
        os.chmod(site.journal_path, 0o600)
    assert reconcile(site)['counts']['ok'] == 1
