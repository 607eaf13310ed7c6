# -*- coding: utf-8 -*-
# Copyright: ephemera.workspaces contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""ephemera agent runner: the small program that lives in a workspace and runs its coding agent.

The collection copies this file into the guest and starts it as the agent user; it needs only
Python 3's standard library. It serves a Unix socket with a line-JSON protocol: one request
object per line, one answer object per line. Requests (``op``):

``ping``      -> ``{"ok": true, "alive": true, "activity": ..., "briefed": bool, "version": 2, "agent": {...}}``
              where ``agent`` is what the runner knows of the agent: its session, whether the model answered
              since the last start, the error it stopped on, what it waits for, its exit status and its last
              events (bounded).
``brief``     ``{"op": "brief", "purpose": "...", "agent": "claude-code"}`` starts the agent named in the
              configuration (read again at every brief) with the purpose. An agent that cannot be started, or
              exits with an error within its first half second, fails the brief with the reason and its log's last
              lines. A repeat of the same brief changes nothing (``"already": true``) unless its agent failed, which
              starts it again; a different brief while the agent works is refused, unless it says
              ``"replace": true`` (a corrected brief): then the agent's process group is stopped (TERM, then KILL
              after a grace period) and the agent starts again on the new brief.
``message``   ``{"op": "message", "text": "..."}`` a follow-up brief: the agent's ``continue`` command line
              carries on the same agent session (the session id its events named) with the text. Refused while
              the agent works, unless it says ``"interrupt": true``.
``status``    -> activity, the brief, the agent's pid and exit status, the log's last lines, the events kept.
``activity``  ``{"op": "activity", "state": "blocked"}``: the agent's own hooks report that it waits for input or
              approval (``blocked``) or works again (``active``).

The configuration names each agent's command lines and the form of its event stream (``events``): ``claude``
(``claude -p --output-format stream-json``), ``codex`` (``codex exec --json``), ``opencode`` (``opencode run
--format json``), or ``lines`` (plain output, no events). A structured agent's standard output is written to a
file of the state directory and read as the agent writes it, so a restarted runner goes on reading where the
last one stopped. Its events set the activity: ``active`` while it works, ``blocked`` while it waits for an
approval it cannot get (and after it finished with such a request unanswered), ``idle`` when it finished; an
error it stopped on (the model endpoint refused the key, rate-limited, overloaded, failed) is kept with its kind.

The runner keeps running when the controller disconnects (it starts in its own session) and keeps its state in
its state directory. The agent gets ``EPHEMERA_RUNNER`` (this program) and ``EPHEMERA_RUNNER_SOCKET`` in its
environment, so its hooks report with ``"$EPHEMERA_RUNNER" activity blocked`` (or ``active``); its credentials
come from the environment file only, never from its command line.

Command line::

    agent_runner.py serve --state-dir DIR --socket PATH --config FILE
    agent_runner.py call --socket PATH '{"op": "ping"}'
    agent_runner.py activity blocked|active [--socket PATH]
"""

import argparse
import json
import os
import pwd
import re
import shlex
import signal
import socket
import stat
import subprocess
import sys
import threading
import time

PROTOCOL_VERSION = 2
LOG_TAIL = 20
ACTIVITIES = ('active', 'idle', 'blocked')
# An agent that exits with an error this soon after its start did not start.
START_GRACE = 0.5
# Seconds a stopped agent has to end after TERM (then KILL), when a corrected brief replaces its brief.
STOP_GRACE = 5.0
# Seconds between the watch's looks at the agent: while its events or its activity move, and at most while they don't.
WATCH_FAST = 0.2
WATCH_SLOW = 1.0
# Events the state keeps, and how many a ping carries.
EVENTS_KEPT = 40
EVENTS_PINGED = 10
# Characters of an event's text that are kept.
EVENT_TEXT = 240
# The longest line of an agent's event stream that is read (a tool's output can be long); longer ones are skipped.
MAX_EVENT_LINE = 8 * 1024 * 1024
STREAM_FORMATS = ('claude', 'codex', 'opencode', 'lines')
# Kinds of error an agent stops on, as the events say them.
ERROR_KINDS = ('auth', 'rate_limit', 'overloaded', 'server', 'network', 'agent')
# Errors no retry of the agent's own can get past (the key was refused): the runner stops the agent at the first.
FATAL_KINDS = ('auth',)


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
        with open('/proc/%d/stat' % pid) as stat_file:
            raw = stat_file.read()
        return int(raw[raw.rfind(')') + 1:].split()[19])
    except (IOError, OSError, ValueError, IndexError):
        return None


def _ticks():
    return float(os.sysconf('SC_CLK_TCK')) if hasattr(os, 'sysconf') else 100.0


def _stat(pid, ticks):
    """``(ppid, CPU seconds)`` of process ``pid`` (its own and its reaped children's), or None when it is gone."""
    try:
        with open('/proc/%d/stat' % pid) as stat_file:
            raw = stat_file.read()
        fields = raw[raw.rfind(')') + 1:].split()
        # After the name: state ppid ... utime(11) stime(12) cutime(13) cstime(14), counted from state = 0.
        return int(fields[1]), sum(int(f) for f in fields[11:15]) / ticks
    except (IOError, OSError, ValueError, IndexError):
        return None


def _proc_stats():
    """Each process's parent and CPU seconds (its own and its reaped children's): ``{pid: (ppid, seconds)}``."""
    ticks = _ticks()
    found = {}
    try:
        pids = [int(p) for p in os.listdir('/proc') if p.isdigit()]
    except OSError:
        return found
    for pid in pids:
        stat = _stat(pid, ticks)
        if stat is not None:
            found[pid] = stat
    return found


def _lists_children(pid):
    """True when this kernel lists a process's children (/proc/PID/task/TID/children: CONFIG_PROC_CHILDREN)."""
    return os.path.exists('/proc/%d/task/%d/children' % (pid, pid))


def _children(pid):
    """The children of process ``pid`` as its threads' /proc/PID/task/TID/children list them ([] when it is gone)."""
    try:
        tasks = os.listdir('/proc/%d/task' % pid)
    except OSError:
        return []
    found = []
    for tid in tasks:
        try:
            with open('/proc/%d/task/%s/children' % (pid, tid)) as src:
                found.extend(int(each) for each in src.read().split())
        except (IOError, OSError, ValueError):
            continue
    return found


def cpu_seconds(pid):
    """The CPU seconds of process ``pid`` and every live descendant (with the children each has reaped), or None
    when it is gone. It walks down from ``pid`` and reads only those processes (a guest may run thousands of others:
    a build, a test suite); on a kernel that does not list children, from one scan of /proc."""
    ticks = _ticks()
    if _stat(pid, ticks) is None:
        return None
    if not _lists_children(pid):
        return _cpu_seconds_by_scan(pid)
    return _tree_seconds(pid, lambda each: _stat(each, ticks), _children)


def _cpu_seconds_by_scan(pid):
    """cpu_seconds from every process's parent, in one scan of /proc."""
    stats = _proc_stats()
    if pid not in stats:
        return None
    children = {}
    for each, (parent, dummy) in stats.items():
        children.setdefault(parent, []).append(each)
    return _tree_seconds(pid, stats.get, lambda each: children.get(each, ()))


def _tree_seconds(pid, stat_of, children_of):
    """The CPU seconds of ``pid`` and its descendants: ``stat_of(each)`` is ``(ppid, seconds)`` or None for a process
    gone meanwhile, ``children_of(each)`` its children."""
    total, todo, seen = 0.0, [pid], set()
    while todo:
        each = todo.pop()
        if each in seen:
            continue
        seen.add(each)
        stat = stat_of(each)
        if stat is not None:
            total += stat[1]
            todo.extend(children_of(each))
    return total


def agent_home(root='/'):
    """The agent's home: its passwd entry's, under ``root`` (the guest's root; ``/`` on a real guest)."""
    try:
        home = pwd.getpwuid(os.getuid()).pw_dir
    except KeyError:
        home = os.environ.get('HOME') or '/'
    return os.path.normpath(os.path.join(root or '/', home.lstrip('/')))


def agent_path(path, home=None):
    """The agent's PATH: its own ~/.local/bin first (where a template installs the agent tooling as the agent, and
    where Debian's ~/.profile puts it for a login), then ``path``."""
    home = home or agent_home()
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


# ---------------------------------------------------------------- the agents' event streams

def _short(value, limit=EVENT_TEXT):
    text = value if isinstance(value, str) else json.dumps(value, sort_keys=True)
    text = ' '.join(text.split())
    return text if len(text) <= limit else text[:limit - 1] + '\u2026'


_STATUS = re.compile(r'\b(401|403|408|429|500|502|503|504|529)\b')


def error_kind(text, status=None):
    """What an error an agent reports is: ``auth``, ``rate_limit``, ``overloaded``, ``server``, ``network`` or
    ``agent`` (its own), from the HTTP status it names or its words."""
    low = (text or '').lower()
    if status is None:
        found = _STATUS.search(text or '')
        status = int(found.group(1)) if found else None
    if status in (401, 403) or any(w in low for w in ('authentication', 'invalid api key', 'invalid x-api-key',
                                                      'unauthorized', 'api key', 'permission_error')):
        return 'auth'
    if status == 429 or 'rate limit' in low or 'rate_limit' in low or 'too many requests' in low:
        return 'rate_limit'
    if status in (503, 529) or 'overloaded' in low or 'high demand' in low:
        return 'overloaded'
    if status in (500, 502, 504) or 'internal server error' in low or 'server_error' in low:
        return 'server'
    if any(w in low for w in ('connection', 'network', 'stream disconnected', 'timed out', 'timeout', 'econn',
                              'socket', 'terminated')):
        return 'network'
    return 'agent'


def _tool_text(name, args):
    """A tool call in a few words: its name and what it acts on."""
    if isinstance(args, str):
        try:
            args = json.loads(args)
        except ValueError:
            return '%s %s' % (name, _short(args, 160))
    if not isinstance(args, dict):
        return str(name)
    for key in ('file_path', 'filePath', 'path', 'command', 'cmd', 'pattern', 'url', 'description'):
        if args.get(key):
            value = args[key]
            return '%s %s' % (name, _short(' '.join(value) if isinstance(value, list) else value, 160))
    return str(name)


def parse_claude(obj):
    """Events of one line of ``claude -p --output-format stream-json --verbose``."""
    kind = obj.get('type')
    out = []
    if kind == 'system':
        sub = obj.get('subtype') or ''
        if sub == 'init' and obj.get('session_id'):
            out.append({'type': 'session', 'session': obj['session_id'], 'text': 'session %s' % obj['session_id']})
        elif 'retry' in sub:
            said = obj.get('error') or obj.get('error_status') or sub
            out.append({'type': 'retry', 'kind': error_kind(str(said), _int(obj.get('error_status'))),
                        'text': _short('retrying (%s)' % said)})
    elif kind == 'assistant':
        message = obj.get('message') or {}
        if obj.get('error'):
            texts = [b.get('text') for b in message.get('content') or [] if isinstance(b, dict) and b.get('text')]
            said = ' '.join(texts) or str(obj['error'])
            out.append({'type': 'error', 'kind': error_kind('%s %s' % (obj['error'], said)), 'text': _short(said)})
            return out
        for block in message.get('content') or []:
            if not isinstance(block, dict):
                continue
            if block.get('type') == 'text' and block.get('text'):
                out.append({'type': 'text', 'text': _short(block['text'])})
            elif block.get('type') == 'tool_use':
                out.append({'type': 'tool', 'text': _tool_text(block.get('name'), block.get('input'))})
    elif kind == 'result':
        denials = obj.get('permission_denials') or []
        for denial in denials:
            if isinstance(denial, dict):
                out.append({'type': 'approval', 'text': 'needs approval: %s' % _tool_text(
                    denial.get('tool_name'), denial.get('tool_input'))})
        if obj.get('is_error'):
            said = obj.get('result') or obj.get('subtype') or 'error'
            out.append({'type': 'error', 'kind': error_kind(str(said)), 'text': _short(said)})
        else:
            out.append({'type': 'result', 'ok': True, 'text': _short(obj.get('result') or 'done')})
    return out


def parse_codex(obj):
    """Events of one line of ``codex exec --json``."""
    kind = obj.get('type') or ''
    out = []
    if kind == 'thread.started' and obj.get('thread_id'):
        out.append({'type': 'session', 'session': obj['thread_id'], 'text': 'session %s' % obj['thread_id']})
    elif kind in ('item.started', 'item.completed', 'item.updated'):
        item = obj.get('item') or {}
        itype = item.get('type')
        if kind == 'item.completed' and itype == 'agent_message' and item.get('text'):
            out.append({'type': 'text', 'text': _short(item['text'])})
        elif kind == 'item.started' and itype == 'command_execution':
            out.append({'type': 'tool', 'text': _tool_text('shell', {'command': item.get('command')})})
        elif kind == 'item.completed' and itype == 'command_execution' and item.get('status') == 'failed':
            said = (item.get('aggregated_output') or '').strip().splitlines()
            out.append({'type': 'notice', 'text': _short('the command failed (exit %s)%s' % (
                item.get('exit_code'), ': ' + said[-1] if said else ''))})
        elif kind == 'item.completed' and itype == 'file_change':
            paths = [c.get('path') for c in item.get('changes') or [] if isinstance(c, dict)]
            out.append({'type': 'tool', 'text': _short('edit %s' % ', '.join(p for p in paths if p))})
        elif kind == 'item.completed' and itype in ('mcp_tool_call', 'web_search'):
            out.append({'type': 'tool', 'text': _short('%s %s' % (itype, item.get('tool') or item.get('query') or ''))})
        elif kind == 'item.completed' and itype == 'error' and item.get('message'):
            out.append({'type': 'notice', 'text': _short(item['message'])})
        elif itype in ('approval_request', 'exec_approval_request', 'apply_patch_approval_request'):
            out.append({'type': 'approval', 'text': _short('needs approval: %s' % (
                item.get('command') or item.get('reason') or itype))})
    elif kind == 'error':
        said = str(obj.get('message') or 'error')
        if said.lower().startswith('reconnecting'):
            out.append({'type': 'retry', 'kind': error_kind(said), 'text': _short(said)})
        else:
            out.append({'type': 'error', 'kind': error_kind(said), 'text': _short(said)})
    elif kind == 'turn.failed':
        said = str((obj.get('error') or {}).get('message') or 'the turn failed')
        out.append({'type': 'error', 'kind': error_kind(said), 'text': _short(said)})
    elif kind == 'turn.completed':
        out.append({'type': 'result', 'ok': True, 'text': 'turn completed'})
    return out


def parse_opencode(obj):
    """Events of one line of ``opencode run --format json``."""
    kind = obj.get('type') or ''
    part = obj.get('part') if isinstance(obj.get('part'), dict) else {}
    out = []
    session = obj.get('sessionID') or part.get('sessionID')
    if session:
        out.append({'type': 'session', 'session': session, 'text': 'session %s' % session, 'quiet': True})
    if kind == 'text' and part.get('text'):
        out.append({'type': 'text', 'text': _short(part['text'])})
    elif kind in ('tool_use', 'tool'):
        state = part.get('state') if isinstance(part.get('state'), dict) else {}
        out.append({'type': 'tool', 'text': _tool_text(part.get('tool') or 'tool', state.get('input'))})
        if state.get('status') == 'error' and 'permission' in str(state.get('error') or '').lower():
            out.append({'type': 'approval', 'text': _short('needs approval: %s' % state.get('error'))})
    elif kind in ('permission', 'permission.asked', 'permission.updated'):
        out.append({'type': 'approval', 'text': _short('needs approval: %s' % (
            part.get('title') or obj.get('title') or part.get('permission') or 'a tool'))})
    elif kind == 'error':
        error = obj.get('error') if isinstance(obj.get('error'), dict) else {}
        data = error.get('data') if isinstance(error.get('data'), dict) else {}
        said = str(data.get('message') or error.get('message') or error.get('name') or obj.get('message') or 'error')
        out.append({'type': 'error', 'kind': error_kind(said, _int(data.get('statusCode'))), 'text': _short(said)})
    elif kind in ('step_finish', 'step-finish') and part.get('reason') in ('stop', 'end_turn'):
        out.append({'type': 'result', 'ok': True, 'text': 'finished'})
    return out


def _int(value):
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


PARSERS = {'claude': parse_claude, 'codex': parse_codex, 'opencode': parse_opencode}


# ---------------------------------------------------------------- the runner

class Runner:
    def __init__(self, state_dir, config, config_path=None):
        self.state_dir = state_dir
        self.config = config
        self.config_path = config_path
        self.lock = threading.Lock()
        self.child = None
        self.state_path = os.path.join(state_dir, 'state.json')
        self.log_path = os.path.join(state_dir, 'agent.log')
        self.stream_path = os.path.join(state_dir, 'stream.jsonl')
        self.state = _read_json(self.state_path, {}) or {}
        # The values of the agent's credentials: never repeated in an event, whatever the agent prints.
        self._secrets = None
        # The agent retries what cannot succeed (its key was refused): stop it once its events are read.
        self._refused = False

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
            # What the agent wrote before it ended is read first: its last events say how it ended.
            self.read_stream()
            # None: it was started by an earlier runner, so its exit status cannot be known.
            agent['exit'] = code
            agent['ended_at'] = time.time()
            self.state['agent_process'] = agent
            if code and not self.state.get('error'):
                self.state['error'] = {'kind': 'agent', 'at': time.time(),
                                       'message': _short('exited with status %d: %s' % (
                                           code, ' | '.join(self._log_tail()[-3:]) or 'no output'))}
            self._event({'type': 'exited', 'text': 'exited with status %s' % ('unknown' if code is None else code)})
            self._set_activity('blocked' if self.state.get('waiting') else 'idle')
            self._save()

    def _set_activity(self, activity):
        if self.state.get('activity') != activity:
            self.state['activity'] = activity
            self.state['activity_since'] = time.time()

    def activity(self):
        if self._agent_running():
            reported = self.state.get('activity')
            return reported if reported in ('active', 'blocked') else 'active'
        return 'blocked' if self.state.get('waiting') else 'idle'

    # -- the event stream --------------------------------------------------

    def _event(self, event):
        event = dict(event, at=round(time.time(), 3))
        kept = self.state.setdefault('events', [])
        kept.append(event)
        del kept[:-EVENTS_KEPT]
        self.state['events_seen'] = self.state.get('events_seen', 0) + 1

    def read_stream(self):
        """Read what the agent wrote to its event stream since the last read; apply each event. True if any."""
        stream = self.state.get('stream') or {}
        parser = PARSERS.get(stream.get('format'))
        if parser is None:
            return False
        try:
            with open(self.stream_path, 'rb') as src:
                src.seek(stream.get('offset', 0))
                data = src.read(MAX_EVENT_LINE * 2)
        except (IOError, OSError):
            return False
        end = data.rfind(b'\n')
        if end < 0:
            if len(data) >= MAX_EVENT_LINE:
                stream['offset'] = stream.get('offset', 0) + len(data)
                self._save()
            return False
        stream['offset'] = stream.get('offset', 0) + end + 1
        for line in data[:end].split(b'\n'):
            line = line.strip()
            if not line.startswith(b'{'):
                continue
            try:
                obj = json.loads(line.decode('utf-8', 'replace'))
            except ValueError:
                continue
            if isinstance(obj, dict):
                for event in parser(obj):
                    self._apply(event)
        self._save()
        if self._refused:
            self._refused = False
            if self._agent_running():
                self._event({'type': 'stopped', 'text': 'stopped: %s' % self.state['error']['message']})
                self._stop_agent()
        return True

    def _scrub(self, text):
        if self._secrets is None:
            self._secrets = sorted((v for v in _read_env_file(self.config.get('environment_file')).values()
                                    if len(v) >= 6), key=len, reverse=True)
        for secret in self._secrets:
            text = text.replace(secret, '********')
        return text

    def _apply(self, event):
        if isinstance(event.get('text'), str):
            event['text'] = self._scrub(event['text'])
        kind = event['type']
        if kind == 'session':
            if self.state.get('session') == event['session']:
                return
            self.state['session'] = event['session']
        elif kind in ('text', 'tool'):
            self.state['answered'] = True
            if self.state.get('activity') == 'blocked' and not self.state.get('hook_blocked'):
                self._set_activity('active')
        elif kind == 'approval':
            self.state['answered'] = True
            waiting = self.state.setdefault('waiting', [])
            if event['text'] not in waiting:
                waiting.append(event['text'])
            self._set_activity('blocked')
        elif kind == 'error' or (kind == 'retry' and event.get('kind') in FATAL_KINDS):
            self.state['error'] = {'kind': event.get('kind') or 'agent', 'message': event['text'], 'at': time.time()}
            if kind == 'retry':
                # Asking again with a key the endpoint refused cannot work: stop the agent rather than let it retry
                # for minutes; a brief with a corrected key starts it again.
                self._refused = True
        elif kind == 'result':
            self.state['answered'] = True
        self._event({k: v for k, v in event.items() if k != 'quiet'})

    # -- operations --------------------------------------------------------

    def agent_view(self, events=EVENTS_PINGED):
        """What the controller records of the agent."""
        process = self.state.get('agent_process') or {}
        return {'name': (self.state.get('brief') or {}).get('agent'), 'session': self.state.get('session'),
                'answered': bool(self.state.get('answered')), 'error': self.state.get('error'),
                'waiting': list(self.state.get('waiting') or []), 'briefs': self.state.get('briefs', 0),
                'running': self._agent_running(), 'exit': process.get('exit'), 'started_at': process.get('started_at'),
                'ended_at': process.get('ended_at'), 'activity_since': self.state.get('activity_since'),
                'events': (self.state.get('events') or [])[-events:] if events else [],
                'events_seen': self.state.get('events_seen', 0), 'progress': self.progress()}

    def progress(self):
        """What changes while the agent works: its events, what it wrote, and the CPU time of its processes (whole
        seconds). The controller counts an agent as working only while this changes."""
        process = self.state.get('agent_process') or {}
        cpu = cpu_seconds(process['pid']) if process.get('pid') and self._agent_running() else None
        written = 0
        for path in (self.stream_path, self.log_path):
            try:
                written += os.stat(path).st_size
            except OSError:
                pass
        return {'events': self.state.get('events_seen', 0), 'written': written,
                'cpu': None if cpu is None else int(cpu)}

    def op_ping(self, request):
        self.read_stream()
        return {'ok': True, 'alive': True, 'activity': self.activity(), 'briefed': 'brief' in self.state,
                'version': PROTOCOL_VERSION, 'agent': self.agent_view()}

    def op_status(self, request):
        self.read_stream()
        activity = self.activity()
        return {'ok': True, 'activity': activity, 'activity_since': self.state.get('activity_since'),
                'brief': self.state.get('brief'), 'agent_process': self.state.get('agent_process'),
                'log_tail': self._log_tail(), 'version': PROTOCOL_VERSION, 'agent': self.agent_view(EVENTS_KEPT)}

    def op_activity(self, request):
        wanted = request.get('state')
        if wanted not in ('active', 'blocked'):
            return {'ok': False, 'error': 'activity state must be active or blocked, not %r' % (wanted,)}
        if not self._agent_running():
            return {'ok': False, 'error': 'no agent is running'}
        self.state['hook_blocked'] = wanted == 'blocked'
        if self.state.get('activity') != wanted:
            self._set_activity(wanted)
            self._event({'type': 'hook', 'text': 'the agent reports %s' % wanted})
            self._save()
        return {'ok': True, 'activity': wanted}

    def op_brief(self, request):
        purpose = request.get('purpose')
        agent = request.get('agent')
        if not purpose or not agent:
            return {'ok': False, 'error': 'a brief needs a purpose and an agent'}
        self._reload_config()
        spec = self._spec(agent)
        if isinstance(spec, str):
            return {'ok': False, 'error': spec}
        brief = {'purpose': purpose, 'agent': agent}
        current = self.state.get('brief')
        running = self._agent_running()
        if current and {k: current.get(k) for k in brief} == brief and not self._agent_failed():
            return {'ok': True, 'already': True, 'activity': self.activity(), 'agent': self.agent_view()}
        if running and not request.get('replace'):
            return {'ok': False, 'error': 'the agent is still working on an earlier brief'}
        if running:
            self._stop_agent()
        # A new brief starts a new session of the agent.
        self.state.pop('session', None)
        brief['briefed_at'] = time.time()
        return self._start(spec, spec['command'], purpose, dict(brief=brief, briefs=1, messages=0), 'brief')

    def op_message(self, request):
        text = request.get('text')
        if not isinstance(text, str) or not text.strip():
            return {'ok': False, 'error': 'a message needs a text'}
        brief = self.state.get('brief')
        if not brief:
            return {'ok': False, 'error': 'the agent was never briefed: brief it first'}
        self._reload_config()
        spec = self._spec(brief['agent'])
        if isinstance(spec, str):
            return {'ok': False, 'error': spec}
        if self._agent_running():
            if not request.get('interrupt'):
                return {'ok': False, 'busy': True, 'activity': self.activity(),
                        'error': 'the agent is still working; send the message once it is idle or blocked, or with '
                                 'interrupt'}
            self._stop_agent()
        session = self.state.get('session')
        argv = spec.get('continue') if session else spec.get('continue_latest')
        if not argv:
            return {'ok': False, 'error': 'the agent %r cannot continue a session%s: give it a "continue" command '
                                          'line' % (brief['agent'], '' if session else ' it never named')}
        argv = [part.replace('{session}', session or '') for part in argv]
        return self._start(spec, argv, text, dict(briefs=self.state.get('briefs', 1) + 1,
                                                  messages=self.state.get('messages', 0) + 1), 'message')

    def _spec(self, agent):
        """The agent's entry of the configuration as a dict, or why there is none."""
        agents = self.config.get('agents') or {}
        spec = agents.get(agent)
        if spec is None:
            return 'unknown agent %r; configured: %s' % (agent, ', '.join(sorted(agents)))
        if isinstance(spec, list):
            spec = {'command': spec, 'events': 'lines'}
        if not isinstance(spec, dict) or not isinstance(spec.get('command'), list) or not spec['command']:
            return 'the agent %r has no command line in the configuration' % agent
        if spec.get('events', 'lines') not in STREAM_FORMATS:
            return 'the agent %r has an unknown event stream %r (known: %s)' % (
                agent, spec.get('events'), ', '.join(STREAM_FORMATS))
        return spec

    def _environment(self, spec, purpose, home, workdir):
        # PWD too: an agent that takes its project directory from it (opencode) must not see the runner's.
        env = dict(os.environ, EPHEMERA_RUNNER=os.path.abspath(__file__),
                   EPHEMERA_RUNNER_SOCKET=self.config.get('socket', ''), EPHEMERA_PURPOSE=purpose, HOME=home,
                   PWD=workdir)
        env.update({str(k): str(v) for k, v in (spec.get('environment') or {}).items()})
        env.update(_read_env_file(self.config.get('environment_file')))
        env['PATH'] = agent_path(env.get('PATH'), home)
        return env

    def _write_files(self, spec, home):
        """The agent's own configuration files (paths under its home), written before it starts. No secrets: they
        name the environment variables the agent reads its keys from."""
        for name, text in sorted((spec.get('files') or {}).items()):
            path = os.path.normpath(os.path.join(home, name))
            if not path.startswith(home.rstrip('/') + '/'):
                raise OSError('the file %r is not under the agent\'s home' % name)
            if not os.path.isdir(os.path.dirname(path)):
                os.makedirs(os.path.dirname(path), 0o700)
            tmp = path + '.ephemera.tmp'
            with open(tmp, 'w') as out:
                out.write(text)
            os.chmod(tmp, 0o600)
            os.rename(tmp, path)

    def _start(self, spec, argv, text, fields, why):
        argv = [part.replace('{purpose}', text) for part in argv]
        workdir = self.config.get('workdir') or self.state_dir
        home = agent_home(self.config.get('root') or '/')
        form = spec.get('events', 'lines')
        try:
            self._write_files(spec, home)
            env = self._environment(spec, text, home, workdir)
            self._secrets = None
        except (IOError, OSError) as exc:
            return {'ok': False, 'error': 'cannot prepare the agent (%s): %s' % (argv[0], exc)}
        with open(self.log_path, 'ab') as log:
            log.write(('--- %s %s: %s\n' % (time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime()), why, argv[0]))
                      .encode('utf-8'))
            log.flush()
            try:
                if form == 'lines':
                    child = subprocess.Popen(argv, cwd=workdir, stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                                             env=env, start_new_session=True)
                else:
                    with open(self.stream_path, 'wb') as stream:
                        child = subprocess.Popen(argv, cwd=workdir, stdin=subprocess.DEVNULL, stdout=stream,
                                                 stderr=log, env=env, start_new_session=True)
            except OSError as exc:
                return {'ok': False, 'error': 'cannot start the agent %r (%s): %s' % (
                    (self.state.get('brief') or fields.get('brief') or {}).get('agent'), argv[0], exc)}
        self.child = child
        self.state.update(fields)
        self.state.update(activity='active', activity_since=time.time(), answered=form == 'lines', error=None,
                          waiting=[], hook_blocked=False, stream={'format': form, 'offset': 0},
                          agent_process={'pid': child.pid, 'start_time': _start_time(child.pid), 'exit': None,
                                         'started_at': time.time(), 'ended_at': None, 'why': why})
        self._event({'type': why, 'text': self._scrub(_short('%s: %s' % (argv[0], text)))})
        self._save()
        try:
            code = child.wait(START_GRACE)
        except subprocess.TimeoutExpired:
            code = None
        if code:
            self._agent_running()
            return {'ok': False, 'error': 'the agent %r (%s) exited with status %d right after it started; its log '
                                          'ends:\n%s' % (self.state['brief']['agent'], argv[0], code,
                                                         '\n'.join(self._log_tail()[-10:])),
                    'agent': self.agent_view()}
        return {'ok': True, 'already': False, 'activity': self.activity(), 'pid': child.pid, 'agent': self.agent_view()}

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
        """True when the last agent ended with an error status or on an error its events named (a key the model
        endpoint refused): the same brief may start it again."""
        agent = self.state.get('agent_process') or {}
        return agent.get('ended_at') is not None and (agent.get('exit') not in (0, None) or bool(self.state.get('error')))

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
            return {'ok': False, 'error': 'unknown op %r; known: ping, brief, message, status, activity'
                                          % (request.get('op'),)}
        with self.lock:
            return method(request)


def _user():
    try:
        return pwd.getpwuid(os.getuid()).pw_name
    except KeyError:
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
    # Reap the agent promptly and read its events as it writes them, so that activity follows the agent.
    threading.Thread(target=_watch, args=(runner,), daemon=True).start()
    while True:
        conn = server.accept()[0]
        threading.Thread(target=_client, args=(runner, conn), daemon=True).start()


def _watch(runner):
    """Reap the agent and read its events: five times a second while they move, slowing to once a second while
    nothing changes (an answer reads the stream itself, so it is never behind). A host of many containers runs
    as many runners, most of them waiting: one that looked five times a second used 2 ms of CPU a second, so a
    thousand took two cores."""
    pause, last = WATCH_FAST, None
    while True:
        with runner.lock:
            moved = runner.read_stream()
            activity = runner.activity()
        pause = WATCH_FAST if moved or activity != last else min(WATCH_SLOW, pause * 2)
        last = activity
        time.sleep(pause)


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
