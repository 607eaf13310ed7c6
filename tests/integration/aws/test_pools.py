"""A warm pool on AWS through the shipped playbooks, on the try-out cloud: pool_fill launches two members, a create
that matches takes one (its instance re-tagged for the workspace), a create that matches no pool is cold, the destroy
of the claimed workspace leaves nothing, and the next fill refills. One pool, filled once, for the file's tests (each
playbook run costs seconds), which run in order."""

import pytest

from ansible_collections.ephemera.workspaces.plugins.module_utils.core import lease as leasing
from ansible_collections.ephemera.workspaces.plugins.module_utils.core import ownership
from ansible_collections.ephemera.workspaces.plugins.module_utils.core import pools

from tests.integration.playbooks import make_repo

from .awsrun import AwsSite

POOL = 'awswarm'


def live(site):
    """The cloud's live instances launched by this controller (the cloud seeds instances of others, one with copies
    of our tags): ours carry the client tokens the collection derives."""
    return [i for i in site.cloud.instances() if i['state'] != 'terminated'
            and (i.get('client_token') or '').startswith('ephemera-')]


def members(site, state=None):
    with site.journal() as journal:
        return pools.members(journal, POOL, state=state)


def counts(site):
    with site.journal() as journal:
        return pools.state_counts(journal, POOL)


@pytest.fixture(scope='module')
def site(localcloud, tmp_path_factory):
    directory = tmp_path_factory.mktemp('aws-pool')
    site = AwsSite(localcloud, directory)
    site.repo = make_repo(str(directory / 'repo'))
    info = localcloud.info
    site.declaration = [{'name': POOL, 'location': info['region'], 'template': info['seed']['image_id'], 'size': 2}]
    localcloud.clear()
    fill = site.playbook('pool_fill.yml', ephemera_pools=site.declaration)
    assert fill.ok, fill.explain()
    site.first_fill = fill
    yield site
    print('playbook runs (playbook, workspace, seconds): %s' % site.timings)


def test_a_fill_launches_warm_members_each_carrying_its_own_marker_and_lease(site):
    assert counts(site) == {'filling': 0, 'warm': 2, 'claimed': 0, 'released': 0}
    assert site.first_fill.changed
    provider = site.provider()
    for record in members(site, 'warm'):
        ws = site.workspace(record['member'])
        assert ws['provider'] == 'aws' and ws['params']['pool_member'] == {'pool': POOL}
        assert ws['address'] and ws['facts'].get('host_key')
        [instance] = site.instances(record['member'])
        assert instance['instance_id'] == ws['resource_id']
        resource = provider.find(ws['resource_id'], ws['location'])
        assert provider.verify(resource, record['member'], ownership.record_nonce(ws)) == ownership.VERIFIED
        assert provider.labels(resource)['state'] == 'warm'
    assert len(live(site)) == 2


def test_a_matching_create_takes_a_member_and_its_instance_is_the_workspaces(site):
    warm = {m['member']: site.workspace(m['member'])['resource_id'] for m in members(site, 'warm')}
    run = site.create('pooled', site.repo, ephemera_pools=site.declaration)
    assert run.ok, run.explain()
    ws = site.workspace('pooled')
    assert ws['status'] == 'ready' and ws['facts']['from_pool'] == POOL
    assert 'from warm pool %s' % POOL in ' '.join(next(r['msg'] for n, r in run.results('localhost')
                                                       if n.startswith('Report ')))
    taken = ws['facts']['pool_member']
    assert ws['resource_id'] == warm[taken]
    # The journal says where it came from.
    assert 'pool_member_taken' in [e['action'] for e in site.events('pooled')]
    # The instance exists once, re-tagged for the workspace: its marker (for the workspace's nonce), its Name, its
    # lease's tags; the member's marker no longer verifies on it.
    assert [i['instance_id'] for i in site.instances('pooled')] == [ws['resource_id']]
    assert site.instances(taken) == []
    assert len([i for i in live(site) if i['instance_id'] == ws['resource_id']]) == 1
    provider = site.provider()
    resource = provider.find(ws['resource_id'], ws['location'])
    assert provider.verify(resource, 'pooled', ownership.record_nonce(ws)) == ownership.VERIFIED
    member = site.workspace(taken)
    assert provider.verify(resource, taken, ownership.record_nonce(member)) == ownership.MISMATCH
    assert provider.labels(resource) == leasing.lease_labels(ws['lease'], 'ready')
    [instance] = site.instances('pooled')
    assert instance['tags']['Name'] == 'agent-pooled'
    # The member's record is closed; the pool counts one claimed, one warm.
    assert member['status'] == 'destroyed' and member['resource_id'] is None
    assert member['facts']['claimed_by'] == 'pooled'
    assert [(m['member'], m['workspace']) for m in members(site, 'claimed')] == [(taken, 'pooled')]
    assert counts(site) == {'filling': 0, 'warm': 1, 'claimed': 1, 'released': 0}
    with site.journal() as journal:
        assert pools.violations(journal) == []


def test_a_create_that_matches_no_pool_is_cold(site):
    other = [dict(site.declaration[0], repo='https://git.example.invalid/other.git')]
    run = site.create('coldone', site.repo, ephemera_pools=other)
    assert run.ok, run.explain()
    ws = site.workspace('coldone')
    assert ws['status'] == 'ready' and not ws['facts'].get('from_pool')
    assert ws['candidate_id'].startswith('ephemera-coldone-')
    assert [i['instance_id'] for i in site.instances('coldone')] == [ws['resource_id']]
    assert counts(site)['warm'] == 1
    run = site.destroy('coldone')
    assert run.ok, run.explain()


def test_the_destroy_of_the_claimed_workspace_leaves_nothing(site):
    instance_id = site.workspace('pooled')['resource_id']
    run = site.destroy('pooled')
    assert run.ok, run.explain()
    ws = site.workspace('pooled')
    assert ws['status'] == 'destroyed' and site.debt('pooled') == []
    assert site.instances('pooled') == []
    assert [i for i in live(site) if i['instance_id'] == instance_id] == []
    # What is left is the one warm member.
    [warm] = members(site, 'warm')
    assert [i['instance_id'] for i in live(site)] == [site.workspace(warm['member'])['resource_id']]


def test_the_next_fill_refills(site):
    run = site.playbook('pool_fill.yml', ephemera_pools=site.declaration)
    assert run.ok and run.changed, run.explain()
    assert counts(site) == {'filling': 0, 'warm': 2, 'claimed': 1, 'released': 0}
    names = sorted(m['member'] for m in members(site, 'warm'))
    # Each warm member's instance exists once, and nothing else lives.
    assert sorted(i['tags']['ephemera:workspace'] for i in live(site)) == names
