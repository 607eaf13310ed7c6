"""The journal and the controller secret are trusted only when nobody but their owner can change them: whoever can
write the journal chooses the SSH address, the pinned host key and the agent command lines of a resumed create,
and whoever reads the secret can sign markers. docs/internals/security.md, finding 12."""

import os

import pytest

from ansible_collections.ephemera.workspaces.plugins.module_utils.core import ownership
from ansible_collections.ephemera.workspaces.plugins.module_utils.core.errors import JournalError
from ansible_collections.ephemera.workspaces.plugins.module_utils.core.journal import Journal

OTHER_UID = 65534  # nobody


@pytest.fixture
def journal_path(tmp_path, monkeypatch):
    monkeypatch.delenv(ownership.SECRET_ENV, raising=False)
    directory = tmp_path / 'state'
    directory.mkdir(mode=0o700)
    path = str(directory / 'journal.sqlite')
    with Journal.open(path) as journal:
        journal.create_workspace('w1', repo='file:///srv/r.git', ref='main', purpose='p')
    return path


def contents(path):
    with open(path, 'rb') as f:
        return f.read()


@pytest.mark.parametrize('target, mode, said', [
    ('', 0o666, 'The journal %s is not safe to trust: others may write it (mode 0666)'),
    ('', 0o620, 'The journal %s is not safe to trust: others may write it (mode 0620)'),
    ('dir', 0o777, 'The journal directory %s is not safe to trust: others may write it (mode 0777)'),
    ('dir', 0o1777, 'The journal directory %s is not safe to trust: others may write it (mode 1777)'),
    ('-wal', 0o666, "The journal's write-ahead log %s is not safe to trust: others may write it"),
])
def test_a_journal_others_may_write_is_refused_by_writers_and_readers(journal_path, target, mode, said):
    name = os.path.dirname(journal_path) if target == 'dir' else journal_path + target
    if target == '-wal' and not os.path.exists(name):
        with open(name, 'wb'):
            pass
    os.chmod(name, mode)
    before = contents(journal_path)
    for readonly in (False, True):
        with pytest.raises(JournalError) as refused:
            Journal.open(journal_path, readonly=readonly)
        message = str(refused.value)
        assert said % name in message if '%s' in said else said in message
        assert 'chmod' in message and 'tampered' in message
    assert contents(journal_path) == before


def test_a_journal_another_user_owns_is_refused_by_writers_and_read_by_readers(journal_path):
    os.chown(journal_path, OTHER_UID, -1)
    os.chmod(journal_path, 0o644)
    with pytest.raises(JournalError) as refused:
        Journal.open(journal_path)
    assert 'is owned by uid %d, not by uid %d' % (OTHER_UID, os.geteuid()) in str(refused.value)
    with Journal.open(journal_path, readonly=True) as journal:
        assert journal.get_workspace('w1')['purpose'] == 'p'


def test_the_controllers_own_journal_opens(journal_path):
    with Journal.open(journal_path) as journal:
        assert journal.get_workspace('w1') is not None


@pytest.mark.parametrize('change, said', [
    (lambda path: os.chmod(path, 0o644), 'others may read it (mode 0644)'),
    (lambda path: os.chmod(path, 0o606), 'others may write it (mode 0606)'),
    (lambda path: os.chown(path, OTHER_UID, -1), 'is owned by uid %d' % OTHER_UID),
])
def test_a_secret_others_may_read_or_write_is_refused(journal_path, change, said):
    secret = ownership.load_secret(journal_path)
    path = ownership.secret_path(journal_path)
    change(path)
    with pytest.raises(ownership.MarkerError) as refused:
        ownership.load_secret(journal_path)
    assert said in str(refused.value) and path in str(refused.value)
    assert secret.decode() not in str(refused.value)


def test_a_secret_behind_a_symbolic_link_is_refused(journal_path, tmp_path):
    elsewhere = tmp_path / 'planted'
    elsewhere.write_text('a' * 64)
    os.chmod(str(elsewhere), 0o600)
    os.symlink(str(elsewhere), ownership.secret_path(journal_path))
    with pytest.raises(ownership.MarkerError, match='symbolic link'):
        ownership.load_secret(journal_path)


@pytest.mark.parametrize('given', ['hunter2', 's3cret-s3cret', 'x' * (ownership.MIN_SECRET_CHARS - 1)])
def test_a_short_controller_secret_is_refused(journal_path, monkeypatch, given):
    with pytest.raises(ownership.MarkerError) as refused:
        ownership.load_secret(journal_path, given)
    assert 'at least %d' % ownership.MIN_SECRET_CHARS in str(refused.value) and given not in str(refused.value)
    monkeypatch.setenv(ownership.SECRET_ENV, given)
    with pytest.raises(ownership.MarkerError, match=ownership.SECRET_ENV):
        ownership.load_secret(journal_path)


def test_a_long_enough_controller_secret_is_used(journal_path):
    given = 'v' * ownership.MIN_SECRET_CHARS
    assert ownership.load_secret(journal_path, given) == given.encode()
