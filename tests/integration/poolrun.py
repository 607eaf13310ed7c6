"""A warm pool on a cloud provider through the shipped playbooks, the same for each provider: pool_fill makes two
members, a create that matches takes one (its machine given to the workspace), a create that matches no pool is cold,
the destroy of the claimed workspace leaves nothing, and the next fill refills.

A provider's test file defines the module-scoped ``site`` fixture with :func:`filled_site` (one pool, filled once,
for the file's tests, which run in order: each playbook run costs seconds) and imports the tests below. The site
answers ``provider()``, ``machines(workspace)`` (the ids of the live machines labelled for ``workspace``),
``ours()`` ({id: workspace label} of every live machine this controller made) and ``machine_name(id)``; its
``claimed_name(workspace, before)`` is the name a claimed machine has on that provider (``before``: its name while
it waited); its ``inventory_source()`` the inventory plugin's configuration on that cloud and the environment it
reads its credentials from.
"""

import json
import os

from ansible_collections.ephemera.workspaces.plugins.module_utils.core import lease as leasing
from ansible_collections.ephemera.workspaces.plugins.module_utils.core import ownership
from ansible_collections.ephemera.workspaces.plugins.module_utils.core import pools

from tests.ansible_run import run_ansible
from tests.integration.playbooks import make_repo

POOL = 'warm'


def filled_site(site, directory, location, template):
    """``site`` with a repository, the pool's declaration (two members at ``location`` from ``template``) and its
    first fill run."""
    site.repo = make_repo(str(directory / 'repo'))
    site.declaration = [{'name': POOL, 'location': location, 'template': template, 'size': 2}]
    site.cloud.clear()
    site.first_fill = site.playbook('pool_fill.yml', ephemera_pools=site.declaration)
    assert site.first_fill.ok, site.first_fill.explain()
    return site


def members(site, state=None):
    with site.journal() as journal:
        return pools.members(journal, POOL, state=state)


def counts(site):
    with site.journal() as journal:
        return pools.state_counts(journal, POOL)


def report(run):
    return ' '.join(next(r['msg'] for name, r in run.results('localhost') if name.startswith('Report ')))


def test_a_fill_makes_warm_members_each_carrying_its_own_marker_and_lease(site):
    assert site.first_fill.changed
    assert counts(site) == {'filling': 0, 'warm': 2, 'claimed': 0, 'released': 0}
    provider = site.provider()
    for record in members(site, 'warm'):
        ws = site.workspace(record['member'])
        assert ws['params']['pool_member'] == {'pool': POOL}
        assert ws['address'] and ws['facts'].get('host_key')
        assert site.machines(record['member']) == [ws['resource_id']]
        resource = provider.find(ws['resource_id'], ws['location'])
        assert provider.verify(resource, record['member'], ownership.record_nonce(ws)) == ownership.VERIFIED
        assert provider.labels(resource)['state'] == 'warm'
    assert sorted(site.ours().values()) == sorted(m['member'] for m in members(site, 'warm'))


def list_inventory(site):
    """The inventory plugin's ``--list`` on the site's cloud (its JSON)."""
    config, env = site.inventory_source()
    path = os.path.join(site.directory, 'pool.workspaces.yml')
    with open(path, 'w') as out:
        json.dump(dict(config, plugin='ephemera.workspaces.workspaces', journal_path=site.journal_path), out)
    env = dict(env, ANSIBLE_INVENTORY_UNPARSED_FAILED='1', XDG_CACHE_HOME=os.path.join(site.directory, 'cache'))
    run = run_ansible(['ansible-inventory', '-i', path, '--list'], timeout=180, fail=False, callback=None, env=env,
                      unset=('PROXMOX_', 'EPHEMERA_', 'AWS_', 'HCLOUD_', 'GOOGLE_', 'AZURE_'))
    assert run.returncode == 0, run.output
    return run.data


def test_warm_members_show_in_status_the_inventory_workspace_info_and_lease_audit(site):
    warm = sorted(m['member'] for m in members(site, 'warm'))
    assert warm and counts(site)['filling'] == 0
    summary = 'warm pool %s: warm' % POOL
    # status: the members and their pool, read by workspace_info, which says each one's membership.
    status = site.playbook('status.yml')
    assert status.ok, status.explain()
    assert sorted(status.task('Print the warm pool members')['msg']) == ['%s: %s' % (m, summary) for m in warm]
    listed = {ws['name']: ws for ws in status.task('Read the workspaces from the journal')['workspaces']}
    for member in warm:
        assert listed[member]['pool_member'] == {'pool': POOL, 'state': 'warm', 'summary': summary}
        assert listed[member]['provider'] == site.provider().name
    # The inventory on this cloud: members are hosts of their groups, with their pool as a host variable.
    inventory = list_inventory(site)
    assert sorted(inventory['warm_pool_members']['hosts']) == warm
    assert sorted(inventory['warm_pool_%s' % POOL]['hosts']) == warm
    for member in warm:
        hostvars = inventory['_meta']['hostvars'][member]
        assert hostvars['ephemera_warm_pool'] == POOL
        assert hostvars['ephemera_instance_id'] == site.workspace(member)['resource_id']
        assert member in inventory['provider_%s' % site.provider().name]['hosts']
    # No machine of a member is an orphan.
    orphans = ' '.join(json.dumps(v) for k, v in inventory['_meta']['hostvars'].items() if k not in warm
                       and v.get('ephemera_orphan_reason'))
    assert not [m for m in warm if site.workspace(m)['resource_id'] in orphans]
    # lease_audit: each member is audited as a leased workspace, named as a member of its pool.
    audit = site.playbook('lease_audit.yml', audit_all=True)
    assert audit.ok, audit.explain()
    found = audit.task('Audit the leases and cleanups in the journal')
    entries = {e['name']: e for e in found['entries']}
    for member in warm:
        assert entries[member]['warm_pool'] == POOL and entries[member]['expires_in'] > 0
        assert entries[member]['resource']['provider'] == site.provider().name
        assert [line for line in found['report'] if line.startswith(member + ':')][0].startswith(
            '%s: ' % member) and 'member of warm pool %s' % POOL in ' '.join(found['report'])


def test_reconcile_reports_warm_members_as_pool_members_never_as_orphans_or_creates_to_resume(site):
    warm = {m['member']: str(site.workspace(m['member'])['resource_id']) for m in members(site, 'warm')}
    run = site.playbook('reconcile.yml')
    assert run.ok, run.explain()
    findings = run.task('Compare the journal with the cluster')['findings']
    for member, machine in warm.items():
        assert [(f['kind'], str(f['vmid'])) for f in findings if f['workspace'] == member] == [
            ('pool_member', machine)]
        assert not [f for f in findings if f['workspace'] != member and str(f['vmid']) == machine]
    # Nothing was resumed or deleted: the members wait as they did.
    assert sorted(m['member'] for m in members(site, 'warm')) == sorted(warm)
    assert sorted(site.ours().values()) == sorted(warm)


def test_a_matching_create_takes_a_member_and_its_machine_is_the_workspaces(site):
    warm = {m['member']: site.workspace(m['member'])['resource_id'] for m in members(site, 'warm')}
    names = {machine: site.machine_name(machine) for machine in warm.values()}
    run = site.create('pooled', site.repo, ephemera_pools=site.declaration)
    assert run.ok, run.explain()
    ws = site.workspace('pooled')
    assert ws['status'] == 'ready' and ws['facts']['from_pool'] == POOL
    assert 'from warm pool %s' % POOL in report(run)
    taken = ws['facts']['pool_member']
    assert ws['resource_id'] == warm[taken]
    assert 'pool_member_taken' in [e['action'] for e in site.events('pooled')]
    # The machine exists once, given to the workspace: its marker (for the workspace's nonce), its name where the
    # provider renames, its lease's labels; the member's marker no longer verifies on it.
    assert site.machines('pooled') == [ws['resource_id']] and site.machines(taken) == []
    assert list(site.ours()).count(ws['resource_id']) == 1
    provider = site.provider()
    resource = provider.find(ws['resource_id'], ws['location'])
    member = site.workspace(taken)
    assert provider.verify(resource, 'pooled', ownership.record_nonce(ws)) == ownership.VERIFIED
    assert provider.verify(resource, taken, ownership.record_nonce(member)) == ownership.MISMATCH
    assert provider.labels(resource) == leasing.lease_labels(ws['lease'], 'ready')
    assert site.machine_name(ws['resource_id']) == site.claimed_name('pooled', names[ws['resource_id']])
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
    assert site.machines('coldone') == [ws['resource_id']]
    assert ws['resource_id'] not in [site.workspace(m['member'])['resource_id'] for m in members(site)]
    assert counts(site)['warm'] == 1
    run = site.destroy('coldone')
    assert run.ok, run.explain()
    assert site.machines('coldone') == []


def test_the_destroy_of_the_claimed_workspace_leaves_nothing(site):
    machine = site.workspace('pooled')['resource_id']
    run = site.destroy('pooled')
    assert run.ok, run.explain()
    ws = site.workspace('pooled')
    assert ws['status'] == 'destroyed' and site.debt('pooled') == []
    assert site.machines('pooled') == [] and machine not in site.ours()
    # What is left is the one warm member.
    [warm] = members(site, 'warm')
    assert site.ours() == {site.workspace(warm['member'])['resource_id']: warm['member']}


def test_the_next_fill_refills(site):
    run = site.playbook('pool_fill.yml', ephemera_pools=site.declaration)
    assert run.ok and run.changed, run.explain()
    assert counts(site) == {'filling': 0, 'warm': 2, 'claimed': 1, 'released': 0}
    # Each warm member's machine exists once, and nothing else of ours lives.
    assert sorted(site.ours().values()) == sorted(m['member'] for m in members(site, 'warm'))


def test_a_create_from_a_pool_declared_with_refill_fills_it_back(site):
    # Without refill (the tests above) a create left the pool one member short until the next fill.
    declaration = [dict(site.declaration[0], refill=True)]
    before = set(m['member'] for m in members(site, 'warm'))
    assert len(before) == 2
    run = site.create('refilled', site.repo, ephemera_pools=declaration)
    assert run.ok, run.explain()
    ws = site.workspace('refilled')
    assert ws['status'] == 'ready' and ws['facts']['from_pool'] == POOL
    names = [name for name, dummy in run.results()]
    assert names.index('Queue: record the outcome') < names.index('Refill the warm pool after the create of refilled')
    result = run.task('Refill the warm pool after the create of refilled')
    assert result['changed'] and result['refill_failed'] is False and not result.get('warnings')
    assert [e['action'] for e in result['entries']] == ['warm']
    # Exactly one new member, in place of the one taken, its machine carrying its own marker.
    after = set(m['member'] for m in members(site, 'warm'))
    assert before - after == {ws['facts']['pool_member']}
    [new] = after - before
    member = site.workspace(new)
    assert site.machines(new) == [member['resource_id']]
    provider = site.provider()
    resource = provider.find(member['resource_id'], member['location'])
    assert provider.verify(resource, new, ownership.record_nonce(member)) == ownership.VERIFIED
    assert counts(site)['filling'] == 0
    assert sorted(site.ours().values()) == sorted(list(after) + ['refilled'])
