"""What the fake clouds' guests do alike: the try-out cluster's guest machinery (tests/localpve/guests.py) following a
fake's machines (EC2 instances, Hetzner servers, Compute Engine instances, Azure VMs) instead of containers. A
machine's files live under <state>/guests/<key>/root, with root's authorized keys the machine was made with; its sshd
listens on its addresses while it runs; its known hosts go to a file of the cloud's own.

Two tiers, as the try-out cluster's. host (the default): sshd runs commands on this host as the current user, in a
directory of the machine's own. debian (`up --guests debian`): each machine is a Debian userland of its own
(tests/localpve/debian.py, the base root without any user but root, as a cloud image), running in namespaces of its
own with its own sshd that lets in root; users the machine is made with (Azure's administrator user) are made in it,
and the agent user is the one the collection's bootstrap makes.
"""

import asyncio
import json
import os
import re
import shutil

from tests.localpve import debian
from tests.localpve import guests as pve_guests
from tests.models.tryout import link_clis
from tests.localpve import pki

from .config import CloudError


class MachineGuests(pve_guests.GuestManager):
    """Guests of a fake cloud's machines, keyed by a string of the fake's (a prefix and the machine's id)."""

    # The file under <state>/ssh the guests' host keys are written to.
    known_hosts_name = 'known_hosts'
    # True: the guests' refuse and never faults (tests/localcloud fault guest ...) act on them.
    honours_faults = False

    def __init__(self, site, fake=None):
        super().__init__(site)
        self.fake = fake
        self.known_hosts = os.path.join(site.options.state_dir, 'ssh', self.known_hosts_name)
        # What machines() said at the last reconcile.
        self.current = {}
        if self.tier == 'debian':
            # One set of roots for every fake's machines: they share the guests directory, and a set of roots removes
            # the layers its own containers do not use.
            self.roots = site.machine_roots()

    def machines(self):
        """The fake's machines now: {key: {'address', 'keys', 'running', ...}} (for the _reconcile below)."""
        raise NotImplementedError

    def view_id(self, item):
        """The id view() files a machine's guest under (the fake's own id of the machine)."""
        raise NotImplementedError

    async def _reconcile(self, now):
        current = self.machines()
        self.current = current
        for key, item in current.items():
            if key not in self.rooted:
                await self.make_keyed_root(key, item['keys'], item.get('users'))
            await self.follow(key, item['running'] and item['address'] is not None, item['address'], now)
        for key in sorted(self.rooted - set(current)):
            await self.gone(key)
        self._drop_sessions(now)
        self._write_known_hosts()

    def view(self):
        out = {}
        for key, item in self.current.items():
            guest = self.guests.get(key)
            out[self.view_id(item)] = {
                'guest': key, 'root': self.root(key), 'address': item['address'],
                'sshd': guest.state if guest is not None and item['running'] else 'stopped',
                'sshd_pid': guest.sshd_pid if guest is not None and guest.proc is not None else None}
        return out

    async def make_keyed_root(self, key, keys, users=None):
        """A new machine's files: /workspace, and root's authorized keys (``keys``, public keys); on the debian tier
        also the users of ``users`` ({name: their authorized keys})."""
        if self.roots is not None:
            await self.roots.make(key, ('create', '\n'.join(keys)))
            root = self.root(key)
            os.makedirs(os.path.join(root, 'workspace'), mode=0o755, exist_ok=True)
            for name, user_keys in sorted((users or {}).items()):
                debian.add_user(root, name, user_keys)
            self.rooted.add(key)
            return
        root = self.root(key)
        shutil.rmtree(self.guest_dir(key), ignore_errors=True)
        os.makedirs(os.path.join(root, 'workspace'))
        if self.agent_bin is not None:
            # The machine's image carries the real agent CLIs, as one built with the default toolset does.
            link_clis(root, self.site.options.ssh_user, self.agent_bin)
        path = self.authorized_keys(key)
        os.makedirs(os.path.dirname(path), mode=0o700)
        with open(path, 'w', encoding='utf-8') as out:
            out.writelines(k + '\n' for k in keys)
        os.chmod(path, 0o600)
        self.rooted.add(key)

    async def follow(self, key, running, address, now):
        """Make the guest of machine ``key`` match it: sshd up on ``address`` while it runs (from its first look
        as running, a boot), down with everything the guest runs once it does not."""
        guest = self.guests.setdefault(key, pve_guests.Guest(key))
        if guest.proc is not None and guest.proc.poll() is not None:
            guest.error = 'sshd exited with {0}'.format(guest.proc.returncode)
            await self._stop(guest)
            guest.state = 'failed'
        if not running:
            if guest.proc is not None:
                await self._stop(guest, everything=True)
            guest.state, guest.address = 'stopped', None
            self.boots.pop(key, None)
            return
        if self.boots.get(key) is None:
            self.boots[key] = now
            self._boot(guest, now)
        if guest.proc is None and guest.state != 'failed':
            guest.address = address
            if self.honours_faults and guest.suppressed:
                guest.state = 'suppressed'
            elif self.honours_faults and now < guest.refuse_until:
                guest.state = 'refusing'
            else:
                await self._start(guest, address)

    async def gone(self, key):
        """The machine is deleted: its guest ends and its files go."""
        guest = self.guests.pop(key, None)
        if guest is not None and guest.proc is not None:
            await self._stop(guest, everything=True)
        pve_guests.end_guest_processes(self.root(key))
        self.remove_root(key)
        self.boots.pop(key, None)

    def remove_root(self, key):
        """The machine's files go (on the debian tier unmounted first)."""
        if self.roots is not None:
            self.roots.destroy(key)
        else:
            shutil.rmtree(self.guest_dir(key), ignore_errors=True)
        self.rooted.discard(key)

    def hostname(self, vmid):
        return re.sub(r'[^a-z0-9-]+', '-', str(vmid).lower().rsplit('/', 1)[-1])[-40:].strip('-') or 'machine'

    # ------------------------------------------------------------ addresses

    def public_address(self, key):
        """The machine's public address where its sshd listens as well (None: only its guest address)."""
        return None

    def host_addresses(self, key, guest):
        """The addresses the guest's host key is known at."""
        return (guest.address,)

    def _argv(self, vmid, address, host_key, log):
        argv = super()._argv(vmid, address, host_key, log)
        public = self.public_address(vmid)
        if public and public != address:
            argv += ['-o', 'ListenAddress=' + public]
        return argv

    def debian_sshd_argv(self, guest, address):
        argv = super().debian_sshd_argv(guest, address)
        public = self.public_address(guest.vmid)
        if public and public != address:
            argv += ['-o', 'ListenAddress=' + public]
        return argv

    def _write_known_hosts(self):
        lines = []
        for key, guest in sorted(self.guests.items()):
            if guest.proc is None or not guest.host_key:
                continue
            for address in self.host_addresses(key, guest):
                if address:
                    name = address if self.port == 22 else '[{0}]:{1}'.format(address, self.port)
                    lines.append('{0} {1}\n'.format(name, guest.host_key))
        if lines != self._known:
            with open(self.known_hosts, 'w', encoding='utf-8') as out:
                out.writelines(lines)
            self._known = lines


class KeyedAddresses:
    """The fleet's public address pool as one fake sees it: its machines' addresses are keyed ``prefix`` and the
    fake's own id (beside the EC2 instances and the other fakes' machines)."""

    def __init__(self, pool, prefix):
        self.pool = pool
        self.prefix = prefix

    def allocate(self, ident):
        return self.pool.allocate(self.prefix + str(ident))

    def release(self, ident):
        self.pool.release(self.prefix + str(ident))


class CloudPart:
    """A fake cloud API of the try-out cloud beside moto (its fake, its guests and what cloud.json says of it):
    started and stopped by CloudSite, ticked with the fleet, and asked its control operations (op_* methods, the
    control API's op ``title``)."""

    title = None
    # What a call with bad arguments raises.
    bad_arguments = (TypeError, ValueError)
    # The file in the state directory its credentials are kept in (created on the first start).
    secrets_file = None

    def __init__(self, site):
        self.site = site
        self.fake = None
        self.guests = None
        self.info = None

    def stored_secrets(self, fresh):
        """The credentials kept in secrets_file, with the values of ``fresh`` added (and kept) for the ones it does
        not hold yet."""
        path = os.path.join(self.site.options.state_dir, self.secrets_file)
        data = {}
        if os.path.exists(path):
            with open(path, encoding='utf-8') as fh:
                data = json.load(fh)
        if any(k not in data for k in fresh):
            data = dict(fresh, **data)
            pki.write_private(path, json.dumps(data, indent=2).encode())
        return data

    async def tick(self):
        if self.guests is not None:
            await self.guests.reconcile()

    async def stop(self):
        if self.guests is not None:
            await self.guests.stop_all()
        if self.fake is not None:
            stopped = self.fake.stop()
            if asyncio.iscoroutine(stopped):
                await stopped

    def op(self, action, arguments):
        method = getattr(self, 'op_' + str(action).replace('-', '_'), None)
        if method is None or self.fake is None:
            raise CloudError('unknown {0} operation {1!r}'.format(self.title, action))
        try:
            return method(**(arguments or {}))
        except self.bad_arguments as exc:
            raise CloudError('bad arguments for {0} operation {1}: {2}'.format(self.title, action, exc)) from None
