"""The crash-safety harness can see what it claims to count: each invariant fails on a site broken on purpose,
and a kill lands exactly at the point it names.

The matrix (make faults) reports zeros; these tests show that those zeros are measured, not assumed.
"""

import os

import pytest

from ansible_collections.ephemera.workspaces.plugins.module_utils.core import ownership
from ansible_collections.ephemera.workspaces.plugins.module_utils.providers.proxmox.client import PveClient
from tests.faults import invariants
from tests.faults.matrix import Matrix, points_of
from tests.faults.site import Kill


@pytest.fixture(scope='module')
def ready(site):
    """One workspace made by a clean run, and the points its trace lists."""
    site.clear_faults()
    site.log_requests()
    outcome = site.run([site.create_op('ok1')])
    assert outcome.ok, outcome.explain()
    return outcome


def check(site, names, foreign_before=None):
    return invariants.check(site, names, foreign_before or {}, site.requests(), site.secret(), site.clones(),
                            site.since)


def proxied(site):
    """Our controller's API client, through the proxy (so that the request log sees it)."""
    info = site.info
    return PveClient(info['proxy_url'], api_token_id=info['token_id'], api_token_secret=info['token_secret'],
                     ca_file=info['ca_file'])


def test_a_clean_run_passes_every_invariant_and_its_trace_names_every_kind_of_point(site, ready):
    found, leaks, view = check(site, ['ok1'])
    assert found == {name: [] for name in invariants.NAMES} and leaks == {}
    points = [point for point, nth in points_of(ready.trace, 'ok1')]
    assert 'create.clone pve POST /nodes/*/lxc/*/clone' in points
    assert 'create.clone journal clone' in points and 'create.ready journal ready' in points
    assert 'create.checkout ssh put git-askpass' in points
    assert [p for p in points if p.endswith(' begin')][:3] == ['create.request begin', 'queue.claimed begin',
                                                               'create.request begin']


def test_a_kill_lands_at_its_point_and_nothing_after_it_runs(site, ready):
    point = 'create.configure pve PUT /nodes/*/lxc/*/config'
    outcome = site.run([site.create_op('killed1')], kill=Kill('killed1', point))
    # The whole ansible-playbook run died by SIGKILL at the point: no play recap, no later task.
    assert outcome.killed and not outcome.ok and outcome.run.data is None
    assert outcome.command.startswith('ansible-playbook -i ') and ' ephemera.workspaces.create ' in outcome.command
    assert outcome.trace[-1] == ('killed1', point)
    with site.journal() as journal:
        ws = journal.get_workspace('killed1')
    # The cluster took the config; the journal never heard its answer.
    assert 'configure' not in ws['progress'] and ws['status'] == 'provisioning'
    rerun = site.run([site.create_op('killed1')])
    assert rerun.ok, rerun.explain()


def test_a_container_of_ours_the_journal_does_not_know_is_a_leak(site, ready):
    secret = site.secret()
    vmid = int(site.api.get('/cluster/nextid'))
    upid = site.api.post('/nodes/%s/lxc/%d/clone' % (site.info['template_node'], site.info['template_vmid']),
                         newid=vmid, hostname='agent-ghost', pool=site.info['pool'],
                         description=ownership.render(secret, ownership.controller_id(secret), 'ghost', vmid))
    site.api.wait_task(upid)
    try:
        found, leaks, view = check(site, ['ghost'])
        assert leaks == {vmid: 'ghost: no journal record'}
        # In the pool without a record, but reconcile reports it (as an orphan): not an unrecorded container.
        assert found['unrecorded'] == []
    finally:
        site.api.wait_task(site.api.delete('/nodes/%s/lxc/%d' % (site.info['template_node'], vmid), purge=1))


def test_a_foreign_container_changed_or_touched_by_us_is_counted(site, ready):
    made = site.cluster.foreign_create(pool=site.info['pool'], hostname='theirs')
    vmid = int(made['vmid'])
    before = invariants.ClusterView(site, site.secret()).foreign
    site.clear_faults()
    site.log_requests()
    proxied(site).put('/nodes/%s/lxc/%d/config' % (site.info['template_node'], vmid), memory=999)
    found, leaks, view = check(site, ['ok1'], before)
    assert found['foreign'] == ['foreign CT %d changed: memory' % vmid,
                                'our controller sent PUT /nodes/%s/lxc/%d/config to foreign CT %d'
                                % (site.info['template_node'], vmid, vmid)]


def test_a_mutating_request_the_journal_did_not_announce_is_reported(site, ready):
    with site.journal() as journal:
        vmid = journal.get_workspace('ok1')['vmid']
    node = site.info['template_node']
    site.clear_faults()
    site.log_requests()
    proxied(site).put('/nodes/%s/lxc/%d/config' % (node, vmid), cores=2)
    site.api.wait_task(proxied(site).post('/nodes/%s/lxc/%d/status/stop' % (node, vmid)))
    try:
        found, leaks, view = check(site, ['ok1'])
        assert found['events'] == [
            'PUT /nodes/%s/lxc/%d/config was sent without a dispatched configure recorded before it' % (node, vmid),
            'POST /nodes/%s/lxc/%d/status/stop was sent without a dispatched stop recorded before it' % (node, vmid)]
        # Stopped, its runner no longer answers over SSH: "ready" is a lie the ready invariant sees.
        assert len(found['ready']) == 1 and found['ready'][0].startswith('ok1 is ready but')
    finally:
        site.api.wait_task(site.api.post('/nodes/%s/lxc/%d/status/start' % (node, vmid)))


def test_a_credential_left_behind_is_found_on_the_guest_and_on_the_controller(site, ready):
    with site.journal() as journal:
        vmid = journal.get_workspace('ok1')['vmid']
    scratch = os.path.join(site.guest_root(vmid), 'var', 'lib', 'ephemera', 'tmp')
    os.makedirs(scratch, exist_ok=True)
    left = os.path.join(scratch, 'git-askpass')
    log = os.path.join(os.path.dirname(site.journal_path), 'controller.log')
    with open(left, 'w') as out:
        out.write(site.git_token)
    with open(log, 'w') as out:
        out.write('key=%s\n' % site.agent_key)
    try:
        found = invariants.check_credentials(site)
        assert 'temporary git credential helper left on a guest: %s' % left in found
        assert 'guest file %s holds the git token' % left in found
        assert 'controller file %s holds the agent key' % log in found
    finally:
        os.unlink(left)
        os.unlink(log)
    assert invariants.check_credentials(site) == []


def test_the_matrix_catalogue_covers_both_operations(site, ready):
    matrix = Matrix(site)
    matrix.prepare()
    assert len(matrix.create_points) > 40 and len(matrix.destroy_points) > 20
    assert ('destroy.delete pve DELETE /nodes/*/lxc/*', 1) in matrix.destroy_points
    clean = matrix.cells[0]
    assert clean.ok, clean.as_dict()
