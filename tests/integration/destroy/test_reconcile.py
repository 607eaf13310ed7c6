"""Reconcile against the try-out cluster: a lost and a restored journal, pending destructions, unfinished creates."""

import json
import os
import shutil

import pytest

from ansible_collections.ephemera.workspaces.plugins.module_utils.providers.proxmox.client import PveNotFound
from tests.ansible_run import run_ansible
from tests.integration.playbooks import INVENTORY, site_with_workspaces

NAMES = ['r-one', 'r-two', 'r-pending']


@pytest.fixture(scope='module')
def site(tmp_path_factory):
    with site_with_workspaces(str(tmp_path_factory.mktemp('reconcile')), NAMES, forks=3) as site:
        site.foreign = site.cluster.control.foreign_create(pool=site.cluster.info['pool'], start=True)['vmid']
        yield site


def reconcile(site, check=False, **extra_vars):
    result = site.playbook('reconcile.yml', check=check, **extra_vars)
    assert result.ok, result.output[-3000:]
    return result.task('Compare the journal with the cluster')


def running(site):
    return sorted(int(g['vmid']) for g in site.cluster.api().get('/cluster/resources', type='vm')
                  if g.get('status') == 'running')


def module(site, module_name, **args):
    """Run one module of the collection ad hoc, as a crashed playbook would have left off."""
    info = site.cluster.info
    env = site.env(PROXMOX_HOST=info['proxy_url'], PROXMOX_TOKEN_ID=info['token_id'],
                   PROXMOX_TOKEN_SECRET=info['token_secret'], PROXMOX_CA_FILE=info['ca_file'])
    return run_ansible(['ansible', 'localhost', '-i', INVENTORY, '-m', module_name, '-a', json.dumps(args)],
                       timeout=300, env=env)


def test_a_lost_journal_makes_every_workspace_an_orphan_and_nothing_is_deleted(site):
    before = running(site)
    vmids = {n: site.workspace(n)['vmid'] for n in NAMES}
    saved = site.journal_path + '.saved'
    shutil.copy(site.journal_path, saved)
    for suffix in ('', '-wal', '-shm'):
        if os.path.exists(site.journal_path + suffix):
            os.remove(site.journal_path + suffix)
    # A run that expects history refuses to start over with an empty journal ...
    refused = site.playbook('reconcile.yml')
    assert not refused.ok and 'No journal at %s, and this run expects one' % site.journal_path in refused.output
    assert not os.path.exists(site.journal_path)
    # ... unless told to: then the lost journal's workspaces are orphans (the secret beside it still verifies them).
    lost = reconcile(site, ephemera_new_journal=True)
    orphans = {f['workspace']: f['vmid'] for f in lost['findings'] if f['kind'] == 'orphan'}
    assert orphans == vmids
    assert [f['vmid'] for f in lost['findings'] if f['kind'] == 'foreign'] == [site.foreign]
    assert 'confirm_orphan=true' in '\n'.join(lost['report'])
    assert lost['changed'] is False and running(site) == before

    # Deleting an orphan takes an explicit confirmation, and still a verifying marker.
    unconfirmed = site.playbook('destroy.yml', orphan_vmid=vmids['r-two'])
    assert not unconfirmed.ok and 'needs confirm_orphan=true' in unconfirmed.output
    foreign = site.playbook('destroy.yml', orphan_vmid=site.foreign, confirm_orphan=True)
    assert not foreign.ok and 'it is not deleted' in foreign.output
    wrong = site.playbook('destroy.yml', orphan_vmid=99999, confirm_orphan=True)
    assert wrong.ok and wrong.changed == 0 and 'CT 99999 does not exist' in wrong.output
    assert running(site) == before

    os.remove(site.journal_path)
    shutil.move(saved, site.journal_path)
    restored = reconcile(site)
    assert {f['workspace']: f['kind'] for f in restored['findings'] if f['workspace']} == {n: 'ok' for n in NAMES}
    assert running(site) == before


def test_a_decided_destruction_is_finished_by_reconcile(site):
    ws = site.workspace('r-pending')
    marked = module(site, 'ephemera.workspaces.workspace_destroy', name='r-pending', step='mark')
    assert marked.ok and marked.results()[0][1]['changed'], marked.explain()
    checked = reconcile(site, check=True)
    assert [f['kind'] for f in checked['findings'] if f['workspace'] == 'r-pending'] == ['destroy_pending']
    assert ws['vmid'] in running(site)
    done = reconcile(site)
    assert [f['kind'] for f in done['findings'] if f['workspace'] == 'r-pending'] == ['destroyed']
    with pytest.raises(PveNotFound):
        site.cluster.api().get('/nodes/%s/lxc/%d/config' % (ws['node'], ws['vmid']))
    assert site.workspace('r-pending')['status'] == 'destroyed'
    again = reconcile(site)
    assert again['changed'] is False


def test_an_interrupted_create_is_reported_and_resumed_adopting_its_clone(site):
    # What a controller that died right after the clone request leaves: request, candidate, clone dispatched.
    info = site.cluster.info
    args = dict(name='r-crashed', step='request', template=info['template_vmid'], repo=site.repo,
                purpose='resume-me', agent='fake', agents={'fake': ['sh', '-c', 'sleep 120']},
                guest_root=info['guest_root'], ssh_user=info['ssh_user'], agent_user=info['ssh_user'],
                agent_user_is_ssh_user=True,
                ssh_private_key=info['ssh_private_key'])
    for step in ('request', 'vmid', 'clone'):
        args['step'] = step
        done = module(site, 'ephemera.workspaces.workspace_create', **args)
        assert done.ok, done.explain()
        args = dict(name='r-crashed', step=step)
    ws = site.workspace('r-crashed')
    assert ws['vmid'] is None and ws['candidate_vmid']
    seen = reconcile(site, check=True)
    kinds = sorted(f['kind'] for f in seen['findings'] if f['workspace'] == 'r-crashed')
    assert kinds == ['adoptable', 'unfinished_create']
    assert seen['resume_create'] == ['r-crashed']
    result = site.playbook('reconcile.yml')
    assert result.ok, result.output[-3000:]
    ws = site.workspace('r-crashed')
    assert ws['status'] == 'ready' and ws['vmid'] == ws['candidate_vmid']
    names = [g.get('name') for g in site.cluster.api().get('/cluster/resources', type='vm')]
    assert names.count('agent-r-crashed') == 1
