# -*- coding: utf-8 -*-
# Copyright: ephemera.workspaces contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The Proxmox VE provider: workspaces are LXC containers cloned from a template.

Ids are VMIDs, locations are nodes, the scope is a pool (and the ``ephemera`` tag), task handles
are UPIDs, and the ownership marker is a line of the container's ``description``. The clone POST
writes ``hostname`` and ``description`` into the new config before PVE answers, so the VMID claim
and the marker are one atomic act; the candidate VMID is the idempotency token a rerun looks at.
"""

import re
import time

from ansible_collections.ephemera.workspaces.plugins.module_utils.providers import base
from ansible_collections.ephemera.workspaces.plugins.module_utils.providers.proxmox import containers
from ansible_collections.ephemera.workspaces.plugins.module_utils.providers.proxmox.client import (
    PveApiError,
    PveClient,
    PveNotFound,
    client_from_params,
)

NAME = 'proxmox'
_TAG_SPLIT = re.compile(r'[;,\s]+')


def parse_tags(text):
    """PVE's tag string (``a;b``, also with commas or spaces) as a sorted list."""
    return sorted(set(t for t in _TAG_SPLIT.split(text or '') if t))


def interface_addresses(interfaces):
    """(interface, family, address) of each address an ``/interfaces`` answer lists under ``ip-addresses`` (the
    legacy ``inet`` keeps one address only and is not read), loopback left out."""
    found = []
    for nic in interfaces or []:
        if nic.get('name') == 'lo':
            continue
        for entry in nic.get('ip-addresses') or []:
            if entry.get('ip-address'):
                found.append((nic.get('name'), entry.get('ip-address-type'), entry.get('ip-address')))
    return found


def net_fields(text):
    return [tuple(part.split('=', 1)) for part in (text or '').split(',') if '=' in part]


def same_net(current, wanted):
    """True when two NIC values say the same, in whatever order PVE lists the fields."""
    return dict(net_fields(current)) == dict(net_fields(wanted))


def merge_net(current, wanted):
    """The template's NIC (its MAC, firewall, type) with the wanted name, bridge and address; a static address
    replaces a gateway the template had, DHCP drops it."""
    want = dict(net_fields(wanted))
    if 'ip' in want:
        want.setdefault('gw', None)
    merged = [(k, want.pop(k) if k in want else v) for k, v in net_fields(current)]
    merged += [(k, v) for k, v in net_fields(wanted) if k in want]
    return ','.join('%s=%s' % (k, v) for k, v in merged if v is not None)


# The lease's labels are one line of the description, beside the marker (PVE tags cannot hold '=' or a time).
LEASE_PREFIX = 'ephemera-lease:'
_LEASE_LINE = re.compile(r'^%s[^\n]*\n?' % re.escape(LEASE_PREFIX), re.M)


def lease_line(labels):
    """The description line that carries ``labels`` (values already made label-safe, core.lease.label_value)."""
    return '%s %s' % (LEASE_PREFIX, ' '.join('%s=%s' % (k, labels[k]) for k in sorted(labels)))


def with_lease(description, labels):
    """``description`` with its lease line replaced by one for ``labels`` (added after the rest when it has
    none); every other line, the marker and an operator's notes, kept as it was."""
    rest = _LEASE_LINE.sub('', description or '').rstrip('\n')
    return (rest + '\n' if rest else '') + lease_line(labels)


def lease_labels_of(description):
    """The labels of the description's lease line; {} without one."""
    found = _LEASE_LINE.search(description or '')
    if not found:
        return {}
    fields = found.group(0)[len(LEASE_PREFIX):].split()
    return dict(field.split('=', 1) for field in fields if '=' in field)


class ProxmoxProvider(base.Provider):
    """The provider seam over one Proxmox VE cluster (``client``: a PveClient)."""

    name = NAME
    noun = 'container'
    id_noun = 'VMID'
    fork_refusal = None
    # Warm pools: remark() re-writes the description (marker, lease) and the host name under the config digest.
    pool_refusal = None
    # A clone locks its source (lock: disk) until its task ends; a second clone meanwhile is refused.
    snapshot_copies_take_turns = True
    journal_templates = True

    def __init__(self, client, secret=None):
        super().__init__(secret)
        self.client = client
        self.containers = containers.Containers(client)

    @classmethod
    def from_params(cls, params, secret=None):
        """A provider from module params (the connection options of doc fragment ephemera.workspaces.proxmox)."""
        return cls(client_from_params(params), secret)

    @staticmethod
    def serves(api):
        """True when ``api`` is a client of this provider's API."""
        return isinstance(api, PveClient)

    def with_secret(self, secret):
        return ProxmoxProvider(self.client, secret)

    def close(self):
        self.client.close()

    # ------------------------------------------------------------------- identity and wording

    allocation_words = {
        'vmid': ('candidate vmid', 'candidate vmid'),
        'clone': ('clone', 'clone the template'),
        'wait_clone': ('wait clone task', 'wait for the clone task'),
    }
    address_source = 'an address from DHCP'
    address_advice = 'Check the bridge and the DHCP server on it (that it runs and has free leases in its range)'

    @classmethod
    def start_advice(cls, resource_id):
        return "Look at the container's start log on its node (pct start %s --debug)" % resource_id

    @classmethod
    def resource_key(cls, resource_id, location=None):
        return containers.resource_key(resource_id, location)

    @classmethod
    def parse_resource_key(cls, key):
        return containers.parse_resource_key(key)

    def unlock_hint(self, resource_id):
        """What to do about a container that stays locked."""
        return 'If it stays in lock "create", run "pct unlock %d" on the node.' % int(resource_id)

    # ---------------------------------------------------------------------------- allocation

    def check_source(self, source, location, scope):
        guests = self.containers.guests()
        template = [g for g in guests if int(g.get('vmid', -1)) == source]
        if not template:
            raise base.InvalidRequest('Template %d does not exist in the cluster. Give the VMID of a prepared LXC '
                                      'template.' % source)
        template = template[0]
        if template.get('type') != containers.KIND or not int(template.get('template') or 0):
            raise base.InvalidRequest('VMID %d (%s) is not an LXC template. Convert a prepared container with "pct '
                                      'template", or give another VMID.' % (source, template.get('name')))
        if location and location != template.get('node'):
            raise base.InvalidRequest('Template %d lives on node %s, not %s: linked clones are made on the '
                                      'template\'s node.' % (source, template.get('node'), location))
        pools = self.containers.pools()
        if scope not in pools:
            raise base.InvalidRequest('Pool %r does not exist. Create it (pveum pool add %s) or set pool to one of: '
                                      '%s.' % (scope, scope, ', '.join(sorted(pools)) or 'none'))
        return template.get('node')

    def check_storage(self, location, storage):
        stores = self.containers.storages(location)
        found = [s for s in stores if s.get('storage') == storage]
        if not found:
            raise base.InvalidRequest('Node %s has no storage %r. Give one of: %s.' % (
                location, storage, ', '.join(sorted(s.get('storage') for s in stores if s.get('storage'))) or 'none'))
        if 'rootdir' not in (found[0].get('content') or '').split(','):
            raise base.InvalidRequest('Storage %r on node %s does not hold container volumes (content rootdir). Give '
                                      'one that does.' % (storage, location))
        if found[0].get('active') is not None and not int(found[0].get('active') or 0):
            raise base.InvalidRequest('Storage %r on node %s is not active.' % (storage, location))

    def candidate(self, avoid=(), sleep=time.sleep):
        for dummy in range(10):
            vmid = self.containers.nextid()
            if vmid not in avoid:
                return vmid
            sleep(0.2)
        raise base.Conflict('/cluster/nextid kept offering VMIDs that were just found taken (%s).' % sorted(avoid))

    def allocate(self, allocation):
        a = allocation
        description = self.marker(a.workspace, a.candidate, a.nonce)
        if a.labels:
            description = with_lease(description, a.labels)
        args = dict(newid=a.candidate, hostname=a.hostname, pool=a.scope, description=description)
        if a.full:
            args['full'] = 1
            if a.storage:
                args['storage'] = a.storage
        else:
            args['full'] = 0
        if a.snapshot:
            # PVE copies a running container only from a snapshot, and only as a full clone.
            args['snapname'] = a.snapshot
        return self.containers.clone(a.location, a.source, **args)

    def allocation_task(self, allocation, since):
        # A clone task's id is its template's VMID, not the new one: the template's clones are searched.
        try:
            tasks = self.containers.finished_tasks(allocation.location, 'vzclone', allocation.source)
        except PveApiError:
            return None
        fits = [t['upid'] for t in tasks if int(t.get('starttime', 0)) >= int(since) - 2 and self.containers.ours(t)]
        return fits[0] if len(fits) == 1 else None

    # ------------------------------------------------------------------------------- looking

    def _resource(self, vmid, node, config):
        return base.Resource(int(vmid), node, lock=config.get('lock'), deleting=config.get('lock') == 'destroyed',
                             marker_text=config.get('description'), native=config)

    def ref(self, resource_id, location):
        """A resource to act on without reading it first (its id and node from the journal)."""
        return base.Resource(int(resource_id), location)

    def find(self, resource_id, location=None, search=False):
        config = self.containers.config(location, resource_id) if location else None
        if config is None and (search or not location):
            # Not on that node: it may have been migrated. Ask the cluster where it is.
            found = self.containers.node_of(resource_id)
            if found is not None and found != location:
                location, config = found, self.containers.config(found, resource_id)
        return None if config is None else self._resource(resource_id, location, config)

    def find_listed(self, entry):
        # A guest of another kind (a virtual machine in our pool) has its config elsewhere.
        config = self.containers.config(entry['location'], entry['id'], entry.get('kind') or containers.KIND)
        return None if config is None else self._resource(entry['id'], entry['location'], config)

    def power(self, resource, absent_ok=True):
        status = self.containers.status(resource.location, resource.id, absent_ok)
        held = None
        if (status.get('ha') or {}).get('managed'):
            held = ('it is HA-managed and the HA manager keeps it up; remove it from HA (ha-manager remove ct:%d) and '
                    'destroy again' % resource.id)
        return base.Power(status.get('status'), held)

    def addresses(self, resource):
        return interface_addresses(self.containers.interfaces(resource.location, resource.id))

    def list(self, every_kind=False):
        """Every guest of the cluster that is not a template (with ``every_kind``, also virtual machines)."""
        out = []
        for guest in self.containers.guests():
            if guest.get('vmid') is None or int(guest.get('template') or 0):
                continue
            if guest.get('type') != containers.KIND and not every_kind:
                continue
            out.append({'id': int(guest['vmid']), 'location': guest.get('node'), 'kind': guest.get('type'),
                        'name': guest.get('name'), 'status': guest.get('status'), 'lock': guest.get('lock'),
                        'pool': guest.get('pool'), 'tags': parse_tags(guest.get('tags'))})
        return out

    def in_scope(self, entry, scope, tag=None):
        return entry.get('pool') == scope or (tag is not None and tag in entry.get('tags', ()))

    # -------------------------------------------------------------------------------- acting

    def plan_settings(self, resource, settings):
        config = resource.native
        ip = 'ip=%s' % settings.ip + (',gw=%s' % settings.gateway if settings.gateway else '')
        net0 = merge_net(config.get('net0'), 'name=eth0,bridge=%s,%s' % (settings.bridge, ip))
        wanted = {'cores': settings.cores, 'memory': settings.memory, 'net0': net0,
                  'tags': ';'.join(sorted(set(settings.tags)))}
        return {k: (config.get(k), v) for k, v in wanted.items() if str(config.get(k)) != str(v)
                and not (k == 'net0' and same_net(config.get(k), v))}

    def labels(self, resource):
        return lease_labels_of((resource.native or {}).get('description'))

    def write_labels(self, resource, labels):
        description = (resource.native or {}).get('description')
        self.containers.update_config(resource.location, resource.id, resource.native.get('digest'),
                                      description=with_lease(description, labels))

    def remark(self, resource, workspace, nonce, hostname, labels=None, created_by=None):
        description = self.marker(workspace, resource.id, nonce)
        if labels:
            description = with_lease(description, labels)
        self.containers.update_config(resource.location, resource.id, resource.native.get('digest'),
                                      description=description, hostname=hostname)

    def apply_settings(self, resource, changes):
        self.containers.update_config(resource.location, resource.id, resource.native.get('digest'),
                                      **{k: after for k, (before, after) in changes.items()})

    def start(self, resource):
        return self.containers.start(resource.location, resource.id)

    def shutdown(self, resource, timeout):
        return self.containers.shutdown(resource.location, resource.id, timeout)

    def stop(self, resource):
        return self.containers.stop(resource.location, resource.id)

    def is_image(self, resource):
        return bool(int((resource.native or {}).get('template') or 0))

    def make_image(self, resource):
        return self.containers.template(resource.location, resource.id)

    def delete_blocker(self, resource, source=None):
        config = resource.native
        vmid = resource.id
        if int(config.get('protection') or 0):
            return ('CT %d has protection set; PVE refuses to delete it. Remove the protection (pct set %d '
                    '--protection 0) if it really should go, then destroy again.' % (vmid, vmid))
        if config.get('lock') == 'create' and not self._task_running(resource, source):
            return ('CT %d is stuck in lock "create" with no task running: run "pct unlock %d" on node %s, then '
                    'destroy again.' % (vmid, vmid, resource.location))
        return None

    def _task_running(self, resource, source):
        try:
            tasks = self.containers.tasks(resource.location, source='active')
        except PveApiError:
            return True  # cannot tell: assume the lock is held for a reason
        return any(str(t.get('id')) in (str(resource.id), str(source)) for t in tasks)

    def delete(self, resource):
        return self.containers.delete(resource.location, resource.id)

    def delete_options(self):
        """What a delete sends besides the container (for the record of what was dispatched)."""
        return dict(containers.DELETE_OPTIONS)

    def deleted_since(self, resource_id, location, since):
        try:
            tasks = self.containers.finished_tasks(location, 'vzdestroy', resource_id)
        except PveApiError:
            return False
        return any(self.containers.ours(t) and t.get('status') == 'OK' and int(t.get('starttime', 0)) >= int(since) - 2
                   for t in tasks)

    # --------------------------------------------------------------------------------- tasks

    def wait(self, handle, timeout):
        return self.containers.wait_task(handle, timeout)

    # ------------------------------------------------------------------------------- forks

    def snapshot(self, resource, name, description):
        return self.containers.snapshot(resource.location, resource.id, name, description)

    def snapshot_exists(self, resource, name):
        return any(s.get('name') == name and not s.get('snapstate')
                   for s in self.containers.snapshots(resource.location, resource.id))

    def delete_snapshot(self, resource, name):
        if resource is None:
            return None
        try:
            names = [s.get('name') for s in self.containers.snapshots(resource.location, resource.id)]
        except PveNotFound:
            return None
        if name not in names:
            return None
        return self.containers.delete_snapshot(resource.location, resource.id, name)

    def task_status(self, handle):
        return self.containers.task_status(handle)
