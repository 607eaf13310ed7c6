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
import datetime
import errno
import hashlib
import json
import os
import re
import sqlite3
import time
import uuid
from urllib.parse import quote as _url_quote

from ansible_collections.ephemera.workspaces.plugins.module_utils.core.errors import (
    ClaimLostError,
    IdempotencyError,
    JournalError,
    JournalMissing,
    StaleGenerationError,
)
from ansible_collections.ephemera.workspaces.plugins.module_utils.core import failpoint
from ansible_collections.ephemera.workspaces.plugins.module_utils.core import filetrust
from ansible_collections.ephemera.workspaces.plugins.module_utils.core import renewal
from ansible_collections.ephemera.workspaces.plugins.module_utils.core.run_identity import DEFAULT_LEASE, Owner

ENV_VAR = 'EPHEMERA_JOURNAL'
URL_ENV_VAR = 'EPHEMERA_JOURNAL_URL'
SCHEMA_VERSION = 5
BUSY_TIMEOUT_MS = 60000
IDEMPOTENCY_TTL = 24 * 3600

WORKSPACE_STATUSES = ('requested', 'provisioning', 'booting', 'bootstrapping', 'registering',
                      'ready', 'failed', 'destroying', 'destroyed', 'template')
WORKSPACE_ACTIVITIES = ('active', 'idle', 'blocked', 'unknown')
DESIRED_STATES = ('present', 'destroyed')

# Workspace columns a caller may set, and how they are stored (JSON columns hold dicts/lists). The resource is named
# provider-neutrally: which provider, its id there, the id recorded before the allocation, where it lives, and the
# provider's task handles by step.
WORKSPACE_FIELDS = ('status', 'activity', 'desired_state', 'provider', 'location', 'resource_id', 'candidate_id',
                    'provider_tasks', 'address', 'repo', 'ref', 'purpose', 'failure', 'params', 'progress', 'facts',
                    'lease', 'lease_expires_at', 'cleanup')
# The names these fields had in schema 1 (Proxmox's words). Records carry them as read-only copies, and writes may
# still use them, so that what users and older callers read keeps its meaning.
LEGACY_FIELDS = (('node', 'location'), ('vmid', 'resource_id'), ('candidate_vmid', 'candidate_id'),
                 ('upids', 'provider_tasks'))
JSON_FIELDS = ('provider_tasks', 'failure', 'params', 'detail', 'resources', 'result', 'owner', 'progress', 'facts',
               'steps', 'lease', 'cleanup', 'source', 'tools', 'errors')
TIME_FIELDS = ('created_at', 'updated_at', 'at', 'started_at', 'ended_at', 'next_retry', 'expires_at', 'leased_at',
               'step_at', 'lease_expires', 'seen_at', 'lease_expires_at', 'finished_at')

# Keys whose values never reach the journal, whatever a caller passes in an event or a result.
SECRET_KEY = re.compile(r'pass(word)?|secret|token|private|credential|api_key|apikey', re.I)
REDACTED = '********'

# Each entry migrates a journal from the schema version equal to its index to the next one.
# A released entry is never edited: later versions append entries so that any older journal
# can be brought forward step by step.
MIGRATIONS = [
    """
    CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
    CREATE TABLE workspaces (
        name            TEXT PRIMARY KEY,
        status          TEXT NOT NULL,
        activity        TEXT NOT NULL DEFAULT 'unknown',
        desired_state   TEXT NOT NULL DEFAULT 'present',
        node            TEXT,
        vmid            INTEGER,
        candidate_vmid  INTEGER,
        upids           TEXT NOT NULL DEFAULT '{}',
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
    CREATE INDEX workspaces_status ON workspaces (status);
    CREATE INDEX workspaces_vmid ON workspaces (vmid);
    CREATE TABLE events (
        id         INTEGER PRIMARY KEY AUTOINCREMENT,
        workspace  TEXT NOT NULL,
        at         REAL NOT NULL,
        actor      TEXT NOT NULL,
        kind       TEXT NOT NULL,
        action     TEXT NOT NULL,
        detail     TEXT NOT NULL DEFAULT '{}'
    );
    CREATE INDEX events_workspace ON events (workspace, id);
    CREATE TRIGGER events_append_only_update BEFORE UPDATE ON events
        BEGIN SELECT RAISE(ABORT, 'the event log is append-only'); END;
    CREATE TRIGGER events_append_only_delete BEFORE DELETE ON events
        BEGIN SELECT RAISE(ABORT, 'the event log is append-only'); END;
    CREATE TABLE intents (
        id          INTEGER PRIMARY KEY AUTOINCREMENT,
        op          TEXT NOT NULL,
        target      TEXT NOT NULL,
        owner       TEXT NOT NULL,
        state       TEXT NOT NULL DEFAULT 'open',
        started_at  REAL NOT NULL,
        ended_at    REAL,
        attempts    INTEGER NOT NULL DEFAULT 1,
        resources   TEXT NOT NULL DEFAULT '[]',
        result      TEXT,
        generation  INTEGER NOT NULL DEFAULT 1
    );
    CREATE INDEX intents_open ON intents (state, target);
    CREATE TABLE cleanup_debt (
        workspace   TEXT NOT NULL,
        resource    TEXT NOT NULL,
        attempts    INTEGER NOT NULL,
        last_error  TEXT NOT NULL,
        next_retry  REAL NOT NULL,
        created_at  REAL NOT NULL,
        updated_at  REAL NOT NULL,
        PRIMARY KEY (workspace, resource)
    );
    CREATE TABLE address_leases (
        address      TEXT PRIMARY KEY,
        pool         TEXT NOT NULL,
        workspace    TEXT NOT NULL,
        leased_at    REAL NOT NULL
    );
    CREATE UNIQUE INDEX address_leases_workspace ON address_leases (pool, workspace);
    CREATE TABLE queue (
        id             INTEGER PRIMARY KEY AUTOINCREMENT,
        kind           TEXT NOT NULL,
        target_type    TEXT NOT NULL,
        target         TEXT NOT NULL,
        params         TEXT NOT NULL DEFAULT '{}',
        fingerprint    TEXT NOT NULL,
        source         TEXT NOT NULL,
        parent_id      INTEGER REFERENCES queue (id),
        state          TEXT NOT NULL DEFAULT 'queued',
        step           TEXT,
        step_at        REAL,
        steps          TEXT NOT NULL DEFAULT '[]',
        owner          TEXT,
        lease_seconds  REAL,
        lease_expires  REAL,
        fence          TEXT,
        claims         INTEGER NOT NULL DEFAULT 0,
        result         TEXT,
        created_at     REAL NOT NULL,
        started_at     REAL,
        updated_at     REAL NOT NULL,
        ended_at       REAL
    );
    CREATE INDEX queue_target ON queue (target_type, target, state, id);
    CREATE INDEX queue_state ON queue (state, id);
    CREATE INDEX queue_parent ON queue (parent_id);
    CREATE TABLE queue_requests (
        id             INTEGER PRIMARY KEY AUTOINCREMENT,
        entry_id       INTEGER NOT NULL REFERENCES queue (id),
        requested_by   TEXT NOT NULL,
        source         TEXT NOT NULL,
        job_id         TEXT,
        owner          TEXT NOT NULL,
        waits          INTEGER NOT NULL,
        state          TEXT NOT NULL DEFAULT 'waiting',
        at             REAL NOT NULL,
        seen_at        REAL NOT NULL,
        lease_expires  REAL
    );
    CREATE INDEX queue_requests_entry ON queue_requests (entry_id, id);
    CREATE TABLE idempotency (
        key_hash     TEXT PRIMARY KEY,
        controller   TEXT NOT NULL,
        action       TEXT NOT NULL,
        fingerprint  TEXT NOT NULL,
        state        TEXT NOT NULL,
        owner        TEXT NOT NULL,
        result       TEXT,
        created_at   REAL NOT NULL,
        expires_at   REAL NOT NULL
    );
    """,
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
TEMPLATE_STATES = ('building', 'built', 'failed')
# switch_template without a compare-and-set on the current version.
ANY = object()

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


def redact(value):
    """A copy of ``value`` with every secret-looking key's value replaced by ``********``."""
    if isinstance(value, dict):
        return {k: REDACTED if SECRET_KEY.search(str(k)) and v not in (None, '') else redact(v)
                for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [redact(v) for v in value]
    return value


def fingerprint(request):
    """SHA-256 of the request in canonical JSON: the same request always gives the same print."""
    return hashlib.sha256(json.dumps(request, sort_keys=True, separators=(',', ':'), default=str).encode()).hexdigest()


def iso(ts):
    if ts is None:
        return None
    return datetime.datetime.fromtimestamp(ts, tz=datetime.timezone.utc).strftime('%Y-%m-%dT%H:%M:%S.%fZ')


def epoch(stamp):
    """The seconds since the epoch of a time as :func:`iso` writes it (None for None)."""
    if not stamp:
        return None
    return (datetime.datetime.strptime(stamp, '%Y-%m-%dT%H:%M:%S.%fZ').replace(tzinfo=datetime.timezone.utc)
            - datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc)).total_seconds()


def runner_alive(row, now):
    """Whether the runner of a queue entry (a row of ``queue``) lives: on this host its process (pid and start time),
    on another host the claim's lease, which every write under the claim renews (see ``queue.py``)."""
    owner = Owner.from_record(row['owner'], row['lease_expires'])
    return owner is not None and owner.is_alive(now)


def _dumps(value):
    return json.dumps(value, sort_keys=True, default=str)


def _row_dict(row):
    out = {}
    for key in row.keys():
        value = row[key]
        if key in JSON_FIELDS and value is not None:
            value = json.loads(value)
        elif key in TIME_FIELDS:
            value = iso(value)
        out[key] = value
    return out


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


class IdempotencyClaim:
    """What :meth:`Journal.begin_idempotent` hands back: a fresh claim, or the replay of a stored result."""

    def __init__(self, key_hash, replayed, result=None):
        self.key_hash = key_hash
        self.replayed = replayed
        self.result = result


class Journal:
    """One open journal. Create it with :meth:`Journal.open`; use it as a context manager or call close()."""

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
            version = conn.execute('PRAGMA user_version').fetchone()[0]
            for step in range(version, SCHEMA_VERSION):
                for statement in _split_sql(MIGRATIONS[step]):
                    conn.execute(statement)
            if version == 0:
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
        try:
            self._conn.execute('BEGIN IMMEDIATE' if exclusive or self.backend == 'sqlite' else 'BEGIN')
        except sqlite3.OperationalError as exc:
            raise JournalError('The journal %s stayed busy for %d s (%s); another process holds it. Try again.'
                               % (self.path, BUSY_TIMEOUT_MS // 1000, exc), path=self.path)
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
        return _row_dict(row) if row is not None else None

    def _all(self, sql, args=()):
        return [_row_dict(row) for row in self._conn.execute(sql, args).fetchall()]

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

    # --------------------------------------------------------------- workspaces

    @staticmethod
    def _fields(fields):
        """``fields`` with the names of schema 1 (vmid, node, ...) given as today's."""
        fields = dict(fields)
        for old, new in LEGACY_FIELDS:
            if old in fields:
                if new in fields:
                    raise JournalError('Give %s or %s (its former name), not both.' % (new, old))
                fields[new] = fields.pop(old)
        return fields

    @staticmethod
    def _workspace(record):
        """A workspace record with the fields' former names as read-only copies."""
        if record is not None:
            for old, new in LEGACY_FIELDS:
                record[old] = record[new]
        return record

    @staticmethod
    def _check_fields(fields):
        unknown = set(fields) - set(WORKSPACE_FIELDS)
        if unknown:
            raise JournalError('Unknown workspace field(s): %s.' % ', '.join(sorted(unknown)))
        if 'status' in fields and fields['status'] not in WORKSPACE_STATUSES:
            raise JournalError('Unknown workspace status %r; expected one of %s.'
                               % (fields['status'], ', '.join(WORKSPACE_STATUSES)))
        if 'activity' in fields and fields['activity'] not in WORKSPACE_ACTIVITIES:
            raise JournalError('Unknown workspace activity %r; expected one of %s.'
                               % (fields['activity'], ', '.join(WORKSPACE_ACTIVITIES)))
        if 'desired_state' in fields and fields['desired_state'] not in DESIRED_STATES:
            raise JournalError('Unknown desired state %r; expected one of %s.'
                               % (fields['desired_state'], ', '.join(DESIRED_STATES)))

    def _column_value(self, key, value):
        if key in JSON_FIELDS:
            return _dumps(redact(value))
        if key in ('resource_id', 'candidate_id') and self.backend == 'postgresql':
            # PostgreSQL's columns have one type; the id keeps its own (an integer VMID, a cloud's text id) as JSON.
            return None if value is None else json.dumps(value)
        return value

    def create_workspace(self, name, event=None, claim=None, **fields):
        """Record a new workspace (status ``requested`` unless given) at generation 1 and return it.

        Raises :class:`JournalError` when a record with that name exists already: the caller reads
        it and decides (resume, or refuse different parameters). ``claim``: see :meth:`transaction`.
        """
        fields = self._fields(fields)
        fields.setdefault('status', 'requested')
        self._check_fields(fields)
        now = time.time()
        cols = ['name', 'created_at', 'updated_at', 'generation'] + sorted(fields)
        values = [name, now, now, 1] + [self._column_value(k, fields[k]) for k in sorted(fields)]
        with self.transaction(claim, point='create_workspace') as conn:
            try:
                conn.execute('INSERT INTO workspaces (%s) VALUES (%s)' % (', '.join(cols), ', '.join('?' * len(cols))),
                             values)
            except sqlite3.IntegrityError:
                raise JournalError('A workspace named %r is already recorded in %s.' % (name, self.path),
                                   workspace=name)
            self._append_event(conn, name, 'recorded', 'create_workspace', dict(fields, **(event or {})), now)
        return self.get_workspace(name)

    def get_workspace(self, name):
        """The workspace record as a dict, or None."""
        return self._workspace(self._one('SELECT * FROM workspaces WHERE name = ?', (name,)))

    def list_workspaces(self, status=None, activity=None, names=None):
        """Workspace records, filtered by status, activity and names (each a value or a list), by name."""
        where, args = [], []
        for column, wanted in (('status', status), ('activity', activity), ('name', names)):
            if wanted:
                wanted = [wanted] if isinstance(wanted, str) else list(wanted)
                where.append('%s IN (%s)' % (column, ', '.join('?' * len(wanted))))
                args.extend(wanted)
        sql = 'SELECT * FROM workspaces' + (' WHERE ' + ' AND '.join(where) if where else '') + ' ORDER BY name'
        return [self._workspace(record) for record in self._all(sql, args)]

    def update_workspace(self, name, generation, event=None, claim=None, **fields):
        """Compare-and-set: apply ``fields`` only if the record is still at ``generation``.

        ``event`` (a dict with ``kind``, ``action`` and optional ``detail``) is appended to the
        event log in the same transaction, so the record and its history never disagree.
        Returns the new record; raises :class:`StaleGenerationError` and writes nothing if the
        record moved on (or vanished) since the caller read it, or (:class:`ClaimLostError`) if
        ``claim`` is given and no longer held.
        """
        fields = self._fields(fields)
        self._check_fields(fields)
        with self.transaction(claim, point=event['action'] if event else 'update_workspace', exclusive=False) as conn:
            self._compare_and_set(conn, name, generation, fields, event)
        return self.get_workspace(name)

    def amend_workspace(self, name, change, claim=None):
        """Read workspace ``name`` and write what ``change(record)`` decides, in one transaction that holds the record
        from the read to the write (PostgreSQL: ``SELECT ... FOR UPDATE``; SQLite: its write lock), so that no other
        run's update comes between and nothing is retried: for a record that many runs touch at once (heartbeats,
        a sweep's outcome beside a running step). ``change`` gets the record (None when it is not recorded) and
        returns None (nothing to write) or ``(fields, event)``; it runs while the record is held, so it must not wait
        on anything, and what it raises ends the transaction with nothing written. Returns the record as it is
        after."""
        lock = ' FOR UPDATE' if self.backend == 'postgresql' else ''
        with self.transaction(claim, point='amend_workspace', exclusive=False) as conn:
            row = conn.execute('SELECT * FROM workspaces WHERE name = ?' + lock, (name,)).fetchone()
            ws = self._workspace(_row_dict(row) if row is not None else None)
            decided = change(ws)
            if decided is None:
                return ws
            fields, event = decided
            fields = self._fields(fields)
            self._check_fields(fields)
            self._compare_and_set(conn, name, ws['generation'], fields, event)
        return self.get_workspace(name)

    def _compare_and_set(self, conn, name, generation, fields, event):
        now = time.time()
        keys = sorted(fields)
        assignments = ', '.join('%s = ?' % k for k in keys + ['updated_at']) + ', generation = generation + 1'
        args = [self._column_value(k, fields[k]) for k in keys] + [now, name, generation]
        cur = conn.execute('UPDATE workspaces SET %s WHERE name = ? AND generation = ?' % assignments, args)
        if cur.rowcount != 1:
            row = conn.execute('SELECT generation FROM workspaces WHERE name = ?', (name,)).fetchone()
            if row is None:
                raise StaleGenerationError('Workspace %r is not recorded in the journal; nothing was written.'
                                           % name, workspace=name)
            raise StaleGenerationError(
                'Workspace %r changed while this run worked on it (expected generation %d, found %d): another run '
                'updated it first. Nothing was written; re-read the workspace and try again.'
                % (name, generation, row[0]), workspace=name, expected=generation, found=row[0])
        if event is not None:
            self._append_event(conn, name, event.get('kind', 'transition'), event['action'],
                               event.get('detail', fields), now)

    # ------------------------------------------------------------------- events

    def _append_event(self, conn, workspace, kind, action, detail, now=None):
        conn.execute('INSERT INTO events (workspace, at, actor, kind, action, detail) VALUES (?, ?, ?, ?, ?, ?)',
                     (workspace, now or time.time(), self.actor, kind, action, _dumps(redact(detail or {}))))

    def append_event(self, workspace, kind, action, detail=None, claim=None):
        """Append one entry to a workspace's event log: ``kind`` is e.g. dispatched, observed, note."""
        with self.transaction(claim, point=action, exclusive=False) as conn:
            self._append_event(conn, workspace, kind, action, detail)

    def events(self, workspace, limit=None):
        """The workspace's event log, oldest first (the last ``limit`` entries if given)."""
        if limit:
            rows = self._all('SELECT * FROM events WHERE workspace = ? ORDER BY id DESC LIMIT ?', (workspace, int(limit)))
            return list(reversed(rows))
        return self._all('SELECT * FROM events WHERE workspace = ? ORDER BY id', (workspace,))

    # ------------------------------------------------------------------ intents

    def open_intent(self, op, target, resources=None, owner=None, claim=None):
        """Record that ``op`` on ``target`` is about to run, owned by this process; returns the intent."""
        owner = owner or Owner.current()
        with self.transaction(claim, point='open_intent') as conn:
            cur = conn.execute('INSERT INTO intents (op, target, owner, started_at, resources) VALUES (?, ?, ?, ?, ?)',
                               (op, target, _dumps(owner.to_dict()), time.time(), _dumps(resources or [])))
            intent_id = cur.lastrowid
        return self.get_intent(intent_id)

    def get_intent(self, intent_id):
        return self._one('SELECT * FROM intents WHERE id = ?', (intent_id,))

    def update_intent(self, intent_id, generation, resources=None, attempts=None, owner=None, state=None, result=None,
                      claim=None):
        """Compare-and-set on an intent: add resources it may have allocated, take it over, or close it."""
        sets, args = [], []
        if resources is not None:
            sets.append('resources = ?')
            args.append(_dumps(resources))
        if attempts is not None:
            sets.append('attempts = ?')
            args.append(int(attempts))
        if owner is not None:
            sets.append('owner = ?')
            args.append(_dumps(owner.to_dict()))
        if state is not None:
            if state not in ('open', 'done', 'failed', 'abandoned'):
                raise JournalError('Unknown intent state %r.' % state)
            sets.append('state = ?')
            args.append(state)
            if state != 'open':
                sets.append('ended_at = ?')
                args.append(time.time())
        if result is not None:
            sets.append('result = ?')
            args.append(_dumps(redact(result)))
        sets.append('generation = generation + 1')
        with self.transaction(claim, point='update_intent') as conn:
            cur = conn.execute('UPDATE intents SET %s WHERE id = ? AND generation = ?' % ', '.join(sets),
                               args + [intent_id, generation])
            if cur.rowcount != 1:
                raise StaleGenerationError('Intent %d changed since generation %d; nothing was written.'
                                           % (intent_id, generation), intent=intent_id)
        return self.get_intent(intent_id)

    def open_intents(self, target=None):
        if target is None:
            return self._all("SELECT * FROM intents WHERE state = 'open' ORDER BY id")
        return self._all("SELECT * FROM intents WHERE state = 'open' AND target = ? ORDER BY id", (target,))

    @staticmethod
    def intent_owner(intent):
        return Owner.from_dict(intent['owner'])

    # ------------------------------------------------------------- cleanup debt

    def record_cleanup_debt(self, workspace, resource, error, retry_in=300.0, claim=None):
        """Remember a cleanup that could not finish; repeated failures count up ``attempts``."""
        now = time.time()
        with self.transaction(claim, point='cleanup_debt') as conn:
            conn.execute(
                'INSERT INTO cleanup_debt (workspace, resource, attempts, last_error, next_retry, created_at, updated_at) '
                'VALUES (?, ?, 1, ?, ?, ?, ?) ON CONFLICT (workspace, resource) DO UPDATE SET '
                'attempts = cleanup_debt.attempts + 1, last_error = excluded.last_error, next_retry = excluded.next_retry, '
                'updated_at = excluded.updated_at',
                (workspace, resource, str(error), now + retry_in, now, now))
            self._append_event(conn, workspace, 'observed', 'cleanup_debt',
                               {'resource': resource, 'error': str(error)}, now)
        return self._one('SELECT * FROM cleanup_debt WHERE workspace = ? AND resource = ?', (workspace, resource))

    def clear_cleanup_debt(self, workspace, resource, claim=None):
        """Settle a debt once the cleanup was confirmed; returns True if there was one."""
        with self.transaction(claim, point='cleanup_debt_cleared') as conn:
            cur = conn.execute('DELETE FROM cleanup_debt WHERE workspace = ? AND resource = ?', (workspace, resource))
            if cur.rowcount:
                self._append_event(conn, workspace, 'observed', 'cleanup_debt_settled', {'resource': resource})
            return cur.rowcount == 1

    def cleanup_debts(self, workspace=None, due_only=False):
        where, args = [], []
        if workspace is not None:
            where.append('workspace = ?')
            args.append(workspace)
        if due_only:
            where.append('next_retry <= ?')
            args.append(time.time())
        sql = 'SELECT * FROM cleanup_debt' + (' WHERE ' + ' AND '.join(where) if where else '')
        return self._all(sql + ' ORDER BY workspace, resource', args)

    # ----------------------------------------------------------- address leases

    def lease_address(self, pool, workspace, candidates, claim=None):
        """The address leased to ``workspace`` from ``pool``: its existing lease, else the first free candidate.

        A lease is held until :meth:`release_address`, so an address is never handed out twice,
        however many forks allocate at once. Raises JournalError when every candidate is taken.
        """
        now = time.time()
        with self.transaction(claim, point='address_lease') as conn:
            row = conn.execute('SELECT address FROM address_leases WHERE pool = ? AND workspace = ?',
                               (pool, workspace)).fetchone()
            if row is not None:
                return row[0]
            taken = set(r[0] for r in conn.execute('SELECT address FROM address_leases'))
            for address in candidates:
                if address not in taken:
                    conn.execute('INSERT INTO address_leases (address, pool, workspace, leased_at) VALUES (?, ?, ?, ?)',
                                 (address, pool, workspace, now))
                    self._append_event(conn, workspace, 'recorded', 'address_leased', {'address': address, 'pool': pool},
                                       now)
                    return address
        raise JournalError('Every address of the range %s is leased (%d in use). Release addresses by destroying '
                           'workspaces, or widen the range.' % (pool, len(taken)), pool=pool)

    def release_address(self, workspace, claim=None):
        """Give the workspace's leased addresses back; returns them."""
        with self.transaction(claim, point='address_release') as conn:
            rows = [r[0] for r in conn.execute('SELECT address FROM address_leases WHERE workspace = ?', (workspace,))]
            if rows:
                conn.execute('DELETE FROM address_leases WHERE workspace = ?', (workspace,))
                self._append_event(conn, workspace, 'recorded', 'address_released', {'addresses': rows})
        return rows

    def address_leases(self, pool=None):
        if pool is None:
            return self._all('SELECT * FROM address_leases ORDER BY address')
        return self._all('SELECT * FROM address_leases WHERE pool = ? ORDER BY address', (pool,))

    # -------------------------------------------------------------- idempotency

    def idempotency_hash(self, key, action, controller=None):
        controller = controller or self.controller_id
        return hashlib.sha256(('%s\0%s\0%s' % (controller, action, key)).encode('utf-8')).hexdigest()

    def begin_idempotent(self, key, action, request, controller=None, owner=None, now=None, claim=None,
                         lease=DEFAULT_LEASE):
        """Claim an idempotency key before doing ``action`` for ``request``.

        - first use: a fresh claim (``replayed`` False); the caller does the work, then calls
          :meth:`finish_idempotent` (or :meth:`abandon_idempotent` if it failed);
        - same key, same request, finished: the stored result (``replayed`` True); do nothing;
        - same key, different request: :class:`IdempotencyError`;
        - same key while its first use still runs: :class:`IdempotencyError` (refused). If that
          first owner died, this caller takes the claim over and resumes.

        Whether the first use still runs is judged as a queue claim is: a key claimed under a queued operation's
        ``claim`` lives while that operation runs with a live runner (on this host its process, on another host the
        claim's renewed lease), and a run that holds that operation's claim now (it took it over) goes on with the
        key. A key claimed outside the queue carries a lease of its own (``lease`` seconds from its claim), so that an
        owner on another host that died frees it then instead of after the record's 24 h.

        Keys are scoped by controller and action and stored only as a SHA-256 hash; records
        expire 24 h after they were made.
        """
        controller = controller or self.controller_id
        owner = owner or Owner.current()
        key_hash = self.idempotency_hash(key, action, controller)
        print_ = fingerprint(request)
        with self.transaction(point='idempotency_begin') as conn:
            now = self.clock(conn) if now is None else now
            mine = self._idempotency_owner(owner, claim, now, lease)
            conn.execute('DELETE FROM idempotency WHERE expires_at <= ?', (now,))
            row = conn.execute('SELECT * FROM idempotency WHERE key_hash = ?', (key_hash,)).fetchone()
            if row is None:
                conn.execute('INSERT INTO idempotency (key_hash, controller, action, fingerprint, state, owner, '
                             'created_at, expires_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)',
                             (key_hash, controller, action, print_, 'in_flight', _dumps(mine), now,
                              now + IDEMPOTENCY_TTL))
                return IdempotencyClaim(key_hash, replayed=False)
            if row['fingerprint'] != print_:
                raise IdempotencyError('The idempotency key was already used for a different %s request. Use a new '
                                       'key for a new request, or repeat the original request unchanged.' % action,
                                       action=action)
            if row['state'] == 'done':
                return IdempotencyClaim(key_hash, replayed=True, result=json.loads(row['result']))
            first = json.loads(row['owner'])
            if Owner.from_dict(first) == owner or (claim is not None and first.get('entry_id') == mine['entry_id']):
                # The same run asks again (a later step of the operation it claimed the key for), or the run that
                # holds that operation's claim now (it took the operation over).
                if first != mine:
                    conn.execute('UPDATE idempotency SET owner = ? WHERE key_hash = ?', (_dumps(mine), key_hash))
                return IdempotencyClaim(key_hash, replayed=False)
            if self._idempotency_owner_alive(conn, first, now):
                raise IdempotencyError('A %s with this idempotency key is still running (%s). Wait for it to finish, '
                                       'then repeat this request to get its result.'
                                       % (action, self._idempotency_owner_text(first)), action=action)
            conn.execute('UPDATE idempotency SET owner = ? WHERE key_hash = ?', (_dumps(mine), key_hash))
            return IdempotencyClaim(key_hash, replayed=False)

    @staticmethod
    def _idempotency_owner(owner, claim, now, lease):
        """What an idempotency record keeps of its owner: the run, and the queued operation it works for (its
        liveness is then that operation's runner's), else a lease of its own."""
        mine = owner.to_dict()
        if claim is not None:
            mine.update(entry_id=claim_parts(claim)[0], lease_expires=None)
        else:
            mine.update(entry_id=None, lease_expires=now + float(lease))
        return mine

    @staticmethod
    def _idempotency_owner_alive(conn, first, now):
        if first.get('entry_id') is not None:
            row = conn.execute('SELECT state, owner, lease_expires FROM queue WHERE id = ?',
                               (first['entry_id'],)).fetchone()
            return row is not None and row['state'] == 'running' and runner_alive(row, now)
        return Owner.from_dict(first).is_alive(now)

    @staticmethod
    def _idempotency_owner_text(first):
        text = '%s pid %s' % (first.get('host'), first.get('pid'))
        if first.get('entry_id') is not None:
            text += ', queued operation #%s' % first['entry_id']
        return text

    def finish_idempotent(self, claim, result):
        """Store the result of a claimed request, so that a repeat replays it."""
        with self.transaction(point='idempotency_finish') as conn:
            conn.execute("UPDATE idempotency SET state = 'done', result = ? WHERE key_hash = ?",
                         (_dumps(redact(result)), claim.key_hash))

    def abandon_idempotent(self, claim):
        """Forget a claim whose work failed, so that a retry with the same key runs again."""
        with self.transaction(point='idempotency_abandon') as conn:
            conn.execute("DELETE FROM idempotency WHERE key_hash = ? AND state = 'in_flight'", (claim.key_hash,))

    # ----------------------------------------------------------- provider state

    @staticmethod
    def _state_key(key):
        if not isinstance(key, str) or not key or len(key) > 400:
            raise JournalError('A provider state key is a non-empty string of at most 400 characters (azure/set/'
                               '<base>, say); got %r. Nothing was written.' % (key,))
        return key

    def provider_state(self, key):
        """``(value, generation)`` of the provider state recorded under ``key``, or None."""
        row = self._conn.execute('SELECT value, generation FROM provider_state WHERE key = ?',
                                 (self._state_key(key),)).fetchone()
        return None if row is None else (json.loads(row[0]), int(row[1]))

    def provider_states(self, prefix=''):
        """``[(key, value, generation)]`` of every provider state whose key starts with ``prefix``, by key."""
        pattern = re.sub(r'([\\%_])', r'\\\1', prefix or '') + '%'
        rows = self._conn.execute("SELECT key, value, generation FROM provider_state WHERE key LIKE ? ESCAPE '\\' "
                                  'ORDER BY key', (pattern,)).fetchall()
        # LIKE ignores the case of ASCII letters on SQLite: the prefix itself decides.
        return [(row[0], json.loads(row[1]), int(row[2])) for row in rows if row[0].startswith(prefix or '')]

    def put_provider_state(self, key, value, generation=None, claim=None, point=None):
        """Compare-and-set the provider state under ``key`` to ``value`` (a JSON object): ``generation`` None
        records it only if there is none yet, else only if it is still at ``generation``. Returns the new
        generation. A caller that was overtaken gets :class:`StaleGenerationError` and nothing is written; ``claim``
        fences it as every write of a queued operation (:meth:`transaction`); ``point`` names the commit for the
        crash-safety tests (``journal <point>``; ``provider_state`` unless given)."""
        key = self._state_key(key)
        if not isinstance(value, dict):
            raise JournalError('Provider state %s must be a JSON object (a dict), not %s. Nothing was written.'
                               % (key, type(value).__name__), key=key)
        try:
            text = json.dumps(redact(value), sort_keys=True)
        except (TypeError, ValueError) as err:
            raise JournalError('Provider state %s is not JSON (%s). Nothing was written.' % (key, err), key=key)
        now = time.time()
        with self.transaction(claim, point=point or 'provider_state', exclusive=False) as conn:
            if generation is None:
                cur = conn.execute('INSERT OR IGNORE INTO provider_state (key, value, generation, updated_at) '
                                   'VALUES (?, ?, 1, ?)', (key, text, now))
                if cur.rowcount != 1:
                    raise StaleGenerationError('Provider state %s is recorded already: another run recorded it first. '
                                               'Nothing was written; read it and go on from it.' % key, key=key,
                                               expected=None)
                return 1
            cur = conn.execute('UPDATE provider_state SET value = ?, generation = generation + 1, updated_at = ? '
                               'WHERE key = ? AND generation = ?', (text, now, key, int(generation)))
            if cur.rowcount != 1:
                raise self._state_moved(conn, key, generation)
        return int(generation) + 1

    def delete_provider_state(self, key, generation, claim=None, point=None):
        """Remove the provider state under ``key`` if it is still at ``generation`` (StaleGenerationError, nothing
        removed, if not); ``claim`` and ``point`` as for :meth:`put_provider_state`."""
        key = self._state_key(key)
        with self.transaction(claim, point=point or 'provider_state_deleted', exclusive=False) as conn:
            cur = conn.execute('DELETE FROM provider_state WHERE key = ? AND generation = ?', (key, int(generation)))
            if cur.rowcount != 1:
                raise self._state_moved(conn, key, generation)

    @staticmethod
    def _state_moved(conn, key, generation):
        row = conn.execute('SELECT generation FROM provider_state WHERE key = ?', (key,)).fetchone()
        if row is None:
            return StaleGenerationError('Provider state %s is not recorded (expected generation %s): another run '
                                        'removed it. Nothing was written.' % (key, generation), key=key,
                                        expected=generation, found=None)
        return StaleGenerationError('Provider state %s changed while this run worked on it (expected generation %s, '
                                    'found %s): another run wrote it first. Nothing was written; read it again.'
                                    % (key, generation, row[0]), key=key, expected=generation, found=int(row[0]))

    # ---------------------------------------------------------------- templates

    @staticmethod
    def template_event_key(name):
        """The event-log key of template ``name`` (events of non-workspace targets are logged as "<type>:<name>")."""
        return 'template:%s' % name

    def template(self, name):
        """The pointer of template ``name`` ({name, current, previous, generation, ...}), or None."""
        return self._one('SELECT * FROM templates WHERE name = ?', (name,))

    def templates(self):
        return self._all('SELECT * FROM templates ORDER BY name')

    def template_version(self, name, version):
        return self._one('SELECT * FROM template_versions WHERE name = ? AND version = ?', (name, int(version)))

    def template_versions(self, name=None, state=None):
        """Versions of template ``name`` (every template's without one), oldest first."""
        where, args = [], []
        if name is not None:
            where.append('name = ?')
            args.append(name)
        if state is not None:
            where.append('state = ?')
            args.append(state)
        sql = 'SELECT * FROM template_versions' + (' WHERE ' + ' AND '.join(where) if where else '')
        return self._all(sql + ' ORDER BY name, version', args)

    def begin_template_version(self, name, source, workspace_of, entry=None, claim=None):
        """Record the next version of template ``name`` as ``building`` (from ``source``, a dict), before anything
        is cloned; ``workspace_of(version)`` names the workspace record that carries its candidate. Returns it."""
        now = time.time()
        with self.transaction(claim, point='template_version') as conn:
            row = conn.execute('SELECT MAX(version) FROM template_versions WHERE name = ?', (name,)).fetchone()
            version = (row[0] or 0) + 1
            conn.execute('INSERT INTO template_versions (name, version, state, source, workspace, created_at, entry) '
                         "VALUES (?, ?, 'building', ?, ?, ?, ?)",
                         (name, version, _dumps(source), workspace_of(version), now, entry))
            self._append_event(conn, self.template_event_key(name), 'recorded', 'build_started',
                               {'version': version, 'source': source, 'workspace': workspace_of(version)}, now)
        return self.template_version(name, version)

    def update_template_version(self, name, version, state=None, claim=None, **fields):
        """Set ``state`` (building, built, failed) and ``fields`` (resource_id, location, provider, tools, errors)
        of a version, with an event."""
        sets, args = [], []
        if state is not None:
            if state not in TEMPLATE_STATES:
                raise JournalError('Unknown template version state %r; expected one of %s.'
                                   % (state, ', '.join(TEMPLATE_STATES)))
            sets += ['state = ?', 'finished_at = ?']
            args += [state, time.time() if state != 'building' else None]
        for key in sorted(fields):
            if key not in ('resource_id', 'location', 'provider', 'tools', 'errors'):
                raise JournalError('Unknown template version field %r.' % key)
            sets.append('%s = ?' % key)
            args.append(self._column_value(key, fields[key]))
        with self.transaction(claim, point='template_version_update') as conn:
            cur = conn.execute('UPDATE template_versions SET %s WHERE name = ? AND version = ?' % ', '.join(sets),
                               args + [name, int(version)])
            if cur.rowcount != 1:
                raise JournalError('Template %s has no version %s recorded; nothing was written.' % (name, version))
            self._append_event(conn, self.template_event_key(name), 'observed', 'version_' + (state or 'updated'),
                               dict(fields, version=version, state=state))
        return self.template_version(name, version)

    def switch_template(self, name, version, expected=ANY, claim=None, finish_build=False):
        """Point template ``name`` at ``version`` (a built one) in one transaction; ``expected`` is the version the
        caller read as current (compare-and-set: StaleGenerationError if it moved). With ``finish_build``, the
        version's own state goes from building to built in the same transaction. Returns the pointer."""
        now = time.time()
        with self.transaction(claim, point='template_switch') as conn:
            row = conn.execute('SELECT state FROM template_versions WHERE name = ? AND version = ?',
                               (name, int(version))).fetchone()
            wanted = 'building' if finish_build else 'built'
            if row is None or row[0] != wanted:
                raise JournalError('Template %s version %s is %s, not %s: the pointer was not switched.'
                                   % (name, version, row[0] if row else 'not recorded', wanted))
            if finish_build:
                conn.execute("UPDATE template_versions SET state = 'built', finished_at = ? WHERE name = ? AND version = ?",
                             (now, name, int(version)))
            pointer = conn.execute('SELECT current, generation FROM templates WHERE name = ?', (name,)).fetchone()
            current = pointer[0] if pointer else None
            if expected is not ANY and current != expected:
                raise StaleGenerationError('Template %s points at version %s now, not %s: another run switched it. '
                                           'Nothing was written; read it again.' % (name, current, expected))
            if pointer is None:
                conn.execute('INSERT INTO templates (name, current, previous, updated_at, generation) '
                             'VALUES (?, ?, NULL, ?, 1)', (name, int(version), now))
            else:
                conn.execute('UPDATE templates SET previous = current, current = ?, updated_at = ?, '
                             'generation = generation + 1 WHERE name = ?', (int(version), now, name))
            self._append_event(conn, self.template_event_key(name), 'recorded', 'switched',
                               {'from': current, 'to': int(version)}, now)
        return self.template(name)

    def template_events_of(self, name, limit=None):
        return self.events(self.template_event_key(name), limit)


def claim_parts(claim):
    """``(entry_id, fence)`` of a claim: the dict ``{'entry_id': ..., 'fence': ...}`` that a queued run holds."""
    try:
        entry_id, fence = int(claim['entry_id']), str(claim['fence'])
    except (KeyError, TypeError, ValueError):
        raise JournalError('A claim is the dict {entry_id, fence} that ephemera.workspaces.operation returned as '
                           '"claim" when it gave this run its turn; got %r.' % (claim,))
    if not fence:
        raise JournalError('The claim of operation #%d has an empty fence; pass the claim unchanged.' % entry_id)
    return entry_id, fence


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
