# -*- coding: utf-8 -*-
# Copyright: ephemera.workspaces contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""ephemera agent runner: the small program that lives in a workspace and runs its coding agent.

The collection copies this file into the guest and starts it as the agent user; it needs only
Python 3's standard library. It serves a Unix socket with a line-JSON protocol: one request
object per line, one answer object per line. Requests (``op``):

``ping``      -> ``{"ok": true, "alive": true, "activity": ..., "briefed": bool, "version": 1}``
``brief``     ``{"op": "brief", "purpose": "...", "agent": "claude-code"}`` starts the agent named
              in the configuration (read again at every brief) with the purpose. An agent that
              cannot be started, or exits with an error within its first half second, fails the
              brief with the reason and its log's last lines. A repeat of the same brief changes
              nothing (``"already": true``) unless its agent failed, which starts it again; a
              different brief while the agent works is refused, unless it says ``"replace": true``
              (a corrected brief): then the agent's process group is stopped (TERM, then KILL after
              a grace period) and the agent starts again on the new brief.
``status``    -> activity, the brief, the agent's pid and exit status, the log's last lines.
``activity``  ``{"op": "activity", "state": "blocked"}``: the agent's own hooks report that it
              waits for input or approval (``blocked``) or works again (``active``).

Activity: ``idle`` before the brief and after the agent exits; ``active`` while it runs;
``blocked`` while it runs and last reported waiting. The runner keeps running when the controller
disconnects (it starts in its own session) and keeps its brief and the agent's identity in its
state directory, so a restarted runner still knows both.

The agent gets ``EPHEMERA_RUNNER`` (this program) and ``EPHEMERA_RUNNER_SOCKET`` in its
environment, so its hooks report with ``"$EPHEMERA_RUNNER" activity blocked`` (or ``active``).

Command line::

    agent_runner.py serve --state-dir DIR --socket PATH --config FILE
    agent_runner.py call --socket PATH '{"op": "ping"}'
    agent_runner.py activity blocked|active [--socket PATH]
"""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import argparse
import json
import os
import pwd
import shlex
import signal
import socket
import stat
import subprocess
import sys
import threading
import time

PROTOCOL_VERSION = 1
LOG_TAIL = 20
ACTIVITIES = ('active', 'idle', 'blocked')
# An agent that exits with an error this soon after its start did not start.
START_GRACE = 0.5
# Seconds a stopped agent has to end after TERM (then KILL), when a corrected brief replaces its brief.
STOP_GRACE = 5.0


def _write_json(path, data):
    tmp = path + '.tmp'
    with open(tmp, 'w') as out:
        json.dump(data, out, sort_keys=True)
        out.flush()
        os.fsync(out.fileno())
    os.rename(tmp, path)


# The most this program reads of a JSON file, a request or an answer: the agent can write its state files.
MAX_JSON = 1024 * 1024


def _read_json(path, default=None):
    try:
        with open(path, 'rb') as src:
            data = src.read(MAX_JSON + 1)
        if len(data) > MAX_JSON:
            return default
        return json.loads(data.decode('utf-8', 'replace'))
    except (IOError, OSError, ValueError):
        return default


def _start_time(pid):
    try:
        with open('/proc/%d/stat' % pid) as stat:
            raw = stat.read()
        return int(raw[raw.rfind(')') + 1:].split()[19])
    except (IOError, OSError, ValueError, IndexError):
        return None


def agent_path(path):
    """The agent's PATH: its own ~/.local/bin first (where a template installs the agent tooling as the agent, and
    where Debian's ~/.profile puts it for a login), then ``path``."""
    try:
        home = pwd.getpwuid(os.getuid()).pw_dir
    except KeyError:
        return path or os.defpath
    local = os.path.join(home, '.local', 'bin')
    parts = [p for p in (path or os.defpath).split(os.pathsep) if p and p != local]
    return os.pathsep.join(([local] if os.path.isdir(local) else []) + parts)


def _read_env_file(path):
    """NAME=value lines (values shell-quoted) of the credentials file; the agent gets them in its environment."""
    env = {}
    if not path or not os.path.exists(path):
        return env
    with open(path) as src:
        for line in src:
            name, sep, value = line.rstrip('\n').partition('=')
            if sep and name.strip() and not name.startswith('#'):
                parts = shlex.split(value) if value else ['']
                env[name.strip()] = parts[0] if parts else ''
    return env


def _bind_path(path):
    """A name to bind or connect to for ``path``: Unix socket paths are limited to about 107 bytes, so a long
    path is reached from its directory by a relative name."""
    if len(path) < 100:
        return path
    os.chdir(os.path.dirname(path))
    return os.path.basename(path)


class Runner:
    def __init__(self, state_dir, config, config_path=None):
        self.state_dir = state_dir
        self.config = config
        self.config_path = config_path
        self.lock = threading.Lock()
        self.child = None
        self.state_path = os.path.join(state_dir, 'state.json')
        self.log_path = os.path.join(state_dir, 'agent.log')
        self.state = _read_json(self.state_path, {}) or {}

    # -- state -----------------------------------------------------------

    def _save(self):
        _write_json(self.state_path, self.state)

    def _agent_running(self):
        if self.child is not None:
            code = self.child.poll()
            if code is None:
                return True
            self.child = None
            self._finished(code)
            return False
        agent = self.state.get('agent_process')
        if agent and agent.get('ended_at') is None:
            # Started by an earlier runner: alive while that pid still has the same start time.
            if _start_time(agent['pid']) == agent.get('start_time'):
                return True
            self._finished(None)
        return False

    def _finished(self, code):
        agent = self.state.get('agent_process') or {}
        if agent.get('ended_at') is None:
            # None: it was started by an earlier runner, so its exit status cannot be known.
            agent['exit'] = code
            agent['ended_at'] = time.time()
            self.state['agent_process'] = agent
            self.state['activity'] = 'idle'
            self.state['activity_since'] = time.time()
            self._save()

    def activity(self):
        if self._agent_running():
            reported = self.state.get('activity')
            return reported if reported in ('active', 'blocked') else 'active'
        return 'idle'

    # -- operations --------------------------------------------------------

    def op_ping(self, request):
        return {'ok': True, 'alive': True, 'activity': self.activity(), 'briefed': 'brief' in self.state,
                'version': PROTOCOL_VERSION}

    def op_status(self, request):
        activity = self.activity()
        return {'ok': True, 'activity': activity, 'activity_since': self.state.get('activity_since'),
                'brief': self.state.get('brief'), 'agent_process': self.state.get('agent_process'),
                'log_tail': self._log_tail(), 'version': PROTOCOL_VERSION}

    def op_activity(self, request):
        wanted = request.get('state')
        if wanted not in ('active', 'blocked'):
            return {'ok': False, 'error': 'activity state must be active or blocked, not %r' % (wanted,)}
        if not self._agent_running():
            return {'ok': False, 'error': 'no agent is running'}
        if self.state.get('activity') != wanted:
            self.state['activity'] = wanted
            self.state['activity_since'] = time.time()
            self._save()
        return {'ok': True, 'activity': wanted}

    def op_brief(self, request):
        purpose = request.get('purpose')
        agent = request.get('agent')
        if not purpose or not agent:
            return {'ok': False, 'error': 'a brief needs a purpose and an agent'}
        self._reload_config()
        commands = self.config.get('agents') or {}
        if agent not in commands:
            return {'ok': False, 'error': 'unknown agent %r; configured: %s' % (agent, ', '.join(sorted(commands)))}
        brief = {'purpose': purpose, 'agent': agent}
        current = self.state.get('brief')
        running = self._agent_running()
        if current and dict((k, current.get(k)) for k in brief) == brief and not self._agent_failed():
            return {'ok': True, 'already': True, 'activity': self.activity()}
        if running and not request.get('replace'):
            return {'ok': False, 'error': 'the agent is still working on an earlier brief'}
        if running:
            self._stop_agent()
        argv = [part.replace('{purpose}', purpose) for part in commands[agent]]
        workdir = self.config.get('workdir') or self.state_dir
        env = dict(os.environ, EPHEMERA_RUNNER=os.path.abspath(__file__),
                   EPHEMERA_RUNNER_SOCKET=self.config.get('socket', ''), EPHEMERA_PURPOSE=purpose)
        env.update(_read_env_file(self.config.get('environment_file')))
        env['PATH'] = agent_path(env.get('PATH'))
        with open(self.log_path, 'ab') as log:
            try:
                child = subprocess.Popen(argv, cwd=workdir, stdin=subprocess.DEVNULL, stdout=log, stderr=log, env=env,
                                         start_new_session=True)
            except OSError as exc:
                return {'ok': False, 'error': 'cannot start the agent %r (%s): %s' % (agent, argv[0], exc)}
        self.child = child
        brief['briefed_at'] = time.time()
        self.state.update(brief=brief, activity='active', activity_since=time.time(),
                          agent_process={'pid': child.pid, 'start_time': _start_time(child.pid), 'exit': None,
                                         'started_at': time.time(), 'ended_at': None})
        self._save()
        try:
            code = child.wait(START_GRACE)
        except subprocess.TimeoutExpired:
            code = None
        if code:
            self._agent_running()
            return {'ok': False, 'error': 'the agent %r (%s) exited with status %d right after it started; its log '
                                          'ends:\n%s' % (agent, argv[0], code, '\n'.join(self._log_tail()[-10:]))}
        return {'ok': True, 'already': False, 'activity': self.activity(), 'pid': child.pid}

    def _stop_agent(self):
        """Stop the running agent and everything it started (its own session): TERM, then KILL."""
        agent = self.state.get('agent_process') or {}
        pid = agent.get('pid')
        for signum, grace in ((signal.SIGTERM, STOP_GRACE), (signal.SIGKILL, STOP_GRACE)):
            try:
                os.killpg(pid, signum)
            except OSError:
                pass
            deadline = time.time() + grace
            while time.time() < deadline and self._agent_running():
                time.sleep(0.05)
            if not self._agent_running():
                return

    def _agent_failed(self):
        """True when the last agent ended with an error status: the same brief may start it again."""
        agent = self.state.get('agent_process') or {}
        return agent.get('ended_at') is not None and agent.get('exit') not in (0, None)

    def _reload_config(self):
        """The controller rewrites the configuration before a brief (a corrected command line, say)."""
        if self.config_path:
            fresh = _read_json(self.config_path)
            if isinstance(fresh, dict):
                self.config = dict(fresh, socket=self.config.get('socket'))

    def _log_tail(self):
        try:
            with open(self.log_path, 'rb') as log:
                log.seek(0, os.SEEK_END)
                log.seek(max(log.tell() - 8192, 0))
                return log.read().decode('utf-8', 'replace').splitlines()[-LOG_TAIL:]
        except (IOError, OSError):
            return []

    def handle(self, line):
        try:
            request = json.loads(line)
        except ValueError:
            return {'ok': False, 'error': 'a request is one JSON object per line'}
        if not isinstance(request, dict):
            return {'ok': False, 'error': 'a request is one JSON object per line'}
        method = getattr(self, 'op_%s' % request.get('op'), None)
        if method is None:
            return {'ok': False, 'error': 'unknown op %r; known: ping, brief, status, activity' % (request.get('op'),)}
        with self.lock:
            return method(request)


def _user():
    try:
        import pwd  # pylint: disable=import-outside-toplevel
        return pwd.getpwuid(os.getuid()).pw_name
    except (ImportError, KeyError):
        return 'uid %d' % os.getuid()


def _terminate(signum, frame):
    raise SystemExit(0)


def _say(line):
    sys.stdout.write(line + '\n')
    sys.stdout.flush()


def serve(args):
    with open(args.config) as src:
        config = json.load(src)
    config['socket'] = args.socket
    if not os.path.isdir(args.state_dir):
        os.makedirs(args.state_dir, 0o700)
    runner = Runner(args.state_dir, config, os.path.abspath(args.config))
    if os.path.lexists(args.socket):
        if not stat.S_ISSOCK(os.lstat(args.socket).st_mode):
            _say('cannot serve on %s: something other than a socket is there; remove it' % args.socket)
            return 5
        # A socket left by a runner that died.
        os.unlink(args.socket)
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        server.bind(_bind_path(args.socket))
    except (IOError, OSError) as exc:
        # The socket belongs in the runner's own state directory, which the user it runs as may write.
        _say('cannot serve on %s as %s: %s' % (args.socket, _user(), exc))
        return 5
    os.chmod(args.socket, 0o660)
    server.listen(16)
    _write_json(os.path.join(args.state_dir, 'runner.json'),
                {'pid': os.getpid(), 'start_time': _start_time(os.getpid()), 'socket': args.socket})
    signal.signal(signal.SIGTERM, _terminate)
    # Reap the agent promptly so that activity turns idle when it exits.
    threading.Thread(target=_watch, args=(runner,), daemon=True).start()
    while True:
        conn = server.accept()[0]
        threading.Thread(target=_client, args=(runner, conn), daemon=True).start()


def _watch(runner):
    while True:
        with runner.lock:
            runner.activity()
        time.sleep(0.2)


def _client(runner, conn):
    with conn:
        stream = conn.makefile('rwb')
        while True:
            line = stream.readline(MAX_JSON + 1)
            if not line or len(line) > MAX_JSON:
                return
            if not line.strip():
                continue
            stream.write((json.dumps(runner.handle(line.decode('utf-8', 'replace'))) + '\n').encode('utf-8'))
            stream.flush()


def call(args):
    client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    client.settimeout(args.timeout)
    request = sys.stdin.read(MAX_JSON) if args.request == '-' else args.request
    try:
        client.connect(_bind_path(args.socket))
    except (IOError, OSError) as exc:
        _say(json.dumps({'ok': False, 'alive': False, 'error': 'runner not answering on %s: %s' % (args.socket, exc)}))
        return 3
    with client:
        stream = client.makefile('rwb')
        stream.write((request.strip() + '\n').encode('utf-8'))
        stream.flush()
        answer = stream.readline(MAX_JSON + 1).decode('utf-8', 'replace')
    if len(answer) > MAX_JSON:
        _say(json.dumps({'ok': False, 'alive': True, 'error': 'the runner answered more than %d bytes' % MAX_JSON}))
        return 4
    _say(answer.strip())
    return 0 if json.loads(answer).get('ok') else 4


def report(args):
    """What an agent's hook runs: tell the runner the agent waits (blocked) or works again (active)."""
    args.request = json.dumps({'op': 'activity', 'state': args.state})
    return call(args)


def main(argv=None):
    parser = argparse.ArgumentParser(prog='agent_runner.py', description='ephemera agent runner')
    sub = parser.add_subparsers(dest='command')
    p_serve = sub.add_parser('serve')
    p_serve.add_argument('--state-dir', required=True)
    p_serve.add_argument('--socket', required=True)
    p_serve.add_argument('--config', required=True)
    p_call = sub.add_parser('call')
    p_call.add_argument('--socket', required=True)
    p_call.add_argument('--timeout', type=float, default=10.0)
    p_call.add_argument('request', help="one JSON request, or - to read it from standard input")
    p_activity = sub.add_parser('activity', help="report the agent's activity (for its hooks)")
    p_activity.add_argument('state', choices=['blocked', 'active'])
    p_activity.add_argument('--socket', default=os.environ.get('EPHEMERA_RUNNER_SOCKET'))
    p_activity.add_argument('--timeout', type=float, default=10.0)
    args = parser.parse_args(argv)
    if args.command == 'serve':
        return serve(args)
    if args.command == 'call':
        return call(args)
    if args.command == 'activity':
        if not args.socket:
            parser.error('no socket: give --socket, or run it where EPHEMERA_RUNNER_SOCKET is set')
        return report(args)
    parser.print_help()
    return 2


if __name__ == '__main__':
    raise SystemExit(main())
