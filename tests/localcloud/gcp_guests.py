"""The Compute Engine fake's guests: one sshd per running instance, on the instance's external address (a loopback
address of the cloud's public range), authorizing the keys of its ``ssh-keys`` metadata. The try-out cluster's guest
machinery (host tier, tests/localcloud/machines.py), as the EC2 instances' and Hetzner servers' guests; their files
live under <state>/guests/gce-<instance name>/root.

Once a guest's sshd serves, the guest does what the Google guest agent of Compute Engine's public images does at each
boot: it writes the sshd's host key to the instance's guest attributes (hostkeys/<key type> = the encoded key),
through the fake's metadata server function, which refuses it unless the instance's metadata enables guest
attributes. Two faults (``arm``) change that for the next new instances: ``other`` publishes a key that no sshd
serves (as when something else answers at the instance's address), ``silent`` publishes none (an image without the
guest agent).
"""

import os

from tests.localpve import pki

from .config import CloudError
from .machines import MachineGuests

PREFIX = 'gce-'
HOST_KEY_FAULTS = ('other', 'silent')


def instance_keys(instance):
    """The public keys of an instance's ssh-keys metadata (lines of user:key)."""
    items = {i.get('key'): i.get('value') for i in (instance.get('metadata') or {}).get('items') or []}
    keys = []
    for line in (items.get('ssh-keys') or '').splitlines():
        user, sep, key = line.partition(':')
        if sep and key.strip():
            keys.append(key.strip())
    return keys


class GcpGuests(MachineGuests):
    """Guests of the fake's instances. reconcile() makes them match the instances (on every tick of the cloud)."""

    known_hosts_name = 'gcp_known_hosts'

    def __init__(self, site, fake=None):
        super().__init__(site, fake)
        # Host key faults for the next new instances: [{'kind', 'times' (None: every one), 'hits'}].
        self.host_key_arms = []
        # Guest key -> the host key fault of its instance.
        self.host_key_faults = {}
        # Guest key -> the boot whose host keys were written to the guest attributes.
        self.published = {}

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

    # ------------------------------------------------------------ host keys in the guest attributes

    def arm_host_keys(self, kind, times=1):
        """The next ``times`` new instances (None: every one) publish a key no sshd serves (``other``) or none
        (``silent``)."""
        if kind not in HOST_KEY_FAULTS:
            raise CloudError('a host key fault is {0}, not {1!r}'.format(' or '.join(HOST_KEY_FAULTS), kind))
        if times is not None and int(times) < 1:
            raise CloudError('times must be at least 1 (or none for every instance)')
        arm = {'kind': kind, 'times': None if times is None else int(times), 'hits': []}
        self.host_key_arms.append(arm)
        return arm

    def clear_host_keys(self):
        self.host_key_arms = []
        self.host_key_faults.clear()

    def _take_arm(self, key, name):
        for arm in self.host_key_arms:
            if arm['times'] is None or len(arm['hits']) < arm['times']:
                arm['hits'].append(name)
                self.host_key_faults[key] = arm['kind']
                return

    async def _reconcile(self, now):
        for key in set(self.machines()) - self.rooted:
            self._take_arm(key, key[len(PREFIX):])
        await super()._reconcile(now)
        for key in set(self.published) - set(self.current):
            self.published.pop(key, None)
            self.host_key_faults.pop(key, None)
        for key, item in self.current.items():
            self._publish(key, item['name'])

    def _publish(self, key, name):
        """What the guest agent does once per boot: each host key sshd serves to hostkeys/<type>."""
        guest = self.guests.get(key)
        boot = self.boots.get(key)
        if guest is None or guest.proc is None or guest.state != 'up' or not guest.host_key or boot is None:
            return
        if self.published.get(key) == boot:
            return
        fault = self.host_key_faults.get(key)
        self.published[key] = boot
        if fault == 'silent':
            return
        host_key = guest.host_key
        if fault == 'other':
            path = os.path.join(self.guest_dir(key), 'published_other_key')
            os.makedirs(os.path.dirname(path), exist_ok=True)
            host_key = pki.ssh_key(path, 'other').rsplit(' ', 1)[0]
        kind, blob = host_key.split()[:2]
        # Refused (403) when the instance's metadata does not enable guest attributes, as the guest agent is.
        self.fake.guest_attribute_write(name, 'hostkeys', kind, blob)
