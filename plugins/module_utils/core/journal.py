# -*- coding: utf-8 -*-
# Copyright: ephemera.workspaces contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The journal: the durable record of intent that every step writes *before* it acts.

One API, two backends: the embedded SQLite file (the default, described here) and PostgreSQL for controllers that
share one journal (``journal_url``; see ``journal_pg.py``). Many forks of one ``ansible-playbook`` run write to the
same file at once: WAL mode lets readers run beside the one writer, ``synchronous=FULL`` makes a
committed write survive a crash, every write transaction starts with ``BEGIN IMMEDIATE`` (so it
takes the write lock up front and waits for it in the busy handler, instead of failing with
"database is locked" when a read turns into a write) and the busy timeout is long.

Every write that depends on what the caller read earlier is a compare-and-set on the record's
``generation``: a writer that was superseded gets :class:`StaleGenerationError` and writes nothing.
A write made for a queued operation (see ``queue.py``) also carries the run's claim, checked in the
same transaction: a run that lost its claim gets :class:`ClaimLostError` and writes nothing.

Readers (``workspace_info``, ``queue_info``, the lookup and the inventory) open it with ``readonly``: SQLite's
read-only mode, which never makes a file, a directory, a secret or a migration (see :meth:`Journal.open`).
"""

import contextlib
import errno
import json
import os
import sqlite3
import time
import uuid
from urllib.parse import quote as _url_quote

from ansible_collections.ephemera.workspaces.plugins.module_utils.core.errors import (
    ClaimLostError,
    JournalError,
    JournalMissing,
)
from ansible_collections.ephemera.workspaces.plugins.module_utils.core import failpoint
from ansible_collections.ephemera.workspaces.plugins.module_utils.core import filetrust
from ansible_collections.ephemera.workspaces.plugins.module_utils.core import journal_schema
from ansible_collections.ephemera.workspaces.plugins.module_utils.core import renewal
from ansible_collections.ephemera.workspaces.plugins.module_utils.core.journal_records import Idempotency, ProviderState, Templates
# The records' fields and helpers that callers import from here (statuses, times, a claim's parts), as they did
# before the records had files of their own.
from ansible_collections.ephemera.workspaces.plugins.module_utils.core.journal_rows import (  # noqa: F401 pylint: disable=unused-import
    DESIRED_STATES,
    WORKSPACE_ACTIVITIES,
    WORKSPACE_STATUSES,
    claim_parts,
    epoch,
    iso,
    row_dict,
)
from ansible_collections.ephemera.workspaces.plugins.module_utils.core.journal_workspaces import AddressLeases, Intents, Workspaces
from ansible_collections.ephemera.workspaces.plugins.module_utils.core.run_identity import Owner

ENV_VAR = 'EPHEMERA_JOURNAL'
URL_ENV_VAR = 'EPHEMERA_JOURNAL_URL'
SCHEMA_VERSION = journal_schema.VERSION
BUSY_TIMEOUT_MS = 60000

# Each entry migrates a journal from the schema version equal to its index to the next one. A new journal is made
# at once at journal_schema.VERSION (the schema, written once for SQLite and PostgreSQL); these entries bring an older
# file forward step by step. A released entry is never edited: a later version appends one.
MIGRATIONS = [
    # 1: the first schema. Every journal of it exists already (tests/unit/plugins/module_utils/flows/data/journal-v1
    # is one); a new journal starts at journal_schema.VERSION instead.
    None,
    # 2: the workspace's resource in provider-neutral fields. The ids keep their type (no column affinity): a VMID
    # stays an integer, a cloud's id is text. Records of schema 1 are Proxmox's.
    """
    CREATE TABLE workspaces_2 (
        name            TEXT PRIMARY KEY,
        status          TEXT NOT NULL,
        activity        TEXT NOT NULL DEFAULT 'unknown',
        desired_state   TEXT NOT NULL DEFAULT 'present',
        provider        TEXT NOT NULL DEFAULT 'proxmox',
        location        TEXT,
        resource_id,
        candidate_id,
        provider_tasks  TEXT NOT NULL DEFAULT '{}',
        address         TEXT,
        repo            TEXT,
        ref             TEXT,
        purpose         TEXT,
        failure         TEXT,
        params          TEXT NOT NULL DEFAULT '{}',
        progress        TEXT NOT NULL DEFAULT '{}',
        facts           TEXT NOT NULL DEFAULT '{}',
        created_at      REAL NOT NULL,
        updated_at      REAL NOT NULL,
        generation      INTEGER NOT NULL
    );
    INSERT INTO workspaces_2 (name, status, activity, desired_state, provider, location, resource_id, candidate_id,
                              provider_tasks, address, repo, ref, purpose, failure, params, progress, facts,
                              created_at, updated_at, generation)
        SELECT name, status, activity, desired_state, 'proxmox', node, vmid, candidate_vmid, upids, address, repo, ref,
               purpose, failure, params, progress, facts, created_at, updated_at, generation FROM workspaces;
    DROP TABLE workspaces;
    ALTER TABLE workspaces_2 RENAME TO workspaces;
    CREATE INDEX workspaces_status ON workspaces (status);
    CREATE INDEX workspaces_resource ON workspaces (provider, resource_id);
    """,
    # 3: leases. ``lease`` (JSON, unix seconds): created_at, last_touched_at, idle_timeout, ttl, keep, expires_at;
    # NULL for a workspace made before leases, which never expires by itself. ``lease_expires_at`` copies
    # lease.expires_at for the expiry sweep's index. ``cleanup`` (JSON): the release's bookkeeping (core/lease.py's
    # cleanup_attempts, cleanup_error, cleanup_failed_at, cleanup_retry_at, cleanup_completed_at; retained).
    """
    ALTER TABLE workspaces ADD COLUMN lease TEXT;
    ALTER TABLE workspaces ADD COLUMN lease_expires_at REAL;
    ALTER TABLE workspaces ADD COLUMN cleanup TEXT NOT NULL DEFAULT '{}';
    CREATE INDEX workspaces_expiry ON workspaces (lease_expires_at);
    """,
    # 4: templates. ``templates`` holds each template name's pointer: the version creates clone (``current``) and the
    # one before it (``previous``), switched in one transaction. ``template_versions`` holds every build: its state
    # (building, built, failed), its source, the workspace record that carries its candidate container, the
    # container, the tools it answered with and every error a failed build met.
    """
    CREATE TABLE templates (
        name            TEXT PRIMARY KEY,
        current         INTEGER,
        previous        INTEGER,
        updated_at      REAL NOT NULL,
        generation      INTEGER NOT NULL
    );
    CREATE TABLE template_versions (
        name            TEXT NOT NULL,
        version         INTEGER NOT NULL,
        state           TEXT NOT NULL,
        source          TEXT NOT NULL DEFAULT '{}',
        workspace       TEXT NOT NULL,
        provider        TEXT NOT NULL DEFAULT 'proxmox',
        resource_id,
        location        TEXT,
        tools           TEXT NOT NULL DEFAULT '{}',
        errors          TEXT NOT NULL DEFAULT '[]',
        entry           INTEGER,
        created_at      REAL NOT NULL,
        finished_at     REAL,
        PRIMARY KEY (name, version)
    );
    """,
    # 5: the providers' own state. ``provider_state`` holds small JSON records a provider keeps beside the workspace
    # records (an Azure set's progress, member by member), each under its key with a ``generation`` that every write
    # compares and sets. Never secrets.
    """
    CREATE TABLE provider_state (
        key             TEXT PRIMARY KEY,
        value           TEXT NOT NULL,
        generation      INTEGER NOT NULL,
        updated_at      REAL NOT NULL
    );
    """,
]

# How a reader reads a journal of an older schema without migrating it: temporary views (kept in memory by the
# reader's connection, never written to the file) that show the tables under the current schema's names and
# columns; SQLite looks a name up in the temporary schema first. A version without an entry is refused with the
# advice to run one writing command, which migrates.
READ_VIEWS = {
    1: [
        """
        CREATE TEMP VIEW workspaces AS
            SELECT name, status, activity, desired_state, 'proxmox' AS provider, node AS location, vmid AS resource_id,
                   candidate_vmid AS candidate_id, upids AS provider_tasks, address, repo, ref, purpose, failure, params,
                   progress, facts, created_at, updated_at, generation, NULL AS lease, NULL AS lease_expires_at,
                   '{}' AS cleanup
            FROM main.workspaces
        """,
    ],
    2: [
        """
        CREATE TEMP VIEW workspaces AS
            SELECT *, NULL AS lease, NULL AS lease_expires_at, '{}' AS cleanup FROM main.workspaces
        """,
    ],
    3: [],
}
# What every older schema lacks of schema 4: no templates yet.
_NO_TEMPLATES = [
    """
    CREATE TEMP VIEW templates AS
        SELECT NULL AS name, NULL AS current, NULL AS previous, NULL AS updated_at, NULL AS generation WHERE 0
    """,
    """
    CREATE TEMP VIEW template_versions AS
        SELECT NULL AS name, NULL AS version, NULL AS state, '{}' AS source, NULL AS workspace, NULL AS provider,
               NULL AS resource_id, NULL AS location, '{}' AS tools, '[]' AS errors, NULL AS entry, NULL AS created_at,
               NULL AS finished_at WHERE 0
    """,
]
for _views in READ_VIEWS.values():
    _views.extend(_NO_TEMPLATES)
# What every older schema lacks of schema 5: no provider state yet.
READ_VIEWS[4] = []
for _views in READ_VIEWS.values():
    _views.append("""
    CREATE TEMP VIEW provider_state AS
        SELECT NULL AS key, NULL AS value, NULL AS generation, NULL AS updated_at WHERE 0
    """)

# SQLite's primary result codes: of a damaged file (CORRUPT, NOTADB), of a -wal/-shm it cannot make (READONLY, CANTOPEN).
SQLITE_READONLY, SQLITE_CORRUPT, SQLITE_CANTOPEN, SQLITE_NOTADB = 8, 11, 14, 26
RECOVERY = 'docs/internals/journal.md, "A damaged journal"'


def default_path():
    """``$XDG_STATE_HOME/ephemera/journal.sqlite``, else ``~/.local/state/ephemera/journal.sqlite``."""
    base = os.environ.get('XDG_STATE_HOME') or os.path.join(os.path.expanduser('~'), '.local', 'state')
    return os.path.join(base, 'ephemera', 'journal.sqlite')


def resolve_path(path=None):
    """The journal path from an option, else ``EPHEMERA_JOURNAL``, else the per-user default."""
    if path:
        return os.path.abspath(os.path.expanduser(path))
    if os.environ.get(ENV_VAR):
        return os.path.abspath(os.path.expanduser(os.environ[ENV_VAR]))
    return default_path()


def preload(environ=None):
    """Import the PostgreSQL backend and its driver (psycopg: about 100 ms to import) where a run forks its workers
    from (plugin_utils/in_process.py), when the run's journal is a database: ``EPHEMERA_JOURNAL_URL`` is set (as the
    AWX credential injects it), or ``EPHEMERA_PRELOAD`` names ``postgresql`` (a URL given as a variable only). Each
    task's worker then finds them loaded instead of importing them again. Without psycopg, nothing is imported (the
    task that opens the journal says what to install)."""
    environ = os.environ if environ is None else environ
    named = (environ.get('EPHEMERA_PRELOAD') or '').replace(' ', '').lower().split(',')
    if not environ.get(URL_ENV_VAR) and 'postgresql' not in named:
        return False
    try:
        import psycopg  # noqa: F401 pylint: disable=unused-import
    except ImportError:
        return False
    from ansible_collections.ephemera.workspaces.plugins.module_utils.core import journal_pg  # noqa: F401
    return True


def resolve_location(path=None, url=None):
    """What names the journal in messages and results: the journal URL in effect (``url``, else
    ``EPHEMERA_JOURNAL_URL``) without its password, else the file :func:`resolve_path` gives."""
    url = url or os.environ.get(URL_ENV_VAR)
    if url:
        from ansible_collections.ephemera.workspaces.plugins.module_utils.core.journal_pg import display
        return display(url)
    return resolve_path(path)


class JournalDamaged(JournalError):
    """SQLite found damaged pages in the journal's file."""


def _primary_code(exc):
    """SQLite's primary result code of an error (None when Python does not give it, before 3.11)."""
    code = getattr(exc, 'sqlite_errorcode', None)
    return None if code is None else code & 0xff


def is_damage(exc):
    """True if the SQLite error says that the file is damaged (a malformed page, a header that is not SQLite's)."""
    code = _primary_code(exc)
    if code is not None:
        return code in (SQLITE_CORRUPT, SQLITE_NOTADB)
    text = str(exc).lower()
    return 'malformed' in text or 'not a database' in text


def damaged(path, exc):
    """The error that names a damaged journal, says so, and points to the recovery."""
    return JournalDamaged('The journal %s is damaged: SQLite reports "%s". Stop the runs that use it and keep the file '
                          'as it is; recover it as %s describes (sqlite3 .recover into a new file, then reconcile the '
                          'recovered journal with the cluster).' % (path, exc, RECOVERY), path=path, damaged=True,
                          sqlite=str(exc))


@contextlib.contextmanager
def _damage_named(path):
    try:
        yield
    except sqlite3.DatabaseError as exc:
        if is_damage(exc):
            raise damaged(path, exc)
        raise


class _Cursor(sqlite3.Cursor):
    """A cursor whose reads and writes report damaged pages as :class:`JournalDamaged`, naming the file: SQLite meets
    a damaged page only when a statement reaches it, which may be at any fetch."""

    def execute(self, *args):
        with _damage_named(self.connection.journal_path):
            return super().execute(*args)

    def executemany(self, *args):
        with _damage_named(self.connection.journal_path):
            return super().executemany(*args)

    def fetchone(self):
        with _damage_named(self.connection.journal_path):
            return super().fetchone()

    def fetchmany(self, *args):
        with _damage_named(self.connection.journal_path):
            return super().fetchmany(*args)

    def fetchall(self):
        with _damage_named(self.connection.journal_path):
            return super().fetchall()

    def __next__(self):
        with _damage_named(self.connection.journal_path):
            return super().__next__()


class _Connection(sqlite3.Connection):
    """The journal's connection: every statement runs on a :class:`_Cursor` (``Connection.execute`` would not)."""

    journal_path = None

    def cursor(self, factory=_Cursor):
        return super().cursor(factory)

    def execute(self, sql, parameters=()):
        return self.cursor().execute(sql, parameters)

    def executemany(self, sql, parameters):
        return self.cursor().executemany(sql, parameters)


def _sqlite_connect(target, path, uri=False):
    conn = sqlite3.connect(target, timeout=BUSY_TIMEOUT_MS / 1000.0, isolation_level=None, check_same_thread=False,
                           uri=uri, factory=_Connection)
    conn.journal_path = path
    conn.row_factory = sqlite3.Row
    return conn


class Journal(Workspaces, Intents, AddressLeases, Idempotency, ProviderState, Templates):
    """One open journal. Create it with :meth:`Journal.open`; use it as a context manager or call close().

    This class is the store: opening (SQLite or PostgreSQL, ``journal_pg.py``), migrations, transactions and the
    claim check. What it stores, and how, is in the records it is made of: ``journal_workspaces.py`` (workspaces
    and events, intents and cleanup debt, address leases) and ``journal_records.py`` (idempotency keys, provider
    state, templates)."""

    def __init__(self, path, conn, actor=None, access='read-write', backend='sqlite'):
        self.path = path
        self._conn = conn
        # A database journal's URL, password included, for reopen(); never shown (``path`` is what messages name).
        self._url = None
        # 'sqlite', or 'postgresql' (then ``path`` is the journal's URL without its password).
        self.backend = backend
        self.actor = actor or '%s pid %d' % (Owner.current().host, os.getpid())
        # 'read-write'; for a reader 'read-only' (SQLite's mode=ro) or 'immutable' (see _connect_readonly).
        self.access = access

    @property
    def readonly(self):
        return self.access != 'read-write'

    @property
    def connection(self):
        """The journal's connection, for reads outside a transaction (the queue's: entries and their requesters).
        Writes go through :meth:`transaction`."""
        return self._conn

    def reopen(self):
        """Another connection to this same journal (for a thread of its own: a connection serves one at a time)."""
        if self._url:
            return type(self)._open_url(self._url, False, self.actor, self.readonly)
        return type(self).open(self.path, create=False, actor=self.actor, readonly=self.readonly)

    # ------------------------------------------------------------------ opening

    @classmethod
    def open(cls, path=None, create=True, actor=None, readonly=False, url=None):
        """Open (and with ``create``, make on first use) the journal at ``path``.

        With ``url`` (else ``EPHEMERA_JOURNAL_URL``), the journal is the PostgreSQL database it names and ``path`` is
        not used (see :meth:`_open_url`).

        Bad input is refused before anything is written: a missing directory (other than the
        per-user default, which is made), a file that cannot be written, a file that is not a
        journal, a journal from a newer version.

        With ``readonly`` (the readers), the journal is opened with SQLite's read-only mode and nothing is ever
        made or changed: no file, no directory, no controller secret, no migration. A directory or file the
        reader may not write is fine; a missing journal is :class:`JournalMissing`.
        """
        url = url or os.environ.get(URL_ENV_VAR)
        if url:
            return cls._open_url(url, create, actor, readonly)
        if readonly:
            return cls._open_readonly(resolve_path(path), actor)
        path = resolve_path(path)
        directory = os.path.dirname(path)
        exists = os.path.exists(path)
        if not exists:
            if not create:
                raise JournalMissing('No journal at %s: nothing has been recorded with this journal path yet. Check '
                                     'the journal_path option or the %s environment variable.' % (path, ENV_VAR),
                                     path=path)
            if not os.path.isdir(directory):
                cls._check_reachable(path, directory)
                if path == default_path():
                    os.makedirs(directory, 0o700, exist_ok=True)
                else:
                    raise JournalError('The journal directory %s does not exist. Create it (mkdir -p %s) or set the '
                                       'journal_path option / %s to a file in an existing directory.'
                                       % (directory, directory, ENV_VAR), path=path)
        elif os.path.isdir(path):
            raise JournalError('The journal path %s is a directory; give the path of a file, for example %s.'
                               % (path, os.path.join(path, 'journal.sqlite')), path=path)
        cls._check_trusted(path, directory, writer=True)
        cls._check_writable(path, directory, exists)
        if not exists:
            cls._create_file(path)
        conn = cls._connect(path)
        try:
            cls._check_and_migrate(conn, path)
        except BaseException:
            conn.close()
            raise
        return cls(path, conn, actor)

    @classmethod
    def _open_url(cls, url, create, actor, readonly):
        """The journal in the PostgreSQL database ``url`` names: made (schema and controller id) on first use by a
        writer with ``create``, migrated by a writer, only checked by a reader. Refused, with nothing written: another
        scheme, a server that cannot be reached, credentials it refuses, a newer schema, another application's
        tables."""
        from ansible_collections.ephemera.workspaces.plugins.module_utils.core import journal_pg
        journal_pg.check_url(url)
        conn = journal_pg.connect(url, readonly=readonly)
        path = conn.journal_path
        try:
            if readonly:
                journal_pg.check_readable(conn, path, SCHEMA_VERSION)
            else:
                journal_pg.check_and_migrate(conn, path, SCHEMA_VERSION, create, first_meta={
                    'controller_id': str(uuid.uuid4()), 'created_at': iso(time.time())})
        except BaseException:
            conn.close()
            raise
        journal = cls(path, conn, actor, access='read-only' if readonly else 'read-write', backend='postgresql')
        journal._url = url
        return journal

    @staticmethod
    def _check_reachable(path, directory):
        # A directory behind one this user may not enter looks missing; say which one it is.
        parent = os.path.dirname(directory)
        while parent and not os.path.isdir(parent):
            parent = os.path.dirname(parent)
        if parent and not os.access(parent, os.X_OK):
            raise JournalError('Cannot reach the journal directory %s: permission denied on %s. Choose a journal path '
                               'this user can write (journal_path / %s).' % (directory, parent, ENV_VAR), path=path)

    @staticmethod
    def _check_trusted(path, directory, writer):
        """Refuse a journal, its write-ahead files or its directory that others may change (core/filetrust.py): a
        writer needs them to be its own (or root's); a reader may read another user's journal, never one that others
        than its owner may write."""
        for target, what, is_dir in ((directory, 'The journal directory', True), (path, 'The journal', False),
                                     (path + '-wal', 'The journal\'s write-ahead log', False),
                                     (path + '-shm', 'The journal\'s shared-memory file', False)):
            problem = filetrust.check(target, what, owner=writer, directory=is_dir)
            if problem:
                raise JournalError(problem, path=path)

    @staticmethod
    def _check_writable(path, directory, exists):
        # SQLite needs to write the file and, for its -wal and -shm files, the directory.
        if not os.access(directory, os.W_OK | os.X_OK):
            raise JournalError('Cannot write the journal directory %s (permission denied). Make it writable for this '
                               'user or choose another journal path (journal_path / %s).' % (directory, ENV_VAR),
                               path=path)
        if exists and not os.access(path, os.R_OK | os.W_OK):
            raise JournalError('Cannot read and write the journal %s (permission denied). Fix its owner or mode '
                               '(it should be 0600 and owned by the user running Ansible).' % path, path=path)

    @staticmethod
    def _create_file(path):
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            os.close(fd)
        except OSError as exc:
            if exc.errno != errno.EEXIST:  # another fork made it first: fine
                raise JournalError('Cannot create the journal %s: %s.' % (path, exc.strerror), path=path)

    @staticmethod
    def _unreadable(path, exc):
        return JournalError('%s is not a readable journal (%s). Nothing was changed. Move it aside and restore it from a '
                            'backup (%s), or point journal_path / %s elsewhere.'
                            % (path, exc, RECOVERY, ENV_VAR), path=path)

    @classmethod
    def _connect(cls, path):
        conn = _sqlite_connect(path, path)
        try:
            conn.execute('PRAGMA busy_timeout = %d' % BUSY_TIMEOUT_MS)
            # Read first: a file that is not a database fails here, before anything is written to it.
            conn.execute('PRAGMA user_version').fetchone()
        except (sqlite3.DatabaseError, JournalDamaged) as exc:
            conn.close()
            raise cls._unreadable(path, exc.details['sqlite'] if isinstance(exc, JournalDamaged) else exc)
        return conn

    # ------------------------------------------------------------- read-only

    @classmethod
    def _open_readonly(cls, path, actor):
        directory = os.path.dirname(path)
        if os.path.isdir(path):
            raise JournalError('The journal path %s is a directory; give the path of a file, for example %s.'
                               % (path, os.path.join(path, 'journal.sqlite')), path=path)
        if not os.path.exists(path):
            if not os.path.isdir(directory):
                cls._check_reachable(path, directory)
            raise JournalMissing('No journal at %s: nothing has been recorded with this journal path yet. Check '
                                 'the journal_path option or the %s environment variable.' % (path, ENV_VAR), path=path)
        if not os.access(path, os.R_OK):
            raise JournalError('Cannot read the journal %s (permission denied). Give this user read access to it (a '
                               'reader needs no write access to it or to its directory).' % path, path=path)
        cls._check_trusted(path, directory, writer=False)
        conn, access = cls._connect_readonly(path, directory)
        try:
            cls._check_readable_schema(conn, path)
        except BaseException:
            conn.close()
            raise
        return cls(path, conn, actor, access=access)

    @classmethod
    def _connect_readonly(cls, path, directory):
        """A read-only connection, and how it reads: ``read-only`` or ``immutable``.

        A journal is in WAL mode. SQLite reads a WAL database read-only when its -wal and -shm files exist, or when
        it may create them in the directory. In a directory this user cannot write (a read-only file system, a
        backup, another user's directory) where the last writer closed cleanly, they do not exist: then every
        change is in the database file itself, and it is read as immutable (no locks, no -shm). If the -wal file
        does exist there with content but its -shm cannot be made, the committed changes it holds cannot be read
        safely, and the journal is refused rather than shown without them.
        """
        uri = 'file:%s?mode=ro' % _url_quote(path)
        try:
            return cls._probe(uri, path), 'read-only'
        except JournalDamaged as exc:
            raise cls._unreadable(path, exc.details['sqlite'])
        except sqlite3.DatabaseError as exc:
            # SQLite cannot make the -wal or -shm file: "unable to open" on a read-only file system,
            # SQLITE_READONLY_DIRECTORY in a directory this user may not write.
            code = _primary_code(exc)
            cannot_open = code in (SQLITE_CANTOPEN, SQLITE_READONLY) if code is not None else (
                'unable to open' in str(exc) or 'readonly database' in str(exc))
            if not cannot_open or os.access(directory, os.W_OK):
                raise JournalError('Cannot open the journal %s read-only: %s.' % (path, exc), path=path)
            wal = path + '-wal'
            if os.path.exists(wal) and os.path.getsize(wal) > 0:
                raise JournalError(
                    'Cannot read the journal %s: its write-ahead log %s holds changes not yet written into the journal '
                    'file, and SQLite cannot make the %s-shm file it needs to read them in %s, which this user cannot '
                    'write. Run any command that writes to this journal once where its directory is writable (it '
                    'folds the log in when it closes), or read it as a user who may write the directory.'
                    % (path, wal, path, directory), path=path)
        try:
            return cls._probe(uri + '&immutable=1', path), 'immutable'
        except JournalDamaged as exc:
            raise cls._unreadable(path, exc.details['sqlite'])
        except sqlite3.DatabaseError as exc:
            raise JournalError('Cannot open the journal %s read-only: %s.' % (path, exc), path=path)

    @staticmethod
    def _probe(uri, path):
        conn = _sqlite_connect(uri, path, uri=True)
        try:
            conn.execute('PRAGMA busy_timeout = %d' % BUSY_TIMEOUT_MS)
            # Temporary objects (the READ_VIEWS) in memory: not even a temporary file is made.
            conn.execute('PRAGMA temp_store = MEMORY')
            # The first read of the schema opens the WAL (and fails where it cannot).
            conn.execute('SELECT count(*) FROM sqlite_master').fetchone()
        except BaseException:
            conn.close()
            raise
        return conn

    @staticmethod
    def _check_readable_schema(conn, path):
        version = conn.execute('PRAGMA user_version').fetchone()[0]
        if version > SCHEMA_VERSION:
            raise JournalError('The journal %s has schema version %d, newer than this collection understands (%d). Use '
                               'the newer ephemera.workspaces that wrote it; nothing was changed.'
                               % (path, version, SCHEMA_VERSION), path=path, schema=version)
        if version == 0:
            raise JournalMissing('%s holds no journal yet (an empty file, or another SQLite database): nothing has '
                                 'been recorded in it.' % path, path=path)
        if version < SCHEMA_VERSION:
            if version not in READ_VIEWS:
                raise JournalError('The journal %s has schema version %d; this collection reads version %d. Readers do '
                                   'not migrate: run any command that writes to this journal once (a create, destroy '
                                   'or reconcile with this journal_path), which migrates it, then read it again.'
                                   % (path, version, SCHEMA_VERSION), path=path, schema=version)
            for statement in READ_VIEWS[version]:
                conn.execute(statement)

    @classmethod
    def _check_and_migrate(cls, conn, path):
        version = conn.execute('PRAGMA user_version').fetchone()[0]
        if version > SCHEMA_VERSION:
            raise JournalError('The journal %s has schema version %d, newer than this collection understands (%d). Use '
                               'the newer ephemera.workspaces that wrote it; nothing was changed.'
                               % (path, version, SCHEMA_VERSION), path=path, schema=version)
        try:
            if conn.execute('PRAGMA journal_mode').fetchone()[0].lower() != 'wal':
                conn.execute('PRAGMA journal_mode = WAL')
            conn.execute('PRAGMA synchronous = FULL')
            conn.execute('PRAGMA foreign_keys = ON')
            if version < SCHEMA_VERSION:
                cls._migrate(conn)
        except sqlite3.DatabaseError as exc:
            raise JournalError('Cannot prepare the journal %s: %s.' % (path, exc), path=path)

    @staticmethod
    def _migrate(conn):
        conn.execute('BEGIN IMMEDIATE')
        try:
            # Read again under the write lock: another fork may have migrated meanwhile.
            version = made = conn.execute('PRAGMA user_version').fetchone()[0]
            if made == 0:
                for statement in journal_schema.statements('sqlite'):
                    conn.execute(statement)
                version = journal_schema.VERSION
            for step in range(version, SCHEMA_VERSION):
                for statement in _split_sql(MIGRATIONS[step]):
                    conn.execute(statement)
            if made == 0:
                conn.execute("INSERT INTO meta (key, value) VALUES ('controller_id', ?)", (str(uuid.uuid4()),))
                conn.execute("INSERT INTO meta (key, value) VALUES ('created_at', ?)", (iso(time.time()),))
            conn.execute('PRAGMA user_version = %d' % SCHEMA_VERSION)
            conn.execute('COMMIT')
        except BaseException:
            conn.execute('ROLLBACK')
            raise

    def close(self):
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # ------------------------------------------------------------ transactions

    @contextlib.contextmanager
    def transaction(self, claim=None, point='write', exclusive=True):
        """A write transaction holding SQLite's write lock from its first statement to COMMIT.

        On PostgreSQL the same write lock is an advisory lock; ``exclusive=False`` (a compare-and-set of one record,
        an event) goes without it there, on the row locks its UPDATEs take. SQLite always takes its write lock.

        With ``claim`` (what ``Queue.wait`` hands the run that executes a queued operation), the
        claim is checked first, inside the transaction, and its lease renewed: a run that no longer
        holds it gets :class:`ClaimLostError` and the transaction writes nothing. ``point`` names the
        commit for the crash-safety tests (:mod:`failpoint`).
        """
        if self.readonly:
            raise JournalError('The journal %s was opened read-only, for reading; nothing was written.' % self.path,
                               path=self.path)
        started = time.monotonic()
        try:
            self._conn.execute('BEGIN IMMEDIATE' if exclusive or self.backend == 'sqlite' else 'BEGIN')
        except sqlite3.OperationalError as exc:
            if 'locked' in str(exc) or 'busy' in str(exc):
                raise JournalError('The journal %s stayed busy for %.1f s (%s); another process holds it. Try again.'
                                   % (self.path, time.monotonic() - started, exc), path=self.path)
            # Not the write lock: the connection could not begin at all. Said as it is, never as a wait.
            raise JournalError('The journal %s could not begin a write (%s). Nothing was written; run again.'
                               % (self.path, exc), path=self.path)
        try:
            if claim is not None:
                # A step whose claim keeper lost the claim writes nothing more (core/renewal.py).
                renewal.check(claim)
                self._check_claim(self._conn, claim)
            yield self._conn
        except BaseException:
            # SQLite may have ended the transaction itself (on a damaged page, say): the first error is the one to tell.
            if self._conn.in_transaction:
                self._conn.execute('ROLLBACK')
            raise
        self._conn.execute('COMMIT')
        if point:
            failpoint.reached('journal ' + point)

    def clock(self, conn=None):
        """Seconds since the epoch by the clock that judges claim leases and idempotency records: the database
        server's for a journal on PostgreSQL, so that controllers that share it, whatever their own clocks say, write
        and judge each other's leases by one clock; this host's for the SQLite file (one host, one clock)."""
        if self.backend != 'postgresql':
            return time.time()
        return float((conn or self._conn).execute('SELECT EXTRACT(EPOCH FROM clock_timestamp())').fetchone()[0])

    def _check_claim(self, conn, claim):
        entry_id, fence = claim_parts(claim)
        now = self.clock(conn)
        cur = conn.execute("UPDATE queue SET lease_expires = ? + COALESCE(lease_seconds, 0), updated_at = ? "
                           "WHERE id = ? AND fence = ? AND state = 'running'", (now, now, entry_id, fence))
        if cur.rowcount == 1:
            return
        row = conn.execute('SELECT * FROM queue WHERE id = ?', (entry_id,)).fetchone()
        if row is None:
            raise ClaimLostError('Queued operation #%d is not recorded in %s, so this run holds no claim on it. Nothing '
                                 'was written.' % (entry_id, self.path), entry_id=entry_id)
        what = '#%d (%s of %s %s)' % (entry_id, row['kind'], row['target_type'], row['target'])
        if row['state'] == 'running':
            owner = json.loads(row['owner'] or '{}')
            why = 'another run took it over (claim number %d, runner %s pid %s)' % (
                row['claims'], owner.get('host'), owner.get('pid'))
        else:
            why = 'it is %s' % row['state']
            reason = (json.loads(row['result']) if row['result'] else {}).get('reason')
            if reason:
                why += ' (%s)' % reason
        raise ClaimLostError('This run no longer holds the claim on operation %s: %s. Nothing was written; this run must '
                             'stop working on it.' % (what, why), entry_id=entry_id, state=row['state'])

    def _one(self, sql, args=()):
        row = self._conn.execute(sql, args).fetchone()
        return row_dict(row) if row is not None else None

    def _all(self, sql, args=()):
        return [row_dict(row) for row in self._conn.execute(sql, args).fetchall()]

    @property
    def controller_id(self):
        return self._conn.execute("SELECT value FROM meta WHERE key = 'controller_id'").fetchone()[0]

    def meta_value(self, key):
        """The journal's own setting ``key`` (the meta table), or None when it has none."""
        row = self._conn.execute('SELECT value FROM meta WHERE key = ?', (key,)).fetchone()
        return row[0] if row is not None else None

    def claim_meta_value(self, key, value):
        """Record ``value`` for the setting ``key`` unless it has one; returns the one recorded (the first wins)."""
        # A write of its own, no commit point of the crash-safety tests: a kill before or after it leaves nothing to
        # finish (the next run records the value again, or finds it).
        if self.readonly:
            raise JournalError('The journal %s was opened read-only, for reading; nothing was written.' % self.path,
                               path=self.path)
        self._conn.execute('BEGIN IMMEDIATE')
        try:
            self._conn.execute('INSERT INTO meta (key, value) SELECT ?, ? WHERE NOT EXISTS '
                               '(SELECT 1 FROM meta WHERE key = ?)', (key, value, key))
        except BaseException:
            if self._conn.in_transaction:
                self._conn.execute('ROLLBACK')
            raise
        self._conn.execute('COMMIT')
        return self.meta_value(key)

    @property
    def schema_version(self):
        if self.backend == 'postgresql':
            return int(self._conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()[0])
        return self._conn.execute('PRAGMA user_version').fetchone()[0]


def _split_sql(script):
    """Statements of a migration script; trigger bodies keep their inner semicolons."""
    statements, current = [], []
    for line in script.strip().splitlines():
        current.append(line)
        text = '\n'.join(current).strip()
        if text.endswith(';') and (not text.upper().startswith('CREATE TRIGGER') or text.upper().endswith('END;')):
            statements.append(text)
            current = []
    if '\n'.join(current).strip():
        statements.append('\n'.join(current).strip())
    return statements
