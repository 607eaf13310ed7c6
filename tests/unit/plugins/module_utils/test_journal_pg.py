"""The journal on PostgreSQL: choosing it, credentials and TLS, and bad input (each refused with a clear message,
nothing written), against the session's real PostgreSQL server (tests/pgserver.py)."""

import multiprocessing
import os
import sys

import pytest

from ansible_collections.ephemera.workspaces.plugins.module_utils.core import journal as journal_mod
from ansible_collections.ephemera.workspaces.plugins.module_utils.core import journal_pg
from ansible_collections.ephemera.workspaces.plugins.module_utils.core.errors import JournalError, JournalMissing
from ansible_collections.ephemera.workspaces.plugins.module_utils.core.journal import Journal
from tests.pgserver import free_port

FORK = multiprocessing.get_context('fork')
COUNT = [0]


def fresh(pg_server):
    COUNT[0] += 1
    name = 'badinput_%d_%d' % (os.getpid(), COUNT[0])
    return name, pg_server.new_database(name)


def tables(pg_server, database):
    return pg_server.admin("SELECT table_name FROM information_schema.tables WHERE table_schema = 'public' "
                           "ORDER BY 1", database=database)


def contents(pg_server, database):
    """Every row of every table of the database, as text: what 'nothing written' compares."""
    rows = []
    for table in tables(pg_server, database):
        lines = pg_server.admin('SELECT t::text FROM %s t ORDER BY 1' % table, database=database)
        rows += ['%s: %s' % (table, line) for line in lines]
    return rows


def test_journal_url_from_the_environment_selects_postgresql(pg_server, monkeypatch, tmp_path):
    name, url = fresh(pg_server)
    monkeypatch.setenv('EPHEMERA_JOURNAL_URL', url)
    monkeypatch.setenv('EPHEMERA_JOURNAL', str(tmp_path / 'journal.sqlite'))
    with Journal.open() as j:
        assert j.backend == 'postgresql'
        j.create_workspace('ws1', resource_id=105, candidate_id='i-0abc')
    assert os.listdir(str(tmp_path)) == []  # no SQLite file, no secret beside it
    assert 'workspaces' in tables(pg_server, name)
    with Journal.open(url=url, readonly=True) as j:
        ws = j.get_workspace('ws1')
        assert (ws['resource_id'], ws['vmid'], ws['candidate_id']) == (105, 105, 'i-0abc')  # ids keep their type


def test_password_is_never_shown(pg_server):
    name, url = fresh(pg_server)
    with Journal.open(url=url) as j:
        assert pg_server.password not in j.path and j.path == pg_server.url_for(database=name, password=False)
        assert pg_server.password not in j.actor
        ws = j.create_workspace('ws1')
        with pytest.raises(JournalError) as err:
            j.create_workspace('ws1')
        assert pg_server.password not in str(err.value) and j.path in str(err.value)
        j.update_workspace('ws1', ws['generation'], status='provisioning', event={'action': 'x'})
    assert pg_server.password not in '\n'.join(contents(pg_server, name))
    assert journal_pg.display(url + '&password=x' if '?' in url else url + '?password=x&sslmode=require') == \
        pg_server.url_for(database=name, password=False) + '?sslmode=require'


def test_no_secret_query_parameter_is_ever_shown(pg_server):
    """sslpassword (the pass phrase of the client key) and any parameter named as a secret are masked like the
    password: in the journal's path and actor, its messages, its rows, and a driver's error that quotes the URL."""
    name, url = fresh(pg_server)
    # libpq takes sslpassword on any connection (it is used only to open an encrypted sslkey).
    secret_url = url + ('&' if '?' in url else '?') + 'sslpassword=Key-Phrase-9f3c&application_name=ephemera'
    with Journal.open(url=secret_url) as j:
        assert 'Key-Phrase-9f3c' not in j.path and 'Key-Phrase-9f3c' not in j.actor
        assert j.path == pg_server.url_for(database=name, password=False) + '?application_name=ephemera'
        j.create_workspace('ws1')
        with pytest.raises(JournalError) as err:
            j.create_workspace('ws1')
        assert 'Key-Phrase-9f3c' not in str(err.value) and j.path in str(err.value)
    assert 'Key-Phrase-9f3c' not in '\n'.join(contents(pg_server, name))
    assert journal_mod.resolve_location(url=secret_url) == j.path
    # Every secret of libpq's parameters, and any parameter whose name says it holds one; files are named.
    base = 'postgresql://ephemera:pw-1@db.example/ephemera?sslmode=verify-full'
    shown = journal_pg.display(base + '&sslpassword=s-2&oauth_client_secret=s-3&PassWord=s-4&ssl%70assword=s-5'
                               '&sslkey=/etc/ephemera/client.key&passfile=/etc/ephemera/pgpass')
    assert shown == ('postgresql://ephemera@db.example/ephemera?sslmode=verify-full'
                     '&sslkey=/etc/ephemera/client.key&passfile=/etc/ephemera/pgpass')
    # A value libpq cannot decode is quoted in its error: the message masks it.
    for bad in (url + ('&' if '?' in url else '?') + 'sslpassword=%zzKey-Phrase-9f3c',
                url.replace(':%s@' % pg_server.password, ':%%zz%s@' % pg_server.password)):
        with pytest.raises(JournalError) as err:
            Journal.open(url=bad)
        message = str(err.value)
        assert 'invalid percent-encoded token: "***"' in message and 'Nothing was' in message
        assert 'Key-Phrase-9f3c' not in message and pg_server.password not in message
        assert 'Key-Phrase-9f3c' not in str(err.value.details) and pg_server.password not in str(err.value.details)


@pytest.mark.parametrize('url', ['mysql://ephemera@127.0.0.1/ephemera', 'sqlite:///var/lib/ephemera/journal.sqlite',
                                 'http://127.0.0.1:5432/ephemera'])
def test_wrong_scheme_is_refused_before_connecting(url):
    with pytest.raises(JournalError) as err:
        Journal.open(url=url)
    message = str(err.value)
    assert 'a journal URL is postgresql://' in message and 'journal_path' in message and 'Nothing was opened' in message


def test_url_without_database_is_refused(pg_server):
    with pytest.raises(JournalError, match='names no database'):
        Journal.open(url='postgresql://ephemera@127.0.0.1:%d' % pg_server.port)


def test_unreachable_database_is_a_clear_error():
    port = free_port()
    with pytest.raises(JournalError) as err:
        Journal.open(url='postgresql://ephemera:s3cret-pw@127.0.0.1:%d/ephemera' % port)
    message = str(err.value)
    assert 'Cannot reach the PostgreSQL journal at 127.0.0.1:%d, database ephemera' % port in message
    assert 'Nothing was written' in message and 's3cret-pw' not in message
    assert err.value.details['reason'] == 'unreachable'


def test_wrong_credentials_are_refused_and_nothing_is_written(pg_server):
    name, url = fresh(pg_server)
    wrong = pg_server.url_for(database=name, password='not-the-password')
    with pytest.raises(JournalError) as err:
        Journal.open(url=wrong)
    message = str(err.value)
    assert 'refused the credentials' in message and 'PGPASSWORD' in message and 'passfile' in message
    assert 'not-the-password' not in message
    assert tables(pg_server, name) == []


def test_missing_database_is_named(pg_server):
    with pytest.raises(JournalError) as err:
        Journal.open(url=pg_server.url_for(database='no_such_database'))
    assert 'does not exist' in str(err.value) and 'createdb' in str(err.value)


def test_newer_schema_is_refused_and_left_unchanged(pg_server):
    name, url = fresh(pg_server)
    with Journal.open(url=url) as j:
        j.create_workspace('ws1')
    pg_server.admin("UPDATE meta SET value = '%d' WHERE key = 'schema_version'" % (journal_mod.SCHEMA_VERSION + 5),
                    database=name)
    before = contents(pg_server, name)
    for readonly in (False, True):
        with pytest.raises(JournalError) as err:
            Journal.open(url=url, readonly=readonly)
        assert 'schema version %d, newer than this collection understands (%d)' % (
            journal_mod.SCHEMA_VERSION + 5, journal_mod.SCHEMA_VERSION) in str(err.value)
    assert contents(pg_server, name) == before


def test_database_of_another_application_is_refused_and_left_unchanged(pg_server):
    name, url = fresh(pg_server)
    pg_server.admin('CREATE TABLE orders (id SERIAL PRIMARY KEY, item TEXT); INSERT INTO orders (item) VALUES (\'x\')',
                    database=name)
    pg_server.admin('GRANT ALL ON orders TO ephemera', database=name)
    for readonly in (False, True):
        with pytest.raises(JournalError) as err:
            Journal.open(url=url, readonly=readonly)
        message = str(err.value)
        assert 'holds tables that are not a journal\'s (orders)' in message and 'Nothing was written' in message
        assert 'CREATE SCHEMA' in message
    assert tables(pg_server, name) == ['orders']
    # Even a table called meta that is another application's is told apart.
    pg_server.admin('CREATE TABLE meta (name TEXT, setting TEXT); GRANT ALL ON meta TO ephemera', database=name)
    with pytest.raises(JournalError, match='not a journal'):
        Journal.open(url=url)
    assert tables(pg_server, name) == ['meta', 'orders']


def test_a_schema_of_its_own_in_a_shared_database(pg_server):
    name, url = fresh(pg_server)
    pg_server.admin('CREATE TABLE orders (id INTEGER); CREATE SCHEMA ephemera AUTHORIZATION ephemera', database=name)
    with Journal.open(url=url + '?options=-csearch_path%3Dephemera') as j:
        j.create_workspace('ws1')
    assert tables(pg_server, name) == ['orders']
    assert pg_server.admin("SELECT count(*) FROM information_schema.tables WHERE table_schema = 'ephemera'",
                           database=name) == [str(len(journal_pg.JOURNAL_TABLES))]


def test_reader_of_an_empty_database_makes_nothing(pg_server):
    name, url = fresh(pg_server)
    with pytest.raises(JournalMissing, match='No journal in'):
        Journal.open(url=url, readonly=True)
    assert tables(pg_server, name) == []


def test_reader_refuses_to_write(pg_server):
    name, url = fresh(pg_server)
    with Journal.open(url=url) as j:
        j.create_workspace('ws1')
    with Journal.open(url=url, readonly=True) as j:
        assert j.readonly and [w['name'] for w in j.list_workspaces()] == ['ws1']
        with pytest.raises(JournalError, match='opened read-only'):
            j.append_event('ws1', 'note', 'x')
        # Even past the journal's own check, the session refuses writes.
        with pytest.raises(JournalError, match='read-only transaction'):
            j._conn.execute("INSERT INTO meta (key, value) VALUES ('x', 'y')")


def test_password_file_and_pg_environment(pg_server, tmp_path, monkeypatch):
    name, url = fresh(pg_server)
    passfile = tmp_path / 'pgpass'
    passfile.write_text('127.0.0.1:%d:%s:ephemera:%s\n' % (pg_server.port, name, pg_server.password))
    os.chmod(str(passfile), 0o600)
    with Journal.open(url=pg_server.url_for(database=name, password=False, passfile=str(passfile))) as j:
        j.create_workspace('from-passfile')
    monkeypatch.setenv('PGPASSWORD', pg_server.password)
    with Journal.open(url=pg_server.url_for(database=name, password=False)) as j:
        j.create_workspace('from-pgpassword')
    monkeypatch.delenv('PGPASSWORD')
    monkeypatch.setenv('PGPASSFILE', str(passfile))
    monkeypatch.setenv('PGUSER', 'ephemera')
    with Journal.open(url='postgresql://127.0.0.1:%d/%s' % (pg_server.port, name)) as j:
        assert [w['name'] for w in j.list_workspaces()] == ['from-passfile', 'from-pgpassword']


def test_tls_options_reach_the_server(pg_server):
    # The test server speaks no TLS: sslmode=require must fail there, with a message about TLS; sslmode=disable works.
    name, url = fresh(pg_server)
    with pytest.raises(JournalError) as err:
        Journal.open(url=url + '?sslmode=require')
    assert 'TLS connection' in str(err.value) and 'sslrootcert' in str(err.value)
    assert tables(pg_server, name) == []
    with Journal.open(url=url + '?sslmode=disable') as j:
        assert j.backend == 'postgresql'


def test_without_psycopg_the_message_says_what_to_install(pg_server, monkeypatch):
    monkeypatch.setitem(sys.modules, 'psycopg', None)
    with pytest.raises(JournalError, match='needs the Python package psycopg'):
        Journal.open(url=pg_server.url)


def test_sqlite_journal_never_imports_psycopg(tmp_path):
    code = ('import sys\n'
            'from ansible_collections.ephemera.workspaces.plugins.module_utils.core.journal import Journal\n'
            'from ansible_collections.ephemera.workspaces.plugins.module_utils.core.queue import Queue\n'
            'with Journal.open(sys.argv[1]) as j:\n'
            '    j.create_workspace("ws1"); Queue(j).enqueue("destroy", "ws1")\n'
            'print(sorted(m for m in sys.modules if m.startswith("psycopg") or m.endswith("journal_pg")))\n')
    import subprocess
    env = dict(os.environ)
    env.pop('EPHEMERA_JOURNAL_URL', None)
    out = subprocess.run([sys.executable, '-c', code, str(tmp_path / 'j.sqlite')], capture_output=True, text=True,
                         env=env, check=True, cwd=os.path.dirname(os.path.dirname(os.path.abspath(journal_mod.__file__))))
    assert out.stdout.strip() == '[]'


def _open_and_record(url, name, out):
    with Journal.open(url=url) as j:
        j.create_workspace(name)
        out.put(j.controller_id)


def test_two_controllers_making_the_journal_at_once_make_it_once(pg_server):
    name, url = fresh(pg_server)
    out = FORK.Queue()
    procs = [FORK.Process(target=_open_and_record, args=(url, 'ws%d' % n, out)) for n in range(6)]
    for proc in procs:
        proc.start()
    for proc in procs:
        proc.join(60)
    assert [proc.exitcode for proc in procs] == [0] * 6
    controllers = set(out.get(timeout=5) for dummy in procs)
    assert len(controllers) == 1
    assert pg_server.admin("SELECT count(*) FROM meta WHERE key = 'controller_id'", database=name) == ['1']
    with Journal.open(url=url) as j:
        assert len(j.list_workspaces()) == 6 and j.schema_version == journal_mod.SCHEMA_VERSION


def test_the_journal_sql_is_translated_and_nothing_else():
    assert journal_pg.translate("SELECT id FROM queue WHERE parent_id IS ? AND state = 'queued?' AND x LIKE '5%'") == (
        "SELECT id FROM queue WHERE parent_id IS NOT DISTINCT FROM %s AND state = 'queued?' AND x LIKE '5%%'", False)
    assert journal_pg.translate('INSERT INTO queue (kind) VALUES (?)') == (
        'INSERT INTO queue (kind) VALUES (%s) RETURNING id', True)
    assert journal_pg.translate('INSERT INTO workspaces (name) VALUES (?)') == (
        'INSERT INTO workspaces (name) VALUES (%s)', False)
    assert journal_pg.translate('INSERT OR IGNORE INTO meta (key, value) VALUES (?, ?)') == (
        'INSERT INTO meta (key, value) VALUES (%s, %s) ON CONFLICT DO NOTHING', False)


def test_a_connection_lost_at_commit_is_an_unknown_outcome(pg_server):
    name, url = fresh(pg_server)
    with Journal.open(url=url) as j:
        j._conn.execute('BEGIN')
        pid = j._conn.execute('SELECT pg_backend_pid()').fetchone()[0]
        pg_server.admin('SELECT pg_terminate_backend(%d)' % pid)
        with pytest.raises(JournalError) as err:
            j._conn.execute('COMMIT')
        assert err.value.details['unknown_outcome'] and 'may or may not have been written' in str(err.value)
    with Journal.open(url=url) as j:
        j._conn.execute('BEGIN')
        pg_server.admin('SELECT pg_terminate_backend(%d)' % j._conn.execute('SELECT pg_backend_pid()').fetchone()[0])
        with pytest.raises(JournalError, match='failed: .*Nothing of this transaction was written'):
            j._conn.execute("INSERT INTO meta (key, value) VALUES ('x', 'y')")


class _Module:
    """What core/module.open_journal reads of a module: its params, check mode and fail_json."""

    def __init__(self, check_mode=False, **params):
        self.params = dict(journal_path=None, journal_url=None, new_journal=False)
        self.params.update(params)
        self.check_mode = check_mode

    def fail_json(self, **result):
        raise AssertionError(result)


def test_a_writer_starts_no_journal_in_a_database_unless_told(pg_server, tmp_path):
    from ansible_collections.ephemera.workspaces.plugins.module_utils.core.module import open_journal
    name, url = fresh(pg_server)
    # A create's writer on an empty database: refused, saying why and what to do, and nothing is written.
    with pytest.raises(AssertionError) as refused:
        open_journal(_Module(journal_url=url))
    message = refused.value.args[0]['msg']
    assert message.startswith('No journal in %s, and a run does not start one in a database'
                              % pg_server.url_for(database=name, password=False)), message
    assert '-e ephemera_new_journal=true' in message and pg_server.password not in message
    assert tables(pg_server, name) == []
    # Check mode reports as on a first run; new_journal starts it.
    assert open_journal(_Module(check_mode=True, journal_url=url)) is None
    with open_journal(_Module(journal_url=url, new_journal=True)) as journal:
        assert journal.backend == 'postgresql'
    assert 'workspaces' in tables(pg_server, name)
    with open_journal(_Module(journal_url=url)) as journal:
        assert journal.backend == 'postgresql'
    # A file is still started where the controller was told (the first run of a create on SQLite).
    path = str(tmp_path / 'journal.sqlite')
    with open_journal(_Module(journal_path=path)) as journal:
        assert journal.backend == 'sqlite' and os.path.exists(path)


def test_the_driver_is_preloaded_only_for_a_journal_in_a_database():
    """Where the workers are forked from (plugin_utils/in_process.py): with EPHEMERA_JOURNAL_URL set, or
    EPHEMERA_PRELOAD naming postgresql, psycopg and the backend are imported there; otherwise nothing is."""
    assert journal_mod.preload({}) is False
    assert journal_mod.preload({'EPHEMERA_PRELOAD': 'gcp, aws'}) is False
    assert journal_mod.preload({'EPHEMERA_JOURNAL_URL': 'postgresql://u@db.example/j'}) is True
    assert journal_mod.preload({'EPHEMERA_PRELOAD': 'aws, PostgreSQL'}) is True
    assert 'psycopg' in sys.modules
    assert 'ansible_collections.ephemera.workspaces.plugins.module_utils.core.journal_pg' in sys.modules


def test_the_one_statement_check_and_the_full_look_agree(pg_server):
    """The schema check of a journal that is there is one statement; what it answers is what the full look says,
    and a database it cannot tell about (empty, another application's meta table) goes to the full look."""
    name, url = fresh(pg_server)
    with Journal.open(url=url) as j:
        conn = j._conn
        assert journal_pg._known_version(conn) == journal_mod.SCHEMA_VERSION
        saved = journal_pg._known_version
        journal_pg._known_version = lambda c: None
        try:
            assert journal_pg.schema_version(conn) == journal_mod.SCHEMA_VERSION
        finally:
            journal_pg._known_version = saved
    other, other_url = fresh(pg_server)
    empty, empty_url = fresh(pg_server)
    import psycopg
    with psycopg.connect(other_url, autocommit=True) as owner:
        owner.execute('CREATE TABLE meta (key TEXT, value TEXT, extra INT)')
        owner.execute("INSERT INTO meta VALUES ('schema_version', '3', 0)")
    for database_url, expected in ((other_url, None), (empty_url, 0)):
        raw = psycopg.connect(database_url, autocommit=True)
        conn = journal_pg.PgConnection(raw, database_url)
        try:
            assert journal_pg._known_version(conn) is None
            assert journal_pg.schema_version(conn) == expected
        finally:
            conn.close()
