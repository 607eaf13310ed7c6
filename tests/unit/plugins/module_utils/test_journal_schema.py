"""The journal's schema is written once (core/journal_schema.py): a new journal is made from it on SQLite and on
PostgreSQL, and a journal an older release wrote, migrated, ends with the same tables, columns, keys, indexes and
guards as a new one."""

import os
import shutil
import sqlite3

import pytest

from ansible_collections.ephemera.workspaces.plugins.module_utils.core import journal as journal_mod
from ansible_collections.ephemera.workspaces.plugins.module_utils.core import journal_schema
from ansible_collections.ephemera.workspaces.plugins.module_utils.core.journal import Journal

V1 = os.path.join(os.path.dirname(os.path.abspath(__file__)), 'flows', 'data', 'journal-v1')


def sqlite_schema(path):
    """{table: (columns as (name, declared type, not null, default, key position), indexes as (name, unique,
    columns), triggers)} of the SQLite journal at ``path``, as SQLite describes it."""
    conn = sqlite3.connect(path)
    try:
        tables = [row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT "
                                                 "LIKE 'sqlite_%' ORDER BY name")]
        found = {}
        for table in tables:
            columns = tuple(row[1:] for row in conn.execute('PRAGMA table_info(%s)' % table))
            indexes = tuple(sorted(
                (name, unique, tuple(col[2] for col in conn.execute('PRAGMA index_info(%s)' % name)))
                for _seq, name, unique, origin, _partial in conn.execute('PRAGMA index_list(%s)' % table)
                if origin == 'c'))
            triggers = tuple(sorted(row[0] for row in conn.execute(
                "SELECT name FROM sqlite_master WHERE type = 'trigger' AND tbl_name = ?", (table,))))
            found[table] = (columns, indexes, triggers)
        return found
    finally:
        conn.close()


def test_a_new_sqlite_journal_is_made_from_the_schema_at_its_version(path):
    with Journal.open(path) as journal:
        assert journal.schema_version == journal_schema.VERSION == journal_mod.SCHEMA_VERSION
    made = sqlite_schema(path)
    assert sorted(made) == sorted(journal_schema.TABLE_NAMES)
    for table in journal_schema.TABLE_NAMES:
        assert [column[0] for column in made[table][0]] == [name for name, _kind in journal_schema.columns(table)]
    # A TYPED column has no affinity: a VMID stays an integer, a cloud's id text.
    types = {column[0]: column[1] for column in made['workspaces'][0]}
    assert types['resource_id'] == types['candidate_id'] == ''
    assert made['events'][2] == ('events_append_only_delete', 'events_append_only_update')


def test_a_schema_1_journal_migrated_has_the_schema_a_new_journal_is_made_with(tmp_path, path):
    old = str(tmp_path / 'old' / 'journal.sqlite')
    os.makedirs(os.path.dirname(old))
    for name in ('journal.sqlite', 'journal.sqlite.secret'):
        shutil.copy(os.path.join(V1, name), os.path.join(os.path.dirname(old), name))
    with Journal.open(old) as journal:
        assert journal.schema_version == journal_schema.VERSION
    with Journal.open(path):
        pass
    assert sqlite_schema(old) == sqlite_schema(path)


def test_every_journal_type_has_a_rendering_on_each_store_and_an_unknown_store_is_refused():
    kinds = set(kind for table in journal_schema.TABLE_NAMES for _name, kind in journal_schema.columns(table))
    assert kinds == set(journal_schema.TYPES['sqlite']) == set(journal_schema.TYPES['postgresql'])
    # Every line of every table is a column or a table constraint: nothing is dropped by the renderer.
    for table, body in journal_schema.TABLES:
        lines = [line.strip() for line in body.split(',\n')]
        assert len(lines) == len(journal_schema.columns(table)) + sum(line.startswith('PRIMARY KEY (') for line in lines)
    with pytest.raises(ValueError, match="No journal store speaks 'mysql'; the dialects are sqlite, postgresql"):
        journal_schema.statements('mysql')


def pg_schema(store):
    """{table: (columns as (name, nullable, is a key column), indexes as (name, definition), triggers)} of the
    journal in ``store``'s database, as PostgreSQL describes it."""
    found = {}
    for (table,) in store.raw("SELECT table_name FROM information_schema.tables WHERE table_schema = 'public' "
                              "ORDER BY table_name"):
        keys = set(row[0] for row in store.raw(
            "SELECT a.attname FROM pg_index i JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = "
            "ANY(i.indkey) WHERE i.indrelid = 'public.%s'::regclass AND i.indisprimary" % table))
        columns = tuple((name, nullable == 'YES', name in keys) for name, nullable in store.raw(
            "SELECT column_name, is_nullable FROM information_schema.columns WHERE table_schema = 'public' AND "
            "table_name = '%s' ORDER BY ordinal_position" % table))
        indexes = tuple(sorted(store.raw("SELECT indexname, indexdef FROM pg_indexes WHERE schemaname = 'public' AND "
                                         "tablename = '%s' AND indexname NOT LIKE '%%_pkey'" % table)))
        triggers = tuple(sorted(row[0] for row in store.raw(
            "SELECT tgname FROM pg_trigger WHERE tgrelid = 'public.%s'::regclass AND NOT tgisinternal" % table)))
        found[table] = (columns, indexes, triggers)
    return found


def test_a_new_postgresql_journal_has_the_tables_columns_keys_and_indexes_of_a_new_sqlite_one(pg_store, path):
    with pg_store.open() as journal:
        assert journal.schema_version == journal_schema.VERSION
    with Journal.open(path):
        pass
    pg, lite = pg_schema(pg_store), sqlite_schema(path)
    assert sorted(pg) == sorted(lite) == sorted(journal_schema.TABLE_NAMES)
    for table in journal_schema.TABLE_NAMES:
        # SQLite's not null (column[2]) and key position (column[4]) against PostgreSQL's nullable and key columns
        # (a key column is never null on PostgreSQL; the journal never writes a null key on SQLite).
        assert pg[table][0] == tuple((c[0], not c[2] and not c[4], c[4] > 0) for c in lite[table][0]), table
        assert [name for name, _definition in pg[table][1]] == [name for name, _unique, _cols in lite[table][1]], table
    assert pg['events'][2] == ('events_append_only_rows', 'events_append_only_truncate')


def test_a_postgresql_journal_of_schema_4_migrated_has_the_schema_a_new_one_is_made_with(pg_store, pg_server):
    with pg_store.open() as journal:
        journal.create_workspace('ws1', repo='file:///r')
    new = pg_schema(pg_store)
    # Schema 4 is schema 5 without the provider state (migration 5 only adds it).
    pg_store.raw('DROP TABLE provider_state')
    pg_store.set_schema_version(4)
    with pg_store.open() as journal:
        assert journal.schema_version == journal_schema.VERSION
        assert journal.get_workspace('ws1')['repo'] == 'file:///r'
    assert pg_schema(pg_store) == new
