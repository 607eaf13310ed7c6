"""The first process of a debian-tier guest: pid 1 of the container's own pid, mount, UTS and IPC namespaces.

    unshare --pid --mount --uts --ipc --fork --kill-child --propagation private \\
        python3 -I -S guestinit.py ROOT HOSTNAME [SETUP]

It mounts what a container's userland expects inside ROOT (its own /proc, a small /dev with pseudo-terminals,
/dev/shm, a tmpfs /run), puts what SETUP (JSON) asks for in that /run (``files``: {path: text}; ``binds``: {path:
directory of this machine}, bind-mounted: the package cache, pkgcache.py), sets the hostname, changes its root to
ROOT and then reaps the processes that end up as its children (what SSH sessions leave running, such as the agent
runner). Everything else in the guest (sshd first) is started into these namespaces with nsenter. The mounts
exist only in the guest's mount namespace: they vanish with it. When this process ends, the kernel kills every
other process of the guest.

Standard library only, and nothing imported after the change of root.
"""

import ctypes
import json
import os
import signal
import socket
import sys
import time

MS_NOSUID = 2
MS_NODEV = 4
MS_NOEXEC = 8
MS_BIND = 4096
PR_SET_NAME = 15
DEVICES = ('null', 'zero', 'full', 'random', 'urandom', 'tty')
LIBC = ctypes.CDLL(None, use_errno=True)


def mount(source, target, fstype=None, flags=0, data=None):
    if LIBC.mount(source.encode(), target.encode(), fstype.encode() if fstype else None, flags,
                  data.encode() if data else None) != 0:
        err = ctypes.get_errno()
        raise OSError(err, 'mount {0} on {1}: {2}'.format(fstype or source, target, os.strerror(err)))


def setup(root):
    """The guest's /proc, /dev and /run."""
    mount('proc', root + '/proc', 'proc', MS_NOSUID | MS_NODEV | MS_NOEXEC)
    dev = root + '/dev'
    mount('dev', dev, 'tmpfs', MS_NOSUID, 'mode=755,size=1m')
    for name in DEVICES:
        open(os.path.join(dev, name), 'w').close()
        mount('/dev/' + name, os.path.join(dev, name), flags=MS_BIND)
    os.mkdir(dev + '/pts')
    mount('devpts', dev + '/pts', 'devpts', MS_NOSUID | MS_NOEXEC, 'newinstance,ptmxmode=0666,mode=0620,gid=5')
    os.symlink('pts/ptmx', dev + '/ptmx')
    os.mkdir(dev + '/shm')
    mount('shm', dev + '/shm', 'tmpfs', MS_NOSUID | MS_NODEV, 'mode=1777')
    os.symlink('/proc/self/fd', dev + '/fd')
    for number, name in enumerate(('stdin', 'stdout', 'stderr')):
        os.symlink('/proc/self/fd/{0}'.format(number), os.path.join(dev, name))
    mount('run', root + '/run', 'tmpfs', MS_NOSUID | MS_NODEV, 'mode=755')
    # sshd's privilege separation directory, and what Debian's /var/lock points to.
    os.mkdir(root + '/run/sshd', 0o755)
    os.mkdir(root + '/run/lock')
    os.chmod(root + '/run/lock', 0o1777)


def under_run(root, path):
    """``path`` of the guest inside ROOT; refused outside /run (what is set up there must not reach the guest's
    files)."""
    if not path.startswith('/run/') or '/../' in path + '/':
        raise ValueError('guest setup outside /run: {0}'.format(path))
    return root + path


def make_dirs(path):
    """Parents of a path in the guest's /run, readable by every user (apt reads there as _apt)."""
    if not os.path.isdir(path):
        make_dirs(os.path.dirname(path))
        os.mkdir(path)
        os.chmod(path, 0o755)


def put(root, setup):
    """Files written into the guest's /run, directories of this machine bind-mounted there."""
    for path, text in sorted(setup.get('files', {}).items()):
        target = under_run(root, path)
        make_dirs(os.path.dirname(target))
        with open(target, 'w') as out:
            out.write(text)
        os.chmod(target, 0o644)
    for path, source in sorted(setup.get('binds', {}).items()):
        target = under_run(root, path)
        make_dirs(target)
        mount(source, target, flags=MS_BIND)


def reap():
    """Wait for every child, including the orphans the kernel hands to the first process of a namespace."""
    while True:
        try:
            os.waitpid(-1, 0)
        except ChildProcessError:
            time.sleep(0.2)


def main(argv):
    root, hostname = argv[1], argv[2]
    extra = json.loads(argv[3]) if len(argv) > 3 else {}
    # Signals from outside reach the first process of a pid namespace only if it handles them.
    signal.signal(signal.SIGTERM, lambda *args: sys.exit(0))
    # What ps in the guest calls its first process.
    LIBC.prctl(PR_SET_NAME, b'init', 0, 0, 0)
    setup(root)
    put(root, extra)
    socket.sethostname(hostname)
    os.chroot(root)
    os.chdir('/')
    sys.stdout.write('guest namespaces ready\n')
    sys.stdout.flush()
    reap()


if __name__ == '__main__':
    main(sys.argv)
