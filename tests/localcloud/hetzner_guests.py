"""The Hetzner fake's guests: one sshd per running server, on the server's public IPv4 address (a loopback address
of the cloud's public range), authorizing the public keys of the SSH keys the server was created with. The
try-out cluster's guest machinery (host tier, tests/localcloud/machines.py), as the EC2 instances' guests; their
files live under <state>/guests/hz-<server id>/root.
"""

from .machines import MachineGuests

PREFIX = 'hz-'


class HetznerGuests(MachineGuests):
    """Guests of the fake's servers. reconcile() makes them match the servers (on every tick of the cloud)."""

    known_hosts_name = 'hetzner_known_hosts'

    def __init__(self, site, fake):
        super().__init__(site, fake)
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
            out[str(item['id'])] = {
                'guest': key, 'root': self.root(key), 'address': item['address'],
                'sshd': guest.state if guest is not None and item['running'] else 'stopped',
                'sshd_pid': guest.sshd_pid if guest is not None and guest.proc is not None else None}
        return out
