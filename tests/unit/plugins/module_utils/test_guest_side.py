"""What the agent inside a workspace can put in front of the controller, at the level of its parts: the inspection's
output, the restore commands, and where a git token may go (real git, real shell, real HTTP servers on loopback).

The end-to-end paths (a real guest with a non-root agent) are in tests/integration/security/test_guest_side.py.
"""

import base64
import http.server
import os
import shlex
import subprocess
import threading

import pytest

from ansible_collections.ephemera.workspaces.plugins.module_utils.core import gitlogin
from ansible_collections.ephemera.workspaces.plugins.module_utils.flows import archive, preflight
from ansible_collections.ephemera.workspaces.plugins.module_utils.flows.archive import CheckoutState, InspectionRefused

IDENTITY = ['-c', 'user.name=Test', '-c', 'user.email=test@example.invalid']
HOSTILE_BRANCH = 'x;touch${IFS}pwned;#'


def git(cwd, *args):
    return subprocess.run(['git'] + IDENTITY + list(args), cwd=cwd, check=True, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE).stdout.decode().strip()


def inspect(checkout):
    proc = subprocess.run(['sh', '-s'], input=archive.inspect_script(checkout).encode(), check=True,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    return CheckoutState.parse(proc.stdout.decode())


@pytest.fixture
def repo(tmp_path):
    bare, clone = str(tmp_path / 'origin.git'), str(tmp_path / 'clone')
    git(str(tmp_path), 'init', '--quiet', '--bare', '--initial-branch=main', bare)
    git(str(tmp_path), 'clone', '--quiet', bare, clone)
    with open(os.path.join(clone, 'a.txt'), 'w') as f:
        f.write('a\n')
    git(clone, 'add', '.')
    git(clone, 'commit', '--quiet', '-m', 'first')
    git(clone, 'push', '--quiet', 'origin', 'main')
    return clone


# ------------------------------------------------------------------ finding 3: the inspection cannot be forged

def test_a_remote_url_with_line_breaks_cannot_forge_a_clean_verdict(repo):
    with open(os.path.join(repo, 'a.txt'), 'a') as f:
        f.write('unsaved work\n')
    git(repo, 'commit', '--quiet', '-am', 'work nobody pushed')
    head_tree = git(repo, 'rev-parse', 'HEAD^{tree}')
    forged = '\n'.join(['file:///nowhere', 'unpushed_count 0', 'index_tree ' + head_tree, 'tracked_tree ' + head_tree,
                        'tree ' + head_tree, 'untracked_count 0'])
    git(repo, 'config', 'remote.origin.url', forged)
    state = inspect(repo)
    assert not state.clean and state.unpushed_count == 1, state.values
    assert state.summary() == '1 commit(s) on no remote'


@pytest.mark.parametrize('extra', [
    'unpushed_count 0',                     # a key given twice
    'verdict clean',                        # a key the script never prints
    'ref 0123 refs/heads/main',             # a list entry of the wrong form
])
def test_output_that_is_not_the_script_s_is_refused(repo, extra):
    proc = subprocess.run(['sh', '-s'], input=archive.inspect_script(repo).encode(), check=True,
                          stdout=subprocess.PIPE)
    text = proc.stdout.decode()
    CheckoutState.parse(text)
    with pytest.raises(InspectionRefused):
        CheckoutState.parse(text + extra + '\n')


def test_an_inspection_without_its_end_is_refused(repo):
    proc = subprocess.run(['sh', '-s'], input=archive.inspect_script(repo).encode(), check=True, stdout=subprocess.PIPE)
    with pytest.raises(InspectionRefused, match='end missing'):
        CheckoutState.parse(proc.stdout.decode().replace('end 1\n', ''))


def test_a_hostile_branch_name_stays_one_word_in_the_restore_commands(repo, tmp_path):
    git(repo, 'checkout', '--quiet', '-b', HOSTILE_BRANCH)
    with open(os.path.join(repo, 'a.txt'), 'a') as f:
        f.write('more\n')
    state = inspect(repo)
    assert state.branch == HOSTILE_BRANCH  # git accepts it: a valid branch name
    lines = archive.restore_commands(state, {'ok': False}, {archive.WORKTREE_PATCH: {}}, [],
                                     'file://' + str(tmp_path / 'origin.git'))
    checkout = [line for line in lines if line.startswith('git checkout')]
    assert [shlex.split(line) for line in checkout] == [['git', 'checkout', '-B', HOSTILE_BRANCH, state.head]]
    # Run for real, the commands make the branch and nothing else.
    place = tmp_path / 'restore'
    place.mkdir()
    subprocess.run(['git', 'diff', '--binary', state.head, state.tracked_tree], cwd=repo, check=True,
                   stdout=open(str(place / archive.WORKTREE_PATCH), 'wb'))
    proc = subprocess.run(['sh', '-ec', '\n'.join(lines)], cwd=str(place), stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, check=False)
    restored = str(place / 'restored')
    assert proc.returncode == 0, proc.stdout.decode()
    assert not os.path.exists(str(place / 'pwned')) and not os.path.exists(os.path.join(restored, 'pwned'))
    assert git(restored, 'symbolic-ref', '--short', 'HEAD') == HOSTILE_BRANCH


@pytest.mark.parametrize('url', ['file:///o.git\ntouch pwned', 'https://h/r x;touch pwned', '--upload-pack=touch pwned'])
def test_an_url_unfit_for_a_command_line_is_not_written_into_one(url):
    state = CheckoutState(dict(head='a' * 40, branch='main', head_tree='b' * 40, index_tree='b' * 40,
                               tracked_tree='b' * 40, tree='b' * 40, ref=[], unpushed=[], untracked=[]))
    lines = archive.restore_commands(state, {'ok': False}, {}, [], url)
    assert not any('pwned' in line for line in lines), lines
    assert lines[0].startswith('#')


def test_heads_must_be_object_ids_and_branches_names_git_accepts():
    state = CheckoutState(dict(head='HEAD;touch pwned', branch='main', ref=[], unpushed=[], untracked=[]))
    with pytest.raises(archive.ArchiveError, match='not a commit id'):
        archive.restore_commands(state, {'ok': False}, {}, [], 'file:///o.git')
    for name in ('-f', 'a..b', 'a b', 'a@{1}', 'a.lock', '.hidden', 'a/', 'x\ny', 'a~1', 'a:b', ''):
        assert not archive.valid_branch(name), name
    for name in (HOSTILE_BRANCH, 'feature/x', 'ephemera/ws-1'):
        assert archive.valid_branch(name), name


# ------------------------------------------------------------------ finding 9: where a token may go

@pytest.mark.parametrize('url', ['http://git.example.com/r.git', 'git://git.example.com/r.git',
                                 'ssh://git@git.example.com/r.git', 'git@git.example.com:r.git', '/srv/r.git',
                                 'file:///srv/r.git', 'http://10.0.0.1/r.git'])
def test_a_token_is_refused_for_anything_but_https(url):
    with pytest.raises(gitlogin.GitLoginError, match='only to an https:// repository'):
        gitlogin.check_token_transport(url, 'tok')
    gitlogin.check_token_transport(url, None)  # without a token: nothing to protect


@pytest.mark.parametrize('url', ['https://git.example.com/r.git', 'http://127.0.0.1:8080/r.git',
                                 'http://localhost/r.git', 'http://[::1]:81/r.git'])
def test_https_and_loopback_http_take_a_token(url):
    gitlogin.check_token_transport(url, 'tok')


def _ask(env, prompt, tmp_path):
    helper = tmp_path / 'askpass'
    helper.write_text(gitlogin.ASKPASS)
    helper.chmod(0o700)
    return subprocess.run([str(helper), prompt], env=dict(os.environ, **env), stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, check=False)


def test_the_helper_answers_only_the_request_s_origin(tmp_path):
    env = gitlogin.askpass_env('https://git.example.com:8443/team/r.git', 'bot', 'tok-123')
    assert _ask(env, "Username for 'https://git.example.com:8443': ", tmp_path).stdout == b'bot\n'
    assert _ask(env, "Password for 'https://bot@git.example.com:8443': ", tmp_path).stdout == b'tok-123\n'
    for prompt in ("Password for 'https://bot@evil.example': ", "Username for 'https://git.example.com': ",
                   "Password for 'http://bot@git.example.com:8443': ", "Enter passphrase for key '/root/.ssh/id': ",
                   "Password for 'https://other@git.example.com:8443': "):
        answer = _ask(env, prompt, tmp_path)
        assert answer.returncode != 0 and answer.stdout == b'', prompt


class _Recorder(http.server.BaseHTTPRequestHandler):
    """Answers 401 and records the Authorization header of every request (the other host of a redirect)."""
    seen = []

    def log_message(self, *args):
        pass

    def do_GET(self):
        type(self).seen.append(self.headers.get('Authorization'))
        self.send_response(401)
        self.send_header('WWW-Authenticate', 'Basic realm="elsewhere"')
        self.send_header('Content-Length', '0')
        self.end_headers()


def _serve(handler):
    httpd = http.server.ThreadingHTTPServer(('127.0.0.1', 0), handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    return httpd


def test_a_redirect_to_another_host_never_gets_the_token():
    # The other host: 127.0.0.2, another origin than the repository's 127.0.0.1.
    elsewhere = http.server.ThreadingHTTPServer(('127.0.0.2', 0), _Recorder)
    threading.Thread(target=elsewhere.serve_forever, daemon=True).start()
    target = 'http://127.0.0.2:%d' % elsewhere.server_address[1]

    class Redirect(http.server.BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def do_GET(self):
            self.send_response(301)
            self.send_header('Location', target + self.path)
            self.send_header('Content-Length', '0')
            self.end_headers()

    first = _serve(Redirect)
    try:
        url = 'http://127.0.0.1:%d/team/r.git' % first.server_address[1]
        try:
            preflight.probe_repository(url, 'main', token='tok-redirected', username='bot', timeout=20)
        except preflight.RepositoryRefused:
            pass
        sent = [value for value in _Recorder.seen if value]
        assert sent == [], [base64.b64decode(v.split()[1]) for v in sent]
    finally:
        for server in (first, elsewhere):
            server.shutdown()
            server.server_close()


# ------------------------------------------------------------------ finding 11 on the controller: git's own output

def test_the_controller_reads_a_bounded_part_of_git_s_output(tmp_path):
    flood = preflight.run_bounded(['sh', '-c', 'head -c 5000000 /dev/zero; sleep 30'], cwd=str(tmp_path),
                                  env=dict(os.environ), timeout=20, limit=100000)
    assert flood.over and len(flood.stdout) <= 100000 and flood.returncode != 0
    plain = preflight.run_bounded(['sh', '-c', 'echo out; echo err >&2; exit 3'], cwd=str(tmp_path),
                                  env=dict(os.environ), timeout=20)
    assert (plain.returncode, plain.stdout, plain.stderr, plain.over) == (3, 'out\n', 'err\n', False)
    with pytest.raises(subprocess.TimeoutExpired):
        preflight.run_bounded(['sleep', '30'], cwd=str(tmp_path), env=dict(os.environ), timeout=1)
