"""What the harness asks of Linux: listening sockets, process trees, and children that die with it."""

import ctypes
import ipaddress
import os
import signal
import socket
import struct
import subprocess
import time

PR_SET_PDEATHSIG = 1
TCP_LISTEN = '0A'


def listening():
    """Every listening TCP socket as a set of (address, port), from /proc/net/tcp and tcp6."""
    out = set()
    for name, size in (('/proc/net/tcp', 4), ('/proc/net/tcp6', 16)):
        try:
            with open(name, encoding='ascii') as fh:
                lines = fh.readlines()[1:]
        except FileNotFoundError:
            continue
        for line in lines:
            fields = line.split()
            if fields[3] != TCP_LISTEN:
                continue
            hexaddr, hexport = fields[1].split(':')
            raw = bytes.fromhex(hexaddr)
            # The kernel prints each 32-bit word in host byte order.
            raw = b''.join(struct.pack('<I', struct.unpack('>I', raw[i:i + 4])[0]) for i in range(0, size, 4))
            out.add((str(ipaddress.ip_address(raw)), int(hexport, 16)))
    return out


def port_free(address, port):
    """True if address:port can be bound now (port 0 always can)."""
    if not port:
        return True
    probe = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        probe.bind((address, port))
        return True
    except OSError:
        return False
    finally:
        probe.close()


def _stat(pid):
    """(state, ppid) of a process, or None if it is gone."""
    try:
        with open('/proc/{0}/stat'.format(pid), encoding='ascii', errors='replace') as fh:
            fields = fh.read().rsplit(')', 1)[1].split()
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return None
    return fields[0], int(fields[1])


def alive(pid):
    """True if pid is a live process (not a zombie)."""
    stat = _stat(pid)
    return stat is not None and stat[0] not in ('Z', 'X')


def cmdline(pid):
    """The command line of pid as one string ('' if it is gone)."""
    try:
        with open('/proc/{0}/cmdline'.format(pid), 'rb') as fh:
            return fh.read().replace(b'\0', b' ').decode(errors='replace').strip()
    except (FileNotFoundError, ProcessLookupError):
        return ''


def with_environment(needle):
    """Pids of processes whose environment has an entry starting with needle (bytes), other than this one."""
    out = []
    for entry in os.listdir('/proc'):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open('/proc/{0}/environ'.format(entry), 'rb') as fh:
                if any(item.startswith(needle) for item in fh.read().split(b'\0')):
                    out.append(int(entry))
        except OSError:
            continue
    return out


def left_with_environment(needle, timeout=5.0):
    """with_environment(needle) once it is empty or timeout seconds passed: a killed process takes a moment to go."""
    deadline = time.monotonic() + timeout
    while True:
        left = with_environment(needle)
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.05)


def children(pid):
    """Direct children of pid."""
    out = []
    for entry in os.listdir('/proc'):
        if entry.isdigit():
            stat = _stat(entry)
            if stat is not None and stat[1] == pid:
                out.append(int(entry))
    return out


def descendants(pid):
    """Every process below pid, parents before their children."""
    parents = {}
    for entry in os.listdir('/proc'):
        if entry.isdigit():
            stat = _stat(entry)
            if stat is not None:
                parents.setdefault(stat[1], []).append(int(entry))
    out, todo = [], list(parents.get(pid, []))
    while todo:
        child = todo.pop(0)
        out.append(child)
        todo.extend(parents.get(child, []))
    return out


def kill_tree(pid):
    """SIGKILL pid and everything below it (sessions of an sshd, their commands). Every one of them is stopped
    first: killed one by one, a shell whose command was killed first could still end the session normally (its
    next command, its exit status sent to the client) before its own kill arrives."""
    stop_then_kill(lambda: [pid] + descendants(pid))


def stop_then_kill(members):
    """SIGKILL every process that ``members()`` names, however many it starts meanwhile; returns their pids.

    Every member is stopped (SIGSTOP) before any is killed: a stopped process cannot fork, and its children stay
    its children, so the members read after the last stop are all of them. Killing first and reading again would
    miss a child forked meanwhile: its dead parent hands it to init.
    """
    stopped = set()
    while True:
        fresh = set(members()) - stopped - set([os.getpid()])
        if not fresh:
            break
        for pid in fresh:
            _signal(pid, signal.SIGSTOP)
        stopped |= fresh
    for pid in stopped:
        _signal(pid, signal.SIGKILL)
    return sorted(stopped)


def _signal(pid, sig):
    try:
        os.kill(pid, sig)
    except OSError:
        pass


def wait_gone(pids, timeout):
    """Wait until none of pids is alive; True if so within timeout seconds."""
    deadline = time.monotonic() + timeout
    while any(alive(p) for p in pids):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def _die_with_parent(signum):
    # A guest's sshd must not outlive the cluster that started it, even if that is SIGKILLed.
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signum)


def spawn(argv, log_path, death_signal=signal.SIGTERM):
    """Start argv with stdout and stderr appended to log_path; it gets ``death_signal`` when its parent dies
    (SIGKILL for a program that blocks SIGTERM, as unshare does while it waits for its child)."""
    with open(log_path, 'ab') as log:
        return subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, close_fds=True,
                                preexec_fn=lambda: _die_with_parent(death_signal))  # pylint: disable=subprocess-popen-preexec-fn


def rooted_under(prefix):
    """Pids of processes whose root directory (chroot) is ``prefix`` or below it, other than this one."""
    prefix = os.path.realpath(prefix)
    out = []
    for entry in os.listdir('/proc'):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            root = os.readlink('/proc/{0}/root'.format(entry))
        except OSError:
            continue
        if root == prefix or root.startswith(prefix + os.sep):
            out.append(int(entry))
    return out


def _unescape(field):
    """A path of /proc/self/mountinfo, whose space, tab, newline and backslash are octal escapes."""
    out, i = [], 0
    while i < len(field):
        if field[i] == '\\' and field[i + 1:i + 4].isdigit():
            out.append(chr(int(field[i + 1:i + 4], 8)))
            i += 4
        else:
            out.append(field[i])
            i += 1
    return ''.join(out)


def mount_points():
    """The mount points of this process's mount namespace, in mount order."""
    with open('/proc/self/mountinfo', encoding='utf-8', errors='surrogateescape') as fh:
        return [_unescape(line.split()[4]) for line in fh if line.strip()]


def mounts_under(path):
    """Mount points at ``path`` or below it, the last mounted first (the order they come off in)."""
    path = os.path.realpath(path)
    return [p for p in reversed(mount_points()) if p == path or p.startswith(path + os.sep)]


def unmount_under(path):
    """Unmount everything mounted at ``path`` or below it; a mount that is busy is detached (umount -l).
    Returns the mount points."""
    points = mounts_under(path)
    for point in points:
        if subprocess.run(['umount', point], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                          check=False).returncode != 0:
            subprocess.run(['umount', '-l', point], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
    return points


# The try-out inventories keep their journal in the state directory (inventories/*/group_vars): these are its files
# (SQLite's write-ahead log and shared memory, and the ownership secret next to it, plugins/module_utils/core).
JOURNAL_FILES = ('journal.sqlite', 'journal.sqlite-wal', 'journal.sqlite-shm', 'journal.sqlite-journal',
                 'journal.sqlite.secret')


def forget_journal(state_dir):
    """Remove the try-out journal of ``state_dir``: its records describe a datacenter or cloud that is gone (a
    `--fresh` cluster, a cloud that starts empty), and a create would take their workspaces for existing ones."""
    removed = []
    for name in JOURNAL_FILES:
        path = os.path.join(state_dir, name)
        if os.path.lexists(path):
            os.unlink(path)
            removed.append(name)
    return removed
