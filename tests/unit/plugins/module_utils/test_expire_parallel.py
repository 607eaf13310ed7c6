"""The expiry sweep's releases run up to ``parallel`` at once, each with a journal connection of its own, and the
sweep's entries keep the order of the due list (earliest expiry first). The releases themselves are the real path's
(tests/integration/create/test_many.py releases twenty at once on the try-out cluster); here a release is a stand-in
that waits until enough others run beside it."""

import threading

from ansible_collections.ephemera.workspaces.plugins.module_utils.flows import expire


class Connection:
    def __init__(self, opened):
        self.closed = False
        opened.append(self)

    def reopen(self):
        return Connection(self.opened)

    def close(self):
        self.closed = True


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
