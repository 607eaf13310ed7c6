"""The archive engine's pieces: the inspection script against real git repositories, and the pure helpers."""

import hashlib
import os
import stat
import subprocess

import pytest

from ansible_collections.ephemera.workspaces.plugins.module_utils.flows import archive
from ansible_collections.ephemera.workspaces.plugins.module_utils.flows.archive import CheckoutState
from ansible_collections.ephemera.workspaces.plugins.module_utils.core.journal import Journal
from ansible_collections.ephemera.workspaces.plugins.module_utils.core.queue import Queue

IDENTITY = ['-c', 'user.name=Test', '-c', 'user.email=test@example.invalid']


def git(cwd, *args):
    return subprocess.run(['git'] + IDENTITY + list(args), cwd=cwd, check=True, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE).stdout.decode()


def inspect(checkout, remote='origin'):
    proc = subprocess.run(['sh', '-s'], input=archive.inspect_script(checkout, remote).encode(), check=True,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    return CheckoutState.parse(proc.stdout.decode())


@pytest.fixture
def repo(tmp_path):
    """A clone of a bare repository with one pushed commit; returns the clone's path."""
    bare, clone = str(tmp_path / 'origin.git'), str(tmp_path / 'clone')
    git(str(tmp_path), 'init', '--quiet', '--bare', '--initial-branch=main', bare)
    git(str(tmp_path), 'clone', '--quiet', bare, clone)
    with open(os.path.join(clone, 'a.txt'), 'w') as f:
        f.write('a\n')
    with open(os.path.join(clone, '.gitignore'), 'w') as f:
        f.write('*.log\n')
    git(clone, 'add', '.')
    git(clone, 'commit', '--quiet', '-m', 'first')
    git(clone, 'push', '--quiet', 'origin', 'main')
    return clone


def index_digest(clone):
    with open(os.path.join(clone, '.git', 'index'), 'rb') as f:
        return hashlib.sha256(f.read()).hexdigest()


def test_a_pushed_checkout_is_clean(repo):
    state = inspect(repo)
    assert state.clean and not state.missing
    assert state.branch == 'main' and state.upstream == 'origin/main' and state.base == state.head
    assert state.unpushed_count == 0
    assert state.summary() == 'nothing that is not on a remote'


def test_each_kind_of_work_is_seen_and_the_index_is_left_alone(repo):
    clean = inspect(repo)
    with open(os.path.join(repo, 'build.log'), 'w') as f:
        f.write('ignored\n')
    assert inspect(repo).digest == clean.digest  # ignored files are not work

    with open(os.path.join(repo, 'new.txt'), 'w') as f:
        f.write('new\n')
    untracked = inspect(repo)
    assert untracked.untracked_changes and not untracked.tracked_changes and untracked.untracked == ['new.txt']
    assert untracked.digest != clean.digest

    with open(os.path.join(repo, 'a.txt'), 'a') as f:
        f.write('more\n')
    before = index_digest(repo)
    edited = inspect(repo)
    assert edited.tracked_changes and not edited.staged_changes
    assert index_digest(repo) == before
    assert not [n for n in os.listdir(os.path.join(repo, '.git')) if n.startswith('ephemera-index')]

    git(repo, 'add', 'a.txt')
    git(repo, 'commit', '--quiet', '-m', 'second')
    committed = inspect(repo)
    assert committed.unpushed_count == 1 and committed.unpushed[0]['subject'] == 'second'
    assert committed.base == clean.head and 'commit(s) on no remote' in committed.summary()
    assert inspect(repo).digest == committed.digest  # nothing changed: the same digest


def test_a_missing_checkout_is_reported_as_missing(tmp_path):
    assert inspect(str(tmp_path / 'nowhere')).missing
    os.mkdir(str(tmp_path / 'plain'))
    assert inspect(str(tmp_path / 'plain')).missing  # a directory, but no repository of its own


@pytest.mark.parametrize('url, shown', [
    ('https://user:tok3n@git.example.com/a.git', 'https://****@git.example.com/a.git'),
    ('https://ghp_abcdef@github.com/o/r.git', 'https://****@github.com/o/r.git'),
    ('ssh://git@git.example.com/a.git', 'ssh://git@git.example.com/a.git'),
    ('ssh://git:pw@git.example.com/a.git', 'ssh://****@git.example.com/a.git'),
    ('git@github.com:o/r.git', 'git@github.com:o/r.git'),
    ('file:///srv/a.git', 'file:///srv/a.git'),
    (None, None),
])
def test_remote_urls_lose_their_secrets(url, shown):
    assert archive.redact_url(url) == shown


def test_push_refusal_keeps_the_remote_s_words():
    output = ('remote: closed for the weekend        \nTo file:///srv/a.git\n'
              '!\tabc:refs/heads/ephemera/w\t[remote rejected] (pre-receive hook declined)\nDone\n')
    assert archive.push_refusal(output) == 'closed for the weekend; [remote rejected] (pre-receive hook declined)'
    assert archive.push_refusal('fatal: unable to access\n') == 'fatal: unable to access'


def test_archive_dir_is_made_and_probed(tmp_path):
    target = str(tmp_path / 'a' / 'b')
    assert archive.check_archive_dir(target, create=False) == target
    assert not os.path.exists(target)
    archive.check_archive_dir(target)
    assert stat.S_IMODE(os.stat(target).st_mode) == 0o700 and os.listdir(target) == []


def test_archive_dir_made_by_another_host_meanwhile_is_used(monkeypatch, tmp_path):
    """Hosts of one play destroy at once: the directory may appear between the check and the mkdir."""
    target = str(tmp_path / 'archives')
    real_makedirs = os.makedirs

    def made_meanwhile(path, mode=0o777, exist_ok=False):
        real_makedirs(path, mode)   # the other host wins the race
        return real_makedirs(path, mode, exist_ok=exist_ok)

    monkeypatch.setattr(archive.os, 'makedirs', made_meanwhile)
    assert archive.check_archive_dir(target) == target
    assert os.listdir(target) == []


def test_archive_dir_that_is_a_file_or_unwritable_is_refused(tmp_path):
    a_file = tmp_path / 'f'
    a_file.write_text('')
    with pytest.raises(archive.ArchiveError, match='is not a directory'):
        archive.check_archive_dir(str(a_file))
    with pytest.raises(archive.ArchiveError, match='Cannot make the archive directory /sys/ephemera-test'):
        archive.check_archive_dir('/sys/ephemera-test')


def test_archive_dir_option_env_and_default(monkeypatch, tmp_path):
    journal = str(tmp_path / 'j' / 'journal.sqlite')
    monkeypatch.delenv(archive.ENV_VAR, raising=False)
    assert archive.resolve_archive_dir(None, journal) == str(tmp_path / 'j' / 'archives')
    monkeypatch.setenv(archive.ENV_VAR, str(tmp_path / 'env'))
    assert archive.resolve_archive_dir(None, journal) == str(tmp_path / 'env')
    assert archive.resolve_archive_dir(str(tmp_path / 'opt'), journal) == str(tmp_path / 'opt')


def test_the_default_archive_dir_of_a_journal_in_a_database_is_the_users_state_directory(monkeypatch, tmp_path):
    url = 'postgresql://ephemera@127.0.0.1:5432/ephemera'
    monkeypatch.delenv(archive.ENV_VAR, raising=False)
    monkeypatch.setenv('XDG_STATE_HOME', str(tmp_path / 'state'))
    assert archive.resolve_archive_dir(None, url) == str(tmp_path / 'state' / 'ephemera' / 'archives')
    monkeypatch.delenv('XDG_STATE_HOME')
    monkeypatch.setenv('HOME', str(tmp_path / 'home'))
    assert archive.resolve_archive_dir(None, url) == str(tmp_path / 'home' / '.local' / 'state' / 'ephemera' / 'archives')
    monkeypatch.setenv(archive.ENV_VAR, str(tmp_path / 'env'))
    assert archive.resolve_archive_dir(None, url) == str(tmp_path / 'env')


def test_two_archives_in_one_second_get_their_own_directories(tmp_path):
    first = archive.new_archive_path(str(tmp_path), 'ws', 1800000000.2)
    second = archive.new_archive_path(str(tmp_path), 'ws', 1800000000.7)
    assert os.path.basename(first) == '20270115T080000Z' and second == first + '-1'


def _state(**values):
    base = {'head': 'a' * 40, 'branch': 'main', 'head_tree': 't1', 'index_tree': 't1', 'tracked_tree': 't1',
            'tree': 't1', 'unpushed_count': '0'}
    base.update(values)
    return CheckoutState(dict(base, ref=[], unpushed=[], untracked=[]))


def test_restore_commands_follow_what_was_captured():
    state = _state(tracked_tree='t2', tree='t2', index_tree='t3')
    files = {archive.BUNDLE: {}, archive.WORKTREE_PATCH: {}, archive.INDEX_PATCH: {}, archive.UNTRACKED_TAR: {}}
    lines = archive.restore_commands(state, {'ok': False}, files, ['b' * 40 + ' HEAD', 'b' * 40 + ' refs/heads/main'],
                                     'file:///o.git')
    assert lines == ['git clone -- file:///o.git restored', 'cd restored', 'git bundle verify ../head.bundle',
                     "git fetch ../head.bundle '+refs/*:refs/archive/*' +HEAD:refs/archive/HEAD",
                     'git checkout -B main ' + 'a' * 40, 'git apply --cached ../index.patch',
                     'git apply ../worktree.patch', 'python3 -I ../restore-untracked.py ../untracked.tar']
    pushed = archive.restore_commands(_state(branch=''), {'ok': True, 'ref': 'refs/heads/ephemera/w', 'commit': 'c' * 40},
                                      {}, [], 'file:///o.git')
    assert pushed[2:] == ['git fetch origin refs/heads/ephemera/w', 'git checkout --detach ' + 'c' * 40,
                          'git reset %s   # HEAD as it was; the rest becomes uncommitted changes and untracked files'
                          % ('a' * 40)]


def test_digest_covers_every_part_of_the_state():
    plain = _state()
    assert plain.clean and plain.digest == _state().digest
    for change in ({'tree': 't9'}, {'index_tree': 't9'}, {'head': 'b' * 40}, {'branch': 'other'}):
        assert _state(**change).digest != plain.digest, change


# ------------------------------------------------------------- the flow on journal records alone

@pytest.fixture
def journal(tmp_path):
    with Journal.open(str(tmp_path / 'journal.sqlite')) as opened:
        yield opened


def _flow(journal, tmp_path, name='ws', claim=None):
    params = {'name': name, 'archive_dir': str(tmp_path / 'archives'), 'ssh_timeout': 1}
    return archive.ArchiveFlow(journal, params, claim=claim)


def test_unknown_workspace_is_a_clear_error(journal, tmp_path):
    with pytest.raises(archive.ArchiveError, match="'ws' is not recorded in the journal"):
        _flow(journal, tmp_path).check()


def test_no_checkout_and_destroyed_hold_nothing(journal, tmp_path):
    journal.create_workspace('ws', status='bootstrapping', params={}, progress={'request': 1, 'bootstrap': 2})
    result = _flow(journal, tmp_path).check()
    assert result['verdict'] == 'nothing' and result['unsaved'] is False and 'never got a checkout' in result['msg']
    archived = _flow(journal, tmp_path).archive()
    assert archived['changed'] is False and archived['archive'] is None
    ws = journal.get_workspace('ws')
    journal.update_workspace('ws', ws['generation'], status='destroyed', progress={'checkout': 1})
    assert _flow(journal, tmp_path).check()['verdict'] == 'nothing'


@pytest.mark.parametrize('noun', ['container', 'set'])
def test_the_guard_lets_a_stopped_machine_without_a_checkout_go_but_not_one_with_a_checkout(journal, tmp_path, noun):
    # A create that failed before its checkout: its machine stopped, it holds no work of the agent's.
    journal.create_workspace('ws', status='failed', params={}, progress={'request': 1, 'clone': 2})
    changed, msg, dummy = _flow(journal, tmp_path).guard(True, False, noun=noun)
    assert changed is False and 'ws never got a checkout, so it holds no work' in msg
    ws = journal.get_workspace('ws')
    journal.update_workspace('ws', ws['generation'], progress={'request': 1, 'clone': 2, 'checkout': 3})
    with pytest.raises(archive.ArchiveError) as err:
        _flow(journal, tmp_path).guard(True, False, noun=noun)
    assert "ws's %s is stopped" % noun in str(err.value) and 'discard_unsaved_work=true' in str(err.value)
    assert 'the %s is gone' % noun in _flow(journal, tmp_path).guard(False, False, noun=noun)[1]


def test_a_workspace_being_destroyed_is_archived_only_by_its_destruction(journal, tmp_path):
    journal.create_workspace('ws', status='destroying', desired_state='destroyed', params={}, progress={})
    with pytest.raises(archive.ArchiveError, match='being destroyed'):
        _flow(journal, tmp_path).archive()
    queue = Queue(journal)
    turn = queue.poll(queue.enqueue('destroy', 'ws').request_id)
    assert _flow(journal, tmp_path, claim=turn.claim).archive()['verdict'] == 'nothing'
    assert _flow(journal, tmp_path).check()['verdict'] == 'nothing'  # a check is always allowed


def test_unreachable_guest_with_a_checkout_is_unknown(journal, tmp_path):
    # Nothing listens on this loopback address and port: the connection is refused at once.
    journal.create_workspace('ws', status='ready', vmid=100, address='127.0.0.1', progress={'checkout': 1},
                             params={'ssh_port': 1, 'ssh_user': 'root', 'guest_root': '/', 'agent_user': 'agent'})
    result = _flow(journal, tmp_path).check()
    assert result['verdict'] == 'unknown' and result['unsaved'] is True and 'cannot be reached' in result['msg']
    with pytest.raises(archive.ArchiveError, match='Nothing was archived'):
        _flow(journal, tmp_path).archive()
