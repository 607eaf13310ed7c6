# -*- coding: utf-8 -*-
# Copyright: ephemera.workspaces contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What the collection does inside a workspace guest, over SSH: bootstrap, checkout, runner, brief.

Every absolute path used inside a guest goes through :class:`Layout`, whose ``root`` prefixes it.
On a real guest the root is ``/``; the local try-out cluster gives each guest a directory of its
own, named with ``{vmid}``.
"""

import inspect
import json
import posixpath
import shlex

from ansible_collections.ephemera.workspaces.plugins.module_utils.guest import agent_runner
from ansible_collections.ephemera.workspaces.plugins.module_utils.core import gitlogin
from ansible_collections.ephemera.workspaces.plugins.module_utils.core.errors import EphemeraError
from ansible_collections.ephemera.workspaces.plugins.module_utils.guest.ssh import (
    SshCommandFailed,
    SshError,
    SshOutputTooLarge,
    tail,
)
from ansible_collections.ephemera.workspaces.plugins.module_utils.core import waiter

RUNNER_DIR = '/opt/ephemera'
STATE_DIR = '/var/lib/ephemera'
SSH_DIR = '/etc/ssh'
# The most read of one answer of the agent runner (it runs as the agent, who can make it say anything).
RUNNER_ANSWER_LIMIT = 2 * 1024 * 1024


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
        # Root's own scratch space (0700 root, inside the root-owned state directory): what root makes or reads
        # for an archive lives here, never in a directory the agent can write to.
        self.private = self.path(STATE_DIR + '/private')
        self.ssh = self.path(SSH_DIR)

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


def agent_command(layout, ssh_user, body):
    """``body`` (a script) as one simple command run as the agent, fit for a pipeline or a redirection."""
    if layout.agent_user == ssh_user:
        return 'sh -c %s' % q(body)
    return as_agent(layout, ssh_user, body)


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
        'mkdir -p %s %s %s %s %s %s' % (q(posixpath.dirname(layout.checkout)), q(posixpath.dirname(layout.runner)),
                                        q(layout.state), q(layout.scratch), q(layout.helpers), q(layout.private)),
        'chmod 0700 %s %s %s' % (q(layout.state), q(layout.scratch), q(layout.private)),
        # Only the SSH user writes here; the agent may run a helper made for it, but not put anything in its place.
        'chmod 0711 %s' % q(layout.helpers),
        # A credentials file an earlier write left half way (Guest.put writes a new file, then renames it).
        'rm -f %s/.%s.*.tmp' % (q(posixpath.dirname(layout.credentials)), posixpath.basename(layout.credentials)),
        # -h: a symbolic link is changed itself, never what it points to.
        'chown -h %s %s %s %s' % (q(owner), q(posixpath.dirname(layout.checkout)), q(layout.state), q(layout.scratch)),
    ])
    guest.run('sh -s', stdin=script, what='bootstrap')
    write_credentials(guest, layout, credentials)


def write_credentials(guest, layout, credentials):
    """The agent's credentials (name -> value) as one env file, 0600 and owned by the agent user; only the runner
    reads it, when it starts the agent, into the agent's environment: never a command line."""
    body = ''.join('%s=%s\n' % (name, shlex.quote(str(value))) for name, value in sorted((credentials or {}).items()))
    guest.put(layout.credentials, body, mode=0o600)
    guest.run(['chown', '-h', layout.agent_user, layout.credentials], what='chown credentials')


# ---------------------------------------------------------------- forks

def fork_point(guest, layout, ssh_user):
    """The commit the checkout stands at (the fork point), after the guest's writes reached its disk (sync), so that
    a snapshot taken next holds them. Returns the commit, or None when the checkout has none."""
    script = '\n'.join([
        'set -e',
        'sync',
        'git -C %s rev-parse --verify -q HEAD || true' % q(layout.checkout),
    ])
    out = guest.run(as_agent(layout, ssh_user, script), what='fork point').stdout.strip()
    return out.splitlines()[-1] if out else None


def reset_identity(guest, layout, ssh_user):
    """Make a fork's child stop being its parent: a new machine-id, no runner state, agent session, socket or log
    of the parent's, no credentials file or credential helper of the parent's. Its own credentials are written by
    bootstrap, its own host keys made there. Returns (the new machine-id, the checkout's commit)."""
    machine_id = layout.path('/etc/machine-id')
    script = '\n'.join([
        'set -e',
        # The runner the parent ran is no process here (a copy starts none), but its files are: state, session, log.
        'rm -rf %s' % q(layout.state),
        'rm -f %s' % q(layout.credentials),
        'rm -rf %s/*' % q(layout.helpers) if layout.helpers else ':',
        'mkdir -p %s' % q(posixpath.dirname(machine_id)),
        # A machine-id is 32 lower-case hex digits (machine-id(5)); systemd is not needed to make one.
        'python3 -c "import uuid; print(uuid.uuid4().hex)" > %s.new' % q(machine_id),
        'mv -f %s.new %s' % (q(machine_id), q(machine_id)),
        'cat %s' % q(machine_id),
        'git -C %s rev-parse --verify -q HEAD || true' % q(layout.checkout),
    ])
    # The argument names the command in process lists (and for the try-out cluster's faults).
    lines = guest.run('sh -s ephemera-identity-reset', stdin=script, what='identity reset').stdout.split()
    return lines[0], (lines[1] if len(lines) > 1 else None)


# ---------------------------------------------------------------- host keys of the guest's own

def _one_line(key):
    return ' '.join((key or '').split()[:2])


def host_keys_look(guest, layout, presented, stamp):
    """Whether the guest's sshd serves a clone's inherited host keys; makes new ones next to them when it does.

    Returns ``('current', key)`` when the keys were made for this workspace already (``stamp`` is in
    the stamp file; ``key`` is the one of the presented key's type), ``('foreign', None)`` when the
    presented key is not one of ``/etc/ssh``'s (the guest's sshd takes its keys from elsewhere: they
    are not this code's to change), or ``('new', key)``: a new set of keys waits in a root-only
    directory and ``key`` is the one sshd will present once :func:`host_keys_install` put them in place.
    """
    d, new = layout.ssh, posixpath.join(layout.ssh, 'ephemera-new')
    stamp_file = posixpath.join(layout.ssh, 'ephemera-host-keys')
    kind = _one_line(presented).split(' ', 1)[0]
    script = '\n'.join([
        'set -eu',
        'd=%s new=%s kind=%s' % (q(d), q(new), q(kind)),
        # Public keys as the private key files give them (a .pub file next to one may be missing or stale).
        'pub_of() { for k in "$1"/ssh_host_*_key; do [ -f "$k" ] || continue; set -- $(ssh-keygen -y -f "$k" </dev/null); '
        '[ "$1" != "$kind" ] || { echo "$1 $2"; return; }; done; }',
        'if [ "$(cat %s 2>/dev/null || true)" = %s ]; then echo "current $(pub_of "$d")"; exit 0; fi' % (
            q(stamp_file), q(stamp)),
        'served=0',
        'for k in "$d"/ssh_host_*_key; do [ -f "$k" ] || continue; '
        '[ "$(ssh-keygen -y -f "$k" </dev/null | cut -d" " -f1,2)" != %s ] || served=1; done' % q(_one_line(presented)),
        '[ "$served" = 1 ] || { echo "foreign -"; exit 0; }',
        'rm -rf "$new"; (umask 077; mkdir "$new")',
        'for k in "$d"/ssh_host_*_key; do',
        '  [ -f "$k" ] || continue',
        '  b=${k##*/}; t=${b#ssh_host_}; t=${t%_key}',
        '  case "$t" in rsa|ecdsa|ed25519) ssh-keygen -q -N "" -t "$t" -C %s -f "$new/$b" </dev/null ;; esac' % q(
            'root@' + stamp.split(' ')[0]),
        'done',
        'key=$(pub_of "$new")',
        '[ -z "$key" ] || { echo "new $key"; exit 0; }',
        'echo "foreign -"',
    ])
    out = guest.run('sh -s', stdin=script, what='look at the host keys').stdout.strip().splitlines()
    verdict, dummy, key = (out[-1] if out else 'foreign -').partition(' ')
    return verdict, (key if key.count(' ') == 1 else None)


def host_keys_install(guest, layout, stamp, install=True):
    """Put the keys host_keys_look made in place (unless ``install`` is False: they are in place) and have the
    listening sshd read them again (SIGHUP: it re-executes itself; sessions already open, this one too, go on)."""
    d, new = layout.ssh, posixpath.join(layout.ssh, 'ephemera-new')
    script = ['set -eu', 'd=%s new=%s' % (q(d), q(new))]
    if install:
        script += [
            'for f in "$new"/ssh_host_*; do [ -f "$f" ] || continue; mv -f "$f" "$d/${f##*/}"; done',
            'rmdir "$new"',
            'printf "%%s\\n" %s >"$d/ephemera-host-keys.tmp"' % q(stamp),
            'mv -f "$d/ephemera-host-keys.tmp" "$d/ephemera-host-keys"',
        ]
    script += [
        # The listening sshd: the farthest sshd among this shell's ancestors.
        'pid=$$ top=',
        'while [ "${pid:-0}" -gt 1 ]; do',
        '  case "$(cat /proc/$pid/comm 2>/dev/null || true)" in sshd*) top=$pid ;; esac',
        '  pid=$(sed -n "s/^PPid:[[:space:]]*//p" /proc/$pid/status 2>/dev/null || echo 0)',
        'done',
        '[ -n "$top" ] && kill -HUP "$top" && echo "reloaded $top" || echo "reloaded none"',
    ]
    return guest.run('sh -s', stdin='\n'.join(script), what='install the host keys').stdout.strip()


def checkout(guest, layout, ssh_user, repo, ref, git_token=None, git_username='git', timeout=600, fetched=False):
    """Clone ``repo`` into the checkout path and check out ``ref`` (None: the default branch, the one the remote's
    HEAD names); returns (the HEAD commit, the branch checked out or None for a detached HEAD).

    A partial checkout from an earlier attempt is removed first. A ``git_token`` reaches git through
    the environment of the clone (sent on its standard input, never written to a file) and a helper
    that holds no secret and answers only for the repository's own origin (core/gitlogin.py); git runs
    with no system or global configuration, no credential helper and, with a token, no redirects.
    The helper is removed afterwards; if it cannot be (the connection broke), the GuestError says so
    (``helper_left``).

    ``fetched``: the checkout path holds a clone of ``repo`` already (a warm pool member's): it is fetched again and
    ``ref`` checked out in it (a branch at what the remote has now), instead of a new clone; a checkout path that
    holds anything else is cloned anew.
    """
    askpass = posixpath.join(layout.helpers, 'git-askpass')
    try:
        head = _clone(guest, layout, ssh_user, repo, ref, askpass, git_token, git_username, timeout, fetched)
    except (SshError, GuestError) as exc:
        _remove_helper(guest, askpass, git_token, exc)
        raise
    _remove_helper(guest, askpass, git_token)
    return head


def git_environment(repo, git_token, git_username, askpass):
    """(shell lines that set up git's environment, git options, standard input) for a command that reaches ``repo``.

    With a token, the first line of the command's standard input is the token: ``read`` is a shell
    builtin, so it is on no command line, and it ends up only in the environment of that command.
    """
    lines = ['export %s' % ' '.join('%s=%s' % (k, q(v)) for k, v in sorted(gitlogin.ISOLATED_ENV.items())),
             'export GIT_SSH_COMMAND="ssh -o BatchMode=yes"']
    options = list(gitlogin.NO_HELPERS)
    if not git_token:
        return lines, options, None
    env = gitlogin.askpass_env(repo, git_username, git_token)
    del env['EPHEMERA_GIT_TOKEN']
    lines += ['IFS= read -r EPHEMERA_GIT_TOKEN',
              'export EPHEMERA_GIT_TOKEN GIT_ASKPASS=%s %s' % (q(askpass), ' '.join(
                  '%s=%s' % (k, q(v)) for k, v in sorted(env.items())))]
    return lines, options + gitlogin.NO_REDIRECTS, git_token + '\n'


def _reuse(git, layout, repo, ref):
    """Shell lines that fetch into the clone at the checkout path when its origin is ``repo`` and check out ``ref``
    there (a branch as the remote has it now), ending the script; otherwise they do nothing."""
    # The branch the clone stands on (its default branch) when no ref is asked.
    target = q(ref) if ref is not None else '"$(git symbolic-ref --quiet --short HEAD)"'
    return [
        'if [ -d %s/.git ] && [ "$(git -C %s config --get remote.origin.url)" = %s ]; then'
        % (q(layout.checkout), q(layout.checkout), q(repo)),
        '  cd %s' % q(layout.checkout),
        '  %s fetch --quiet --tags --force origin' % git,
        '  want=%s' % target,
        '  if git rev-parse --quiet --verify "refs/remotes/origin/$want" >/dev/null; then',
        '    %s checkout --quiet --force -B "$want" "refs/remotes/origin/$want" --' % git,
        '  else',
        '    %s checkout --quiet --force "$want" --' % git,
        '  fi',
        '  git clean --quiet -d --force',
        '  echo "head $(git rev-parse HEAD)"',
        '  echo "branch $(git symbolic-ref --quiet --short HEAD || true)"',
        '  exit 0',
        'fi',
    ]


def _clone(guest, layout, ssh_user, repo, ref, askpass, git_token, git_username, timeout, fetched=False):
    try:
        gitlogin.check_token_transport(repo, git_token)
    except gitlogin.GitLoginError as err:
        raise GuestError(str(err), step='checkout')
    env, options, stdin = git_environment(repo, git_token, git_username, askpass)
    if git_token:
        # No secret in it: root's, readable, in a directory only root writes to.
        guest.put(askpass, gitlogin.ASKPASS, mode=0o755)
    git = 'git %s' % ' '.join(q(o) for o in options)
    script = '\n'.join(['set -e'] + env + (_reuse(git, layout, repo, ref) if fetched else []) + [
        'rm -rf %s' % q(layout.checkout),
        '%s clone --quiet --no-checkout -- %s %s' % (git, q(repo), q(layout.checkout)),
        'cd %s' % q(layout.checkout),
        # No ref: the clone's HEAD is the default branch; --force fills the work tree --no-checkout left empty.
        '%s checkout --quiet %s --' % (git, q(ref)) if ref is not None else '%s checkout --quiet --force' % git,
        'echo "head $(git rev-parse HEAD)"',
        'echo "branch $(git symbolic-ref --quiet --short HEAD || true)"',
    ])
    try:
        result = guest.run(as_agent(layout, ssh_user, script), stdin=stdin, timeout=timeout, what='git clone')
    except SshCommandFailed as exc:
        said = '%s' % (exc.details.get('stderr_tail') or exc)
        hint = _credentials_hint(said, git_token)
        raise GuestError('Cloning %s at %s into %s failed: %s%s. Fix the repository, ref or login and run the create '
                         'again (it goes on at the checkout), or destroy the workspace.'
                         % (repo, repr(ref) if ref is not None else 'its default branch', layout.checkout,
                            said.rstrip('.'), hint), step='checkout')
    said = dict(line.partition(' ')[::2] for line in result.stdout.splitlines()[-2:])
    return said['head'].strip(), said['branch'].strip() or None


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
    """Send one request to the runner; returns its answer (``alive`` False when it does not answer).

    The client is the runner's own ``call``, started without the ``site`` module and isolated from the environment
    (``-I -S``): it needs nothing but the standard library, and what a guest's site-packages run at every start is
    a quarter of the call's CPU time with Debian 12's python3 (52 ms a call with ``site``, 40 ms without). The
    expiry sweep makes one such call per live workspace."""
    command = 'python3 -I -S %s call --socket %s --timeout %s -' % (q(layout.runner), q(layout.socket), int(timeout))
    try:
        result = guest.run(as_agent(layout, ssh_user, command), stdin=json.dumps(request), check=False,
                           timeout=timeout + 10, what='runner %s' % request.get('op'), point=point,
                           max_output=RUNNER_ANSWER_LIMIT)
    except SshOutputTooLarge as err:
        # The runner runs as the agent: what it answers is the agent's to choose, and so is its size.
        return {'ok': False, 'alive': None, 'error': str(err)}
    try:
        answer = json.loads(result.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return {'ok': False, 'alive': False, 'error': tail(result.stderr or result.stdout) or 'no answer'}
    if not isinstance(answer, dict):
        return {'ok': False, 'alive': None, 'error': 'the runner answered something other than a JSON object'}
    return answer


def write_runner_config(guest, layout, agents):
    """The runner's configuration (the agent's command lines, event stream, environment and files; the workdir, the
    credentials file, the guest's root under which the agent's home lies); it reads it at every brief."""
    config = {'agents': agents, 'workdir': layout.checkout, 'environment_file': layout.credentials,
              'root': layout.root}
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

    result = waiter.wait_for(probe, timeout, waiter.Backoff(start=0.1, maximum=1.0),
                             what='the agent runner to answer on the guest')
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
        raise GuestError('The agent runner refused the brief: %s' % answer.get('error'), step='brief',
                         agent=answer.get('agent'))
    return answer


def message(guest, layout, ssh_user, text, agents, interrupt=False):
    """A follow-up brief: the runner continues the agent's session with ``text``; returns its answer (``busy`` True
    when the agent still works and ``interrupt`` was not asked for)."""
    write_runner_config(guest, layout, agents)
    request = {'op': 'message', 'text': text}
    if interrupt:
        request['interrupt'] = True
    return runner_call(guest, layout, ssh_user, request, timeout=30)
