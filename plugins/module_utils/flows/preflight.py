# -*- coding: utf-8 -*-
# Copyright: ephemera.workspaces contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What the request step can check from the controller before anything is cloned: does the repository answer?

``git ls-remote`` from the controller tells, for a repository the controller can reach, whether it
exists, whether the login (``git_token``) is let in, and whether the ref is a branch or tag of it.
Only answers that would fail the guest's checkout too refuse the request: a controller that cannot
reach the repository (another network, a proxy, a file path or an SSH URL, which only the guest can
use) does not know, and says so.

The token never reaches a command line or a file: git asks a helper script for it, and the script
reads it from its environment and answers only for the repository's own origin (core/gitlogin.py);
no system, global or credential-helper configuration takes part, and with a token no redirect is
followed.
"""

import os
import re
import shutil
import signal
import subprocess
import tempfile
import threading
from urllib.parse import urlsplit

from ansible_collections.ephemera.workspaces.plugins.module_utils.core import gitlogin
from ansible_collections.ephemera.workspaces.plugins.module_utils.core.errors import EphemeraError

# Schemes the controller asks itself; file paths and SSH URLs are reached with the guest's keys and file system.
PROBED_SCHEMES = ('https', 'http', 'git')
TIMEOUT = 20
COMMIT = re.compile(r'^[0-9a-f]{7,40}$')
# What git says when the repository answered and refused: the guest's checkout would fail the same way.
MISSING = ('not found', 'does not appear to be a git repository', 'does not exist', 'repository not found')
LOGIN = ('authentication failed', 'could not read username', 'could not read password', 'returned error: 401',
         'returned error: 403', 'access denied')


class RepositoryRefused(EphemeraError):
    """The repository answered, and the checkout in the guest would fail: the request is refused."""


class Verdict:
    """``checked``: the repository answered and has the ref; otherwise ``note`` says why a URL the controller
    asked could not be checked (empty for a file path or SSH URL, which it does not ask). ``branch``: for a request
    without a ref, the repository's default branch (what its HEAD names), when it answered."""

    def __init__(self, checked, note='', branch=None):
        self.checked = checked
        self.note = note
        self.branch = branch


# ls-remote --symref's line for the remote's HEAD: "ref: refs/heads/<branch>\tHEAD".
SYMREF = re.compile(r'^ref: refs/heads/(\S+)\tHEAD$', re.M)


def probe_repository(url, ref, token=None, username='git', timeout=TIMEOUT):
    """Ask ``url`` for ``ref`` with ``git ls-remote`` from the controller: a Verdict, or RepositoryRefused. With no
    ``ref`` (None), ask which branch its HEAD names: the Verdict's ``branch``."""
    try:
        gitlogin.check_token_transport(url, token)
    except gitlogin.GitLoginError as err:
        raise RepositoryRefused(str(err), step='request')
    parts = urlsplit(url) if '://' in url else None
    scheme = parts.scheme if parts else ''
    if parts is not None and '@' in parts.netloc and scheme in PROBED_SCHEMES:
        # Never asked with a login in the URL: git would send it, and it would show in process lists.
        raise RepositoryRefused('Repository URL %s://********@%s carries a login; give it as git_token (and '
                                'git_username) instead.' % (scheme, parts.netloc.rpartition('@')[2]), step='request')
    if scheme not in PROBED_SCHEMES:
        # Only the guest can use it (its own keys, its own file system): nothing to say.
        return Verdict(False)
    git = shutil.which('git')
    if git is None:
        return Verdict(False, 'repository not checked: git is not installed on the controller')
    commit = bool(ref and COMMIT.match(ref))
    scratch = tempfile.mkdtemp(prefix='ephemera-probe-')
    try:
        env = {k: v for k, v in os.environ.items() if not k.startswith('GIT_')}
        env.update(gitlogin.ISOLATED_ENV, LC_ALL='C')
        options = list(gitlogin.NO_HELPERS)
        if token:
            askpass = os.path.join(scratch, 'askpass')
            with open(os.open(askpass, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o700), 'w') as out:
                out.write(gitlogin.ASKPASS)
            env.update(gitlogin.askpass_env(url, username, token), GIT_ASKPASS=askpass)
            options += gitlogin.NO_REDIRECTS
        # A commit id cannot be asked for by name: then only the repository is checked.
        if ref is None:
            argv = [git] + options + ['ls-remote', '--exit-code', '--symref', url, 'HEAD']
        else:
            argv = [git] + options + ['ls-remote', '--exit-code', url] + (['HEAD'] if commit else [ref])
        try:
            proc = run_bounded(argv, cwd=scratch, env=env, timeout=timeout)
        except subprocess.TimeoutExpired:
            return Verdict(False, 'repository not checked: %s did not answer the controller within %d s' % (url, timeout))
        if proc.over:
            return Verdict(False, 'repository not checked: git ls-remote printed more than %d bytes' % MAX_OUTPUT)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    said = _said(proc.stderr, token)
    if proc.returncode == 0 and ref is None:
        found = SYMREF.search(proc.stdout)
        if found is None:
            return Verdict(False, 'default branch not asked: %s did not say which branch its HEAD names' % url)
        return Verdict(True, branch=found.group(1))
    if proc.returncode == 0:
        return Verdict(True)
    if proc.returncode == 2 and ref is None:
        raise RepositoryRefused('Repository %s has no default branch (its HEAD names no branch: an empty '
                                'repository?): give ref, an existing branch, tag or commit id.' % url, step='request')
    if proc.returncode == 2 and not commit:
        raise RepositoryRefused('Ref %r is neither a branch nor a tag of %s (git ls-remote from the controller found '
                                'none): give an existing branch, tag or commit id as ref.' % (ref, url), step='request')
    lowered = said.lower()
    if any(word in lowered for word in LOGIN):
        raise RepositoryRefused('Repository %s refused the login %s (git ls-remote from the controller: %s): give '
                                'git_token (and git_username) that can read it.'
                                % (url, 'with the given git_token' if token else 'without a git_token', said),
                                step='request')
    if any(word in lowered for word in MISSING):
        raise RepositoryRefused('Repository %s does not exist (git ls-remote from the controller: %s): check the URL.'
                                % (url, said), step='request')
    return Verdict(False, 'repository not checked: the controller cannot reach it (%s)' % said)


# What the controller reads of git's output; the rest of a larger answer is not read, and git is stopped.
MAX_OUTPUT = 1024 * 1024


class _Ran:
    def __init__(self, returncode, stdout, stderr, over):
        self.returncode, self.stdout, self.stderr, self.over = returncode, stdout, stderr, over


def run_bounded(argv, cwd, env, timeout, limit=MAX_OUTPUT):
    """Run ``argv``; its status and at most ``limit`` bytes of its output (``over`` True, and the process killed,
    when it printed more). Raises subprocess.TimeoutExpired after ``timeout`` seconds (the process killed)."""
    # A session of its own: git and the helpers it starts (git-remote-https) are stopped together.
    proc = subprocess.Popen(argv, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, start_new_session=True)
    parts = {proc.stdout: [], proc.stderr: []}
    state = {'size': 0, 'over': False}
    lock = threading.Lock()

    def stop():
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except OSError:
            pass

    def pump(stream):
        while True:
            try:
                data = os.read(stream.fileno(), 65536)
            except (OSError, ValueError):
                return
            if not data:
                return
            with lock:
                state['size'] += len(data)
                if state['size'] > limit:
                    state['over'] = True
                    stop()
                    return
                parts[stream].append(data)

    pumps = [threading.Thread(target=pump, args=(stream,), daemon=True) for stream in parts]
    for thread in pumps:
        thread.start()
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        stop()
        proc.wait()
        raise
    finally:
        for thread in pumps:
            thread.join(5)
        proc.stdout.close()
        proc.stderr.close()
    text = {stream: b''.join(data).decode('utf-8', 'replace') for stream, data in parts.items()}
    return _Ran(proc.returncode, text[proc.stdout], text[proc.stderr], state['over'])


def _said(stderr, token):
    """git's last message line, without the token should it appear."""
    lines = [line.strip() for line in (stderr or '').splitlines() if line.strip()]
    text = lines[-1] if lines else 'no message'
    return text.replace(token, '********') if token else text
