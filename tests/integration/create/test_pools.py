"""Warm pools through the shipped playbooks on the try-out cluster: pool_fill makes members, a matching create takes
one and is ready, the next fill refills, a create that matches no pool is cold, a member whose guest stopped is
released (and deleted by the next fill) while the create goes on cold, and a create killed mid-claim, or in the one
task that runs the steps a create that took a member has left, converges.

Each test has its own controller (journal, secret) and its own pool name; the pools are declared as the inventory
would, in ``ephemera_pools``, which both playbooks read.
"""

import json
import os
import sys
import time

import pytest

from ansible_collections.ephemera.workspaces.plugins.module_utils.core import ownership
from ansible_collections.ephemera.workspaces.plugins.module_utils.core import pools
from ansible_collections.ephemera.workspaces.plugins.module_utils.flows.create import WARM_REST

from tests.ansible_run import run_ansible
from tests.localpve.clients import wait_task

from .createrun import ROOT, Controller, request_vars

POOL_FILL = os.path.join(ROOT, 'playbooks', 'pool_fill.yml')
# The include of the numbered tasks after step 2, which a create that took a member skips as one task.
COLD_TASKS = 'Steps 3 to 13 of '


def took_the_warm_path(run):
    """True when ``run`` started none of the numbered tasks after step 2 (their include skipped as one task) and
    ran the rest (steps 5, 9, 10, 12, 13) in step 2's own task."""
    steps = run.step_results()
    cold = [r for name, r in run.results() if name.startswith(COLD_TASKS)]
    return (sorted(steps) == [1, 2] and not any(r.get('skipped') for r in steps.values())
            and len(cold) == 1 and cold[0].get('skipped')
            and [each['step'] for each in steps[2]['details'].get('steps', [])] == list(WARM_REST))


def ran_the_numbered_steps(run):
    """True when ``run`` started every numbered task, and step 2 ran none of the others in its task."""
    return (sorted(run.step_results()) == list(range(1, 14))
            and not [n for n, r in run.step_results().items() if r.get('skipped')]
            and 'steps' not in run.step_results()[2]['details'])


def declared(ctl, name, size, **extra):
    return [dict({'name': name, 'location': ctl.info['template_node'], 'template': ctl.info['template_vmid'],
                  'size': size}, **extra)]


def fill(ctl, declaration, **options):
    return ctl.create({'ephemera_pools': declaration}, playbook=POOL_FILL, **options)


def members(ctl, pool, state=None):
    with ctl.journal() as journal:
        return pools.members(journal, pool, state=state)


def pool_containers(ctl):
    """{vmid: the member or workspace name its marker verifies for} of this controller's containers."""
    out = {}
    for vmid, guest in ctl.guests().items():
        fields = ownership.parse(ctl.config(vmid, guest['node']).get('description')) or {}
        name = fields.get('workspace')
        if name and ctl.marker_verdict(vmid, name) == ownership.VERIFIED:
            out[vmid] = name
    return out


def test_a_fill_makes_warm_members_a_create_takes_one_and_the_next_fill_refills(cluster, repo, tmp_path):
    ctl = Controller(cluster, tmp_path / 'ctl')
    try:
        declaration = declared(ctl, 'tryout', 2)
        before = ctl.guests()
        check = fill(ctl, declaration, check=True)
        assert check.ok and check.changed, check.explain()
        assert check.task('Fill each pool to its size')['entries'] == [
            {'pool': 'tryout', 'member': None, 'action': 'would_fill', 'detail': 'would start 2 member(s)'}]
        assert sorted(ctl.guests()) == sorted(before)
        first = fill(ctl, declaration)
        assert first.ok and first.changed, first.explain()
        warm = members(ctl, 'tryout', 'warm')
        assert len(warm) == 2
        vmids = {}
        for record in warm:
            ws = ctl.workspace(record['member'])
            assert ws['params']['pool_member'] == {'pool': 'tryout'}
            assert ws['address'] and ws['facts'].get('host_key')
            assert ctl.ours(record['member']) == [ws['resource_id']]
            vmids[record['member']] = ws['resource_id']
            # The lease labels are on the container, as on any workspace's.
            assert 'state=warm' in ctl.config(ws['resource_id'])['description']
        # A second fill finds the pool full and changes nothing.
        again = fill(ctl, declaration)
        assert again.ok and not again.changed, again.explain()
        assert len(members(ctl, 'tryout', 'warm')) == 2

        run = ctl.create(request_vars(repo.url, 'pooled', ephemera_pools=declaration))
        assert run.ok, run.explain()
        ws = ctl.workspace('pooled')
        assert ws['status'] == 'ready' and ws['facts']['from_pool'] == 'tryout'
        assert 'from warm pool tryout' in ' '.join(run.report())
        # The steps the member had done are not started (step 2 marked them done and said from_pool); those it had
        # not done run as one task.
        assert took_the_warm_path(run), run.explain()
        taken = ws['facts']['pool_member']
        assert ws['resource_id'] == vmids[taken]
        # The container is the workspace's now: its marker verifies for it alone, its host name is its own.
        assert ctl.ours('pooled') == [ws['resource_id']] and ctl.ours(taken) == []
        assert ctl.config(ws['resource_id'])['hostname'] == 'agent-pooled'
        assert ws['facts']['head'] == repo.main_head
        claimed = members(ctl, 'tryout', 'claimed')
        assert [(m['member'], m['workspace']) for m in claimed] == [(taken, 'pooled')]
        assert ctl.workspace(taken)['status'] == 'destroyed' and ctl.workspace(taken)['resource_id'] is None
        with ctl.journal() as journal:
            assert pools.violations(journal) == []

        refill = fill(ctl, declaration)
        assert refill.ok and refill.changed, refill.explain()
        assert len(members(ctl, 'tryout', 'warm')) == 2
        # Every container of the pool exists once: two warm members and the workspace.
        owners = pool_containers(ctl)
        assert sorted(owners.values()) == sorted([m['member'] for m in members(ctl, 'tryout', 'warm')] + ['pooled'])

        # A pool of another repository does not serve this request: the create is cold and takes nothing.
        other = declared(ctl, 'tryout', 2, repo='https://git.example.invalid/other.git')
        cold = ctl.create(request_vars(repo.url, 'coldone', ephemera_pools=other))
        assert cold.ok, cold.explain()
        ws = ctl.workspace('coldone')
        assert ws['status'] == 'ready' and not ws['facts'].get('from_pool')
        assert ran_the_numbered_steps(cold), cold.explain()
        assert len(members(ctl, 'tryout', 'warm')) == 2
        assert ctl.ours('coldone') == [ws['resource_id']]
    finally:
        ctl.stop()


def test_a_create_from_a_pool_declared_with_refill_fills_it_back_after_its_workspace_is_ready(
        cluster, repo, tmp_path):
    ctl = Controller(cluster, tmp_path / 'ctl')
    try:
        # Without refill: the create takes the one member and the pool stays empty until a fill.
        plain = declared(ctl, 'plain', 1)
        assert fill(ctl, plain).ok
        run = ctl.create(request_vars(repo.url, 'unrefilled', ephemera_pools=plain))
        assert run.ok, run.explain()
        assert ctl.workspace('unrefilled')['facts']['from_pool'] == 'plain'
        assert run.task('Refill the warm pool after the create of unrefilled').get('skipped')
        assert members(ctl, 'plain', 'warm') == [] and members(ctl, 'plain', 'filling') == []

        refilled = declared(ctl, 'refilled', 1, refill=True)
        assert fill(ctl, refilled).ok
        [first] = members(ctl, 'refilled', 'warm')
        before = ctl.guests()
        # Check mode says what the refill after the create would start, and starts nothing.
        check = ctl.create(request_vars(repo.url, 'refiller', ephemera_pools=refilled), check=True)
        assert check.ok, check.explain()
        assert check.task('Refill the warm pool after the create of refiller')['entries'] == [
            {'pool': 'refilled', 'member': None, 'action': 'would_fill',
             'detail': 'would start 1 member(s) after the create takes one'}]
        assert sorted(ctl.guests()) == sorted(before) and members(ctl, 'refilled', 'warm') == [first]

        run = ctl.create(request_vars(repo.url, 'refiller', ephemera_pools=refilled))
        assert run.ok, run.explain()
        ws = ctl.workspace('refiller')
        assert ws['status'] == 'ready' and ws['facts']['from_pool'] == 'refilled'
        assert ws['facts']['pool_member'] == first['member']
        # The refill ran after the workspace was ready, its queue outcome recorded and its report printed.
        names = [name for name, dummy in run.results()]
        refill_at = names.index('Refill the warm pool after the create of refiller')
        warm_task = [n for n in names if n.startswith('2/13 ')][0]
        assert names.index(warm_task) < names.index('Queue: record the outcome') < refill_at
        assert names.index('Report refiller') < refill_at
        result = run.task('Refill the warm pool after the create of refiller')
        assert result['changed'] and not result['refill_failed'] and not result.get('warnings')
        assert [e['action'] for e in result['entries']] == ['warm']
        # Exactly one new warm member, made for this pool alone, whose container carries our marker.
        [second] = members(ctl, 'refilled', 'warm')
        assert second['member'] != first['member'] and members(ctl, 'refilled', 'filling') == []
        member = ctl.workspace(second['member'])
        assert ctl.ours(second['member']) == [member['resource_id']]
        assert members(ctl, 'plain', 'warm') == []
        owners = pool_containers(ctl)
        assert sorted(owners.values()) == sorted(['unrefilled', 'refiller', second['member']])
        with ctl.journal() as journal:
            assert pools.violations(journal) == []
    finally:
        ctl.stop()


def test_a_member_whose_guest_stopped_is_released_the_create_is_cold_and_the_next_fill_deletes_it(
        cluster, repo, tmp_path):
    ctl = Controller(cluster, tmp_path / 'ctl')
    try:
        declaration = declared(ctl, 'stopped', 1)
        assert fill(ctl, declaration).ok
        member = members(ctl, 'stopped', 'warm')[0]['member']
        vmid = ctl.workspace(member)['resource_id']
        node = ctl.info['template_node']
        ctl.api.nodes(node).lxc(vmid).status.stop.post()
        cluster_wait_stopped(ctl, vmid)

        run = ctl.create(request_vars(repo.url, 'fallback', ephemera_pools=declaration))
        assert run.ok, run.explain()
        ws = ctl.workspace('fallback')
        assert ws['status'] == 'ready' and not ws['facts'].get('from_pool')
        assert ws['resource_id'] != vmid
        record = pools.member(ctl.journal(), 'stopped', member)
        assert record['state'] == 'released' and 'not running' in record['reason']

        refill = fill(ctl, declaration)
        assert refill.ok, refill.explain()
        # Its container is gone (a new member may have been given its VMID again: PVE hands a freed id out at once).
        assert ctl.ours(member) == []
        with ctl.journal() as journal:
            assert pools.member(journal, 'stopped', member) is None
            now = pools.members(journal, 'stopped')
        assert [m['state'] for m in now] == ['warm'] and now[0]['member'] != member
        assert sorted(pool_containers(ctl).values()) == sorted(['fallback', now[0]['member']])
    finally:
        ctl.stop()


def cluster_wait_stopped(ctl, vmid, timeout=30):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if ctl.guests()[vmid]['status'] == 'stopped':
            return
        time.sleep(0.2)
    raise AssertionError('CT %s did not stop' % vmid)


@pytest.mark.parametrize('point', [
    # Killed right after the claim's compare-and-set, before anything else was written or done.
    'create.vmid journal pool_claim',
    # Killed right after the member's container was re-signed for the workspace, before the journal knew.
    'create.vmid pve PUT /nodes/*/lxc/*/config',
])
def test_a_create_killed_mid_claim_converges_on_its_rerun_and_the_member_goes_to_it_alone(cluster, repo, tmp_path,
                                                                                          point):
    ctl = Controller(cluster, tmp_path / 'ctl')
    try:
        declaration = declared(ctl, 'crash', 2)
        assert fill(ctl, declaration).ok
        trace = os.path.join(ctl.workdir, 'trace')
        open(trace, 'w').close()
        kill = {'workspace': 'crashed', 'point': point, 'nth': 1}
        run = ctl.create(request_vars(repo.url, 'crashed', ephemera_pools=declaration),
                         env={'EPHEMERA_FAILPOINT_TRACE': trace, 'EPHEMERA_FAILPOINT_KILL': json.dumps(kill)})
        assert not run.ok
        claimed = members(ctl, 'crash', 'claimed')
        assert [m['workspace'] for m in claimed] == ['crashed']
        assert ctl.workspace('crashed')['resource_id'] is None
        rerun = ctl.create(request_vars(repo.url, 'crashed', ephemera_pools=declaration))
        assert rerun.ok, rerun.explain()
        # The rerun's step 2 finishes taking the member it claimed: the member's steps are not started either.
        assert took_the_warm_path(rerun), rerun.explain()
        ws = ctl.workspace('crashed')
        assert ws['status'] == 'ready' and ws['facts']['pool_member'] == claimed[0]['member']
        assert ctl.ours('crashed') == [ws['resource_id']]
        assert len(members(ctl, 'crash', 'claimed')) == 1 and len(members(ctl, 'crash', 'warm')) == 1
        with ctl.journal() as journal:
            assert pools.violations(journal) == []
    finally:
        ctl.stop()


@pytest.mark.parametrize('point', [
    # The first step of the one task begun, nothing of it recorded.
    'create.configure begin',
    # The bootstrap recorded as the queue's step, the credentials not written.
    'create.bootstrap journal queue step',
    # The bootstrap done, the checkout begun.
    'create.checkout begin',
    # The brief recorded as the queue's step, the agent not started.
    'create.brief journal queue step',
    # The ready labels on the container, the record not yet ready.
    'create.ready pve PUT /nodes/*/lxc/*/config',
])
def test_a_create_killed_in_the_warm_members_one_task_converges_on_its_rerun_by_the_numbered_steps(
        cluster, repo, tmp_path, point):
    ctl = Controller(cluster, tmp_path / 'ctl')
    try:
        declaration = declared(ctl, 'warmkill', 1)
        assert fill(ctl, declaration).ok
        trace = os.path.join(ctl.workdir, 'trace')
        open(trace, 'w').close()
        kill = {'workspace': 'halfwarm', 'point': point, 'nth': 1}
        run = ctl.create(request_vars(repo.url, 'halfwarm', ephemera_pools=declaration),
                         env={'EPHEMERA_FAILPOINT_TRACE': trace, 'EPHEMERA_FAILPOINT_KILL': json.dumps(kill)})
        assert not run.ok
        with open(trace) as src:
            assert 'halfwarm\t%s\n' % point in src.read()
        taken = ctl.workspace('halfwarm')
        assert taken['facts']['from_pool'] == 'warmkill' and taken['status'] != 'ready'
        # The rerun's step 2 keeps its container and says no from_pool: the numbered tasks run, and each finds
        # itself done or goes on where the one task was killed.
        rerun = ctl.create(request_vars(repo.url, 'halfwarm', ephemera_pools=declaration))
        assert rerun.ok, rerun.explain()
        assert ran_the_numbered_steps(rerun), rerun.explain()
        ws = ctl.workspace('halfwarm')
        assert ws['status'] == 'ready' and ws['resource_id'] == taken['resource_id']
        assert ws['facts']['head'] == repo.main_head
        assert ctl.ours('halfwarm') == [ws['resource_id']]
        assert [m['workspace'] for m in members(ctl, 'warmkill', 'claimed')] == ['halfwarm']
        with ctl.journal() as journal:
            assert pools.violations(journal) == []
    finally:
        ctl.stop()


def test_members_are_seen_by_status_inventory_and_reconcile_and_expire_deletes_one_whose_lease_ran_out(
        cluster, tmp_path):
    ctl = Controller(cluster, tmp_path / 'ctl')
    try:
        declaration = declared(ctl, 'seen', 1, lease=60)
        assert fill(ctl, declaration).ok
        member = members(ctl, 'seen', 'warm')[0]['member']
        ws = ctl.workspace(member)

        status = ctl.create({}, playbook=os.path.join(ROOT, 'playbooks', 'status.yml'))
        assert status.ok, status.explain()
        assert status.task('Print the warm pool members')['msg'] == ['%s: warm pool seen: warm' % member]

        reconcile = ctl.create({}, playbook=os.path.join(ROOT, 'playbooks', 'reconcile.yml'))
        assert reconcile.ok, reconcile.explain()
        found = reconcile.task('Compare the journal with the cluster')
        kinds = dict((f['workspace'] or f['vmid'], f['kind']) for f in found['findings'])
        assert kinds.get(member) == 'pool_member' and 'orphan' not in kinds.values()
        assert ws['status'] != 'destroyed' and ctl.ours(member) == [ws['resource_id']]

        inventory = os.path.join(ctl.workdir, 'site.workspaces.yml')
        with open(inventory, 'w') as out:
            json.dump({'plugin': 'ephemera.workspaces.workspaces', 'journal_path': ctl.journal_path,
                       'api_host': ctl.info['proxy_url'], 'api_token_id': ctl.info['token_id'],
                       'api_token_secret': ctl.info['token_secret'], 'ca_file': ctl.info['ca_file']}, out)
        listed = run_ansible(['ansible-inventory', '-i', inventory, '--list'], timeout=180, callback=None,
                             env={'XDG_CACHE_HOME': os.path.join(ctl.workdir, 'cache')})
        assert listed.returncode == 0, listed.output
        assert listed.data['warm_pool_seen']['hosts'] == [member]
        assert listed.data['warm_pool_members']['hosts'] == [member]
        assert listed.data['_meta']['hostvars'][member]['ephemera_warm_pool'] == 'seen'

        # Its lease ran out (moved back in the journal rather than waited for): the expiry sweep deletes it.
        with ctl.journal() as journal:
            record = journal.get_workspace(member)
            back = time.time() - 120
            journal.update_workspace(member, record['generation'],
                                     lease=dict(record['lease'], created_at=back, last_touched_at=back))
        expire = ctl.create({}, playbook=os.path.join(ROOT, 'playbooks', 'expire.yml'))
        assert expire.ok, expire.explain()
        entries = [e for e in expire.task('Release what expired')['entries'] if e['workspace'] == member]
        assert [e['action'] for e in entries] == ['released'], entries
        assert ctl.workspace(member)['status'] == 'destroyed' and ctl.ours(member) == []
        assert members(ctl, 'seen') == []
    finally:
        ctl.stop()


def test_a_pool_of_a_repository_has_it_fetched_and_a_create_checks_out_its_ref_there(cluster, repo, tmp_path):
    ctl = Controller(cluster, tmp_path / 'ctl')
    try:
        declaration = declared(ctl, 'fetched', 1, repo=repo.url)
        assert fill(ctl, declaration).ok
        member = members(ctl, 'fetched', 'warm')[0]['member']
        vmid = ctl.workspace(member)['resource_id']
        checkout = os.path.join(ctl.guest_root(vmid), 'workspace', 'repo')
        # The member has the repository (its default branch) before any request.
        assert os.path.isfile(os.path.join(checkout, 'README'))
        marker = os.path.join(checkout, '.git', 'fetched-by-the-fill')
        open(marker, 'w').close()
        run = ctl.create(request_vars(repo.url, 'onbranch', ref='feature', ephemera_pools=declaration))
        assert run.ok, run.explain()
        ws = ctl.workspace('onbranch')
        assert ws['facts']['from_pool'] == 'fetched' and ws['resource_id'] == vmid
        assert ws['facts']['head'] == repo.feature_head
        # Checked out in the member's clone, fetched again: not cloned anew.
        assert os.path.exists(marker) and os.path.isfile(os.path.join(checkout, 'farewell.py'))
    finally:
        ctl.stop()


def built_version(ctl, name, api, node):
    """A version of template ``name`` recorded as a build records it: a container of our own (a full clone of the
    seed template carrying our marker for the version's record), converted into a template; its version number."""
    from ansible_collections.ephemera.workspaces.plugins.module_utils.providers.proxmox.provider import ProxmoxProvider
    vmid = int(api.cluster.nextid.get())
    with ctl.journal() as journal:
        version = journal.begin_template_version(name, {'vmid': int(ctl.info['template_vmid'])},
                                                 lambda v: 'tpl-%s-v%d' % (name, v))
    marker = ProxmoxProvider(None, ctl.secret()).marker(version['workspace'], vmid)
    assert wait_task(api, api.nodes(node).lxc(ctl.info['template_vmid']).clone.post(
        newid=vmid, hostname='tpl-%s' % version['version'], full=1, description=marker))['exitstatus'] == 'OK'
    assert wait_task(api, api.nodes(node).lxc(vmid).template.post())['exitstatus'] == 'OK'
    with ctl.journal() as journal:
        journal.update_template_version(name, version['version'], resource_id=vmid, location=node, provider='proxmox',
                                        tools={'git': '2', 'claude': '1'})
        journal.switch_template(name, version['version'], finish_build=True)
    return version['version']


def test_a_template_switch_drains_its_pool_and_the_next_fill_makes_members_of_the_version_switched_to(
        cluster, repo, tmp_path):
    ctl = Controller(cluster, tmp_path / 'ctl')
    try:
        node = ctl.info['template_node']
        # The journal and its secret exist once a run made them.
        assert fill(ctl, []).ok
        first = built_version(ctl, 'tswitch', ctl.api, node)
        second = built_version(ctl, 'tswitch', ctl.api, node)
        declaration = [{'name': 'switched', 'location': node, 'template': 'tswitch', 'size': 1}]
        assert fill(ctl, declaration).ok
        old = members(ctl, 'switched', 'warm')[0]
        assert old['version'] == second
        old_vmid = ctl.workspace(old['member'])['resource_id']

        back = ctl.create({'template': 'tswitch', 'version': first},
                          playbook=os.path.join(ROOT, 'playbooks', 'template_build.yml'))
        assert back.ok, back.explain()
        # Released, never given out: the container is still there until the next fill deletes it.
        assert pools.member(ctl.journal(), 'switched', old['member'])['state'] == 'released'
        assert ctl.ours(old['member']) == [old_vmid]

        refill = fill(ctl, declaration)
        assert refill.ok, refill.explain()
        assert ctl.ours(old['member']) == []
        now = members(ctl, 'switched')
        assert [(m['state'], m['version']) for m in now] == [('warm', first)]
        run = ctl.create(request_vars(repo.url, 'afterswitch', ephemera_template='tswitch',
                                      ephemera_pools=declaration))
        assert run.ok, run.explain()
        ws = ctl.workspace('afterswitch')
        assert ws['facts']['from_pool'] == 'switched' and ws['params']['template_version']['version'] == first
        assert ws['facts']['pool_member'] == now[0]['member']
    finally:
        ctl.stop()


def test_two_creates_at_once_and_one_warm_member_one_takes_it_the_other_is_cold(cluster, repo, tmp_path):
    ctl = Controller(cluster, tmp_path / 'ctl')
    try:
        declaration = declared(ctl, 'race', 1)
        assert fill(ctl, declaration).ok
        member = members(ctl, 'race', 'warm')[0]['member']
        inventory = os.path.join(ctl.workdir, 'race.json')
        with open(inventory, 'w') as out:
            json.dump({'workspaces': {'hosts': dict((name, {'workspace': name}) for name in ('race-a', 'race-b')),
                                      'vars': {'ansible_connection': 'local',
                                               'ansible_python_interpreter': sys.executable}}}, out)
        request = request_vars(repo.url, 'race-a', ephemera_pools=declaration)
        request.pop('workspace')
        run = ctl.create(request, inventory=inventory, target='workspaces', forks=2)
        assert run.ok, run.explain()
        taken = dict((name, ctl.workspace(name)['facts'].get('from_pool')) for name in ('race-a', 'race-b'))
        assert sorted(taken.values(), key=str) == [None, 'race'], taken
        holder = [name for name, pool in taken.items() if pool][0]
        assert [(m['member'], m['workspace']) for m in members(ctl, 'race')] == [(member, holder)]
        assert ctl.ours('race-a') == [ctl.workspace('race-a')['resource_id']]
        assert ctl.ours('race-b') == [ctl.workspace('race-b')['resource_id']]
        with ctl.journal() as journal:
            assert pools.violations(journal) == []
    finally:
        ctl.stop()
