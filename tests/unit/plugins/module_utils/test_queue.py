"""The operation queue against a real journal on both backends (a SQLite file, a PostgreSQL database), with real
processes standing for ansible-playbook runs."""

import collections
import json
import multiprocessing
import os
import signal
import sqlite3
import subprocess
import sys
import time

import pytest

from ansible_collections.ephemera.workspaces.plugins.module_utils.core import queue as queue_mod
from ansible_collections.ephemera.workspaces.plugins.module_utils.core.errors import (
    ClaimLostError,
    JournalError,
    QueueError,
    QueueTimeout,
    StaleGenerationError,
)
from ansible_collections.ephemera.workspaces.plugins.module_utils.core.run_identity import Owner
from ansible_collections.ephemera.workspaces.plugins.module_utils.core.queue import (
    CLAIMED,
    FINISHED_TURN,
    WAITING,
    Queue,
    render_tree,
)

FORK = multiprocessing.get_context('fork')
Run = collections.namedtuple('Run', 'queue proc')


@pytest.fixture
def run(journal):
    """run() -> (Queue owned by a fresh live process, that process). The process stands for one ansible-playbook run."""
    procs = []

    def start(lease=600):
        proc = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)'])
        procs.append(proc)
        return Run(Queue(journal, owner=Owner.current(pid=proc.pid), lease=lease), proc)

    yield start
    for proc in procs:
        proc.kill()
        proc.wait()


def kill(proc):
    proc.kill()
    proc.wait()  # reaped, as the parent of a real ansible-playbook would


@pytest.fixture
def journal(store):
    with store.open() as j:
        yield j


def dump(store):
    """Every row of every table, in order: what "writes nothing" compares."""
    if store.backend == 'postgresql':
        tables = [r[0] for r in store.raw("SELECT table_name FROM information_schema.tables WHERE table_schema = 'public' "
                                          "ORDER BY 1")]
        return {t: store.raw('SELECT t::text FROM %s t ORDER BY 1' % t) for t in tables}
    conn = sqlite3.connect(store.path)
    try:
        tables = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")]
        return {t: conn.execute('SELECT * FROM "%s" ORDER BY rowid' % t).fetchall() for t in tables}
    finally:
        conn.close()


def actions(journal, key):
    return [(e['action'], e['detail'].get('entry')) for e in journal.events(key) if e['kind'] == 'queue']


def action_names(journal, key):
    return [e['action'] for e in journal.events(key) if e['kind'] == 'queue']


# ----------------------------------------------------------------- schema


def test_queue_tables_exist_in_a_new_journal(journal, store):
    tables = set(dump(store))
    assert {'queue', 'queue_requests'} <= tables


# ------------------------------------------------------------ FIFO and claims


def test_first_request_runs_at_once_the_next_waits_fifo(journal, run):
    q1 = run().queue
    q2 = run().queue
    q3 = run().queue
    journal.create_workspace('ws1')
    a = q1.enqueue('create', 'ws1', params={'repo': 'r'})
    b = q2.enqueue('archive', 'ws1')
    c = q3.enqueue('destroy', 'ws1')
    assert [x.folded for x in (a, b, c)] == [False, False, False]
    assert q3.poll(c.request_id).outcome == WAITING
    turn = q2.poll(b.request_id)
    assert turn.outcome == WAITING and [r['id'] for r in turn.ahead] == [a.entry['id']]
    first = q1.poll(a.request_id)
    assert first.outcome == CLAIMED and first.claim['entry_id'] == a.entry['id'] and not first.resumed
    assert first.entry['state'] == 'running' and first.entry['claims'] == 1
    # c is not the oldest: it keeps waiting even after a finished
    q1.finish(first.claim, result={'vmid': 101})
    assert q3.poll(c.request_id).outcome == WAITING
    second = q2.poll(b.request_id)
    assert second.outcome == CLAIMED
    q2.finish(second.claim)
    third = q3.poll(c.request_id)
    assert third.outcome == CLAIMED
    q3.finish(third.claim, state='failed', result={'msg': 'boom'})
    entries = q1.entries()
    assert [(e['kind'], e['state']) for e in entries] == [('create', 'done'), ('archive', 'done'), ('destroy', 'failed')]
    assert action_names(journal, 'ws1') == ['enqueued', 'enqueued', 'enqueued', 'started', 'finished',
                                            'started', 'finished', 'started', 'finished']


def test_different_targets_do_not_wait_for_each_other(run):
    q1 = run().queue
    q2 = run().queue
    a = q1.enqueue('create', 'ws1')
    b = q2.enqueue('create', 'ws2')
    assert q1.poll(a.request_id).outcome == CLAIMED
    assert q2.poll(b.request_id).outcome == CLAIMED


def test_same_name_as_workspace_and_template_are_different_queues(run):
    q1 = run().queue
    q2 = run().queue
    a = q1.enqueue('create', 'debian')
    b = q2.enqueue('template_build', 'debian')
    assert b.entry['target_type'] == 'template'
    assert q1.poll(a.request_id).outcome == CLAIMED
    assert q2.poll(b.request_id).outcome == CLAIMED


# ------------------------------------------------------------------- dedup


def test_identical_queued_requests_fold_and_all_get_the_same_outcome(journal, run):
    blocker = run().queue
    held = blocker.poll(blocker.enqueue('create', 'ws1').request_id)
    queues = [run().queue for _n in range(5)]
    joined = [q.enqueue('archive', 'ws1', params={'keep': 7}, requested_by='op%d' % n, job_id=str(40 + n))
              for n, q in enumerate(queues)]
    assert [j.folded for j in joined] == [False, True, True, True, True]
    assert len({j.entry['id'] for j in joined}) == 1
    entry = queues[0].get(joined[0].entry['id'])
    assert [r['requested_by'] for r in entry['requested_by']] == ['op0', 'op1', 'op2', 'op3', 'op4']
    assert [r['job_id'] for r in entry['requested_by']] == ['40', '41', '42', '43', '44']
    blocker.finish(held.claim)
    # Only the earliest live requester runs it, whoever looks first.
    turns = [q.poll(j.request_id) for q, j in reversed(list(zip(queues, joined)))]
    assert [t.outcome for t in turns] == [WAITING] * 4 + [CLAIMED]
    queues[0].finish(turns[-1].claim, result={'archive': 'ws1.tar'})
    outcomes = [q.poll(j.request_id) for q, j in zip(queues, joined)]
    assert [t.outcome for t in outcomes[1:]] == [FINISHED_TURN] * 4
    assert all(t.folded for t in outcomes[1:])
    assert {json.dumps(t.entry['result']) for t in outcomes[1:]} == {json.dumps({'archive': 'ws1.tar'})}
    assert action_names(journal, 'ws1').count('started') == 2  # the blocker and one archive
    assert action_names(journal, 'ws1').count('also_requested') == 4


def test_running_entry_and_different_params_do_not_fold(run):
    q1 = run().queue
    q2 = run().queue
    q3 = run().queue
    a = q1.enqueue('create', 'ws1', params={'ref': 'main'})
    first = q1.poll(a.request_id)
    assert first.outcome == CLAIMED
    b = q2.enqueue('create', 'ws1', params={'ref': 'main'})  # asked after the run started: a new request
    c = q3.enqueue('create', 'ws1', params={'ref': 'dev'})
    assert not b.folded and not c.folded
    assert len({a.entry['id'], b.entry['id'], c.entry['id']}) == 3


def test_secret_params_are_masked_and_not_fingerprinted_in_clear(journal, store, run):
    q = run().queue
    secret = 's3cr3t-' + os.urandom(4).hex()
    e = q.enqueue('create', 'ws1', params={'git_token': secret, 'ref': 'main'})
    assert e.entry['params'] == {'git_token': '********', 'ref': 'main'}
    journal.close()
    blob = store.blob()
    assert b'ws1' in blob
    assert secret.encode() not in blob


# ------------------------------------------------------------------ fencing


def _fenced_writes(journal, claim, ws):
    intent = journal.get_intent(1)
    return [
        ('create_workspace', lambda: journal.create_workspace('ws2', claim=claim)),
        ('update_workspace', lambda: journal.update_workspace('ws1', ws['generation'], claim=claim, status='ready')),
        ('append_event', lambda: journal.append_event('ws1', 'note', 'late', claim=claim)),
        ('open_intent', lambda: journal.open_intent('create', 'ws1', claim=claim)),
        ('update_intent', lambda: journal.update_intent(1, intent['generation'], state='done', claim=claim)),
        ('record_cleanup_debt', lambda: journal.record_cleanup_debt('ws1', 'lxc/9', 'x', claim=claim)),
        ('clear_cleanup_debt', lambda: journal.clear_cleanup_debt('ws1', 'lxc/8', claim=claim)),
        ('lease_address', lambda: journal.lease_address('net', 'ws1', ['10.0.0.9'], claim=claim)),
        ('release_address', lambda: journal.release_address('ws1', claim=claim)),
    ]


def _seed_for_fencing(journal, q, run_queue):
    journal.create_workspace('ws1')
    journal.open_intent('create', 'ws1')
    journal.record_cleanup_debt('ws1', 'lxc/8', 'locked')
    journal.lease_address('net', 'ws1', ['10.0.0.2'])
    turn = q.poll(q.enqueue('create', 'ws1').request_id)
    assert turn.outcome == CLAIMED
    return turn.claim


def test_writes_under_a_held_claim_go_through_and_renew_the_lease(journal, run):
    q = run().queue
    claim = _seed_for_fencing(journal, q, run)
    before = q.get(claim['entry_id'])['lease_expires']
    time.sleep(0.01)
    ws = journal.update_workspace('ws1', 1, claim=claim, status='provisioning')
    assert ws['status'] == 'provisioning'
    assert q.get(claim['entry_id'])['lease_expires'] > before


def test_every_fenced_write_of_a_run_that_lost_its_claim_is_refused_and_changes_nothing(journal, store, run):
    q = run().queue
    claim = _seed_for_fencing(journal, q, run)
    q.cancel(claim['entry_id'], reason='operator stop', force=True)
    ws = journal.get_workspace('ws1')
    before = dump(store)
    for name, write in _fenced_writes(journal, claim, ws):
        with pytest.raises(ClaimLostError) as err:
            write()
        assert 'no longer holds the claim on operation #%d' % claim['entry_id'] in str(err.value), name
        assert 'cancelled (operator stop)' in str(err.value), name
        assert isinstance(err.value, StaleGenerationError)
        assert dump(store) == before, name


def test_a_run_whose_claim_was_taken_over_cannot_write(journal, store, run):
    q1, p1 = run()
    q2 = run().queue
    journal.create_workspace('ws1')
    old = q1.poll(q1.enqueue('create', 'ws1').request_id).claim
    kill(p1)
    new = q2.poll(q2.enqueue('create', 'ws1').request_id)
    assert new.outcome == CLAIMED and new.resumed and new.claim['entry_id'] == old['entry_id']
    before = dump(store)
    with pytest.raises(ClaimLostError, match='another run took it over'):
        journal.update_workspace('ws1', 1, claim=old, status='ready')
    assert dump(store) == before
    assert journal.update_workspace('ws1', 1, claim=new.claim, status='ready')['status'] == 'ready'


def test_malformed_claims_are_refused(journal):
    journal.create_workspace('ws1')
    for bad in ({}, {'entry_id': 'x', 'fence': 'f'}, {'entry_id': 1, 'fence': ''}, 'nope'):
        with pytest.raises(JournalError, match='claim'):
            journal.append_event('ws1', 'note', 'x', claim=bad)
    with pytest.raises(ClaimLostError, match='not recorded'):
        journal.append_event('ws1', 'note', 'x', claim={'entry_id': 99, 'fence': 'abc'})
    assert [e['action'] for e in journal.events('ws1')] == ['create_workspace']


# ------------------------------------------------------------- stale runners


def test_dead_runner_is_resumed_by_the_next_run_of_the_same_operation(journal, run):
    q1, p1 = run()
    q2 = run().queue
    a = q1.enqueue('create', 'ws1', params={'ref': 'main'})
    first = q1.poll(a.request_id)
    q1.step(first.claim, 'clone')
    q1.step(first.claim, 'wait clone task')
    b = q2.enqueue('create', 'ws1', params={'ref': 'main'})  # a new entry: the first one is running
    assert q2.poll(b.request_id).outcome == WAITING
    kill(p1)
    turn = q2.poll(b.request_id)
    assert turn.outcome == CLAIMED and turn.resumed and turn.previous_step == 'wait clone task'
    assert turn.entry['id'] == a.entry['id'] and turn.entry['claims'] == 2
    assert turn.entry['owner']['pid'] == q2.owner.pid
    folded = q2.get(b.entry['id'])
    assert folded['state'] == 'cancelled' and folded['result']['folded_into'] == a.entry['id']
    assert [r['state'] for r in turn.entry['requested_by']] == ['lost', 'running']
    acts = actions(journal, 'ws1')
    assert ('folded', b.entry['id']) in acts and ('runner_lost', a.entry['id']) in acts
    assert acts[-1] == ('resumed', a.entry['id'])
    lost = [e for e in journal.events('ws1') if e['action'] == 'runner_lost'][0]
    assert lost['detail']['runner']['pid'] == p1.pid and lost['detail']['step'] == 'wait clone task'


def test_dead_runner_is_resumed_by_a_run_that_had_joined_it(journal, run):
    q1, p1 = run()
    q2 = run().queue
    blocker, pb = run()
    held = blocker.poll(blocker.enqueue('create', 'ws1').request_id)
    a = q1.enqueue('reconcile', 'ws1')
    b = q2.enqueue('reconcile', 'ws1')
    assert b.folded
    blocker.finish(held.claim)
    first = q1.poll(a.request_id)
    assert first.outcome == CLAIMED
    kill(p1)
    turn = q2.poll(b.request_id)
    assert turn.outcome == CLAIMED and turn.resumed and turn.entry['id'] == a.entry['id']
    kill(pb)


def test_dead_runner_of_another_operation_is_closed_as_interrupted(journal, run):
    q1, p1 = run()
    q2 = run().queue
    journal.create_workspace('ws1')
    first = q1.poll(q1.enqueue('create', 'ws1').request_id)
    q1.step(first.claim, 'ssh')
    b = q2.enqueue('destroy', 'ws1')
    kill(p1)
    turn = q2.poll(b.request_id)
    assert turn.outcome == CLAIMED and not turn.resumed and turn.entry['id'] == b.entry['id']
    dead = q2.get(first.claim['entry_id'])
    assert dead['state'] == 'failed' and dead['result']['interrupted'] and dead['result']['step'] == 'ssh'
    assert 'died at step ssh' in dead['result']['reason']
    assert action_names(journal, 'ws1')[-3:] == ['runner_lost', 'interrupted', 'started']


def test_entry_abandoned_by_every_requester_is_cancelled_when_reached(journal, run):
    q1 = run().queue
    q2, p2 = run()
    q3 = run().queue
    journal.create_workspace('ws1')
    first = q1.poll(q1.enqueue('create', 'ws1').request_id)
    b = q2.enqueue('archive', 'ws1')
    c = q3.enqueue('destroy', 'ws1')
    kill(p2)  # the archive's only requester died while it waited
    q1.finish(first.claim)
    turn = q3.poll(c.request_id)
    assert turn.outcome == CLAIMED and turn.entry['id'] == c.entry['id']
    abandoned = q3.get(b.entry['id'])
    assert abandoned['state'] == 'cancelled' and abandoned['result']['reason'].startswith('abandoned')


def test_a_waiter_that_stopped_looking_does_not_hold_the_entry(journal, run, monkeypatch):
    q1 = run().queue
    q2 = run().queue
    a = q1.enqueue('create', 'ws1', params={'n': 1})
    b = q2.enqueue('create', 'ws1', params={'n': 1})
    assert b.folded
    # q1's playbook lives on, but its waiting task is gone: after HEARTBEAT_STALE the next waiter runs it.
    later = time.time() + queue_mod.HEARTBEAT_STALE + 1
    turn = q2.poll(b.request_id, now=later)
    assert turn.outcome == CLAIMED and turn.entry['id'] == a.entry['id']


def test_runner_on_another_host_is_judged_by_its_lease(journal, run):
    far = Queue(journal, owner=Owner('elsewhere', 4242, 1), lease=30)
    q2 = run().queue
    first = far.poll(far.enqueue('create', 'ws1', params={'n': 1}).request_id)
    assert first.outcome == CLAIMED
    b = q2.enqueue('create', 'ws1', params={'n': 1})
    assert q2.poll(b.request_id).outcome == WAITING
    assert q2.poll(b.request_id, now=time.time() + 31).outcome == CLAIMED


def _killed_mid_transaction(store, ready):
    j = store.open()
    q = Queue(j)
    j._conn.execute('BEGIN IMMEDIATE')
    j._conn.execute("UPDATE queue SET state = 'done' WHERE id = 1")
    ready.set()
    time.sleep(60)
    q.get(1)


def test_writer_killed_inside_a_queue_transaction_leaves_it_unchanged(journal, store, run):
    q = run().queue
    turn = q.poll(q.enqueue('create', 'ws1').request_id)
    ready = FORK.Event()
    proc = FORK.Process(target=_killed_mid_transaction, args=(store, ready))
    proc.start()
    assert ready.wait(30)
    os.kill(proc.pid, signal.SIGKILL)
    proc.join(30)
    assert q.get(1)['state'] == 'running'
    assert q.step(turn.claim, 'after')['step'] == 'after'


# --------------------------------------------------------------- timeouts


def test_wait_timeout_says_what_is_ahead_and_leaves_nothing_stuck(journal, run):
    q1 = run().queue
    q2 = run().queue
    journal.create_workspace('ws1')
    first = q1.poll(q1.enqueue('create', 'ws1').request_id)
    q1.step(first.claim, 'wait clone task')
    b = q2.enqueue('destroy', 'ws1')
    with pytest.raises(QueueTimeout) as err:
        q2.wait(b.request_id, timeout=0.3)
    message = str(err.value)
    assert 'Timed out after 0s waiting for the turn of #2 destroy of workspace ws1' in message
    assert '#1 create of workspace ws1 running, step wait clone task' in message
    assert 'withdrew its request' in message
    entry = q2.get(b.entry['id'])
    assert entry['state'] == 'cancelled' and 'withdrawn' in entry['result']['reason']
    assert [r['state'] for r in entry['requested_by']] == ['withdrawn']
    assert [e['state'] for e in q1.entries(states=['queued', 'running'])] == ['running']


def test_timeout_of_one_joined_run_keeps_the_entry_for_the_others(run):
    q1 = run().queue
    q2 = run().queue
    q3 = run().queue
    q1.poll(q1.enqueue('create', 'ws1').request_id)
    b = q2.enqueue('create', 'ws1', params={'x': 1})
    c = q3.enqueue('create', 'ws1', params={'x': 1})
    with pytest.raises(QueueTimeout):
        q2.wait(b.request_id, timeout=0)
    entry = q3.get(c.entry['id'])
    assert entry['state'] == 'queued'
    assert [r['state'] for r in entry['requested_by']] == ['withdrawn', 'waiting']


def test_wait_returns_the_claim_when_the_turn_comes(journal, store, run):
    q1 = run().queue
    q2 = run().queue
    first = q1.poll(q1.enqueue('create', 'ws1').request_id)
    b = q2.enqueue('create', 'ws1', params={'again': True})
    finisher = FORK.Process(target=_finish_later, args=(store, first.claim))
    finisher.start()
    turn = q2.wait(b.request_id, timeout=30)
    finisher.join(30)
    assert turn.outcome == CLAIMED and turn.entry['id'] == b.entry['id']


def _finish_later(store, claim):
    time.sleep(0.5)
    with store.open() as j:
        Queue(j).finish(claim)


# ------------------------------------------------------------------ cancel


def test_cancel_of_a_live_running_entry_needs_force(journal, run):
    q1 = run().queue
    first = q1.poll(q1.enqueue('create', 'ws1').request_id)
    q1.step(first.claim, 'bootstrap')
    with pytest.raises(QueueError, match='is running \\(step bootstrap, runner .* is alive\\).*force=true'):
        q1.cancel(first.claim['entry_id'])
    assert q1.get(first.claim['entry_id'])['state'] == 'running'
    entry, changed = q1.cancel(first.claim['entry_id'], reason='wrong repo', force=True, requested_by='alice')
    assert changed and entry['state'] == 'cancelled' and entry['result'] == {'reason': 'wrong repo', 'cancelled_by': 'alice'}
    assert q1.cancel(first.claim['entry_id'])[1] is False
    with pytest.raises(ClaimLostError, match='cancelled \\(wrong repo\\)'):
        q1.step(first.claim, 'checkout')


def test_cancel_of_finished_or_missing_entries_is_refused(run):
    q = run().queue
    turn = q.poll(q.enqueue('create', 'ws1').request_id)
    q.finish(turn.claim)
    with pytest.raises(QueueError, match='already finished \\(done\\)'):
        q.cancel(turn.claim['entry_id'])
    with pytest.raises(QueueError, match='#99 does not exist'):
        q.cancel(99)


def test_cancelled_parent_cancels_queued_children_and_refuses_new_ones(journal, run):
    parent_q = run().queue
    child_q = run().queue
    for n in (1, 2, 3):
        journal.create_workspace('ws%d' % n)
    parent = parent_q.poll(parent_q.enqueue('destroy', 'idle-2h', target_type='group').request_id)
    pid = parent.claim['entry_id']
    running_child = child_q.poll(child_q.enqueue('destroy', 'ws1', parent_id=pid).request_id)
    assert running_child.outcome == CLAIMED and running_child.entry['source'] == 'cascade'
    queued = [parent_q.enqueue('destroy', 'ws%d' % n, parent_id=pid, waits=False, claim=parent.claim) for n in (2, 3)]
    # a queued child behind another operation stays queued until its turn
    blocker = run().queue
    blocker_turn = blocker.poll(blocker.enqueue('archive', 'ws2').request_id)
    assert blocker_turn.outcome == WAITING  # the parent's queued child on ws2 comes first
    lines = render_tree(parent_q.entries())
    assert lines[0].startswith('#%d destroy group idle-2h: running' % pid)
    assert lines[1].startswith('  |- #%d destroy workspace ws1: running' % running_child.entry['id'])
    assert lines[3].startswith('  `- #%d destroy workspace ws3: queued' % queued[1].entry['id'])
    parent_q.cancel(pid, reason='change window closed', force=True)
    states = {e['id']: e['state'] for e in parent_q.entries()}
    assert states[queued[0].entry['id']] == 'cancelled' and states[queued[1].entry['id']] == 'cancelled'
    assert states[running_child.entry['id']] == 'running'  # a started child finishes its work
    with pytest.raises(QueueError, match='Parent operation #%d destroy of group idle-2h was cancelled '
                                         '\\(change window closed\\). Nothing was queued' % pid):
        child_q.enqueue('destroy', 'ws3', parent_id=pid)
    with pytest.raises(ClaimLostError):
        parent_q.enqueue('destroy', 'ws3', parent_id=pid, waits=False, claim=parent.claim)


def test_child_of_a_finished_parent_is_refused(run):
    q = run().queue
    parent = q.poll(q.enqueue('template_build', 'debian-12').request_id)
    q.finish(parent.claim)
    with pytest.raises(QueueError, match='has already finished \\(done\\)'):
        q.enqueue('create', 'ws1', parent_id=parent.claim['entry_id'])
    with pytest.raises(QueueError, match='#77 does not exist'):
        q.enqueue('create', 'ws1', parent_id=77)


def test_children_queued_by_a_parent_are_run_by_the_runs_that_join_them(journal, run):
    parent_q = run().queue
    child_q = run().queue
    journal.create_workspace('ws1')
    parent = parent_q.poll(parent_q.enqueue('destroy', 'old', target_type='group').request_id)
    pre = parent_q.enqueue('destroy', 'ws1', parent_id=parent.claim['entry_id'], waits=False, claim=parent.claim)
    joined = child_q.enqueue('destroy', 'ws1', parent_id=parent.claim['entry_id'])
    assert joined.folded and joined.entry['id'] == pre.entry['id']
    turn = child_q.poll(joined.request_id)
    assert turn.outcome == CLAIMED and turn.entry['owner']['pid'] == child_q.owner.pid


# --------------------------------------------------------------- bad input


@pytest.mark.parametrize('args, message', [
    (('build', 'ws1'), "Unknown operation kind 'build'; expected one of archive, brief, create, destroy, fork, reconcile, "
                       "template_build"),
    (('create', 'ws1', 'template'), "A create operation acts on a workspace, not a 'template'"),
    (('create', 'bad name'), "Invalid workspace name 'bad name'"),
    (('create', 'a:b'), "Invalid workspace name 'a:b'"),
    (('destroy', 'ghost'), "Unknown target: no workspace named 'ghost' is recorded"),
])
def test_bad_requests_are_refused_and_write_nothing(store, journal, run, args, message):
    q = run().queue
    before = dump(store)
    with pytest.raises(QueueError) as err:
        q.enqueue(*args)
    assert message in str(err.value) and 'Nothing was queued' in str(err.value)
    assert dump(store) == before


def test_bad_source_and_step_and_result_are_refused(run):
    q = run().queue
    with pytest.raises(QueueError, match='Unknown request source'):
        q.enqueue('create', 'ws1', source='cron')
    turn = q.poll(q.enqueue('create', 'ws1').request_id)
    with pytest.raises(QueueError, match='step label'):
        q.step(turn.claim, '')
    with pytest.raises(QueueError, match='done or failed'):
        q.finish(turn.claim, state='cancelled')
    assert q.get(turn.claim['entry_id'])['state'] == 'running'


def test_destroy_of_a_workspace_whose_create_is_queued_is_accepted(run):
    q1 = run().queue
    q2 = run().queue
    q1.enqueue('create', 'ws9')
    assert q2.enqueue('destroy', 'ws9').entry['state'] == 'queued'


# --------------------------------------------------------- many processes


def _contender(store, n, ready, go, out):
    with store.open() as j:
        q = Queue(j)
        ready.release()
        go.wait()
        request = q.enqueue('reconcile', 'shared', params={'n': n})
        turn = q.wait(request.request_id, timeout=120)
        started = time.time()
        for label in ('look', 'compare'):
            q.step(turn.claim, label)
        time.sleep(0.05)
        q.finish(turn.claim, result={'n': n})
        out.put((turn.entry['id'], started, time.time()))


def test_eight_processes_on_one_target_run_one_at_a_time_in_queue_order(store, journal):
    journal.create_workspace('shared')
    ready, go, out = FORK.Semaphore(0), FORK.Event(), FORK.Queue()
    procs = [FORK.Process(target=_contender, args=(store, n, ready, go, out)) for n in range(8)]
    for p in procs:
        p.start()
    for _p in procs:
        assert ready.acquire(timeout=60)
    go.set()
    spans = sorted(out.get(timeout=120) for _p in procs)
    for p in procs:
        p.join(60)
    assert [p.exitcode for p in procs] == [0] * 8
    assert [s[0] for s in spans] == sorted(s[0] for s in spans)
    for before, after in zip(spans, spans[1:]):
        assert after[1] >= before[2]  # the next one started after the previous one ended
    entries = Queue(journal).entries()
    assert [e['state'] for e in entries] == ['done'] * 8
    started = [d for a, d in actions(journal, 'shared') if a == 'started']
    assert started == [e['id'] for e in entries]


# ------------------------------------------------------------------- reads


def test_tree_shows_steps_runners_requesters_and_dead_runners(journal, run):
    q1, p1 = run()
    q2 = run().queue
    first = q1.poll(q1.enqueue('create', 'ws1', requested_by='alice', job_id='4711').request_id)
    q1.step(first.claim, 'wait address')
    q2.enqueue('create', 'ws1', params={'n': 2}, requested_by='bob', source='schedule')
    lines = render_tree(q1.entries())
    assert lines[0].startswith('#1 create workspace ws1: running for ')
    assert 'step "wait address" for ' in lines[0] and '(runner %s pid %d)' % (q1.owner.host, p1.pid) in lines[0]
    assert lines[0].endswith('requested by alice (AWX job 4711, manual)')
    assert lines[1].startswith('#2 create workspace ws1: queued for ') and 'behind #1' in lines[1]
    assert lines[1].endswith('requested by bob (schedule)')
    kill(p1)
    entry = q2.entries()[0]
    assert entry['runner_alive'] is False
    assert 'is gone: the next run on this workspace takes it over' in render_tree([entry])[0]


def test_entries_filters_and_recent(run):
    q = run().queue
    for n in range(4):
        turn = q.poll(q.enqueue('create', 'ws%d' % n).request_id)
        q.finish(turn.claim)
    q.enqueue('create', 'ws9')
    assert [e['target'] for e in q.entries(recent=2)] == ['ws2', 'ws3', 'ws9']
    assert [e['target'] for e in q.entries(recent=0)] == ['ws9']
    assert [e['target'] for e in q.entries(target='ws1')] == ['ws1']
    assert [e['target'] for e in q.entries(states=['queued', 'running'])] == ['ws9']
    assert q.entries(kinds=['destroy']) == []


def test_preview_writes_nothing(store, journal, run):
    q1 = run().queue
    q2 = run().queue
    assert q2.preview('create', 'ws1') == {'action': 'run', 'entry_id': None, 'ahead': []}
    q1.poll(q1.enqueue('create', 'ws1').request_id)
    q1.enqueue('create', 'ws1', params={'n': 1})
    before = dump(store)
    assert q2.preview('create', 'ws1', params={'n': 1}) == {'action': 'join', 'entry_id': 2, 'ahead': [1]}
    assert q2.preview('create', 'ws1', params={'n': 2}) == {'action': 'wait', 'entry_id': None, 'ahead': [1, 2]}
    with pytest.raises(QueueError, match='Unknown target'):
        q2.preview('destroy', 'ghost')
    assert dump(store) == before


def test_waiting_for_an_entry_held_by_the_same_run_fails_at_once(journal, run):
    q1, proc = run()
    same_run = Queue(journal, owner=Owner.current(pid=proc.pid))  # another host of the same playbook run
    first = q1.poll(q1.enqueue('create', 'ws1', params={'host': 'a'}).request_id)
    q1.step(first.claim, 'clone')
    b = same_run.enqueue('create', 'ws1', params={'host': 'b'})
    with pytest.raises(QueueError) as err:
        same_run.wait(b.request_id, timeout=60)
    assert not isinstance(err.value, QueueTimeout)  # it gave up at once, not at the timeout
    assert 'waits for #1 create of workspace ws1, which this same ansible-playbook run holds (step clone)' in str(err.value)
    assert q1.get(b.entry['id'])['state'] == 'cancelled'
    c = same_run.enqueue('create', 'ws1', params={'host': 'c'})
    with pytest.raises(QueueTimeout):
        same_run.wait(c.request_id, timeout=0.2, wait_for_own_run=True)


def test_a_queued_child_is_joined_after_its_parent_finished(run):
    """A build queues its smoke create as a child, finishes, and the create run that follows joins that child."""
    q = run().queue
    parent = q.poll(q.enqueue('template_build', 'workspace').request_id)
    pid = parent.claim['entry_id']
    child = q.enqueue('create', 'smoke-workspace', params={'repo': 'r'}, parent_id=pid, waits=False,
                      claim=parent.claim)
    q.finish(parent.claim)
    joined = run().queue.enqueue('create', 'smoke-workspace', params={'repo': 'r'}, parent_id=pid)
    assert joined.folded and joined.entry['id'] == child.entry['id']
    # Another request under the finished parent is still refused.
    with pytest.raises(QueueError, match='has already finished \\(done\\)'):
        run().queue.enqueue('create', 'smoke-workspace', params={'repo': 'other'}, parent_id=pid)
