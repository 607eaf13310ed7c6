"""The Azure VMs' guests: one sshd per running VM of the ARM fake, on the NIC's private address and the public
IP resource's ipAddress (both loopback addresses the fake gave out), authorizing the keys of the VM's
osProfile.linuxConfiguration.ssh.publicKeys for its administrator user, and for root only as cloud-init would
(the fake's cloud_init_keys: the VM's customData says disable_root: false). The try-out cluster's guest machinery
(tests/localcloud/machines.py), as the EC2 instances' guests; their files live under
<state>/guests/azure<the VM's ARM id>/root.
"""

from .machines import MachineGuests


class AzureGuests(MachineGuests):
    """Guests of the ARM fake's VMs. reconcile() makes them match the VMs (called on every tick of the cloud)."""

    known_hosts_name = 'azure_known_hosts'
    honours_faults = True

    def __init__(self, site, fake):
        super().__init__(site, fake)
        self.vms = {}
        # guest key -> the vmId its files belong to
        self.identity = {}

    async def _reconcile(self, now):
        current = {item['key']: item for item in self.fake.vms()}
        self.vms = current
        for key, item in current.items():
            if key in self.rooted and self.identity.get(key) != item['vm_id']:
                # Replaced under the same id: another machine (its guest and files are new).
                await self.gone(key)
            if key not in self.rooted:
                self.identity[key] = item['vm_id']
                await self.make_keyed_root(key, item['keys'], item.get('users'))
            await self.follow(key, item['running'] and item['private'] is not None, item['private'], now)
        for key in sorted(self.rooted - set(current)):
            await self.gone(key)
        self._drop_sessions(now)
        self._write_known_hosts()

    async def gone(self, key):
        """The VM is deleted (or replaced): its guest ends; the files go (the OS disk's contents are not kept
        here)."""
        await super().gone(key)
        self.identity.pop(key, None)

    def public_address(self, key):
        return (self.vms.get(key) or {}).get('public')

    def host_addresses(self, key, guest):
        item = self.vms.get(key) or {}
        return (item.get('private'), item.get('public'))

    def view(self):
        out = {}
        for key, item in self.vms.items():
            guest = self.guests.get(key)
            out[item['vm'].id.lower()] = {
                'guest': key, 'root': self.root(key), 'private_ip': item['private'], 'public_ip': item['public'],
                'sshd': guest.state if guest is not None and item['running'] else 'stopped',
                'sshd_pid': guest.sshd_pid if guest is not None and guest.proc is not None else None}
        return out
