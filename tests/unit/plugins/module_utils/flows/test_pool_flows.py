"""Warm pool members in the create flow, against an in-process fakepve: a member recorded and made through the
create's provider steps, and a create whose claim check finds the member's runner silent (no guest answers here),
which releases the member and goes on cold. The claim that succeeds needs real guests: tests/integration."""

import pytest

from ansible_collections.ephemera.workspaces.plugins.module_utils.core import ownership
from ansible_collections.ephemera.workspaces.plugins.module_utils.core import pools
from ansible_collections.ephemera.workspaces.plugins.module_utils.flows.create import CreateError, CreateFlow

from flowsite import SECRET, TEMPLATE

MEMBER_STEPS = ('vmid', 'clone', 'wait_clone', 'configure', 'start')
DECLARED = {'name': 'py', 'location': 'pve1', 'template': TEMPLATE, 'size': 1}


def flow(site, name, **changes):
    return CreateFlow(site.journal, site.provider, site.create_params(name, address_mode='dhcp', **changes), SECRET,
                      sleep=lambda seconds: None)


def make_member(site, name):
    pool = pools.validate_pool(DECLARED)
    record = pools.begin_member(site.journal, pool, name)
    assert flow(site, name).record_member(pool).changed
    for step in MEMBER_STEPS:
        flow(site, name).run(step)
    return pools.mark_warm(site.journal, record)


def test_a_member_is_recorded_with_the_pools_request_and_made_by_the_create_steps(site):
    make_member(site, 'py-0a1b2c3d')
    member = site.journal.get_workspace('py-0a1b2c3d')
    assert member['params']['pool_member'] == {'pool': 'py'} and member['purpose'] is None
    assert member['params']['inputs'] == {'agent_env': [], 'git_login': False}
    assert member['lease']['ttl'] == member['lease']['idle_timeout'] == 5400
    resource = site.provider.find(member['resource_id'], 'pve1')
    assert site.provider.verify(resource, 'py-0a1b2c3d', ownership.record_nonce(member)) == ownership.VERIFIED
    # Recorded again (a rerun of a fill that died after it): nothing changes.
    assert not flow(site, 'py-0a1b2c3d').record_member(pools.validate_pool(DECLARED)).changed


def test_a_pool_member_takes_no_static_address(site):
    with pytest.raises(CreateError, match='takes its address by DHCP'):
        CreateFlow(site.journal, site.provider, site.create_params('py-static'), SECRET).record_member(
            pools.validate_pool(DECLARED))
    assert site.journal.get_workspace('py-static') is None


def test_a_member_whose_runner_does_not_answer_is_released_and_the_create_goes_on_cold(site):
    make_member(site, 'py-0a1b2c3d')
    vmid = site.journal.get_workspace('py-0a1b2c3d')['resource_id']
    flow(site, 'fix', pools=[DECLARED]).run('request')
    result = flow(site, 'fix', pools=[DECLARED]).run('vmid')
    record = pools.member(site.journal, 'py', 'py-0a1b2c3d')
    assert record['state'] == 'released' and record['reason'].startswith('failed its claim check: its agent runner')
    ws = site.journal.get_workspace('fix')
    assert 'from_pool' not in ws['facts'] and ws['facts']['cold'].startswith('pool py had no warm member')
    assert ws['candidate_vmid'] == result.extra['vmid'] and ws['candidate_vmid'] != vmid
    # The member's container is untouched: the next fill deletes it, ownership-checked.
    resource = site.provider.find(vmid, 'pve1')
    assert site.provider.verify(resource, 'py-0a1b2c3d') == ownership.VERIFIED
    assert pools.violations(site.journal) == []


def test_a_request_no_pool_serves_takes_nothing(site):
    make_member(site, 'py-0a1b2c3d')
    other = dict(DECLARED, repo='https://git.example.invalid/other.git')
    flow(site, 'cold', pools=[other]).run('request')
    flow(site, 'cold', pools=[other]).run('vmid')
    assert pools.member(site.journal, 'py', 'py-0a1b2c3d')['state'] == 'warm'
    assert 'cold' not in site.journal.get_workspace('cold')['facts']


def test_a_bad_pool_declaration_is_refused_at_the_request_and_nothing_is_recorded(site):
    with pytest.raises(CreateError, match='size must be a whole number.*Correct ephemera_pools'):
        flow(site, 'bad', pools=[dict(DECLARED, size=-1)]).run('request')
    assert site.journal.get_workspace('bad') is None


class Killed(BaseException):
    """The run dies here (nothing after it is done, nothing is caught)."""


def test_a_claim_killed_after_the_workspace_took_the_container_closes_the_members_record_on_its_rerun(
        site, monkeypatch):
    make_member(site, 'py-0a1b2c3d')
    vmid = site.journal.get_workspace('py-0a1b2c3d')['resource_id']
    # The claim check's SSH round trip has no guest to answer here: the member passes it.
    monkeypatch.setattr(CreateFlow, '_claim_check', lambda self, record: True)
    close = CreateFlow._close_member
    dying = [True]

    def killed_before_the_close(self, member, resource):
        if dying:
            dying.pop()
            raise Killed()
        return close(self, member, resource)
    monkeypatch.setattr(CreateFlow, '_close_member', killed_before_the_close)
    flow(site, 'taker', pools=[DECLARED]).run('request')
    with pytest.raises(Killed):
        flow(site, 'taker', pools=[DECLARED]).run('vmid')
    taker = site.journal.get_workspace('taker')
    assert taker['resource_id'] == vmid and site.journal.get_workspace('py-0a1b2c3d')['resource_id'] == vmid
    assert 'vmid' not in taker['progress']

    flow(site, 'taker', pools=[DECLARED]).run('vmid')
    member = site.journal.get_workspace('py-0a1b2c3d')
    assert member['status'] == 'destroyed' and member['resource_id'] is None
    assert member['facts']['claimed_by'] == 'taker'
    taker = site.journal.get_workspace('taker')
    assert taker['resource_id'] == vmid and 'vmid' in taker['progress']
    assert pools.member(site.journal, 'py', 'py-0a1b2c3d')['workspace'] == 'taker'
    assert pools.violations(site.journal) == []


def test_a_request_in_check_mode_says_which_pool_it_would_take_from_and_whether_it_refills(site):
    def check(declared):
        return CreateFlow(site.journal, site.provider, site.create_params('fix', address_mode='dhcp', pools=declared),
                          SECRET, check_mode=True).run('request')
    result = check([dict(DECLARED, refill=True)])
    assert result.extra == {'pool': 'py', 'refill': True}
    assert 'it would take a member of warm pool py if one is warm, and refill the pool after' in result.msg
    assert check([DECLARED]).extra == {'pool': 'py', 'refill': False}
    assert check([dict(DECLARED, repo='https://git.example.invalid/other.git')]).extra == {}
    assert site.journal.get_workspace('fix') is None
