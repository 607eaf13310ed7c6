# -*- coding: utf-8 -*-
# Copyright: ephemera.workspaces contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Who owns an operation, and whether that owner is still alive.

A pid alone is not an identity: pids are reused. On one host an owner is (host, pid, start time),
the start time read from ``/proc/<pid>/stat`` field 22, so a new process that got the old pid is
"dead" as far as the old owner is concerned. Across hosts a process cannot be inspected, so an
owner elsewhere is alive only while its lease (a wall-clock expiry it renews) has not run out.
"""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import os
import socket
import time

ALIVE = 'alive'
DEAD = 'dead'


def proc_start_time(pid):
    """The start time of ``pid`` in clock ticks since boot (``/proc/<pid>/stat`` field 22), or None.

    The second field is the command name in parentheses and may itself contain spaces or ``)``,
    so the fields are counted from the *last* ``)``: after it comes field 3 (state), which makes
    field 22 the 20th item.
    """
    try:
        with open('/proc/%d/stat' % int(pid), 'rb') as stat:
            raw = stat.read().decode('ascii', 'replace')
    except (OSError, IOError, ValueError):
        return None
    rest = raw[raw.rfind(')') + 1:].split()
    if len(rest) < 20:
        return None
    try:
        return int(rest[19])
    except ValueError:
        return None


def hostname():
    return socket.gethostname()


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
    def from_dict(cls, data):
        return cls(data['host'], data['pid'], data.get('start_time'), data.get('lease_expires'))

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
