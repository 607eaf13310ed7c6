"""Owner liveness across hosts: a run's queue claim carries a lease that its writes renew; a controller on another
host takes over only a claim whose lease expired; on one host the pid and start time still decide. On both backends,
with real processes standing for ansible-playbook runs (their host is the run identity's name for the controller).
On PostgreSQL the leases are written and judged by the database's clock: a controller whose own clock is off (a
forked process whose Python clock is shifted) sees the same as the others."""

import re
import time

import pytest

from ansible_collections.ephemera.workspaces.plugins.module_utils.core import run_identity
from ansible_collections.ephemera.workspaces.plugins.module_utils.core.errors import ClaimLostError, IdempotencyError
from ansible_collections.ephemera.workspaces.plugins.module_utils.core.queue import CLAIMED, WAITING, Queue
from ansible_collections.ephemera.workspaces.plugins.module_utils.core.run_identity import Owner, proc_start_time
from tests.runs import claim, held_and_awaited, run_on


def kill(proc):
    proc.kill()
    proc.wait()


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


def test_status_says_when_a_runner_on_another_host_may_be_taken_over_and_when_it_is_presumed_dead(store, processes):
    """A job killed in its own container (AWX) cannot be seen from another one: the status says that its runner is
    judged by its lease, until when, and that the next run takes over then; once the lease ran out, that it is
    presumed dead."""
    from ansible_collections.ephemera.workspaces.plugins.module_utils.core.queue import render_tree
    with store.open() as journal:
        a_proc, b_proc = processes(), processes()
        claim(run_on(journal, 'controller-a', a_proc, lease=2.0))
        kill(a_proc)
        b = run_on(journal, 'controller-b', b_proc, lease=2.0)
        [entry] = b.entries(target='ws1')
        assert entry['runner_alive'] is True and entry['runner_judged_by'] == 'lease'
        assert entry['takeover_at'] == entry['lease_expires'] and 0 < entry['takeover_in'] <= 2
        [line] = render_tree([entry])
        assert ('(runner controller-a pid %d on another host, last heard from ' % a_proc.pid) in line, line
        assert ': alive while its lease holds, until %s UTC, in ' % entry['takeover_at'][:19].replace('T', ' ') in line
        assert 'if its job was killed, the next run on this workspace takes it over then)' in line, line
        time.sleep(2.2)
        [entry] = b.entries(target='ws1')
        assert entry['runner_alive'] is False and entry['takeover_in'] == 0
        [line] = render_tree([entry])
        assert ('(runner controller-a pid %d on another host is presumed dead, last heard from ' % a_proc.pid) in line
        assert 'its lease ran out; the next run on this workspace takes it over)' in line, line
        # A runner on this host is judged by its process: no lease, no takeover time while it lives.
        here = run_on(journal, run_identity.hostname(), b_proc, lease=600)
        claim(here, target='ws2')
        [mine] = here.entries(target='ws2')
        assert (mine['runner_judged_by'], mine['takeover_at'], mine['runner_alive']) == ('process', None, True)
        assert '(runner %s pid %d);' % (run_identity.hostname(), b_proc.pid) in render_tree([mine])[0]


def test_a_live_run_that_renews_its_lease_is_never_taken_over(store, processes):
    with store.open() as journal:
        a, first, b, request = held_and_awaited(journal, processes, lease=1.0)
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


# ------------------------------------------------ clocks: a journal on PostgreSQL judges by the database's clock

SKEW = 2 * 3600.0  # two hours: far more than a lease


def _as_skewed_controller(url, skew, host, run_pid, action, out):
    """In a process of its own (forked): controller ``host`` whose clock is ``skew`` seconds off, standing for the run
    ``run_pid``, does ``action`` on the journal at ``url``; what it saw goes to ``out``."""
    import os as _os
    real = time.time
    time.time = lambda: real() + skew  # this process's clock only
    _os.environ['EPHEMERA_CONTROLLER_HOST'] = host
    from ansible_collections.ephemera.workspaces.plugins.module_utils.core.journal import Journal
    try:
        with Journal.open(url=url) as journal:
            queue = Queue(journal, owner=Owner(host, run_pid, proc_start_time(run_pid)), lease=600)
            if action == 'claim':
                turn = queue.poll(queue.enqueue('create', 'ws1').request_id)
                out.put((turn.outcome, turn.claim))
            elif action == 'poll':
                turn = queue.poll(queue.enqueue('create', 'ws1').request_id)
                out.put((turn.outcome, None))
            else:
                claimed = journal.begin_idempotent('key-1', 'create', {'workspace': 'ws1'})
                out.put(('claimed', claimed.replayed))
    except Exception as exc:  # pylint: disable=broad-except
        out.put(('error', '%s: %s' % (type(exc).__name__, exc)))


def _run_skewed(url, skew, host, run_pid, action):
    import multiprocessing
    fork = multiprocessing.get_context('fork')
    out = fork.Queue()
    child = fork.Process(target=_as_skewed_controller, args=(url, skew, host, run_pid, action, out))
    child.start()
    result = out.get(timeout=120)
    child.join(timeout=120)
    return result


@pytest.mark.parametrize('who', ['the-viewer-runs-ahead', 'the-claimant-runs-behind'])
def test_a_controller_whose_clock_is_off_judges_anothers_claim_as_the_database_does(pg_server, processes, who):
    """Two controllers share a journal on PostgreSQL; one's clock is two hours off. Whether it is the one that looks
    at the other's claim (it would think the lease ran out) or the one that holds the claim (its lease would be
    written as long expired), the claim is judged alive: the other waits, and the holder's writes go on."""
    url = pg_server.new_database('clock_%s' % who.replace('-', '_'))
    a_proc, b_proc = processes(), processes()
    from ansible_collections.ephemera.workspaces.plugins.module_utils.core.journal import Journal
    with Journal.open(url=url) as journal:
        if who == 'the-viewer-runs-ahead':
            first = claim(run_on(journal, 'controller-a', a_proc, lease=600))
            seen = _run_skewed(url, SKEW, 'controller-b', b_proc.pid, 'poll')
            holder = first.claim
        else:
            outcome, holder = _run_skewed(url, -SKEW, 'controller-a', a_proc.pid, 'claim')
            assert outcome == CLAIMED
            b = run_on(journal, 'controller-b', b_proc, lease=600)
            seen = (b.poll(b.enqueue('create', 'ws1').request_id).outcome, None)
        assert seen == (WAITING, None)
        journal.append_event('ws1', 'note', 'the holder still writes', claim=holder)
        [entry] = [e for e in run_on(journal, 'controller-b', b_proc, lease=600).entries(target='ws1')
                   if e['state'] == 'running']
        assert entry['owner']['host'] == 'controller-a' and entry['claims'] == 1 and entry['runner_alive'] is True
        actions = [e['action'] for e in journal.events('ws1')]
        assert 'runner_lost' not in actions and 'resumed' not in actions


def test_an_idempotency_record_is_not_expired_by_a_clock_that_runs_ahead(pg_server):
    """A create holds an idempotency key (records last 24 h); a controller whose clock is 25 h ahead repeats the
    request with the same key: it is told the first is still running, not handed a fresh claim to create again."""
    url = pg_server.new_database('clock_idempotency')
    from ansible_collections.ephemera.workspaces.plugins.module_utils.core.journal import Journal
    with Journal.open(url=url) as journal:
        first = journal.begin_idempotent('key-1', 'create', {'workspace': 'ws1'})
        assert first.replayed is False
        outcome, said = _run_skewed(url, 25 * 3600.0, 'controller-b', 1, 'idempotency')
        assert outcome == 'error' and said.startswith('IdempotencyError: A create with this idempotency key is still '
                                                      'running'), said


def test_a_run_waiting_for_its_turn_says_what_it_is_behind(store, processes, monkeypatch):
    from ansible_collections.ephemera.workspaces.plugins.module_utils.core import waiter
    from ansible_collections.ephemera.workspaces.plugins.module_utils.core.errors import QueueTimeout
    monkeypatch.setenv('EPHEMERA_PROGRESS_INTERVAL', '0.3')
    with store.open() as journal:
        a_proc, b_proc = processes(), processes()
        first = claim(run_on(journal, 'controller-a', a_proc, lease=600))
        run_on(journal, 'controller-a', a_proc, lease=600).step(first.claim, 'wait for SSH')
        b = run_on(journal, 'controller-b', b_proc, lease=600)
        said = []
        with waiter.reporting(said.append), pytest.raises(QueueTimeout):
            b.wait(b.enqueue('create', 'ws1').request_id, timeout=1.2)
    assert said, said
    assert re.match(r'waiting for its turn: behind #1 create of workspace ws1 running, step wait for SSH, runner '
                    r'controller-a pid %d \(\d+ s of 1 s\)$' % a_proc.pid, said[0]), said


# ------------------------------------------ idempotency keys: judged by the claim of the operation they were used in


def test_a_key_used_by_a_run_that_died_on_another_host_is_free_once_its_claim_lease_ran_out(store, processes):
    """A create claimed an idempotency key under its queue claim on controller A and A's job died. Controller B's
    retry with the same key is refused while A's claim lease holds (A may be alive), and goes on, resuming the same
    operation, once that lease ran out: not 24 hours later."""
    with store.open() as journal:
        a_proc, b_proc = processes(), processes()
        a = run_on(journal, 'controller-a', a_proc, lease=1.5)
        first = claim(a)
        owner_a = a.owner
        assert not journal.begin_idempotent('ticket-1', 'create', {'name': 'ws1'}, owner=owner_a,
                                            claim=first.claim).replayed
        kill(a_proc)
        b = run_on(journal, 'controller-b', b_proc, lease=1.5)
        request = b.enqueue('create', 'ws1').request_id
        with pytest.raises(IdempotencyError, match=r'still running \(controller-a pid %d, queued operation #%d\)'
                           % (a_proc.pid, first.entry['id'])):
            journal.begin_idempotent('ticket-1', 'create', {'name': 'ws1'}, owner=b.owner)
        time.sleep(1.7)
        turn = b.poll(request)
        assert turn.outcome == CLAIMED and turn.resumed
        again = journal.begin_idempotent('ticket-1', 'create', {'name': 'ws1'}, owner=b.owner, claim=turn.claim)
        assert again.replayed is False
        journal.finish_idempotent(again, {'status': 'ready'})
        replay = journal.begin_idempotent('ticket-1', 'create', {'name': 'ws1'}, owner=a.owner)
        assert replay.replayed and replay.result == {'status': 'ready'}


def test_a_key_stays_held_while_its_operation_runs_on_another_host(store, processes):
    """The operation of the first use goes on (its claim renewed): a retry on another host is refused, and still
    refused after longer than a lease, for as long as that operation runs; once it failed, the key is free."""
    with store.open() as journal:
        a_proc, b_proc = processes(), processes()
        a = run_on(journal, 'controller-a', a_proc, lease=1.0)
        first = claim(a)
        journal.begin_idempotent('ticket-2', 'create', {'name': 'ws1'}, owner=a.owner, claim=first.claim)
        b_owner = run_on(journal, 'controller-b', b_proc, lease=1.0).owner
        deadline = time.time() + 2.5
        while time.time() < deadline:
            a.step(first.claim, 'clone')
            with pytest.raises(IdempotencyError, match='still running'):
                journal.begin_idempotent('ticket-2', 'create', {'name': 'ws1'}, owner=b_owner)
            time.sleep(0.3)
        a.finish(first.claim, 'failed', {'msg': 'clone refused'})
        assert journal.begin_idempotent('ticket-2', 'create', {'name': 'ws1'}, owner=b_owner).replayed is False


def test_a_key_used_outside_the_queue_on_another_host_carries_a_lease_of_its_own(store, processes):
    with store.open() as journal:
        a_proc, b_proc = processes(), processes()
        owner_a = Owner('controller-a', a_proc.pid, proc_start_time(a_proc.pid))
        owner_b = Owner('controller-b', b_proc.pid, proc_start_time(b_proc.pid))
        journal.begin_idempotent('ticket-3', 'create', {'name': 'ws1'}, owner=owner_a, lease=1.0)
        with pytest.raises(IdempotencyError, match='still running'):
            journal.begin_idempotent('ticket-3', 'create', {'name': 'ws1'}, owner=owner_b)
        time.sleep(1.2)
        assert journal.begin_idempotent('ticket-3', 'create', {'name': 'ws1'}, owner=owner_b).replayed is False
