"""The journal's template pointers and versions (schema 4) on both journals: SQLite files and PostgreSQL databases."""

import sqlite3

import pytest

from ansible_collections.ephemera.workspaces.plugins.module_utils.core import journal as journal_mod
from ansible_collections.ephemera.workspaces.plugins.module_utils.core.errors import JournalError, StaleGenerationError
from ansible_collections.ephemera.workspaces.plugins.module_utils.core.journal import Journal


def started(journal, name='workspace', source=None):
    return journal.begin_template_version(name, source or {'vmid': 9000, 'node': 'pve1'},
                                          lambda v: 'tb-%s-v%d' % (name, v))


@pytest.fixture
def journal(store):
    """The template records on both journals (SQLite, PostgreSQL); the schema-3 reader test below is SQLite's."""
    with store.open() as j:
        yield j


def test_versions_count_up_and_the_pointer_moves_only_to_a_finished_build(journal):
    first = started(journal)
    assert (first['version'], first['state'], first['workspace']) == (1, 'building', 'tb-workspace-v1')
    assert journal.template('workspace') is None
    pointer = journal.switch_template('workspace', 1, finish_build=True)
    assert (pointer['current'], pointer['previous']) == (1, None)
    assert journal.template_version('workspace', 1)['state'] == 'built'
    second = started(journal)
    journal.update_template_version('workspace', 2, state='failed', errors=['apt-get: no such package'])
    with pytest.raises(JournalError, match='version 2 is failed, not building'):
        journal.switch_template('workspace', 2, finish_build=True)
    assert journal.template('workspace')['current'] == 1
    assert second['version'] == 2 and started(journal)['version'] == 3
    assert [v['state'] for v in journal.template_versions('workspace')] == ['built', 'failed', 'building']
    assert [e['action'] for e in journal.template_events_of('workspace')] == [
        'build_started', 'switched', 'build_started', 'version_failed', 'build_started']


def test_a_switch_back_is_a_compare_and_set_on_the_current_version(journal):
    for dummy in (1, 2):
        version = started(journal)
        journal.switch_template('workspace', version['version'], finish_build=True)
    with pytest.raises(StaleGenerationError, match='points at version 2 now, not 1'):
        journal.switch_template('workspace', 1, expected=1)
    pointer = journal.switch_template('workspace', 1, expected=2)
    assert (pointer['current'], pointer['previous'], pointer['generation']) == (1, 2, 3)
    with pytest.raises(JournalError, match='version 7 is not recorded'):
        journal.switch_template('workspace', 7)


def test_a_failed_write_changes_nothing(journal):
    started(journal)
    with pytest.raises(JournalError, match='Unknown template version state'):
        journal.update_template_version('workspace', 1, state='half-built')
    with pytest.raises(JournalError, match='Unknown template version field'):
        journal.update_template_version('workspace', 1, pointer=3)
    assert journal.template_version('workspace', 1)['state'] == 'building'


def test_a_reader_of_a_schema_3_journal_sees_no_templates(path):
    with Journal.open(path):
        pass
    conn = sqlite3.connect(path)
    conn.execute('DROP TABLE templates')
    conn.execute('DROP TABLE template_versions')
    conn.execute('DROP TABLE provider_state')
    conn.execute('PRAGMA user_version = 3')
    conn.commit()
    conn.close()
    with Journal.open(path, readonly=True) as reader:
        assert reader.schema_version == 3
        assert reader.templates() == [] and reader.template_versions() == []
    with Journal.open(path) as writer:
        assert writer.schema_version == journal_mod.SCHEMA_VERSION == 5
        assert writer.templates() == []
