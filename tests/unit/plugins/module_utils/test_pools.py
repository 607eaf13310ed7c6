"""Warm pool membership in the journal: declarations, the one-way states, the claim by compare-and-set (two
controllers on one journal never get the same member), the claim check, the drain on a template switch and the
fence of a lost queue claim, on a SQLite file and a real PostgreSQL server alike (the ``store`` fixture)."""

import threading

import pytest

from ansible_collections.ephemera.workspaces.plugins.module_utils.core import pools
from ansible_collections.ephemera.workspaces.plugins.module_utils.core.errors import ClaimLostError
from ansible_collections.ephemera.workspaces.plugins.module_utils.core.queue import Queue

POOL = {'name': 'py', 'location': 'pve1', 'template': 'debian-agent', 'size': 3}


@pytest.fixture
def journal(store):
    with store.open() as j:
        yield j


def fill(journal, pool, count, version=1):
    made = []
    for n in range(count):
        record = pools.begin_member(journal, pool, 'pool-%s-%d-v%d' % (pool['name'], n, version), version=version)
        made.append(pools.mark_warm(journal, record))
    return made


def test_a_declaration_is_completed_with_its_defaults():
    pool = pools.validate_pool(POOL)
    assert (pool['provider'], pool['maximum'], pool['lease'], pool['repo']) == ('proxmox', 3, 5400, None)
    assert pool['refill'] is False
    assert pools.validate_pool(dict(POOL, refill=True))['refill'] is True


@pytest.mark.parametrize('value', ['yes', 'true', 1, 0, None, [True]])
def test_a_refill_that_is_not_true_or_false_is_refused_saying_what_to_write(value):
    with pytest.raises(pools.PoolError, match=r'Pool py: refill \(.*\) must be true or false: write refill: true '
                                              r'for a create that takes a member to fill the pool again, '
                                              r'refill: false \(the default\)'):
        pools.validate_pool(dict(POOL, refill=value))


@pytest.mark.parametrize('change, message', [
    ({'provider': 'AWS!'}, 'not a provider name'),
    ({'name': 'Py_1'}, 'Invalid pool name'),
    ({'size': -1}, 'size must be'),
    ({'maximum': 2}, 'at least its size'),
    ({'lease': 10}, 'lease'),
    ({'template': ''}, 'has no template'),
    ({'refill': 'no'}, 'refill .* must be true or false'),
])
def test_a_declaration_that_cannot_be_built_is_refused(change, message):
    with pytest.raises(pools.PoolError, match=message):
        pools.validate_pool(dict(POOL, **change))


def test_a_declaration_without_a_provider_is_the_runs():
    assert pools.validate_pool(POOL, provider='aws')['provider'] == 'aws'
    assert pools.validate_pool(dict(POOL, provider='hetzner'), provider='aws')['provider'] == 'hetzner'


def test_the_provider_says_whether_it_keeps_pools_and_one_that_does_not_is_refused_by_name(monkeypatch):
    from ansible_collections.ephemera.workspaces.plugins.module_utils.flows.create import declared_pools
    from ansible_collections.ephemera.workspaces.plugins.module_utils.providers import registry
    assert [p['provider'] for p in declared_pools([POOL], 'aws')] == ['aws']
    assert [p['provider'] for p in declared_pools([dict(POOL, provider='proxmox')], 'aws')] == ['proxmox']
    with pytest.raises(pools.PoolError, match="Pool py: Unknown provider 'nowhere'"):
        declared_pools([dict(POOL, provider='nowhere')], 'aws')
    # Every provider keeps them now, Azure (whose claim re-tags a set of four resources) among them.
    assert [p['provider'] for p in declared_pools([dict(POOL, provider='azure')], 'proxmox')] == ['azure']
    # A provider without remark() (its pool_refusal set) is refused with its name and what to do.
    monkeypatch.setattr(registry.provider_class('aws'), 'pool_refusal', 'its re-signing is not built yet')
    with pytest.raises(pools.PoolError, match=r'declared for provider aws, which keeps no warm pools yet: its '
                                              r're-signing is not built yet\. Remove the pool'):
        declared_pools([POOL], 'aws')


def test_a_request_matches_a_pool_of_its_place_template_and_repository():
    bare = pools.validate_pool(POOL)
    repo = pools.validate_pool(dict(POOL, name='py-app', repo='https://git.example/app.git'))
    request = {'provider': 'proxmox', 'location': 'pve1', 'template': 'debian-agent'}
    assert pools.matching_pool([repo, bare], request) is bare
    assert pools.matching_pool([bare, repo], dict(request, repo='https://git.example/app.git')) is repo
    # A pool without a repository has nothing fetched: it serves a request of any repository, after a pool of its own.
    assert pools.matching_pool([bare, repo], dict(request, repo='https://git.example/other.git')) is bare
    assert pools.matching_pool([repo], dict(request, repo='https://git.example/other.git')) is None
    numbered = pools.validate_pool(dict(POOL, template='9000'))
    assert pools.matching_pool([numbered], dict(request, template=9000)) is numbered
    assert pools.matching_pool([bare], dict(request, location='pve2')) is None
    assert pools.matching_pool([bare], dict(request, provider='aws')) is None


def test_a_member_goes_filling_warm_claimed_and_a_rerun_gets_the_same_member(journal):
    pool = pools.validate_pool(POOL)
    assert pools.shortfall(journal, pool) == 3
    first = pools.begin_member(journal, pool, 'pool-py-0', version=1)
    assert first['state'] == 'filling'
    assert pools.begin_member(journal, pool, 'pool-py-0', version=1)['generation'] == first['generation']
    assert pools.shortfall(journal, pool) == 2
    warm = pools.mark_warm(journal, first)
    assert warm['state'] == 'warm' and pools.mark_warm(journal, first)['state'] == 'warm'
    taken = pools.claim_member(journal, 'py', 'ws1')
    assert (taken['member'], taken['state'], taken['workspace']) == ('pool-py-0', 'claimed', 'ws1')
    assert pools.claim_member(journal, 'py', 'ws1')['generation'] == taken['generation']
    assert pools.claim_member(journal, 'py', 'ws2') is None
    assert pools.release(journal, taken, 'no') is None
    assert pools.state_counts(journal, 'py') == {'filling': 0, 'warm': 0, 'claimed': 1, 'released': 0}
    assert pools.violations(journal) == []


def test_a_member_failing_its_claim_check_is_released_never_given_out(journal):
    pool = pools.validate_pool(POOL)
    fill(journal, pool, 2)
    taken = pools.claim_member(journal, 'py', 'ws1', check=lambda m: m['member'] != 'pool-py-0-v1' or 'it is stopped')
    assert taken['member'] == 'pool-py-1-v1'
    gone = pools.member(journal, 'py', 'pool-py-0-v1')
    assert (gone['state'], gone['reason']) == ('released', 'failed its claim check: it is stopped')
    assert pools.claim_member(journal, 'py', 'ws2') is None
    pools.forget(journal, gone)
    assert pools.member(journal, 'py', 'pool-py-0-v1') is None
    with pytest.raises(pools.PoolError, match='only a released member'):
        pools.forget(journal, taken)


def test_two_controllers_claiming_at_once_give_each_member_to_one_workspace(store):
    with store.open() as journal:
        fill(journal, pools.validate_pool(dict(POOL, size=5)), 5)
    got, errors = {}, []

    def claimer(side):
        try:
            with store.open() as journal:
                for n in range(4):
                    taken = pools.claim_member(journal, 'py', 'ws-%s-%d' % (side, n))
                    got['ws-%s-%d' % (side, n)] = taken and taken['member']
        except Exception as exc:  # noqa: BLE001 - reported by the test below
            errors.append(exc)

    threads = [threading.Thread(target=claimer, args=(side,)) for side in 'ab']
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    given = [m for m in got.values() if m]
    assert len(given) == 5 and len(set(given)) == 5
    with store.open() as journal:
        assert pools.violations(journal) == []
        claimed = {m['member']: m['workspace'] for m in pools.members(journal, 'py', state='claimed')}
    assert claimed == {m: ws for ws, m in got.items() if m}


def test_a_template_switch_drains_the_old_versions_members(journal):
    pool = pools.validate_pool(dict(POOL, size=4))
    old = fill(journal, pool, 3, version=1)
    pools.begin_member(journal, pool, 'pool-py-filling-v1', version=1)
    pools.claim_member(journal, 'py', 'ws1')
    new = fill(journal, pool, 1, version=2)
    released = pools.drain(journal, 'debian-agent', 2)
    assert sorted(m['member'] for m in released) == ['pool-py-1-v1', 'pool-py-2-v1', 'pool-py-filling-v1']
    assert pools.member(journal, 'py', old[0]['member'])['state'] == 'claimed'
    assert pools.member(journal, 'py', new[0]['member'])['state'] == 'warm'
    assert pools.claim_member(journal, 'py', 'ws2')['member'] == new[0]['member']
    assert pools.claim_member(journal, 'py', 'ws3') is None
    assert pools.drain(journal, 'debian-agent', 2) == []


def test_a_claim_after_a_switch_whose_drain_never_ran_gives_out_no_old_member(journal):
    pool = pools.validate_pool(POOL)
    old, = fill(journal, pool, 1, version=1)
    new, = fill(journal, pool, 1, version=2)
    assert pools.claim_member(journal, 'py', 'ws1', version=2)['member'] == new['member']
    stale = pools.member(journal, 'py', old['member'])
    assert (stale['state'], stale['reason']) == ('released', 'made from template version 1, the template is at 2')


def test_the_maximum_bounds_a_fill(journal):
    pool = pools.validate_pool(dict(POOL, size=2, maximum=2))
    fill(journal, pool, 2)
    assert pools.shortfall(journal, pool) == 0
    pools.claim_member(journal, 'py', 'ws1')
    assert pools.shortfall(journal, pool) == 1


def test_pool_writes_are_fenced_by_the_queue_claim(journal):
    pool = pools.validate_pool(POOL)
    queue = Queue(journal)
    claim = queue.poll(queue.enqueue('create', 'ws1').request_id).claim
    record = pools.mark_warm(journal, pools.begin_member(journal, pool, 'pool-py-0', claim=claim), claim=claim)
    queue.cancel(claim['entry_id'], reason='operator stop', force=True)
    with pytest.raises(ClaimLostError):
        pools.claim_member(journal, 'py', 'ws1', claim=claim)
    with pytest.raises(ClaimLostError):
        pools.release(journal, record, 'stop', claim=claim)
    assert pools.member(journal, 'py', 'pool-py-0')['state'] == 'warm'


def test_violations_name_a_member_held_twice_or_by_nobody(journal):
    pool = pools.validate_pool(POOL)
    a, b = fill(journal, pool, 2)
    for record in (a, b):
        value = {k: v for k, v in record.items() if k not in ('key', 'generation')}
        journal.put_provider_state(record['key'], dict(value, state='claimed', workspace='ws1'),
                                   generation=record['generation'])
    assert pools.violations(journal) == ['workspace ws1 holds 2 members: pool/py/pool-py-0-v1, pool/py/pool-py-1-v1']


def test_a_rerun_gets_the_member_of_its_own_life_not_one_an_earlier_life_of_the_name_claimed(journal):
    pool = pools.validate_pool(POOL)
    fill(journal, pool, 2)
    first = pools.claim_member(journal, 'py', 'ws1', life=100.0)
    assert pools.claim_member(journal, 'py', 'ws1', life=100.0)['member'] == first['member']
    # ws1 destroyed and requested again: its new life takes another member, never the old life's container.
    second = pools.claim_member(journal, 'py', 'ws1', life=200.0)
    assert second['member'] != first['member'] and second['life'] == 200.0


def test_a_fill_fills_the_pools_of_its_own_provider_and_says_it_skips_the_others():
    from ansible_collections.ephemera.workspaces.plugins.module_utils.flows.pool import PoolFill
    declared = [dict(POOL, name='ec2', provider='aws', location='eu-west-1', template='ami-0abc'), POOL]
    fill = PoolFill(None, None, {'pools': declared, 'provider': 'proxmox'}, None, check_mode=True)
    fill.run()
    assert [(e['pool'], e['action']) for e in fill.entries] == [('ec2', 'skipped'), ('py', 'would_fill')]
    assert 'declared for provider aws, and this fill runs with provider proxmox' in fill.entries[0]['detail']
    fill = PoolFill(None, None, {'pools': [dict(POOL, name='ec2')], 'provider': 'aws'}, None, check_mode=True)
    fill.run()
    assert [(e['pool'], e['action']) for e in fill.entries] == [('ec2', 'would_fill')]


def test_a_refill_fills_only_its_pool_and_only_one_declared_with_refill():
    from ansible_collections.ephemera.workspaces.plugins.module_utils.flows.pool import PoolFill
    declared = [dict(POOL, refill=True), dict(POOL, name='other', refill=True), dict(POOL, name='plain')]
    for name, action, detail in (('py', 'would_fill', 'would start 1 member(s) after the create takes one'),
                                 ('plain', 'skipped', 'declared without refill: true; the next pool_fill fills it'),
                                 ('gone', 'skipped', 'not declared in ephemera_pools: nothing to refill')):
        refill = PoolFill(None, None, {'pools': declared, 'provider': 'proxmox', 'refill': name}, None,
                          check_mode=True)
        refill.run()
        assert [(e['pool'], e['action'], e['detail']) for e in refill.entries] == [(name, action, detail)]
    # A bad refill value in any declaration refuses the refill like a fill, before anything is done.
    with pytest.raises(pools.PoolError, match='refill'):
        PoolFill(None, None, {'pools': [dict(POOL, refill='on')], 'provider': 'proxmox', 'refill': 'py'}, None,
                 check_mode=True).run()


def test_a_refill_in_check_mode_counts_the_member_the_create_would_take(journal):
    from ansible_collections.ephemera.workspaces.plugins.module_utils.flows.pool import PoolFill
    pool = dict(POOL, size=2, refill=True)
    params = {'pools': [pool], 'provider': 'proxmox', 'refill': 'py'}
    refill = PoolFill(journal, None, params, None, check_mode=True)
    refill.run()
    assert [(e['action'], e['detail']) for e in refill.entries] == [
        ('skipped', 'no warm member: the create would go on cold and not refill the pool')]
    fill(journal, pools.validate_pool(pool), 2)
    refill = PoolFill(journal, None, params, None, check_mode=True)
    refill.run()
    assert [(e['action'], e['detail']) for e in refill.entries] == [
        ('would_fill', 'would start 1 member(s) after the create takes one')]
    assert pools.state_counts(journal, 'py')['warm'] == 2


def test_two_fills_that_counted_the_same_shortfall_take_the_pools_places_once(store):
    pool = pools.validate_pool(dict(POOL, size=2))
    with store.open() as journal:
        # Both fills counted 2 missing before either recorded a member: 4 members recorded filling.
        begun = [pools.begin_member(journal, pool, 'py-%s%d' % (side, n)) for n in range(2) for side in 'ab']
    got, errors = {}, []

    def taker(records):
        try:
            with store.open() as journal:
                for record in records:
                    got[record['member']] = pools.take_slot(journal, pool, record)
        except Exception as exc:  # noqa: BLE001 - reported by the test below
            errors.append(exc)

    threads = [threading.Thread(target=taker, args=(begun[side::2],)) for side in (0, 1)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    placed = sorted(index for index in got.values() if index is not None)
    assert placed == [0, 1], got
    with store.open() as journal:
        winner = [m for m, index in got.items() if index == 0][0]
        record = pools.member(journal, 'py', winner)
        # A member that holds its place gets it again (a fill that goes on with it after a kill).
        assert pools.take_slot(journal, pool, record) == 0
        # Once it is claimed, its place is free for the next member; the other place is still held.
        pools.mark_warm(journal, record)
        assert pools.claim_member(journal, 'py', 'ws-1')['member'] == winner
        later = pools.begin_member(journal, pool, 'py-later')
        assert pools.take_slot(journal, pool, later) == 0
        assert pools.take_slot(journal, pool, pools.begin_member(journal, pool, 'py-latest')) is None
