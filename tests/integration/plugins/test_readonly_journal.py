"""The readers (workspace_info, queue_info, the journal lookup, the workspaces inventory) on a journal they may not
write, and on a damaged journal, each run by a real ansible-playbook or ansible-inventory process.

A read-only file system is made for the run alone: the journal's directory is bind-mounted onto itself and
remounted read-only inside a private mount namespace (``unshare --mount``) that the reader runs in, so nothing of
it is seen outside the run. Being root does not help the reader there: the file system refuses every write.
"""

import hashlib
import json
import os
import shutil
import subprocess

import pytest

from ansible_collections.ephemera.workspaces.plugins.module_utils.core.journal import Journal
from ansible_collections.ephemera.workspaces.plugins.module_utils.core.queue import Queue
from tests.ansible_run import BIN, run_ansible, said

UNSHARE = shutil.which('unshare') or '/usr/bin/unshare'
HOST_KEY = 'ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIHRlc3Qta2V5LW9mLXdzLWEtMDAwMDAwMDAwMDAwMDAw'
# Runs the rest of the command line with the directory $1 read-only; refuses to run it if the directory is not.
READ_ONLY = ('d=$1; shift; mount --bind "$d" "$d"; mount -o remount,bind,ro "$d"; '
             'if touch "$d/.write-probe" 2>/dev/null; then echo "$d is still writable" >&2; exit 99; fi; exec "$@"')

PLAY = '''
- hosts: localhost
  gather_facts: false
  tasks:
    - name: info one
      ephemera.workspaces.workspace_info:
        name: ws-a
        events: true
      ignore_errors: true
    - name: info ready
      ephemera.workspaces.workspace_info:
        status: [ready]
      ignore_errors: true
    - name: queue
      ephemera.workspaces.queue_info:
        target: ws-a
      ignore_errors: true
    - name: lookup one
      ansible.builtin.debug:
        msg: "{{ lookup('ephemera.workspaces.journal', 'ws-a') }}"
      ignore_errors: true
    - name: lookup ready
      ansible.builtin.debug:
        msg: "{{ query('ephemera.workspaces.journal', status='ready') | map(attribute='name') | list }}"
      ignore_errors: true
'''
# Readers that read every workspace record, so they meet the damaged pages wherever those are.
DAMAGED_PLAY = '''
- hosts: localhost
  gather_facts: false
  tasks:
    - name: info all
      ephemera.workspaces.workspace_info:
      ignore_errors: true
    - name: lookup all
      ansible.builtin.debug:
        msg: "{{ query('ephemera.workspaces.journal') | length }}"
      ignore_errors: true
'''


def read_only_mounts_work():
    probe = subprocess.run([UNSHARE, '--mount', '--propagation', 'private', 'mount', '--bind', '/', '/mnt'],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
    return probe.returncode == 0


pytestmark = pytest.mark.skipif(not os.path.exists(UNSHARE) or not read_only_mounts_work(),
                                reason='needs unshare --mount and bind mounts (root, or a user namespace)')


def seed(path, extra=0):
    """ws-a (ready, with an address and a host key, cleanup debt and a queued destroy), ws-b (ready), ws-c, and
    ``extra`` more with long purposes (a journal of many pages)."""
    with Journal.open(path) as j:
        j.create_workspace('ws-a', repo='file:///srv/repo.git', ref='main', purpose='fix it',
                           params={'ssh_user': 'root', 'ssh_port': 2222, 'ssh_key_path': '/keys/id_ed25519'})
        j.update_workspace('ws-a', 1, status='ready', activity='blocked', vmid=101, node='pve1', address='127.0.0.7',
                           facts={'host_key': HOST_KEY}, event={'kind': 'observed', 'action': 'ready'})
        j.create_workspace('ws-b')
        j.update_workspace('ws-b', 1, status='ready', activity='idle')
        j.create_workspace('ws-c')
        j.record_cleanup_debt('ws-a', 'lxc/777@pve1', 'CT is locked (backup)')
        Queue(j).enqueue('destroy', 'ws-a')
        for n in range(extra):
            j.create_workspace('ws-x%03d' % n, purpose='a purpose long enough to fill the pages of a journal ' * 12)


def contents(directory):
    """Every file of the directory with its digest."""
    out = {}
    for name in sorted(os.listdir(directory)):
        with open(os.path.join(directory, name), 'rb') as f:
            out[name] = hashlib.sha256(f.read()).hexdigest()
    return out


@pytest.fixture
def journal_dir(tmp_path):
    """A directory that holds a journal and nothing else (its controller secret was never made)."""
    directory = tmp_path / 'journal-dir'
    directory.mkdir()
    path = str(directory / 'journal.sqlite')
    seed(path)
    assert sorted(os.listdir(str(directory))) == ['journal.sqlite']
    return str(directory), path


def run_reader(argv, tmp_path, read_only=None, env=None, callback='ansible.posix.json'):
    """A real ansible-playbook/ansible-inventory of this venv, pinned to this checkout; with ``read_only``, in a
    mount namespace of its own where that directory is read-only."""
    argv = [os.path.join(BIN, argv[0])] + list(argv[1:])
    if read_only:
        argv = [UNSHARE, '--mount', '--propagation', 'private', 'sh', '-c', READ_ONLY, 'sh', read_only] + argv
    environ = dict(ANSIBLE_HOME=str(tmp_path / 'home'), ANSIBLE_LOCAL_TEMP=str(tmp_path / 'tmp'),
                   XDG_CACHE_HOME=str(tmp_path / 'cache'))
    if argv[-1] == '--list':
        environ['ANSIBLE_INVENTORY_UNPARSED_FAILED'] = '1'  # a source that fails is an error, not a warning
    environ.update(env or {})
    return run_ansible(argv, timeout=300, env=environ, callback=callback, unset=('PROXMOX_', 'EPHEMERA_'))


def play(tmp_path, text=PLAY):
    book = tmp_path / 'play.yml'
    book.write_text(text)
    return str(book)


def inventory_file(tmp_path, journal_path, **options):
    path = tmp_path / 'site.workspaces.yml'
    path.write_text(json.dumps(dict(plugin='ephemera.workspaces.workspaces', journal_path=journal_path, **options)))
    return str(path)


# ------------------------------------------------------------------------------------ read-only


def test_info_queue_info_and_lookup_read_a_journal_on_a_read_only_file_system(journal_dir, tmp_path):
    directory, path = journal_dir
    before = contents(directory)
    run = run_reader(['ansible-playbook', play(tmp_path)], tmp_path, read_only=directory,
                     env={'EPHEMERA_JOURNAL': path})
    assert run.returncode == 0 and not run.failures(), run.explain()
    [ws] = run.task('info one')['workspaces']
    assert (ws['name'], ws['status'], ws['activity'], ws['vmid'], ws['address']) == (
        'ws-a', 'ready', 'blocked', 101, '127.0.0.7')
    assert [e['action'] for e in ws['events']] == ['create_workspace', 'ready', 'cleanup_debt', 'enqueued']
    assert [d['resource'] for d in ws['cleanup_debt']] == ['lxc/777@pve1']
    assert [w['name'] for w in run.task('info ready')['workspaces']] == ['ws-a', 'ws-b']
    assert [(e['kind'], e['target'], e['state']) for e in run.task('queue')['entries']] == [('destroy', 'ws-a', 'queued')]
    assert run.task('lookup one')['msg']['purpose'] == 'fix it'
    assert run.task('lookup ready')['msg'] == ['ws-a', 'ws-b']
    # Nothing new in the directory: no -wal or -shm, no controller secret, no second journal.
    assert contents(directory) == before


def test_inventory_lists_a_journal_on_a_read_only_file_system(journal_dir, tmp_path):
    directory, path = journal_dir
    before = contents(directory)
    known_hosts = str(tmp_path / 'known_hosts')
    run = run_reader(['ansible-inventory', '-i', inventory_file(tmp_path, path, known_hosts_file=known_hosts),
                      '--list'], tmp_path, read_only=directory, callback=None)
    assert run.ok, run.explain()
    assert sorted(run.data['workspaces']['hosts']) == ['ws-a', 'ws-b', 'ws-c']
    assert sorted(run.data['status_ready']['hosts']) == ['ws-a', 'ws-b']
    ws_a = run.data['_meta']['hostvars']['ws-a']
    assert (ws_a['ansible_host'], ws_a['ansible_port'], ws_a['ansible_user'], ws_a['ansible_ssh_private_key_file']) == (
        '127.0.0.7', 2222, 'root', '/keys/id_ed25519')
    assert ws_a['ansible_ssh_common_args'] == '-o UserKnownHostsFile=%s -o StrictHostKeyChecking=yes' % known_hosts
    with open(known_hosts) as f:
        assert f.read().splitlines()[1:] == ['[127.0.0.7]:2222 ' + HOST_KEY]
    assert os.stat(known_hosts).st_mode & 0o777 == 0o600
    assert contents(directory) == before


def test_inventory_whose_known_hosts_file_cannot_be_written_still_lists_and_says_what_to_set(journal_dir, tmp_path):
    directory, path = journal_dir
    before = contents(directory)
    known_hosts = os.path.join(directory, 'known_hosts')
    run = run_reader(['ansible-inventory', '-i', inventory_file(tmp_path, path, known_hosts_file=known_hosts),
                      '--list'], tmp_path, read_only=directory, callback=None)
    assert run.ok, run.explain()
    assert sorted(run.data['workspaces']['hosts']) == ['ws-a', 'ws-b', 'ws-c']
    assert 'ansible_ssh_common_args' not in run.data['_meta']['hostvars']['ws-a']
    assert said('cannot write the known-hosts file %s' % known_hosts, run.output)
    assert said('known_hosts_file (or EPHEMERA_KNOWN_HOSTS)', run.output)
    assert contents(directory) == before


# -------------------------------------------------------------------------------------- damaged


def test_damaged_journal_names_the_file_and_the_recovery(tmp_path):
    path = str(tmp_path / 'journal.sqlite')
    seed(path, extra=300)
    size = os.path.getsize(path)
    assert size > 40 * 4096
    with open(path, 'r+b') as f:  # the middle third: pages of workspace records and events
        f.seek(size // 3)
        f.write(b'\xa5' * (size // 3))
    with open(path, 'rb') as f:
        damaged = f.read()

    def assert_names_the_damage(text):
        assert said('The journal %s is damaged' % path, text), text
        assert said('database disk image is malformed', text)
        assert said('docs/internals/journal.md, "A damaged journal"', text) and said('sqlite3 .recover', text)

    run = run_reader(['ansible-playbook', play(tmp_path, DAMAGED_PLAY)], tmp_path, env={'EPHEMERA_JOURNAL': path})
    failed = dict(run.failures())
    assert sorted(failed) == ['info all', 'lookup all'], run.explain()
    for name in failed:
        assert_names_the_damage(failed[name]['msg'])

    run = run_reader(['ansible-inventory', '-i', inventory_file(tmp_path, path), '--list'], tmp_path, callback=None)
    assert run.returncode != 0
    assert_names_the_damage(run.output)
    assert said('option journal_path', run.output)
    with open(path, 'rb') as f:
        assert f.read() == damaged
