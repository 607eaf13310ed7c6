"""The ARM fake: Azure Resource Manager and a Microsoft Entra token endpoint, for the Azure provider's tests.

Served over HTTPS on loopback with the try-out certificate authority (the SDK refuses bearer tokens over plain
HTTP), by the try-out cloud beside moto. It answers the calls azure-identity (a client-secret credential with its
authority host pointed here and instance discovery off), azure-mgmt-compute and azure-mgmt-network make for:

- the resource group, its virtual network and subnet, its network security group (read only: shared, never ours
  to delete);
- public IP addresses, network interfaces, virtual machines and managed disks: PUT, PATCH (tags), GET, DELETE,
  list in a resource group and in the subscription;
- VM sizes of a location and platform image versions;
- long-running operations in both polling styles: an Azure-AsyncOperation status document and Location polling;
- boot diagnostics: a VM keeps its diagnosticsProfile; VirtualMachines_RetrieveBootDiagnosticsData answers SAS URLs
  on this server (409 OperationNotAllowed for a VM without boot diagnostics), and GET of such a URL serves the VM's
  serial log as Azure Storage serves a blob (no bearer token: the signature is the authorization; 403
  AuthenticationFailed for a wrong or expired one, 404 BlobNotFound before the VM booted). The log holds a few boot
  lines, then, once the VM's guest sshd serves, the host key block cloud-init prints with that sshd's key. Boot log
  faults (boot_log_fault): the log shows a key no sshd serves (console_key), or none (console_silent).

A VM's osProfile.customData is taken as Azure takes it (base64 of at most 65535 bytes, never answered, never changed
after the VM is made) and read as cloud-init reads a #cloud-config: the administrator user is authorized the
osProfile's keys and the cloud-config's ssh_authorized_keys, and root the same keys only with disable_root: false
(vms() says which keys each user has; the guests authorize them).

ARM's behaviour it keeps: a VM's OS disk is created with it and lives on after it (unless the VM says
deleteOption Delete, which is then honoured, as are the NIC's and the public IP's); deleting a NIC still attached
to a VM, a public IP still bound to a NIC, or a disk still attached answers an in-use error; a DELETE of a
resource that is not there answers 204; a GET answers 404 with ARM's error body.

Faults (rules, like the EC2 proxy's) match an operation (the SDK's operation id, a glob: VirtualMachines_Delete,
*_Delete, NetworkInterfaces_*) and, with `match`, a resource name or id glob:
    drop-response  act, then cut the connection: it took effect, the client never hears
    reset          cut the connection before acting: nothing happened
    delay          act, then hold the answer back `seconds`
    error          answer an ARM error (code, message, status) without acting
    throttle       429 TooManyRequests with Retry-After (`seconds`, default 1) without acting
    pages          a list (operation *_List, *_ListAll) answers in pages of `size` items linked by nextLink; with
                   `fail_at` page N answers an error (code, status; InternalServerError 500 by default)
    lro            a PUT or DELETE runs as a long-running operation of this rule's making: `style` async
                   (Azure-AsyncOperation only), location (Location only), both, or sync (done in the answer);
                   `seconds` pending; `outcome` Succeeded, Failed or Canceled (a failed DELETE deletes nothing, a
                   failed PUT leaves provisioningState Failed); `poll` empty (the status document is an empty 200
                   while the operation runs and after) or explicit (Location polls answer 200 with
                   {"status": ...} while pending and on failure)
    log            record the request and let the other rules act as if it were not there
Controls change a resource behind the client's back (tags, properties such as attachments), remove one, and
make the foreign principal's resources.
"""

import asyncio
import base64
import binascii
import copy
import fnmatch
import hashlib
import ipaddress
import itertools
import json
import logging
import os
import re
import secrets
import ssl
import time
import urllib.parse
import uuid

import yaml
from aiohttp import web

from tests.localpve import pki
from tests.localpve.proxy import _reset

from .config import CloudError

LOG = logging.getLogger('localcloud.azure')

# The API versions azure-mgmt-compute 39.0.0 and azure-mgmt-network 33.1.0 send (any is accepted).
API_VERSIONS = {'compute': '2026-04-01', 'disks': '2026-03-02', 'network': '2026-03-01'}
SUBSCRIPTION_ID = '7a5e0c43-1f3b-4c1e-9b7e-0d1e5c0a0b01'
TENANT_ID = '3c1f0a52-8d44-4a8e-a7b0-6f2e2c9d0e11'
DEFAULT_LOCATION = 'westeurope'
LOCATIONS = ('westeurope', 'northeurope', 'eastus', 'eastus2', 'westus2', 'uksouth', 'germanywestcentral',
             'swedencentral', 'francecentral')
VM_SIZES = {
    'Standard_B1s': (1, 1024), 'Standard_B1ms': (1, 2048), 'Standard_B2s': (2, 4096),
    'Standard_B2ms': (2, 8192), 'Standard_D2s_v5': (2, 8192), 'Standard_D4s_v5': (4, 16384),
}
IMAGES = {('debian', 'debian-12', '12-gen2'): ['0.20250601.2137', '0.20251001.2250'],
          ('debian', 'debian-12', '12'): ['0.20250601.2137', '0.20251001.2250'],
          ('canonical', 'ubuntu-24_04-lts', 'server'): ['24.04.202510010']}
IMAGE_NAMES = {'debian': 'Debian', 'canonical': 'Canonical'}
SCOPE = 'https://management.azure.com/.default'
# osProfile.customData: at most 65535 bytes once decoded, so at most 87380 characters of base64.
CUSTOM_DATA_BYTES = 65535
CUSTOM_DATA_CHARS = 87380
TOKEN_SECS = 3600
ACTIONS = ('drop-response', 'reset', 'delay', 'error', 'throttle', 'lro', 'pages', 'log')
MAX_LISTINGS = 50
STYLES = ('async', 'location', 'both', 'sync')
OUTCOMES = ('Succeeded', 'Failed', 'Canceled')
POLLS = (None, 'empty', 'explicit')
KINDS = {
    ('microsoft.network', 'publicipaddresses'): ('pip', 'Microsoft.Network/publicIPAddresses', 'PublicIPAddresses'),
    ('microsoft.network', 'networkinterfaces'): ('nic', 'Microsoft.Network/networkInterfaces', 'NetworkInterfaces'),
    ('microsoft.compute', 'virtualmachines'): ('vm', 'Microsoft.Compute/virtualMachines', 'VirtualMachines'),
    ('microsoft.compute', 'disks'): ('disk', 'Microsoft.Compute/disks', 'Disks'),
    ('microsoft.compute', 'images'): ('image', 'Microsoft.Compute/images', 'Images'),
    ('microsoft.network', 'virtualnetworks'): ('vnet', 'Microsoft.Network/virtualNetworks', 'VirtualNetworks'),
    ('microsoft.network', 'networksecuritygroups'): ('nsg', 'Microsoft.Network/networkSecurityGroups',
                                                     'NetworkSecurityGroups'),
}
TYPE_OF = {v[0]: v[1] for v in KINDS.values()}
OPS_OF = {v[0]: v[2] for v in KINDS.values()}
WRITABLE = ('pip', 'nic', 'vm', 'disk')
# Azure's naming rules (Microsoft.Network: 1-80 characters, letters, digits, underscores, periods, hyphens,
# beginning with a letter or digit, ending with a letter, digit or underscore; a Linux VM: 1-64, no underscore
# rule relaxations here; a disk: 1-80).
NETWORK_NAME = re.compile(r'^[A-Za-z0-9](?:[A-Za-z0-9_.-]{0,78}[A-Za-z0-9_])?$')
VM_NAME = re.compile(r'^[A-Za-z0-9](?:[A-Za-z0-9_.-]{0,62}[A-Za-z0-9_])?$')
DISK_NAME = re.compile(r'^[A-Za-z0-9_](?:[A-Za-z0-9_.-]{0,78}[A-Za-z0-9_])?$')
COMPUTER_NAME = re.compile(r'^[A-Za-z0-9](?:[A-Za-z0-9-]{0,62}[A-Za-z0-9])?$')
NAME_RULES = {'pip': NETWORK_NAME, 'nic': NETWORK_NAME, 'vm': VM_NAME, 'disk': DISK_NAME, 'image': NETWORK_NAME}
BOOT_LOG_FAULTS = ('console_key', 'console_silent')
# The storage service version a SAS of boot diagnostics names (sv=).
SAS_VERSION = '2022-11-02'


class ArmError(Exception):
    """An ARM error answer: status, code, message (and a target)."""

    def __init__(self, status, code, message, target=None, headers=None):
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.target = target
        self.headers = headers or {}

    def body(self):
        error = {'code': self.code, 'message': self.message}
        if self.target:
            error['target'] = self.target
        return {'error': error}


def _now_iso():
    return time.strftime('%Y-%m-%dT%H:%M:%S', time.gmtime()) + '.0000000+00:00'


def _etag():
    return 'W/"{0}"'.format(uuid.uuid4())


def _not_found(kind, name, group):
    message = ("The Resource '{0}/{1}' under resource group '{2}' was not found. For more details please go to "
               'https://aka.ms/ARMResourceNotFoundFix'.format(TYPE_OF[kind], name, group))
    return ArmError(404, 'ResourceNotFound', message)


def resource_id(group, kind, name):
    """The ARM id of a resource of ours (kind: pip, nic, vm, disk, vnet, nsg)."""
    return '/subscriptions/{0}/resourceGroups/{1}/providers/{2}/{3}'.format(
        SUBSCRIPTION_ID, group, TYPE_OF[kind], name)


def _ref(value):
    """The id of a sub-resource reference ({'id': ...}), or None."""
    return value.get('id') if isinstance(value, dict) and value.get('id') else None


class Resource:
    """One resource as ARM holds it. `doc` is its JSON as answered, minus provisioningState's moment."""

    def __init__(self, kind, group, name, location, owner):
        self.kind = kind
        self.group = group
        self.name = name
        self.location = location
        self.owner = owner
        self.doc = {}
        self.state = 'Creating'
        self.created = time.time()

    @property
    def id(self):
        return resource_id(self.group, self.kind, self.name)

    def answer(self):
        doc = copy.deepcopy({k: v for k, v in self.doc.items() if not k.startswith('_')})
        doc.update(id=self.id, name=self.name, type=TYPE_OF[self.kind], location=self.location)
        doc.setdefault('tags', {})
        doc.setdefault('properties', {})['provisioningState'] = self.state
        if self.kind == 'nic':
            for conf in doc['properties'].get('ipConfigurations') or []:
                conf.setdefault('properties', {})['provisioningState'] = self.state
        return doc

    def summary(self):
        props = self.doc.get('properties', {})
        out = {'id': self.id, 'kind': self.kind, 'name': self.name, 'group': self.group, 'location': self.location,
               'owner': self.owner, 'state': self.state, 'tags': dict(self.doc.get('tags') or {}),
               'identity': props.get('vmId') or props.get('uniqueId') or props.get('resourceGuid')}
        if self.kind == 'pip':
            out.update(ip_address=props.get('ipAddress'), ip_configuration=_ref(props.get('ipConfiguration')))
        elif self.kind == 'nic':
            conf = (props.get('ipConfigurations') or [{}])[0].get('properties', {})
            out.update(private_ip=conf.get('privateIPAddress'), public_ip=_ref(conf.get('publicIPAddress')),
                       virtual_machine=_ref(props.get('virtualMachine')))
        elif self.kind == 'vm':
            storage = props.get('storageProfile', {})
            out.update(vm_id=props.get('vmId'), os_disk=_ref(storage.get('osDisk', {}).get('managedDisk')),
                       nics=[_ref(n) for n in props.get('networkProfile', {}).get('networkInterfaces', [])],
                       power=self.doc.get('_power', 'running'))
        elif self.kind == 'disk':
            out.update(managed_by=self.doc.get('managedBy'), disk_state=props.get('diskState'))
        return out


class Operation:
    """A long-running operation: PUT or DELETE of one resource, pending until `due`."""

    def __init__(self, op_id, method, resource, style, seconds, outcome, poll, location):
        self.id = op_id
        self.method = method
        self.resource = resource
        self.style = style
        self.due = time.monotonic() + seconds
        self.outcome = outcome
        self.poll = poll
        self.location = location
        self.started = _now_iso()
        self.ended = None
        self.status = 'InProgress'
        self.error = None


class Rule:
    def __init__(self, rule_id, action, operation, times=1, skip=0, match=None, seconds=None, code=None,
                 message=None, status=None, style=None, outcome=None, poll=None, size=None, fail_at=None):
        if action not in ACTIONS:
            raise CloudError('malformed Azure fault rule: action must be one of {0}, not {1!r}'.format(
                ', '.join(ACTIONS), action))
        if not isinstance(operation, str) or not re.match(r'^[A-Za-z_*?\[\]]+$', operation):
            raise CloudError('malformed Azure fault rule: the operation is an operation id or a glob, e.g. '
                             'VirtualMachines_Delete or *_Delete (got {0!r})'.format(operation))
        if style is not None and style not in STYLES:
            raise CloudError('malformed Azure fault rule: style must be one of {0}'.format(', '.join(STYLES)))
        if outcome is not None and outcome not in OUTCOMES:
            raise CloudError('malformed Azure fault rule: outcome must be one of {0}'.format(', '.join(OUTCOMES)))
        if poll not in POLLS:
            raise CloudError('malformed Azure fault rule: poll must be empty or explicit')
        try:
            self.times = None if times is None else int(times)
            self.skip = int(skip)
            self.seconds = None if seconds is None else float(seconds)
            self.status = None if status is None else int(status)
            self.size = None if size is None else int(size)
            self.fail_at = None if fail_at is None else int(fail_at)
        except (TypeError, ValueError):
            raise CloudError('malformed Azure fault rule: times, skip, status are whole numbers and seconds a '
                             'number') from None
        if (self.times is not None and self.times < 1) or self.skip < 0 or (self.seconds or 0) < 0:
            raise CloudError('malformed Azure fault rule: times at least 1, skip and seconds not negative')
        if action == 'pages' and (self.size is None or self.size < 1):
            raise CloudError('a pages rule needs a size of at least 1 (items per page)')
        if action == 'error' and not code:
            raise CloudError('an error rule needs a code (e.g. InternalServerError) and a status')
        self.id = rule_id
        self.action = action
        self.operation = operation
        self.match = match
        self.code = code
        self.message = message
        self.style = style
        self.outcome = outcome
        self.poll = poll
        self.hits = []

    def take(self, operation, names):
        if self.times == 0 or not fnmatch.fnmatchcase(operation, self.operation):
            return False
        if self.match and not any(fnmatch.fnmatchcase(n, self.match) for n in names if n):
            return False
        if self.skip:
            self.skip -= 1
            return False
        if self.times is not None:
            self.times -= 1
        self.hits.append({'operation': operation, 'names': [n for n in names if n], 'time': time.time()})
        return True

    def view(self):
        return dict(vars(self))


class AzureFake:
    """The fake's state, its HTTPS server and its controls."""

    def __init__(self, site, host, port, pki_paths, guests_pool, public_pool, pending_secs=0.5, poll_secs=1):
        self.site = site
        self.host = host
        self.port = port
        self.pki = pki_paths
        self.pool = guests_pool
        self.public_pool = public_pool
        self.pending_secs = pending_secs
        self.poll_secs = poll_secs
        self.groups = {}
        self.resources = {}
        self.readonly = {}
        self.operations = {}
        self.tokens = {}
        self.principals = {}
        self.rules = []
        self.listings = {}
        self._listing_ids = itertools.count(1)
        self.requests = 0
        self._rule_ids = itertools.count(1)
        # Boot log faults armed for the next VMs made ([{'kind', 'times', 'hits'}]), and every read of a serial log
        # blob: {'vm', 'status', 'authorization' (whether the request carried an Authorization header), 'range'}.
        self.boot_arms = []
        self.boot_reads = []
        self.boot_requests = []
        self._runner = None
        self._site = None
        self.url = None

    # ------------------------------------------------------------ setup

    def seed(self, secrets_data, public_key):
        """Our principal and the foreign one, the resource group, its VNet, subnet and NSG. Returns the seed."""
        self.principals = {
            secrets_data['azure_client_id']: ('ours', secrets_data['azure_client_secret']),
            secrets_data['azure_foreign_client_id']: ('foreign', secrets_data['azure_foreign_client_secret']),
        }
        group, location = 'workspaces', DEFAULT_LOCATION
        self.groups = {group.lower(): {'name': group, 'location': location, 'tags': {}}}
        self.groups['shared'] = {'name': 'shared', 'location': location, 'tags': {}}
        vnet_id = '/subscriptions/{0}/resourceGroups/{1}/providers/Microsoft.Network/virtualNetworks/{2}'.format(
            SUBSCRIPTION_ID, group, 'workspaces-vnet')
        nsg_id = '/subscriptions/{0}/resourceGroups/{1}/providers/Microsoft.Network/networkSecurityGroups/{2}'.format(
            SUBSCRIPTION_ID, group, 'workspaces-ssh')
        subnet = {'id': vnet_id + '/subnets/default', 'name': 'default', 'etag': _etag(),
                  'type': 'Microsoft.Network/virtualNetworks/subnets',
                  'properties': {'provisioningState': 'Succeeded', 'addressPrefix': '10.90.1.0/24',
                                 'networkSecurityGroup': {'id': nsg_id},
                                 'privateEndpointNetworkPolicies': 'Disabled',
                                 'privateLinkServiceNetworkPolicies': 'Enabled'}}
        self.readonly[vnet_id.lower()] = {
            'id': vnet_id, 'name': 'workspaces-vnet', 'type': 'Microsoft.Network/virtualNetworks',
            'location': location, 'tags': {}, 'etag': _etag(),
            'properties': {'provisioningState': 'Succeeded', 'resourceGuid': str(uuid.uuid4()),
                           'addressSpace': {'addressPrefixes': ['10.90.0.0/16']}, 'subnets': [subnet],
                           'enableDdosProtection': False}}
        self.readonly[subnet['id'].lower()] = subnet
        self.readonly[nsg_id.lower()] = {
            'id': nsg_id, 'name': 'workspaces-ssh', 'type': 'Microsoft.Network/networkSecurityGroups',
            'location': location, 'tags': {}, 'etag': _etag(),
            'properties': {'provisioningState': 'Succeeded', 'resourceGuid': str(uuid.uuid4()),
                           'securityRules': [{
                               'id': nsg_id + '/securityRules/ssh', 'name': 'ssh',
                               'properties': {'provisioningState': 'Succeeded', 'protocol': 'Tcp',
                                              'sourcePortRange': '*', 'destinationPortRange': '22',
                                              'sourceAddressPrefix': '*', 'destinationAddressPrefix': '*',
                                              'access': 'Allow', 'priority': 1000, 'direction': 'Inbound'}}]}}
        return {'subscription_id': SUBSCRIPTION_ID, 'tenant_id': TENANT_ID, 'resource_group': group,
                'location': location, 'shared_resource_group': 'shared',
                'virtual_network': 'workspaces-vnet', 'subnet': 'default', 'subnet_id': subnet['id'],
                'network_security_group': 'workspaces-ssh', 'network_security_group_id': nsg_id,
                'vm_size': 'Standard_B1s', 'image': {'publisher': 'Debian', 'offer': 'debian-12',
                                                     'sku': '12-gen2', 'version': 'latest'},
                'image_urn': 'Debian:debian-12:12-gen2:latest',
                'locations': list(LOCATIONS), 'vm_sizes': sorted(VM_SIZES), 'api_versions': dict(API_VERSIONS)}

    async def start(self):
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(self.pki['cert_file'], self.pki['key_file'])
        app = web.Application(client_max_size=8 * 1024 * 1024)
        app.router.add_route('*', '/{tail:.*}', self._handle)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        self._site = web.TCPSite(self._runner, self.host, self.port, ssl_context=context)
        await self._site.start()
        sock = self._site._server.sockets[0]  # pylint: disable=protected-access
        self.port = sock.getsockname()[1]
        self.url = 'https://{0}:{1}'.format(self.host, self.port)

    async def stop(self):
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    # ------------------------------------------------------------ controls

    def add_rule(self, action, operation, **options):
        rule = Rule(next(self._rule_ids), action, operation, **options)
        self.rules.append(rule)
        return rule.view()

    def view_rules(self):
        return [r.view() for r in self.rules]

    def clear_rules(self):
        self.rules = []

    def remove_rule(self, rule_id):
        self.rules = [r for r in self.rules if r.id != int(rule_id)]

    def boot_log_fault(self, kind, vm=None, times=1):
        """The serial log of VM ``vm`` (id or name), or of the next ``times`` VMs made, shows a host key that no
        sshd serves (console_key), or no host key at all (console_silent)."""
        if kind not in BOOT_LOG_FAULTS:
            raise CloudError('a boot log fault is {0}, not {1!r}'.format(' or '.join(BOOT_LOG_FAULTS), kind))
        if vm is not None:
            resource = self.find(vm)
            if resource.kind != 'vm':
                raise CloudError('{0} is not a VM'.format(vm))
            resource.doc['_boot_fault'] = kind
            return {'kind': kind, 'vm': resource.id}
        if times is not None and int(times) < 1:
            raise CloudError('times must be at least 1 (or none for every VM)')
        arm = {'kind': kind, 'times': None if times is None else int(times), 'hits': []}
        self.boot_arms.append(arm)
        return arm

    def clear_boot_faults(self):
        """No more boot log faults for new VMs (those of VMs already made stay, as the log they printed)."""
        self.boot_arms = []

    def view_boot(self):
        """The reads of serial log blobs and the retrieveBootDiagnosticsData requests, as recorded."""
        return {'reads': list(self.boot_reads), 'requests': list(self.boot_requests),
                'arms': copy.deepcopy(self.boot_arms)}

    def find(self, ref):
        """A resource by id, or by name when only one resource has it."""
        self.advance()
        found = self.resources.get(str(ref).lower())
        if found is not None:
            return found
        named = [r for r in self.resources.values() if r.name.lower() == str(ref).lower()]
        if len(named) != 1:
            raise CloudError('no single Azure resource {0!r} (give its id)'.format(ref) if named else
                             'no Azure resource {0!r} in this cloud'.format(ref))
        return named[0]

    def change(self, ref, tags=None, remove_tags=None, properties=None, location=None):
        """Change a resource behind the client's back: tags set or removed, properties merged (JSON merge patch:
        null removes a key), location."""
        resource = self.find(ref)
        current = resource.doc.setdefault('tags', {})
        current.update({str(k): str(v) for k, v in (tags or {}).items()})
        for key in remove_tags or ():
            current.pop(key, None)
        if properties:
            _merge(resource.doc.setdefault('properties', {}), properties)
        if location:
            resource.location = location
        if resource.kind != 'disk':
            resource.doc['etag'] = _etag()
        LOG.info('azure: %s changed behind the client (tags %s, properties %s)', resource.id, tags or remove_tags,
                 properties)
        return resource.summary()

    def detach(self, ref):
        """Behind the client's back: a NIC's public IP is unbound, or a VM's NIC detached from it (the VM keeps
        running without it), or a disk's managedBy cleared."""
        resource = self.find(ref)
        if resource.kind == 'nic':
            conf = resource.doc['properties']['ipConfigurations'][0]['properties']
            pip = self.resources.get((_ref(conf.pop('publicIPAddress', None)) or '').lower())
            if pip is not None:
                pip.doc['properties'].pop('ipConfiguration', None)
        elif resource.kind == 'pip':
            ipconf = _ref(resource.doc['properties'].pop('ipConfiguration', None))
            nic = self.resources.get(ipconf.rsplit('/ipConfigurations/', 1)[0].lower()) if ipconf else None
            if nic is not None:
                nic.doc['properties']['ipConfigurations'][0]['properties'].pop('publicIPAddress', None)
        elif resource.kind == 'vm':
            for ref_ in resource.doc['properties']['networkProfile']['networkInterfaces']:
                nic = self.resources.get(ref_['id'].lower())
                if nic is not None:
                    nic.doc['properties'].pop('virtualMachine', None)
            resource.doc['properties']['networkProfile']['networkInterfaces'] = []
        elif resource.kind == 'disk':
            resource.doc.pop('managedBy', None)
            resource.doc['properties']['diskState'] = 'Unattached'
        return resource.summary()

    def remove(self, ref):
        """Delete a resource behind the client's back, at once (its bindings go with it)."""
        resource = self.find(ref)
        self._delete_now(resource)
        return {'removed': resource.id}

    def replace(self, ref):
        """Behind the client's back: the resource is deleted and made again with the same name, body, tags and
        bindings, so its ARM id is the same but its identity is new (a VM's vmId, a NIC's or public IP's
        resourceGuid, a disk's uniqueId; a public IP's address may change). A VM's guest is a new machine."""
        resource = self.find(ref)
        props = resource.doc.setdefault('properties', {})
        if resource.kind == 'vm':
            props['vmId'] = str(uuid.uuid4())
        elif resource.kind == 'disk':
            props['uniqueId'] = str(uuid.uuid4())
        else:
            props['resourceGuid'] = str(uuid.uuid4())
        if resource.kind == 'pip':
            self.public_pool.release(resource.id.lower())
            props['ipAddress'] = self.public_pool.allocate(resource.id.lower(), taken=(props.get('ipAddress'),))
        if 'timeCreated' in props:
            props['timeCreated'] = _now_iso()
        if resource.kind != 'disk':
            resource.doc['etag'] = _etag()
        resource.created = time.time()
        LOG.info('azure: %s replaced behind the client', resource.id)
        return resource.summary()

    def create_foreign(self, kind, name, tags=None, group='workspaces', location=None, attach_to=None):
        """The foreign principal makes a resource in a group: a public IP, or a NIC (bound to public IP
        `attach_to` if given), with tags."""
        if kind not in ('pip', 'nic', 'disk'):
            raise CloudError('the foreign principal makes pip, nic or disk resources here, not {0!r}'.format(kind))
        body = {'location': location or self.groups[group.lower()]['location'], 'tags': dict(tags or {}),
                'properties': {}}
        if kind == 'nic':
            subnet = '/subscriptions/{0}/resourceGroups/workspaces/providers/Microsoft.Network/virtualNetworks/' \
                     'workspaces-vnet/subnets/default'.format(SUBSCRIPTION_ID)
            conf = {'subnet': {'id': subnet}}
            if attach_to:
                conf['publicIPAddress'] = {'id': self.find(attach_to).id}
            body['properties'] = {'ipConfigurations': [{'name': 'ipconfig1', 'properties': conf}]}
        if kind == 'disk':
            body['properties'] = {'creationData': {'createOption': 'Empty'}, 'diskSizeGB': 4}
            body['sku'] = {'name': 'Standard_LRS'}
        resource = self._put(kind, group, name, body, 'foreign')
        resource.state = 'Succeeded'
        return resource.summary()

    def view(self):
        self.advance()
        return [r.summary() for r in sorted(self.resources.values(), key=lambda r: (r.kind, r.name))]

    def view_operations(self):
        self.advance()
        return [{'id': o.id, 'method': o.method, 'resource': o.resource.id, 'style': o.style, 'status': o.status,
                 'outcome': o.outcome} for o in self.operations.values()]

    def vms(self):
        """The VMs and their guest details: (key, vm resource, private ip, public ip, keys, running)."""
        self.advance()
        out = []
        for vm in self.resources.values():
            if vm.kind != 'vm':
                continue
            props = vm.doc['properties']
            private = public = None
            for ref_ in props['networkProfile']['networkInterfaces']:
                nic = self.resources.get(ref_['id'].lower())
                if nic is None:
                    continue
                conf = nic.doc['properties']['ipConfigurations'][0]['properties']
                private = private or conf.get('privateIPAddress')
                pip = self.resources.get((_ref(conf.get('publicIPAddress')) or '').lower())
                if pip is not None:
                    public = public or pip.doc['properties'].get('ipAddress')
            keys = [k.get('keyData', '').strip() for k in
                    props.get('osProfile', {}).get('linuxConfiguration', {}).get('ssh', {}).get('publicKeys', [])]
            admin_keys, root_keys = cloud_init_keys(vm.doc.get('_custom_data'), [k for k in keys if k])
            running = vm.state == 'Succeeded' and vm.doc.get('_power', 'running') == 'running'
            # The guest's directory is <state>/guests/azure<ARM id of the VM>: a guest_root of
            # <state>/guests/azure{vmid}/root with the VM's id for {vmid}.
            out.append({'key': 'azure' + vm.id, 'vm': vm, 'vm_id': props['vmId'], 'private': private,
                        'public': public, 'keys': root_keys, 'running': running,
                        'users': {props['osProfile']['adminUsername']: admin_keys}})
        return out

    # ------------------------------------------------------------ operations

    def advance(self):
        """Finish the operations whose time has come."""
        now = time.monotonic()
        for op in list(self.operations.values()):
            if op.status == 'InProgress' and now >= op.due:
                self._finish(op)

    def _finish(self, op):
        op.ended = _now_iso()
        op.status = op.outcome
        resource = op.resource
        if op.outcome == 'Succeeded':
            if op.method == 'DELETE':
                self._delete_now(resource)
            else:
                resource.state = 'Succeeded'
                if resource.kind == 'vm':
                    disk = self.resources.get(resource.doc['properties']['storageProfile']['osDisk']['managedDisk'][
                        'id'].lower())
                    if disk is not None:
                        disk.state = 'Succeeded'
        else:
            op.error = {'code': 'InternalExecutionError' if op.outcome == 'Failed' else 'Canceled',
                        'message': 'The operation {0} on {1} {2}.'.format(
                            op.method, resource.id, 'failed' if op.outcome == 'Failed' else 'was canceled')}
            if op.method == 'DELETE':
                resource.state = 'Succeeded' if op.outcome == 'Canceled' else 'Failed'
            else:
                resource.state = 'Failed' if op.outcome == 'Failed' else 'Canceled'
        LOG.info('azure: operation %s %s %s: %s', op.id, op.method, resource.id, op.status)

    def _delete_now(self, resource):
        """The resource goes, and so do its bindings; deleteOption Delete cascades as ARM does."""
        self.resources.pop(resource.id.lower(), None)
        props = resource.doc.get('properties', {})
        if resource.kind == 'vm':
            disk_ref = props['storageProfile']['osDisk']
            disk = self.resources.get(disk_ref['managedDisk']['id'].lower())
            if disk is not None:
                disk.doc.pop('managedBy', None)
                disk.doc['properties']['diskState'] = 'Unattached'
                if disk_ref.get('deleteOption') == 'Delete':
                    self._delete_now(disk)
            for ref_ in props['networkProfile']['networkInterfaces']:
                nic = self.resources.get(ref_['id'].lower())
                if nic is not None:
                    nic.doc['properties'].pop('virtualMachine', None)
                    if (ref_.get('properties') or {}).get('deleteOption') == 'Delete':
                        self._delete_now(nic)
        elif resource.kind == 'nic':
            self.pool.release(resource.id.lower())
            for conf in props.get('ipConfigurations') or []:
                ref_ = (conf.get('properties') or {}).get('publicIPAddress')
                pip = self.resources.get((_ref(ref_) or '').lower())
                if pip is not None:
                    pip.doc['properties'].pop('ipConfiguration', None)
                    if ((ref_.get('properties') or {}).get('deleteOption')) == 'Delete':
                        self._delete_now(pip)
        elif resource.kind == 'pip':
            self.public_pool.release(resource.id.lower())
        LOG.info('azure: %s deleted', resource.id)

    # ------------------------------------------------------------ HTTP

    async def _handle(self, request):
        self.requests += 1
        self.advance()
        body = await request.read()
        try:
            return await self._dispatch(request, body)
        except ArmError as exc:
            return _json(exc.status, exc.body(), exc.headers)

    async def _dispatch(self, request, body):
        parts = [urllib.parse.unquote(p) for p in request.path.strip('/').split('/') if p]
        low = [p.lower() for p in parts]
        if len(parts) >= 2 and low[-2:] == ['oauth2', 'token'] or low[-3:] == ['oauth2', 'v2.0', 'token']:
            return await self._token(request, parts[0], body)
        if low[-2:] == ['.well-known', 'openid-configuration']:
            return self._openid(parts[0])
        if low[:3] == ['common', 'discovery', 'instance']:
            return _json(200, {'tenant_discovery_endpoint': '{0}/{1}/v2.0/.well-known/openid-configuration'.format(
                self.url, TENANT_ID), 'api-version': '1.1', 'metadata': []})
        if low[:1] == ['bootdiagnostics'] and request.method in ('GET', 'HEAD'):
            # Azure Storage's side: the SAS in the query is the authorization, no bearer token is asked for.
            return self._boot_blob(request, parts)
        principal = self._principal(request)
        if len(low) < 2 or low[0] != 'subscriptions':
            raise ArmError(404, 'InvalidResourceType', 'The resource type could not be found: /{0}'.format(
                '/'.join(parts)))
        if low[1] != SUBSCRIPTION_ID:
            raise ArmError(404, 'SubscriptionNotFound', "The subscription '{0}' could not be found.".format(parts[1]))
        route = self._route(parts, low, request.method)
        names = [route.get('name'), route.get('id')]
        operation = route['operation']
        token = request.query.get('$skiptoken')
        if token and operation.endswith(('_List', '_ListAll')):
            # A later page of a paged listing: only what the first page's rule said applies.
            return self._next_page(request, token)
        rules = self._rules(operation, names)
        for rule in rules:
            if rule.action == 'reset':
                LOG.info('azure: reset %s %s', operation, names)
                return _reset(request)
            if rule.action == 'error':
                raise ArmError(rule.status or 500, rule.code, rule.message or 'An error occurred.')
            if rule.action == 'throttle':
                after = int(rule.seconds) if rule.seconds is not None else 1
                raise ArmError(429, 'TooManyRequests', 'The request is being throttled as the limit has been '
                               'reached for operation type - {0}. For more information, see - '
                               'https://aka.ms/armthrottling'.format(operation), headers={'Retry-After': str(after)})
        lro = next((r for r in rules if r.action in ('lro', 'pages')), None)
        response = self._act(route, request, body, principal, lro)
        for rule in rules:
            if rule.action == 'drop-response':
                LOG.info('azure: %s acted, answer dropped', operation)
                return _reset(request)
            if rule.action == 'delay':
                await asyncio.sleep(rule.seconds or 0)
        return response

    def _rules(self, operation, names):
        taken = []
        kinds = set()
        for rule in self.rules:
            if rule.action != 'log' and rule.action in kinds:
                continue
            if rule.take(operation, names) and rule.action != 'log':
                kinds.add(rule.action)
                taken.append(rule)
                if rule.action in ('reset', 'error', 'throttle'):
                    break
        return taken

    # ------------------------------------------------------------ tokens

    def _openid(self, tenant):
        if tenant.lower() not in (TENANT_ID, 'organizations', 'common'):
            return _json(400, {'error': 'invalid_tenant', 'error_description': "AADSTS90002: Tenant '{0}' not found. "
                               'Check to make sure you have the correct tenant ID and are signing into the correct '
                               'cloud.'.format(tenant), 'error_codes': [90002]})
        base = '{0}/{1}'.format(self.url, TENANT_ID)
        return _json(200, {'issuer': base + '/v2.0', 'token_endpoint': base + '/oauth2/v2.0/token',
                           'authorization_endpoint': base + '/oauth2/v2.0/authorize',
                           'device_authorization_endpoint': base + '/oauth2/v2.0/devicecode',
                           'token_endpoint_auth_methods_supported': ['client_secret_post', 'private_key_jwt',
                                                                     'client_secret_basic'],
                           'response_types_supported': ['code', 'id_token', 'code id_token', 'id_token token'],
                           'tenant_region_scope': 'EU', 'cloud_instance_name': 'microsoftonline.com'})

    async def _token(self, request, tenant, body):
        fields = dict(urllib.parse.parse_qsl(body.decode('utf-8', 'replace')))
        names = [fields.get('client_id')]
        rules = self._rules('Token', names)
        for rule in rules:
            if rule.action == 'reset':
                return _reset(request)
            if rule.action in ('error', 'throttle'):
                return _json(rule.status or 500, {'error': rule.code or 'temporarily_unavailable',
                                                  'error_description': rule.message or 'AADSTS50196: try again.'})
        if tenant.lower() != TENANT_ID:
            return _json(400, {'error': 'invalid_request', 'error_description': "AADSTS90002: Tenant '{0}' not "
                               'found.'.format(tenant), 'error_codes': [90002]})
        if fields.get('grant_type') != 'client_credentials':
            return _json(400, {'error': 'unsupported_grant_type', 'error_description': 'AADSTS70003: this fake '
                               'grants client_credentials only.', 'error_codes': [70003]})
        principal = self.principals.get(fields.get('client_id'))
        if principal is None:
            return _json(400, {'error': 'unauthorized_client', 'error_description': "AADSTS700016: Application with "
                               "identifier '{0}' was not found in the directory '{1}'.".format(
                                   fields.get('client_id'), TENANT_ID), 'error_codes': [700016]})
        if not secrets.compare_digest(str(fields.get('client_secret', '')), principal[1]):
            return _json(401, {'error': 'invalid_client', 'error_description': 'AADSTS7000215: Invalid client secret '
                               "provided. Ensure the secret being sent in the request is the client secret value, "
                               "not the client secret ID, for a secret added to app '{0}'.".format(
                                   fields.get('client_id')), 'error_codes': [7000215]})
        token = 'lcaz.' + secrets.token_urlsafe(32)
        self.tokens[token] = (principal[0], time.time() + TOKEN_SECS)
        answer = _json(200, {'token_type': 'Bearer', 'expires_in': TOKEN_SECS, 'ext_expires_in': TOKEN_SECS,
                             'access_token': token})
        for rule in rules:
            if rule.action == 'drop-response':
                return _reset(request)
        return answer

    def _principal(self, request):
        header = request.headers.get('Authorization', '')
        challenge = {'WWW-Authenticate': 'Bearer authorization_uri="{0}/{1}", error="invalid_token", '
                                         'error_description="The authentication failed."'.format(self.url, TENANT_ID)}
        if not header:
            raise ArmError(401, 'AuthenticationFailed', "Authentication failed. The 'Authorization' header is "
                           'missing.', headers=challenge)
        token = header[7:] if header.lower().startswith('bearer ') else None
        known = self.tokens.get(token)
        if known is None or known[1] < time.time():
            raise ArmError(401, 'InvalidAuthenticationToken', 'The access token is invalid.', headers=challenge)
        return known[0]

    # ------------------------------------------------------------ routing

    def _route(self, parts, low, method):
        """What the path names: {'operation', 'kind', 'group', 'name', ...}."""
        n = len(low)
        if n >= 4 and low[2] == 'resourcegroups':
            group = self.groups.get(low[3])
            if n == 4:
                if method != 'GET':
                    raise ArmError(405, 'MethodNotAllowed', 'Resource groups are read only here.')
                return {'operation': 'ResourceGroups_Get', 'group_key': low[3], 'group_name': parts[3],
                        'name': parts[3]}
            if group is None:
                raise ArmError(404, 'ResourceGroupNotFound', "Resource group '{0}' could not be found.".format(
                    parts[3]))
            if n >= 7 and low[4] == 'providers':
                kind = KINDS.get((low[5], low[6]))
                if kind is None:
                    raise ArmError(400, 'InvalidResourceType', "The resource type '{0}' could not be found in the "
                                   "namespace '{1}'.".format(parts[6], parts[5]))
                if n == 7:
                    return {'operation': kind[2] + '_List', 'kind': kind[0], 'group': group['name']}
                name = parts[7]
                if kind[0] == 'vnet' and n == 10 and low[8] == 'subnets':
                    return {'operation': 'Subnets_Get', 'kind': 'subnet', 'group': group['name'], 'name': parts[9],
                            'vnet': name}
                if kind[0] == 'vm' and n == 9 and method == 'POST' and low[8] == 'retrievebootdiagnosticsdata':
                    return {'operation': 'VirtualMachines_RetrieveBootDiagnosticsData', 'kind': 'vm',
                            'group': group['name'], 'name': name, 'boot_diagnostics': True}
                if kind[0] == 'vm' and n == 9 and method == 'POST':
                    verb = {'start': 'Start', 'poweroff': 'PowerOff', 'deallocate': 'Deallocate',
                            'restart': 'Restart', 'generalize': 'Generalize'}.get(low[8], low[8])
                    return {'operation': 'VirtualMachines_' + verb,
                            'kind': 'vm', 'group': group['name'], 'name': name, 'action': low[8]}
                if kind[0] == 'vm' and n == 9 and low[8] == 'instanceview':
                    return {'operation': 'VirtualMachines_InstanceView', 'kind': 'vm', 'group': group['name'],
                            'name': name, 'instance_view': True}
                if n != 8:
                    raise ArmError(400, 'InvalidResourceType', 'The resource path /{0} is not served by this '
                                   'fake.'.format('/'.join(parts)))
                op = {'GET': 'Get', 'PUT': 'CreateOrUpdate', 'DELETE': 'Delete',
                      'PATCH': 'UpdateTags' if kind[0] in ('pip', 'nic') else 'Update'}.get(method)
                if op is None:
                    raise ArmError(405, 'MethodNotAllowed', 'The method {0} is not allowed here.'.format(method))
                return {'operation': kind[2] + '_' + op, 'kind': kind[0], 'group': group['name'], 'name': name,
                        'method': method}
        if n >= 5 and low[2] == 'providers':
            kind = KINDS.get((low[3], low[4]))
            if kind is not None and n == 5:
                return {'operation': kind[2] + '_ListAll', 'kind': kind[0]}
            if n >= 6 and low[4] == 'locations':
                location = low[5]
                rest = low[6:]
                if rest[:1] in (['operations'], ['operationresults'], ['operationstatuses']) and len(rest) == 2:
                    return {'operation': 'AsyncOperation_Get' if rest[0] != 'operationresults'
                            else 'OperationResults_Get', 'op_id': parts[7], 'poll': rest[0]}
                if rest == ['vmsizes']:
                    return {'operation': 'VirtualMachineSizes_List', 'location': location}
                if len(rest) >= 8 and rest[0] == 'publishers' and rest[2:4] == ['artifacttypes', 'vmimage'] \
                        and rest[4] == 'offers' and rest[6] == 'skus':
                    return {'operation': 'VirtualMachineImages_Get' if len(rest) == 10 else 'VirtualMachineImages_List',
                            'location': location, 'image': (rest[1], rest[5], rest[7]),
                            'version': parts[15] if len(rest) == 10 else None,
                            'image_names': (parts[7], parts[11], parts[13])}
        raise ArmError(404, 'InvalidResourceType', 'The resource path /{0} is not served by this fake.'.format(
            '/'.join(parts)))

    # ------------------------------------------------------------ acting

    def _act(self, route, request, body, principal, lro):
        op = route['operation']
        if op == 'ResourceGroups_Get':
            group = self.groups.get(route['group_key'])
            if group is None:
                raise ArmError(404, 'ResourceGroupNotFound', "Resource group '{0}' could not be found.".format(
                    route['group_name']))
            return _json(200, {'id': '/subscriptions/{0}/resourceGroups/{1}'.format(SUBSCRIPTION_ID, group['name']),
                               'name': group['name'], 'type': 'Microsoft.Resources/resourceGroups',
                               'location': group['location'], 'tags': group['tags'],
                               'properties': {'provisioningState': 'Succeeded'}})
        if op in ('AsyncOperation_Get', 'OperationResults_Get'):
            return self._poll(route)
        if op == 'VirtualMachineSizes_List':
            self._location(route['location'], 'Microsoft.Compute/virtualMachines')
            return _json(200, {'value': [{'name': name, 'numberOfCores': cores, 'memoryInMB': memory,
                                          'osDiskSizeInMB': 1047552, 'resourceDiskSizeInMB': 4096,
                                          'maxDataDiskCount': 4} for name, (cores, memory) in sorted(VM_SIZES.items())]})
        if op.startswith('VirtualMachineImages_'):
            return self._images(route)
        kind = route.get('kind')
        if op.endswith('_ListAll') or op.endswith('_List'):
            items = [r.answer() for r in sorted(self.resources.values(), key=lambda r: r.name)
                     if r.kind == kind and ('group' not in route or r.group.lower() == route['group'].lower())]
            if kind in ('vnet', 'nsg'):
                items = [copy.deepcopy(d) for d in self.readonly.values() if d['type'] == TYPE_OF[kind]]
            if lro is not None and lro.action == 'pages':
                return self._first_page(request, items, lro)
            return _json(200, {'value': items})
        if kind in ('vnet', 'nsg', 'subnet'):
            return self._read_only(route, request.method)
        name, group = route['name'], route['group']
        key = resource_id(group, kind, name).lower()
        resource = self.resources.get(key)
        if op.endswith('_Get') or op == 'VirtualMachines_InstanceView':
            if resource is None:
                raise _not_found(kind, name, group)
            doc = resource.answer()
            if kind == 'vm' and ('instanceView' in request.query.get('$expand', '') or route.get('instance_view')):
                view = self._instance_view(resource)
                if route.get('instance_view'):
                    return _json(200, view)
                doc['properties']['instanceView'] = view
            return _json(200, doc)
        if route.get('boot_diagnostics'):
            return self._boot_uris(request, resource, route)
        if route.get('action'):
            return self._power(resource, route, lro)
        if op.endswith('_Delete'):
            return self._delete(resource, kind, lro)
        try:
            payload = json.loads(body.decode('utf-8')) if body else {}
        except ValueError:
            raise ArmError(400, 'InvalidRequestContent', 'The request content was invalid and could not be '
                           'deserialized.') from None
        if not isinstance(payload, dict):
            raise ArmError(400, 'InvalidRequestContent', 'The request content must be a JSON object.')
        if request.method == 'PATCH':
            if resource is None:
                raise _not_found(kind, name, group)
            if 'tags' in payload:
                resource.doc['tags'] = {str(k): str(v) for k, v in (payload.get('tags') or {}).items()}
            if kind != 'disk':
                resource.doc['etag'] = _etag()
            return _json(200, resource.answer())
        existed = resource is not None
        resource = self._put(kind, group, name, payload, principal, resource)
        return self._begin('PUT', resource, lro, 200 if existed else 201)

    def _first_page(self, request, items, rule):
        listing = next(self._listing_ids)
        self.listings[listing] = {'items': items, 'size': rule.size, 'fail_at': rule.fail_at, 'code': rule.code,
                                  'status': rule.status, 'message': rule.message, 'path': request.path,
                                  'version': request.query.get('api-version', '')}
        for old in sorted(self.listings)[:-MAX_LISTINGS]:
            del self.listings[old]
        return self._page(listing, 1)

    def _next_page(self, request, token):
        try:
            dummy, listing, number = token.split('.')
            listing, number = int(listing), int(number)
        except ValueError:
            listing = number = None
        if listing not in self.listings:
            raise ArmError(400, 'InvalidSkipToken', "The skip token '{0}' is not valid (or its listing is too "
                           'old).'.format(token))
        return self._page(listing, number)

    def _page(self, listing, number):
        data = self.listings[listing]
        if data['fail_at'] == number:
            raise ArmError(data['status'] or 500, data['code'] or 'InternalServerError', data['message'] or
                           'An internal error occurred while listing page {0}.'.format(number))
        size = data['size']
        page = {'value': data['items'][(number - 1) * size:number * size]}
        if number * size < len(data['items']):
            page['nextLink'] = '{0}{1}?api-version={2}&$skiptoken=lcaz.{3}.{4}'.format(
                self.url, data['path'], urllib.parse.quote(data['version']), listing, number + 1)
        return _json(200, page)

    def _read_only(self, route, method):
        if method != 'GET':
            raise ArmError(403, 'AuthorizationFailed', 'The client does not have authorization to perform action on '
                           'the shared network resources of this fake (they are read only).')
        if route['kind'] == 'subnet':
            key = '/subscriptions/{0}/resourceGroups/{1}/providers/Microsoft.Network/virtualNetworks/{2}/subnets/' \
                  '{3}'.format(SUBSCRIPTION_ID, route['group'], route['vnet'], route['name']).lower()
            found = self.readonly.get(key)
            if found is None:
                parent = key.rsplit('/subnets/', 1)[0]
                if parent not in self.readonly:
                    raise _not_found('vnet', route['vnet'], route['group'])
                raise ArmError(404, 'NotFound', 'Resource /{0} not found.'.format(key))
            return _json(200, copy.deepcopy(found))
        key = '/subscriptions/{0}/resourceGroups/{1}/providers/{2}/{3}'.format(
            SUBSCRIPTION_ID, route['group'], TYPE_OF[route['kind']], route['name']).lower()
        found = self.readonly.get(key)
        if found is None:
            raise _not_found(route['kind'], route['name'], route['group'])
        return _json(200, copy.deepcopy(found))

    def _location(self, location, rtype):
        if str(location).lower() not in LOCATIONS:
            raise ArmError(400, 'LocationNotAvailableForResourceType', "The provided location '{0}' is not available "
                           "for resource type '{1}'. List of available regions for the resource type is '{2}'.".format(
                               location, rtype, ','.join(LOCATIONS)))

    def _images(self, route):
        self._location(route['location'], 'Microsoft.Compute/virtualMachines')
        versions = IMAGES.get(route['image'])
        publisher, offer, sku = route['image_names']
        if versions is None:
            raise ArmError(404, 'NotFound', "Artifact: VMImage was not found (publisher '{0}', offer '{1}', sku "
                           "'{2}').".format(publisher, offer, sku))
        base = '/Subscriptions/{0}/Providers/Microsoft.Compute/Locations/{1}/Publishers/{2}/ArtifactTypes/VMImage/' \
               'Offers/{3}/Skus/{4}/Versions/'.format(SUBSCRIPTION_ID, route['location'], publisher, offer, sku)
        if route['version'] is None:
            return _json(200, [{'location': route['location'], 'name': v, 'id': base + v} for v in versions])
        if route['version'] not in versions:
            raise ArmError(404, 'NotFound', "Artifact: VMImage was not found (version '{0}').".format(route['version']))
        return _json(200, {'location': route['location'], 'name': route['version'], 'id': base + route['version'],
                           'properties': {'osImage': {'operatingSystem': 'Linux', 'sizeInGb': 30},
                                          'hyperVGeneration': 'V2' if sku.endswith('gen2') else 'V1',
                                          'architecture': 'x64', 'dataDiskImages': []}})

    def _instance_view(self, vm):
        power = vm.doc.get('_power', 'running') if vm.state == 'Succeeded' else 'starting'
        return {'computerName': vm.doc['properties'].get('osProfile', {}).get('computerName'),
                'osName': 'debian', 'osVersion': '12',
                'statuses': [{'code': 'ProvisioningState/' + vm.state.lower(), 'level': 'Info',
                              'displayStatus': 'Provisioning ' + vm.state.lower()},
                             {'code': 'PowerState/' + power, 'level': 'Info',
                              'displayStatus': 'VM ' + power}]}

    # ------------------------------------------------------------ PUT

    def _put(self, kind, group, name, payload, principal, existing=None):
        """Validate and store a PUT; ArmError (and nothing changed) if it is refused."""
        if not NAME_RULES[kind].match(name) or (kind == 'vm' and len(name) > 64):
            raise ArmError(400, 'InvalidResourceName', "Resource name {0} is invalid. The name can be up to {1} "
                           "characters long. Valid characters are alphanumeric values, periods, underscores and "
                           "hyphens; it starts with a letter or digit and ends with a letter, digit or "
                           "underscore.".format(name, 64 if kind == 'vm' else 80))
        location = payload.get('location')
        if not location:
            raise ArmError(400, 'LocationRequired', 'The location property is required for this definition.')
        self._location(location, TYPE_OF[kind])
        location = str(location).lower()
        if existing is not None and existing.location != location:
            raise ArmError(400, 'InvalidResourceLocation', "The resource '{0}' already exists in location '{1}' in "
                           "resource group '{2}'. A resource with the same name cannot be created in location "
                           "'{3}'. Please select a new resource name.".format(
                               name, existing.location, group, location))
        if existing is not None and existing.state in ('Creating', 'Updating', 'Deleting'):
            raise ArmError(409, 'AnotherOperationInProgress' if kind != 'vm' else 'OperationNotAllowed',
                           'Another operation on this or dependent resource is in progress. To retrieve status of '
                           'the operation use uri: {0}.'.format(existing.id))
        tags = payload.get('tags') or {}
        if not isinstance(tags, dict) or len(tags) > 50 or any(
                len(str(k)) > 512 or len(str(v)) > 256 for k, v in tags.items()):
            raise ArmError(400, 'InvalidTag', 'Tags are a map of at most 50 names (512 characters) to values (256 '
                           'characters).')
        props = payload.get('properties') or {}
        resource = existing or Resource(kind, group, name, location, principal)
        check = getattr(self, '_check_' + kind)
        doc = check(resource, props, payload, existing)
        doc['tags'] = {str(k): str(v) for k, v in tags.items()}
        if kind != 'disk':
            # A managed disk has no etag (Microsoft.Compute/disks).
            doc['etag'] = _etag()
        apply = getattr(self, '_apply_' + kind, None)
        resource.doc = doc
        resource.state = 'Updating' if existing is not None else 'Creating'
        self.resources[resource.id.lower()] = resource
        if apply is not None:
            apply(resource)
        return resource

    def _check_pip(self, resource, props, payload, existing):
        sku = payload.get('sku') or {'name': 'Standard', 'tier': 'Regional'}
        method = props.get('publicIPAllocationMethod') or ('Static' if sku.get('name') == 'Standard' else 'Dynamic')
        if sku.get('name') == 'Standard' and method != 'Static':
            raise ArmError(400, 'StandardSkuPublicIPAddressesMustBeStatic', 'Standard sku publicIp {0} must have '
                           'AllocationMethod set to Static.'.format(resource.id), target=resource.id)
        old = existing.doc['properties'] if existing is not None else {}
        address = old.get('ipAddress') or self.public_pool.allocate(resource.id.lower())
        out = {'sku': {'name': sku.get('name', 'Standard'), 'tier': sku.get('tier', 'Regional')},
               'properties': {'resourceGuid': old.get('resourceGuid') or str(uuid.uuid4()),
                              'ipAddress': address,
                              'publicIPAddressVersion': props.get('publicIPAddressVersion', 'IPv4'),
                              'publicIPAllocationMethod': method,
                              'idleTimeoutInMinutes': props.get('idleTimeoutInMinutes', 4), 'ipTags': []}}
        if old.get('ipConfiguration'):
            out['properties']['ipConfiguration'] = old['ipConfiguration']
        if props.get('dnsSettings'):
            out['properties']['dnsSettings'] = props['dnsSettings']
        return out

    def _check_nic(self, resource, props, payload, existing):
        confs = props.get('ipConfigurations') or []
        if len(confs) != 1:
            raise ArmError(400, 'InvalidRequestFormat', 'A network interface here has exactly one IP configuration '
                           '(got {0}).'.format(len(confs)), target='ipConfigurations')
        conf = confs[0]
        cprops = conf.get('properties') or {}
        subnet_id = _ref(cprops.get('subnet'))
        if not subnet_id or subnet_id.lower() not in self.readonly:
            raise ArmError(400, 'InvalidResourceReference', 'Resource {0} referenced by resource {1} was not found. '
                           'Please make sure that the referenced resource exists, and that both resources are in the '
                           'same region.'.format(subnet_id, resource.id), target='subnet')
        vnet = self.readonly[subnet_id.lower().rsplit('/subnets/', 1)[0]]
        if vnet['location'] != resource.location:
            raise ArmError(400, 'InvalidResourceReference', 'Resource {0} referenced by resource {1} was not found. '
                           'Please make sure that the referenced resource exists, and that both resources are in the '
                           'same region.'.format(subnet_id, resource.id), target='subnet')
        conf_name = conf.get('name') or 'ipconfig1'
        conf_id = '{0}/ipConfigurations/{1}'.format(resource.id, conf_name)
        old_props = existing.doc['properties'] if existing is not None else {}
        old_pip = None
        if existing is not None:
            old_pip = _ref(old_props['ipConfigurations'][0]['properties'].get('publicIPAddress'))
        pip_ref = cprops.get('publicIPAddress')
        pip_id = _ref(pip_ref)
        if pip_id:
            pip = self.resources.get(pip_id.lower())
            if pip is None or pip.location != resource.location:
                raise ArmError(400, 'InvalidResourceReference', 'Resource {0} referenced by resource {1} was not '
                               'found. Please make sure that the referenced resource exists, and that both resources '
                               'are in the same region.'.format(pip_id, resource.id), target='publicIPAddress')
            bound = _ref(pip.doc['properties'].get('ipConfiguration'))
            if bound and bound.lower() != conf_id.lower():
                raise ArmError(400, 'PublicIPAddressInUse', 'Resource {0} is referenced by resource {1}, and cannot '
                               'be referenced by {2} at the same time.'.format(pip.id, bound, conf_id),
                               target='publicIPAddress')
            pip_ref = {'id': pip.id}
            option = ((cprops.get('publicIPAddress') or {}).get('properties') or {}).get('deleteOption')
            if option:
                if option not in ('Delete', 'Detach'):
                    raise ArmError(400, 'InvalidParameter', "deleteOption must be 'Delete' or 'Detach'.")
                pip_ref['properties'] = {'deleteOption': option}
        address = self.pool.allocate(resource.id.lower())
        if old_pip and (not pip_id or old_pip.lower() != pip_id.lower()):
            resource._unbind = old_pip  # pylint: disable=protected-access
        out_conf = {'id': conf_id, 'name': conf_name, 'etag': _etag(),
                    'type': 'Microsoft.Network/networkInterfaces/ipConfigurations',
                    'properties': {'privateIPAddress': address, 'privateIPAllocationMethod': 'Dynamic',
                                   'privateIPAddressVersion': 'IPv4', 'subnet': {'id': subnet_id}, 'primary': True}}
        if pip_id:
            out_conf['properties']['publicIPAddress'] = pip_ref
        out = {'properties': {'resourceGuid': old_props.get('resourceGuid') or str(uuid.uuid4()),
                              'ipConfigurations': [out_conf],
                              'dnsSettings': {'dnsServers': [], 'appliedDnsServers': []},
                              'enableAcceleratedNetworking': bool(props.get('enableAcceleratedNetworking', False)),
                              'enableIPForwarding': bool(props.get('enableIPForwarding', False)),
                              'nicType': 'Standard', 'primary': True,
                              'macAddress': old_props.get('macAddress') or '00-0D-3A-{0}'.format(
                                  '-'.join(secrets.token_hex(3)[i:i + 2].upper() for i in (0, 2, 4)))}}
        if props.get('networkSecurityGroup'):
            out['properties']['networkSecurityGroup'] = {'id': _ref(props['networkSecurityGroup'])}
        if old_props.get('virtualMachine'):
            out['properties']['virtualMachine'] = old_props['virtualMachine']
        return out

    def _apply_nic(self, resource):
        old = getattr(resource, '_unbind', None)
        if old:
            pip = self.resources.get(old.lower())
            if pip is not None:
                pip.doc['properties'].pop('ipConfiguration', None)
            resource._unbind = None  # pylint: disable=protected-access
        conf = resource.doc['properties']['ipConfigurations'][0]
        pip = self.resources.get((_ref(conf['properties'].get('publicIPAddress')) or '').lower())
        if pip is not None:
            pip.doc['properties']['ipConfiguration'] = {'id': conf['id']}

    def _check_disk(self, resource, props, payload, existing):
        if existing is not None:
            out = copy.deepcopy(existing.doc)
            if props.get('diskSizeGB'):
                out['properties']['diskSizeGB'] = props['diskSizeGB']
            return out
        data = props.get('creationData') or {}
        if data.get('createOption') != 'Empty' or not props.get('diskSizeGB'):
            raise ArmError(400, 'InvalidParameter', 'A disk made on its own here is an empty one: '
                           "creationData.createOption 'Empty' and diskSizeGB.", target='creationData')
        return {'sku': payload.get('sku') or {'name': 'Standard_LRS', 'tier': 'Standard'},
                'properties': {'creationData': {'createOption': 'Empty'}, 'diskSizeGB': int(props['diskSizeGB']),
                               'diskState': 'Unattached', 'uniqueId': str(uuid.uuid4()), 'timeCreated': _now_iso(),
                               'encryption': {'type': 'EncryptionAtRestWithPlatformKey'}}}

    def _managed_image(self, image_id, location):
        """The managed image (Microsoft.Compute/images) a VM is made from, in the VM's location."""
        found = self.resources.get(str(image_id).lower())
        if found is None or found.kind != 'image' or found.location != location:
            raise ArmError(404, 'NotFound', "The Image '{0}' cannot be found in '{1}' region.".format(image_id, location),
                           target='imageReference')
        return found

    def _check_image(self, resource, props, payload, existing):
        """A managed image captured from a generalized, deallocated VM of this fake (az image create --source)."""
        if existing is not None:
            return copy.deepcopy(existing.doc)
        source = _ref(props.get('sourceVirtualMachine'))
        vm = self.resources.get((source or '').lower())
        if vm is None or vm.kind != 'vm':
            raise ArmError(400, 'InvalidParameter', 'An image here is captured from a VM: '
                           "properties.sourceVirtualMachine.id '{0}' was not found.".format(source),
                           target='sourceVirtualMachine')
        if not vm.doc.get('_generalized'):
            raise ArmError(409, 'OperationNotAllowed', "The source VM '{0}' must be generalized (and deallocated) "
                           'to create an image from it.'.format(vm.name), target='sourceVirtualMachine')
        if vm.location != resource.location:
            raise ArmError(400, 'InvalidParameter', "The source VM '{0}' is in {1}; the image is in {2}.".format(
                vm.name, vm.location, resource.location), target='sourceVirtualMachine')
        disk = vm.doc['properties']['storageProfile']['osDisk']
        return {'properties': {'sourceVirtualMachine': {'id': vm.id}, 'hyperVGeneration': 'V2',
                               'storageProfile': {'osDisk': {'osType': 'Linux', 'osState': 'Generalized',
                                                             'managedDisk': {'id': disk['managedDisk']['id']},
                                                             'caching': 'ReadWrite', 'diskSizeGB': disk['diskSizeGB'],
                                                             'storageAccountType': 'Standard_LRS'},
                                                  'dataDisks': [], 'zoneResilient': False}}}

    def _check_vm(self, resource, props, payload, existing):
        if existing is not None:
            given = (props.get('osProfile') or {}).get('customData')
            if given is not None and _custom_data(given) != existing.doc.get('_custom_data'):
                raise ArmError(409, 'PropertyChangeNotAllowed', "Changing property 'customData' is not allowed.",
                               target='customData')
            # Only tags change on an existing VM here.
            return copy.deepcopy(existing.doc)
        size = (props.get('hardwareProfile') or {}).get('vmSize')
        if size not in VM_SIZES:
            raise ArmError(400, 'InvalidParameter', "The value '{0}' provided for the VM size is not valid. The "
                           'valid sizes in {1} are {2}.'.format(size, resource.location, ', '.join(sorted(VM_SIZES))),
                           target='vmSize')
        storage = props.get('storageProfile') or {}
        image = storage.get('imageReference') or {}
        managed = self._managed_image(image.get('id'), resource.location) if image.get('id') else None
        key = (str(image.get('publisher', '')).lower(), str(image.get('offer', '')).lower(),
               str(image.get('sku', '')).lower())
        versions = IMAGES.get(key) if managed is None else ['-']
        version = image.get('version') or 'latest'
        if versions is None or (version != 'latest' and version not in versions):
            raise ArmError(404, 'PlatformImageNotFound', "The platform image '{0}:{1}:{2}:{3}' is not available. "
                           'Verify that all fields in the storage profile are correct.'.format(
                               image.get('publisher'), image.get('offer'), image.get('sku'), version),
                           target='imageReference')
        if storage.get('dataDisks'):
            raise ArmError(400, 'InvalidParameter', 'This fake makes VMs without data disks.', target='dataDisks')
        os_disk = storage.get('osDisk') or {}
        if os_disk.get('createOption', 'FromImage') != 'FromImage':
            raise ArmError(400, 'InvalidParameter', "osDisk.createOption must be 'FromImage'.", target='osDisk')
        disk_name = os_disk.get('name') or '{0}_OsDisk_1_{1}'.format(resource.name, uuid.uuid4().hex)
        if not DISK_NAME.match(disk_name):
            raise ArmError(400, 'InvalidParameter', "The OS disk name '{0}' is invalid.".format(disk_name),
                           target='osDisk.name')
        disk_id = '/subscriptions/{0}/resourceGroups/{1}/providers/Microsoft.Compute/disks/{2}'.format(
            SUBSCRIPTION_ID, resource.group, disk_name)
        if disk_id.lower() in self.resources:
            raise ArmError(409, 'ConflictingUserInput', "Disk {0} already exists in resource group {1}. Only "
                           "CreateOption.Attach is supported.".format(disk_name, resource.group.upper()),
                           target='/disks/' + disk_name)
        delete_option = os_disk.get('deleteOption') or 'Detach'
        if delete_option not in ('Delete', 'Detach'):
            raise ArmError(400, 'InvalidParameter', "osDisk.deleteOption must be 'Delete' or 'Detach'.")
        profile = props.get('osProfile') or {}
        computer = profile.get('computerName') or resource.name
        if not COMPUTER_NAME.match(computer) or computer.isdigit():
            raise ArmError(400, 'InvalidParameter', "Linux host name cannot exceed 64 characters in length or contain "
                           "the following characters: ~ ! @ # $ % ^ & * ( ) = + _ [ ] { } \\ | ; : ' \" , < > / ?.",
                           target='computerName')
        if not profile.get('adminUsername'):
            raise ArmError(400, 'InvalidParameter', "Required parameter 'adminUsername' is missing (null).",
                           target='adminUsername')
        linux = profile.get('linuxConfiguration') or {}
        keys = [k for k in ((linux.get('ssh') or {}).get('publicKeys') or []) if isinstance(k, dict)]
        if linux.get('disablePasswordAuthentication', False) and not keys:
            raise ArmError(400, 'InvalidParameter', 'Destination path for SSH public keys is required when password '
                           'authentication is disabled.', target='linuxConfiguration')
        for item in keys:
            if not str(item.get('keyData', '')).startswith(('ssh-rsa ', 'ssh-ed25519 ', 'ecdsa-sha2-')):
                raise ArmError(400, 'InvalidParameter', 'The value of parameter linuxConfiguration.ssh.publicKeys.'
                               'keyData is invalid.', target='linuxConfiguration.ssh.publicKeys.keyData')
        nics = ((props.get('networkProfile') or {}).get('networkInterfaces') or [])
        if not nics:
            raise ArmError(400, 'InvalidParameter', 'A VM needs at least one network interface.',
                           target='networkProfile')
        nic_refs = []
        for ref_ in nics:
            nic = self.resources.get((_ref(ref_) or '').lower())
            if nic is None:
                raise ArmError(400, 'InvalidResourceReference', 'Resource {0} referenced by resource {1} was not '
                               'found.'.format(_ref(ref_), resource.id), target='networkInterfaces')
            if nic.location != resource.location:
                raise ArmError(400, 'NicLocationMismatch', 'The network interface {0} is in location {1}; the VM is '
                               'in {2}. They must be in the same location.'.format(
                                   nic.id, nic.location, resource.location))
            attached = _ref(nic.doc['properties'].get('virtualMachine'))
            if attached and attached.lower() != resource.id.lower():
                raise ArmError(400, 'NicInUse', 'Network Interface {0} is used by existing resource {1}. In order to '
                               'delete the network interface, it must be dissociated from the resource.'.format(
                                   nic.id, attached))
            option = ((ref_.get('properties') or {}).get('deleteOption'))
            entry = {'id': nic.id, 'properties': {'primary': True}}
            if option:
                entry['properties']['deleteOption'] = option
            nic_refs.append(entry)
        out_os = {'osType': 'Linux', 'name': disk_name, 'createOption': 'FromImage',
                  'caching': os_disk.get('caching') or 'ReadWrite',
                  'managedDisk': {'storageAccountType': (os_disk.get('managedDisk') or {}).get('storageAccountType')
                                  or 'Premium_LRS', 'id': disk_id},
                  'deleteOption': delete_option, 'diskSizeGB': int(os_disk.get('diskSizeGB') or 30)}
        exact = versions[-1] if version == 'latest' else version
        out_profile = {'computerName': computer, 'adminUsername': profile['adminUsername'],
                       'linuxConfiguration': {'disablePasswordAuthentication': bool(
                           linux.get('disablePasswordAuthentication', False)),
                           'ssh': {'publicKeys': [{'path': k.get('path'), 'keyData': k.get('keyData')}
                                                  for k in keys]},
                           'provisionVMAgent': True},
                       'secrets': [], 'allowExtensionOperations': True,
                       'requireGuestProvisionSignal': True}
        custom = _custom_data(profile['customData']) if profile.get('customData') is not None else None
        if custom is not None:
            out_profile['customData'] = None  # ARM never answers it
        properties = {
            'vmId': str(uuid.uuid4()), 'hardwareProfile': {'vmSize': size},
            'storageProfile': {'imageReference': {'publisher': image.get('publisher'), 'offer': image.get('offer'),
                                                  'sku': image.get('sku'), 'version': version,
                                                  'exactVersion': exact} if managed is None else {'id': managed.id},
                               'osDisk': out_os, 'dataDisks': [], 'diskControllerType': 'SCSI'},
            'osProfile': out_profile,
            'networkProfile': {'networkInterfaces': nic_refs},
            'timeCreated': _now_iso()}
        out = {'_custom_data': custom, '_boot_fault': self._take_boot_arm(), '_boot_sig': secrets.token_urlsafe(24),
               'properties': properties}
        boot = (props.get('diagnosticsProfile') or {}).get('bootDiagnostics')
        if isinstance(boot, dict):
            kept = {'enabled': bool(boot.get('enabled'))}
            if boot.get('storageUri'):
                kept['storageUri'] = str(boot['storageUri'])
            out['properties']['diagnosticsProfile'] = {'bootDiagnostics': kept}
        return out

    def _take_boot_arm(self):
        for arm in self.boot_arms:
            if arm['times'] is None or arm['times'] > 0:
                if arm['times'] is not None:
                    arm['times'] -= 1
                arm['hits'].append(time.time())
                return arm['kind']
        return None

    # ------------------------------------------------------------ boot diagnostics

    def _boot_uris(self, request, resource, route):
        """VirtualMachines_RetrieveBootDiagnosticsData: SAS URLs of the VM's serial log and screenshot on this
        server, valid sasUriExpirationTimeInMinutes (1 to 1440, 120 when not given)."""
        if resource is None:
            raise _not_found('vm', route['name'], route['group'])
        minutes = request.query.get('sasUriExpirationTimeInMinutes', '120')
        try:
            minutes = int(minutes)
        except ValueError:
            minutes = 0
        if not 1 <= minutes <= 1440:
            raise ArmError(400, 'InvalidParameter', 'The value of parameter sasUriExpirationTimeInMinutes is invalid: '
                           'it is between 1 and 1440.', target='sasUriExpirationTimeInMinutes')
        self.boot_requests.append({'vm': resource.id, 'minutes': minutes, 'time': time.time()})
        boot = (resource.doc['properties'].get('diagnosticsProfile') or {}).get('bootDiagnostics') or {}
        if not boot.get('enabled'):
            raise ArmError(409, 'OperationNotAllowed', 'Boot diagnostics is not enabled for the virtual machine '
                           "'{0}'.".format(resource.name))
        expiry = time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime(time.time() + minutes * 60))
        query = urllib.parse.urlencode({'sv': SAS_VERSION, 'sr': 'b', 'sp': 'r', 'se': expiry,
                                        'sig': resource.doc['_boot_sig']})
        base = '{0}/bootdiagnostics/{1}'.format(self.url, resource.doc['properties']['vmId'])
        return _json(200, {'consoleScreenshotBlobUri': '{0}/screenshot.bmp?{1}'.format(base, query),
                           'serialConsoleLogBlobUri': '{0}/serialconsole.log?{1}'.format(base, query)})

    def _boot_blob(self, request, parts):
        """GET of a boot diagnostics blob, as Azure Storage answers one read with a SAS."""
        vm = None
        if len(parts) == 3:
            vm = next((r for r in self.resources.values()
                       if r.kind == 'vm' and r.doc['properties'].get('vmId') == parts[1]), None)
        read = {'vm': vm.id if vm is not None else None, 'blob': parts[-1],
                'authorization': 'Authorization' in request.headers, 'range': request.headers.get('Range'),
                'time': time.time()}
        self.boot_reads.append(read)
        if vm is None or parts[2] not in ('serialconsole.log', 'screenshot.bmp'):
            read['status'] = 404
            return _storage_error(404, 'ResourceNotFound', 'The specified resource does not exist.')
        sig = request.query.get('sig', '')
        expiry = request.query.get('se', '')
        try:
            expired = time.mktime(time.strptime(expiry, '%Y-%m-%dT%H:%M:%SZ')) - time.timezone < time.time()
        except ValueError:
            expired = True
        if not secrets.compare_digest(sig, vm.doc['_boot_sig']) or expired:
            read['status'] = 403
            return _storage_error(403, 'AuthenticationFailed', 'Server failed to authenticate the request. Make sure '
                                  'the value of Authorization header is formed correctly including the signature.')
        text = self.serial_log(vm) if parts[2] == 'serialconsole.log' else None
        if text is None:
            read['status'] = 404
            return _storage_error(404, 'BlobNotFound', 'The specified blob does not exist.')
        data = text.encode('utf-8')
        status, headers = 200, {'x-ms-blob-type': 'BlockBlob', 'x-ms-version': SAS_VERSION}
        match = re.match(r'^bytes=(\d+)-(\d*)$', request.headers.get('Range', ''))
        if match:
            first = int(match.group(1))
            last = min(int(match.group(2)) if match.group(2) else len(data) - 1, len(data) - 1)
            if first >= len(data):
                read['status'] = 416
                return _storage_error(416, 'InvalidRange', 'The range specified is invalid for the current size of '
                                      'the resource.')
            headers['Content-Range'] = 'bytes {0}-{1}/{2}'.format(first, last, len(data))
            data, status = data[first:last + 1], 206
        read['status'] = status
        return web.Response(status=status, body=data if request.method == 'GET' else b'', headers=headers,
                            content_type='text/plain', charset='utf-8')

    def serial_log(self, vm):
        """The VM's serial log, or None while none is written (boot diagnostics off, or the VM never ran): a few
        lines of boot, then, once its guest's sshd serves, the host key block cloud-init prints (its
        write-ssh-key-fingerprints through logger, tag ec2, and keys_to_console), with that sshd's key, or with a key
        of no sshd for a VM with the console_key fault (none at all with console_silent, as an image whose cloud-init
        prints no keys)."""
        props = vm.doc['properties']
        if not ((props.get('diagnosticsProfile') or {}).get('bootDiagnostics') or {}).get('enabled'):
            return None
        parts = getattr(self.site, 'azure', None)
        machines = getattr(parts, 'guests', None)
        key = 'azure' + vm.id
        guest = machines.guests.get(key) if machines is not None else None
        if guest is None:
            return None
        name = props['osProfile'].get('computerName') or vm.name
        lines = ['[    0.000000] Linux version 6.1.0-cloud-amd64 (localcloud)',
                 '[    0.000000] Command line: BOOT_IMAGE=/boot/vmlinuz root=/dev/sda1 console=tty1 console=ttyS0',
                 'Booting the VM {0} ({1})'.format(vm.name, props['vmId'])]
        host_key = guest.host_key if guest.proc is not None and guest.state == 'up' else None
        fault = vm.doc.get('_boot_fault')
        if host_key and fault != 'console_silent':
            if fault == 'console_key':
                path = os.path.join(machines.guest_dir(key), 'console_other_key')
                os.makedirs(os.path.dirname(path), exist_ok=True)
                host_key = pki.ssh_key(path, 'other').rsplit(' ', 1)[0]
            kind, blob = host_key.split()[:2]
            digest = base64.b64encode(hashlib.sha256(base64.b64decode(blob)).digest()).decode().rstrip('=')
            stamp = time.strftime('%b %d %H:%M:%S', time.gmtime())
            fingerprints = ['#' * 61, '-----BEGIN SSH HOST KEY FINGERPRINTS-----',
                            '256 SHA256:{0} root@{1} ({2})'.format(digest, name, kind.split('-')[-1].upper()),
                            '-----END SSH HOST KEY FINGERPRINTS-----', '#' * 61]
            lines += ['<14>{0} ec2: {1}'.format(stamp, line) for line in fingerprints]
            lines += ['-----BEGIN SSH HOST KEY KEYS-----', '{0} {1} root@{2}'.format(kind, blob, name),
                      '-----END SSH HOST KEY KEYS-----']
        return '\n'.join(lines) + '\n'

    def _apply_vm(self, resource):
        props = resource.doc['properties']
        for ref_ in props['networkProfile']['networkInterfaces']:
            nic = self.resources.get(ref_['id'].lower())
            if nic is not None:
                nic.doc['properties']['virtualMachine'] = {'id': resource.id}
        os_disk = props['storageProfile']['osDisk']
        disk_id = os_disk['managedDisk']['id']
        if disk_id.lower() in self.resources:
            return
        image = props['storageProfile']['imageReference']
        source = image['id'] if image.get('id') else (
            '/Subscriptions/{0}/Providers/Microsoft.Compute/Locations/{1}/Publishers/{2}/ArtifactTypes/VMImage/Offers/'
            '{3}/Skus/{4}/Versions/{5}'.format(SUBSCRIPTION_ID, resource.location, image['publisher'], image['offer'],
                                               image['sku'], image['exactVersion']))
        disk = Resource('disk', resource.group, os_disk['name'], resource.location, resource.owner)
        disk.doc = {'managedBy': resource.id, 'tags': {},
                    'sku': {'name': os_disk['managedDisk']['storageAccountType'],
                            'tier': 'Premium' if 'Premium' in os_disk['managedDisk']['storageAccountType']
                            else 'Standard'},
                    'properties': {'osType': 'Linux', 'hyperVGeneration': 'V2',
                                   'creationData': {'createOption': 'FromImage', 'imageReference': {'id': source}},
                                   'diskSizeGB': os_disk['diskSizeGB'], 'diskState': 'Attached',
                                   'uniqueId': str(uuid.uuid4()), 'timeCreated': _now_iso(),
                                   'encryption': {'type': 'EncryptionAtRestWithPlatformKey'}}}
        disk.state = 'Creating'
        self.resources[disk.id.lower()] = disk

    # ------------------------------------------------------------ DELETE, power, LRO

    def _delete(self, resource, kind, lro):
        if resource is None:
            return web.Response(status=204)
        props = resource.doc.get('properties', {})
        if resource.state == 'Deleting':
            return self._begin('DELETE', resource, lro, 202, again=True)
        if kind == 'nic' and _ref(props.get('virtualMachine')):
            raise ArmError(409, 'NicInUse', 'Network Interface {0} is used by existing resource {1}. In order to '
                           'delete the network interface, it must be dissociated from the resource. To learn more, '
                           'see aka.ms/deletenic.'.format(resource.id, _ref(props['virtualMachine'])))
        if kind == 'pip' and _ref(props.get('ipConfiguration')):
            raise ArmError(409, 'PublicIPAddressCannotBeDeleted', 'Public IP address {0} can not be deleted since it '
                           'is still allocated to resource {1}. In order to delete the public IP, disassociate/detach '
                           'the Public IP address from the resource.  To learn how to do this, see aka.ms/deletepublicip'
                           '.'.format(resource.id, _ref(props['ipConfiguration'])))
        if kind == 'disk' and resource.doc.get('managedBy'):
            raise ArmError(409, 'OperationNotAllowed', 'Disk {0} is attached to VM {1}.'.format(
                resource.name, resource.doc['managedBy']))
        if resource.state in ('Creating', 'Updating'):
            raise ArmError(409, 'AnotherOperationInProgress', 'Another operation on this or dependent resource is in '
                           'progress.')
        return self._begin('DELETE', resource, lro, 202)

    def _power(self, resource, route, lro):
        if resource is None:
            raise _not_found('vm', route['name'], route['group'])
        if route['action'] == 'generalize':
            if resource.doc.get('_power', 'running') not in ('stopped', 'deallocated'):
                raise ArmError(409, 'OperationNotAllowed', "Operation 'generalize' is not allowed on VM '{0}' since "
                               'the VM is running. Deallocate it first.'.format(resource.name))
            resource.doc['_generalized'] = True
            return web.Response(status=200)
        if resource.doc.get('_generalized') and route['action'] in ('start', 'restart'):
            raise ArmError(409, 'OperationNotAllowed', "Operation '{0}' is not allowed on VM '{1}' since the VM is "
                           'generalized.'.format(route['action'], resource.name))
        resource.doc['_power'] = {'start': 'running', 'restart': 'running', 'poweroff': 'stopped',
                                  'deallocate': 'deallocated'}.get(route['action'], 'running')
        return web.Response(status=200)

    def _begin(self, method, resource, rule, status, again=False):
        style = (rule.style if rule and rule.style else None) or ('async' if method == 'PUT' else 'both')
        seconds = rule.seconds if rule and rule.seconds is not None else self.pending_secs
        outcome = (rule.outcome if rule and rule.outcome else None) or 'Succeeded'
        poll = rule.poll if rule else None
        if again:
            op = next((o for o in self.operations.values() if o.resource is resource and o.method == 'DELETE'
                       and o.status == 'InProgress'), None)
            if op is not None:
                return self._accepted(op, 202)
        namespace = 'Microsoft.Compute' if resource.kind in ('vm', 'disk', 'image') else 'Microsoft.Network'
        op = Operation(str(uuid.uuid4()), method, resource, style, seconds, outcome, poll, resource.location)
        op.namespace = namespace
        self.operations[op.id] = op
        if method == 'DELETE':
            resource.state = 'Deleting'
        if style == 'sync' or seconds == 0:
            self._finish(op)
            if op.status != 'Succeeded':
                raise ArmError(500 if op.outcome == 'Failed' else 409, op.error['code'], op.error['message'])
            if method == 'DELETE':
                return web.Response(status=200)
            return _json(status, resource.answer())
        return self._accepted(op, status)

    def _accepted(self, op, status):
        base = '{0}/subscriptions/{1}/providers/{2}/locations/{3}'.format(self.url, SUBSCRIPTION_ID, op.namespace,
                                                                          op.location)
        version = API_VERSIONS['network' if op.namespace == 'Microsoft.Network' else 'compute']
        headers = {'Retry-After': str(self.poll_secs)}
        if op.style in ('async', 'both'):
            headers['Azure-AsyncOperation'] = '{0}/{1}/{2}?api-version={3}'.format(
                base, 'operations' if op.namespace == 'Microsoft.Network' else 'operations', op.id, version)
        if op.style in ('location', 'both'):
            headers['Location'] = '{0}/operationResults/{1}?api-version={2}'.format(base, op.id, version)
        if op.method == 'DELETE':
            return web.Response(status=202, headers=headers)
        if op.style == 'location':
            status = 202
        return _json(status, op.resource.answer(), headers)

    def _poll(self, route):
        op = self.operations.get(route['op_id'])
        if op is None:
            raise ArmError(404, 'NotFound', 'The operation {0} was not found.'.format(route['op_id']))
        headers = {'Retry-After': str(self.poll_secs)}
        if route['operation'] == 'AsyncOperation_Get':
            if op.poll == 'empty':
                return web.Response(status=200, headers=headers, content_type='application/json')
            doc = {'name': op.id, 'status': op.status, 'startTime': op.started}
            if op.ended:
                doc['endTime'] = op.ended
            if op.error:
                doc['error'] = op.error
            return _json(200, doc, headers if op.status == 'InProgress' else None)
        # Location polling.
        if op.status == 'InProgress':
            if op.poll == 'explicit':
                return _json(200, {'status': 'InProgress'}, headers)
            location = '{0}/subscriptions/{1}/providers/{2}/locations/{3}/operationResults/{4}?api-version={5}'.format(
                self.url, SUBSCRIPTION_ID, op.namespace, op.location, op.id,
                API_VERSIONS['network' if op.namespace == 'Microsoft.Network' else 'compute'])
            return web.Response(status=202, headers=dict(headers, Location=location))
        if op.status != 'Succeeded':
            if op.poll == 'explicit':
                return _json(200, {'status': op.status, 'error': op.error})
            return _json(500 if op.status == 'Failed' else 409, {'error': op.error})
        if op.method == 'DELETE':
            return web.Response(status=204)
        current = self.resources.get(op.resource.id.lower())
        return _json(200, current.answer() if current is not None else {})


def _custom_data(value):
    """The bytes of an osProfile.customData, or ArmError as Azure answers one that is not base64 of at most 65535
    bytes."""
    refused = ArmError(400, 'InvalidParameter', 'Custom data in OSProfile must be in Base64 encoding and with a '
                       'maximum length of {0} characters.'.format(CUSTOM_DATA_CHARS), target='customData')
    if not isinstance(value, str) or len(value) > CUSTOM_DATA_CHARS:
        raise refused
    try:
        data = base64.b64decode(value.encode('ascii'), validate=True)
    except (binascii.Error, UnicodeEncodeError):
        raise refused from None
    if len(data) > CUSTOM_DATA_BYTES:
        raise refused
    return data


def cloud_init_keys(custom_data, public_keys):
    """(the administrator user's keys, root's keys) as cloud-init makes them from the VM's custom data (bytes or
    None) and its osProfile keys: a #cloud-config's ssh_authorized_keys join the osProfile's for the administrator
    user; root gets them too only with disable_root: false (else cloud-init leaves root a key that only says to log
    in as the administrator user, which is no login)."""
    config = {}
    text = (custom_data or b'').decode('utf-8', 'replace')
    if text.startswith('#cloud-config'):
        try:
            config = yaml.safe_load(text) or {}
        except yaml.YAMLError:
            config = {}
    if not isinstance(config, dict):
        config = {}
    extra = [str(k).strip() for k in (config.get('ssh_authorized_keys') or []) if str(k).strip()]
    keys = list(public_keys) + [k for k in extra if k not in public_keys]
    return keys, (keys if config.get('disable_root', True) is False else [])


def _merge(target, patch):
    for key, value in patch.items():
        if value is None:
            target.pop(key, None)
        elif isinstance(value, dict) and isinstance(target.get(key), dict):
            _merge(target[key], value)
        else:
            target[key] = copy.deepcopy(value)


def _storage_error(status, code, message):
    """An error answer of Azure Storage: XML, with its code in x-ms-error-code."""
    body = ('<?xml version="1.0" encoding="utf-8"?><Error><Code>{0}</Code><Message>{1}\nRequestId:{2}\nTime:{3}'
            '</Message></Error>').format(code, message, uuid.uuid4(), _now_iso())
    return web.Response(status=status, body=body.encode(), headers={'x-ms-error-code': code},
                        content_type='application/xml')


def _json(status, payload, headers=None):
    return web.Response(status=status, body=json.dumps(payload).encode(), headers=headers or {},
                        content_type='application/json')


def loopback_only(host):
    if not ipaddress.ip_address(host).is_loopback:
        raise CloudError('the ARM fake listens on loopback only, not {0}'.format(host))
