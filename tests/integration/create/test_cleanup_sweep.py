"""The cleanup sweep by labels on the try-out cluster: two real workspaces (one whose short lease runs out at once),
two foreign containers beside them (one with a copy of our expired labels), then the journal.

With the journal, the expired workspace is reported as known to it and left to its queue. With the journal lost (its
secret kept), the dry run lists exactly the expired workspace as the one to delete and changes nothing; -e apply=true
deletes exactly it.
"""

import os
import time

import pytest

from ansible_collections.ephemera.workspaces.plugins.module_utils.core import lease as leasing
from ansible_collections.ephemera.workspaces.plugins.module_utils.providers.proxmox.provider import (
    lease_labels_of,
    with_lease,
)

from .createrun import Controller, request_vars

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
CLEANUP = os.path.join(ROOT, 'playbooks', 'cleanup.yml')
SWEEP = 'Sweep the pool by labels'


@pytest.fixture(scope='module')
def site(cluster, repo, tmp_path_factory):
    ctl = Controller(cluster, tmp_path_factory.mktemp('cleanup'))
    try:
        for name, lease in (('sweep-live', {}), ('sweep-short', {'ttl': 600, 'idle_timeout': 2})):
            run = ctl.create(request_vars(repo.url, name, **lease))
            assert run.ok, run.explain()
        ctl.vmids = {name: ctl.workspace(name)['vmid'] for name in ('sweep-live', 'sweep-short')}
        short = lease_labels_of(ctl.config(ctl.vmids['sweep-short'])['description'])
        pool = cluster.info['pool']
        ctl.vmids['foreign'] = cluster.foreign_create(pool=pool, hostname='sweep-foreign', start=True)['vmid']
        # Someone else's container with a copy of our expired labels, but no marker of ours.
        ctl.vmids['copied'] = cluster.foreign_create(pool=pool, hostname='sweep-copied',
                                                     description=with_lease('their notes', short))['vmid']
        # The sweep deletes only after expires_at (now > expires_at): wait until the short lease's label has passed.
        time.sleep(max(0.0, float(short['expires_at']) - time.time()) + 1.1)
        yield ctl
    finally:
        ctl.stop()


def sweep(site, **extra):
    run = site.create(extra, playbook=CLEANUP)
    assert run.ok, run.explain()
    result = run.task(SWEEP)
    entries = {e['id']: e for e in result['entries']}
    return run, result, {key: entries.get(vmid) for key, vmid in site.vmids.items()}


def test_with_the_journal_the_expired_workspace_is_reported_as_known_and_not_deleted(site):
    state = site.cluster_state()
    for extra in ({}, {'apply': True}):
        run, result, mine = sweep(site, **extra)
        short = mine['sweep-short']
        assert (short['decision'], short['action'], short['known']) == ('delete', 'reported', True), short
        assert 'known to the journal: released through its queue (ephemera.workspaces.destroy -e ' \
            'workspace=sweep-short, or the expiry sweep)' in short['reason']
        assert (mine['sweep-live']['action'], mine['sweep-live']['known']) == ('skipped', True)
        assert mine['foreign']['action'] == 'skipped' and mine['copied']['action'] == 'reported'
        assert result['counts']['deleted'] == 0 and not result['changed'] and run.stats()['changed'] == 0
    assert site.cluster_state() == state
    assert site.workspace('sweep-short')['status'] == 'ready'


def test_with_the_journal_lost_the_dry_run_lists_the_expired_one_and_apply_deletes_exactly_it(site):
    for suffix in ('', '-wal', '-shm'):
        if os.path.exists(site.journal_path + suffix):
            os.unlink(site.journal_path + suffix)
    assert os.path.exists(site.journal_path + '.secret')
    state = site.cluster_state()

    run, result, mine = sweep(site)
    short = mine['sweep-short']
    assert (short['decision'], short['action'], short['verdict'], short['known']) == (
        'delete', 'would delete', 'verified', False), short
    assert short['name'] == 'sweep-short' and short['labels']['state'] == 'ready'
    assert 'has passed' in short['reason']
    live = mine['sweep-live']
    assert (live['decision'], live['action'], live['verdict']) == ('skip', 'skipped', 'verified'), live
    assert 'has not passed' in live['reason']
    foreign, copied = mine['foreign'], mine['copied']
    assert (foreign['action'], foreign['verdict'], foreign['labels']) == ('skipped', 'absent', {})
    assert (copied['decision'], copied['action'], copied['verdict']) == ('report', 'reported', 'absent')
    # Of everything in the pool (other tests' workspaces are foreign to this controller), only ours would go.
    assert [e['id'] for e in result['entries'] if e['action'] == 'would delete'] == [site.vmids['sweep-short']]
    first = result['report'][0]
    # The playbook sweeps the fleet; with no journal that is the configured provider alone, whose line says so.
    assert first.startswith('cleanup of the fleet (dry run): 1 to delete, 0 deleted,')
    assert result['report'][1].startswith('[proxmox] cleanup (dry run): 1 to delete, 0 deleted,')
    assert 'no journal at %s' % site.journal_path in result['report'][1]
    assert site.cluster_state() == state and not os.path.exists(site.journal_path)
    assert run.stats()['changed'] == 0

    run, result, mine = sweep(site, apply=True)
    assert mine['sweep-short']['action'] == 'deleted' and run.stats()['changed'] == 1
    assert [e['id'] for e in result['entries'] if e['action'] == 'deleted'] == [site.vmids['sweep-short']]
    assert result['report'][0].startswith('cleanup of the fleet (applied): 1 to delete, 1 deleted,')
    assert result['report'][1].startswith('[proxmox] cleanup (applied): 1 to delete, 1 deleted,')
    after = site.cluster_state()
    assert site.vmids['sweep-short'] not in after
    assert after == {vmid: seen for vmid, seen in state.items() if vmid != site.vmids['sweep-short']}
    assert not os.path.exists(site.journal_path)
    assert leasing.parse_time(live['labels']['expires_at']) > time.time()
