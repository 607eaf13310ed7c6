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

    def machines(self):
        self.fake.tick()
        out = {}
        for server in list(self.fake.servers.values()):
            address = ((server.get('public_net') or {}).get('ipv4') or {}).get('ip')
            out[PREFIX + str(server['id'])] = {'id': server['id'], 'address': address, 'keys': server['_keys'],
                                               'running': server['status'] in ('running', 'deleting')}
        return out

    def view_id(self, item):
        return str(item['id'])
