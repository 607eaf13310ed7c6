"""The Hetzner Cloud fake's part of a try-out cloud: its HTTP server (tests/localcloud/hetzner.py), its guests
(hetzner_guests.py), its API token and what cloud.json says of it (the `hetzner` key), and its control operations
(CloudSite.op_hetzner dispatches to the op_* methods here)."""

import json
import os
import secrets

from tests.localpve import pki

from .config import CloudError
from .hetzner import HetznerCloud
from .hetzner_guests import PREFIX, HetznerGuests

SECRETS_FILE = 'hetzner-secrets.json'
SHARED_KEY = 'localcloud'


class Addresses(object):
    """The fleet's public address pool, keyed hz-<server id> (beside the EC2 instances and the Azure VMs)."""

    def __init__(self, pool):
        self.pool = pool

    def allocate(self, server_id):
        return self.pool.allocate(PREFIX + str(server_id))

    def release(self, server_id):
        self.pool.release(PREFIX + str(server_id))


class HetznerPart(object):
    """Started and stopped by CloudSite; ticked with the fleet."""

    def __init__(self, site):
        self.site = site
        self.fake = None
        self.guests = None
        self.info = None

    def _token(self):
        path = os.path.join(self.site.options.state_dir, SECRETS_FILE)
        data = {}
        if os.path.exists(path):
            with open(path, encoding='utf-8') as fh:
                data = json.load(fh)
        if 'token' not in data:
            data['token'] = secrets.token_urlsafe(48)
            pki.write_private(path, json.dumps(data, indent=2).encode())
        return data['token']

    async def start(self, public_key):
        opts = self.site.options
        token = self._token()
        self.fake = HetznerCloud(token, Addresses(self.site.fleet.public_pool), boot_secs=opts.boot_secs,
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

    async def tick(self):
        if self.guests is not None:
            await self.guests.reconcile()

    async def stop(self):
        if self.guests is not None:
            await self.guests.stop_all()
        if self.fake is not None:
            await self.fake.stop()

    # ------------------------------------------------------------ operations (control API: op hetzner)

    def op(self, action, arguments):
        method = getattr(self, 'op_' + str(action).replace('-', '_'), None)
        if method is None or self.fake is None:
            raise CloudError('unknown Hetzner operation {0!r}'.format(action))
        try:
            return method(**(arguments or {}))
        except (TypeError, ValueError) as exc:
            raise CloudError('bad arguments for Hetzner operation {0}: {1}'.format(action, exc)) from None

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
