# -*- coding: utf-8 -*-
# Copyright: ephemera.workspaces contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The GCP provider: workspaces are Compute Engine instances in one project and zone.

Ids are instance names, locations are zones, the scope is the ``ephemera-scope`` label, and task handles name a zone
operation and the instance it acts on (``gce/insert/<zone>/<name>/<operation>/<epoch>``). The candidate id a create
records before it dispatches is the instance name itself (derived from the workspace and its record), and the
``requestId`` of ``instances.insert`` is derived from that name, so a retry after a lost answer is the same request
and Compute Engine answers it with the same operation instead of a second instance. The ownership marker is the
metadata item ``ephemera-marker`` (a label value holds 63 characters, a marker more); the lease labels, the scope and
the workspace go on as labels, all in the insert itself. The insert also enables guest attributes, where the guest
agent publishes sshd's host keys at boot; the create's first SSH is pinned to them (``published_host_keys``).

An instance holds no credential: it runs with no service account (``serviceAccounts`` empty), so its metadata server
gives no token, and nothing in it can call Google APIs as anyone. Its hard deadline is Compute Engine's own: the
insert sets ``scheduling.terminationTime`` to the lease's end (created_at + ttl) plus ``gcp_deadline_grace``, with
``instanceTerminationAction: DELETE``, so Compute Engine deletes the instance then even when no controller runs. The
idle expiry is the controller's (the expiry sweep, the label cleanup sweep). A retain, which keeps a workspace past
its lease, lifts the deadline (``lift_deadline``).

A delete is done when its zone operation is DONE without an error **and** a GET of the instance then answers 404; an
operation DONE with an error is a failure with Compute Engine's message.
"""

import math
import re
import time
import uuid

from ansible_collections.ephemera.workspaces.plugins.module_utils.core import failpoint
from ansible_collections.ephemera.workspaces.plugins.module_utils.core import lease as leasing
from ansible_collections.ephemera.workspaces.plugins.module_utils.providers import base
from ansible_collections.ephemera.workspaces.plugins.module_utils.providers import cloud
from ansible_collections.ephemera.workspaces.plugins.module_utils.providers import hostkeys
from ansible_collections.ephemera.workspaces.plugins.module_utils.providers.gcp import options
from ansible_collections.ephemera.workspaces.plugins.module_utils.providers.gcp.client import (
    ENDPOINT_ENV,
    PROJECT_ENV,
    ZONE_ENV,
    Compute,
    credentials,
)

NAME = 'gcp'
KIND = 'gce'
LABEL_OURS = 'ephemera'
LABEL_SCOPE = 'ephemera-scope'
LABEL_WORKSPACE = 'ephemera-workspace'
META_MARKER = 'ephemera-marker'
META_SSH_KEYS = 'ssh-keys'
# Guest attributes on: the guest agent of Compute Engine's public images writes sshd's host keys there at boot.
META_GUEST_ATTRIBUTES = 'enable-guest-attributes'
HOST_KEYS_NAMESPACE = 'hostkeys'
LABEL_KEYS = (leasing.LABEL_STATE, leasing.LABEL_EXPIRES_AT, leasing.LABEL_KEEP, leasing.LABEL_CREATED_AT)
RESERVED_LABELS = (LABEL_OURS, LABEL_SCOPE, LABEL_WORKSPACE) + LABEL_KEYS
# Compute Engine's label rules: keys start with a lowercase letter; keys and values hold lowercase letters, digits,
# '_' and '-', at most 63 characters; at most 64 labels.
LABEL_KEY = re.compile(r'^[a-z][a-z0-9_-]{0,62}$')
LABEL_VALUE = re.compile(r'^[a-z0-9_-]{0,63}$')
INSTANCE_NAME = re.compile(r'^[a-z]([-a-z0-9]{0,61}[a-z0-9])?$')
ZONE_FORM = re.compile(r'^[a-z]+-[a-z]+[0-9]+-[a-z]$')
RUNNING_STATES = ('PROVISIONING', 'STAGING', 'RUNNING', 'REPAIRING')
ENDING = ('STOPPING', 'SUSPENDING')
DEFAULT_MACHINE_TYPE = 'e2-small'
# Seconds past the lease's end (created_at + ttl) at which Compute Engine deletes the instance by itself: the expiry
# sweep, which archives unsaved work before it deletes, comes first.
DEFAULT_DEADLINE_GRACE = 3600
MAX_DEADLINE_GRACE = 7 * 86400
REQUEST_NAMESPACE = uuid.UUID('5d0c6d8e-8f0b-4c59-9a51-8b0e6c2d7a11')


def check_label(key, value):
    """Refused, saying what is wrong, unless Compute Engine takes the label ``key``=``value`` and it is not ours."""
    if not isinstance(key, str) or not LABEL_KEY.match(key):
        raise base.InvalidRequest('Label key %r breaks Compute Engine\'s rules: 1 to 63 lowercase letters, digits, '
                                  '"_" and "-", starting with a lowercase letter. Rename it.' % (key,))
    if key in RESERVED_LABELS:
        raise base.InvalidRequest('Label key %r is set by the collection (%s). Choose another key.'
                                  % (key, ', '.join(RESERVED_LABELS)))
    text = '' if value is None else str(value)
    if not LABEL_VALUE.match(text):
        raise base.InvalidRequest('Label %s has the value %r, which Compute Engine does not take: at most 63 lowercase '
                                  'letters, digits, "_" and "-". Change the value.' % (key, text))


def gcp_value(value):
    """A label value as Compute Engine takes it (lowercase, '.' and other characters as '-')."""
    return re.sub(r'[^a-z0-9_-]', '-', leasing.label_value(value).lower())[:63]


# The number an ownership marker binds for an instance name.
token_number = cloud.bound_number


def request_id(name, action, extra=''):
    """The requestId of ``action`` on instance ``name``: the same for every retry of one request."""
    return str(uuid.uuid5(REQUEST_NAMESPACE, '%s/%s/%s' % (action, name, extra)))


def task_handle(action, zone, name, operation, at=None):
    return '%s/%s/%s/%s/%s/%d' % (KIND, action, zone, name, operation or '-', int(at if at is not None else time.time()))


def parse_handle(text):
    """(action, zone, instance name, operation name or None, epoch) of a handle; ValueError for anything else."""
    parts = (text or '').split('/')
    if len(parts) != 6 or parts[0] != KIND:
        raise ValueError('not a Compute Engine task handle: %r' % (text,))
    return parts[1], parts[2], parts[3], (None if parts[4] == '-' else parts[4]), int(parts[5])


def short(url):
    """The last part of a resource URL (a zone, a machine type)."""
    return (url or '').rstrip('/').rsplit('/', 1)[-1]


def launch_options(params):
    """The launch settings of module params (doc fragment ephemera.workspaces.gcp), as a request records them."""
    return {
        'machine_type': params.get('gcp_machine_type') or DEFAULT_MACHINE_TYPE,
        'network': params.get('gcp_network') or 'default',
        'ssh_public_key': params.get('gcp_ssh_public_key'),
        'ssh_user': params.get('gcp_ssh_user') or 'root',
        'address': params.get('gcp_address') or 'public',
        'labels': dict(params.get('gcp_labels') or {}),
        'deadline_grace': DEFAULT_DEADLINE_GRACE if params.get('gcp_deadline_grace') is None
        else params.get('gcp_deadline_grace'),
    }


def rfc3339(seconds):
    """Unix seconds as the RFC 3339 text Compute Engine takes for ``terminationTime`` (UTC, whole seconds)."""
    return leasing.format_time(seconds)


def deadline(launch):
    """Unix seconds at which Compute Engine is to delete the instance (the lease's end plus the grace), or None when
    the request has no lease (a workspace made before leases)."""
    ends_at = (launch.get('lease') or {}).get('ends_at')
    if ends_at is None:
        return None
    grace = launch.get('deadline_grace')
    return int(math.ceil(float(ends_at))) + int(DEFAULT_DEADLINE_GRACE if grace is None else grace)


def enum_name(value):
    """The name of a proto enum value (Operation.status is one), or the text itself."""
    return getattr(value, 'name', value)


def operation_error(op):
    """The error text of a DONE operation, or None."""
    errors = list(getattr(getattr(op, 'error', None), 'errors', None) or [])
    if not errors:
        return None
    return '; '.join('%s: %s' % (e.code, e.message) for e in errors)


class GcpProvider(cloud.CloudProvider):
    """The provider seam over Compute Engine in one project and zone (``compute``: a :class:`Compute`)."""

    name = NAME
    location_option = options.LOCATION_OPTION
    kind = KIND
    noun = 'instance'
    candidate_noun = 'A Compute Engine instance name'
    allocation_words = {
        'vmid': ('candidate instance name', 'candidate instance name'),
        'clone': ('insert', 'insert the instance'),
        'wait_clone': ('wait insert operation', 'wait for the insert operation'),
    }
    image_hint = 'on GCP give an image'
    login_options = (('gcp_ssh_user', 'ssh_user'),)
    # Instance names are derived from the workspace's record (a digest of it): the collection never gives one name to
    # two records, and an instance at that name made by anyone else fails the marker check.
    unique_ids = True
    # The guest agent writes the host keys sshd serves to the instance's guest attributes (namespace hostkeys), which
    # the insert enables and Compute Engine's API reads (published_host_keys).
    host_key_source = 'the guest attributes (getGuestAttributes, hostkeys/)'
    host_key_advice = ('An image with the Google guest agent (as in Compute Engine\'s public images) writes them there '
                       'at boot once guest attributes are enabled, which the collection sets on the instance.')

    def __init__(self, compute, secret=None, launch=None, sleep=time.sleep):
        super().__init__(secret)
        self.compute = compute
        self.launch = dict(launch or {})
        self.sleep = sleep

    @classmethod
    def from_params(cls, params, secret=None, environ=None):
        """A provider from module params (the options of doc fragment ephemera.workspaces.gcp)."""
        creds = credentials(params.get('gcp_auth_kind') or 'application', params.get('gcp_service_account_file'),
                            environ)
        compute = Compute(cloud.option(params, 'gcp_project', PROJECT_ENV, environ),
                          cloud.option(params, 'gcp_zone', ZONE_ENV, environ),
                          creds, endpoint=cloud.option(params, 'gcp_endpoint_url', ENDPOINT_ENV, environ),
                          retry_timeout=params.get('gcp_retry_timeout') or 60)
        return cls(compute, secret, launch_options(params))

    def with_secret(self, secret):
        return GcpProvider(self.compute, secret, self.launch, self.sleep)

    @staticmethod
    def serves(api):
        return isinstance(api, Compute)

    @property
    def zone(self):
        return self.compute.zone

    @property
    def project(self):
        return self.compute.project

    @property
    def here(self):
        return self.zone

    # ------------------------------------------------------------------- the lease

    def labels(self, resource):
        labels = dict((resource.native or {}).get('labels') or {})
        return {k: labels[k] for k in LABEL_KEYS if k in labels}

    def write_labels(self, resource, labels):
        instance = self.compute.get_instance(resource.id)
        if instance is None:
            raise base.NotFound('%s does not exist.' % self.label(resource.id, self.zone))
        merged = dict(instance.labels)
        merged.update((k, gcp_value(v)) for k, v in labels.items())
        body = self.compute.types.InstancesSetLabelsRequest(label_fingerprint=instance.label_fingerprint,
                                                            labels=merged)
        op = self.compute.call('instances.setLabels', self.compute.instances.set_labels_unary, acts=True,
                               project=self.project, zone=self.zone, instance=resource.id,
                               instances_set_labels_request_resource=body)
        self.wait(task_handle('labels', self.zone, resource.id, op.name), 60)

    # ------------------------------------------------------------------- warm pools

    # A claim re-writes the member's labels (under their fingerprint) and then its marker (metadata, under its
    # fingerprint): the marker last, as it is what says the claim was written.
    pool_refusal = None

    def write_remark(self, resource, workspace, marker, hostname, labels, created_by=None):
        """The workspace and lease labels (setLabels, under the labels' fingerprint), then the marker in the
        instance's metadata (setMetadata with the fingerprint read: Conflict when it moved). The marker goes last: a
        claim stopped between the two (a kill, a lost answer) leaves the member's marker, so the claim's rerun
        (which skips this once the marker verifies for the workspace) writes both again; the other way round, the
        labels would name the member for the workspace's whole life. The instance keeps its name: it is the
        candidate the marker binds, and Compute Engine renames no running instance; ``hostname`` is not written (the
        guest keeps the host name it booted with)."""
        self.write_labels(resource, dict(labels, **{LABEL_WORKSPACE: workspace}))
        instance = self.compute.get_instance(resource.id)
        if instance is None:
            raise base.NotFound('%s does not exist.' % self.label(resource.id, self.zone))
        t = self.compute.types
        items = [t.Items(key=i.key, value=i.value) for i in instance.metadata.items if i.key != META_MARKER]
        items.insert(0, t.Items(key=META_MARKER, value=marker))
        body = t.Metadata(fingerprint=instance.metadata.fingerprint, items=items)
        op = self.compute.call('instances.setMetadata', self.compute.instances.set_metadata_unary, acts=True,
                               project=self.project, zone=self.zone, instance=resource.id, metadata_resource=body)
        self.wait(task_handle('metadata', self.zone, resource.id, op.name), 60)

    # ------------------------------------------------------------------- allocation

    def _image_path(self, source):
        text = str(source or '').strip()
        if text.startswith('projects/') or text.startswith('https://'):
            return text
        return 'projects/%s/global/images/%s' % (self.project, text)

    def check_source(self, source, location, scope):
        """The zone, after checking zone, machine type, image, network and labels (no instance is made)."""
        c = self.compute
        if location and location != self.zone:
            raise base.InvalidRequest('The request names zone %s, and the GCP connection is for %s: give one zone '
                                      '(gcp_zone).' % (location, self.zone))
        if not ZONE_FORM.match(self.zone):
            raise base.InvalidRequest('Zone %r is not a Compute Engine zone name (such as europe-west1-b).' % self.zone)
        launch = self.launch
        for key, value in sorted((launch.get('labels') or {}).items()):
            check_label(key, value)
        if not LABEL_VALUE.match(str(scope or '')):
            raise base.InvalidRequest('Scope %r cannot be a Compute Engine label value: at most 63 lowercase letters, '
                                      'digits, "_" and "-".' % (scope,))
        grace = launch.get('deadline_grace')
        if grace is not None and (isinstance(grace, bool) or not isinstance(grace, int) or grace < 0
                                  or grace > MAX_DEADLINE_GRACE):
            raise base.InvalidRequest('gcp_deadline_grace is %r: give a whole number of seconds from 0 to %d (the '
                                      'default %d).' % (grace, MAX_DEADLINE_GRACE, DEFAULT_DEADLINE_GRACE))
        if launch.get('address') not in ('public', 'private'):
            raise base.InvalidRequest('gcp_address is %r: give public or private.' % (launch.get('address'),))
        if not launch.get('ssh_public_key'):
            raise base.InvalidRequest('No way into the instance: give gcp_ssh_public_key (it goes into the ssh-keys '
                                      'metadata).')
        try:
            zone = c.call('zones.get', c.zones.get, project=self.project, zone=self.zone)
        except base.NotFound:
            raise base.InvalidRequest('Zone %s does not exist in project %s. Give a zone the project can use '
                                      '(gcloud compute zones list).' % (self.zone, self.project))
        if getattr(zone, 'status', 'UP') not in ('UP', ''):
            raise base.InvalidRequest('Zone %s is %s.' % (self.zone, zone.status))
        machine = launch.get('machine_type') or DEFAULT_MACHINE_TYPE
        try:
            c.call('machineTypes.get', c.machine_types.get, project=self.project, zone=self.zone, machine_type=machine)
        except base.NotFound:
            raise base.InvalidRequest('Machine type %s is not offered in %s. Give one of gcloud compute machine-types '
                                      'list --zones %s.' % (machine, self.zone, self.zone))
        self._check_image(source)
        network = launch.get('network') or 'default'
        try:
            c.call('networks.get', c.networks.get, project=self.project, network=short(network))
        except base.NotFound:
            raise base.InvalidRequest('Network %s does not exist in project %s. Give one of gcloud compute networks '
                                      'list.' % (network, self.project))
        return self.zone

    def _check_image(self, source):
        c = self.compute
        path = self._image_path(source)
        parts = path.split('/')
        try:
            project, image = parts[parts.index('projects') + 1], parts[-1]
        except (ValueError, IndexError):
            raise base.InvalidRequest('Image %r is neither an image name nor projects/P/global/images/NAME.' % source)
        try:
            if '/family/' in path:
                found = c.call('images.getFromFamily', c.images.get_from_family, project=project, family=image)
            else:
                found = c.call('images.get', c.images.get, project=project, image=image)
        except base.NotFound:
            raise base.InvalidRequest('Image %s does not exist. Give an image of the project (gcloud compute images '
                                      'list) or projects/P/global/images/family/F.' % path)
        if found.status and found.status != 'READY':
            raise base.InvalidRequest('Image %s is %s, not READY.' % (path, found.status))

    def candidate_for(self, workspace, stamp, avoid=(), sleep=None):
        """The instance name of ``workspace``'s record made at ``stamp``: the same for every rerun, another one for
        every name in ``avoid``."""
        slug = re.sub(r'[^a-z0-9-]', '-', workspace.lower())[:36].strip('-') or 'ws'
        return cloud.derived_candidate(workspace, stamp, avoid, 'eph-%s-' % slug, 16, 'instance name')

    def _labels(self, allocation):
        a = allocation
        launch = dict(self.launch, **(a.options or {}))
        labels = {LABEL_OURS: 'workspace', LABEL_SCOPE: gcp_value(a.scope),
                  LABEL_WORKSPACE: gcp_value(a.workspace)}
        for key, value in (a.labels or {}).items():
            labels[key] = gcp_value(value)
        labels.update(launch.get('labels') or {})
        return labels

    def instance_body(self, allocation):
        """The Instance of an insert (what the journal's record of the request determines)."""
        a = allocation
        t = self.compute.types
        launch = dict(self.launch, **(a.options or {}))
        machine = launch.get('machine_type') or DEFAULT_MACHINE_TYPE
        items = [t.Items(key=META_MARKER, value=self.marker(a.workspace, a.candidate, a.nonce)),
                 t.Items(key=META_GUEST_ATTRIBUTES, value='TRUE')]
        if launch.get('ssh_public_key'):
            key = ' '.join(str(launch['ssh_public_key']).split())
            items.append(t.Items(key=META_SSH_KEYS, value='%s:%s' % (launch.get('ssh_user') or 'root', key)))
        network = launch.get('network') or 'default'
        nic = t.NetworkInterface(network='projects/%s/global/networks/%s' % (self.project, short(network)))
        if (launch.get('address') or 'public') == 'public':
            nic.access_configs = [t.AccessConfig(name='External NAT', type_='ONE_TO_ONE_NAT')]
        instance = t.Instance(
            name=a.candidate, machine_type='zones/%s/machineTypes/%s' % (self.zone, machine),
            labels=self._labels(a), metadata=t.Metadata(items=items), network_interfaces=[nic],
            disks=[t.AttachedDisk(boot=True, auto_delete=True, initialize_params=t.AttachedDiskInitializeParams(
                source_image=self._image_path(a.source)))],
            # No service account: the metadata server of the instance gives no token to anything in it.
            service_accounts=[])
        ends = deadline(launch)
        if ends is not None:
            instance.scheduling = t.Scheduling(termination_time=rfc3339(ends), instance_termination_action='DELETE')
        return instance

    def allocate(self, allocation):
        a = allocation
        if not INSTANCE_NAME.match(a.candidate or ''):
            raise base.InvalidRequest('%r is not a Compute Engine instance name.' % (a.candidate,))
        ends = deadline(dict(self.launch, **(a.options or {})))
        if ends is not None and ends <= time.time():
            raise base.InvalidRequest('The lease of %s ended at %s (with gcp_deadline_grace), before its instance was '
                                      'requested: Compute Engine would delete it at once. Request a new workspace.'
                                      % (a.workspace, rfc3339(ends)))
        request = self.compute.types.InsertInstanceRequest(project=self.project, zone=self.zone,
                                                           instance_resource=self.instance_body(a),
                                                           request_id=request_id(a.candidate, 'insert'))
        op = self.compute.call('instances.insert', self.compute.instances.insert_unary, acts=True, repeatable=True,
                               request=request)
        return task_handle('insert', self.zone, a.candidate, op.name)

    def allocation_task(self, allocation, since):
        if self.compute.get_instance(allocation.candidate) is None:
            return None
        return task_handle('insert', self.zone, allocation.candidate, None)

    # ------------------------------------------------------------------------------- looking

    def _resource(self, instance):
        labels = dict(instance.labels)
        meta = {i.key: i.value for i in instance.metadata.items}
        native = {'labels': labels, 'status': instance.status, 'id': instance.id, 'name': instance.name,
                  'deletion_protection': instance.deletion_protection,
                  'addresses': [(nic.network_i_p, [ac.nat_i_p for ac in nic.access_configs if ac.nat_i_p])
                                for nic in instance.network_interfaces]}
        return base.Resource(instance.name, short(instance.zone) or self.zone, deleting=instance.status in ENDING,
                             marker_text=meta.get(META_MARKER), native=native)

    def find(self, resource_id, location=None, search=False):
        if resource_id is None:
            return None
        if location and location != self.zone:
            raise base.InvalidRequest('%s is in zone %s; this connection is for %s. Run with gcp_zone %s.'
                                      % (self.label(resource_id), location, self.zone, location))
        instance = self.compute.get_instance(resource_id)
        return None if instance is None else self._resource(instance)

    def native(self, resource_id):
        return self.compute.get_instance(resource_id)

    def published_host_keys(self, resource):
        """The host keys the guest agent wrote to the instance's guest attributes at boot (namespace ``hostkeys``,
        each key named by its type), read over Compute Engine's API (instances.getGuestAttributes), which nobody on
        the network path to the instance can answer for. Only entries whose value is a key of the type they name;
        sorted. [] until they are there."""
        found = set()
        for namespace, kind, value in self.compute.guest_attributes(resource.id, HOST_KEYS_NAMESPACE + '/'):
            key = hostkeys.host_key(kind, value) if namespace == HOST_KEYS_NAMESPACE else None
            if key:
                found.add(key)
        return sorted(found)

    def native_running(self, native):
        return native.status in RUNNING_STATES

    def addresses(self, resource):
        instance = self.compute.get_instance(resource.id)
        if instance is None or instance.status != 'RUNNING':
            return []
        out = []
        for n, nic in enumerate(instance.network_interfaces):
            public = [ac.nat_i_p for ac in nic.access_configs if ac.nat_i_p]
            if (self.launch.get('address') or 'public') == 'public' and public:
                out.append(('nic%d' % n, 'inet', public[0]))
            elif nic.network_i_p:
                out.append(('nic%d' % n, 'inet', nic.network_i_p))
        return out

    def list(self, every_kind=False):
        """Every instance of the zone that carries the label ``ephemera`` (filtered by Compute Engine): a complete
        read, or IncompleteInventory."""
        out = []
        for instance in self.compute.list_instances('labels.%s:*' % LABEL_OURS):
            labels = dict(instance.labels)
            if LABEL_OURS not in labels:
                continue
            keys = sorted(labels)
            out.append(cloud.listed(instance.name, self.zone, KIND, instance.name, instance.status.lower(),
                                    labels.get(LABEL_SCOPE), keys, self._resource(instance)))
        return out

    # -------------------------------------------------------------------------------- acting

    def _act(self, action, what, fn, request_type, resource, extra=''):
        request = request_type(project=self.project, zone=self.zone, instance=resource.id,
                               request_id=request_id(resource.id, action, extra))
        op = self.compute.call(what, fn, acts=True, repeatable=True, request=request)
        return task_handle(action, self.zone, resource.id, op.name)

    def act_start(self, resource):
        return self._act('start', 'instances.start', self.compute.instances.start_unary,
                         self.compute.types.StartInstanceRequest, resource, str(time.time()))

    def act_shutdown(self, resource):
        return self._act('stop', 'instances.stop', self.compute.instances.stop_unary,
                         self.compute.types.StopInstanceRequest, resource, str(time.time()))

    def act_stop(self, resource):
        # Compute Engine has one stop; it is as graceful as the guest lets it be.
        return self.act_shutdown(resource)

    def delete_blocker(self, resource, source=None):
        native = resource.native or {}
        if native.get('deletion_protection'):
            return ('%s has deletion protection; Compute Engine refuses to delete it. Turn it off (gcloud compute '
                    'instances update %s --zone %s --no-deletion-protection) if it really should go, then destroy '
                    'again.' % (self.label(resource.id, self.zone), resource.id, self.zone))
        return None

    def delete(self, resource):
        # A request id of its own for every delete: the client's retries after a lost answer send it again (the same
        # request), and a delete after a failed one is a new request (Compute Engine would answer a repeated id with
        # the failed operation). A second delete of an instance whose deletion runs does no harm: the destroy waits
        # for the GET 404 either way.
        return self._act('delete', 'instances.delete', self.compute.instances.delete_unary,
                         self.compute.types.DeleteInstanceRequest, resource, uuid.uuid4().hex)

    # ------------------------------------------------------------------------------ the deadline

    def deadline_of(self, resource_id):
        """The termination time Compute Engine holds for instance ``resource_id`` (RFC 3339 text) and its action, or
        (None, None)."""
        instance = self.compute.get_instance(resource_id)
        scheduling = getattr(instance, 'scheduling', None) if instance is not None else None
        if scheduling is None or not scheduling.termination_time:
            return None, None
        return scheduling.termination_time, enum_name(scheduling.instance_termination_action)

    def lift_deadline(self, resource):
        """Take the termination time off the instance (a retained workspace stays past its lease): a sentence of
        what was done, or None when it had none. Compute Engine changes scheduling only on a stopped instance
        (instances.setScheduling), so a running instance is stopped, given scheduling without a termination time,
        and started again."""
        instance = self.compute.get_instance(resource.id)
        if instance is None:
            raise base.NotFound('%s does not exist.' % self.label(resource.id, self.zone))
        scheduling = instance.scheduling
        if scheduling is None or not scheduling.termination_time:
            return None
        running = instance.status in RUNNING_STATES
        if running:
            self.wait(self.act_stop(resource), 300)
        kept = self.compute.types.Scheduling()
        for field in ('automatic_restart', 'on_host_maintenance', 'provisioning_model', 'preemptible'):
            if field in scheduling:
                setattr(kept, field, getattr(scheduling, field))
        request = self.compute.types.SetSchedulingInstanceRequest(
            project=self.project, zone=self.zone, instance=resource.id, scheduling_resource=kept,
            request_id=request_id(resource.id, 'scheduling', scheduling.termination_time))
        op = self.compute.call('instances.setScheduling', self.compute.instances.set_scheduling_unary, acts=True,
                               repeatable=True, request=request)
        self.wait(task_handle('scheduling', self.zone, resource.id, op.name), 60)
        if running:
            self.wait(self.act_start(resource), 300)
        return ('the termination time %s taken off %s%s' % (scheduling.termination_time, self.label(resource.id),
                                                            ' (stopped for it and started again)' if running else ''))

    # --------------------------------------------------------------------------------- tasks

    def _verdict(self, handle):
        """'done', 'running' or a failure message for a handle, from one look at its operation (and instance)."""
        action, zone, name, op_name, at = parse_handle(handle)
        if op_name is not None:
            try:
                op = self.compute.operation(op_name)
            except base.NotFound:
                return 'Compute Engine does not know the operation %s of %s.' % (op_name, self.label(name, zone))
            if enum_name(op.status) != 'DONE':
                return 'running'
            error = operation_error(op)
            if error:
                return 'The operation %s (%s of %s) failed: %s' % (op_name, action, self.label(name, zone), error)
            # Compute Engine finished the operation and the journal does not know: a crash-safety test can kill here.
            failpoint.reached('gcp operation DONE %s' % action)
        instance = self.compute.get_instance(name)
        if action == 'delete':
            # DONE without an error, followed by a GET 404.
            if instance is None:
                failpoint.reached('gcp instances.get 404')
                return 'done'
            return 'running'
        if instance is None:
            return '%s does not exist after its %s operation.' % (self.label(name, zone), action)
        want = {'insert': ('RUNNING',), 'start': ('RUNNING',), 'stop': ('TERMINATED', 'STOPPED'),
                'labels': None, 'scheduling': None}.get(action)
        if want is None or instance.status in want:
            return 'done'
        if instance.status in ('PROVISIONING', 'STAGING', 'STOPPING'):
            return 'running'
        return '%s is %s after its %s operation.' % (self.label(name, zone), instance.status, action)

    def task_look(self, handle):
        return self._verdict(handle), None

    def task_what(self, handle):
        action, zone, name, op_name, at = parse_handle(handle)
        return 'the %s of %s (operation %s)' % (action, self.label(name, zone), op_name or '-')

    def task_timeout(self, handle, seconds, detail):
        action, zone, name, op_name, at = parse_handle(handle)
        return ('The %s of %s is not finished after %d s (operation %s); it goes on in Compute Engine. Check the '
                'operation (gcloud compute operations describe), then run again: the next run looks at it again.'
                % (action, self.label(name, zone), seconds, op_name or '-'))
