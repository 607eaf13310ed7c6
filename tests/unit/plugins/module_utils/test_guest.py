"""Guest operations that need no guest: what a failed checkout tells the operator."""

from ansible_collections.ephemera.workspaces.plugins.module_utils.guest.operations import _credentials_hint

NO_LOGIN = "fatal: could not read Username for 'https://git.example.com': terminal prompts disabled"
REFUSED = "remote: Invalid username or password.\nfatal: Authentication failed for 'https://git.example.com/app.git/'"


def test_a_repository_that_asks_for_a_login_without_a_token_says_to_pass_one():
    assert 'pass git_token' in _credentials_hint(NO_LOGIN, None)


def test_a_token_the_server_refused_says_so_rather_than_asking_for_one():
    hint = _credentials_hint(REFUSED, 'tok')
    assert 'refused the git_token' in hint and 'pass git_token' not in hint


def test_other_clone_failures_get_no_hint():
    assert _credentials_hint("fatal: Remote branch not-pushed-yet not found in upstream origin", None) == ''
    assert _credentials_hint("fatal: repository 'https://git.example.com/missing.git/' not found", 'tok') == ''
