"""Guests over real SSH: one sshd per running container, on the address its config or DHCP lease gives.

Two tiers. host (the default): the harness does not chroot; sshd runs commands on this host as the current
user, and each guest's files live under its own root directory, <state>/guests/<vmid>/root. The collection
prefixes every path it uses inside a guest with that directory (its guest_root option, '{vmid}' filled in).
debian (debian.py): the same directory is the root of a Debian userland of the container's own, in which the
guest's own sshd runs, in namespaces of its own; the collection uses the guest's paths as they are.
"""

import asyncio
import itertools
import logging
import os
import re
import shutil
import signal
import stat
import time

from tests.models import clis
from tests.models.tryout import link_clis

from . import debian, pki, system
from .addresses import AddressPool, loopback, net_ip, with_ip
from .config import ClusterError

LOG = logging.getLogger('localpve.guests')
NET_KEY = re.compile(r'^net\d+$')
# Seconds sshd has to listen on its address before the start counts as failed.
SSHD_START_TIMEOUT = 10
# debian tier: seconds nsenter has to reap the guest's killed sshd and end before it is killed with it.
NSENTER_REAP_TIMEOUT = 5
FAULT_KINDS = ('refuse', 'never', 'drop')


def first_nic(ct):
    """(config key, value) of the container's first NIC, or (None, None)."""
    keys = sorted((k for k in ct.config if NET_KEY.match(k)), key=lambda k: int(k[3:]))
    return (keys[0], ct.config[keys[0]]) if keys else (None, None)


class Guest:
    """What the harness knows about one container's sshd."""

    def __init__(self, vmid):
        self.vmid = vmid
        self.proc = None
        self.address = None
        # stopped, no-address, refusing, suppressed, starting, up, failed
        self.state = 'stopped'
        self.booted_at = None
        self.refuse_until = 0.0
        self.suppressed = False
        self.error = None
        self.startup_secs = None
        self.host_key = None
        # The sshd itself (on the debian tier proc is the nsenter that started it).
        self.sshd_pid = None
        # debian tier: the process holding the guest's namespaces, and the host pid of their first process.
        self.holder = None
        self.init_pid = None
        self.boot_secs = None

    def view(self):
        return {'vmid': self.vmid, 'address': self.address, 'sshd': self.state,
                'sshd_pid': self.sshd_pid if self.proc else None, 'startup_secs': self.startup_secs,
                'host_key': self.host_key, 'error': self.error,
                'init_pid': self.init_pid if self.holder else None, 'boot_secs': self.boot_secs}


class GuestManager:
    """Starts and stops the guests' sshd as the containers start and stop; owns their files and addresses."""

    def __init__(self, site):
        self.site = site
        opts = site.options
        self.sshd = opts.sshd
        self.port = opts.ssh_port
        self.dir = os.path.join(opts.state_dir, 'guests')
        self.known_hosts = os.path.join(opts.state_dir, 'ssh', 'known_hosts')
        self.pool = AddressPool(opts.guest_range, exclude=(opts.host,))
        self.addressing = opts.addressing
        self.dhcp_delay = opts.dhcp_delay
        # vmid -> delay (None: never) overriding dhcp_delay.
        self.dhcp_override = {}
        self.guests = {}
        # Containers whose files exist; their boot id (FakeCt.pid changes at every start).
        self.rooted = set()
        self.boots = {}
        self.leases_visible = set()
        # New containers whose DHCP NIC the site's IPAM pins to a static address once they are created.
        self.unpinned = set()
        self.faults = []
        self._fault_ids = itertools.count(1)
        self._drop_seen = {}
        self._known = None
        self.lock = asyncio.Lock()
        self.tier = opts.guests
        # debian tier: the containers' layered roots (made by prepare(); None on the host tier).
        self.roots = None

    # ------------------------------------------------------------ paths

    def guest_dir(self, vmid):
        return os.path.join(self.dir, str(vmid))

    def root(self, vmid):
        """The guest's filesystem root."""
        return os.path.join(self.guest_dir(vmid), 'root')

    def tmp_dir(self, vmid):
        """host tier: the guest's temporary directory (its TMPDIR), removed with the container; a clone does not
        copy it."""
        return os.path.join(self.guest_dir(vmid), 'tmp')

    def snapshot_root(self, vmid, name):
        """The files of the guest's snapshot ``name``, as they were when it was taken."""
        return os.path.join(self.guest_dir(vmid), 'snapshots', name)

    def sync_snapshots(self, ct):
        """Keep a copy of the guest's root for each snapshot the container has, and none for one it no longer has
        (on the debian tier a copy of its mounted root: owners, modes and device nodes kept)."""
        directory = os.path.join(self.guest_dir(ct.vmid), 'snapshots')
        wanted = set(name for name, snap in ct.snapshots.items() if snap.get('snapstate') != 'prepare')
        have = set(os.listdir(directory)) if os.path.isdir(directory) else set()
        for name in sorted(wanted - have):
            if not os.path.isdir(self.root(ct.vmid)):
                continue
            if self.roots is not None:
                debian.copy_files(self.root(ct.vmid), self.snapshot_root(ct.vmid, name))
            else:
                shutil.copytree(self.root(ct.vmid), self.snapshot_root(ct.vmid, name), symlinks=True,
                                ignore=_special_files)
        for name in sorted(have - wanted):
            shutil.rmtree(self.snapshot_root(ct.vmid, name), ignore_errors=True)

    def authorized_keys(self, vmid):
        return os.path.join(self.root(vmid), 'root', '.ssh', 'authorized_keys')

    # ------------------------------------------------------------ state

    def prepare(self):
        """debian tier: the base root (built if it is not there yet) and the containers' roots."""
        if self.tier == 'debian' and self.roots is None:
            self.roots = debian.Roots(self.dir, debian.ensure_base())

    def load(self, harness):
        """Take the addresses and leases saved with the datacenter, and the guests whose files exist."""
        tier = harness.get('guests', 'host')
        if harness and tier != self.tier:
            raise ClusterError('the datacenter in {0} has {1} guests, not {2}: start with --fresh to change the '
                               'guest tier, or use another state directory'.format(
                                   self.site.options.state_dir, tier, self.tier))
        self.pool.assigned = {int(k): v for k, v in harness.get('addresses', {}).items()}
        if self.roots is not None:
            self.rooted = self.roots.load()
        elif os.path.isdir(self.dir):
            self.rooted = set(int(n) for n in os.listdir(self.dir) if n.isdigit())

    @property
    def agent_bin(self):
        """host tier: where the real agent CLIs the guests carry are (tests/models/clis.py), or None."""
        if self.roots is not None or not getattr(self.site.options, 'agent_clis', False):
            return None
        path = clis.bin_dir()
        return path if os.path.isdir(path) else None

    def saved(self):
        return {'addresses': {str(k): v for k, v in sorted(self.pool.assigned.items())}, 'guests': self.tier}

    async def seed_template(self, vmid, public_key):
        """The template's files: the authorized key of the cluster's key pair, and an empty /workspace (on the
        debian tier: the base root with the agent user, made once)."""
        if self.roots is not None:
            await self.roots.seed_template(vmid, public_key)
            self.rooted.add(vmid)
            return
        keys = self.authorized_keys(vmid)
        os.makedirs(os.path.dirname(keys), mode=0o700, exist_ok=True)
        os.makedirs(os.path.join(self.root(vmid), 'workspace'), exist_ok=True)
        if self.agent_bin is not None:
            # The template carries the real agent CLIs, as a template built with the default toolset does.
            link_clis(self.root(vmid), self.site.options.ssh_user, self.agent_bin)
        with open(keys, 'w', encoding='utf-8') as out:
            out.write(public_key + '\n')
        os.chmod(keys, 0o600)
        self.rooted.add(vmid)

    async def _make_root(self, ct, origin):
        """The files of a new container: a copy of its clone source's root, or an empty one with the keys
        its creation passed (ssh-public-keys). The debian tier layers or copies them (debian.Roots.make)."""
        kind, detail = (origin or (None, None))[:2]
        source = self.root(detail) if kind == 'clone' else None
        snapname = origin[3] if kind == 'clone' and len(origin) > 3 else None
        if snapname:
            source = self.snapshot_root(detail, snapname)
        if self.roots is not None:
            if snapname and os.path.isdir(source):
                # A clone from a snapshot starts from the snapshot's files, not from its source's of the moment.
                await self.roots.make_copy(ct.vmid, source)
            else:
                await self.roots.make(ct.vmid, origin)
            self.rooted.add(ct.vmid)
            return
        root = self.root(ct.vmid)
        shutil.rmtree(self.guest_dir(ct.vmid), ignore_errors=True)
        if source and os.path.isdir(source):
            shutil.copytree(source, root, symlinks=True, ignore=_special_files)
        else:
            os.makedirs(root)
            if kind == 'create' and detail:
                keys = self.authorized_keys(ct.vmid)
                os.makedirs(os.path.dirname(keys), mode=0o700)
                with open(keys, 'w', encoding='utf-8') as out:
                    out.write(str(detail).rstrip('\n') + '\n')
        self.rooted.add(ct.vmid)

    # ------------------------------------------------------------ faults

    def add_fault(self, kind, vmid=None, seconds=None, times=1, match=None, after=0.0):
        """A guest fault, for one VMID or (vmid None) whichever guest comes next.

        refuse: sshd refuses connections for `seconds` after the guest starts, then comes up.
        never: sshd does not come up at this start.
        drop: an SSH session running a command (whose command line contains `match`, if given) is cut
        `after` seconds into it: its sshd and the command are killed, the client sees the connection close.
        times: how many starts (refuse, never) or sessions (drop) it hits; None for every one.
        """
        if kind not in FAULT_KINDS:
            raise ClusterError('guest fault must be one of {0}, not {1!r}'.format(', '.join(FAULT_KINDS), kind))
        if vmid is not None:
            vmid = _positive_int(vmid, 'VMID')
        if times is not None:
            times = _positive_int(times, 'times')
        if kind == 'refuse':
            if seconds is None or float(seconds) <= 0:
                raise ClusterError('a refuse fault needs the seconds sshd refuses for (> 0)')
            seconds = float(seconds)
        elif seconds is not None:
            raise ClusterError('only a refuse fault takes seconds')
        after = float(after or 0)
        if after < 0:
            raise ClusterError('after cannot be negative')
        if kind != 'drop' and (match or after):
            raise ClusterError('match and after apply to drop faults only')
        fault = {'id': next(self._fault_ids), 'kind': kind, 'vmid': vmid, 'seconds': seconds, 'times': times,
                 'match': match, 'after': after, 'hits': []}
        self.faults.append(fault)
        LOG.info('guest fault added: %s', fault)
        return dict(fault)

    def clear_faults(self):
        self.faults = []
        self._drop_seen = {}

    def _take_fault(self, kinds, vmid):
        for fault in self.faults:
            if fault['kind'] in kinds and fault['vmid'] in (None, vmid) and fault['times'] != 0:
                if fault['times'] is not None:
                    fault['times'] -= 1
                fault['hits'].append({'vmid': vmid, 'time': time.time()})
                return fault
        return None

    def set_dhcp(self, delay, vmid=None):
        """Leases come `delay` seconds after a guest starts, or never (None); for one VMID or every guest."""
        if delay is not None:
            delay = float(delay)
            if delay < 0:
                raise ClusterError('the DHCP delay cannot be negative')
        if vmid is None:
            self.dhcp_delay = delay
        else:
            self.dhcp_override[_positive_int(vmid, 'VMID')] = delay
        return {'vmid': vmid, 'delay': delay}

    # --------------------------------------------------------- addresses

    def _lease_due(self, vmid, now):
        delay = self.dhcp_override.get(vmid, self.dhcp_delay)
        guest = self.guests.get(vmid)
        return delay is not None and guest is not None and guest.booted_at is not None \
            and now >= guest.booted_at + delay

    def _address(self, ct, now, taken):
        """The loopback address the running container answers on, or None (no lease yet, or not loopback)."""
        ip = net_ip(first_nic(ct)[1])
        if ip == 'dhcp':
            return self.pool.allocate(ct.vmid, taken) if self._lease_due(ct.vmid, now) else None
        return loopback(ip) if ip else None

    def with_leases(self, ct, data):
        """/interfaces of a running container with the address of its DHCP lease, once it has one."""
        if not data or ct is None or ct.vmid not in self.leases_visible:
            return data
        value = first_nic(ct)[1]
        name = dict(p.split('=', 1) for p in str(value).split(',') if '=' in p).get('name', 'eth0')
        address = self.pool.assigned.get(ct.vmid)
        for item in data:
            if item.get('name') == name and address:
                item['inet'] = '{0}/{1}'.format(address, self.pool.prefix)
                item['ip-addresses'].insert(0, {'ip-address-type': 'inet', 'ip-address': address,
                                                'prefix': str(self.pool.prefix)})
        return data

    def _pin(self, ct, taken):
        """Static addressing: the site's IPAM writes a free address into the new container's DHCP NIC."""
        key, value = first_nic(ct)
        self.unpinned.discard(ct.vmid)
        if key is None or net_ip(value) != 'dhcp':
            return
        address = self.pool.allocate(ct.vmid, taken)
        ct.config[key] = with_ip(value, '{0}/{1}'.format(address, self.pool.prefix))
        LOG.info('CT %s: IPAM pinned %s to %s', ct.vmid, key, address)

    # --------------------------------------------------------- reconcile

    async def reconcile(self):
        """Make the guests match the containers: files, addresses, sshd up or down, faults."""
        async with self.lock:
            await self._reconcile(time.monotonic())

    async def _reconcile(self, now):
        pve = self.site.pve
        cts = {ct.vmid: ct for ct in pve.cts}
        for vmid, ct in cts.items():
            if vmid not in self.rooted:
                origin = self.site.origins.pop(vmid, None)
                await self._make_root(ct, origin)
                if origin:
                    self.site.born(ct)
                    self.unpinned.add(vmid)
            if self.roots is not None and ct.template and vmid in self.roots.stacks and not self.roots.frozen(vmid) \
                    and ct.status != 'running':
                # Converted to a template: its files are frozen (its linked clones lie on them).
                self.roots.freeze(vmid)
        taken = set(a for a in (loopback(net_ip(first_nic(ct)[1])) for ct in cts.values()) if a)
        for vmid in sorted(self.unpinned):
            ct = cts.get(vmid)
            if ct is None:
                self.unpinned.discard(vmid)
            elif ct.lock != 'create' and not ct.template:
                if self.addressing == 'static':
                    self._pin(ct, taken)
                    taken.add(self.pool.assigned.get(vmid))
                self.unpinned.discard(vmid)
        wanted = {}
        for vmid, ct in cts.items():
            online = pve.nodes.get(ct.node, {}).get('online', True)
            if ct.template or ct.status != 'running' or not online:
                continue
            guest = self.guests.setdefault(vmid, Guest(vmid))
            if self.boots.get(vmid) != ct.pid:
                if guest.proc is not None:
                    # Restarted between two looks (a reboot): nothing of the last boot survives.
                    await self._stop(guest, everything=True)
                elif guest.holder is not None:
                    await self._shut_down(guest)
                self.boots[vmid] = ct.pid
                self._boot(guest, now)
            wanted[vmid] = self._address(ct, now, taken)
        for vmid, guest in list(self.guests.items()):
            if guest.proc is not None and guest.proc.poll() is not None:
                # sshd died on its own (killed from outside): the guest stays without SSH until its next start.
                guest.error = 'sshd exited with {0}: {1}'.format(guest.proc.returncode,
                                                                 _tail(os.path.join(self.guest_dir(vmid), 'sshd.log')))
                await self._stop(guest)
                guest.state = 'failed'
            if guest.proc is not None and wanted.get(vmid) != guest.address:
                # A stopped container ends all it runs; a new address only restarts sshd.
                await self._stop(guest, everything=vmid not in wanted)
            if vmid not in wanted and guest.holder is not None:
                # Also when its sshd had already gone: a stopped container runs nothing.
                await self._shut_down(guest)
            if vmid not in wanted:
                guest.state, guest.address = 'stopped', None
                self.boots.pop(vmid, None)
                self.leases_visible.discard(vmid)
        for vmid, address in sorted(wanted.items()):
            guest = self.guests[vmid]
            if address is None:
                guest.state = 'no-address'
                continue
            if guest.proc is None and guest.state != 'failed':
                guest.address = address
                if guest.suppressed:
                    guest.state = 'suppressed'
                elif now < guest.refuse_until:
                    guest.state = 'refusing'
                else:
                    await self._start(guest, address)
            if net_ip(first_nic(cts[vmid])[1]) == 'dhcp':
                self.leases_visible.add(vmid)
        for vmid in sorted(self.rooted - set(cts)):
            await self._destroyed(vmid)
        self._drop_sessions(now)
        self._write_known_hosts()

    def _boot(self, guest, now):
        """A new start of the container: fresh fault decisions and a fresh DHCP wait."""
        guest.booted_at = now
        guest.refuse_until = 0.0
        guest.suppressed = False
        guest.error = None
        if guest.state == 'failed':
            guest.state = 'stopped'
        fault = self._take_fault(('refuse', 'never'), guest.vmid)
        if fault and fault['kind'] == 'refuse':
            guest.refuse_until = now + fault['seconds']
        elif fault:
            guest.suppressed = True
        self.leases_visible.discard(guest.vmid)

    async def _destroyed(self, vmid):
        guest = self.guests.pop(vmid, None)
        if guest is not None and guest.proc is not None:
            await self._stop(guest)
        if guest is not None and guest.holder is not None:
            await self._shut_down(guest)
        end_guest_processes(self.root(vmid))
        self.pool.release(vmid)
        self.boots.pop(vmid, None)
        self.leases_visible.discard(vmid)
        self.dhcp_override.pop(vmid, None)
        if self.roots is not None:
            # Set aside at once, removed in a thread: the cluster answers requests while a full clone's files go.
            await asyncio.to_thread(self.roots.purge, self.roots.set_aside(vmid))
        else:
            shutil.rmtree(self.guest_dir(vmid), ignore_errors=True)
        self.rooted.discard(vmid)
        LOG.info('CT %s destroyed: its files are removed', vmid)

    # -------------------------------------------------------------- sshd

    def _argv(self, vmid, address, host_key, log):
        root = self.root(vmid)
        return [self.sshd, '-D', '-f', '/dev/null', '-E', log, '-p', str(self.port),
                '-o', 'ListenAddress=' + address, '-o', 'HostKey=' + host_key,
                '-o', 'AuthorizedKeysFile=' + self.authorized_keys(vmid), '-o', 'StrictModes=no',
                '-o', 'PasswordAuthentication=no', '-o', 'KbdInteractiveAuthentication=no', '-o', 'UsePAM=no',
                '-o', 'PermitRootLogin=prohibit-password', '-o', 'UseDNS=no', '-o', 'PidFile=none',
                '-o', 'Subsystem=sftp internal-sftp',
                # SHLVL=1: bash reads ~/.bashrc for a command run by sshd only at shell level 1, so the host's own
                # shell start-up (a version manager's hooks, say) stays out of the guests, as in a real container.
                # TMPDIR: what the guest's programs leave in their temporary directory (the agent CLIs unpack
                # libraries there at every start) goes with the container, as a real container's /tmp does.
                '-o', 'SetEnv=LOCALPVE_VMID={0} LOCALPVE_GUEST_ROOT={1} SHLVL=1 TMPDIR={2}'.format(
                    vmid, root, self.tmp_dir(vmid))]

    async def _boot_namespaces(self, guest):
        """debian tier: the guest's namespaces and their first process, once per start of the container."""
        if guest.holder is not None:
            return
        started = time.monotonic()
        cache = getattr(self.site, 'package_cache', None)
        guest.holder, guest.init_pid = await debian.boot(self.root(guest.vmid), self.hostname(guest.vmid),
                                                         os.path.join(self.guest_dir(guest.vmid), 'init.log'),
                                                         setup=cache.guest_setup() if cache is not None else None)
        guest.boot_secs = time.monotonic() - started
        with open(os.path.join(self.guest_dir(guest.vmid), 'init.pid'), 'w', encoding='ascii') as out:
            out.write('{0}\n'.format(guest.holder.pid))
        LOG.info('CT %s: namespaces up (first process %s) after %.3fs', guest.vmid, guest.init_pid, guest.boot_secs)

    def hostname(self, vmid):
        """debian tier: the host name of the guest's namespaces."""
        ct = self.site.pve.ct(vmid)
        return ct.name if ct else 'CT{0}'.format(vmid)

    def debian_sshd_argv(self, guest, address):
        """debian tier: the guest's own sshd, listening on ``address``."""
        return debian.sshd_argv(guest.init_pid, self.port, address)

    async def _shut_down(self, guest):
        """debian tier: end the guest's namespaces and with them every process of the guest."""
        await debian.shut_down(guest.holder, guest.init_pid)
        LOG.info('CT %s: every process of the guest ended', guest.vmid)
        guest.holder = guest.init_pid = None
        try:
            os.unlink(os.path.join(self.guest_dir(guest.vmid), 'init.pid'))
        except FileNotFoundError:
            pass

    async def _start(self, guest, address):
        vmid = guest.vmid
        gdir = self.guest_dir(vmid)
        os.makedirs(gdir, exist_ok=True)
        host_key = os.path.join(gdir, 'ssh_host_ed25519_key')
        guest.host_key = pki.ssh_key(host_key, 'root@CT{0}'.format(vmid)).rsplit(' ', 1)[0]
        log = os.path.join(gdir, 'sshd.log')
        started = time.monotonic()
        guest.state, guest.address = 'starting', address
        if self.roots is not None:
            try:
                await self._boot_namespaces(guest)
            except ClusterError as exc:
                guest.error = str(exc)
                LOG.error('CT %s: %s', vmid, guest.error)
                guest.state = 'failed'
                return
            own = os.path.join(self.root(vmid), debian.HOST_KEY.lstrip('/'))
            if os.path.exists(own):
                # The guest has a host key of its own already (made at an earlier start, or by the collection, which
                # gives a clone new keys): a real container keeps its keys across restarts.
                guest.host_key = pki.ssh_key(own, 'root@CT{0}'.format(vmid)).rsplit(' ', 1)[0]
            else:
                self.roots.install_host_key(vmid, host_key)
            argv = self.debian_sshd_argv(guest, address)
        else:
            os.makedirs(self.tmp_dir(vmid), exist_ok=True)
            os.chmod(self.tmp_dir(vmid), 0o1777)
            argv = self._argv(vmid, address, host_key, log)
        guest.proc = system.spawn(argv, log)
        guest.sshd_pid = guest.proc.pid
        with open(os.path.join(gdir, 'sshd.pid'), 'w', encoding='ascii') as out:
            out.write('{0}\n'.format(guest.proc.pid))
        while (address, self.port) not in system.listening():
            if guest.proc.poll() is not None or time.monotonic() - started > SSHD_START_TIMEOUT:
                guest.error = 'sshd did not start on {0}:{1}: {2}'.format(address, self.port, _tail(log))
                LOG.error('CT %s: %s', vmid, guest.error)
                await self._stop(guest)
                guest.state = 'failed'
                return
            await asyncio.sleep(0.005)
        guest.startup_secs = time.monotonic() - started
        guest.state = 'up'
        if self.roots is not None:
            guest.sshd_pid = (system.children(guest.proc.pid) or [guest.proc.pid])[0]
        LOG.info('CT %s: sshd %s listening on %s:%s after %.3fs', vmid, guest.sshd_pid, address, self.port,
                 guest.startup_secs)

    async def _stop(self, guest, everything=False):
        """Kill the guest's sshd with every session and command under it; with ``everything``, also what those
        started that left the sshd's tree (an agent runner in a session of its own, its agent), as stopping a
        container does."""
        proc = guest.proc
        # debian tier: proc is nsenter, and its child the guest's sshd, in the guest's pid namespace. That child is
        # killed (with its tree) and left to nsenter to reap: were nsenter killed with it, it could die first and
        # hand the dead sshd to this machine's init, and the end of the guest's namespaces (_shut_down) waits
        # until that init reaps it, which some inits (a VM's or a container's) do only every second or two.
        below = self.roots is not None
        if proc.poll() is None:
            # Only while it is ours: once reaped, its pid may belong to anything.
            if below:
                system.stop_then_kill(lambda: system.descendants(proc.pid))
            else:
                system.kill_tree(proc.pid)
        deadline = time.monotonic() + NSENTER_REAP_TIMEOUT
        while proc.poll() is None:
            if below and time.monotonic() > deadline:
                system.kill_tree(proc.pid)
                below = False
            elif below:
                # nsenter stops itself when it sees its child stopped (as a shell's job control would), until it
                # is continued: it then reaps the child and ends.
                os.kill(proc.pid, signal.SIGCONT)
            await asyncio.sleep(0.005)
        guest.proc = None
        try:
            os.unlink(os.path.join(self.guest_dir(guest.vmid), 'sshd.pid'))
        except FileNotFoundError:
            pass
        LOG.info('CT %s: sshd %s stopped', guest.vmid, proc.pid)
        if everything and guest.holder is not None:
            await self._shut_down(guest)
        elif everything:
            end_guest_processes(self.root(guest.vmid))

    async def stop_all(self, sweep=True):
        """Stop every guest with all it runs (the cluster stops); the debian tier's roots are unmounted.

        ``sweep=False`` stops this manager's guests only: what else runs under the guests directory is left, and
        nothing is unmounted. Managers that share a directory (the try-out cloud's fakes) all stop their guests so
        before one sweeps it: a sweep ends other managers' guests too, their nsenter with their sshd (which then
        waits for this machine's init to reap it, see _stop)."""
        async with self.lock:
            for guest in self.guests.values():
                if guest.proc is not None:
                    await self._stop(guest)
                    guest.state = 'stopped'
                if guest.holder is not None:
                    await self._shut_down(guest)
            if not sweep:
                return
            # Also what runs in guests whose sshd was already gone.
            end_guest_processes(self.dir + os.sep)
            if self.roots is not None:
                self.roots.unmount_all()

    def _drop_sessions(self, now):
        active = [f for f in self.faults if f['kind'] == 'drop' and f['times'] != 0]
        if not active:
            return
        self._drop_seen = {k: v for k, v in self._drop_seen.items() if system.alive(k[1])}
        for guest in self.guests.values():
            if guest.proc is None or guest.state != 'up':
                continue
            for session in system.children(guest.sshd_pid):
                below = system.descendants(session)
                if not below:
                    continue
                for fault in active:
                    if fault['vmid'] not in (None, guest.vmid) or fault['times'] == 0:
                        continue
                    if fault['match'] and not any(fault['match'] in system.cmdline(p) for p in below):
                        continue
                    first = self._drop_seen.setdefault((fault['id'], session), now)
                    if now - first < fault['after']:
                        continue
                    system.kill_tree(session)
                    if fault['times'] is not None:
                        fault['times'] -= 1
                    fault['hits'].append({'vmid': guest.vmid, 'time': time.time()})
                    LOG.info('CT %s: dropped SSH session %s (fault %s)', guest.vmid, session, fault['id'])
                    break

    def _write_known_hosts(self):
        lines = []
        for guest in sorted(self.guests.values(), key=lambda g: g.vmid):
            if guest.proc is not None and guest.host_key:
                name = guest.address if self.port == 22 else '[{0}]:{1}'.format(guest.address, self.port)
                lines.append('{0} {1}\n'.format(name, guest.host_key))
        if lines != self._known:
            with open(self.known_hosts, 'w', encoding='utf-8') as out:
                out.writelines(lines)
            self._known = lines

    # ------------------------------------------------------------ views

    def view(self):
        out = []
        for ct in sorted(self.site.pve.cts, key=lambda c: c.vmid):
            guest = self.guests.get(ct.vmid)
            item = {'vmid': ct.vmid, 'node': ct.node, 'name': ct.name, 'status': ct.status,
                    'template': bool(ct.template), 'root': self.root(ct.vmid)}
            if guest is not None and ct.status == 'running':
                item.update(guest.view())
            else:
                item.update(address=None, sshd='stopped', sshd_pid=None)
            out.append(item)
        return out


def _special_files(directory, names):
    """What a copy of a live guest's root leaves out: sockets and pipes (an agent runner's socket, sshd's)."""
    skipped = []
    for name in names:
        try:
            mode = os.lstat(os.path.join(directory, name)).st_mode
        except OSError:
            skipped.append(name)
            continue
        if stat.S_ISSOCK(mode) or stat.S_ISFIFO(mode):
            skipped.append(name)
    return skipped


def _positive_int(value, what):
    try:
        number = int(value)
    except (TypeError, ValueError):
        raise ClusterError('{0} must be a whole number, not {1!r}'.format(what, value)) from None
    if number < 1:
        raise ClusterError('{0} must be at least 1, not {1}'.format(what, number))
    return number


def _tail(path, lines=3):
    try:
        with open(path, encoding='utf-8', errors='replace') as fh:
            return ' | '.join(line.strip() for line in fh.readlines()[-lines:]) or 'no output'
    except OSError:
        return 'no log'


def end_guest_processes(root):
    """Kill, by pid, what SSH sessions into guests started: every process whose LOCALPVE_GUEST_ROOT (which the
    host tier's sshd sets) starts with ``root`` (one guest's root, or the guests directory and a separator), and
    every process whose root directory lies there (the debian tier's). Returns the pids."""
    needle = ('LOCALPVE_GUEST_ROOT=' + root).encode()
    killed = system.stop_then_kill(lambda: set(system.with_environment(needle)) | set(system.rooted_under(root)))
    for pid in killed:
        LOG.info('ended %s, left by a guest session under %s', pid, root)
    return killed


def stop_leftovers(state_dir):
    """Kill what the guests of a cluster that died without cleaning up left behind: sshd by its pid file, and
    commands of SSH sessions by the guest root in their environment. Returns the pids killed."""
    killed = []
    guests = os.path.join(state_dir, 'guests')
    if not os.path.isdir(guests):
        return killed
    for name in os.listdir(guests):
        path = os.path.join(guests, name, 'sshd.pid')
        try:
            with open(path, encoding='ascii') as fh:
                pid = int(fh.read().strip())
        except (OSError, ValueError):
            continue
        if system.alive(pid) and 'sshd' in system.cmdline(pid) and os.path.join(guests, name) in system.cmdline(pid):
            system.kill_tree(pid)
            killed.append(pid)
        os.unlink(path)
    for name in os.listdir(guests):
        # debian tier: the process holding a guest's namespaces; every process of the guest is below it.
        path = os.path.join(guests, name, 'init.pid')
        try:
            with open(path, encoding='ascii') as fh:
                pid = int(fh.read().strip())
        except (OSError, ValueError):
            continue
        if system.alive(pid) and 'unshare' in system.cmdline(pid) and os.path.join(guests, name) in system.cmdline(pid):
            system.kill_tree(pid)
            system.wait_gone([pid], 5)
            killed.append(pid)
        os.unlink(path)
    killed += end_guest_processes(guests + os.sep)
    system.unmount_under(guests)
    return killed
