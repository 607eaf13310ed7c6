# -*- coding: utf-8 -*-
# Copyright: ephemera.workspaces contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What the collection does inside a workspace guest, over SSH: bootstrap, checkout, runner, brief.

Every absolute path used inside a guest goes through :class:`Layout`, whose ``root`` prefixes it.
On a real guest the root is ``/``; the local try-out cluster gives each guest a directory of its
own, named with ``{vmid}``.
"""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import inspect
import json
import posixpath
import shlex

from ansible_collections.ephemera.workspaces.plugins.module_utils.guest import agent_runner
from ansible_collections.ephemera.workspaces.plugins.module_utils.core.errors import EphemeraError
from ansible_collections.ephemera.workspaces.plugins.module_utils.guest.ssh import SshCommandFailed, SshError, tail
from ansible_collections.ephemera.workspaces.plugins.module_utils.core import waiter

RUNNER_DIR = '/opt/ephemera'
STATE_DIR = '/var/lib/ephemera'
DEFAULT_AGENTS = {
    'claude-code': ['claude', '-p', '{purpose}', '--permission-mode', 'acceptEdits'],
    'codex': ['codex', 'exec', '--full-auto', '{purpose}'],
    'opencode': ['opencode', 'run', '{purpose}'],
}


class GuestError(EphemeraError):
    """A step inside the guest failed; ``step`` says which."""


class Layout:
    """Paths inside one guest.

    ``STATE_DIR`` itself belongs to the SSH user (root), who writes the agent's credentials file there. What
    the runner, running as the agent, writes (its state, socket and log) lives in ``state``, owned by the agent
    and used for nothing else. Credential helpers root writes for the agent go into ``helpers``, which the agent
    can pass through but not write to.
    """

    def __init__(self, root, vmid, checkout_path, agent_user):
        self.root = (root or '/').replace('{vmid}', str(vmid))
        self.checkout = self.path(checkout_path)
        self.agent_user = agent_user
        self.runner = self.path(RUNNER_DIR + '/agent_runner.py')
        self.runner_config = self.path(RUNNER_DIR + '/runner.json')
        self.state = self.path(STATE_DIR + '/runner')
        self.socket = self.path(STATE_DIR + '/runner/runner.sock')
        self.runner_log = self.path(STATE_DIR + '/runner/runner.log')
        self.credentials = self.path(STATE_DIR + '/agent.env')
        self.scratch = self.path(STATE_DIR + '/tmp')
        self.helpers = self.path(STATE_DIR + '/helpers')

    def path(self, absolute):
        if not absolute.startswith('/'):
            raise GuestError('Guest paths must be absolute, not %r.' % absolute)
        return posixpath.normpath(posixpath.join(self.root, absolute.lstrip('/')))


def q(value):
    return shlex.quote(str(value))


def as_agent(layout, ssh_user, command):
    """``command`` run as the agent user (directly when SSH logs in as that user already)."""
    if layout.agent_user == ssh_user:
        return command
    return 'runuser -u %s -- sh -c %s' % (q(layout.agent_user), q(command))


def bootstrap(guest, layout, ssh_user, credentials):
    """Check the guest has what the workspace needs, make the agent user and the directories, write credentials.

    ``credentials`` (name -> value) go into one env file, 0600 and owned by the agent user, that
    only the runner reads when it starts the agent: never on a command line.
    """
    owner = layout.agent_user
    script = '\n'.join([
        'set -e',
        'for tool in git python3; do',
        '  command -v "$tool" >/dev/null 2>&1 || { echo "the guest has no $tool: the template must provide it" >&2; '
        'exit 20; }',
        'done',
        'id -u %s >/dev/null 2>&1 || useradd --create-home --shell /bin/bash %s' % (q(owner), q(owner)),
        'mkdir -p %s %s %s %s %s' % (q(posixpath.dirname(layout.checkout)), q(posixpath.dirname(layout.runner)),
                                     q(layout.state), q(layout.scratch), q(layout.helpers)),
        'chmod 0700 %s %s' % (q(layout.state), q(layout.scratch)),
        # Only the SSH user writes here; the agent may run a helper made for it, but not put anything in its place.
        'chmod 0711 %s' % q(layout.helpers),
        'chown %s %s %s %s' % (q(owner), q(posixpath.dirname(layout.checkout)), q(layout.state), q(layout.scratch)),
    ])
    guest.run('sh -s', stdin=script, what='bootstrap')
    body = ''.join('%s=%s\n' % (name, shlex.quote(str(value))) for name, value in sorted((credentials or {}).items()))
    guest.put(layout.credentials, body, mode=0o600)
    guest.run(['chown', owner, layout.credentials], what='chown credentials')


def checkout_state(guest, layout):
    """(HEAD commit, origin URL) of the checkout, or None when there is none."""
    result = guest.run('git -C %s rev-parse --verify HEAD 2>/dev/null && git -C %s config --get remote.origin.url'
                       % (q(layout.checkout), q(layout.checkout)), check=False, what='inspect checkout')
    lines = result.stdout.split()
    if result.rc != 0 or len(lines) < 2:
        return None
    return lines[0], lines[1]


def checkout(guest, layout, ssh_user, repo, ref, git_token=None, git_username='git', timeout=600):
    """Clone ``repo`` into the checkout path and check out ``ref``; returns the HEAD commit.

    A partial checkout from an earlier attempt is removed first. A ``git_token`` is handed to git
    through a temporary askpass helper that is removed afterwards, whether the clone worked or not;
    if it cannot be removed (the connection broke), the GuestError says so (``helper_left``).
    """
    askpass = posixpath.join(layout.helpers, 'git-askpass')
    try:
        head = _clone(guest, layout, ssh_user, repo, ref, askpass, git_token, git_username, timeout)
    except (SshError, GuestError) as exc:
        _remove_helper(guest, askpass, git_token, exc)
        raise
    _remove_helper(guest, askpass, git_token)
    return head


def _clone(guest, layout, ssh_user, repo, ref, askpass, git_token, git_username, timeout):
    env = 'GIT_TERMINAL_PROMPT=0'
    if git_token:
        # The helper prints the answers; printf is a shell builtin, so the token is on no command line.
        helper = '#!/bin/sh\ncase "$1" in Username*) printf %%s %s ;; *) printf %%s %s ;; esac\n' % (
            q(git_username), q(git_token))
        guest.put(askpass, helper, mode=0o700)
        guest.run(['chown', layout.agent_user, askpass], what='chown askpass')
        env += ' GIT_ASKPASS=%s' % q(askpass)
    script = ' && '.join([
        'rm -rf %s' % q(layout.checkout),
        '%s git clone --quiet --no-checkout -- %s %s' % (env, q(repo), q(layout.checkout)),
        'cd %s' % q(layout.checkout),
        '%s git checkout --quiet %s --' % (env, q(ref)),
        'git rev-parse HEAD',
    ])
    try:
        result = guest.run(as_agent(layout, ssh_user, script), timeout=timeout, what='git clone')
    except SshCommandFailed as exc:
        said = '%s' % (exc.details.get('stderr_tail') or exc)
        hint = _credentials_hint(said, git_token)
        raise GuestError('Cloning %s at %r into %s failed: %s%s. Fix the repository, ref or login and run the create '
                         'again (it goes on at the checkout), or destroy the workspace.'
                         % (repo, ref, layout.checkout, said.rstrip('.'), hint), step='checkout')
    return result.stdout.split()[-1]


# What git says when the server wants credentials it was not given, or refused the ones it got.
_ASKED_FOR_CREDENTIALS = ('could not read Username', 'could not read Password', 'Authentication failed',
                          'terminal prompts disabled')


def _credentials_hint(said, git_token):
    if not any(words in said for words in _ASKED_FOR_CREDENTIALS):
        return ''
    if git_token:
        return ' (the server refused the git_token and git_username given: check that the token may read this repository)'
    return ' (the repository wants credentials: pass git_token, and git_username where the host needs one)'


def _remove_helper(guest, askpass, git_token, failure=None):
    try:
        guest.run(['rm', '-f', askpass], what='remove temporary git credentials')
    except SshError as exc:
        if not git_token:
            return
        before = '%s; then ' % failure if failure is not None else ''
        raise GuestError('%sthe temporary git credential helper %s could not be removed (%s). The next checkout of '
                         'this workspace removes it; destroying the workspace removes it too.'
                         % (before, askpass, exc), step='checkout', helper_left=askpass)


def runner_source():
    """The agent runner program, as shipped in this collection."""
    return inspect.getsource(agent_runner)


def runner_call(guest, layout, ssh_user, request, timeout=10, point=True):
    """Send one request to the runner; returns its answer (``alive`` False when it does not answer)."""
    command = 'python3 %s call --socket %s --timeout %s -' % (q(layout.runner), q(layout.socket), int(timeout))
    result = guest.run(as_agent(layout, ssh_user, command), stdin=json.dumps(request), check=False,
                       timeout=timeout + 10, what='runner %s' % request.get('op'), point=point)
    try:
        return json.loads(result.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return {'ok': False, 'alive': False, 'error': tail(result.stderr or result.stdout) or 'no answer'}


def write_runner_config(guest, layout, agents):
    """The runner's configuration (agents' command lines, workdir, credentials file); it reads it at every brief."""
    config = {'agents': agents, 'workdir': layout.checkout, 'environment_file': layout.credentials}
    guest.put(layout.runner_config, json.dumps(config, indent=2, sort_keys=True), mode=0o644)


def install_runner(guest, layout, ssh_user, agents, timeout=30):
    """Install the runner, start it unless it answers already, and wait until it answers ``ping``."""
    guest.put(layout.runner, runner_source(), mode=0o755)
    write_runner_config(guest, layout, agents)
    if runner_call(guest, layout, ssh_user, {'op': 'ping'}).get('alive'):
        return False
    start = ('cd %s && setsid python3 %s serve --state-dir %s --socket %s --config %s >>%s 2>&1 </dev/null & echo $!'
             % (q(layout.state), q(layout.runner), q(layout.state), q(layout.socket), q(layout.runner_config),
                q(layout.runner_log)))
    pid = guest.run(as_agent(layout, ssh_user, start), what='start the agent runner').stdout.strip()

    def probe(remaining):
        answer = runner_call(guest, layout, ssh_user, {'op': 'ping'}, timeout=max(min(remaining, 5), 1), point=False)
        if answer.get('alive'):
            return waiter.done(answer)
        # A runner that exited (it could not serve) will not answer later: no point waiting out the timeout.
        if pid.isdigit() and guest.run(['test', '-d', '/proc/%s' % pid], check=False, what='runner alive',
                                       point=False).rc != 0:
            return waiter.failed(answer)
        return waiter.pending(answer)

    result = waiter.wait_for(probe, timeout, waiter.Backoff(start=0.1, maximum=1.0))
    if not result.ok:
        log = guest.run('tail -n 15 %s' % q(layout.runner_log), check=False, what='runner log').stdout
        why = ('exited after %.1f s' % result.elapsed if result.outcome == waiter.FAILED
               else 'did not answer within %d s' % timeout)
        raise GuestError('The agent runner %s. Its log ends:\n%s' % (why, log.strip()), step='runner')
    return True


def brief(guest, layout, ssh_user, purpose, agent, agents, replace=False):
    """Brief the agent with the current agents' command lines; returns the runner's answer (``already`` True when
    it had this brief and its agent has not failed). ``replace``: a corrected brief, which stops an agent still
    working on the earlier one."""
    write_runner_config(guest, layout, agents)
    request = {'op': 'brief', 'purpose': purpose, 'agent': agent}
    if replace:
        request['replace'] = True
    answer = runner_call(guest, layout, ssh_user, request, timeout=30)
    if not answer.get('ok'):
        raise GuestError('The agent runner refused the brief: %s' % answer.get('error'), step='brief')
    return answer
