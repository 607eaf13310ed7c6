# -*- coding: utf-8 -*-
# Copyright: ephemera.workspaces contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Who owns an operation, and whether that owner is still alive.

A pid alone is not an identity: pids are reused. On one host an owner is (host, pid, start time),
the start time read from ``/proc/<pid>/stat`` field 22, so a new process that got the old pid is
"dead" as far as the old owner is concerned. Across hosts a process cannot be inspected, so an
owner elsewhere is alive only while its lease (a wall-clock expiry it renews) has not run out. Which host an owner
is on is the controller's name (:func:`hostname`: ``EPHEMERA_CONTROLLER_HOST`` or the host name).

An operation that spans several tasks of a playbook is owned by the ``ansible-playbook`` process,
not by a module: each module is a short-lived process of its own. :func:`run_pid` finds that
process from inside a module by walking up the parent chain.
"""

import json
import os
import socket
import time

ALIVE = 'alive'
DEAD = 'dead'
# The lease of a claim, in seconds, when its caller gives none (the queue module's ``lease``).
DEFAULT_LEASE = 600.0


RUN_COMMANDS = ('ansible-playbook', 'ansible', 'ansible-console', 'ansible-pull')


def _stat_fields(pid):
    """``/proc/<pid>/stat`` from field 3 (state) on, or None.

    The second field is the command name in parentheses and may itself contain spaces or ``)``,
    so the fields are counted from the *last* ``)``.
    """
    try:
        with open('/proc/%d/stat' % int(pid), 'rb') as stat:
            raw = stat.read().decode('ascii', 'replace')
    except (OSError, IOError, ValueError):
        return None
    rest = raw[raw.rfind(')') + 1:].split()
    return rest if len(rest) >= 20 else None


def proc_start_time(pid):
    """The start time of ``pid`` in clock ticks since boot (``/proc/<pid>/stat`` field 22), or None.

    A zombie (killed, not yet reaped by its parent) has no start time: it will never act again.
    """
    rest = _stat_fields(pid)
    if rest is None or rest[0] == 'Z':
        return None
    try:
        return int(rest[19])
    except ValueError:
        return None


def parent_pid(pid):
    """The parent of ``pid`` (``/proc/<pid>/stat`` field 4), or None."""
    rest = _stat_fields(pid)
    try:
        return int(rest[1]) if rest else None
    except ValueError:
        return None


def proc_cmdline(pid):
    """The argument vector of ``pid``, or an empty list."""
    try:
        with open('/proc/%d/cmdline' % int(pid), 'rb') as cmdline:
            raw = cmdline.read()
    except (OSError, IOError, ValueError):
        return []
    return [arg.decode('utf-8', 'replace') for arg in raw.split(b'\0') if arg]


def _is_run_command(argv):
    # ``python .../ansible-playbook ...`` or ``.../ansible-playbook ...``
    return any(os.path.basename(arg) in RUN_COMMANDS for arg in argv[:2])


def _is_python(argv):
    return bool(argv) and os.path.basename(argv[0]).startswith('python')


def run_pid(pid=None):
    """The pid of the Ansible run that ``pid`` (default: this process) works for.

    A module runs as ``ansible-playbook`` -> forked worker -> shell -> python. The worker is a fork
    of the main process, with the same command line, and ends after its task; the main process
    lives as long as the run. So: the first ancestor that is an Ansible command, then up while
    the parent has the very same command line. Without an Ansible ancestor (the code run by some
    other Python program) the owner is the topmost Python process above this one below pid 1,
    else the direct parent: the longest-lived process that plausibly stands for "this run".
    """
    pid = os.getpid() if pid is None else int(pid)
    chain = []
    current = parent_pid(pid)
    while current and current > 1 and current not in chain:
        chain.append(current)
        current = parent_pid(current)
    for index, ancestor in enumerate(chain):
        argv = proc_cmdline(ancestor)
        if _is_run_command(argv):
            top = ancestor
            for above in chain[index + 1:]:
                if proc_cmdline(above) != argv:
                    break
                top = above
            return top
    pythons = [ancestor for ancestor in chain if _is_python(proc_cmdline(ancestor))]
    if pythons:
        return pythons[-1]
    return chain[0] if chain else pid


HOST_ENV_VAR = 'EPHEMERA_CONTROLLER_HOST'


def hostname():
    """The name of this controller host in the journal's owners: ``EPHEMERA_CONTROLLER_HOST``, else the host name.

    Owners on the same host are judged by pid and start time; owners on another host only by their lease. Two
    controllers that share one journal must therefore go by different names (the host names of two machines, or of
    two AWX execution-environment containers, differ anyway). Runs on one machine under different names judge each
    other by lease only: a dead one is taken over once its lease expires instead of at once (slower, never unsafe);
    that is how the tests stand for two hosts.
    """
    return os.environ.get(HOST_ENV_VAR) or socket.gethostname()


class Owner:
    """An operation's owner: host, pid, the pid's start time and an optional cross-host lease."""

    __slots__ = ('host', 'pid', 'start_time', 'lease_expires')

    def __init__(self, host, pid, start_time, lease_expires=None):
        self.host = host
        self.pid = int(pid)
        self.start_time = None if start_time is None else int(start_time)
        self.lease_expires = lease_expires

    @classmethod
    def current(cls, lease_seconds=None, pid=None):
        """The calling process (or ``pid`` on this host), with a lease of ``lease_seconds`` from now."""
        pid = os.getpid() if pid is None else pid
        lease = time.time() + lease_seconds if lease_seconds else None
        return cls(hostname(), pid, proc_start_time(pid), lease)

    def liveness(self, now=None):
        """ALIVE or DEAD.

        On this host: alive while a process with this pid runs *and* started at the recorded time.
        On another host: alive while the lease has not expired (no lease: assumed alive, since
        nothing here can prove otherwise, and a wrongly "dead" owner would let two runs overlap).
        """
        if self.host == hostname():
            started = proc_start_time(self.pid)
            return ALIVE if started is not None and started == self.start_time else DEAD
        if self.lease_expires is None:
            return ALIVE
        now = time.time() if now is None else now
        return ALIVE if now < self.lease_expires else DEAD

    def is_alive(self, now=None):
        return self.liveness(now) == ALIVE

    def to_dict(self):
        return {'host': self.host, 'pid': self.pid, 'start_time': self.start_time, 'lease_expires': self.lease_expires}

    @classmethod
    def of_run(cls, lease_seconds=None):
        """The Ansible run this process belongs to (see :func:`run_pid`), with a lease."""
        return cls.current(lease_seconds=lease_seconds, pid=run_pid())

    @classmethod
    def from_dict(cls, data):
        return cls(data['host'], data['pid'], data.get('start_time'), data.get('lease_expires'))

    @classmethod
    def from_record(cls, owner_json, lease_expires):
        """The owner a journal row records (its ``owner`` JSON, its renewed ``lease_expires`` column), or None."""
        data = json.loads(owner_json) if owner_json else None
        if not data:
            return None
        data['lease_expires'] = lease_expires
        return cls.from_dict(data)

    def __eq__(self, other):
        return isinstance(other, Owner) and (self.host, self.pid, self.start_time) == (other.host, other.pid, other.start_time)

    def __ne__(self, other):
        return not self == other

    def __hash__(self):
        return hash((self.host, self.pid, self.start_time))

    def __repr__(self):
        return 'Owner(%s pid %d started %s)' % (self.host, self.pid, self.start_time)

    def __str__(self):
        return '%s:%d' % (self.host, self.pid)
