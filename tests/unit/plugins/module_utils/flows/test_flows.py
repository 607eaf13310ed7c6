"""The create, destroy and reconcile flows on the provider seam, against an in-process fakepve.

Every step that talks to the provider runs for real; each is run again after each kind of error the seam
knows (refused, not found, conflict, locked, transient, unknown outcome, a failed task) to show the rerun
resumes, and in check mode to show nothing changes. The guest steps need real guests: tests/integration.
"""

import pytest

from ansible_collections.ephemera.workspaces.plugins.module_utils.core import ownership
from ansible_collections.ephemera.workspaces.plugins.module_utils.core.errors import EphemeraError
from ansible_collections.ephemera.workspaces.plugins.module_utils.flows.base import Flow, StepResult
from ansible_collections.ephemera.workspaces.plugins.module_utils.flows.create import CreateError, CreateFlow
from ansible_collections.ephemera.workspaces.plugins.module_utils.flows.destroy import (
    DestroyError,
    DestroyFlow,
    NeedsOperator,
    NotOurs,
    destroy_orphan,
)
from ansible_collections.ephemera.workspaces.plugins.module_utils.flows.reconcile import Reconciler
from ansible_collections.ephemera.workspaces.plugins.module_utils.providers import base
from ansible_collections.ephemera.workspaces.plugins.plugin_utils.in_process import run_in_process

from flowsite import POOL, SECRET, TEMPLATE

PROVIDER_STEPS = ('request', 'vmid', 'clone', 'wait_clone', 'configure', 'start', 'address')


def no_sleep(seconds):
    pass


def create(site, name, steps=PROVIDER_STEPS, check_mode=False, diff=False, **changes):
    """The results of ``steps`` of a create flow, each on a fresh flow as each task of a run has one."""
    results = []
    for step in steps:
        flow = CreateFlow(None if check_mode and site.journal.get_workspace(name) is None and step == 'request'
                          else site.journal, site.provider, site.create_params(name, **changes), SECRET,
                          check_mode=check_mode, sleep=no_sleep, diff=diff)
        results.append(flow.run(step))
    return results


def destroy(site, name, steps=('mark', 'shutdown', 'stop', 'delete', 'finish'), check_mode=False, **changes):
    return [DestroyFlow(site.journal, site.provider, site.destroy_params(name, **changes), SECRET,
                        check_mode=check_mode, sleep=no_sleep).run(step) for step in steps]


def ws(site, name):
    return site.journal.get_workspace(name)


def actions(site, name):
    return [e['action'] for e in site.journal.events(name)]


def failing(site, name, step, **changes):
    with pytest.raises(EphemeraError) as caught:
        create(site, name, [step], **changes)
    return caught.value


# ------------------------------------------------------------------------------------ the base

def test_the_base_saves_with_the_event_marks_steps_done_and_records_failures(site):
    site.journal.create_workspace('b1', status='provisioning', params={'node': 'pve1'})
    flow = Flow(site.journal, site.provider.client, {'name': 'b1'}, SECRET)
    assert isinstance(flow.provider, base.Provider) and flow.provider.secret == SECRET
    flow.save('noted', detail={'x': 1}, address='127.0.0.9')
    flow.done('vmid', **flow.resource_fields(candidate_id=105))
    assert (flow.candidate_id, flow.location, flow.ws['address']) == (105, 'pve1', '127.0.0.9')
    failed = flow.fail('clone', base.TaskFailed('boom'))
    assert failed.recorded and ws(site, 'b1')['status'] == 'failed'
    assert ws(site, 'b1')['failure'] == {'step': 'clone', 'message': 'boom'}
    assert actions(site, 'b1')[-3:] == ['noted', 'step_done', 'step_failed']
    assert 'vmid' in ws(site, 'b1')['progress']
    assert StepResult(True, 'm', diff={'before': {}, 'after': {}}, x=1).extra == {'x': 1}


# ------------------------------------------------------------------------------------ create

def test_the_provider_steps_create_a_started_container_with_our_marker_and_a_rerun_changes_nothing(site):
    results = create(site, 'c1')
    assert all(r.changed for r in results), [r.msg for r in results]
    record = ws(site, 'c1')
    vmid = record['vmid']
    assert (record['candidate_vmid'], record['node'], record['status']) == (vmid, 'pve1', 'booting')
    assert sorted(record['upids']) == ['clone', 'start'] and record['address'] == '127.0.77.10'
    assert set(PROVIDER_STEPS) <= set(record['progress'])
    ct = site.pve.ct(vmid)
    assert ct.status == 'running' and ct.config['hostname'] == 'agent-c1' and ct.pool == POOL
    assert ct.config['tags'] == 'ephemera' and ct.config['memory'] == 2048
    resource = site.provider.find(vmid, 'pve1')
    assert site.provider.verify(resource, 'c1') == ownership.VERIFIED
    before = len(site.changes_sent())
    again = create(site, 'c1')
    assert not any(r.changed for r in again) and len(site.changes_sent()) == before
    assert [r.msg for r in again[1:]] == ['%s: already done' % s for s in (
        'candidate vmid', 'clone', 'wait clone task', 'configure', 'start', 'wait address')]


def test_check_mode_without_a_journal_record_changes_nothing(site):
    results = create(site, 'c2', check_mode=True)
    assert [r.changed for r in results] == [True] * len(PROVIDER_STEPS)
    # No ref given: the default branch, and a file path's is named by the guest's clone.
    assert results[0].msg == 'request: would record workspace c2 (ref: the default branch, which the checkout names)'
    assert [r.msg for r in results[1:3]] == ['candidate vmid: would run', 'clone: would run']
    assert site.changes_sent() == [] and ws(site, 'c2') is None


def test_check_mode_on_a_half_made_workspace_reports_the_rest_and_changes_nothing(site):
    create(site, 'c3', ('request', 'vmid', 'clone', 'wait_clone'))
    before, record = len(site.changes_sent()), ws(site, 'c3')
    results = create(site, 'c3', check_mode=True)
    assert [r.changed for r in results] == [False, False, False, False, True, True, True]
    assert len(site.changes_sent()) == before and ws(site, 'c3')['generation'] == record['generation']


def test_a_request_for_a_template_that_cannot_work_is_refused_before_anything_is_recorded(site):
    err = failing(site, 'c4', 'request', template=4242)
    assert isinstance(err, CreateError) and err.details['step'] == 'request'
    assert 'Template 4242 does not exist' in str(err) and ws(site, 'c4') is None


def test_vmid_after_a_transient_failure_is_recorded_as_failed_and_the_rerun_takes_a_candidate(site):
    create(site, 'c5', ('request',))
    site.pve.fail('GET', '/cluster/nextid', status=503, message='Service Unavailable', times=1)
    err = failing(site, 'c5', 'vmid')
    assert isinstance(err, base.Transient)
    assert (ws(site, 'c5')['status'], ws(site, 'c5')['failure']['step']) == ('failed', 'vmid')
    assert create(site, 'c5', ('vmid',))[0].changed and ws(site, 'c5')['candidate_vmid'] == 100
    assert ws(site, 'c5')['failure'] is None


def test_clone_after_a_conflict_takes_a_new_candidate_and_leaves_the_other_container_alone(site):
    create(site, 'c6', ('request', 'vmid'))
    site.pve.add_ct(100, 'theirs')
    result = create(site, 'c6', ('clone',))[0]
    assert result.extra['vmid'] == 101 and ws(site, 'c6')['candidate_vmid'] == 101
    moved = [e['detail'] for e in site.journal.events('c6') if e['action'] == 'candidate_vmid' and 'why' in e['detail']]
    assert moved == [{'old': 100, 'new': 101, 'why': 'already exists'}]
    assert site.pve.ct(100).config['hostname'] == 'theirs'


def sibling_takes_each_candidate(site, monkeypatch, times):
    """Another client clones to each id we are about to clone to, ``times`` times (as the other forks of a run
    of many do); the ids it took."""
    taken = []
    allocate = site.provider.allocate

    def racing(allocation):
        if len(taken) < times:
            site.pve.add_ct(allocation.candidate, 'sibling-%d' % len(taken))
            taken.append(allocation.candidate)
        return allocate(allocation)
    monkeypatch.setattr(site.provider, 'allocate', racing)
    return taken


def clone_pausing(site, name, pauses):
    return CreateFlow(site.journal, site.provider, site.create_params(name), SECRET, sleep=pauses.append).run('clone')


def test_clone_that_loses_its_id_again_and_again_to_other_clients_pauses_between_tries_and_gets_one(site, monkeypatch):
    create(site, 'c6b', ('request', 'vmid'))
    taken = sibling_takes_each_candidate(site, monkeypatch, 20)
    pauses = []
    result = clone_pausing(site, 'c6b', pauses)
    assert result.extra['vmid'] == 120 and taken == list(range(100, 120))
    assert len(pauses) == 20 and all(0 < p <= 1.5 for p in pauses)
    assert [site.pve.ct(v).config['hostname'] for v in (100, 119)] == ['sibling-0', 'sibling-19']


def test_clone_that_never_gets_an_id_gives_up_saying_which_were_taken_and_what_to_do(site, monkeypatch):
    create(site, 'c6c', ('request', 'vmid'))
    sibling_takes_each_candidate(site, monkeypatch, 1000)
    with pytest.raises(CreateError) as caught:
        clone_pausing(site, 'c6c', [])
    assert 'Gave up after 32 clone attempts: other clients took every VMID offered to us' in str(caught.value)
    assert '(100, 101, ' in str(caught.value) and 'fewer forks' in str(caught.value)
    assert ws(site, 'c6c')['failure']['step'] == 'clone' and ws(site, 'c6c')['vmid'] is None


def test_clone_whose_answers_are_all_lost_gives_up_without_blaming_other_clients(site, monkeypatch):
    create(site, 'c6d', ('request', 'vmid'))
    sent = []

    def lost(allocation):
        sent.append(allocation.candidate)
        raise base.UnknownOutcome('Connection reset by peer')
    monkeypatch.setattr(site.provider, 'allocate', lost)
    with pytest.raises(CreateError) as caught:
        clone_pausing(site, 'c6d', [])
    assert 'Gave up after 32 clone attempts: no answer to them came back, and CT 100 did not show' in str(caught.value)
    assert 'other clients' not in str(caught.value) and sent == [100] * 32


def test_clone_whose_earlier_request_the_provider_keeps_as_debt_fails_at_once_with_its_sentence(site, monkeypatch):
    # An Azure set's PUT recorded as dispatched that Azure never showed (providers/azure/members.py): the provider
    # will not send it again, so looking for the clone and allocating again would only meet the same debt.
    create(site, 'c6e', ('request', 'vmid'))
    asked = []
    debt = 'The PUT of pip c6e-1-pip was sent and its answer lost, and Azure has not shown it since (10 s).'

    def kept(allocation):
        asked.append(allocation.candidate)
        raise base.KeptAsDebt(debt)
    monkeypatch.setattr(site.provider, 'allocate', kept)
    with pytest.raises(base.KeptAsDebt):
        clone_pausing(site, 'c6e', [])
    assert asked == [100]
    record = ws(site, 'c6e')
    assert record['status'] == 'failed' and record['failure']['step'] == 'clone'
    assert record['failure']['message'] == debt and actions(site, 'c6e').count('clone') == 1


def test_clone_after_a_conflict_with_our_own_earlier_clone_adopts_it(site):
    create(site, 'c7', ('request', 'vmid'))
    # An earlier run recorded the marker nonce with its dispatch, and its clone went through.
    flow = CreateFlow(site.journal, site.provider, site.create_params('c7'), SECRET)
    nonce = ownership.new_nonce()
    flow.save('clone', kind='dispatched', facts=dict(flow.ws['facts'], clone_dispatched=99, marker_nonce=nonce))
    site.provider.wait(site.provider.allocate(base.Allocation(100, 'c7', TEMPLATE, 'pve1', 'agent-c7', POOL,
                                                              nonce=nonce)), 30)
    result = create(site, 'c7', ('clone',))[0]
    assert result.msg.startswith('clone: adopted CT 100 (our clone was already there)')
    assert 'adopted' in actions(site, 'c7')
    assert create(site, 'c7', ('wait_clone',))[0].changed and ws(site, 'c7')['vmid'] == 100


def test_clone_whose_answer_was_lost_is_looked_at_first_and_sent_again_when_absent(site):
    create(site, 'c8', ('request', 'vmid'))
    site.pve.fail('POST', '/nodes/pve1/lxc/%d/clone' % TEMPLATE, status=502, message='Bad Gateway', html=True,
                  times=1)
    result = create(site, 'c8', ('clone',))[0]
    assert result.msg == 'clone: CT 100 from template %d' % TEMPLATE
    assert actions(site, 'c8').count('clone') == 3  # dispatched, dispatched again, its task observed


def test_clone_sent_by_a_run_that_died_is_adopted_by_the_next_run(site):
    create(site, 'c9', ('request', 'vmid'))
    flow = CreateFlow(site.journal, site.provider, site.create_params('c9'), SECRET)
    nonce = ownership.new_nonce()
    flow.save('clone', kind='dispatched', facts=dict(flow.ws['facts'], clone_dispatched=100, clone_dispatched_at=0,
                                                     marker_nonce=nonce))
    upid = site.provider.allocate(base.Allocation(100, 'c9', TEMPLATE, 'pve1', 'agent-c9', POOL, nonce=nonce))  # then it died
    result = create(site, 'c9', ('clone',))[0]
    assert 'found after an earlier run lost track of its clone' in result.msg
    assert ws(site, 'c9')['upids']['clone'] == upid  # its task, found in the node's task list


def test_clone_from_a_locked_template_backs_off_and_goes_on(site):
    create(site, 'c10', ('request', 'vmid'))
    site.pve.fail('POST', '/nodes/pve1/lxc/%d/clone' % TEMPLATE, error='locked', times=2)
    assert create(site, 'c10', ('clone',))[0].changed
    locked = [e['detail'] for e in site.journal.events('c10') if e['action'] == 'clone' and 'locked' in e['detail']]
    assert len(locked) == 2 and 'CT is locked' in locked[0]['locked']


def test_clone_from_a_template_that_stays_locked_fails_and_the_rerun_resumes(site):
    create(site, 'c11', ('request', 'vmid'))
    site.pve.fail('POST', '/nodes/pve1/lxc/%d/clone' % TEMPLATE, error='locked')
    err = failing(site, 'c11', 'clone', lock_timeout=0)
    assert 'stayed locked' in str(err) and ws(site, 'c11')['failure']['step'] == 'clone'
    site.pve.failures.clear()
    assert create(site, 'c11', ('clone', 'wait_clone'))[1].changed


def test_a_refused_clone_fails_the_step_and_keeps_the_candidate(site):
    create(site, 'c12', ('request', 'vmid'))
    site.pve.fail('POST', '/nodes/pve1/lxc/%d/clone' % TEMPLATE, error='permission_denied', times=1)
    err = failing(site, 'c12', 'clone')
    assert err.error_kind == base.REFUSED and ws(site, 'c12')['candidate_vmid'] == 100
    assert create(site, 'c12', ('clone',))[0].changed


def test_a_failed_clone_task_keeps_its_log_drops_the_candidate_and_the_rerun_clones_again(site):
    create(site, 'c13', ('request', 'vmid'))
    site.pve.fail('POST', '/nodes/pve1/lxc/%d/clone' % TEMPLATE, error='clone_failed', times=1)
    create(site, 'c13', ('clone',))
    err = failing(site, 'c13', 'wait_clone')
    failure = ws(site, 'c13')['failure']
    assert isinstance(err, base.TaskFailed)
    assert failure['step'] == 'wait_clone' and failure['phase'] == 'provisioning'
    assert failure['upid'] == err.task_id and failure['log_tail']
    assert ws(site, 'c13')['candidate_vmid'] is None and 'clone' not in ws(site, 'c13')['upids']
    assert site.pve.ct(100) is None
    results = create(site, 'c13', ('vmid', 'clone', 'wait_clone'))
    assert all(r.changed for r in results) and ws(site, 'c13')['vmid'] == 100


def test_configure_refuses_a_container_that_is_not_ours(site):
    create(site, 'c14', ('request', 'vmid', 'clone', 'wait_clone'))
    site.pve.ct(100).config['description'] = 'someone else\'s now'
    err = failing(site, 'c14', 'configure')
    assert 'CT 100 does not carry our marker for c14; refusing to touch it' in str(err)
    assert site.pve.ct(100).config['memory'] != 2048


def test_configure_returns_a_diff_when_asked_and_check_mode_shows_it_without_changing(site):
    create(site, 'c15', ('request', 'vmid', 'clone', 'wait_clone'))
    before = dict(site.pve.ct(100).config)
    checked = create(site, 'c15', ('configure',), check_mode=True, diff=True)[0]
    assert checked.changed and checked.msg == 'configure: would change cores, memory, net0, tags'
    assert checked.diff['before'] == {'cores': None, 'memory': before['memory'], 'net0': before['net0'], 'tags': None}
    assert checked.diff['after']['memory'] == 2048 and 'ip=127.0.77.10/8' in checked.diff['after']['net0']
    assert site.pve.ct(100).config == before and 'configure' not in ws(site, 'c15')['progress']
    assert site.journal.address_leases() == []  # check mode leases nothing
    done = create(site, 'c15', ('configure',), diff=True)[0]
    assert done.diff == checked.diff and site.pve.ct(100).config['memory'] == 2048
    assert create(site, 'c15', ('configure',))[0].diff is None  # without --diff: none


def test_configure_in_check_mode_without_diff_reads_nothing(site):
    create(site, 'c16', ('request', 'vmid', 'clone', 'wait_clone'))
    reads = len(site.pve.requests)
    assert create(site, 'c16', ('configure',), check_mode=True)[0].msg == 'configure: would run'
    assert len(site.pve.requests) == reads


def test_configure_whose_digest_went_stale_fails_and_the_rerun_reads_again(site):
    create(site, 'c17', ('request', 'vmid', 'clone', 'wait_clone'))
    site.pve.fail('PUT', '/nodes/pve1/lxc/100/config', error='locked', times=1)
    err = failing(site, 'c17', 'configure')
    assert isinstance(err, base.Locked) and ws(site, 'c17')['failure']['step'] == 'configure'
    assert create(site, 'c17', ('configure',))[0].changed


def test_a_start_that_failed_twice_is_kept_for_diagnosis_and_the_rerun_starts_again(site):
    create(site, 'c18', ('request', 'vmid', 'clone', 'wait_clone', 'configure'))
    site.pve.ct(100).start_error = 'no rootfs'
    err = failing(site, 'c18', 'start')
    assert 'CT 100 did not start, twice. First start:' in str(err) and 'Start after a stop:' in str(err)
    failure = ws(site, 'c18')['failure']
    assert (failure['phase'], failure['upid']) == ('booting', err.task_id)
    assert 'TASK ERROR: no rootfs' in failure['log_tail'] and site.pve.ct(100).status == 'stopped'
    assert [e['action'] for e in site.journal.events('c18')].count('start_failed') == 1
    site.pve.ct(100).start_error = None
    result = create(site, 'c18', ('start',))[0]
    assert result.changed and result.extra['upid'] != err.task_id and site.pve.ct(100).status == 'running'


def test_a_start_whose_answer_was_lost_and_that_never_ran_is_started_once_more(site):
    create(site, 'c19', ('request', 'vmid', 'clone', 'wait_clone', 'configure'))
    site.pve.fail('POST', '/nodes/pve1/lxc/100/status/start', status=502, message='Bad Gateway', html=True, times=1)
    result = create(site, 'c19', ('start',), task_timeout=1)[0]
    assert result.changed and site.pve.ct(100).status == 'running'
    assert 'started on the second try' in result.msg
    assert 'CT 100 is not running 1 s after it was started' in ws(site, 'c19')['facts']['cold_start_retry']


def test_a_start_that_fails_twice_after_lost_answers_says_both(site):
    create(site, 'c19b', ('request', 'vmid', 'clone', 'wait_clone', 'configure'))
    site.pve.fail('POST', '/nodes/pve1/lxc/100/status/start', status=502, message='Bad Gateway', html=True, times=2)
    err = failing(site, 'c19b', 'start', task_timeout=1)
    assert str(err).count('is not running 1 s after it was started') == 2
    assert create(site, 'c19b', ('start',))[0].changed and site.pve.ct(100).status == 'running'


def test_start_of_a_container_that_runs_already_is_done(site):
    create(site, 'c20', ('request', 'vmid', 'clone', 'wait_clone', 'configure'))
    site.provider.wait(site.provider.start(site.provider.ref(100, 'pve1')), 30)
    result = create(site, 'c20', ('start',))[0]
    assert (result.changed, result.msg) == (False, 'start: CT 100 is running')


def test_start_of_a_container_that_vanished_is_not_found(site):
    create(site, 'c21', ('request', 'vmid', 'clone', 'wait_clone', 'configure'))
    site.provider.wait(site.provider.delete(site.provider.ref(100, 'pve1')), 30)
    err = failing(site, 'c21', 'start')
    assert isinstance(err, base.NotFound) and ws(site, 'c21')['failure']['step'] == 'start'


def test_no_address_is_a_booting_failure_after_bounded_looks(site):
    create(site, 'c22', ('request', 'vmid', 'clone', 'wait_clone', 'configure', 'start'), address_mode='dhcp')
    err = failing(site, 'c22', 'address', address_mode='dhcp', address_timeout=1)
    assert 'CT 100 did not report an address from DHCP within 1 s' in str(err)
    assert ws(site, 'c22')['failure']['phase'] == 'booting'
    # The message says what to check: the bridge's DHCP server and its range.
    assert 'Check the bridge and the DHCP server on it (that it runs and has free leases in its range)' in str(err)
    assert 'address_timeout gives a slow network more time' in str(err)


def test_a_start_that_never_runs_says_what_to_check(site):
    create(site, 'c19c', ('request', 'vmid', 'clone', 'wait_clone', 'configure'))
    site.pve.fail('POST', '/nodes/pve1/lxc/100/status/start', status=502, message='Bad Gateway', html=True, times=2)
    err = failing(site, 'c19c', 'start', task_timeout=1)
    assert 'Check its start task and console in the provider' in str(err)


# ------------------------------------------------------------------------------------ destroy

def made(site, name):
    create(site, name)
    return ws(site, name)['vmid']


def test_destroy_runs_every_step_and_a_rerun_changes_nothing(site):
    vmid = made(site, 'd1')
    inspected = DestroyFlow(site.journal, site.provider, site.destroy_params('d1'), SECRET).run('inspect')
    assert (inspected.extra['present'], inspected.extra['running'], inspected.extra['verdict']) == (
        True, True, ownership.VERIFIED)
    results = destroy(site, 'd1')
    assert [r.msg for r in results] == [
        'mark destroying: d1 is being destroyed; new agent operations are refused', 'shutdown: CT %d stopped' % vmid,
        'force stop: CT %d is not running' % vmid, 'delete: CT %d deleted' % vmid,
        'mark destroyed: d1 destroyed; address 127.0.77.10 released']
    assert site.pve.ct(vmid) is None and ws(site, 'd1')['status'] == 'destroyed'
    assert sorted(ws(site, 'd1')['upids']) == ['clone', 'delete', 'shutdown', 'start']
    delete = [e['detail'] for e in site.journal.events('d1') if e['action'] == 'delete' and e['kind'] == 'dispatched']
    assert delete == [{'vmid': vmid, 'node': 'pve1', 'purge': 1}]
    again = destroy(site, 'd1')
    assert not any(r.changed for r in again)


def test_destroy_in_check_mode_changes_nothing(site):
    vmid = made(site, 'd2')
    before, record = len(site.changes_sent()), ws(site, 'd2')
    results = destroy(site, 'd2', check_mode=True)
    assert results[0].msg == 'mark destroying: would mark d2'
    assert len(site.changes_sent()) == before and ws(site, 'd2')['generation'] == record['generation']
    assert site.pve.ct(vmid).status == 'running'
    # The prediction is the real run's: the shutdown stops the container, so the forced stop has nothing to do.
    assert results[2].msg.startswith('force stop: not expected')
    real = destroy(site, 'd2')
    assert [r.changed for r in results] == [r.changed for r in real] == [True, True, False, True, True]


def set_fork(site, name, fork):
    record = ws(site, name)
    site.journal.update_workspace(name, record['generation'], facts=dict(record['facts'], fork=fork))


@pytest.mark.parametrize('state', ['started', 'snapshotted', 'copied', 'adopted'])
def test_a_child_of_an_unfinished_fork_is_not_destroyed_alone(site, state):
    made(site, 'fp-' + state)
    vmid = made(site, 'fc-' + state)
    set_fork(site, 'fp-' + state, {'id': 'f1', 'state': state, 'children': [{'name': 'fc-' + state}]})
    set_fork(site, 'fc-' + state, {'parent': 'fp-' + state, 'id': 'f1'})
    before, record = len(site.changes_sent()), ws(site, 'fc-' + state)
    for step in ('retain', 'mark', 'shutdown', 'delete', 'finish'):
        with pytest.raises(DestroyError) as caught:
            destroy(site, 'fc-' + state, steps=(step,))
        message = str(caught.value)
        assert 'child of fork f1 of fp-%s, which is not finished (%s)' % (state, state) in message
        assert 'ansible-playbook ephemera.workspaces.fork -e workspace=fp-%s' % state in message
        assert ('fork_abandon=true' in message) == (state != 'adopted')
    assert len(site.changes_sent()) == before and ws(site, 'fc-' + state)['generation'] == record['generation']
    assert site.pve.ct(vmid).status == 'running'


def test_the_fork_itself_and_a_finished_fork_destroy_a_child(site):
    made(site, 'fp-ok')
    for child, by_fork, state in (('fc-own', 'f1', 'copied'), ('fc-done', None, 'done')):
        vmid = made(site, child)
        set_fork(site, 'fp-ok', {'id': 'f1', 'state': state, 'children': [{'name': child}]})
        set_fork(site, child, {'parent': 'fp-ok', 'id': 'f1'})
        for step in ('mark', 'shutdown', 'stop', 'delete', 'finish'):
            flow = DestroyFlow(site.journal, site.provider, site.destroy_params(child), SECRET, sleep=no_sleep)
            flow.for_fork = by_fork
            flow.run(step)
        assert site.pve.ct(vmid) is None and ws(site, child)['status'] == 'destroyed'


@pytest.mark.parametrize('description, verdict', [
    (None, ownership.ABSENT),
    ('ephemera-workspace: v1 workspace=d3 controller=c-0 vmid=100 token=00', ownership.FOREIGN),
])
def test_a_container_that_is_not_ours_is_never_touched(site, description, verdict):
    vmid = made(site, 'd3')
    site.pve.ct(vmid).config.pop('description')
    if description:
        site.pve.ct(vmid).config['description'] = description
    destroy(site, 'd3', ('mark',))
    with pytest.raises(NotOurs) as caught:
        destroy(site, 'd3', ('shutdown',))
    assert caught.value.details['verdict'] == verdict and "It was not touched" in str(caught.value)
    assert site.pve.ct(vmid).status == 'running' and 'ownership_refused' in actions(site, 'd3')


def test_a_guest_that_ignores_the_shutdown_is_stopped_by_force(site):
    vmid = made(site, 'd4')
    site.pve.ct(vmid).shutdown_secs = 600
    results = destroy(site, 'd4', ('mark', 'shutdown', 'stop'))
    assert results[1].msg == 'shutdown: CT %d ignored the shutdown; it is stopped by force next' % vmid
    assert 'shutdown_incomplete' in actions(site, 'd4')
    assert results[2].msg == 'force stop: CT %d stopped' % vmid and site.pve.ct(vmid).status == 'stopped'


def test_a_locked_container_is_deleted_once_the_lock_clears(site):
    vmid = made(site, 'd5')
    destroy(site, 'd5', ('mark', 'shutdown', 'stop'))
    site.pve.fail('DELETE', '/nodes/pve1/lxc/%d' % vmid, error='config_lock_timeout', times=1)
    assert destroy(site, 'd5', ('delete',))[0].msg == 'delete: CT %d deleted' % vmid
    assert 'delete_locked' in actions(site, 'd5')


def test_a_container_that_stays_locked_becomes_cleanup_debt_settled_by_a_later_finish(site):
    vmid = made(site, 'd6')
    destroy(site, 'd6', ('mark', 'shutdown', 'stop'))
    site.pve.fail('DELETE', '/nodes/pve1/lxc/%d' % vmid, error='locked')
    with pytest.raises(EphemeraError, match='stayed locked'):
        destroy(site, 'd6', ('delete',), lock_timeout=0)
    [debt] = site.journal.cleanup_debts('d6')
    assert debt['resource'] == 'lxc/%d@pve1' % vmid and debt['attempts'] == 1
    site.pve.failures.clear()
    assert [r.changed for r in destroy(site, 'd6', ('delete', 'finish'))] == [True, True]
    assert site.journal.cleanup_debts('d6') == []


def test_a_delete_whose_answer_was_lost_looks_and_deletes_again(site):
    vmid = made(site, 'd7')
    destroy(site, 'd7', ('mark', 'shutdown', 'stop'))
    site.pve.fail('DELETE', '/nodes/pve1/lxc/%d' % vmid, status=502, message='Bad Gateway', html=True, times=1)
    assert destroy(site, 'd7', ('delete',))[0].changed and site.pve.ct(vmid) is None
    assert 'delete_outcome_unknown' in actions(site, 'd7')


def test_a_delete_refused_for_good_is_cleanup_debt_and_protection_needs_a_person(site):
    vmid = made(site, 'd8')
    destroy(site, 'd8', ('mark', 'shutdown', 'stop'))
    site.pve.ct(vmid).config['protection'] = 1
    with pytest.raises(NeedsOperator, match='pct set %d --protection 0' % vmid):
        destroy(site, 'd8', ('delete',))
    assert ws(site, 'd8')['failure']['needs_operator'] and site.journal.cleanup_debts('d8')
    del site.pve.ct(vmid).config['protection']
    site.pve.fail('DELETE', '/nodes/pve1/lxc/%d' % vmid, error='no_quorum', times=1)
    with pytest.raises(base.Transient):
        destroy(site, 'd8', ('delete',))
    assert site.journal.cleanup_debts('d8')[0]['attempts'] == 2
    assert destroy(site, 'd8', ('delete', 'finish'))[1].changed


def test_a_container_already_gone_is_a_finished_delete_and_a_newcomer_at_its_id_is_left_alone(site):
    vmid = made(site, 'd9')
    destroy(site, 'd9', ('mark', 'shutdown', 'stop', 'delete'))
    site.pve.add_ct(vmid, 'newcomer', status='running')
    assert destroy(site, 'd9', ('delete', 'finish'))[1].changed
    reused = [e['detail'] for e in site.journal.events('d9') if e['action'] == 'vmid_reused']
    assert reused and reused[0]['vmid'] == vmid and site.pve.ct(vmid).status == 'running'


def test_an_orphan_is_deleted_only_when_its_marker_verifies(site):
    vmid = made(site, 'o1')
    site.journal.update_workspace('o1', ws(site, 'o1')['generation'], status='destroyed')
    site.pve.add_ct(150, 'stray', status='running')
    with pytest.raises(NotOurs):
        destroy_orphan(site.journal, site.provider, SECRET, 150)
    assert destroy_orphan(site.journal, site.provider, SECRET, vmid, check_mode=True).msg.startswith('would delete')
    result = destroy_orphan(site.journal, site.provider.client, SECRET, vmid)
    assert result.msg == 'deleted orphan CT %d of workspace o1' % vmid and site.pve.ct(vmid) is None
    assert destroy_orphan(site.journal, site.provider, SECRET, vmid).msg == 'CT %d does not exist; nothing to ' \
        'destroy' % vmid


# ------------------------------------------------------------------------------------ reconcile

def test_reconcile_reports_what_it_finds_and_finishes_a_decided_destruction(site):
    ready = made(site, 'r-ready')
    site.journal.update_workspace('r-ready', ws(site, 'r-ready')['generation'], status='ready')
    gone = made(site, 'r-gone')
    pending = made(site, 'r-pending')
    destroy(site, 'r-pending', ('mark',))
    site.provider.wait(site.provider.stop(site.provider.ref(gone, 'pve1')), 30)
    site.provider.wait(site.provider.delete(site.provider.ref(gone, 'pve1')), 30)
    site.journal.update_workspace('r-gone', ws(site, 'r-gone')['generation'], status='ready')
    site.pve.add_ct(160, 'foreign', pool=POOL)
    site.journal.record_cleanup_debt('r-ready', 'lxc/161@pve1', 'locked')
    site.journal.record_cleanup_debt('r-ready', 'guest:git-askpass@lxc/%d' % ready, 'left')
    params = {'pool': POOL, 'task_timeout': 30, 'lock_timeout': 2, 'shutdown_timeout': 5}
    checked = Reconciler(site.journal, site.provider.client, SECRET, params, check_mode=True).run()
    assert checked['counts']['destroy_pending'] == 1 and site.pve.ct(pending) is not None
    for debt in site.journal.cleanup_debts():
        site.journal._conn.execute('UPDATE cleanup_debt SET next_retry = 0 WHERE resource = ?', (debt['resource'],))
    report = Reconciler(site.journal, site.provider, SECRET, params).run()
    found = {f['workspace'] or f['vmid']: f['kind'] for f in report['findings']}
    assert found['r-ready'] == 'ok' and found['r-gone'] == 'missing' and found['r-pending'] == 'destroyed'
    assert found[160] == 'foreign' and site.pve.ct(pending) is None
    assert report['counts']['debt_settled'] == 1 and report['counts']['debt_open'] == 1
    assert [d['resource'] for d in site.journal.cleanup_debts('r-ready')] == ['guest:git-askpass@lxc/%d' % ready]


def test_reconcile_without_a_journal_record_reports_our_container_as_an_orphan(site):
    vmid = made(site, 'r-lost')
    site.journal._conn.execute("DELETE FROM workspaces WHERE name = 'r-lost'")
    report = Reconciler(site.journal, site.provider, SECRET, {'pool': POOL}, check_mode=True).run()
    [orphan] = [f for f in report['findings'] if f['vmid'] == vmid]
    assert (orphan['kind'], orphan['workspace']) == ('orphan', 'r-lost')
    other = Reconciler(site.journal, site.provider, b'another secret', {'pool': POOL}, check_mode=True).run()
    assert [f['kind'] for f in other['findings'] if f['vmid'] == vmid] == ['foreign']


# ------------------------------------------------------------------------------------ diff mode, in-process

def test_the_configure_task_returns_its_diff_with_diff_mode(site):
    args = dict(site.connection(), name='m1', template=TEMPLATE, repo='/srv/git/app.git', ssh_private_key=site.key_path,
                purpose='p', address_mode='static', address_range='127.0.78.10-127.0.78.12', address_prefix=8)
    for step in ('request', 'vmid', 'clone', 'wait_clone'):
        assert not run_in_process('workspace_create', dict(args, step=step)).get('failed')
    checked = run_in_process('workspace_create', dict(args, step='configure'), check_mode=True, diff=True)
    assert checked['changed'] and checked['diff']['after']['memory'] == 2048
    plain = run_in_process('workspace_create', dict(args, step='configure'))
    assert plain['changed'] and 'diff' not in plain
    again = run_in_process('workspace_create', dict(args, step='configure'), diff=True)
    assert not again['changed'] and 'diff' not in again  # done: nothing to show


def test_destroy_of_a_request_that_never_chose_an_id_finishes_without_one(site):
    # A run killed right after it recorded the request: no candidate id, no resource. Its destruction has nothing to
    # look at and nothing to delete, and must finish (the template build's abort of a candidate record does this).
    create(site, 'd3', ('request',))
    assert ws(site, 'd3')['candidate_id'] is None and ws(site, 'd3')['resource_id'] is None
    results = destroy(site, 'd3')
    assert ws(site, 'd3')['status'] == 'destroyed'
    assert [r.changed for r in results][-1] is True
