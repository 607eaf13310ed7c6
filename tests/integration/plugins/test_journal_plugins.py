"""workspace_info and the journal lookup, run by a real ansible-playbook against a real journal file."""

import json
import os

from ansible_collections.ephemera.workspaces.plugins.module_utils.core.journal import Journal
from tests import pgserver

PLAY = '''
- hosts: localhost
  gather_facts: false
  tasks:
    - name: info one
      ephemera.workspaces.workspace_info:
        name: ws-a
        events: true
      register: one
    - name: info blocked
      ephemera.workspaces.workspace_info:
        activity: [blocked]
    - name: lookup one
      ansible.builtin.debug:
        msg: "{{ lookup('ephemera.workspaces.journal', 'ws-a') }}"
    - name: lookup ready names
      ansible.builtin.debug:
        msg: "{{ query('ephemera.workspaces.journal', status='ready') | map(attribute='name') | list }}"
'''

PLAY_INFO_ONLY = PLAY.partition('    - name: info blocked')[0]


def seed(path):
    with Journal.open(path) as j:
        j.create_workspace('ws-a', repo='file:///srv/repo.git', ref='main', purpose='fix it')
        j.update_workspace('ws-a', 1, status='ready', activity='blocked', vmid=101, node='pve1',
                           event={'kind': 'observed', 'action': 'ready'})
        j.create_workspace('ws-b')
        j.update_workspace('ws-b', 1, status='ready', activity='idle')
        j.create_workspace('ws-c')
        j.record_cleanup_debt('ws-a', 'lxc/777@pve1', 'CT is locked (backup)')


def test_info_and_lookup_read_the_journal(tmp_path, run_playbook):
    path = str(tmp_path / 'journal.sqlite')
    seed(path)
    run = run_playbook(PLAY, env={'EPHEMERA_JOURNAL': path}, check=True)
    assert run.ok, run.output
    one = run.task('info one')
    assert one['changed'] is False
    [ws] = one['workspaces']
    assert (ws['name'], ws['status'], ws['activity'], ws['vmid']) == ('ws-a', 'ready', 'blocked', 101)
    assert [e['action'] for e in ws['events']] == ['create_workspace', 'ready', 'cleanup_debt']
    assert [d['resource'] for d in ws['cleanup_debt']] == ['lxc/777@pve1']
    assert [w['name'] for w in run.task('info blocked')['workspaces']] == ['ws-a']
    assert run.task('lookup one')['msg']['purpose'] == 'fix it'
    assert run.task('lookup ready names')['msg'] == ['ws-a', 'ws-b']


def test_missing_journal_is_refused_by_info_unless_new_and_an_error_for_lookup(tmp_path, run_playbook):
    path = str(tmp_path / 'never-made.sqlite')
    run = run_playbook(PLAY_INFO_ONLY, env={'EPHEMERA_JOURNAL': path})
    assert not run.ok and 'No journal at %s, and this run expects one' % path in run.task('info one')['msg']
    run = run_playbook(PLAY_INFO_ONLY, env={'EPHEMERA_JOURNAL': path, 'EPHEMERA_NEW_JOURNAL': 'true'})
    assert run.ok, run.output
    result = run.task('info one')
    assert result['workspaces'] == [] and 'No journal at' in ' '.join(result['warnings'])
    run = run_playbook(PLAY, env={'EPHEMERA_JOURNAL': path, 'EPHEMERA_NEW_JOURNAL': 'true'})
    assert not run.ok, run.output
    assert 'No journal at %s' % path in run.task('lookup one')['msg']
    assert not os.path.exists(path)


def test_lookup_refuses_unknown_names_and_filters(tmp_path, run_playbook):
    path = str(tmp_path / 'journal.sqlite')
    seed(path)
    play = '''
- hosts: localhost
  gather_facts: false
  tasks:
    - name: unknown name
      ansible.builtin.debug:
        msg: "{{ lookup('ephemera.workspaces.journal', 'nope') }}"
      ignore_errors: true
    - name: skipped name
      ansible.builtin.debug:
        msg: "{{ query('ephemera.workspaces.journal', 'nope', 'ws-b', missing='skip') | map(attribute='name') | list }}"
    - name: bad status
      ansible.builtin.debug:
        msg: "{{ query('ephemera.workspaces.journal', status='sleeping') }}"
      ignore_errors: true
'''
    run = run_playbook(play, env={'EPHEMERA_JOURNAL': path})
    assert run.ok, run.output
    assert "no workspace named 'nope'" in run.task('unknown name')['msg']
    assert run.task('skipped name')['msg'] == ['ws-b']
    assert 'unknown status sleeping' in run.task('bad status')['msg']


def test_corrupt_journal_fails_info_with_a_clear_message(tmp_path, run_playbook):
    path = tmp_path / 'journal.sqlite'
    path.write_bytes(b'garbage' * 1000)
    run = run_playbook(PLAY_INFO_ONLY, env={'EPHEMERA_JOURNAL': str(path)})
    assert not run.ok, run.output
    assert 'not a readable journal' in run.task('info one')['msg']
    assert path.read_bytes() == b'garbage' * 1000


# A journal on PostgreSQL: the session's server (tests/pgserver.py), one database for the test.
pg_server = pgserver.pg_server


def test_info_and_lookup_read_a_journal_on_postgresql(tmp_path, run_playbook, pg_server):
    url = pg_server.new_database('plugins_read')
    with Journal.open(url=url) as j:
        j.create_workspace('ws-a', repo='file:///srv/repo.git', ref='main', purpose='fix it')
        j.update_workspace('ws-a', 1, status='ready', activity='blocked', vmid=101, node='pve1')
        j.create_workspace('ws-b')
        j.update_workspace('ws-b', 1, status='ready', activity='idle')
    never = str(tmp_path / 'never-made.sqlite')
    # From the environment, as an AWX credential injects it.
    run = run_playbook(PLAY, env={'EPHEMERA_JOURNAL_URL': url, 'EPHEMERA_JOURNAL': never}, check=True)
    assert run.ok, run.output
    [ws] = run.task('info one')['workspaces']
    assert (ws['name'], ws['status'], ws['vmid']) == ('ws-a', 'ready', 101)
    assert run.task('info one')['journal_path'] == pg_server.url_for(database='plugins_read', password=False)
    assert run.task('lookup one')['msg']['purpose'] == 'fix it'
    assert run.task('lookup ready names')['msg'] == ['ws-a', 'ws-b']
    assert pg_server.password not in run.output
    # As options: the module's journal_url from its ephemera_journal_url variable, the lookup's as a keyword.
    play = PLAY_INFO_ONLY + '''
    - name: lookup by option
      ansible.builtin.debug:
        msg: "{{ lookup('ephemera.workspaces.journal', 'ws-b', journal_url=ephemera_journal_url).status }}"
'''
    run = run_playbook(play, env={'EPHEMERA_JOURNAL': never}, check=True,
                       extra_args=['-e', json.dumps({'ephemera_journal_url': url})])
    assert run.ok, run.output
    assert [w['name'] for w in run.task('info one')['workspaces']] == ['ws-a']
    assert run.task('lookup by option')['msg'] == 'ready'
    assert not os.path.exists(never)


def test_a_secret_query_parameter_of_the_journal_url_is_in_no_output(run_playbook, pg_server):
    url = pg_server.new_database('plugins_secret_param')
    with Journal.open(url=url) as j:
        j.create_workspace('ws-a', repo='file:///srv/repo.git', ref='main', purpose='fix it')
    # sslpassword is the pass phrase of the client key: a secret like the password, masked like it.
    secret_url = url + ('&' if '?' in url else '?') + 'sslpassword=Key-Phrase-5d1e'
    run = run_playbook(PLAY_INFO_ONLY, env={'EPHEMERA_JOURNAL_URL': secret_url}, check=True, extra_args=['-v'])
    assert run.ok, run.output
    assert run.task('info one')['journal_path'] == pg_server.url_for(database='plugins_secret_param', password=False)
    assert 'Key-Phrase-5d1e' not in run.output and pg_server.password not in run.output
