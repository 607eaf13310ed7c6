"""The journal against real SQLite files, a real PostgreSQL server and real concurrent processes.

The tests of what the journal guarantees (records, fencing, events, intents, cleanup debt, idempotency, migrations,
concurrency, crashes) run on both backends (the ``store`` and ``journal`` fixtures); the tests of the SQLite file
itself (its mode, directory, WAL, damaged files) on SQLite only.
"""

import hashlib
import multiprocessing
import os
import re
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time

import pytest

from ansible_collections.ephemera.workspaces.plugins.module_utils.core import journal as journal_mod
from ansible_collections.ephemera.workspaces.plugins.module_utils.core import journal_pg
from ansible_collections.ephemera.workspaces.plugins.module_utils.core.errors import (
    IdempotencyError,
    JournalError,
    StaleGenerationError,
)
from ansible_collections.ephemera.workspaces.plugins.module_utils.core.journal import Journal
from ansible_collections.ephemera.workspaces.plugins.module_utils.core.run_identity import Owner

FORK = multiprocessing.get_context('fork')


def digest(path):
    with open(path, 'rb') as f:
        return hashlib.sha256(f.read()).hexdigest()


def dir_listing(path):
    return sorted(os.listdir(os.path.dirname(path)))


@pytest.fixture
def journal(store):
    with store.open() as j:
        yield j


def database_error():
    """The errors a database raises when it refuses a statement (sqlite3's, psycopg's)."""
    import psycopg
    return (sqlite3.DatabaseError, psycopg.Error)


# ------------------------------------------------------------------ creation


def test_created_on_first_use_with_0600(path):
    with Journal.open(path) as j:
        assert j.schema_version == journal_mod.SCHEMA_VERSION
        assert len(j.controller_id) == 36
    assert os.stat(path).st_mode & 0o777 == 0o600


def test_wal_and_full_sync(path):
    with Journal.open(path) as journal:
        conn = journal._conn
        assert conn.execute('PRAGMA journal_mode').fetchone()[0] == 'wal'
        assert conn.execute('PRAGMA synchronous').fetchone()[0] == 2  # FULL


def test_path_from_environment(tmp_path, monkeypatch):
    target = str(tmp_path / 'from-env.sqlite')
    monkeypatch.setenv('EPHEMERA_JOURNAL', target)
    with Journal.open() as j:
        assert j.path == target
    assert os.path.exists(target)


def test_default_path_under_state_home(tmp_path, monkeypatch):
    monkeypatch.delenv('EPHEMERA_JOURNAL', raising=False)
    monkeypatch.setenv('XDG_STATE_HOME', str(tmp_path / 'state'))
    with Journal.open() as j:
        assert j.path == str(tmp_path / 'state' / 'ephemera' / 'journal.sqlite')
    assert os.stat(str(tmp_path / 'state' / 'ephemera')).st_mode & 0o777 == 0o700


# ----------------------------------------------------------------- bad input


def test_missing_directory_is_refused_and_not_made(tmp_path):
    target = tmp_path / 'nope' / 'journal.sqlite'
    with pytest.raises(JournalError) as err:
        Journal.open(str(target))
    assert 'does not exist' in str(err.value) and 'mkdir -p' in str(err.value)
    assert not (tmp_path / 'nope').exists()


def test_directory_as_path_is_refused(tmp_path):
    with pytest.raises(JournalError, match='is a directory'):
        Journal.open(str(tmp_path))


def test_missing_journal_without_create(path):
    with pytest.raises(JournalError, match='No journal at'):
        Journal.open(path, create=False)
    assert not os.path.exists(path)


def test_missing_journal_without_create_in_a_database(pg_store):
    store = pg_store
    with pytest.raises(JournalError, match='No journal in'):
        store.open(create=False)
    assert store.raw("SELECT count(*) FROM information_schema.tables WHERE table_schema = 'public'") == [(0,)]


def test_corrupted_file_is_refused_and_left_unchanged(path):
    with open(path, 'wb') as f:
        f.write(b'this is not sqlite at all, just some text that fills a page' * 100)
    before, listing = digest(path), dir_listing(path)
    with pytest.raises(JournalError) as err:
        Journal.open(path)
    assert 'not a readable journal' in str(err.value) and 'Nothing was changed' in str(err.value)
    assert digest(path) == before
    assert dir_listing(path) == listing


def test_newer_schema_is_refused_and_left_unchanged(path):
    with Journal.open(path) as j:
        j.create_workspace('ws1')
    conn = sqlite3.connect(path)
    conn.execute('PRAGMA user_version = %d' % (journal_mod.SCHEMA_VERSION + 5))
    conn.execute('PRAGMA wal_checkpoint(TRUNCATE)')
    conn.close()
    before = digest(path)
    with pytest.raises(JournalError) as err:
        Journal.open(path)
    assert 'newer than this collection understands' in str(err.value)
    assert digest(path) == before


def _open_as_nobody(target, results):
    # Root may write anywhere, so the refusal is checked as an unprivileged user in a forked child
    # (forked, so it needs no access to the interpreter's files under root's home).
    if os.geteuid() == 0:
        os.setgid(65534)
        os.setuid(65534)
    try:
        Journal.open(target)
        results.put('opened')
    except JournalError as exc:
        results.put(str(exc))


def _refusal_for_nobody(target):
    results = FORK.Queue()
    proc = FORK.Process(target=_open_as_nobody, args=(target, results))
    proc.start()
    proc.join(60)
    return results.get(timeout=5)


@pytest.fixture
def public_dir():
    # pytest's tmp_path sits under a 0700 directory that nobody may enter.
    path = tempfile.mkdtemp(prefix='ephemera-journal-')
    os.chmod(path, 0o755)
    yield path
    shutil.rmtree(path)


def test_unwritable_journal_directory_as_another_user(public_dir):
    target = os.path.join(public_dir, 'journal.sqlite')
    assert 'Cannot write the journal directory' in _refusal_for_nobody(target)
    assert not os.path.exists(target)


def test_unreachable_journal_directory_names_the_blocking_directory(public_dir):
    private = os.path.join(public_dir, 'private')
    os.mkdir(private, 0o700)
    os.mkdir(os.path.join(private, 'state'))
    message = _refusal_for_nobody(os.path.join(private, 'state', 'journal.sqlite'))
    assert 'permission denied on %s' % private in message


def test_unknown_fields_and_states_are_refused(journal):
    with pytest.raises(JournalError, match='Unknown workspace status'):
        journal.create_workspace('ws1', status='half-done')
    assert journal.get_workspace('ws1') is None
    ws = journal.create_workspace('ws1')
    with pytest.raises(JournalError, match='Unknown workspace activity'):
        journal.update_workspace('ws1', ws['generation'], activity='sleeping')
    with pytest.raises(JournalError, match='Unknown workspace field'):
        journal.update_workspace('ws1', ws['generation'], colour='red')
    assert journal.get_workspace('ws1')['generation'] == 1


# ------------------------------------------------------- records and fencing


def test_workspace_round_trip_and_names(journal):
    ws = journal.create_workspace('ws1', repo='file:///r', ref='main', purpose='fix the bug', params={'cores': 2})
    assert ws['status'] == 'requested' and ws['activity'] == 'unknown' and ws['desired_state'] == 'present'
    assert ws['generation'] == 1 and ws['params'] == {'cores': 2}
    ws = journal.update_workspace('ws1', 1, status='provisioning', candidate_vmid=105, upids={'clone': 'UPID:x'})
    assert (ws['status'], ws['candidate_vmid'], ws['upids'], ws['generation']) == ('provisioning', 105, {'clone': 'UPID:x'}, 2)
    assert [w['name'] for w in journal.list_workspaces(status='provisioning')] == ['ws1']
    assert journal.list_workspaces(status=['ready', 'failed']) == []
    with pytest.raises(JournalError, match='already recorded'):
        journal.create_workspace('ws1')


def test_stale_generation_write_is_refused_and_writes_nothing(journal):
    journal.create_workspace('ws1')
    journal.update_workspace('ws1', 1, status='provisioning', event={'action': 'clone'})
    events_before = journal.events('ws1')
    with pytest.raises(StaleGenerationError) as err:
        journal.update_workspace('ws1', 1, status='failed', event={'action': 'late writer'})
    assert 'expected generation 1, found 2' in str(err.value)
    ws = journal.get_workspace('ws1')
    assert (ws['status'], ws['generation']) == ('provisioning', 2)
    assert journal.events('ws1') == events_before


def test_update_of_missing_workspace_is_refused(journal):
    with pytest.raises(StaleGenerationError, match='not recorded'):
        journal.update_workspace('ghost', 1, status='ready')


def test_event_log_is_append_only(journal, store):
    journal.create_workspace('ws1')
    journal.append_event('ws1', 'dispatched', 'clone', {'vmid': 105})
    with pytest.raises(database_error(), match='append-only'):
        store.raw("UPDATE events SET action = 'forged'")
    with pytest.raises(database_error(), match='append-only'):
        store.raw('DELETE FROM events')
    if store.backend == 'postgresql':
        with pytest.raises(database_error(), match='append-only'):
            store.raw('TRUNCATE events')
    assert [e['action'] for e in journal.events('ws1')] == ['create_workspace', 'clone']


def test_secrets_never_reach_the_journal(journal, store):
    secret = 'hunter2-' + os.urandom(6).hex()
    journal.create_workspace('ws1', params={'git_token': secret, 'cores': 2})
    journal.append_event('ws1', 'dispatched', 'bootstrap', {'credentials': {'password': secret}, 'Authorization': 'x'})
    journal.record_cleanup_debt('ws1', 'lxc/105', 'failed')
    claim = journal.begin_idempotent('k1', 'create', {'name': 'ws1'})
    journal.finish_idempotent(claim, {'api_token_secret': secret, 'vmid': 105})
    journal.close()
    blob = store.blob()
    assert b'lxc/105' in blob  # the records are there
    assert secret.encode() not in blob


def test_events_record_actor_and_order(journal):
    journal.create_workspace('ws1')
    for n in range(5):
        journal.append_event('ws1', 'observed', 'poll', {'n': n})
    events = journal.events('ws1')
    assert [e['detail'].get('n') for e in events[1:]] == [0, 1, 2, 3, 4]
    assert all(e['actor'] == journal.actor for e in events)
    assert [e['detail']['n'] for e in journal.events('ws1', limit=2)] == [3, 4]


# ---------------------------------------------------------------- concurrency


def _transition_worker(store, workers_ready, start, transitions, failures):
    try:
        with store.open(actor='worker %d' % os.getpid()) as j:
            workers_ready.release()
            start.wait()
            done = 0
            while done < transitions:
                ws = j.get_workspace('shared')
                count = ws['params']['count']
                try:
                    j.update_workspace('shared', ws['generation'], params={'count': count + 1},
                                       event={'action': 'increment', 'detail': {'to': count + 1}})
                except StaleGenerationError:
                    continue
                done += 1
    except Exception as exc:  # any "database is locked" or other failure is reported to the parent
        failures.put('%s: %s' % (type(exc).__name__, exc))
        raise


def test_eight_processes_two_hundred_transitions_each(store):
    # On PostgreSQL 50 each here (a round trip per statement costs more than SQLite's call); make bench-journal runs
    # 200 each on both.
    processes, transitions = 8, 200 if store.backend == 'sqlite' else 50
    with store.open() as j:
        j.create_workspace('shared', params={'count': 0})
    ready, start, failures = FORK.Semaphore(0), FORK.Event(), FORK.Queue()
    procs = [FORK.Process(target=_transition_worker, args=(store, ready, start, transitions, failures))
             for dummy in range(processes)]
    for p in procs:
        p.start()
    for dummy in procs:
        assert ready.acquire(timeout=60)
    start.set()
    for p in procs:
        p.join(300)
    errors = []
    while not failures.empty():
        errors.append(failures.get())
    assert errors == []
    assert [p.exitcode for p in procs] == [0] * processes
    with store.open() as j:
        ws = j.get_workspace('shared')
        assert ws['params']['count'] == processes * transitions  # no lost update
        assert ws['generation'] == processes * transitions + 1
        increments = [e for e in j.events('shared') if e['action'] == 'increment']
        assert sorted(e['detail']['to'] for e in increments) == list(range(1, processes * transitions + 1))


def _amend_worker(store, workers_ready, start, transitions, failures):
    try:
        with store.open(actor='worker %d' % os.getpid()) as j:
            workers_ready.release()
            start.wait()
            for dummy in range(transitions):
                j.amend_workspace('shared', lambda ws: (
                    {'params': {'count': ws['params']['count'] + 1}},
                    {'action': 'increment', 'detail': {'to': ws['params']['count'] + 1}}))
    except Exception as exc:  # a StaleGenerationError would be a lost race: amend_workspace holds the record
        failures.put('%s: %s' % (type(exc).__name__, exc))
        raise


def test_amending_a_record_many_runs_touch_at_once_loses_no_update_and_retries_nothing(store):
    """Eight processes amend one record at once (read it and decide the write, as a heartbeat does): each amend holds
    the record from its read to its write, so none fails on a record that moved on (a compare-and-set would, and be
    retried) and no update is lost."""
    processes, transitions = 8, 50
    with store.open() as j:
        j.create_workspace('shared', params={'count': 0})
    ready, start, failures = FORK.Semaphore(0), FORK.Event(), FORK.Queue()
    procs = [FORK.Process(target=_amend_worker, args=(store, ready, start, transitions, failures))
             for dummy in range(processes)]
    for p in procs:
        p.start()
    for dummy in procs:
        assert ready.acquire(timeout=60)
    start.set()
    for p in procs:
        p.join(300)
    errors = []
    while not failures.empty():
        errors.append(failures.get())
    assert errors == [] and [p.exitcode for p in procs] == [0] * processes
    with store.open() as j:
        ws = j.get_workspace('shared')
        assert ws['params']['count'] == processes * transitions and ws['generation'] == processes * transitions + 1
        increments = [e for e in j.events('shared') if e['action'] == 'increment']
        assert sorted(e['detail']['to'] for e in increments) == list(range(1, processes * transitions + 1))


def test_an_amend_that_decides_nothing_or_fails_writes_nothing(store):
    with store.open() as j:
        first = j.create_workspace('ws', params={'count': 0})
        events = len(j.events('ws'))
        assert j.amend_workspace('ws', lambda ws: None)['generation'] == first['generation']

        def refuse(ws):
            raise StaleGenerationError('refused by the change')
        with pytest.raises(StaleGenerationError, match='refused by the change'):
            j.amend_workspace('ws', refuse)
        assert j.get_workspace('ws')['generation'] == first['generation']
        assert j.amend_workspace('missing', lambda ws: None if ws is None else ({}, None)) is None
        assert len(j.events('ws')) == events
        after = j.amend_workspace('ws', lambda ws: ({'params': {'count': 5}}, {'action': 'set', 'detail': {}}))
        assert after['params'] == {'count': 5} and after['generation'] == first['generation'] + 1


def _hold_transaction_then_wait(store, conn_ready):
    j = store.open()
    conn = j._conn
    conn.execute('BEGIN IMMEDIATE')
    conn.execute("UPDATE workspaces SET status = 'ready', generation = 99 WHERE name = 'ws1'")
    conn.execute("INSERT INTO events (workspace, at, actor, kind, action) VALUES ('ws1', 0, 'doomed', 'x', 'half')")
    conn_ready.set()
    time.sleep(60)


def test_writer_killed_mid_transaction_leaves_a_consistent_journal(store):
    with store.open() as j:
        j.create_workspace('ws1')
    in_txn = FORK.Event()
    proc = FORK.Process(target=_hold_transaction_then_wait, args=(store, in_txn))
    proc.start()
    assert in_txn.wait(30)
    os.kill(proc.pid, signal.SIGKILL)
    proc.join(30)
    assert proc.exitcode == -signal.SIGKILL
    with store.open() as j:
        if store.backend == 'postgresql':  # the server sees the connection drop, rolls back, frees the locks
            deadline = time.time() + 10
            while store.raw("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory'") != [(0,)]:
                assert time.time() < deadline
                time.sleep(0.05)
        store.check_integrity(j)
        ws = j.get_workspace('ws1')
        assert (ws['status'], ws['generation']) == ('requested', 1)
        assert [e['action'] for e in j.events('ws1')] == ['create_workspace']
        # The dead writer's lock is gone: the next write goes through at once.
        assert j.update_workspace('ws1', 1, status='provisioning')['generation'] == 2


def test_a_write_lock_held_elsewhere_is_named_with_the_time_waited(path):
    """SQLite: a write that waits out its busy timeout says how long it waited, and writes nothing."""
    with Journal.open(path) as j, Journal.open(path) as holder:
        j.create_workspace('ws1')
        j._conn.execute('PRAGMA busy_timeout = 300')
        holder._conn.execute('BEGIN IMMEDIATE')
        try:
            started = time.monotonic()
            with pytest.raises(JournalError) as err:
                j.update_workspace('ws1', 1, status='ready')
            assert time.monotonic() - started >= 0.3
        finally:
            holder._conn.execute('ROLLBACK')
        waited = re.search(r'stayed busy for (\d+\.\d) s \(database is locked\); another process holds it',
                           str(err.value))
        assert waited and 0.3 <= float(waited.group(1)) < 30, str(err.value)
        assert j.get_workspace('ws1')['status'] == 'requested' and not j._conn.in_transaction


def test_a_write_that_cannot_begin_is_not_called_a_wait(path):
    """SQLite: a connection that cannot begin a write at all (here: one left inside a transaction) is said as it is,
    and not as a busy journal waited for."""
    with Journal.open(path) as j:
        j.create_workspace('ws1')
        j._conn.execute('BEGIN')
        with pytest.raises(JournalError) as err:
            j.update_workspace('ws1', 1, status='ready')
        j._conn.execute('ROLLBACK')
        assert 'could not begin a write (cannot start a transaction within a transaction)' in str(err.value)
        assert 'busy' not in str(err.value)
        assert j.get_workspace('ws1')['status'] == 'requested'


def _write_forever(store):
    with store.open() as j:
        while True:
            ws = j.get_workspace('ws1')
            j.update_workspace('ws1', ws['generation'], params={'n': ws['generation']}, event={'action': 'tick'})


def test_writer_killed_at_random_moments_never_breaks_the_journal(store):
    with store.open() as j:
        j.create_workspace('ws1')
    for delay in (0.05, 0.13, 0.21, 0.34):
        proc = FORK.Process(target=_write_forever, args=(store,))
        proc.start()
        time.sleep(delay)
        os.kill(proc.pid, signal.SIGKILL)
        proc.join(30)
        with store.open() as j:
            if store.backend == 'sqlite':
                store.check_integrity(j)
            ws = j.get_workspace('ws1')
            ticks = [e for e in j.events('ws1') if e['action'] == 'tick']
            # Every committed transition has exactly its event: record and history agree.
            assert ws['generation'] == len(ticks) + 1


# -------------------------------------------------------------------- intents


def test_intents_record_owner_and_are_fenced(journal):
    intent = journal.open_intent('create', 'ws1', resources=[{'vmid': 105}])
    assert intent['state'] == 'open' and intent['resources'] == [{'vmid': 105}]
    owner = Journal.intent_owner(intent)
    assert owner == Owner.current() and owner.is_alive()
    intent = journal.update_intent(intent['id'], intent['generation'], resources=[{'vmid': 105}, {'vmid': 106}])
    with pytest.raises(StaleGenerationError):
        journal.update_intent(intent['id'], 1, state='done')
    assert journal.get_intent(intent['id'])['state'] == 'open'
    journal.update_intent(intent['id'], intent['generation'], state='done', result={'vmid': 106})
    assert journal.open_intents() == []


# --------------------------------------------------------------- cleanup debt


def test_cleanup_debt_counts_attempts_and_settles(journal):
    journal.create_workspace('ws1')
    journal.record_cleanup_debt('ws1', 'lxc/105@pve1', 'CT is locked (backup)', retry_in=0)
    debt = journal.record_cleanup_debt('ws1', 'lxc/105@pve1', 'still locked', retry_in=0)
    assert (debt['attempts'], debt['last_error']) == (2, 'still locked')
    assert [d['resource'] for d in journal.cleanup_debts(due_only=True)] == ['lxc/105@pve1']
    journal.record_cleanup_debt('ws1', 'lxc/106@pve1', 'x', retry_in=3600)
    assert [d['resource'] for d in journal.cleanup_debts(due_only=True)] == ['lxc/105@pve1']
    assert journal.clear_cleanup_debt('ws1', 'lxc/105@pve1')
    assert not journal.clear_cleanup_debt('ws1', 'lxc/105@pve1')
    assert [d['resource'] for d in journal.cleanup_debts('ws1')] == ['lxc/106@pve1']


# ---------------------------------------------------------------- idempotency


def test_idempotency_replay(journal):
    request = {'name': 'ws1', 'repo': 'file:///r'}
    claim = journal.begin_idempotent('awx-42', 'create', request)
    assert not claim.replayed
    journal.finish_idempotent(claim, {'vmid': 105, 'status': 'ready'})
    again = journal.begin_idempotent('awx-42', 'create', dict(request))
    assert again.replayed and again.result == {'vmid': 105, 'status': 'ready'}


def test_idempotency_key_is_stored_only_as_a_hash(journal, store):
    claim = journal.begin_idempotent('my-very-own-key', 'create', {})
    journal.finish_idempotent(claim, {})
    rows = [tuple(row) for row in store.raw('SELECT key_hash, action FROM idempotency')]
    assert rows == [(journal.idempotency_hash('my-very-own-key', 'create'), 'create')]
    assert 'my-very-own-key' not in rows[0][0]


def test_idempotency_conflict_on_different_request(journal):
    claim = journal.begin_idempotent('k', 'create', {'name': 'ws1'})
    journal.finish_idempotent(claim, {'ok': True})
    with pytest.raises(IdempotencyError, match='different create request'):
        journal.begin_idempotent('k', 'create', {'name': 'ws2'})


def test_idempotency_scoped_by_action_and_controller(journal):
    journal.finish_idempotent(journal.begin_idempotent('k', 'create', {'a': 1}), {'r': 1})
    assert not journal.begin_idempotent('k', 'destroy', {'a': 2}).replayed
    assert not journal.begin_idempotent('k', 'create', {'a': 3}, controller='other-controller').replayed


def test_idempotency_in_flight_duplicate_is_refused(journal):
    sleeper = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])
    try:
        journal.begin_idempotent('k', 'create', {'a': 1}, owner=Owner.current(pid=sleeper.pid))
        with pytest.raises(IdempotencyError, match='still running'):
            journal.begin_idempotent('k', 'create', {'a': 1})
    finally:
        sleeper.kill()
        sleeper.wait()
    # Its owner is gone now: the next caller takes the claim over and does the work.
    claim = journal.begin_idempotent('k', 'create', {'a': 1})
    assert not claim.replayed


def test_idempotency_failed_attempt_can_be_retried(journal):
    claim = journal.begin_idempotent('k', 'create', {'a': 1})
    journal.abandon_idempotent(claim)
    assert not journal.begin_idempotent('k', 'create', {'a': 1}).replayed


def test_idempotency_records_expire_after_a_day(journal):
    now = time.time()
    journal.finish_idempotent(journal.begin_idempotent('k', 'create', {'a': 1}, now=now), {'r': 1})
    assert journal.begin_idempotent('k', 'create', {'a': 1}, now=now + 24 * 3600 - 60).replayed
    later = journal.begin_idempotent('k', 'create', {'a': 2}, now=now + 24 * 3600 + 1)
    assert not later.replayed


# ------------------------------------------------------------------ migrations


def test_older_journal_is_migrated_forward_keeping_its_records(store, monkeypatch):
    with store.open() as j:
        j.create_workspace('ws1', repo='file:///r')
        controller = j.controller_id
    step = "ALTER TABLE workspaces ADD COLUMN labels TEXT NOT NULL DEFAULT '{}';"
    monkeypatch.setattr(journal_mod, 'MIGRATIONS', journal_mod.MIGRATIONS + [step])
    monkeypatch.setattr(journal_pg, 'MIGRATIONS', journal_pg.MIGRATIONS + [
        (journal_mod.SCHEMA_VERSION, journal_mod.SCHEMA_VERSION + 1, step)])
    monkeypatch.setattr(journal_mod, 'SCHEMA_VERSION', journal_mod.SCHEMA_VERSION + 1)
    with store.open() as j:
        assert j.schema_version == journal_mod.SCHEMA_VERSION
        ws = j.get_workspace('ws1')
        assert ws['repo'] == 'file:///r' and ws['labels'] == '{}'
        assert j.controller_id == controller


def test_every_migration_step_applies_to_an_empty_journal(store):
    with store.open():
        pass
    if store.backend == 'sqlite':
        tables = {r[0] for r in store.raw("SELECT name FROM sqlite_master WHERE type = 'table'")}
    else:
        tables = {r[0] for r in store.raw("SELECT table_name FROM information_schema.tables WHERE table_schema = "
                                          "'public'")}
        assert tables == set(journal_pg.JOURNAL_TABLES)
    assert {'meta', 'workspaces', 'events', 'intents', 'cleanup_debt', 'idempotency'} <= tables


# -------------------------------------------------------------- address leases


def _lease_many(store, names, out):
    with store.open() as j:
        for name in names:
            out.put((name, j.lease_address('range-a', name, ['127.0.9.%d' % n for n in range(10, 60)])))


def test_addresses_are_never_handed_out_twice(store):
    with store.open():
        pass
    out = FORK.Queue()
    procs = [FORK.Process(target=_lease_many, args=(store, ['ws-%d-%d' % (p, n) for n in range(5)], out))
             for p in range(8)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
    leased = dict(out.get(timeout=5) for dummy in range(40))
    assert len(set(leased.values())) == 40
    with store.open() as j:
        assert j.lease_address('range-a', 'ws-0-0', []) == leased['ws-0-0']  # a lease is stable
        assert j.release_address('ws-0-0') == [leased['ws-0-0']]
        assert j.lease_address('range-a', 'new', [leased['ws-0-0']]) == leased['ws-0-0']


def test_exhausted_range_is_a_clear_error(journal):
    journal.lease_address('r', 'a', ['127.0.9.1'])
    with pytest.raises(JournalError, match='Every address of the range r is leased'):
        journal.lease_address('r', 'b', ['127.0.9.1'])
    assert [l['workspace'] for l in journal.address_leases()] == ['a']


def test_idempotency_same_owner_asking_again_keeps_its_claim(journal):
    me = Owner.current()
    first = journal.begin_idempotent('k', 'create', {'a': 1}, owner=me)
    again = journal.begin_idempotent('k', 'create', {'a': 1}, owner=me)
    assert not first.replayed and not again.replayed and again.key_hash == first.key_hash
    journal.finish_idempotent(again, {'vmid': 1})
    assert journal.begin_idempotent('k', 'create', {'a': 1}).replayed
