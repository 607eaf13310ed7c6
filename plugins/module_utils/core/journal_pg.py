# -*- coding: utf-8 -*-
# Copyright: ephemera.workspaces contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The journal on PostgreSQL: the same records and guarantees as the SQLite file, for controllers that share it.

Selected by a ``postgresql://`` URL (``journal_url``, env ``EPHEMERA_JOURNAL_URL``). ``psycopg`` (v3) is needed
only here and imported only when such a journal is opened.

- Credentials come from the URL, libpq's password file (``passfile=`` in the URL, ``PGPASSFILE``, ``~/.pgpass``)
  or the standard ``PG*`` environment variables (``PGPASSWORD``, ``PGUSER``, ...); TLS settings (``sslmode``,
  ``sslrootcert``, ``sslcert``, ``sslkey``, ...) in the URL or the environment are passed to libpq unchanged. The
  journal never shows a secret: its ``path`` (what every message names) is the URL without the password and
  without any query parameter that holds a secret (``password``, ``sslpassword``, ...), and a driver's error is
  shown with those values masked.
- Schema: the same version number as the SQLite journal, kept in ``meta`` (``schema_version``). Migrations are
  append-only; all the steps of one open run in one transaction under an advisory lock, so two controllers that
  open a new database at once make it once. A newer schema is refused unchanged; so is a database (schema) that
  holds another application's tables.
- Concurrency: every write is a transaction. A write that reads before it decides (the queue's turns, address
  leases, idempotency, templates, migrations) takes the journal's write lock (a transaction-scoped advisory lock,
  the counterpart of SQLite's ``BEGIN IMMEDIATE``); the compare-and-set of a workspace's ``generation`` and the
  claim check are single ``UPDATE``s that take row locks, so runs on different workspaces do not wait for each
  other. A controller killed mid-transaction leaves nothing: the server rolls back when its connection drops.

The journal's SQL is written once (SQLite's dialect with ``?`` placeholders); :class:`PgConnection` runs it on
PostgreSQL with the few translations it needs.
"""

import json
import re
import sqlite3
from urllib.parse import parse_qsl, quote, unquote, urlsplit, urlunsplit

from ansible_collections.ephemera.workspaces.plugins.module_utils.core import journal_schema
from ansible_collections.ephemera.workspaces.plugins.module_utils.core.errors import JournalError, JournalMissing

URL_ENV_VAR = 'EPHEMERA_JOURNAL_URL'
SCHEMES = ('postgresql', 'postgres')
CONNECT_TIMEOUT = 10
# pg_advisory_xact_lock keys: the journal's write lock, and the lock a migration holds.
WRITE_LOCK = 0x657068656d657261
MIGRATE_LOCK = WRITE_LOCK + 1
# Tables whose rows have an ``id`` the code reads back after an INSERT (SQLite's lastrowid).
ID_TABLES = ('events', 'intents', 'queue', 'queue_requests')
# Columns whose values keep their type (an integer VMID, a cloud's text id): stored as JSON text here.
TYPED_COLUMNS = ('resource_id', 'candidate_id')
# libpq's connection parameters that carry a secret themselves (``password``, ``sslpassword``: the pass phrase of
# the client key, ``oauth_client_secret``), and any other whose name says it holds one. Parameters that name a file
# (``passfile``, ``sslkey``, ``sslcert``, ``sslrootcert``) are shown: the file is what a reader needs to check.
QUERY_SECRETS = ('password', 'sslpassword', 'oauth_client_secret')
_SECRET_NAME = re.compile(r'pass(?:word|phrase)|secret|token|credential', re.I)

# Each entry: (from_version, to_version, script): how a journal made by an older release is brought forward.
# Append-only: a released entry is never edited; a later schema appends one (from, to) step. A new database is made
# at once at journal_schema.VERSION, from the schema both stores share.
MIGRATIONS = [
    # 5: the providers' own state (journal.py's migration 5): JSON records under a key, compare-and-set on generation.
    (4, 5, r"""
    CREATE TABLE provider_state (
        key             TEXT PRIMARY KEY,
        value           TEXT NOT NULL,
        generation      BIGINT NOT NULL,
        updated_at      DOUBLE PRECISION NOT NULL
    );
    """),
]
JOURNAL_TABLES = journal_schema.TABLE_NAMES


def is_url(location):
    return isinstance(location, str) and '://' in location


def check_url(url):
    """The URL if it names a PostgreSQL journal; JournalError (naming it without a password) if not."""
    parts = urlsplit(url)
    if parts.scheme.lower() not in SCHEMES:
        raise JournalError('The journal URL %s has the scheme %r; a journal URL is postgresql://[user@]host[:port]/'
                           'database (journal_url / %s). For the embedded SQLite journal give a file with '
                           'journal_path instead. Nothing was opened.'
                           % (display(url), parts.scheme, URL_ENV_VAR), url=display(url))
    if not parts.path.strip('/') and not dict(parse_qsl(parts.query)).get('dbname'):
        raise JournalError('The journal URL %s names no database: add it after the host (postgresql://user@host/'
                           'ephemera). Nothing was opened.' % display(url), url=display(url))
    return url


def is_secret_parameter(name):
    """True for a query parameter whose value is a secret (``password``, ``sslpassword``, any ``*secret*``...)."""
    name = name.strip().lower()
    return name in QUERY_SECRETS or bool(_SECRET_NAME.search(name))


def display(url):
    """The URL without its secrets (the password in the authority, every secret query parameter): what messages
    and results show."""
    try:
        parts = urlsplit(url)
        netloc = parts.netloc
        if '@' in netloc:
            login, host = netloc.rsplit('@', 1)
            netloc = login.split(':', 1)[0] + '@' + host
        query = '&'.join('%s=%s' % (key, quote(value, safe='/')) for key, value in parse_qsl(parts.query)
                         if not is_secret_parameter(key))
        return urlunsplit((parts.scheme, netloc, parts.path, query, ''))
    except ValueError:
        return '<a journal URL that cannot be parsed>'


def secrets_of(url):
    """Every secret the URL holds, as written and decoded: what no message may repeat."""
    found = set()
    try:
        parts = urlsplit(url)
        login = parts.netloc.rsplit('@', 1)[0] if '@' in parts.netloc else ''
        if ':' in login:
            found.add(login.split(':', 1)[1])
        for pair in parts.query.split('&'):
            key, _sep, value = pair.partition('=')
            if is_secret_parameter(unquote(key)):
                found.add(value)
    except ValueError:
        return [url]  # nothing can be told apart: the whole URL is kept out of the message
    found |= set(unquote(value) for value in found)
    return sorted((value for value in found if value), key=len, reverse=True)


def scrub(text, url):
    """The text with every secret of the URL replaced by ``***`` (a driver's error may quote part of the URL)."""
    for value in secrets_of(url):
        text = text.replace(value, '***')
    return text


def _where(url):
    parts = urlsplit(url)
    host = parts.hostname or dict(parse_qsl(parts.query)).get('host') or 'the default host'
    port = parts.port if parts.netloc and ':' in parts.netloc.rsplit('@', 1)[-1] else None
    return '%s%s, database %s' % (host, ':%d' % port if port else '', unquote(parts.path.strip('/')) or '(default)')


def _connect_error(url, exc):
    text = scrub(str(exc).strip(), url)
    low = text.lower()
    shown = display(url)
    if 'password authentication failed' in low or 'no password supplied' in low or \
            'authentication failed' in low or 'password is required' in low:
        return JournalError('PostgreSQL refused the credentials for the journal %s (%s). Check the user and the '
                            'password: in the URL, the password file (passfile= in the URL, PGPASSFILE or ~/.pgpass) '
                            'or PGPASSWORD. Nothing was written.' % (shown, _first_line(text)), url=shown,
                            reason='credentials')
    if 'does not exist' in low and 'database' in low:
        return JournalError('The database of the journal %s does not exist (%s). Create it (createdb, owned by the '
                            'journal\'s user) or fix the URL. Nothing was written.' % (shown, _first_line(text)),
                            url=shown, reason='no database')
    if 'ssl' in low or 'certificate' in low:
        return JournalError('The TLS connection to the journal %s failed (%s). Check sslmode, sslrootcert, sslcert and '
                            'sslkey in the URL or the PGSSL* variables. Nothing was written.' % (shown, _first_line(text)),
                            url=shown, reason='tls')
    return JournalError('Cannot reach the PostgreSQL journal at %s (%s): %s. Check the host and port in %s, that the '
                        'server runs and accepts connections from this controller. Nothing was written.'
                        % (_where(url), shown, _first_line(text), 'journal_url / ' + URL_ENV_VAR), url=shown,
                        reason='unreachable')


def _first_line(text):
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return '; '.join(lines[:2]) if lines else 'no reason given'


def connect(url, readonly=False):
    """A :class:`PgConnection` to the journal's database; JournalError with what to do if it cannot be made."""
    check_url(url)
    try:
        import psycopg
    except ImportError:
        raise JournalError('A journal on PostgreSQL (%s) needs the Python package psycopg (v3) on the controller: '
                           'pip install "psycopg[binary]". Nothing was opened.' % display(url), url=display(url))
    kwargs = {'autocommit': True}
    if 'connect_timeout' not in url:
        kwargs['connect_timeout'] = CONNECT_TIMEOUT
    try:
        raw = psycopg.connect(url, **kwargs)
    except psycopg.Error as exc:
        raise _connect_error(url, exc)
    except Exception as exc:  # a URL libpq cannot parse (psycopg raises ProgrammingError or ValueError)
        raise JournalError('The journal URL %s cannot be used: %s. Nothing was opened.'
                           % (display(url), scrub(str(exc), url)), url=display(url))
    conn = PgConnection(raw, display(url))
    try:
        if readonly:
            conn.execute('SET default_transaction_read_only = on')
    except BaseException:
        conn.close()
        raise
    return conn


# ------------------------------------------------------------------ SQL

_PLACEHOLDER = re.compile(r"'(?:[^']|'')*'|\?")
_IS_PARAM = re.compile(r'\bIS \?')
_INSERT_ID = re.compile(r'^\s*INSERT\s+INTO\s+(\w+)', re.I)
_INSERT_OR_IGNORE = re.compile(r'^\s*INSERT\s+OR\s+IGNORE\s+INTO', re.I)


def translate(sql):
    """SQLite's dialect, as the journal writes it, in PostgreSQL's: ``IS ?`` compares with NULL as equal, ``?``
    become ``%s`` (and a literal ``%`` is doubled) outside string literals, an INSERT into a table with an id
    returns it."""
    sql = _IS_PARAM.sub('IS NOT DISTINCT FROM ?', sql)
    if _INSERT_OR_IGNORE.match(sql):
        sql = _INSERT_OR_IGNORE.sub('INSERT INTO', sql).rstrip().rstrip(';') + ' ON CONFLICT DO NOTHING'
    sql = sql.replace('%', '%%')
    sql = _PLACEHOLDER.sub(lambda match: '%s' if match.group(0) == '?' else match.group(0), sql)
    match = _INSERT_ID.match(sql)
    returning = False
    if match and match.group(1).lower() in ID_TABLES and 'RETURNING' not in sql.upper():
        sql = sql.rstrip().rstrip(';') + ' RETURNING id'
        returning = True
    return sql, returning


def _decode_typed(value):
    if isinstance(value, str):
        try:
            return json.loads(value)
        except ValueError:
            return value
    return value


def encode_typed(value):
    """How a resource id is stored (JSON text: 5001 stays an integer, "i-0abc" text)."""
    return None if value is None else json.dumps(value)


class Row:
    """A row as sqlite3.Row gives it: by column name or index, ``keys()``."""

    __slots__ = ('_keys', '_values', '_index')

    def __init__(self, keys, values, index):
        self._keys = keys
        self._values = values
        self._index = index

    def keys(self):
        return list(self._keys)

    def __getitem__(self, key):
        if isinstance(key, (int, slice)):
            return self._values[key]
        return self._values[self._index[key]]

    def __iter__(self):
        return iter(self._values)

    def __len__(self):
        return len(self._values)

    def __repr__(self):
        return 'Row(%r)' % (dict(zip(self._keys, self._values)),)


class PgCursor:
    """What ``execute`` returns: rows as :class:`Row`, ``rowcount``, ``lastrowid`` (of an INSERT with an id)."""

    def __init__(self, cursor, returning):
        self._cursor = cursor
        self.rowcount = cursor.rowcount
        self.lastrowid = None
        self._keys = [column.name for column in cursor.description] if cursor.description else []
        self._index = {key: number for number, key in enumerate(self._keys)}
        self._typed = [number for number, key in enumerate(self._keys) if key in TYPED_COLUMNS]
        if returning:
            row = cursor.fetchone()
            self.lastrowid = row[0] if row else None
            self._keys = []

    def _row(self, values):
        if values is None:
            return None
        if self._typed:
            values = list(values)
            for number in self._typed:
                values[number] = _decode_typed(values[number])
        return Row(self._keys, tuple(values), self._index)

    def fetchone(self):
        if not self._keys:
            return None
        return self._row(self._cursor.fetchone())

    def fetchall(self):
        if not self._keys:
            return []
        return [self._row(values) for values in self._cursor.fetchall()]

    def __iter__(self):
        return iter(self.fetchall())


class _Empty:
    rowcount = -1
    lastrowid = None

    def fetchone(self):
        return None

    def fetchall(self):
        return []

    def __iter__(self):
        return iter(())


_EMPTY = _Empty()


class PgConnection:
    """A psycopg connection (autocommit: transactions are begun and ended by the journal) that runs the journal's
    SQL; errors come back as sqlite3's classes where the journal's code tells them apart (a unique key taken is an
    IntegrityError), others as JournalError naming the journal."""

    def __init__(self, raw, journal_path):
        self.raw = raw
        self.journal_path = journal_path

    def execute(self, sql, parameters=()):
        import psycopg
        verb = sql.strip().upper()
        if verb == 'BEGIN IMMEDIATE':  # a write that reads before it decides: under the journal's write lock
            self.begin(exclusive=True)
            return _EMPTY
        if verb == 'ROLLBACK':
            self.rollback()
            return _EMPTY
        text, returning = translate(sql)
        try:
            cursor = self.raw.execute(text, tuple(parameters))
        except psycopg.errors.IntegrityError as exc:
            raise sqlite3.IntegrityError(_first_line(str(exc)))
        except psycopg.OperationalError as exc:
            if verb == 'COMMIT':  # the connection broke after COMMIT was sent: the server may have committed
                raise JournalError('The PostgreSQL journal %s failed while committing: %s. The transaction may or may '
                                   'not have been written; the next run reads the journal again and goes on from '
                                   'what it holds.' % (self.journal_path, _first_line(str(exc))),
                                   path=self.journal_path, unknown_outcome=True)
            raise JournalError('The PostgreSQL journal %s failed: %s. Nothing of this transaction was written.'
                               % (self.journal_path, _first_line(str(exc))), path=self.journal_path)
        except psycopg.Error as exc:
            raise JournalError('The PostgreSQL journal %s refused a statement: %s. Nothing of this transaction was '
                               'written.' % (self.journal_path, _first_line(str(exc))), path=self.journal_path)
        return PgCursor(cursor, returning)

    def script(self, sql):
        """Several statements (a migration), no parameters."""
        self.raw.execute(sql)

    @property
    def in_transaction(self):
        from psycopg.pq import TransactionStatus
        return self.raw.info.transaction_status != TransactionStatus.IDLE

    def begin(self, exclusive=True):
        self.execute('BEGIN')
        if exclusive:
            self.execute('SELECT pg_advisory_xact_lock(?)', (WRITE_LOCK,))
        return _EMPTY

    def commit(self):
        self.execute('COMMIT')

    def rollback(self):
        if self.in_transaction:
            try:
                self.raw.execute('ROLLBACK')
            except Exception:  # the connection broke: the server rolled back already
                pass

    def close(self):
        try:
            self.raw.close()
        except Exception:
            pass


# ------------------------------------------------------------ schema

def _tables(conn):
    return [row[0] for row in conn.execute('SELECT table_name FROM information_schema.tables WHERE table_schema = '
                                           'current_schema() ORDER BY table_name').fetchall()]


# A journal's own answer in one round trip: the schema version in its meta table, with that table's columns (in the
# journal's schema) to tell it from another application's table of the same name. Opening a journal that is there is
# what every task does; the full look below is for the rest (no journal yet, another application's tables).
_KNOWN_VERSION = ("SELECT m.value, (SELECT string_agg(a.attname::text, ',' ORDER BY a.attname::text) "
                  "FROM pg_attribute a WHERE a.attrelid = to_regclass(quote_ident(current_schema()) || '.meta') "
                  "AND a.attnum > 0 AND NOT a.attisdropped) FROM meta m WHERE m.key = 'schema_version'")


def _known_version(conn):
    """The schema version of a journal that is there, asked in one statement; None when that does not tell (no meta
    table, another one's, no version in it). Only outside a transaction: a failed statement would end one."""
    if conn.in_transaction:
        return None
    try:
        row = conn.raw.execute(_KNOWN_VERSION).fetchone()
    except Exception:  # no meta table here (psycopg.errors.UndefinedTable): the full look says what there is
        return None
    if row is None or row[1] != 'key,value' or not str(row[0]).isdigit():
        return None
    return int(row[0])


def schema_version(conn):
    """The journal's schema version: 0 for an empty schema; None for one that holds another application's tables."""
    known = _known_version(conn)
    if known is not None:
        return known
    tables = _tables(conn)
    if not tables:
        return 0
    if 'meta' not in tables:
        return None
    columns = set(row[0] for row in conn.execute("SELECT column_name FROM information_schema.columns WHERE "
                                                 "table_schema = current_schema() AND table_name = 'meta'").fetchall())
    if columns != set(['key', 'value']):
        return None
    row = conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
    if row is None or not str(row[0]).isdigit():
        return None
    return int(row[0])


def _foreign(conn, path):
    tables = _tables(conn)
    shown = ', '.join(tables[:8]) + (' and %d more' % (len(tables) - 8) if len(tables) > 8 else '')
    return JournalError('The database of the journal %s holds tables that are not a journal\'s (%s): another '
                        'application uses it. Nothing was written. Give the journal a database of its own (createdb '
                        'ephemera), or a schema of its own in this one (CREATE SCHEMA ephemera, and options=-csearch_path'
                        '%%3Dephemera in the URL).' % (path, shown), path=path, tables=tables)


def _newer(path, version, ours):
    return JournalError('The journal %s has schema version %d, newer than this collection understands (%d). Use the '
                        'newer ephemera.workspaces that wrote it; nothing was changed.' % (path, version, ours),
                        path=path, schema=version)


def check_and_migrate(conn, path, target, create, first_meta=None):
    """Bring the journal to schema ``target`` (one transaction, under the migration lock), or refuse."""
    version = schema_version(conn)
    if version is None:
        raise _foreign(conn, path)
    if version > target:
        raise _newer(path, version, target)
    if version == target:
        return
    if version == 0 and not create:
        raise JournalMissing('No journal in %s: nothing has been recorded in this database yet. Check journal_url / '
                             '%s.' % (path, URL_ENV_VAR), path=path)
    conn.execute('BEGIN')
    try:
        conn.execute('SELECT pg_advisory_xact_lock(?)', (MIGRATE_LOCK,))
        # Read again under the lock: another controller may have made or migrated it meanwhile.
        version = schema_version(conn)
        if version is None:
            raise _foreign(conn, path)
        if version > target:
            raise _newer(path, version, target)
        made = version == 0
        if made:
            conn.script(';\n'.join(journal_schema.statements('postgresql')))
            version = journal_schema.VERSION
        for start, end, script in MIGRATIONS:
            if start == version and end <= target:
                conn.script(script)
                version = end
        if made:
            for key, value in sorted((first_meta or {}).items()):
                conn.execute('INSERT INTO meta (key, value) VALUES (?, ?)', (key, value))
        if version != target:
            raise JournalError('No migration of the journal %s leads from schema %d to %d.' % (path, version, target),
                               path=path)
        conn.execute("INSERT INTO meta (key, value) VALUES ('schema_version', ?) ON CONFLICT (key) DO UPDATE SET "
                     "value = excluded.value", (str(target),))
        conn.commit()
    except BaseException:
        conn.rollback()
        raise
    return True


def check_readable(conn, path, target):
    """A reader's check: the journal exists and is of a schema it reads (readers never migrate)."""
    version = schema_version(conn)
    if version is None:
        raise _foreign(conn, path)
    if version == 0:
        raise JournalMissing('No journal in %s: nothing has been recorded in this database yet. Check journal_url / '
                             '%s.' % (path, URL_ENV_VAR), path=path)
    if version > target:
        raise _newer(path, version, target)
    if version < target:
        raise JournalError('The journal %s has schema version %d; this collection reads version %d. Readers do not '
                           'migrate: run any command that writes to this journal once, which migrates it, then read '
                           'it again.' % (path, version, target), path=path, schema=version)
