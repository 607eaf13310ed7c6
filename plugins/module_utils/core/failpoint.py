# -*- coding: utf-8 -*-
# Copyright: ephemera.workspaces contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Named points in the create and destroy paths where a crash can be made to happen, for the crash-safety tests.

Inert unless ``EPHEMERA_FAILPOINT_TRACE`` names a file: then every point a run passes is appended
to that file as ``<workspace> TAB <where> <what>``, and if ``EPHEMERA_FAILPOINT_KILL`` names the
point (a JSON object ``{"workspace": ..., "point": "<where> <what>", "nth": N}``; a workspace ending in ``*``
names every workspace of that prefix), the N-th time that workspace passes it the whole run is killed with
SIGKILL: the ``ansible-playbook`` process (or whatever program runs the modules), every process below it, and
this one. That is a controller dying at that very place, with nothing flushed, closed or rolled back.

The kill never reaches above the run, even when the variables were exported in a login shell: the
run's top is the highest ancestor that carries the same trace setting *and* runs the same program
as this process (the Python that runs Ansible and its forked workers; never a shell, a terminal or
an SSH session that passed the variable on). The trace file is opened without following a symbolic link, and only a regular file of the
user running Ansible is appended to.

The points are where the issue of crash safety lives: the start of each step (``begin``), right
after every journal commit (``journal <label>``), right after the answer of every mutating API
call arrived (``pve <METHOD> <path>``: the cluster acted, the journal does not know yet), and right
after every command on a guest (``ssh <what>``). ``docs/internals/faults.md`` describes the tests that use
them. Never set these variables outside those tests.
"""

import fcntl
import json
import os
import re
import signal
import stat
import threading

from ansible_collections.ephemera.workspaces.plugins.module_utils.core.errors import EphemeraError
from ansible_collections.ephemera.workspaces.plugins.module_utils.core.run_identity import parent_pid

TRACE_ENV = 'EPHEMERA_FAILPOINT_TRACE'
KILL_ENV = 'EPHEMERA_FAILPOINT_KILL'

# The scope last entered in this process, and each thread's own (the expiry sweep releases several workspaces at
# once, one per thread): a thread that entered none (one a step started) reads the process's.
_scope = {'workspace': '-', 'where': '-'}
_local = threading.local()
# Parts of an API path that name one object, not a kind of call: /nodes/pve1/lxc/104/clone -> /nodes/*/lxc/*/clone
_NAMED = re.compile(r'(?<=/nodes/)[^/]+|(?<=/lxc/)\d+|(?<=/qemu/)\d+|(?<=/tasks/)[^/]+|(?<=/pools/)[^/]+')


def active():
    return bool(os.environ.get(TRACE_ENV))


def enter(workspace, where):
    """From here on, points belong to ``workspace`` at ``where`` (e.g. ``create.clone``); passes ``begin``."""
    scope = _current_scope()
    if not active() or (scope['workspace'], scope['where']) == (workspace, where):
        return
    _local.scope = dict(workspace=workspace or '-', where=where)
    _scope.update(_local.scope)
    reached('begin')


def _current_scope():
    return getattr(_local, 'scope', None) or _scope


def api_point(method, path):
    return 'pve %s %s' % (method.upper(), _NAMED.sub('*', path))


def reached(what, workspace=None, where=None):
    """Pass the point ``what`` (in the current scope unless ``workspace``/``where`` say otherwise)."""
    trace = os.environ.get(TRACE_ENV)
    if not trace:
        return
    scope = _current_scope()
    workspace = workspace or scope['workspace']
    point = '%s %s' % (where or scope['where'], what)
    line = '%s\t%s\n' % (workspace, point)
    with _open_trace(trace) as out:
        fcntl.flock(out, fcntl.LOCK_EX)
        out.seek(0)
        nth = sum(1 for seen in out if seen == line) + 1
        out.write(line)
        out.flush()
    wanted = _kill_spec()
    if wanted and names(wanted.get('workspace'), workspace) and wanted.get('point') == point \
            and int(wanted.get('nth', 1)) == nth:
        kill_run()


def names(wanted, workspace):
    """True when the kill's ``wanted`` names ``workspace``: its name, or a prefix ending in ``*`` (the members of a
    warm pool, whose names are drawn at random when the fill starts them); the passages are counted per name."""
    if isinstance(wanted, str) and wanted.endswith('*'):
        return workspace.startswith(wanted[:-1])
    return wanted == workspace


class TraceRefused(EphemeraError):
    """The trace file is not a regular file of this user (a symbolic link, a device, another user's file)."""


def _open_trace(path):
    """The trace file, for reading and appending: made 0600 if missing; never through a symbolic link, and only
    a regular file of this user (or root's)."""
    flags = os.O_RDWR | os.O_APPEND | os.O_CREAT | getattr(os, 'O_NOFOLLOW', 0) | getattr(os, 'O_CLOEXEC', 0) \
        | getattr(os, 'O_NOCTTY', 0) | getattr(os, 'O_NONBLOCK', 0)
    try:
        fd = os.open(path, flags, 0o600)
    except OSError as exc:
        raise TraceRefused('cannot open the failpoint trace %s: %s' % (path, exc))
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode) or st.st_uid not in (os.geteuid(), 0):
        os.close(fd)
        raise TraceRefused('the failpoint trace %s is not a regular file of this user' % path)
    return os.fdopen(fd, 'a+')


def _kill_spec():
    raw = os.environ.get(KILL_ENV)
    if not raw:
        return None
    try:
        return json.loads(raw)
    except ValueError:
        return None


def _children():
    """pid -> parent pid of every process that can be read."""
    parents = {}
    for entry in os.listdir('/proc'):
        if entry.isdigit():
            parent = parent_pid(int(entry))
            if parent is not None:
                parents[int(entry)] = parent
    return parents


def _environment(pid):
    try:
        with open('/proc/%d/environ' % pid, 'rb') as src:
            return src.read().split(b'\0')
    except (OSError, IOError):
        return []


def _program(pid):
    """The executable ``pid`` runs (None when it cannot be read: another user's process, or gone)."""
    try:
        return os.readlink('/proc/%d/exe' % pid)
    except OSError:
        return None


def run_root():
    """The run this process belongs to: its topmost ancestor (or itself) that was started with the same trace
    setting and runs the same program.

    Only the processes the trace was handed to can be killed: whatever started the run without it (a test) is
    never touched, and neither is a shell (or anything else) that exported it and started the run.
    """
    mark = ('%s=%s' % (TRACE_ENV, os.environ.get(TRACE_ENV, ''))).encode()
    program = _program(os.getpid())
    root = os.getpid()
    parent = parent_pid(root)
    while parent and parent > 1 and program and _program(parent) == program and mark in _environment(parent):
        root = parent
        parent = parent_pid(parent)
    return root


def kill_run():
    """SIGKILL the run this process belongs to, everything below it, and this process last.

    The run is stopped (SIGSTOP) before anything is killed: a stopped process cannot fork, and its children
    stay its children, so the tree read after the last stop is all of the run. Killing it first and
    reading the tree again would lose a child forked meanwhile: its dead parent hands it to init.
    """
    me = os.getpid()
    root = run_root()
    stopped = set()
    while True:
        parents = _children()
        run = set([root])
        grew = True
        while grew:
            below = set(pid for pid, parent in parents.items() if parent in run) - run
            grew = bool(below)
            run |= below
        fresh = run - stopped - set([me])
        if not fresh:
            break
        for pid in fresh:
            _signal(pid, signal.SIGSTOP)
        stopped |= fresh
    for pid in stopped - set([root]):
        _signal(pid, signal.SIGKILL)
    _signal(root, signal.SIGKILL)
    os.kill(me, signal.SIGKILL)


def _signal(pid, sig):
    try:
        os.kill(pid, sig)
    except OSError:
        pass
