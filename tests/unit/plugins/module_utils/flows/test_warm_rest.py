"""The create's ``warm_rest`` step: what a create that took a warm pool member has left after its candidate step
(configure, bootstrap, checkout, brief, ready), run by one task. Against an in-process fakepve: the member is made
and claimed through the create's provider steps; the guest is a stand-in that counts its connections, and the steps
that need a real guest (bootstrap, checkout, brief) are replaced by ones that note what they find when they act."""

import pytest

from ansible_collections.ephemera.workspaces.plugins.module_utils.core import failpoint
from ansible_collections.ephemera.workspaces.plugins.module_utils.core import pools
from ansible_collections.ephemera.workspaces.plugins.module_utils.core.queue import Queue
from ansible_collections.ephemera.workspaces.plugins.module_utils.flows import create
from ansible_collections.ephemera.workspaces.plugins.module_utils.flows.base import StepResult
from ansible_collections.ephemera.workspaces.plugins.module_utils.flows.create import (
    STEP_LABELS,
    STEP_STATUS,
    WARM_REST,
    CreateError,
    CreateFlow,
    failure_message,
)
from ansible_collections.ephemera.workspaces.plugins.module_utils.operation import Operation
from ansible_collections.ephemera.workspaces.plugins.modules import workspace_create
from ansible_collections.ephemera.workspaces.plugins.plugin_utils.in_process import InProcessModule, ModuleExit

from flowsite import SECRET, TEMPLATE

DECLARED = {'name': 'py', 'location': 'pve1', 'template': TEMPLATE, 'size': 1}
MEMBER = 'py-0a1b2c3d'


def params(site, name, **changes):
    return site.create_params(name, **dict(dict(address_mode='dhcp', pools=[DECLARED]), **changes))


def flow(site, name, **changes):
    return CreateFlow(site.journal, site.provider, params(site, name, **changes), SECRET, sleep=lambda seconds: None)


class FakeGuest:
    """A guest connection that runs nothing; every one made and closed is counted."""

    made = []

    def __init__(self, host, port=22, user='root', key_file=None, host_key=None):
        self.host, self.port, self.user, self.key_file, self.host_key = host, port, user, key_file, host_key
        self.connects = self.closes = 0
        FakeGuest.made.append(self)

    def connect(self):
        self.connects += 1
        return self

    def close(self):
        self.closes += 1

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class Steps:
    """Stand-ins for the guest steps: each notes, when it acts, what the queue and the record say and which
    connection it was given, then marks itself done as the real one does. ``failing`` {step: error} fails one
    before it acts."""

    def __init__(self, site, entry_id):
        self.site = site
        self.entry_id = entry_id
        self.seen = []
        self.failing = {}

    def install(self, monkeypatch):
        monkeypatch.setattr(create, 'Guest', FakeGuest)
        # The ready step's ping of the runner: it answers.
        monkeypatch.setattr(create.guest_ops, 'runner_call', lambda guest, *args, **kwargs: {
            'alive': True, 'activity': 'working'})
        for step in ('bootstrap', 'checkout', 'brief'):
            monkeypatch.setattr(CreateFlow, 'step_' + step, self.stand_in(step))
        ready = CreateFlow.step_ready
        configure = CreateFlow.step_configure

        def noted(step, real):
            def act(flow_):
                self.note(flow_, step, None)
                return real(flow_)
            return act
        monkeypatch.setattr(CreateFlow, 'step_ready', noted('ready', ready))
        monkeypatch.setattr(CreateFlow, 'step_configure', noted('configure', configure))

    def note(self, flow_, step, guest):
        entry = Queue(self.site.journal).get(self.entry_id)
        record = self.site.journal.get_workspace(flow_.name)
        self.seen.append({'step': step, 'queue_step': entry['step'], 'status': record['status'],
                          'done': sorted(record['progress']), 'guest': guest})

    def stand_in(self, step):
        def act(flow_):
            guest = flow_._with_guest(lambda g: g)
            self.note(flow_, step, guest)
            if step in self.failing:
                raise self.failing.pop(step)
            flow_.done(step)
            return StepResult(True, '%s: done' % step, **({'head': 'abc'} if step == 'checkout' else {}))
        return act


def took_a_member(site, monkeypatch, name='taker', take=True):
    """A workspace ``name`` whose candidate step took the warm member of pool py (``take`` False: whose request is
    recorded, its candidate step not run); the queue claim it works under."""
    pool = pools.validate_pool(DECLARED)
    record = pools.begin_member(site.journal, pool, MEMBER)
    flow(site, MEMBER, pools=None).record_member(pool)
    for step in ('vmid', 'clone', 'wait_clone', 'configure', 'start'):
        flow(site, MEMBER, pools=None).run(step)
    pools.mark_warm(site.journal, record)
    # The claim check's SSH round trip has no guest to answer here: the member passes it.
    monkeypatch.setattr(CreateFlow, '_claim_check', lambda self, member: True)
    operation = Operation.claim_if_free(site.journal, 'create', name, 'busy')
    flow(site, name, claim=operation.claim).run('request')
    if not take:
        return operation.claim
    taken = flow(site, name, claim=operation.claim).run('vmid')
    assert taken.extra.get('from_pool') == 'py'
    return operation.claim


def run_module(site, name, claim, step='warm_rest', **changes):
    """The module's result for ``step`` run in-process (as its action plugin runs it)."""
    module = InProcessModule('workspace_create', params(site, name, step=step, claim=claim, **changes), set())
    with pytest.raises(ModuleExit) as ended:
        workspace_create.run(module)
    return ended.value.result


def new_claim(site, steps):
    """The claim of a new run of the create (the queue's step is read from its entry)."""
    claim = Operation.claim_if_free(site.journal, 'create', 'taker', 'busy').claim
    steps.entry_id = claim['entry_id']
    return claim


@pytest.fixture
def steps(site, monkeypatch):
    FakeGuest.made = []
    claim = took_a_member(site, monkeypatch)
    made = Steps(site, claim['entry_id'])
    made.install(monkeypatch)
    made.claim = claim
    return made


def test_the_rest_are_the_steps_the_member_did_not_do_in_their_order():
    assert WARM_REST == ('configure', 'bootstrap', 'checkout', 'brief', 'ready')
    assert [s for s in create.STEPS if s in WARM_REST] == list(WARM_REST)
    assert not set(WARM_REST) & set(create.POOLED_STEPS)
    assert set(create.STEPS) == set(WARM_REST) | set(create.POOLED_STEPS) | {'request'}


def test_the_step_value_is_documented_as_declared():
    import yaml  # pylint: disable=import-outside-toplevel
    documented = yaml.safe_load(workspace_create.DOCUMENTATION)['options']['step']['choices']
    assert documented == workspace_create.argument_spec()['step']['choices'] == list(create.STEPS) + ['warm_rest']


def test_warm_rest_runs_the_steps_in_order_each_recorded_before_it_acts_over_one_connection(site, steps):
    result = run_module(site, 'taker', steps.claim)
    assert not result.get('failed'), result
    assert result['changed'] and result['step'] == 'warm_rest'
    assert [each['step'] for each in steps.seen] == list(WARM_REST)
    for n, each in enumerate(steps.seen):
        # The queue says which step runs, and the record that it runs (its status), before it acts; every step
        # before it is done.
        assert each['queue_step'] == STEP_LABELS[each['step']]
        if each['step'] != 'ready':
            assert each['status'] == STEP_STATUS[each['step']]
        assert set(WARM_REST[:n]) <= set(each['done']) and each['step'] not in each['done']
    ws = site.journal.get_workspace('taker')
    assert ws['status'] == 'ready' and set(create.STEPS) <= set(ws['progress'])
    assert ws['facts']['from_pool'] == 'py'
    # One SSH connection for the bootstrap, the checkout, the brief and the ready ping, closed at the end.
    guests = [each['guest'] for each in steps.seen if each['guest'] is not None]
    assert len(guests) == 3 and len(set(map(id, guests))) == 1
    assert [(g.connects, g.closes) for g in FakeGuest.made] == [(1, 1)]
    assert [each['step'] for each in result['details']['steps']] == list(WARM_REST)
    assert result['details']['steps'][2]['details'] == {'head': 'abc'}
    assert 'ready: taker' in result['msg'] and result['workspace']['status'] == 'ready'
    # A rerun finds every step done.
    again = run_module(site, 'taker', steps.claim)
    assert not again.get('failed') and not again['changed'], again
    assert len(steps.seen) == len(WARM_REST)


def test_warm_rest_passes_each_point_of_the_single_steps_in_their_order(site, steps, tmp_path, monkeypatch):
    trace = tmp_path / 'trace'
    trace.write_text('')
    monkeypatch.setenv(failpoint.TRACE_ENV, str(trace))
    result = run_module(site, 'taker', steps.claim)
    assert not result.get('failed'), result
    points = [line.split('\t', 1)[1] for line in trace.read_text().splitlines()]
    begins = [p for p in points if p.endswith(' begin')]
    assert begins == ['create.%s begin' % step for step in WARM_REST]
    for step in WARM_REST:
        # Begun, then recorded as the queue's step, before anything else of it.
        mine = [p for p in points if p.startswith('create.%s ' % step)]
        assert mine[:2] == ['create.%s begin' % step, 'create.%s journal queue step' % step], mine


@pytest.mark.parametrize('failing', ['bootstrap', 'checkout', 'brief'])
def test_a_failure_stops_there_with_the_single_steps_message_and_a_rerun_goes_on(site, steps, failing):
    steps.failing[failing] = CreateError('the guest said no')
    result = run_module(site, 'taker', steps.claim)
    assert result.get('failed')
    at = WARM_REST.index(failing)
    assert [each['step'] for each in steps.seen] == list(WARM_REST[:at + 1])
    assert result['msg'] == failure_message('taker', failing, 'the guest said no')
    assert 'at step %d/13 (%s)' % (create.STEPS.index(failing) + 1, STEP_LABELS[failing]) in result['msg']
    ws = site.journal.get_workspace('taker')
    assert ws['status'] == 'failed' and ws['failure']['step'] == failing
    assert set(WARM_REST[:at]) <= set(ws['progress']) and failing not in ws['progress']
    # The single step fails the same way (in a run of its own: a failed step ends its run's claim).
    steps.failing[failing] = CreateError('the guest said no')
    alone = run_module(site, 'taker', new_claim(site, steps), step=failing)
    assert alone['failed'] and alone['msg'] == result['msg']
    assert [each['step'] for each in steps.seen][-1] == failing

    # A new run goes on at the step that failed; the ones before it are found done.
    claim = new_claim(site, steps)
    del steps.seen[:]
    rerun = run_module(site, 'taker', claim)
    assert not rerun.get('failed'), rerun
    assert [each['step'] for each in steps.seen] == list(WARM_REST[at:])
    assert [each['changed'] for each in rerun['details']['steps']] == [False] * at + [True] * (len(WARM_REST) - at)
    assert site.journal.get_workspace('taker')['status'] == 'ready'


def test_a_workspace_that_took_no_member_is_refused_and_nothing_runs(site, monkeypatch):
    FakeGuest.made = []
    operation = Operation.claim_if_free(site.journal, 'create', 'cold', 'busy')
    flow(site, 'cold', pools=None, claim=operation.claim).run('request')
    flow(site, 'cold', pools=None, claim=operation.claim).run('vmid')
    before = site.journal.get_workspace('cold')
    result = run_module(site, 'cold', operation.claim, pools=None)
    assert result['failed'] and 'took no warm pool member' in result['msg'], result
    assert 'step 5/13 (configure)' in result['msg']
    after = site.journal.get_workspace('cold')
    assert after['progress'] == before['progress'] and after['status'] == before['status']
    assert FakeGuest.made == []


def test_the_candidate_step_that_takes_a_member_goes_on_with_the_rest_in_its_own_task(site, monkeypatch):
    FakeGuest.made = []
    claim = took_a_member(site, monkeypatch, take=False)
    made = Steps(site, claim['entry_id'])
    made.install(monkeypatch)
    result = run_module(site, 'taker', claim, step='vmid', then_warm_rest=True)
    assert not result.get('failed'), result
    assert result['step'] == 'vmid' and result['changed'] and result['details']['from_pool'] == 'py'
    assert [each['step'] for each in result['details']['steps']] == list(WARM_REST)
    assert [each['step'] for each in made.seen] == list(WARM_REST)
    assert result['msg'].startswith('candidate vmid: ') and 'ready: taker' in result['msg']
    assert [(g.connects, g.closes) for g in FakeGuest.made] == [(1, 1)]
    ws = site.journal.get_workspace('taker')
    assert ws['status'] == 'ready' and set(create.STEPS) <= set(ws['progress'])
    # A rerun of step 2 keeps the member it took and says no from_pool: the numbered tasks run, and find their steps
    # done; step 2 goes on with nothing.
    again = run_module(site, 'taker', claim, step='vmid', then_warm_rest=True)
    assert not again.get('failed') and not again['details'].get('from_pool') and 'steps' not in again['details']
    assert len(made.seen) == len(WARM_REST)


def test_the_candidate_step_that_takes_no_member_answers_as_without_the_option(site, monkeypatch):
    FakeGuest.made = []
    operation = Operation.claim_if_free(site.journal, 'create', 'cold', 'busy')
    flow(site, 'cold', pools=None, claim=operation.claim).run('request')
    result = run_module(site, 'cold', operation.claim, step='vmid', then_warm_rest=True, pools=None)
    assert not result.get('failed') and 'steps' not in result['details'] and 'from_pool' not in result['details']
    assert result['msg'].startswith('candidate vmid: ') and ';' not in result['msg']
    assert FakeGuest.made == [] and 'configure' not in site.journal.get_workspace('cold')['progress']


def test_a_failure_after_the_candidate_step_ends_its_task_with_that_steps_message(site, monkeypatch):
    claim = took_a_member(site, monkeypatch, take=False)
    made = Steps(site, claim['entry_id'])
    made.install(monkeypatch)
    made.failing['checkout'] = CreateError('the guest said no')
    result = run_module(site, 'taker', claim, step='vmid', then_warm_rest=True)
    assert result['failed'] and result['msg'] == failure_message('taker', 'checkout', 'the guest said no')
    assert result['details']['from_pool'] == 'py'
    assert [each['step'] for each in result['details']['steps']] == ['configure', 'bootstrap']
    ws = site.journal.get_workspace('taker')
    assert ws['status'] == 'failed' and ws['failure']['step'] == 'checkout' and 'vmid' in ws['progress']
