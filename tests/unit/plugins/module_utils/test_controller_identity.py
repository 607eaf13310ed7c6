"""The controller secret is an identity, never silently made again (core/module.py controller_secret): the first one
is announced with where it is, the journal records the controller id it signs as, and a journal with workspaces but
no secret, or a secret of another controller, is refused with nothing changed."""

import os

import pytest

from ansible_collections.ephemera.workspaces.plugins.module_utils.core import ownership
from ansible_collections.ephemera.workspaces.plugins.module_utils.core.module import MARKER_CONTROLLER, controller_secret

OTHER = 'b' * 64


@pytest.fixture(autouse=True)
def no_secret_from_the_environment(monkeypatch):
    monkeypatch.delenv(ownership.SECRET_ENV, raising=False)


def test_the_first_secret_is_announced_and_recorded_in_the_journal(journal, path):
    said = []
    secret = controller_secret(path, None, False, journal=journal, warn=said.append)
    secret_file = ownership.secret_path(path)
    assert os.path.exists(secret_file) and secret == ownership.load_secret(path)
    [warning] = said
    assert 'Made a new controller secret at %s' % secret_file in warning and 'back it up' in warning
    assert journal.meta_value(MARKER_CONTROLLER) == ownership.controller_id(secret)
    # The next use finds it: nothing said, the same secret.
    again = []
    assert controller_secret(path, None, False, journal=journal, warn=again.append) == secret and again == []


def test_a_journal_with_workspaces_and_no_secret_is_refused_and_no_secret_is_made(journal, path):
    journal.create_workspace('w1', status='ready')
    with pytest.raises(ownership.MarkerError) as refused:
        controller_secret(path, None, False, journal=journal, warn=pytest.fail)
    message = str(refused.value)
    assert 'records workspaces, but there is no controller secret' in message and 'Restore the secret' in message
    assert not os.path.exists(ownership.secret_path(path))
    # In check mode too: no throwaway secret stands in for a lost one.
    with pytest.raises(ownership.MarkerError):
        controller_secret(path, None, True, journal=journal)
    assert journal.meta_value(MARKER_CONTROLLER) is None


def test_a_lost_secret_file_is_refused_even_when_no_workspace_is_left(journal, path):
    first = controller_secret(path, None, False, journal=journal)
    os.unlink(ownership.secret_path(path))
    with pytest.raises(ownership.MarkerError) as refused:
        controller_secret(path, None, False, journal=journal)
    assert 'of controller %s' % ownership.controller_id(first) in str(refused.value)
    assert not os.path.exists(ownership.secret_path(path))


def test_a_secret_of_another_controller_is_refused(journal, path, monkeypatch):
    mine = controller_secret(path, None, False, journal=journal)
    for given, source in ((OTHER, 'controller_secret'), (None, ownership.SECRET_ENV)):
        if given is None:
            monkeypatch.setenv(ownership.SECRET_ENV, OTHER)
        with pytest.raises(ownership.MarkerError) as refused:
            controller_secret(path, given, False, journal=journal)
        message = str(refused.value)
        assert 'is not the one of the journal' in message and 'from %s' % source in message
        assert ownership.controller_id(mine) in message and ownership.controller_id(OTHER.encode()) in message
        assert OTHER not in message
    assert journal.meta_value(MARKER_CONTROLLER) == ownership.controller_id(mine)


def test_a_given_secret_on_a_new_journal_is_recorded_and_no_file_is_made(journal, path):
    assert controller_secret(path, OTHER, False, journal=journal) == OTHER.encode()
    assert journal.meta_value(MARKER_CONTROLLER) == ownership.controller_id(OTHER.encode())
    assert not os.path.exists(ownership.secret_path(path))


def test_check_mode_on_a_new_journal_makes_and_records_nothing(journal, path):
    said = []
    assert len(controller_secret(path, None, True, journal=journal, warn=said.append)) == ownership.SECRET_BYTES
    assert said == [] and not os.path.exists(ownership.secret_path(path))
    assert journal.meta_value(MARKER_CONTROLLER) is None


def test_a_journal_that_is_a_database_gets_no_secret_file(journal, tmp_path):
    url = 'postgresql://ephemera@db.example/ephemera'
    with pytest.raises(ownership.MarkerError) as refused:
        controller_secret(url, None, False, journal=journal)
    assert 'no controller secret is made beside it' in str(refused.value)
    assert 'openssl rand -hex 32' in str(refused.value)


def test_the_first_recorded_controller_wins(journal):
    assert journal.claim_meta_value('k', 'first') == 'first'
    assert journal.claim_meta_value('k', 'second') == 'first'
    assert journal.meta_value('missing') is None


def test_the_controller_id_is_recorded_and_checked_on_both_backends(store):
    with store.open() as journal:
        assert journal.claim_meta_value('k', 'first') == 'first' and journal.claim_meta_value('k', 'x') == 'first'
        assert controller_secret(journal.path, OTHER, False, journal=journal) == OTHER.encode()
        assert journal.meta_value(MARKER_CONTROLLER) == ownership.controller_id(OTHER.encode())
    with store.open() as journal:
        with pytest.raises(ownership.MarkerError, match='is not the one of the journal'):
            controller_secret(journal.path, 'c' * 64, False, journal=journal)
        with pytest.raises(ownership.MarkerError, match='records workspaces of controller %s, but there is no '
                           'controller secret' % ownership.controller_id(OTHER.encode())):
            controller_secret(journal.path, None, False, journal=journal)
        assert journal.meta_value(MARKER_CONTROLLER) == ownership.controller_id(OTHER.encode())
    if store.backend == 'postgresql':
        assert '://' in journal.path and not os.path.exists(ownership.secret_path(journal.path))
