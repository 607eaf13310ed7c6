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

    def machines(self):
        out = {}
        with self.fake.lock:
            for name in list(self.fake.instances):
                instance = self.fake.instances[name]
                nics = instance.get('networkInterfaces') or [{}]
                address = ((nics[0].get('accessConfigs') or [{}])[0]).get('natIP')
                out[PREFIX + name] = {'name': name, 'address': address, 'keys': instance_keys(instance),
                                      'running': instance['status'] in ('RUNNING', 'STOPPING')}
        return out

    def view_id(self, item):
        return item['name']
