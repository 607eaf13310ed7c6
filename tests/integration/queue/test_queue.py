"""The queue with real, concurrent ansible-playbook processes sharing one journal file."""

import json
import os
import re
import signal
import sys
import time

from ansible_collections.ephemera.workspaces.plugins.module_utils.core.journal import Journal
from ansible_collections.ephemera.workspaces.plugins.module_utils.core.queue import Queue
from tests.ansible_run import Run, run_ansible, wait_until

from .runs import OP_PLAYBOOK, open_gate, query


def seed_workspace(path, *names):
    with Journal.open(path) as j:
        for name in names:
            j.create_workspace(name)


def requests_of(path, target):
    return query(path, 'SELECT r.* FROM queue_requests r JOIN queue q ON q.id = r.entry_id WHERE q.target = ? '
                       'ORDER BY r.id', (target,))


def entries_of(path, target):
    return query(path, 'SELECT * FROM queue WHERE target = ? ORDER BY id', (target,))


def queue_events(path, key):
    rows = query(path, "SELECT action, detail FROM events WHERE workspace = ? AND kind = 'queue' ORDER BY id", (key,))
    return [(row['action'], json.loads(row['detail']).get('entry')) for row in rows]


def test_five_runs_on_one_workspace_run_one_at_a_time_in_fifo_order(tmp_path, journal_path, start_run):
    seed_workspace(journal_path, 'ws-fifo')
    gate = str(tmp_path / 'gate')
    kinds = ['create', 'archive', 'reconcile', 'archive', 'destroy']
    runs = []
    for n, kind in enumerate(kinds):
        extra = {'op_kind': kind, 'op_target': 'ws-fifo', 'op_params': {'run': n}, 'requester': 'run-%d' % n}
        extra.update({'gate': gate} if n == 0 else {'hold_seconds': 0.5})
        runs.append(start_run(extra))
        # The next run starts once this one is in the queue, so the queue order is the start order.
        wait_until(lambda: len(requests_of(journal_path, 'ws-fifo')) == n + 1, 'request %d queued' % n, runs=runs)
    wait_until(lambda: [e['state'] for e in entries_of(journal_path, 'ws-fifo')] == ['running'] + ['queued'] * 4,
               'the first run holding the workspace while four wait', runs=runs)
    open_gate(gate)
    for run in runs:
        assert run.wait().returncode == 0, run.output[-3000:]
    entries = entries_of(journal_path, 'ws-fifo')
    assert [e['kind'] for e in entries] == kinds
    assert [e['state'] for e in entries] == ['done'] * 5
    # Each ran in the run that asked for it (the owner is the ansible-playbook process itself) ...
    assert [json.loads(e['owner'])['pid'] for e in entries] == [run.pid for run in runs]
    assert [run.task('Report')['msg']['entry']['id'] for run in runs] == [e['id'] for e in entries]
    assert all(run.task('Report')['msg']['claimed'] and not run.task('Report')['msg']['folded'] for run in runs)
    # ... one at a time, in queue order: each started after the one before it had ended.
    for before, after in zip(entries, entries[1:]):
        assert after['started_at'] >= before['ended_at']
    events = queue_events(journal_path, 'ws-fifo')
    lifecycle = [(action, entry) for action, entry in events if action in ('started', 'finished')]
    assert lifecycle == [(action, e['id']) for e in entries for action in ('started', 'finished')]
    steps = [entry for action, entry in events if action == 'step']
    assert steps == [e['id'] for e in entries for _step in ('prepare', 'hold')]


def test_five_identical_requests_fold_into_one_execution(tmp_path, journal_path, start_run):
    seed_workspace(journal_path, 'ws-fold')
    gate = str(tmp_path / 'gate')
    blocker = start_run({'op_kind': 'create', 'op_target': 'ws-fold', 'gate': gate})
    wait_until(lambda: [e['state'] for e in entries_of(journal_path, 'ws-fold')] == ['running'], 'the blocker running',
               runs=[blocker])
    same = {'op_kind': 'archive', 'op_target': 'ws-fold', 'op_params': {'keep': 3}, 'hold_seconds': 0.5}
    runs = [start_run(dict(same, requester='asker-%d' % n)) for n in range(5)]
    wait_until(lambda: len(requests_of(journal_path, 'ws-fold')) == 6, 'five requests for the archive',
               runs=runs + [blocker])
    open_gate(gate)
    for run in [blocker] + runs:
        assert run.wait().returncode == 0, run.output[-3000:]
    archives = [e for e in entries_of(journal_path, 'ws-fold') if e['kind'] == 'archive']
    assert len(archives) == 1 and archives[0]['state'] == 'done'
    requesters = [r for r in requests_of(journal_path, 'ws-fold') if r['entry_id'] == archives[0]['id']]
    assert sorted(r['requested_by'] for r in requesters) == ['asker-%d' % n for n in range(5)]
    reports = [run.task('Report')['msg'] for run in runs]
    assert sorted(r['claimed'] for r in reports) == [False, False, False, False, True]
    assert sorted(r['folded'] for r in reports) == [False, True, True, True, True]
    # Every run reports the same outcome: the one execution's entry, state and result.
    outcomes = set((r['entry']['id'], r['entry']['state'], json.dumps(r['entry']['result'], sort_keys=True))
                   for r in reports)
    assert len(outcomes) == 1
    runner = [run for run, report in zip(runs, reports) if report['claimed']][0]
    # A number on ansible-core 2.19 (native types), its text before.
    assert int(json.loads(archives[0]['result'])['done_by']) == runner.pid
    started = [entry for action, entry in queue_events(journal_path, 'ws-fold') if action == 'started']
    assert started.count(archives[0]['id']) == 1


def test_a_sigkilled_runner_is_detected_and_its_operation_resumed_by_the_next_run(tmp_path, journal_path, start_run):
    gate = str(tmp_path / 'never-opened')
    victim = start_run({'op_kind': 'create', 'op_target': 'ws-kill', 'op_params': {'ref': 'main'}, 'gate': gate})
    wait_until(lambda: [e['step'] for e in entries_of(journal_path, 'ws-kill')] == ['hold'],
               'the first run at step hold', runs=[victim])
    successor = start_run({'op_kind': 'create', 'op_target': 'ws-kill', 'op_params': {'ref': 'main'}})
    wait_until(lambda: len(requests_of(journal_path, 'ws-kill')) == 2, 'the second run queued', runs=[successor])
    os.kill(victim.pid, signal.SIGKILL)  # mid-operation: its entry is running, at step "hold"
    victim.wait()
    victim.kill()  # its orphaned worker and module
    assert victim.returncode == -signal.SIGKILL
    assert successor.wait().returncode == 0, successor.output[-3000:]
    report = successor.task('Report')['msg']
    assert report['claimed'] and report['resumed'] and report['resumed_from_step'] == 'hold'
    first, second = entries_of(journal_path, 'ws-kill')
    assert report['entry']['id'] == first['id']
    assert (first['state'], first['claims'], json.loads(first['owner'])['pid']) == ('done', 2, successor.pid)
    assert json.loads(first['result'])['resumed'] is True
    assert second['state'] == 'cancelled' and json.loads(second['result'])['folded_into'] == first['id']
    events = queue_events(journal_path, 'ws-kill')
    assert [a for a, _entry in events if a in ('started', 'runner_lost', 'resumed', 'finished')] == [
        'started', 'runner_lost', 'resumed', 'finished']
    lost = query(journal_path, "SELECT detail FROM events WHERE action = 'runner_lost'")
    assert json.loads(lost[0]['detail'])['runner']['pid'] == victim.pid
    assert query(journal_path, "SELECT id FROM queue WHERE state IN ('queued', 'running')") == []


def test_different_workspaces_run_in_parallel(tmp_path, journal_path, start_run):
    inventory = tmp_path / 'hosts.ini'
    inventory.write_text('\n'.join('ws-par%d ansible_connection=local ansible_python_interpreter=%s' % (n, sys.executable)
                                   for n in range(3)) + '\n')
    gate = str(tmp_path / 'gate')
    run = start_run({'op_hosts': 'all', 'gate': gate}, inventory=str(inventory), forks=3)
    # The gate opens only once all three hold their workspace at the same time.
    wait_until(lambda: len(query(journal_path, "SELECT id FROM queue WHERE state = 'running'")) == 3,
               'three operations running at once', runs=[run])
    open_gate(gate)
    assert run.wait().returncode == 0, run.output[-3000:]
    assert [e['state'] for e in query(journal_path, 'SELECT state FROM queue ORDER BY id')] == ['done'] * 3


BAD_INPUT = '''
- hosts: localhost
  gather_facts: false
  tasks:
    - name: unknown kind
      ephemera.workspaces.queue: {kind: build, target: ws-busy}
      ignore_errors: true
    - name: unknown target
      ephemera.workspaces.queue: {kind: destroy, target: ghost}
      ignore_errors: true
    - name: wait timeout
      ephemera.workspaces.queue: {kind: archive, target: ws-busy, timeout: 1}
      ignore_errors: true
    - name: cancelled parent
      ephemera.workspaces.queue: {kind: destroy, target: ws-busy, parent_id: "{{ parent_id }}"}
      ignore_errors: true
    - name: lost claim
      ephemera.workspaces.queue: {state: step, step: late, claim: {entry_id: "{{ busy_id }}", fence: stale}}
      ignore_errors: true
    - name: no claim
      ephemera.workspaces.queue: {state: finished}
      ignore_errors: true
    - name: cancel a live run without force
      ephemera.workspaces.queue: {state: cancelled, entry_id: "{{ busy_id }}"}
      ignore_errors: true
    - name: check mode look
      ephemera.workspaces.queue: {kind: archive, target: ws-busy}
      check_mode: true
'''


def test_bad_input_gets_clear_messages_and_leaves_the_queue_consistent(tmp_path, journal_path, start_run):
    seed_workspace(journal_path, 'ws-busy')
    with Journal.open(journal_path) as j:
        # A live runner (this test process) holds ws-busy; a cancelled parent exists.
        queue = Queue(j)
        busy = queue.poll(queue.enqueue('create', 'ws-busy').request_id)
        queue.step(busy.claim, 'wait clone task')
        parent = queue.enqueue('destroy', 'old', target_type='group')
        queue.cancel(parent.entry['id'], reason='window closed')
    playbook = tmp_path / 'bad.yml'
    playbook.write_text(BAD_INPUT)
    run = start_run({'parent_id': parent.entry['id'], 'busy_id': busy.claim['entry_id']}, playbook=str(playbook))
    assert run.wait().returncode == 0, run.output[-3000:]
    results = dict(run.results())
    assert 'value of kind must be one of: archive, brief, create, destroy, fork, reconcile, template_build, got: build' in \
        results['unknown kind']['msg']
    assert results['unknown target']['msg'].startswith("Unknown target: no workspace named 'ghost' is recorded")
    timeout = results['wait timeout']['msg']
    assert timeout.startswith('Timed out after 1s waiting for the turn of #3 archive of workspace ws-busy')
    assert '#1 create of workspace ws-busy running, step wait clone task' in timeout
    assert 'Parent operation #2 destroy of group old was cancelled (window closed)' in results['cancelled parent']['msg']
    assert 'no longer holds the claim on operation #1' in results['lost claim']['msg']
    assert 'needs the claim that state=claimed returned' in results['no claim']['msg']
    assert 'is running (step wait clone task' in results['cancel a live run without force']['msg']
    look = results['check mode look']
    assert look['would'] == {'action': 'wait', 'entry_id': None, 'ahead': [1]} and look['changed']
    # Consistent: the timed-out request was withdrawn and its entry cancelled; nothing else was queued; the
    # busy entry is still running under its live owner, at its own step, untouched by the stale claim.
    with Journal.open(journal_path) as j:
        entries = Queue(j).entries()
    assert [(e['id'], e['kind'], e['state']) for e in entries] == [
        (1, 'create', 'running'), (2, 'destroy', 'cancelled'), (3, 'archive', 'cancelled')]
    assert entries[0]['step'] == 'wait clone task' and entries[0]['runner_alive']
    assert 'withdrawn' in entries[2]['result']['reason']
    assert [a for a, _entry in queue_events(journal_path, 'ws-busy')].count('step') == 1


def test_status_playbook_prints_the_queue_as_a_tree(journal_path):
    seed_workspace(journal_path, 'ws-a', 'ws-b')
    with Journal.open(journal_path) as j:
        queue = Queue(j)
        parent = queue.poll(queue.enqueue('destroy', 'idle-2h', target_type='group', requested_by='nightly',
                                          source='schedule').request_id)
        child = queue.poll(queue.enqueue('destroy', 'ws-a', parent_id=parent.claim['entry_id']).request_id)
        queue.step(child.claim, 'graceful shutdown')
        queue.enqueue('destroy', 'ws-b', parent_id=parent.claim['entry_id'], waits=False, claim=parent.claim)
    run = run_ansible(['ansible-playbook', 'ephemera.workspaces.status'], timeout=240, callback=None,
                      env={'EPHEMERA_JOURNAL': journal_path})
    assert run.ok, run.output
    out = run.stdout
    assert '"#1 destroy group idle-2h: running for ' in out and 'requested by nightly (schedule)' in out
    assert '"  |- #2 destroy workspace ws-a: running for ' in out and 'step \\"graceful shutdown\\"' in out
    assert '"  `- #3 destroy workspace ws-b: queued for ' in out


def test_two_hosts_of_one_run_on_one_workspace_fail_fast_instead_of_deadlocking(tmp_path, journal_path, start_run):
    inventory = tmp_path / 'hosts.ini'
    inventory.write_text(''.join('host-%s ansible_connection=local ansible_python_interpreter=%s\n' % (n, sys.executable)
                                 for n in 'ab'))
    run = start_run({'op_hosts': 'all', 'op_target': 'ws-same', 'op_params': '{{ {"host": inventory_hostname} }}',
                     'op_timeout': 600}, inventory=str(inventory), forks=2)
    assert run.wait().returncode != 0
    entries = entries_of(journal_path, 'ws-same')
    assert sorted(e['state'] for e in entries) == ['cancelled', 'done']
    done = [e for e in entries if e['state'] == 'done'][0]
    loser = 'host-a' if json.loads(done['params'])['host'] == 'host-b' else 'host-b'
    assert 'which this same ansible-playbook run holds' in run.task("Wait for this run's turn", loser)['msg']


def test_a_run_waiting_for_its_turn_says_what_it_is_behind_in_the_default_output(tmp_path, journal_path, start_run):
    """A run behind another one on the same workspace does not look stuck: with Ansible's default callback, its
    waiting task says at intervals what it waits behind (the entry, its step and its runner)."""
    seed_workspace(journal_path, 'ws-turn')
    gate = str(tmp_path / 'gate')
    holder = start_run({'op_target': 'ws-turn', 'gate': gate, 'requester': 'first'})
    wait_until(lambda: [e['step'] for e in entries_of(journal_path, 'ws-turn')] == ['hold'],
               'the first run holding ws-turn at its step hold', runs=[holder])
    waiting = Run.start(['ansible-playbook', OP_PLAYBOOK, '-e', json.dumps({'op_target': 'ws-turn', 'op_kind': 'destroy',
                                                                           'hold_seconds': 0})],
                        env={'EPHEMERA_JOURNAL': journal_path, 'EPHEMERA_PROGRESS_INTERVAL': '0.5'}, callback=None)
    try:
        wait_until(lambda: len(requests_of(journal_path, 'ws-turn')) == 2, 'the second run queued',
                   runs=[holder, waiting])
        time.sleep(3)
        open_gate(gate)
        assert holder.wait().returncode == 0, holder.output[-3000:]
        assert waiting.wait().returncode == 0, waiting.output[-3000:]
    finally:
        waiting.kill()
    said = re.findall(r'ws-turn: waiting for its turn: behind #1 create of workspace ws-turn running, step hold, '
                      r'runner \S+ pid %d \((\d+) s of 120 s\)' % holder.pid, waiting.output)
    assert len(said) >= 2 and int(said[-1]) >= 1, waiting.output[-3000:]
    # The default callback's own lines are there too: the progress lines come with the task, not instead of it.
    assert 'TASK [Wait for this run\'s turn]' in waiting.output
    # The holder never waited: it says nothing of the kind.
    assert 'waiting for' not in holder.output
