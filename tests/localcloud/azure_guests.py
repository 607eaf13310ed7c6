"""The Azure VMs' guests: one sshd per running VM of the ARM fake, on the NIC's private address and the public
IP resource's ipAddress (both loopback addresses the fake gave out), authorizing the keys of the VM's
osProfile.linuxConfiguration.ssh.publicKeys. The try-out cluster's guest machinery (host tier), as the EC2
instances' guests; their files live under <state>/guests/azure<the VM's ARM id>/root.
"""

import os
import shutil

from tests.localpve import guests as pve_guests


class AzureGuests(pve_guests.GuestManager):
    """Guests of the ARM fake's VMs. reconcile() makes them match the VMs (called on every tick of the cloud)."""

    def __init__(self, site, fake):
        super().__init__(site)
        self.fake = fake
        self.known_hosts = os.path.join(site.options.state_dir, 'ssh', 'azure_known_hosts')
        self.vms = {}
        # guest key -> the vmId its files belong to
        self.identity = {}

    async def _reconcile(self, now):
        current = dict((item['key'], item) for item in self.fake.vms())
        self.vms = current
        for key, item in current.items():
            if key in self.rooted and self.identity.get(key) != item['vm_id']:
                # Replaced under the same id: another machine (its guest and files are new).
                await self._gone(key)
            if key not in self.rooted:
                self.identity[key] = item['vm_id']
                self._make_azure_root(key, item['keys'])
            guest = self.guests.setdefault(key, pve_guests.Guest(key))
            running = item['running'] and item['private'] is not None
            if guest.proc is not None and guest.proc.poll() is not None:
                guest.error = 'sshd exited with {0}'.format(guest.proc.returncode)
                await self._stop(guest)
                guest.state = 'failed'
            if not running:
                if guest.proc is not None:
                    await self._stop(guest, everything=True)
                guest.state, guest.address = 'stopped', None
                self.boots.pop(key, None)
                continue
            if self.boots.get(key) is None:
                self.boots[key] = now
                self._boot(guest, now)
            if guest.proc is None and guest.state != 'failed':
                guest.address = item['private']
                if guest.suppressed:
                    guest.state = 'suppressed'
                elif now < guest.refuse_until:
                    guest.state = 'refusing'
                else:
                    await self._start(guest, item['private'])
        for key in sorted(self.rooted - set(current)):
            await self._gone(key)
        self._drop_sessions(now)
        self._write_known_hosts()

    async def _gone(self, key):
        """The VM is deleted (or replaced): its guest ends; the files go (the OS disk's contents are not kept
        here)."""
        guest = self.guests.pop(key, None)
        if guest is not None and guest.proc is not None:
            await self._stop(guest, everything=True)
        pve_guests.end_guest_processes(self.root(key))
        shutil.rmtree(self.guest_dir(key), ignore_errors=True)
        self.rooted.discard(key)
        self.boots.pop(key, None)
        self.identity.pop(key, None)

    def _make_azure_root(self, key, keys):
        root = self.root(key)
        shutil.rmtree(self.guest_dir(key), ignore_errors=True)
        os.makedirs(os.path.join(root, 'workspace'))
        path = self.authorized_keys(key)
        os.makedirs(os.path.dirname(path), mode=0o700)
        with open(path, 'w', encoding='utf-8') as out:
            out.writelines(k + '\n' for k in keys)
        os.chmod(path, 0o600)
        self.rooted.add(key)

    def _argv(self, vmid, address, host_key, log):
        argv = super()._argv(vmid, address, host_key, log)
        item = self.vms.get(vmid)
        if item is not None and item['public'] and item['public'] != address:
            argv += ['-o', 'ListenAddress=' + item['public']]
        return argv

    def _write_known_hosts(self):
        lines = []
        for key, guest in sorted(self.guests.items()):
            if guest.proc is None or not guest.host_key:
                continue
            item = self.vms.get(key) or {}
            for address in (item.get('private'), item.get('public')):
                if address:
                    name = address if self.port == 22 else '[{0}]:{1}'.format(address, self.port)
                    lines.append('{0} {1}\n'.format(name, guest.host_key))
        if lines != self._known:
            with open(self.known_hosts, 'w', encoding='utf-8') as out:
                out.writelines(lines)
            self._known = lines

    def view(self):
        out = {}
        for key, item in self.vms.items():
            guest = self.guests.get(key)
            out[item['vm'].id.lower()] = {
                'guest': key, 'root': self.root(key), 'private_ip': item['private'], 'public_ip': item['public'],
                'sshd': guest.state if guest is not None and item['running'] else 'stopped',
                'sshd_pid': guest.sshd_pid if guest is not None and guest.proc is not None else None}
        return out
