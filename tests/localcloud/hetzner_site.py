"""The Hetzner Cloud fake's part of a try-out cloud: its HTTP server (tests/localcloud/hetzner.py), its guests
(hetzner_guests.py), its API token and what cloud.json says of it (the `hetzner` key), and its control operations
(CloudSite.op_hetzner dispatches to the op_* methods here)."""

import os
import secrets

from .hetzner import HetznerCloud
from .hetzner_guests import PREFIX, HetznerGuests
from .machines import CloudPart, KeyedAddresses

SECRETS_FILE = 'hetzner-secrets.json'
SHARED_KEY = 'localcloud'


class HetznerPart(CloudPart):
    """Started and stopped by CloudSite; ticked with the fleet."""

    title = 'Hetzner'
    secrets_file = SECRETS_FILE

    def _token(self):
        return self.stored_secrets({'token': secrets.token_urlsafe(48)})['token']

    async def start(self, public_key):
        opts = self.site.options
        token = self._token()
        self.fake = HetznerCloud(token, KeyedAddresses(self.site.fleet.public_pool, PREFIX), boot_secs=opts.boot_secs,
                                 delete_secs=opts.shutdown_secs, host=opts.host, port=0)
        # A shared key of the project (the cloud's own key pair): the collection never removes it.
        self.fake.ssh_keys[1] = {'id': 1, 'name': SHARED_KEY, 'fingerprint': 'localcloud',
                                 'public_key': ' '.join(public_key.split()), 'labels': {},
                                 'created': '2025-01-01T00:00:00+00:00'}
        await self.fake.start()
        self.guests = HetznerGuests(self.site, self.fake)
        guest_root = os.path.join(self.guests.dir, PREFIX + '{vmid}', 'root')
        self.info = {'endpoint': self.fake.url, 'token': token, 'location': 'fsn1', 'server_type': 'cx22',
                     'image': 'ubuntu-24.04', 'ssh_key': SHARED_KEY, 'network': 'workspaces',
                     'guest_prefix': guest_root, 'ssh_known_hosts': self.guests.known_hosts,
                     'boot_secs': self.fake.boot_secs, 'delete_secs': self.fake.delete_secs}
        return self.info

    # ------------------------------------------------------------ operations (control API: op hetzner)

    def op_servers(self):
        self.fake.tick()
        guests = self.guests.view() if self.guests is not None else {}
        out = []
        for server in self.fake.view()['servers']:
            server.update(guests.get(str(server['id']), {'sshd': 'stopped', 'sshd_pid': None}))
            out.append(server)
        return out

    def op_view(self):
        self.fake.tick()
        return self.fake.view()

    def op_requests(self):
        return list(self.fake.requests)

    def op_rule(self, kind, method=None, path=None, times=1, seconds=None, status=None, code=None, message=None,
                match=None):
        return self.fake.add_rule(kind, method=method, path=path, times=times, seconds=seconds, status=status,
                                  code=code, message=message, match=match)

    def op_rules(self):
        return [dict(r) for r in self.fake.rules]

    def op_clear(self):
        self.fake.clear_rules()
        return []

    def op_foreign_create(self, name, labels=None):
        """A server someone else made in the project (no guest keys of ours), with ``labels``."""
        server_id = next(self.fake._ids)  # pylint: disable=protected-access
        self.fake.servers[server_id] = {
            'id': server_id, 'name': name, 'status': 'off', 'labels': dict(labels or {}), '_keys': [],
            'public_net': {'ipv4': None, 'ipv6': None, 'floating_ips': [], 'firewalls': []},
            'protection': {'delete': False, 'rebuild': False}, '_ready_at': 0}
        return {'id': server_id}
