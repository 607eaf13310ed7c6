"""The Compute Engine fake's part of a try-out cloud: its HTTP server (tests/localcloud/gcp.py, every answer checked
against the Compute v1 discovery document), its guests (gcp_guests.py), what cloud.json says of it (the `gcp` key),
and its control operations (CloudSite.op_gcp dispatches to the op_* methods here)."""

import asyncio
import socket

from . import gcpschema
from .gcp import GcpFake
from .gcp_guests import PREFIX, GcpGuests
from .machines import CloudPart, KeyedAddresses

PROJECT = 'ephemera-localcloud'
ZONE = 'europe-west1-b'
IMAGE = 'debian-12'
MACHINE_TYPE = 'e2-small'


def free_port(host):
    """A port nothing listens on at ``host`` now (bound, then released)."""
    sock = socket.socket()
    sock.bind((host, 0))
    port = sock.getsockname()[1]
    sock.close()
    return port


class GcpPart(CloudPart):
    """Started and stopped by CloudSite; ticked with the fleet."""

    title = 'GCP'

    async def start(self, public_key):
        opts = self.site.options
        loop = asyncio.get_running_loop()
        schema = await loop.run_in_executor(None, gcpschema.load)
        self.fake = GcpFake(project=PROJECT, zone=ZONE, host=opts.host, port=0, schema=schema,
                            images=(IMAGE,), addresses=KeyedAddresses(self.site.fleet.public_pool, PREFIX)).start()
        self.fake.metadata_port = free_port(opts.host)
        self.guests = GcpGuests(self.site, self.fake)
        self.info = {'endpoint': self.fake.url, 'project': PROJECT, 'zone': ZONE, 'image': IMAGE,
                     'machine_type': MACHINE_TYPE, 'network': 'default', 'ssh_public_key': ' '.join(public_key.split()),
                     'guest_prefix': self.guests.root(PREFIX + '{vmid}'), 'ssh_known_hosts': self.guests.known_hosts,
                     'discovery_revision': schema.revision,
                     # Each instance's metadata server listens on the instance's external address at this port.
                     'metadata_port': self.fake.metadata_port}
        return self.info

    # ------------------------------------------------------------ operations (control API: op gcp)

    async def tick(self):
        # Compute Engine's time limits first: an instance past its termination time goes, and its guest with it.
        self.fake.tick()
        await super(GcpPart, self).tick()

    def op_instances(self):
        guests = self.guests.view() if self.guests is not None else {}
        out = []
        with self.fake.lock:
            for name, instance in sorted(self.fake.instances.items()):
                view = {'name': name, 'id': instance['id'], 'status': instance['status'],
                        'labels': dict(instance['labels']), 'scheduling': dict(instance.get('scheduling') or {}),
                        'service_accounts': [a['email'] for a in instance.get('serviceAccounts') or []],
                        'metadata': {i['key']: i['value'] for i in instance['metadata'].get('items') or []}}
                view.update(guests.get(name, {'sshd': 'stopped', 'sshd_pid': None}))
                out.append(view)
        return out

    def op_inserts(self):
        return self.fake.inserts

    def op_calls(self):
        return [list(c) for c in self.fake.calls]

    def op_violations(self):
        return [list(v) for v in self.fake.violations]

    def op_fault(self, kind, method, pattern, times=1, seconds=0.0, message=None, match=None):
        self.fake.fault(kind, method, pattern, times=times, seconds=seconds, message=message, match=match)
        return []

    def op_op_seconds(self, seconds):
        self.fake.op_seconds = float(seconds)
        return []

    def op_deny(self, service_account='default', permission='compute.instances.delete'):
        self.fake.deny(service_account, permission)
        return []

    def op_terminated(self):
        """What Compute Engine did at instances' time limits: [name, action, unix seconds]."""
        with self.fake.lock:
            return [list(t) for t in self.fake.terminated]

    def op_metadata(self, name):
        return self.fake.metadata_server(name)

    def op_host_keys(self, kind='other', times=1):
        """The next ``times`` new instances (None: every one) publish in their guest attributes a host key no sshd
        serves (``other``), or none (``silent``)."""
        arm = self.guests.arm_host_keys(kind, times)
        return {'kind': arm['kind'], 'times': arm['times']}

    def op_guest_attributes(self, name):
        """What instance ``name``'s guest wrote to its guest attributes: {namespace: {key: value}}."""
        with self.fake.lock:
            return {ns: dict(entries) for ns, entries in self.fake.guest_attributes.get(name, {}).items()}

    def op_clear(self):
        with self.fake.lock:
            self.fake.faults = []
            self.fake.denied.clear()
            self.fake.op_seconds = 0.0
        if self.guests is not None:
            self.guests.clear_host_keys()
        return []
