"""The debian guest tier (`up --guests debian`): every container runs a Debian bookworm userland of its own.

The base root
    `debootstrap --variant=minbase bookworm` with PACKAGES, made once per machine in a cache directory outside
    the checkout ($LOCALPVE_DEBIAN_CACHE, default /var/cache/ephemera-localpve), from $LOCALPVE_DEBIAN_MIRROR
    (default deb.debian.org). It is built in a temporary directory and renamed into place when complete, under
    a lock, so that test workers starting together build it once. Its name carries a hash of what goes into it:
    a change of PACKAGES or of the trimming builds a new one next to the old.

A container's files: a stack of layers
    guests/layers/<vmid>-<id>/  the container's own layer: the upper directory of its overlay, or (a full
                                clone, or where overlays cannot be mounted) all of its files
    guests/<vmid>/stack.json    {"own": its layer, "lowers": [the layers below, top first], "frozen": bool}
    guests/<vmid>/root          where the stack is mounted: an overlay of own on the lowers, or a bind mount of
                                own when there are none; read-only once frozen
    guests/<vmid>/work          the overlay's work directory

    The workspace template: the base plus the agent user (uid 1000), /workspace owned by it and root's
    authorized key, frozen. A linked clone of a (frozen) template stacks a new layer on the template's
    layers: it sees the template's files, and what it writes stays in its own layer. A full clone copies the
    source's files into its own layer. Converting to a template freezes the stack (read-only from then on).
    Destroying unmounts the root and removes the container's directory; its layer goes once no other stack
    lies on it.

Running
    A running container is a set of namespaces (pid, mount, UTS, IPC; the network is this machine's, so it
    answers on its loopback address): guestinit.py is their first process, chrooted into the root; sshd is
    started into them with nsenter (from the guest's own /usr/sbin/sshd, with its own configuration), so every
    command over SSH runs in the guest's userland as its users. Stopping the container kills its first process:
    the kernel then kills every process of the guest, however it was started.
"""

import asyncio
import fcntl
import hashlib
import json
import logging
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid

from . import pkgcache, system
from .config import ClusterError

LOG = logging.getLogger('localpve.debian')
CACHE_ENV = 'LOCALPVE_DEBIAN_CACHE'
MIRROR_ENV = 'LOCALPVE_DEBIAN_MIRROR'
DEFAULT_CACHE = '/var/cache/ephemera-localpve'
DEFAULT_MIRROR = 'http://deb.debian.org/debian'
SUITE = 'bookworm'
# What a workspace guest needs on top of minbase (which has apt, bash, util-linux's runuser): sshd and its sftp
# server, git, python3 for the agent runner, certificates for HTTPS remotes, ps.
PACKAGES = ('openssh-server', 'git', 'python3', 'ca-certificates', 'procps')
# Changes with what build_base does to the root, so that a changed build gets a new base.
BASE_FORMAT = 1
AGENT_USER = 'agent'
AGENT_UID = 1000
HOST_KEY = '/etc/ssh/ssh_host_ed25519_key'
# Certificate authorities this machine added to its own trust store.
LOCAL_CA_DIR = '/usr/local/share/ca-certificates'
TOOLS = ('unshare', 'nsenter', 'mount', 'umount', 'chroot', 'cp')
INIT = os.path.join(os.path.dirname(os.path.abspath(__file__)), 'guestinit.py')
# Seconds a guest's namespaces have to come up.
BOOT_TIMEOUT = 10
SSHD_DROPIN = """\
# The try-out cluster's guest: key logins only; no PAM (no logind or audit in these containers); no DNS lookups.
UsePAM no
PasswordAuthentication no
KbdInteractiveAuthentication no
PermitRootLogin prohibit-password
UseDNS no
"""
# As Debian's slim images do: documentation, manuals and translations stay out of the guests, also for packages
# installed in them later.
DPKG_SLIM = """\
path-exclude=/usr/share/doc/*
path-include=/usr/share/doc/*/copyright
path-exclude=/usr/share/man/*
path-exclude=/usr/share/locale/*
path-include=/usr/share/locale/locale.alias
"""


# ------------------------------------------------------------------ the base root

def cache_dir():
    return os.path.abspath(os.environ.get(CACHE_ENV) or DEFAULT_CACHE)


def mirror():
    return os.environ.get(MIRROR_ENV) or DEFAULT_MIRROR


def base_path(cache=None):
    """Where the base root of this PACKAGES and BASE_FORMAT lives (it may not be built yet)."""
    key = hashlib.sha256(json.dumps([SUITE, 'minbase', sorted(PACKAGES), BASE_FORMAT]).encode()).hexdigest()[:12]
    return os.path.join(cache or cache_dir(), '{0}-{1}'.format(SUITE, key))


def check_host():
    """ClusterError unless this machine can run debian guests: root, and the util-linux tools."""
    if os.geteuid() != 0:
        raise ClusterError('the debian guest tier needs root: it mounts overlays and runs each guest in namespaces '
                           'of its own (run as root, or use --guests host)')
    missing = [tool for tool in TOOLS if shutil.which(tool) is None]
    if missing:
        raise ClusterError('the debian guest tier needs {0} (Debian packages util-linux, mount, coreutils)'.format(
            ', '.join(missing)))


def ensure_base(announce=None):
    """The path of the base root, built first if it is not there (announce(text) is told before a build).

    Builds run under a lock in the cache directory; a build that another process finished meanwhile is used.
    """
    check_host()
    path = base_path()
    if os.path.isdir(path):
        return path
    cache = os.path.dirname(path)
    os.makedirs(cache, mode=0o755, exist_ok=True)
    with open(os.path.join(cache, '.lock'), 'w', encoding='ascii') as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if os.path.isdir(path):
            return path
        if shutil.which('debootstrap') is None:
            raise ClusterError('the debian guest tier builds its base root with debootstrap, which is not installed '
                               '(apt-get install -y debootstrap, or scripts/system-packages.sh)')
        for name in os.listdir(cache):
            if name.startswith('.build-'):
                # What a build that died left; only the holder of the lock builds.
                _remove(os.path.join(cache, name))
        if announce:
            announce('building the Debian {0} base root in {1} (once; about a minute)'.format(SUITE, path))
        _build(path)
    return path


def _build(path):
    cache = os.path.dirname(path)
    tmp = tempfile.mkdtemp(prefix='.build-', dir=cache)
    root = os.path.join(tmp, 'root')
    log = os.path.join(cache, 'build.log')
    started = time.monotonic()
    argv = ['debootstrap', '--variant=minbase', '--include=' + ','.join(PACKAGES), SUITE, root, mirror()]
    try:
        with open(log, 'wb') as out:
            # In a mount namespace of its own: what debootstrap mounts in the new root goes with it, even if it dies.
            done = subprocess.run(['unshare', '--mount', '--propagation', 'private'] + argv, stdin=subprocess.DEVNULL,
                                  stdout=out, stderr=subprocess.STDOUT, check=False)
        if done.returncode != 0:
            raise ClusterError('debootstrap failed (exit {0}); see {1}: {2}'.format(done.returncode, log, _tail(log)))
        _trim(root)
        seconds = time.monotonic() - started
        os.chmod(root, 0o755)
        os.rename(root, path)
        with open(path + '.json', 'w', encoding='utf-8') as out:
            json.dump({'suite': SUITE, 'variant': 'minbase', 'packages': list(PACKAGES), 'mirror': mirror(),
                       'format': BASE_FORMAT, 'built_at': time.time(), 'build_seconds': round(seconds, 1)}, out,
                      indent=2, sort_keys=True)
        LOG.info('Debian base root built in %.1fs: %s', seconds, path)
    finally:
        _remove(tmp)


def _trim(root):
    """What a guest should not inherit: the build's host keys (each guest has its own), downloaded packages and
    package lists (apt-get update fetches them again), documentation, manuals and translations."""
    for sub in ('var/cache/apt/archives', 'var/lib/apt/lists'):
        top = os.path.join(root, sub)
        for name in os.listdir(top):
            path = os.path.join(top, name)
            if os.path.isfile(path) and name != 'lock':
                os.unlink(path)
    ssh = os.path.join(root, 'etc', 'ssh')
    for name in os.listdir(ssh):
        if name.startswith('ssh_host_'):
            os.unlink(os.path.join(ssh, name))
    for sub in ('usr/share/man', 'usr/share/locale'):
        top = os.path.join(root, sub)
        for name in os.listdir(top):
            if name != 'locale.alias':
                _remove(os.path.join(top, name))
    docs = os.path.join(root, 'usr', 'share', 'doc')
    for base, dirs, files in os.walk(docs, topdown=False):
        for name in files:
            if name != 'copyright':
                os.unlink(os.path.join(base, name))
        for name in dirs:
            path = os.path.join(base, name)
            if not os.path.islink(path) and not os.listdir(path):
                os.rmdir(path)
    _write(os.path.join(root, 'etc', 'dpkg', 'dpkg.cfg.d', 'localpve-slim'), DPKG_SLIM)
    _write(os.path.join(root, 'etc', 'ssh', 'sshd_config.d', 'localpve.conf'), SSHD_DROPIN)


# ------------------------------------------------------------------ the roots of a cluster's containers

class Roots:
    """The files of a debian-tier cluster's containers: stacks of layers, mounted at guests/<vmid>/root."""

    def __init__(self, guests_dir, base):
        self.dir = guests_dir
        self.layers = os.path.join(guests_dir, 'layers')
        # What a destroy set aside, to be removed by purge().
        self.gone = os.path.join(guests_dir, '.gone')
        self.base = base
        self.stacks = {}
        self._overlay = None
        for path in (guests_dir, base):
            if ':' in path or ',' in path:
                raise ClusterError('{0}: the debian guest tier cannot use a path with ":" or "," (overlay mount '
                                   'options)'.format(path))

    def guest_dir(self, vmid):
        return os.path.join(self.dir, str(vmid))

    def root(self, vmid):
        return os.path.join(self.guest_dir(vmid), 'root')

    def _stack_file(self, vmid):
        return os.path.join(self.guest_dir(vmid), 'stack.json')

    def own(self, vmid):
        """The directory of the container's own layer."""
        return os.path.join(self.layers, self.stacks[vmid]['own'])

    def frozen(self, vmid):
        return bool(self.stacks.get(vmid, {}).get('frozen'))

    @property
    def overlay(self):
        """True if overlayfs mounts here (checked once): linked clones are overlays, else copies."""
        if self._overlay is None:
            probe = tempfile.mkdtemp(prefix='.overlay-probe-', dir=self.dir)
            parts = [os.path.join(probe, name) for name in ('lower', 'upper', 'work', 'merged')]
            for part in parts:
                os.mkdir(part)
            done = subprocess.run(['mount', '-t', 'overlay', 'overlay', '-o', 'lowerdir={0},upperdir={1},workdir={2}'
                                   .format(*parts[:3]), parts[3]], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                  check=False)
            self._overlay = done.returncode == 0
            if self._overlay:
                system.unmount_under(parts[3])
            else:
                LOG.warning('overlayfs does not mount in %s (%s): linked clones are copies', self.dir,
                            done.stdout.decode(errors='replace').strip())
            _remove(probe)
        return self._overlay

    # -------------------------------------------------------------- state

    def load(self):
        """The stacks of the containers whose files exist, mounted; layers no stack uses are removed."""
        self.stacks = {}
        if os.path.isdir(self.dir):
            for name in os.listdir(self.dir):
                if name.isdigit() and os.path.exists(self._stack_file(int(name))):
                    with open(self._stack_file(int(name)), encoding='utf-8') as fh:
                        self.stacks[int(name)] = json.load(fh)
        for vmid in sorted(self.stacks):
            self.mount(vmid)
        self.collect()
        self.purge()
        return set(self.stacks)

    def _save(self, vmid, stack):
        os.makedirs(self.guest_dir(vmid), exist_ok=True)
        path = self._stack_file(vmid)
        with open(path + '.tmp', 'w', encoding='utf-8') as out:
            json.dump(stack, out, sort_keys=True)
        os.replace(path + '.tmp', path)
        self.stacks[vmid] = stack

    def mounted(self, vmid):
        return os.path.realpath(self.root(vmid)) in system.mount_points()

    def mount(self, vmid):
        """Mount the container's stack at its root (if it is not mounted)."""
        if self.mounted(vmid):
            return
        stack = self.stacks[vmid]
        root, own, lowers = self.root(vmid), self.own(vmid), stack['lowers']
        os.makedirs(root, exist_ok=True)
        if not lowers:
            _run(['mount', '--bind', own, root])
            if stack['frozen']:
                _run(['mount', '-o', 'remount,bind,ro', root])
        elif stack['frozen']:
            _run(['mount', '-t', 'overlay', 'overlay', '-o', 'ro,lowerdir=' + ':'.join([own] + lowers), root])
        else:
            work = os.path.join(self.guest_dir(vmid), 'work')
            os.makedirs(work, exist_ok=True)
            _run(['mount', '-t', 'overlay', 'overlay', '-o', 'lowerdir={0},upperdir={1},workdir={2}'.format(
                ':'.join(lowers), own, work), root])

    def unmount(self, vmid):
        system.unmount_under(self.root(vmid))

    def unmount_all(self):
        system.unmount_under(self.dir)

    def collect(self):
        """Set aside the layers that no stack uses any more (a destroyed template's, once its last clone went), for
        purge() to remove; where they are now."""
        if not os.path.isdir(self.layers):
            return []
        aside = []
        used = set()
        for vmid, stack in self.stacks.items():
            used.add(self.own(vmid))
            used.update(stack['lowers'])
        for name in os.listdir(self.layers):
            path = os.path.join(self.layers, name)
            if path not in used:
                aside += self._set_aside(path)
                LOG.info('layer %s set aside for removal: no container uses it', name)
        return aside

    def _set_aside(self, path):
        """Move ``path`` (unmounted first) out of its place into self.gone, a rename done at once: [where it is now],
        or [] if there was nothing."""
        if not os.path.lexists(path):
            return []
        system.unmount_under(path)
        os.makedirs(self.gone, exist_ok=True)
        target = os.path.join(self.gone, '%s-%s' % (os.path.basename(path), uuid.uuid4().hex[:8]))
        os.rename(path, target)
        return [target]

    def purge(self, paths=None):
        """Remove ``paths`` that set_aside() gave (None: whatever self.gone holds, left by a cluster that stopped).
        This is the slow part of a destroy (a full clone's files: seconds, over a minute on a loaded machine), which
        the cluster runs outside its event loop (guests.py): its API answers meanwhile, as Proxmox VE's does while a
        delete task runs."""
        if paths is None and os.path.isdir(self.gone):
            paths = [os.path.join(self.gone, name) for name in os.listdir(self.gone)]
        for path in paths or []:
            _remove(path)

    # ------------------------------------------------------------ changes

    async def make(self, vmid, origin):
        """The files of a new container: origin is ('clone', source vmid, full), ('create', ssh keys) or None."""
        kind = origin[0] if origin else None
        if kind == 'clone' and origin[1] in self.stacks:
            source = origin[1]
            if self.frozen(source) and not origin[2]:
                await self._make(vmid, self.root(source), [self.own(source)] + self.stacks[source]['lowers'])
            else:
                await self._make(vmid, self.root(source), [])
            return
        # Created from an OS template (or of unknown origin): the base root.
        await self._make(vmid, self.base, [self.base])
        if kind == 'create' and origin[1]:
            _authorize(self.root(vmid), str(origin[1]))

    async def _make(self, vmid, source_root, lowers):
        """A new stack: a layer on ``lowers`` where overlays mount, else a copy of ``source_root``."""
        self.destroy(vmid)
        # A layer is a directory of layers/ itself, whatever the container's key holds (a cloud's machine ids: '/').
        name = '{0}-{1}'.format(re.sub(r'[^A-Za-z0-9_.-]', '_', str(vmid))[-60:], uuid.uuid4().hex[:8])
        own = os.path.join(self.layers, name)
        os.makedirs(own, mode=0o755)
        if not (lowers and self.overlay):
            started = time.monotonic()
            await _copy(source_root, own)
            LOG.info('CT %s: copied %s in %.2fs', vmid, source_root, time.monotonic() - started)
            lowers = []
        self._save(vmid, {'own': name, 'lowers': lowers, 'frozen': False})
        self.mount(vmid)

    async def make_copy(self, vmid, source_root):
        """A new stack whose files are a copy of ``source_root`` (a snapshot's files, an image's)."""
        await self._make(vmid, source_root, [])

    async def seed_template(self, vmid, public_key):
        """The workspace template's files, once: the base with the agent user, /workspace, root's key, this machine's
        certificate authorities and the package cache's settings (pkgcache.py); frozen."""
        if vmid in self.stacks:
            return False
        await self._make(vmid, self.base, [self.base])
        root = self.root(vmid)
        _run(['chroot', root, 'useradd', '--create-home', '--uid', str(AGENT_UID), '--user-group',
              '--shell', '/bin/bash', AGENT_USER])
        workspace = os.path.join(root, 'workspace')
        os.makedirs(workspace, mode=0o755)
        os.chown(workspace, AGENT_UID, AGENT_UID)
        _authorize(root, public_key)
        added = _trust_local_authorities(root)
        pkgcache.write_guest_settings(root, npmrc_extra='cafile=/etc/ssl/certs/ca-certificates.crt\n' if added else '')
        self.freeze(vmid)
        return True

    def freeze(self, vmid):
        """The container became a template: its files are read-only from now on (its clones lie on them)."""
        if self.frozen(vmid):
            return
        self.unmount(vmid)
        self._save(vmid, dict(self.stacks[vmid], frozen=True))
        _remove(os.path.join(self.guest_dir(vmid), 'work'))
        self.mount(vmid)
        LOG.info('CT %s: files frozen', vmid)

    def destroy(self, vmid):
        """Unmount and remove the container's files; its layer goes once nothing lies on it."""
        self.purge(self.set_aside(vmid))

    def set_aside(self, vmid):
        """Unmount the container's files and set them aside (and its layer once nothing lies on it), at once: out of
        every look of the cluster's. Where they are now, for purge()."""
        self.unmount(vmid)
        aside = self._set_aside(self.guest_dir(vmid))
        self.stacks.pop(vmid, None)
        return aside + self.collect()

    def install_host_key(self, vmid, key_file):
        """The guest's host key (kept by the harness, pinned by the collection) where its sshd reads it."""
        target = os.path.join(self.root(vmid), HOST_KEY.lstrip('/'))
        with open(key_file, 'rb') as src:
            data = src.read()
        fd = os.open(target + '.tmp', os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, 'wb') as out:
            out.write(data)
        os.replace(target + '.tmp', target)


# ------------------------------------------------------------------ running

def holder_argv(root, hostname, setup=None):
    """The guest's namespaces and their first process (guestinit.py), which dies with the process that starts it.
    ``setup``: what that process puts in the guest's /run ({"files": {path: text}, "binds": {path: host dir}})."""
    return ['unshare', '--pid', '--mount', '--uts', '--ipc', '--fork', '--kill-child', '--propagation', 'private',
            sys.executable, '-I', '-S', INIT, root, hostname] + ([json.dumps(setup, sort_keys=True)] if setup else [])


def sshd_argv(init_pid, port, address):
    """The guest's own sshd, in the guest's namespaces and root, with its own configuration."""
    return ['nsenter', '--target', str(init_pid), '--pid', '--mount', '--uts', '--ipc', '--root', '--wd',
            '/usr/sbin/sshd', '-D', '-e', '-p', str(port), '-o', 'ListenAddress=' + address,
            '-o', 'HostKey=' + HOST_KEY, '-o', 'PidFile=none']


async def boot(root, hostname, log, setup=None):
    """Start the guest's namespaces; (holder process, host pid of the guest's first process) once it runs in the
    root, or ClusterError."""
    holder = system.spawn(holder_argv(root, hostname, setup), log, death_signal=signal.SIGKILL)
    deadline = time.monotonic() + BOOT_TIMEOUT
    real = os.path.realpath(root)
    while True:
        for pid in system.children(holder.pid):
            try:
                if os.readlink('/proc/{0}/root'.format(pid)) == real:
                    return holder, pid
            except OSError:
                pass
        if holder.poll() is not None or time.monotonic() > deadline:
            if holder.poll() is None:
                system.kill_tree(holder.pid)
                holder.wait()
            raise ClusterError('the guest namespaces did not come up: {0}'.format(_tail(log)))
        await asyncio.sleep(0.005)


async def shut_down(holder, init_pid):
    """Kill the guest's first process: the kernel kills every other process of the guest; wait until all are gone."""
    if holder.poll() is None:
        try:
            os.kill(init_pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    # The holder ends when the first process has ended, which waits for every process of the guest to end.
    while holder.poll() is None:
        await asyncio.sleep(0.005)


# ------------------------------------------------------------------ helpers

def _run(argv):
    done = subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          check=False)
    if done.returncode != 0:
        raise ClusterError('{0} failed (exit {1}): {2}'.format(' '.join(argv), done.returncode,
                                                               done.stdout.decode(errors='replace').strip()))
    return done


async def _copy(source, target):
    """Copy the files of ``source`` into the directory ``target`` (owners, modes, links, times), without blocking
    the event loop; reflinks where the file system has them."""
    proc = await asyncio.create_subprocess_exec('cp', '-a', '--reflink=auto', source + '/.', target + '/',
                                                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                                stderr=subprocess.STDOUT)
    out = (await proc.communicate())[0]
    if proc.returncode != 0:
        raise ClusterError('copying {0} failed: {1}'.format(source, out.decode(errors='replace').strip()[-500:]))


def copy_files(source, target):
    """Copy the files of ``source`` (a guest's root as it is now) into a new directory ``target``: owners, modes,
    links and device nodes as they are (``cp -a``), reflinks where the file system has them."""
    os.makedirs(target, mode=0o755)
    done = subprocess.run(['cp', '-a', '--reflink=auto', source + '/.', target + '/'], stdin=subprocess.DEVNULL,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, check=False)
    if done.returncode != 0:
        raise ClusterError('copying {0} failed: {1}'.format(source, done.stdout.decode(errors='replace').strip()[-500:]))


def _authorize(root, keys):
    """root's authorized_keys in the guest, with the modes sshd's StrictModes wants."""
    ssh = os.path.join(root, 'root', '.ssh')
    os.makedirs(ssh, mode=0o700, exist_ok=True)
    os.chmod(ssh, 0o700)
    path = os.path.join(ssh, 'authorized_keys')
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, 'w', encoding='utf-8') as out:
        out.write(keys.rstrip('\n') + '\n')


def add_user(root, name, keys):
    """A user of the guest's own (a cloud's administrator user), with ``keys`` (public keys) authorized for it."""
    _run(['chroot', root, 'useradd', '--create-home', '--user-group', '--shell', '/bin/bash', name])
    uid, gid = (int(v) for v in _run(['chroot', root, 'sh', '-c', 'id -u "$0"; id -g "$0"', name]).stdout.split())
    ssh = os.path.join(root, 'home', name, '.ssh')
    os.makedirs(ssh, mode=0o700, exist_ok=True)
    path = os.path.join(ssh, 'authorized_keys')
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, 'w', encoding='utf-8') as out:
        out.writelines(k + '\n' for k in keys)
    for item in (ssh, path):
        os.chown(item, uid, gid)


def _trust_local_authorities(root):
    """The guests trust what this machine trusts: the certificate authorities it added itself (a site's own, or an
    egress proxy's, in /usr/local/share/ca-certificates) go into the template too, for apt, git, curl and npm (whose
    global npmrc names the system bundle, written with the package cache's settings), as a site adds its own to its
    templates."""
    if not os.path.isdir(LOCAL_CA_DIR):
        return []
    added = []
    target = os.path.join(root, LOCAL_CA_DIR.lstrip('/'))
    os.makedirs(target, exist_ok=True)
    for name in sorted(os.listdir(LOCAL_CA_DIR)):
        if name.endswith('.crt') and os.path.isfile(os.path.join(LOCAL_CA_DIR, name)):
            shutil.copyfile(os.path.join(LOCAL_CA_DIR, name), os.path.join(target, name))
            added.append(name)
    if added:
        _run(['chroot', root, 'update-ca-certificates'])
    return added


def _write(path, text):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, 'w', encoding='utf-8') as out:
        out.write(text)


def _remove(path):
    """Remove a directory tree that may have mounts inside (unmounted first); a missing one is fine."""
    if os.path.lexists(path):
        system.unmount_under(path)
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path, ignore_errors=True)
        else:
            os.unlink(path)


def _tail(path, lines=5):
    try:
        with open(path, encoding='utf-8', errors='replace') as fh:
            return ' | '.join(line.strip() for line in fh.readlines()[-lines:]) or 'no output'
    except OSError:
        return 'no log'
