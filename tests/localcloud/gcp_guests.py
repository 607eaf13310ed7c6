"""The Compute Engine fake's guests: one sshd per running instance, on the instance's external address (a loopback
address of the cloud's public range), authorizing the keys of its ``ssh-keys`` metadata. The try-out cluster's guest
machinery (host tier, tests/localcloud/machines.py), as the EC2 instances' and Hetzner servers' guests; their files
live under <state>/guests/gce-<instance name>/root.
"""

from .machines import MachineGuests

PREFIX = 'gce-'


def instance_keys(instance):
    """The public keys of an instance's ssh-keys metadata (lines of user:key)."""
    items = dict((i.get('key'), i.get('value')) for i in (instance.get('metadata') or {}).get('items') or [])
    keys = []
    for line in (items.get('ssh-keys') or '').splitlines():
        user, sep, key = line.partition(':')
        if sep and key.strip():
            keys.append(key.strip())
    return keys


class GcpGuests(MachineGuests):
    """Guests of the fake's instances. reconcile() makes them match the instances (on every tick of the cloud)."""

    known_hosts_name = 'gcp_known_hosts'

    def __init__(self, site, fake):
        super().__init__(site, fake)
        self.current = {}

    def _instances(self):
        out = {}
        with self.fake.lock:
            for name in list(self.fake.instances):
                instance = self.fake.instances[name]
                nics = instance.get('networkInterfaces') or [{}]
                address = ((nics[0].get('accessConfigs') or [{}])[0]).get('natIP')
                out[PREFIX + name] = {'name': name, 'address': address, 'keys': instance_keys(instance),
                                      'running': instance['status'] in ('RUNNING', 'STOPPING')}
        return out

    async def _reconcile(self, now):
        current = self._instances()
        self.current = current
        for key, item in current.items():
            if key not in self.rooted:
                self.make_keyed_root(key, item['keys'])
            await self.follow(key, item['running'] and item['address'] is not None, item['address'], now)
        for key in sorted(self.rooted - set(current)):
            await self.gone(key)
        self._drop_sessions(now)
        self._write_known_hosts()

    def view(self):
        out = {}
        for key, item in self.current.items():
            guest = self.guests.get(key)
            out[item['name']] = {
                'guest': key, 'root': self.root(key), 'address': item['address'],
                'sshd': guest.state if guest is not None and item['running'] else 'stopped',
                'sshd_pid': guest.sshd_pid if guest is not None and guest.proc is not None else None}
        return out
