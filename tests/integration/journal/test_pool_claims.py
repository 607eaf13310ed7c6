"""Two controllers on one PostgreSQL journal claim from the same warm pool at once, through the shipped pool_fill and
create playbooks against the try-out cluster: each member goes to exactly one workspace. Two fills of one pool at
once never fill it beyond its size.

Controller A and controller B are ansible-playbook runs whose run identities name different hosts
(EPHEMERA_CONTROLLER_HOST): they see each other only through the journal (a real PostgreSQL server). The claim
check's look at the oldest member's power state is held back by the proxy for both runs, so both have read that
member warm and checked it before either writes its claim: the compare-and-set on the member's generation decides.
With one warm member, one create takes it and the other goes cold (a clone of its own); with two, each takes a
different one. Either way every container has one owner, and none of our containers is unaccounted for.
"""

import pytest

from ansible_collections.ephemera.workspaces.plugins.module_utils.core import pools
from tests.faults import invariants
from tests.faults.pgsite import PgFaultSite
from tests.pgserver import PgServer

LEASE = 12.0
# How long the claim check's power look at the contested member is held back, for both runs: longer than the two
# runs' start can differ by, so that both are in their claim check at once.
HELD = 8.0


@pytest.fixture(scope='module')
def site(tmp_path_factory):
    with PgServer(durable=False) as pg:
        site = PgFaultSite.start(str(tmp_path_factory.mktemp('pool-claims')), url=pg.url, lease=LEASE)
        try:
            yield site
        finally:
            site.stop()


def declared(site, name, size):
    return {'name': name, 'location': site.info['template_node'], 'template': site.info['template_vmid'],
            'size': size, 'lease': 3600}


def on(op, host):
    op['host'] = host
    return op


def claim_op(site, name, pool, host):
    op = site.create_op(name)
    op['pools'] = [pool]
    return on(op, host)


def claim_at_once(site, pool, names):
    """Fill ``pool`` on controller A; then the creates ``names`` at once, on A and on B, with the claim check's
    power look at the oldest warm member held back for both: (the outcomes, the members before the claims, the
    contested member's container, the proxy's hits on the held look)."""
    filled = site.run([on(site.fill_op([pool]), 'controller-a')])
    assert filled.ok, filled.explain()
    with site.journal() as journal:
        warm = pools.members(journal, pool['name'], state='warm')
        contested = journal.get_workspace(warm[0]['member'])
    assert len(warm) == pool['size']
    site.clear_faults()
    rule = site.cluster.proxy_add('delay', 'GET', '/nodes/*/lxc/%d/status/current' % contested['resource_id'],
                                  seconds=HELD, times=2)
    site.log_requests()
    handles = [site.start_run([claim_op(site, name, pool, host)])
               for name, host in zip(names, ('controller-a', 'controller-b'))]
    outcomes = [site.finish(handle) for handle in handles]
    hits = [r['hits'] for r in site.cluster.proxy_rules() if r['id'] == rule['id']][0]
    return outcomes, warm, contested['resource_id'], hits


def judge(site, names, foreign_before):
    """Every container has one owner, none is unaccounted for, the pool's invariants hold: (the records, the
    host names of the clones sent)."""
    requests, clones = site.requests(), site.clones()
    site.cluster.clear()
    with site.journal() as journal:
        records = {name: journal.get_workspace(name) for name in names}
        assert pools.violations(journal) == []
    found, leaks, view = invariants.check(site, names, foreign_before, requests, site.secret(), clones, site.since)
    assert found == {key: [] for key in invariants.NAMES}, found
    assert leaks == {}
    for name in names:
        assert records[name]['status'] == 'ready'
        assert [vmid for vmid, owner in view.ours.items() if owner == name] == [records[name]['resource_id']]
    assert len(set(records[name]['resource_id'] for name in names)) == len(names)
    return records, clones


def test_two_controllers_claim_the_one_warm_member_at_once_one_takes_it_the_other_goes_cold(site):
    foreign_before = invariants.ClusterView(site, site.secret()).foreign
    pool = declared(site, 'one', 1)
    outcomes, warm, vmid, hits = claim_at_once(site, pool, ['one-a', 'one-b'])
    assert all(outcome.ok for outcome in outcomes), [outcome.explain() for outcome in outcomes]
    # Both runs were in the claim check of the one member at the same time.
    assert len(hits) == 2 and abs(hits[0]['time'] - hits[1]['time']) < HELD, hits
    records, clones = judge(site, ['one-a', 'one-b'], foreign_before)
    taken = {name: records[name]['facts'].get('from_pool') for name in records}
    assert sorted(taken.values(), key=str) == [None, 'one'], taken
    holder = [name for name, pool_name in taken.items() if pool_name][0]
    other = [name for name in taken if name != holder][0]
    assert records[holder]['resource_id'] == vmid and records[holder]['facts']['pool_member'] == warm[0]['member']
    with site.journal() as journal:
        now = pools.members(journal, 'one')
        member = journal.get_workspace(warm[0]['member'])
    assert [(m['member'], m['state'], m['workspace']) for m in now] == [(warm[0]['member'], 'claimed', holder)]
    assert member['status'] == 'destroyed' and member['facts']['claimed_by'] == holder
    assert records[other]['facts']['cold'].startswith('pool one had no warm member')
    # The cold one cloned a container of its own; the holder cloned nothing.
    assert clones.count('agent-' + holder) == 0 and clones.count('agent-' + other) >= 1


def test_two_controllers_claim_from_a_pool_of_two_at_once_each_takes_a_different_member(site):
    foreign_before = invariants.ClusterView(site, site.secret()).foreign
    pool = declared(site, 'two', 2)
    outcomes, warm, vmid, hits = claim_at_once(site, pool, ['two-a', 'two-b'])
    assert all(outcome.ok for outcome in outcomes), [outcome.explain() for outcome in outcomes]
    assert len(hits) == 2 and abs(hits[0]['time'] - hits[1]['time']) < HELD, hits
    records, clones = judge(site, ['two-a', 'two-b'], foreign_before)
    assert {records[name]['facts'].get('from_pool') for name in records} == {'two'}
    assert sorted(records[name]['facts']['pool_member'] for name in records) == sorted(m['member'] for m in warm)
    with site.journal() as journal:
        now = {m['member']: (m['state'], m['workspace']) for m in pools.members(journal, 'two')}
    assert now == {records[name]['facts']['pool_member']: ('claimed', name) for name in records}
    assert vmid in [records[name]['resource_id'] for name in records]
    assert [c for c in clones if c in ('agent-two-a', 'agent-two-b')] == []


def test_two_fills_at_once_on_two_controllers_never_fill_the_pool_beyond_its_size(site):
    foreign_before = invariants.ClusterView(site, site.secret()).foreign
    pool = declared(site, 'both', 2)
    site.clear_faults()
    # Every clone answer held back: each fill is still making its first member when the other counts the pool.
    site.cluster.proxy_add('delay', 'POST', '/nodes/*/lxc/*/clone', seconds=3, times=None)
    site.log_requests()
    handles = [site.start_run([on(site.fill_op([pool]), host)]) for host in ('controller-a', 'controller-b')]
    outcomes = [site.finish(handle) for handle in handles]
    assert all(outcome.ok for outcome in outcomes), [outcome.explain() for outcome in outcomes]
    with site.journal() as journal:
        members = pools.members(journal, 'both')
        assert pools.violations(journal) == []
    assert [m['state'] for m in members] == ['warm', 'warm'], members
    requests, clones = site.requests(), site.clones()
    site.cluster.clear()
    names = [m['member'] for m in members]
    found, leaks, view = invariants.check(site, names, foreign_before, requests, site.secret(), clones, site.since)
    assert found == {key: [] for key in invariants.NAMES}, found
    assert leaks == {}
    # The pool's containers: its two warm members', and no other.
    assert sorted(owner for owner in view.ours.values() if owner.startswith('both-')) == sorted(names)
