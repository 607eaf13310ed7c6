"""A claim kept while a long step runs (core/renewal.py, operation.running_step): renewed in the background so that a
controller on another host waits behind a step longer than the lease instead of taking the operation over; and a
step whose renewal is refused (taken over, cancelled) or cannot reach the journal for most of a lease stops at its
next wait, call or write. On both backends, with real processes standing for the runs."""

import threading
import time

import pytest

from ansible_collections.ephemera.workspaces.plugins.module_utils.core import renewal, waiter
from ansible_collections.ephemera.workspaces.plugins.module_utils.core.errors import ClaimLostError, JournalError
from ansible_collections.ephemera.workspaces.plugins.module_utils.core.queue import CLAIMED, WAITING
from ansible_collections.ephemera.workspaces.plugins.module_utils.operation import running_step
from tests.runs import claim, held_and_awaited, run_on


def test_a_step_longer_than_the_lease_keeps_its_claim_and_the_other_controller_waits(store, processes):
    with store.open() as journal:
        a, first, b, request = held_and_awaited(journal, processes, lease=1.2)
        seen = []
        with running_step(journal, first.claim, 'provision', 'ws1') as keeper:
            deadline = time.time() + 4.0  # more than three leases without a write of the step's own
            while time.time() < deadline:
                seen.append(b.poll(request).outcome)
                time.sleep(0.3)
        assert keeper.renewals >= 4 and keeper.lost is None
        assert set(seen) == {WAITING}
        # The step goes on and finishes under its own claim; only then does B get its turn.
        journal.append_event('ws1', 'note', 'provisioned', claim=first.claim)
        a.finish(first.claim, 'done', {})
        entry = a.get(first.entry['id'])
        assert entry['claims'] == 1 and entry['state'] == 'done'
        assert 'runner_lost' not in [e['action'] for e in journal.events('ws1')]
        assert b.poll(request).outcome == CLAIMED


def test_a_step_whose_claim_was_taken_stops_at_its_next_wait_and_writes_nothing(store, processes):
    with store.open() as journal:
        a_proc = processes()
        a = run_on(journal, 'controller-a', a_proc, lease=0.9)
        first = claim(a)
        looks = []
        with running_step(journal, first.claim, 'provision', 'ws1') as keeper:
            a.cancel(first.entry['id'], reason='operator stopped it', force=True)
            deadline = time.time() + 3.0
            while keeper.lost is None and time.time() < deadline:
                time.sleep(0.05)
            assert keeper.lost is not None
            with pytest.raises(ClaimLostError, match='operator stopped it'):
                waiter.wait_for(lambda remaining: looks.append(1) or waiter.pending(), timeout=5)
            with pytest.raises(ClaimLostError):
                journal.append_event('ws1', 'note', 'late write', claim=first.claim)
        assert looks == []
        assert 'late write' not in [e['action'] for e in journal.events('ws1')]
    # Outside the step nothing is checked any more: a later step of another claim is not stopped by it.
    renewal.check()


def test_a_journal_out_of_reach_for_most_of_a_lease_stops_the_step():
    """The renewals after the first fail (the journal does not answer): the claim is held while its lease may still
    run, and given up, with the last error, once two thirds of it passed since the last renewal that went through."""
    calls = []

    def renew():
        calls.append(time.monotonic())
        if len(calls) > 1:
            raise JournalError('Cannot reach the PostgreSQL journal at 127.0.0.1:5432')
        return 0.9

    with renewal.ClaimKeeper(renew, {'entry_id': 7, 'fence': 'f'}) as keeper:
        renewal.check()  # held at first
        deadline = time.monotonic() + 5.0
        while keeper.lost is None and time.monotonic() < deadline:
            time.sleep(0.05)
        with pytest.raises(ClaimLostError, match=r'could not renew its claim on queued operation #7 for \d+ s \(last '
                                                 r'error: Cannot reach the PostgreSQL journal'):
            renewal.check()
        # Another claim is not this step's: it is not stopped by this keeper.
        renewal.check({'entry_id': 8, 'fence': 'g'})
    assert len(calls) >= 3  # the first renewal, then failed attempts until the claim was given up
    renewal.check()  # the step ended: nothing is checked any more


def test_steps_in_threads_of_their_own_each_answer_to_their_own_keeper():
    """Two releases of one expiry sweep run at once, each in a thread with its claim's keeper: the claim lost by one
    stops that one only; a thread a step started (no keeper of its own) answers to the only step running, and to
    none while two run."""
    def lost_after_first():
        calls = []

        def renew():
            calls.append(1)
            if len(calls) > 1:
                raise ClaimLostError('claim #1 was taken over')
            return 0.3
        return renew

    both_in, first_lost, done = threading.Barrier(2), threading.Event(), threading.Event()
    seen = {}

    def step(name, renew, claim):
        with renewal.ClaimKeeper(renew, claim) as keeper:
            both_in.wait(5)
            if name == 'lost':
                deadline = time.monotonic() + 5.0
                while keeper.lost is None and time.monotonic() < deadline:
                    time.sleep(0.02)
                first_lost.set()
            else:
                first_lost.wait(5)
            try:
                renewal.check()
                seen[name] = 'went on'
            except ClaimLostError as err:
                seen[name] = str(err)
            helper = threading.Thread(target=lambda: seen.setdefault(name + ' helper', renewal.current()))
            helper.start()
            helper.join(5)
            both_in.wait(5)
        if name == 'kept':
            done.set()

    threads = [threading.Thread(target=step, args=('lost', lost_after_first(), {'entry_id': 1, 'fence': 'a'})),
               threading.Thread(target=step, args=('kept', lambda: 60.0, {'entry_id': 2, 'fence': 'b'}))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    assert seen['lost'] == 'claim #1 was taken over' and seen['kept'] == 'went on'
    # While both ran, a helper thread could not tell whose it was: it is checked against neither.
    assert seen['lost helper'] is None and seen['kept helper'] is None
    assert done.is_set() and renewal.current() is None
    with renewal.ClaimKeeper(lambda: 60.0, {'entry_id': 3, 'fence': 'c'}) as alone:
        helper = threading.Thread(target=lambda: seen.setdefault('alone helper', renewal.current()))
        helper.start()
        helper.join(5)
    assert seen['alone helper'] is alone
