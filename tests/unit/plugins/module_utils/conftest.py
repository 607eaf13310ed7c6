"""Fixtures of the module_utils tests: a journal file in the test's own directory; ``store``, where a journal lives
on each backend (a SQLite file, a fresh database of the session's PostgreSQL server), for tests run on both."""

import os
import sqlite3

import pytest

from ansible_collections.ephemera.workspaces.plugins.module_utils.core.journal import Journal
from tests import pgserver, runs


@pytest.fixture
def path(tmp_path):
    return str(tmp_path / 'journal.sqlite')


@pytest.fixture
def journal(path):
    with Journal.open(path) as j:
        yield j


# One PostgreSQL server for the session, started only by the tests that ask for it (the journal on PostgreSQL).
pg_server = pgserver.pg_server


class SqliteStore:
    """Where a journal lives: a SQLite file in the test's directory."""

    backend = 'sqlite'

    def __init__(self, path):
        self.path = path

    def open(self, **kwargs):
        return Journal.open(self.path, **kwargs)

    def raw(self, sql):
        """Run ``sql`` past the journal, as another program could; raises the database's error."""
        conn = sqlite3.connect(self.path, isolation_level=None)
        try:
            return conn.execute(sql).fetchall()
        finally:
            conn.close()

    def set_schema_version(self, version):
        """Say the journal is of schema ``version`` (a test that made it so, table by table)."""
        self.raw('PRAGMA user_version = %d' % version)

    def blob(self):
        """Everything stored, as bytes (every file of the directory)."""
        data = b''
        for name in os.listdir(os.path.dirname(self.path)):
            with open(os.path.join(os.path.dirname(self.path), name), 'rb') as f:
                data += f.read()
        return data

    def check_integrity(self, journal):
        assert journal._conn.execute('PRAGMA integrity_check').fetchone()[0] == 'ok'


class PgStore:
    """Where a journal lives: a fresh database of the session's PostgreSQL server."""

    backend = 'postgresql'
    count = 0

    def __init__(self, server):
        PgStore.count += 1
        self.server = server
        self.database = 'journal_%d_%d' % (os.getpid(), PgStore.count)
        self.url = server.new_database(self.database)

    def open(self, **kwargs):
        return Journal.open(url=self.url, **kwargs)

    def raw(self, sql):
        import psycopg
        with psycopg.connect(self.url, autocommit=True) as conn:
            cur = conn.execute(sql)
            return cur.fetchall() if cur.description else []

    def set_schema_version(self, version):
        self.raw("UPDATE meta SET value = '%d' WHERE key = 'schema_version'" % version)

    def blob(self):
        data = b''
        for (table,) in self.raw("SELECT table_name FROM information_schema.tables WHERE table_schema = 'public'"):
            for (row,) in self.raw('SELECT t::text FROM %s t' % table):
                data += row.encode() + b'\n'
        return data

    def check_integrity(self, journal):
        # PostgreSQL has no file to check: no transaction of a killed writer is left open, none holds a lock.
        rows = self.raw("SELECT count(*) FROM pg_stat_activity WHERE datname = '%s' AND state LIKE 'idle in transaction%%'"
                        % self.database)
        assert rows == [(0,)]


@pytest.fixture(params=['sqlite', 'postgresql'])
def store(request, path):
    if request.param == 'sqlite':
        return SqliteStore(path)
    return PgStore(request.getfixturevalue('pg_server'))


@pytest.fixture
def pg_store(pg_server):
    """A fresh database of the session's PostgreSQL server (for tests of that backend only)."""
    return PgStore(pg_server)


@pytest.fixture
def processes():
    """Start a process that stands for an ansible-playbook run (it sleeps); every one is killed after the test."""
    started = runs.Processes()
    yield started.start
    started.kill_all()
