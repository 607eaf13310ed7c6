"""The Compute Engine fake's guests: one sshd per running instance, on the instance's external address (a loopback
address of the cloud's public range), authorizing the keys of its ``ssh-keys`` metadata. The try-out cluster's guest
machinery (host tier), as the EC2 instances' and Hetzner servers' guests; their files live under
<state>/guests/gce-<instance name>/root.
"""

import os
import shutil

from tests.localpve import guests as pve_guests

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


class GcpGuests(pve_guests.GuestManager):
    """Guests of the fake's instances. reconcile() makes them match the instances (on every tick of the cloud)."""

    def __init__(self, site, fake):
        super().__init__(site)
        self.fake = fake
        self.known_hosts = os.path.join(site.options.state_dir, 'ssh', 'gcp_known_hosts')
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
                self._make_guest_root(key, item['keys'])
            guest = self.guests.setdefault(key, pve_guests.Guest(key))
            running = item['running'] and item['address'] is not None
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
                guest.address = item['address']
                await self._start(guest, item['address'])
        for key in sorted(self.rooted - set(current)):
            # The instance is deleted: its guest ends and its files go.
            guest = self.guests.pop(key, None)
            if guest is not None and guest.proc is not None:
                await self._stop(guest, everything=True)
            pve_guests.end_guest_processes(self.root(key))
            shutil.rmtree(self.guest_dir(key), ignore_errors=True)
            self.rooted.discard(key)
            self.boots.pop(key, None)
        self._drop_sessions(now)
        self._write_gcp_known_hosts()

    def _make_guest_root(self, key, keys):
        root = self.root(key)
        shutil.rmtree(self.guest_dir(key), ignore_errors=True)
        os.makedirs(os.path.join(root, 'workspace'))
        path = self.authorized_keys(key)
        os.makedirs(os.path.dirname(path), mode=0o700)
        with open(path, 'w', encoding='utf-8') as out:
            out.writelines(k + '\n' for k in keys)
        os.chmod(path, 0o600)
        self.rooted.add(key)

    def _write_gcp_known_hosts(self):
        lines = []
        for key, guest in sorted(self.guests.items()):
            if guest.proc is None or not guest.host_key or not guest.address:
                continue
            name = guest.address if self.port == 22 else '[{0}]:{1}'.format(guest.address, self.port)
            lines.append('{0} {1}\n'.format(name, guest.host_key))
        if lines != self._known:
            with open(self.known_hosts, 'w', encoding='utf-8') as out:
                out.writelines(lines)
            self._known = lines

    def view(self):
        out = {}
        for key, item in self.current.items():
            guest = self.guests.get(key)
            out[item['name']] = {
                'guest': key, 'root': self.root(key), 'address': item['address'],
                'sshd': guest.state if guest is not None and item['running'] else 'stopped',
                'sshd_pid': guest.sshd_pid if guest is not None and guest.proc is not None else None}
        return out
