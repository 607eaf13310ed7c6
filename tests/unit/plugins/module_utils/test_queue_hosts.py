"""Owner liveness across hosts: a run's queue claim carries a lease that its writes renew; a controller on another
host takes over only a claim whose lease expired; on one host the pid and start time still decide. On both backends,
with real processes standing for ansible-playbook runs (their host is the run identity's name for the controller)."""

import subprocess
import sys
import time

import pytest

from ansible_collections.ephemera.workspaces.plugins.module_utils.core import run_identity
from ansible_collections.ephemera.workspaces.plugins.module_utils.core.errors import ClaimLostError
from ansible_collections.ephemera.workspaces.plugins.module_utils.core.queue import CLAIMED, WAITING, Queue
from ansible_collections.ephemera.workspaces.plugins.module_utils.core.run_identity import Owner, proc_start_time


@pytest.fixture
def processes():
    started = []

    def start():
        proc = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)'])
        started.append(proc)
        return proc

    yield start
    for proc in started:
        proc.kill()
        proc.wait()


def run_on(journal, host, proc, lease):
    """The queue as seen by the run ``proc`` on controller ``host``."""
    return Queue(journal, owner=Owner(host, proc.pid, proc_start_time(proc.pid)), lease=lease)


def kill(proc):
    proc.kill()
    proc.wait()


def claim(queue, kind='create', target='ws1'):
    turn = queue.poll(queue.enqueue(kind, target).request_id)
    assert turn.outcome == CLAIMED
    return turn


def test_host_name_comes_from_the_run_identity(monkeypatch):
    monkeypatch.setenv('EPHEMERA_CONTROLLER_HOST', 'controller-b')
    assert run_identity.hostname() == 'controller-b' and Owner.current().host == 'controller-b'
    monkeypatch.delenv('EPHEMERA_CONTROLLER_HOST')
    assert run_identity.hostname() == run_identity.socket.gethostname()


def test_another_host_takes_over_only_an_expired_claim(store, processes):
    with store.open() as journal:
        a_proc, b_proc = processes(), processes()
        a = run_on(journal, 'controller-a', a_proc, lease=1.5)
        first = claim(a)
        kill(a_proc)  # A's run dies; from another host nothing can see its pid
        b = run_on(journal, 'controller-b', b_proc, lease=1.5)
        request = b.enqueue('create', 'ws1').request_id
        assert b.poll(request).outcome == WAITING  # the lease still runs: A counts as alive
        time.sleep(1.7)
        turn = b.poll(request)
        assert turn.outcome == CLAIMED and turn.resumed and turn.entry['id'] == first.entry['id']
        assert turn.entry['owner']['host'] == 'controller-b' and turn.entry['claims'] == 2
        # A's claim is fenced off: none of its writes goes through any more.
        with pytest.raises(ClaimLostError, match='another run took it over'):
            journal.append_event('ws1', 'note', 'late write of A', claim=first.claim)
        actions = [e['action'] for e in journal.events('ws1')]
        assert 'runner_lost' in actions and 'late write of A' not in actions


def test_a_live_run_that_renews_its_lease_is_never_taken_over(store, processes):
    with store.open() as journal:
        a_proc, b_proc = processes(), processes()
        a = run_on(journal, 'controller-a', a_proc, lease=1.0)
        first = claim(a)
        b = run_on(journal, 'controller-b', b_proc, lease=1.0)
        request = b.enqueue('create', 'ws1').request_id
        deadline = time.time() + 3.0  # three leases long
        while time.time() < deadline:
            a.step(first.claim, 'clone')  # every write under the claim renews the lease
            assert b.poll(request).outcome == WAITING
            time.sleep(0.3)
        a.finish(first.claim, 'done', {'ok': True})
        assert b.poll(request).outcome != WAITING


def test_on_one_host_a_dead_pid_is_taken_over_at_once(store, processes):
    with store.open() as journal:
        a_proc, b_proc = processes(), processes()
        here = run_identity.hostname()
        a = run_on(journal, here, a_proc, lease=600)
        claim(a)
        b = run_on(journal, here, b_proc, lease=600)
        request = b.enqueue('create', 'ws1').request_id
        assert b.poll(request).outcome == WAITING  # A lives
        kill(a_proc)
        turn = b.poll(request)  # long before the lease would expire
        assert turn.outcome == CLAIMED and turn.resumed
