"""The Hetzner fake's guests: one sshd per running server, on the server's public IPv4 address (a loopback address
of the cloud's public range), authorizing the public keys of the SSH keys the server was created with. The
try-out cluster's guest machinery (host tier), as the EC2 instances' guests; their files live under
<state>/guests/hz-<server id>/root.
"""

import os
import shutil

from tests.localpve import guests as pve_guests

PREFIX = 'hz-'


class HetznerGuests(pve_guests.GuestManager):
    """Guests of the fake's servers. reconcile() makes them match the servers (on every tick of the cloud)."""

    def __init__(self, site, fake):
        super().__init__(site)
        self.fake = fake
        self.known_hosts = os.path.join(site.options.state_dir, 'ssh', 'hetzner_known_hosts')
        self.current = {}

    def _servers(self):
        out = {}
        for server in list(self.fake.servers.values()):
            address = ((server.get('public_net') or {}).get('ipv4') or {}).get('ip')
            out[PREFIX + str(server['id'])] = {'id': server['id'], 'address': address, 'keys': server['_keys'],
                                               'running': server['status'] in ('running', 'deleting')}
        return out

    async def _reconcile(self, now):
        self.fake.tick()
        current = self._servers()
        self.current = current
        for key, item in current.items():
            if key not in self.rooted:
                self._make_server_root(key, item['keys'])
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
            # The server is deleted: its guest ends and its files go.
            guest = self.guests.pop(key, None)
            if guest is not None and guest.proc is not None:
                await self._stop(guest, everything=True)
            pve_guests.end_guest_processes(self.root(key))
            shutil.rmtree(self.guest_dir(key), ignore_errors=True)
            self.rooted.discard(key)
            self.boots.pop(key, None)
        self._drop_sessions(now)
        self._write_known_hosts()

    def _make_server_root(self, key, keys):
        root = self.root(key)
        shutil.rmtree(self.guest_dir(key), ignore_errors=True)
        os.makedirs(os.path.join(root, 'workspace'))
        path = self.authorized_keys(key)
        os.makedirs(os.path.dirname(path), mode=0o700)
        with open(path, 'w', encoding='utf-8') as out:
            out.writelines(k + '\n' for k in keys)
        os.chmod(path, 0o600)
        self.rooted.add(key)

    def _write_known_hosts(self):
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
            out[str(item['id'])] = {
                'guest': key, 'root': self.root(key), 'address': item['address'],
                'sshd': guest.state if guest is not None and item['running'] else 'stopped',
                'sshd_pid': guest.sshd_pid if guest is not None and guest.proc is not None else None}
        return out
