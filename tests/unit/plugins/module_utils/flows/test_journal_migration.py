"""A journal of schema 1 (data/journal-v1, written by the collection before the provider-neutral fields; see
make_v1_journal.py) migrates forward in one transaction, keeps what its records meant, and every workspace in
it can still be destroyed against the cluster it describes (data/journal-v1/cluster.json, put back into an
in-process fakepve)."""

import json
import os
import shutil
import sqlite3

import pytest

from ansible_collections.ephemera.workspaces.plugins.module_utils.core import journal as journal_mod
from ansible_collections.ephemera.workspaces.plugins.module_utils.core.errors import JournalError
from ansible_collections.ephemera.workspaces.plugins.module_utils.core.journal import Journal
from ansible_collections.ephemera.workspaces.plugins.module_utils.core.queue import Queue
from ansible_collections.ephemera.workspaces.plugins.module_utils.flows.destroy import DestroyFlow
from ansible_collections.ephemera.workspaces.plugins.module_utils.flows.reconcile import Reconciler
from ansible_collections.ephemera.workspaces.plugins.module_utils.providers.proxmox.client import PveClient
from ansible_collections.ephemera.workspaces.plugins.module_utils.providers.proxmox.provider import ProxmoxProvider

DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), 'data', 'journal-v1')
NAMES = ['fx-candidate', 'fx-failed', 'fx-gone', 'fx-mid', 'fx-ready']
DESTROY_STEPS = ('mark', 'shutdown', 'stop', 'delete', 'finish')


@pytest.fixture
def v1(tmp_path):
    """A copy of the schema-1 journal (and its controller secret); its path."""
    for name in ('journal.sqlite', 'journal.sqlite.secret'):
        shutil.copy(os.path.join(DATA, name), str(tmp_path / name))
    return str(tmp_path / 'journal.sqlite')


def raw(path, sql):
    conn = sqlite3.connect(path)
    conn.row_factory = sqlite3.Row
    try:
        return [dict(row) for row in conn.execute(sql)]
    finally:
        conn.close()


def columns(path):
    return [row['name'] for row in raw(path, 'PRAGMA table_info(workspaces)')]


def snapshot(path):
    """What a migration must keep: every table but the workspaces, whole."""
    tables = ('events', 'cleanup_debt', 'address_leases', 'queue', 'queue_requests', 'idempotency', 'meta', 'intents')
    return {t: raw(path, 'SELECT * FROM %s ORDER BY rowid' % t) for t in tables}


def test_the_fixture_is_a_journal_of_schema_1(v1):
    assert raw(v1, 'PRAGMA user_version')[0]['user_version'] == 1
    assert {'vmid', 'candidate_vmid', 'node', 'upids'} <= set(columns(v1))
    assert sorted(r['name'] for r in raw(v1, 'SELECT name FROM workspaces')) == NAMES


def test_a_schema_1_journal_migrates_to_provider_neutral_fields_keeping_their_meaning(v1):
    before = {r['name']: r for r in raw(v1, 'SELECT * FROM workspaces')}
    kept = snapshot(v1)
    with Journal.open(v1) as journal:
        assert journal.schema_version == journal_mod.SCHEMA_VERSION == 5
        records = {ws['name']: ws for ws in journal.list_workspaces()}
        entries = Queue(journal).entries(target_type='workspace', recent=10)
    assert sorted(records) == NAMES
    for name, old in before.items():
        ws = records[name]
        assert ws['provider'] == 'proxmox'
        assert (ws['resource_id'], ws['candidate_id'], ws['location']) == \
            (old['vmid'], old['candidate_vmid'], old['node'])
        assert ws['provider_tasks'] == json.loads(old['upids'])
        # The former names stay readable, with the same values.
        assert (ws['vmid'], ws['candidate_vmid'], ws['node'], ws['upids']) == (
            ws['resource_id'], ws['candidate_id'], ws['location'], ws['provider_tasks'])
        for same in ('status', 'activity', 'desired_state', 'address', 'generation', 'created_at'):
            assert ws[same] == (journal_mod.iso(old[same]) if same == 'created_at' else old[same])
    assert records['fx-ready']['resource_id'] == 100 and isinstance(records['fx-ready']['resource_id'], int)
    assert records['fx-mid']['resource_id'] is None and records['fx-mid']['candidate_id'] == 101
    assert sorted((e['kind'], e['target'], e['state']) for e in entries) == [
        ('create', 'fx-mid', 'running'), ('destroy', 'fx-gone', 'done')]
    assert snapshot(v1) == kept
    assert not {'vmid', 'candidate_vmid', 'node', 'upids'} & set(columns(v1))
    assert raw(v1, "SELECT name FROM sqlite_master WHERE name LIKE 'workspaces%' ORDER BY name") == [
        {'name': 'workspaces'}, {'name': 'workspaces_expiry'}, {'name': 'workspaces_resource'},
        {'name': 'workspaces_status'}]
    # Workspaces made before leases have none (they never expire by themselves) and no cleanup bookkeeping.
    assert all((ws['lease'], ws['lease_expires_at'], ws['cleanup']) == (None, None, {}) for ws in records.values())


def test_the_migrated_journal_takes_writes_by_either_name(v1):
    with Journal.open(v1) as journal:
        ws = journal.get_workspace('fx-candidate')
        ws = journal.update_workspace('fx-candidate', ws['generation'], candidate_vmid=110)
        assert ws['candidate_id'] == 110
        ws = journal.update_workspace('fx-candidate', ws['generation'], candidate_id='i-0abc', location='eu-1')
        assert (ws['candidate_id'], ws['node']) == ('i-0abc', 'eu-1')  # a cloud's id stays text
        with pytest.raises(JournalError, match='not both'):
            journal.update_workspace('fx-candidate', ws['generation'], vmid=1, resource_id=1)


def test_a_migration_that_fails_half_way_leaves_the_journal_as_it_was(v1, monkeypatch):
    workspaces = raw(v1, 'SELECT * FROM workspaces')
    kept = snapshot(v1)
    broken = journal_mod.MIGRATIONS[1] + '\n    INSERT INTO no_such_table VALUES (1);\n'
    monkeypatch.setattr(journal_mod, 'MIGRATIONS', journal_mod.MIGRATIONS[:1] + [broken] + journal_mod.MIGRATIONS[2:])
    with pytest.raises(JournalError, match='no_such_table'):
        Journal.open(v1)
    assert raw(v1, 'PRAGMA user_version')[0]['user_version'] == 1
    assert raw(v1, 'SELECT * FROM workspaces') == workspaces and snapshot(v1) == kept
    assert {'vmid', 'node'} <= set(columns(v1))
    assert raw(v1, "SELECT name FROM sqlite_master WHERE name = 'workspaces_2'") == []
    monkeypatch.undo()
    with Journal.open(v1) as journal:  # and the real migration still goes through afterwards
        assert journal.schema_version == journal_mod.SCHEMA_VERSION


def test_a_journal_of_a_newer_schema_is_refused_unchanged(v1):
    with Journal.open(v1):
        pass
    conn = sqlite3.connect(v1)
    conn.execute('PRAGMA user_version = %d' % (journal_mod.SCHEMA_VERSION + 1))
    conn.close()
    with open(v1, 'rb') as f:
        data = f.read()
    with pytest.raises(JournalError) as caught:
        Journal.open(v1)
    assert 'schema version %d, newer than this collection understands (%d)' % (
        journal_mod.SCHEMA_VERSION + 1, journal_mod.SCHEMA_VERSION) in str(caught.value)
    with open(v1, 'rb') as f:
        assert f.read() == data


def restore_cluster(fakepve, client):
    """Put the containers back as the fixture's cluster held them."""
    client.post('/pools', poolid='disposable-workspaces')
    with open(os.path.join(DATA, 'cluster.json')) as f:
        for ct in json.load(f):
            fakepve.add_ct(ct['vmid'], ct['name'], node=ct['node'], status=ct['status'], pool=ct['pool'],
                           template=ct['template'], config=ct['config'])


def test_every_workspace_of_a_migrated_journal_can_still_be_destroyed(v1, fakepve, fakepve_cafile):
    client = PveClient(fakepve.url, api_user='root@pam', api_password='secret', ca_file=fakepve_cafile)
    try:
        restore_cluster(fakepve, client)
        with open(v1 + '.secret', 'rb') as f:
            secret = f.read().strip()
        provider = ProxmoxProvider(client, secret)
        with Journal.open(v1) as journal:
            # Reconcile reads the migrated records as the old ones meant them.
            report = Reconciler(journal, provider, secret, {'pool': 'disposable-workspaces'}, check_mode=True).run()
            # (Its cleanup debt is reported once due, which depends on when the fixture was made.)
            found = sorted((f['kind'], f['workspace'], f['vmid']) for f in report['findings']
                           if not f['kind'].startswith('debt_'))
            assert found == [('adoptable', 'fx-mid', 101), ('failed', 'fx-failed', 102), ('ok', 'fx-ready', 100),
                             ('unfinished_create', 'fx-candidate', 103), ('unfinished_create', 'fx-mid', 101)]
            for name in NAMES:
                params = dict(name=name, shutdown_timeout=5, task_timeout=30, lock_timeout=2)
                for step in DESTROY_STEPS:
                    DestroyFlow(journal, provider, params, secret).run(step)
            records = journal.list_workspaces()
            assert [(ws['name'], ws['status']) for ws in records] == [(name, 'destroyed') for name in NAMES]
            assert journal.address_leases() == []
            assert [d['resource'] for d in journal.cleanup_debts()] == ['guest:git-askpass@lxc/100']
        assert sorted(ct.vmid for ct in fakepve.cts) == [9000]
    finally:
        client.close()
