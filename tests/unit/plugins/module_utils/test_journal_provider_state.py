"""The journal's provider state: JSON records under a key, compare-and-set on their generation, fenced by a claim, on
a SQLite file and a real PostgreSQL server alike (the ``store`` fixture), and the migration that adds them."""

import sqlite3

import pytest

from ansible_collections.ephemera.workspaces.plugins.module_utils.core import journal as journal_mod
from ansible_collections.ephemera.workspaces.plugins.module_utils.core.errors import (
    ClaimLostError,
    JournalError,
    StaleGenerationError,
)
from ansible_collections.ephemera.workspaces.plugins.module_utils.core.journal import Journal
from ansible_collections.ephemera.workspaces.plugins.module_utils.core.queue import Queue


@pytest.fixture
def journal(store):
    with store.open() as j:
        yield j


def rows(store):
    return sorted(tuple(str(v) for v in row[:3]) for row in store.raw('SELECT key, value, generation FROM provider_state'))


def test_a_record_is_made_once_then_compared_and_set(journal, store):
    assert journal.provider_state('azure/set/ws1-0001') is None
    assert journal.put_provider_state('azure/set/ws1-0001', {'plan': {'base': 'ws1-0001'}, 'ids': {}}) == 1
    assert journal.provider_state('azure/set/ws1-0001') == ({'plan': {'base': 'ws1-0001'}, 'ids': {}}, 1)
    before = rows(store)
    with pytest.raises(StaleGenerationError, match='recorded already'):
        journal.put_provider_state('azure/set/ws1-0001', {'plan': 'another'})
    assert rows(store) == before
    assert journal.put_provider_state('azure/set/ws1-0001', {'ids': {'pip': '/x/pip'}}, generation=1) == 2
    with pytest.raises(StaleGenerationError, match='expected generation 1, found 2'):
        journal.put_provider_state('azure/set/ws1-0001', {'ids': {}}, generation=1)
    assert journal.provider_state('azure/set/ws1-0001') == ({'ids': {'pip': '/x/pip'}}, 2)
    with pytest.raises(StaleGenerationError, match='not recorded'):
        journal.put_provider_state('azure/set/other', {'a': 1}, generation=3)
    assert journal.provider_state('azure/set/other') is None


def test_a_record_is_deleted_only_at_its_generation(journal, store):
    journal.put_provider_state('k1', {'a': 1})
    before = rows(store)
    with pytest.raises(StaleGenerationError, match='expected generation 2, found 1'):
        journal.delete_provider_state('k1', 2)
    assert rows(store) == before
    journal.delete_provider_state('k1', 1)
    assert journal.provider_state('k1') is None
    with pytest.raises(StaleGenerationError, match='not recorded'):
        journal.delete_provider_state('k1', 1)


def test_records_are_listed_by_exact_prefix(journal):
    for key in ('azure/set/b', 'azure/set/a', 'azure/sweep/x', 'Azure/set/c', 'azure/set_z', 'gcp/set/a'):
        journal.put_provider_state(key, {'key': key})
    assert journal.provider_states('azure/set/') == [
        ('azure/set/a', {'key': 'azure/set/a'}, 1), ('azure/set/b', {'key': 'azure/set/b'}, 1)]
    # LIKE's wildcards in a prefix are plain characters.
    assert [k for k, v, g in journal.provider_states('azure/set_')] == ['azure/set_z']
    assert [k for k, v, g in journal.provider_states('azure/%')] == []
    assert len(journal.provider_states()) == 6


def test_bad_values_and_keys_are_refused_and_secrets_never_stored(journal, store):
    for bad in ([1, 2], 'text', None):
        with pytest.raises(JournalError, match='must be a JSON object'):
            journal.put_provider_state('k', bad)
    with pytest.raises(JournalError, match='is not JSON'):
        journal.put_provider_state('k', {'when': object()})
    for key in ('', None, 'x' * 401):
        with pytest.raises(JournalError, match='non-empty string'):
            journal.put_provider_state(key, {'a': 1})
    assert rows(store) == []
    journal.put_provider_state('k', {'client_secret': 'hunter2-hunter2', 'ids': {'vm': '/v'}})
    assert journal.provider_state('k')[0] == {'client_secret': '********', 'ids': {'vm': '/v'}}
    assert b'hunter2' not in store.blob()


def test_writes_are_fenced_by_the_claim(journal, store):
    journal.create_workspace('ws1')
    queue = Queue(journal)
    claim = queue.poll(queue.enqueue('create', 'ws1').request_id).claim
    assert journal.put_provider_state('azure/set/ws1-1', {'ids': {}}, claim=claim) == 1
    assert journal.put_provider_state('azure/set/ws1-1', {'ids': {'pip': 'p'}}, generation=1, claim=claim) == 2
    queue.cancel(claim['entry_id'], reason='operator stop', force=True)
    before = rows(store)
    for write in (lambda: journal.put_provider_state('azure/set/ws1-1', {'ids': {}}, generation=2, claim=claim),
                  lambda: journal.put_provider_state('azure/set/ws1-2', {'ids': {}}, claim=claim),
                  lambda: journal.delete_provider_state('azure/set/ws1-1', 2, claim=claim)):
        with pytest.raises(ClaimLostError, match='no longer holds the claim'):
            write()
        assert rows(store) == before


def test_a_schema_4_journal_is_read_without_provider_state_and_migrated_by_a_writer(store):
    # Schema 4 is schema 5 without the provider state (migration 5 only adds it).
    with store.open() as j:
        j.create_workspace('ws1', repo='file:///r')
    store.raw('DROP TABLE provider_state')
    store.set_schema_version(4)
    if store.backend == 'sqlite':
        with store.open(readonly=True) as reader:
            assert reader.schema_version == 4
            assert reader.provider_state('azure/set/x') is None and reader.provider_states('azure/') == []
    with store.open() as writer:
        assert writer.schema_version == journal_mod.SCHEMA_VERSION == 5
        assert writer.get_workspace('ws1')['repo'] == 'file:///r'
        assert writer.put_provider_state('azure/set/x', {'a': 1}) == 1
    with store.open(readonly=True) as reader:
        assert reader.provider_state('azure/set/x') == ({'a': 1}, 1)
        with pytest.raises(JournalError, match='read-only'):
            reader.put_provider_state('azure/set/y', {'a': 1})


def test_a_killed_writer_leaves_no_half_record(path):
    with Journal.open(path) as j:
        j.put_provider_state('k', {'a': 1})
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute('BEGIN IMMEDIATE')
    conn.execute("UPDATE provider_state SET value = '{\"a\": 2}', generation = 2 WHERE key = 'k'")
    conn.close()  # gone without COMMIT, as a killed process would be
    with Journal.open(path) as j:
        assert j.provider_state('k') == ({'a': 1}, 1)
