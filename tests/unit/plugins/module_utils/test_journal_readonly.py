"""The journal opened by a reader: read-only, in directories the reader cannot write, and damaged journals.

Root may write anywhere, so "cannot write" is made real by running the reader in a forked child as nobody, on a
directory and journal that nobody may read but not write. (tests/integration/plugins/test_readonly_journal.py runs
the real readers on a read-only file system.)
"""

import hashlib
import multiprocessing
import os
import shutil
import sqlite3
import tempfile

import pytest

from ansible_collections.ephemera.workspaces.plugins.module_utils.core import journal as journal_mod
from ansible_collections.ephemera.workspaces.plugins.module_utils.core.errors import JournalError, JournalMissing
from ansible_collections.ephemera.workspaces.plugins.module_utils.core.journal import Journal, JournalDamaged

FORK = multiprocessing.get_context('fork')
V1 = os.path.join(os.path.dirname(__file__), 'flows', 'data', 'journal-v1', 'journal.sqlite')


def digest(path):
    with open(path, 'rb') as f:
        return hashlib.sha256(f.read()).hexdigest()


def listing(directory):
    return sorted(os.listdir(directory))


def seed(path, count=3, purpose='fix it'):
    with Journal.open(path) as j:
        for n in range(count):
            j.create_workspace('ws-%03d' % n, repo='file:///srv/repo.git', ref='main', purpose=purpose)
        j.update_workspace('ws-000', 1, status='ready', vmid=101, node='pve1', address='127.0.0.9',
                           facts={'host_key': 'ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIB'})


@pytest.fixture
def shared_dir():
    """A directory (and the journal in it) that nobody may read but not write."""
    top = tempfile.mkdtemp(prefix='ephemera-journal-ro-')
    os.chmod(top, 0o755)
    yield top
    shutil.rmtree(top)


def share(path):
    for name in os.listdir(os.path.dirname(path)):
        os.chmod(os.path.join(os.path.dirname(path), name), 0o644)


def _as_nobody(func, args, results):
    if os.geteuid() == 0:
        os.setgid(65534)
        os.setuid(65534)
    try:
        results.put(('ok', func(*args)))
    except JournalError as exc:
        results.put((type(exc).__name__, str(exc)))


def as_nobody(func, *args):
    results = FORK.Queue()
    proc = FORK.Process(target=_as_nobody, args=(func, args, results))
    proc.start()
    proc.join(60)
    return results.get(timeout=5)


def read_names(path):
    with Journal.open(path, readonly=True) as j:
        return j.access, [ws['name'] for ws in j.list_workspaces()], j.get_workspace('ws-000')['vmid']


def test_reader_needs_no_write_access_and_leaves_the_directory_as_it_was(shared_dir):
    path = os.path.join(shared_dir, 'journal.sqlite')
    seed(path)
    share(path)
    before, files = digest(path), listing(shared_dir)
    assert files == ['journal.sqlite', ]  # the last writer folded its log in and removed it
    assert as_nobody(read_names, path) == ('ok', ('immutable', ['ws-000', 'ws-001', 'ws-002'], 101))
    assert (digest(path), listing(shared_dir)) == (before, files)
    # A writer is still refused there, as before.
    status, message = as_nobody(lambda p: Journal.open(p, create=False) and 'opened', path)
    assert 'Cannot write the journal directory' in message


def test_reader_sees_what_a_live_writer_committed_to_its_log(shared_dir):
    path = os.path.join(shared_dir, 'journal.sqlite')
    seed(path)
    with Journal.open(path) as writer:
        writer._conn.execute('PRAGMA wal_autocheckpoint = 0')
        writer.create_workspace('ws-late')
        share(path)
        assert os.path.getsize(path + '-wal') > 0
        status, (access, names, _vmid) = as_nobody(read_names, path)
    # Read through the writer's -wal and -shm (not immutable, which would miss ws-late).
    assert (status, access) == ('ok', 'read-only') and 'ws-late' in names


def test_a_log_left_without_its_index_in_an_unwritable_directory_is_refused(shared_dir):
    path = os.path.join(shared_dir, 'journal.sqlite')
    seed(path)
    scratch = tempfile.mkdtemp()
    try:
        with Journal.open(path) as writer:
            writer._conn.execute('PRAGMA wal_autocheckpoint = 0')
            writer.create_workspace('ws-late')
            # What a writer killed at this moment leaves, less the -shm (a reboot clears it on tmpfs setups).
            for suffix in ('', '-wal'):
                shutil.copy(path + suffix, os.path.join(scratch, 'journal.sqlite' + suffix))
        os.remove(path)
        for suffix in ('', '-wal'):
            shutil.copy(os.path.join(scratch, 'journal.sqlite' + suffix), path + suffix)
    finally:
        shutil.rmtree(scratch)
    share(path)
    files = listing(shared_dir)
    status, message = as_nobody(read_names, path)
    assert status == 'JournalError'
    assert 'write-ahead log %s-wal holds changes' % path in message and 'Run any command that writes' in message
    assert listing(shared_dir) == files


def test_reader_in_a_writable_directory_reads_read_only(path):
    seed(path)
    before = digest(path)
    with Journal.open(path, readonly=True) as j:
        assert j.access == 'read-only' and j.readonly
        assert len(j.list_workspaces()) == 3
        with pytest.raises(JournalError, match='opened read-only'):
            j.create_workspace('ws-new')
        with pytest.raises(sqlite3.OperationalError, match='readonly'):
            j._conn.execute("INSERT INTO meta (key, value) VALUES ('x', 'y')")
    assert digest(path) == before


def test_reader_never_creates_a_journal_or_a_directory(tmp_path):
    for target in (tmp_path / 'journal.sqlite', tmp_path / 'no-such-dir' / 'journal.sqlite'):
        with pytest.raises(JournalMissing, match='No journal at'):
            Journal.open(str(target), readonly=True)
    assert listing(str(tmp_path)) == []


def test_reader_of_an_empty_file_reports_no_journal_and_leaves_it_empty(path):
    open(path, 'wb').close()
    with pytest.raises(JournalMissing, match='holds no journal yet'):
        Journal.open(path, readonly=True)
    assert os.path.getsize(path) == 0


def test_reader_of_a_schema_1_journal_reads_it_without_migrating(tmp_path):
    path = str(tmp_path / 'journal.sqlite')
    shutil.copy(V1, path)
    before = digest(path)
    with Journal.open(path, readonly=True) as j:
        assert j.schema_version == 1
        records = {ws['name']: ws for ws in j.list_workspaces()}
        ready = j.get_workspace('fx-ready')
    assert ready['status'] == 'ready' and ready['provider'] == 'proxmox'
    assert (ready['resource_id'], ready['location']) == (ready['vmid'], ready['node']) and ready['vmid']
    candidate = records['fx-candidate']
    assert candidate['candidate_id'] is not None and candidate['candidate_id'] == candidate['candidate_vmid']
    assert digest(path) == before
    conn = sqlite3.connect(path)
    assert conn.execute('PRAGMA user_version').fetchone()[0] == 1
    assert 'vmid' in [row[1] for row in conn.execute('PRAGMA table_info(workspaces)')]
    conn.close()


def test_reader_refuses_an_older_schema_it_cannot_read_and_says_how_to_migrate(path, monkeypatch):
    seed(path)
    monkeypatch.setattr(journal_mod, 'SCHEMA_VERSION', journal_mod.SCHEMA_VERSION + 1)
    before = digest(path)
    with pytest.raises(JournalError) as err:
        Journal.open(path, readonly=True)
    assert 'Readers do not migrate' in str(err.value) and 'run any command that writes' in str(err.value)
    assert digest(path) == before


def test_reader_refuses_a_newer_schema(path):
    seed(path)
    conn = sqlite3.connect(path)
    conn.execute('PRAGMA user_version = %d' % (journal_mod.SCHEMA_VERSION + 1))
    conn.close()
    with pytest.raises(JournalError, match='newer than this collection understands'):
        Journal.open(path, readonly=True)


def damage(path):
    """Overwrite the middle third of the journal's file: pages of workspace records and events."""
    size = os.path.getsize(path)
    with open(path, 'r+b') as f:
        f.seek(size // 3)
        f.write(b'\xa5' * (size // 3))


@pytest.mark.parametrize('readonly', [True, False])
def test_damaged_pages_name_the_file_and_the_recovery(path, readonly):
    seed(path, count=300, purpose='a purpose long enough to fill pages ' * 12)
    assert os.path.getsize(path) > 40 * 4096
    damage(path)
    with pytest.raises(JournalDamaged) as err:
        with Journal.open(path, readonly=readonly) as j:
            j.list_workspaces()
    message = str(err.value)
    assert 'The journal %s is damaged' % path in message
    assert 'database disk image is malformed' in message
    assert 'docs/internals/journal.md, "A damaged journal"' in message and '.recover' in message
    assert err.value.details['path'] == path
