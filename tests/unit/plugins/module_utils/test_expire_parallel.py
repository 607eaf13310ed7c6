"""The expiry sweep's releases run up to ``parallel`` at once, each with a journal connection of its own, and the
sweep's entries keep the order of the due list (earliest expiry first). The releases themselves are the real path's
(tests/integration/create/test_many.py releases twenty at once on the try-out cluster); here a release is a stand-in
that waits until enough others run beside it.

The activity looks run up to ``parallel`` at once too, and each answer is recorded in the thread that asked, on that
thread's own connection, while the other asks go on. The real asks and records are tests/integration/create/
test_expire.py's and bench/expire.py's (real guests); here the ask and the record are stand-ins."""

import threading
import time

from ansible_collections.ephemera.workspaces.plugins.module_utils.flows import agent as agent_flow
from ansible_collections.ephemera.workspaces.plugins.module_utils.flows import expire


class Connection:
    def __init__(self, opened):
        self.closed = False
        opened.append(self)

    def reopen(self):
        return Connection(self.opened)

    def close(self):
        self.closed = True

    def list_workspaces(self, status=None):
        assert status == 'ready'
        return [{'name': name, 'status': 'ready', 'desired_state': 'present', 'lease': dict(LEASE)}
                for name in self.names]


LEASE = {'created_at': time.time(), 'last_touched_at': time.time(), 'idle_timeout': 3600, 'ttl': 7200}


def sweep_with(opened, parallel):
    Connection.opened = opened
    journal = Connection(opened)
    return expire.ExpirySweep(journal, None, {'parallel': parallel}, 'secret'), journal


def test_releases_run_up_to_parallel_at_once_each_on_its_own_connection_and_report_in_due_order(monkeypatch):
    opened, lock = [], threading.Lock()
    running, most = [0], [0]
    three_in = threading.Barrier(3)

    def release(self, ws, why):
        with lock:
            running[0] += 1
            most[0] = max(most[0], running[0])
        if ws['name'] in ('a', 'b', 'c'):
            three_in.wait(5)  # the first three are under way together, or this times out
        assert self.journal is not journal
        self._add(ws['name'], 'released', why)
        self.changed = True
        with lock:
            running[0] -= 1

    monkeypatch.setattr(expire.ExpirySweep, 'release', release)
    sweep, journal = sweep_with(opened, parallel=3)
    due = [({'name': name}, 'expired') for name in 'abcdefg']
    sweep.release_all(due)
    assert [e['workspace'] for e in sweep.entries] == list('abcdefg') and sweep.changed
    assert most[0] == 3
    assert len(opened) == 1 + len(due) and all(c.closed for c in opened[1:]) and not journal.closed


def test_parallel_one_releases_one_after_another_on_the_sweeps_own_connection(monkeypatch):
    opened, order = [], []
    monkeypatch.setattr(expire.ExpirySweep, 'release', lambda self, ws, why: order.append((ws['name'], self)))
    sweep, journal = sweep_with(opened, parallel=1)
    sweep.release_all([({'name': 'a'}, 'expired'), ({'name': 'b'}, 'retry')])
    assert [name for name, dummy in order] == ['a', 'b'] and all(s is sweep for dummy, s in order)
    assert opened == [journal]


def looking(monkeypatch, names, ask):
    """A sweep over the ready workspaces ``names`` whose ask is ``ask(name)``; what each record saw, in order."""
    recorded, lock = [], threading.Lock()

    def record(journal, name, answer, **kwargs):
        with lock:
            recorded.append((name, journal, threading.current_thread()))
        return {'name': name, 'lease': dict(LEASE), 'facts': {}}, False

    monkeypatch.setattr(expire.ExpirySweep, '_activity', lambda self, ws: ask(ws['name']))
    monkeypatch.setattr(agent_flow, 'record', record)
    Connection.names = names
    return recorded


def test_each_answer_is_recorded_in_the_thread_that_asked_while_the_other_asks_go_on(monkeypatch):
    opened, asked = [], threading.Lock()
    first_recorded = threading.Event()
    threads = {}

    def ask(name):
        with asked:
            threads[name] = threading.current_thread()
        if name == 'e':
            # The last ask waits for the first answer to be recorded: it is, while this ask is still out.
            assert first_recorded.wait(5), 'no answer was recorded before every ask was done'
        return {'activity': 'active'}

    recorded = looking(monkeypatch, list('abcde'), ask)
    original = agent_flow.record

    def record_then_say(journal, name, answer, **kwargs):
        try:
            return original(journal, name, answer, **kwargs)
        finally:
            first_recorded.set()
    monkeypatch.setattr(agent_flow, 'record', record_then_say)
    sweep, journal = sweep_with(opened, parallel=2)
    sweep.look_at_activity()
    assert [e['workspace'] for e in sweep.entries] == list('abcde')
    assert all(e['action'] == 'activity' and e['activity'] == 'active' for e in sweep.entries)
    # Recorded by the thread that asked, on a connection of that thread's own (never the sweep's), all closed after.
    assert sorted(name for name, dummy, dummy in recorded) == list('abcde')
    assert all(thread is threads[name] for name, dummy, thread in recorded)
    assert all(conn is not journal for dummy, conn, dummy in recorded)
    per_thread = {}
    for dummy, conn, thread in recorded:
        assert per_thread.setdefault(thread, conn) is conn
    assert 1 <= len(opened) - 1 <= 2 and all(c.closed for c in opened[1:]) and not journal.closed


def test_a_workspace_that_does_not_answer_is_noted_in_its_place_and_not_recorded(monkeypatch):
    opened = []
    recorded = looking(monkeypatch, list('abc'), lambda name: {'error': 'no route'} if name == 'b'
                       else {'activity': 'idle'})
    sweep, journal = sweep_with(opened, parallel=1)
    sweep.look_at_activity()
    assert [(e['workspace'], e['action']) for e in sweep.entries] == [
        ('a', 'activity'), ('b', 'no_answer'), ('c', 'activity')]
    assert 'no route' in sweep.entries[1]['detail']
    # parallel 1: one after another on the sweep's own connection.
    assert [(name, conn) for name, conn, dummy in recorded] == [('a', journal), ('c', journal)] and opened == [journal]
