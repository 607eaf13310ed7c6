# -*- coding: utf-8 -*-
# Copyright: ephemera.workspaces contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The Azure provider: a workspace is a set of four resources (members.WorkspaceSet) in one resource group.

The candidate id a create records before it dispatches is the set's base name (plan.base_name: the workspace and a
digest of its record), which names all four members, so a rerun asks for the same set; the resource id is the VM's
ARM id as Azure answered it (bound to the VM's name and tags), from which the base name is read back. The ownership
marker is the ``ephemera:marker`` tag, on every member, binding the base name.
Each set's progress (its planned identity, the ids Azure answered with, accepted deletions and owned-delete claims)
is written to the journal's provider state (``azure/set/<base>``, compare-and-set, fenced by the workspace's claim)
before the next request goes out; each write is a named commit point of the crash-safety tests (``journal azure
<member> <what>``, :func:`progress_point`). A write that fails stops the work. Task handles are
``azure/<action>/<base>``: waiting on a create handle finishes the creation and checks the VM's binding; waiting
on a delete handle ticks the set's deletion until it is gone.
"""

import copy
import re
import threading
import time

from ansible_collections.ephemera.workspaces.plugins.module_utils.core import ownership, waiter
from ansible_collections.ephemera.workspaces.plugins.module_utils.core.errors import ClaimLostError, JournalError
from ansible_collections.ephemera.workspaces.plugins.module_utils.providers import base, cloud, hostkeys
from ansible_collections.ephemera.workspaces.plugins.module_utils.providers.azure import members as azset
from ansible_collections.ephemera.workspaces.plugins.module_utils.providers.azure import orphans
from ansible_collections.ephemera.workspaces.plugins.module_utils.providers.azure import plan as planning
from ansible_collections.ephemera.workspaces.plugins.module_utils.providers.azure.client import Arm, option, steady
from ansible_collections.ephemera.workspaces.plugins.module_utils.providers.azure.plan import (
    DISK, NIC, PIP, TAG_MARKER, TAG_PREFIX, TAG_SCOPE, TAG_SET, VM)

NAME = 'azure'
KIND = 'azure-set'


# The number a version 2 marker bound for a set's base name (a marker of version 3 binds the name itself).
set_number = cloud.bound_number


def task_handle(action, base_name, at=None):
    return 'azure/%s/%s/%d' % (action, base_name, int(at if at is not None else time.time()))


def parse_handle(text):
    parts = (text or '').split('/')
    if len(parts) != 4 or parts[0] != 'azure':
        raise ValueError('not an Azure task handle: %r' % (text,))
    return parts[1], parts[2], int(parts[3])


def base_of(resource_id):
    """The set's base name of a resource id (a VM's ARM id, or a base name itself)."""
    text = str(resource_id or '')
    if text.startswith('/'):
        name = text.rstrip('/').rsplit('/', 1)[-1]
        if not name.lower().endswith(planning.SUFFIX[VM]):
            raise base.InvalidRequest('%s is not the ARM id of a workspace VM.' % text)
        return name[:-len(planning.SUFFIX[VM])]
    return text


STATE_PREFIX = 'azure/set/'


def progress_point(before, after):
    """The name of the commit that takes a set's record from ``before`` (None: not recorded yet) to ``after``: what
    the crash-safety tests kill at (``journal azure <member> <what>``)."""
    if before is None:
        return 'azure planned'
    for member in planning.CREATE_ORDER:
        if member in (after.get('dispatched') or {}) and member not in (before.get('dispatched') or {}):
            return 'azure %s dispatched' % member
    for member in planning.MEMBERS:
        if member in (after.get('ids') or {}) and member not in (before.get('ids') or {}):
            return 'azure %s id' % member
    for member in planning.MEMBERS:
        if member in (after.get('claims') or {}) and member not in (before.get('claims') or {}):
            return 'azure %s claimed' % member
    for field, what in (('accepted', 'delete accepted'), ('deleting', 'deleting')):
        if after.get(field) and after.get(field) != before.get(field):
            return 'azure %s %s' % (after[field].get('member'), what)
    for member in planning.CREATE_ORDER:
        if member in (after.get('ops') or {}) and member not in (before.get('ops') or {}):
            return 'azure %s operation' % member
    if before.get('deleting') and not after.get('deleting'):
        return 'azure %s not deleted' % before['deleting'].get('member')
    for member in planning.CREATE_ORDER:
        if member in (before.get('dispatched') or {}) and member not in (after.get('dispatched') or {}):
            return 'azure %s not sent' % member
    for field in ('binding', 'prefix', 'contradiction'):
        if after.get(field) and not before.get(field):
            return 'azure %s' % field
    if len(after.get('debt') or []) > len(before.get('debt') or []):
        return 'azure debt'
    return 'azure set'


class ProgressNotWritten(base.TaskFailed):
    """A set's progress could not be written to the journal: nothing more is sent, and the work stays as debt."""


class SetStore:
    """Each set's record in the journal's provider state, under ``azure/set/<base>``: every write a compare-and-set
    on the generation this store last read or wrote, carrying the claim of the workspace the set belongs to (given
    by :meth:`use`), so that a run that lost its claim or was overtaken writes nothing. A write that fails raises
    (ProgressNotWritten; a lost claim as it came), which stops the work.

    Each thread works with the journal it was given: a journal connection serves one thread at a time, and one
    provider serves the threads of a sweep that releases side by side, each on a connection of its own. ``journal``:
    an open Journal, for the thread that makes the store; a thread given none has ``opener()`` open one for it when
    it first needs one (closed with the thread)."""

    def __init__(self, journal=None, opener=None):
        self.opener = opener
        self.claims = {}
        self._held = {}
        self._thread = threading.local()
        if journal is not None:
            self._thread.journal = journal

    def use(self, journal, claim=None, workspace=None):
        """Work with ``journal`` in this thread; writes for ``workspace``'s sets carry ``claim``."""
        if journal is not None:
            self._thread.journal = journal
        if workspace is not None:
            self.claims[workspace] = claim

    def _journal(self):
        journal = getattr(self._thread, 'journal', None)
        if journal is None:
            if self.opener is None:
                raise base.Refused('The Azure provider keeps each set\'s progress in the journal, and it was given '
                                   'none: give journal_path or journal_url.')
            journal = self._thread.journal = self.opener()
        return journal

    @staticmethod
    def key(base_name):
        planning.check_base(base_name)
        return STATE_PREFIX + base_name

    def load(self, base_name):
        """The set's record as the journal holds it, or None."""
        held = self._journal().provider_state(self.key(base_name))
        if held is None:
            self._held.pop(base_name, None)
            return None
        value, generation = held
        self._held[base_name] = (generation, copy.deepcopy(value))
        return value

    def records(self):
        """{base: record} of every set the journal holds."""
        return {key[len(STATE_PREFIX):]: value
                for key, value, dummy in self._journal().provider_states(STATE_PREFIX)}

    def save(self, record):
        base_name = record['plan']['base']
        before = self._held.get(base_name)
        if before is not None and before[1] == record:
            return  # nothing changed: nothing to write
        workspace = ((record['plan'].get('tags') or {}).get(VM) or {}).get(planning.TAG_WORKSPACE)
        try:
            generation = self._journal().put_provider_state(
                self.key(base_name), record, generation=before[0] if before else None,
                claim=self.claims.get(workspace), point=progress_point(before[1] if before else None, record))
        except ClaimLostError:
            raise
        except JournalError as err:
            raise ProgressNotWritten('The progress of Azure set %s could not be written to the journal (%s). Nothing '
                                     'more was sent; the set stays as it is, as cleanup debt, for the next run.'
                                     % (base_name, err))
        self._held[base_name] = (generation, copy.deepcopy(record))


def launch_options(params):
    """The settings of a set, as a request records them (no credentials)."""
    return {'resource_group': params.get('azure_resource_group'), 'location': params.get('azure_location'),
            'vm_size': params.get('azure_vm_size') or 'Standard_B1s', 'subnet_id': params.get('azure_subnet_id'),
            'admin_username': params.get('azure_admin_username') or azset.ADMIN_USER,
            'ssh_public_key': params.get('azure_ssh_public_key'), 'tags': dict(params.get('azure_tags') or {})}


MANAGED_IMAGE = re.compile(r'^/subscriptions/[^/]+/resourcegroups/[^/]+/providers/microsoft\.compute/images/[^/]+$', re.I)


def parse_image(text):
    """{publisher, offer, sku, version} of a marketplace image ``publisher:offer:sku[:version]``, {id} of a managed
    image's ARM id (or of such a dict)."""
    if isinstance(text, dict):
        return dict(text)
    if str(text or '').startswith('/'):
        if MANAGED_IMAGE.match(str(text)):
            return {'id': str(text)}
        raise base.InvalidRequest(
            'Image %r is not the id of a managed image (/subscriptions/<id>/resourceGroups/<group>/providers/'
            'Microsoft.Compute/images/<name>). Give a managed image (az image create prints its id) or a marketplace '
            'image publisher:offer:sku[:version]; images of a compute gallery are not taken yet.' % (text,))
    parts = str(text or '').split(':')
    if len(parts) not in (3, 4) or not all(parts):
        raise base.InvalidRequest('Image %r is not publisher:offer:sku[:version] (Debian:debian-12:12-gen2:latest).'
                                  % (text,))
    return {'publisher': parts[0], 'offer': parts[1], 'sku': parts[2],
            'version': parts[3] if len(parts) == 4 else 'latest'}


class AzureProvider(base.Provider):
    """The provider seam over Azure Resource Manager: sets of VM, NIC, public IP and OS disk in one resource
    group (``arm``: a client.Arm)."""

    name = NAME
    noun = 'set'
    allocation_words = {
        'vmid': ('candidate set name', 'candidate set name'),
        'clone': ('deploy', 'deploy the set (VM, NIC, public IP, disk)'),
        'wait_clone': ('wait deployment', 'wait for the deployment'),
    }
    sweeps_sets = True
    login_options = (('azure_admin_username', 'admin_username'),)
    # A set's base name carries a digest of its record: a new life of a workspace never reuses one.
    unique_ids = True
    # cloud-init prints the host keys to the serial console, which boot diagnostics keep (published_host_keys).
    host_key_source = 'the serial log of boot diagnostics (retrieveBootDiagnosticsData)'
    host_key_advice = ('An image whose cloud-init prints the keys to the console (its default) avoids that; the '
                       'collection enables boot diagnostics (managed storage) on the VMs it makes.')

    def __init__(self, arm, secret=None, launch=None, store=None, lost_window=120, timeout=900,
                 sleep=time.sleep):
        super().__init__(secret)
        self.arm = arm
        self.launch = dict(launch or {})
        self.store = store or SetStore()
        self.lost_window = lost_window
        self.timeout = timeout
        self.sleep = sleep

    @classmethod
    def from_params(cls, params, secret=None, environ=None):
        arm = Arm.connect(option(params, 'azure_subscription_id', ('AZURE_SUBSCRIPTION_ID',), environ),
                          option(params, 'azure_tenant_id', ('AZURE_TENANT_ID',), environ),
                          option(params, 'azure_client_id', ('AZURE_CLIENT_ID',), environ),
                          option(params, 'azure_client_secret', ('AZURE_CLIENT_SECRET',), environ),
                          authority=option(params, 'azure_authority_host', ('AZURE_AUTHORITY_HOST',), environ),
                          endpoint=option(params, 'azure_endpoint_url', ('EPHEMERA_AZURE_ENDPOINT_URL',), environ),
                          ca_file=option(params, 'azure_ca_file', ('EPHEMERA_AZURE_CA_FILE',), environ))

        def opener():
            # Where no flow handed the run's journal over (use_journal): the journal the module's options name.
            from ansible_collections.ephemera.workspaces.plugins.module_utils.core.journal import Journal
            return Journal.open(params.get('journal_path'), create=False, url=params.get('journal_url'))
        return cls(arm, secret, launch_options(params), SetStore(opener=opener),
                   params.get('azure_lost_answer_window') or 120, params.get('azure_operation_timeout') or 900)

    def use_journal(self, journal, claim=None, workspace=None):
        """Keep the sets' progress in ``journal``; the writes for ``workspace``'s set carry the run's ``claim``."""
        self.store.use(journal, claim, workspace)

    def set_sweep(self, journal, params, counting=False, now=None):
        """The orphan sweep of the resource group (providers/azure/orphans.py), its grace period from the option
        azure_orphan_grace."""
        return orphans.AzureOrphans(journal, self, params.get('azure_orphan_grace'), counting=counting, now=now)

    def with_secret(self, secret):
        return AzureProvider(self.arm, secret, self.launch, self.store, self.lost_window, self.timeout, self.sleep)

    @staticmethod
    def serves(api):
        return isinstance(api, Arm)

    @property
    def group(self):
        return self.launch.get('resource_group')

    # ------------------------------------------------------------------- identity and wording

    @classmethod
    def resource_key(cls, resource_id, location=None):
        key = '%s/%s' % (KIND, resource_id)
        return key if location is None else '%s@%s' % (key, location)

    @classmethod
    def parse_resource_key(cls, key):
        try:
            kind, rest = key.split('/', 1)
            name, location = rest.split('@', 1)
        except (AttributeError, ValueError):
            return None, None
        return (name, location) if kind == KIND else (None, None)

    # ------------------------------------------------------------------- ownership and lease

    def marker(self, workspace, resource_id, nonce=None):
        return ownership.render_resource(self.secret, self.controller, workspace, base_of(resource_id),
                                         nonce or ownership.new_nonce())

    def verify(self, resource, workspace=None, nonce=ownership.ANY):
        if resource is None:
            return ownership.ABSENT
        return ownership.verdict(resource.marker_text, self.secret, self.controller, workspace,
                                 base_of(resource.id), nonce)

    def labels(self, resource):
        tags = (resource.native or {}).get('tags') or {}
        return {k: tags[TAG_PREFIX + k] for k in planning.LABEL_KEYS if TAG_PREFIX + k in tags}

    def write_labels(self, resource, labels):
        record = self._record(base_of(resource.id))
        for member in planning.MEMBERS:
            if member not in record.get('ids', {}):
                continue
            doc = self._set(record).read(member)
            if doc is None:
                continue
            tags = dict(doc.get('tags') or {})
            for key, value in labels.items():
                tags[TAG_PREFIX + key] = str(value)
                record['plan']['tags'][member][TAG_PREFIX + key] = str(value)
            self.store.save(record)
            self.arm.send('PATCH', self._set(record).path(member), azset.VERSION[member], {'tags': tags}, acts=True)

    # ------------------------------------------------------------------- warm pools

    # A claim re-tags the set's four members (marker, ephemera:workspace, the lease's tags), and its record in the
    # journal with them first: the set keeps its names, which its marker binds, and is the claiming workspace's from
    # then on (its record's writes carry that workspace's claim; its destroy deletes the four).
    pool_refusal = None
    here = None
    # The seam's claim (providers/cloud.py): read again, Conflict when the marker moved, sign, write_remark.
    remark = cloud.CloudProvider.remark

    def remark_bound(self, resource):
        """What a claimed set's marker binds: its base name, as before the claim."""
        return base_of(resource.id)

    def write_remark(self, resource, workspace, marker, hostname, labels, created_by=None):
        """Give the set of ``resource`` (its VM, read just before) to ``workspace``: the set's record first (each
        member's planned tags and the VM's binding: the marker, ephemera:workspace, the lease's tags), then a tags
        PATCH of each member that does not show them yet, the VM last (its marker is what says the claim was
        written; a rerun writes what is missing). A member gone, replaced or carrying another marker is a Conflict
        before anything is written. ``hostname`` is not written: Azure renames no VM, and the guest
        keeps the host name it booted with."""
        record = self._record(base_of(resource.id))
        plan = record['plan']
        if record.get('claims') or record.get('deleting') or record.get('accepted') or record.get('contradiction'):
            raise base.Conflict('%s is being deleted or contradicts its record; it is not given to a workspace.'
                                % self.label(plan['base']))
        missing = [m for m in planning.MEMBERS if not (record.get('ids') or {}).get(m)]
        if missing:
            raise base.Conflict('%s is not complete (no %s recorded); it is not given to a workspace.'
                                % (self.label(plan['base']), ', '.join(missing)))
        new = {TAG_MARKER: marker, planning.TAG_WORKSPACE: workspace}
        new.update((TAG_PREFIX + k, str(v)) for k, v in labels.items())
        gone = [TAG_PREFIX + k for k in planning.LABEL_KEYS if k not in labels]

        def retag(tags):
            out = dict(tags)
            for key in gone:
                out.pop(key, None)
            out.update(new)
            return out

        # Each member read first: all four there, as recorded, carrying the marker the VM carried or the new one
        # (a rerun); else nothing is written.
        ws = self._set(record)
        docs = {}
        for member in (DISK, PIP, NIC, VM):
            doc = ws.read(member)
            if doc is None or not planning.same_id(doc.get('id'), record['ids'][member]):
                raise base.Conflict('%s %s is gone or was replaced; the set is not given to a workspace.'
                                    % (member, plan['names'][member]))
            if (doc.get('tags') or {}).get(TAG_MARKER) not in (resource.marker_text, marker):
                raise base.Conflict('%s %s carries another marker than the set\'s VM; the set is not given to a '
                                    'workspace.' % (member, plan['names'][member]))
            docs[member] = doc
        for member in planning.MEMBERS:
            plan['tags'][member] = retag(plan['tags'][member])
        if record.get('binding'):
            record['binding']['tags'] = {k: plan['tags'][VM].get(k) for k in planning.BOUND_TAGS}
        self.store.save(record)
        for member in (DISK, PIP, NIC, VM):
            tags = docs[member].get('tags') or {}
            wanted = retag(tags)
            if wanted != tags:
                self.arm.send('PATCH', ws.path(member), azset.VERSION[member], {'tags': wanted}, acts=True,
                              what='Tagging %s %s' % (member, plan['names'][member]))

    # ------------------------------------------------------------------- allocation

    def _set(self, record):
        launch = dict(self.launch)
        launch['image'] = parse_image(record.get('image') or launch.get('image'))
        return azset.WorkspaceSet(self.arm, record, self.store.save, launch, sleep=self.sleep,
                                  lost_window=self.lost_window, timeout=self.timeout)

    def _record(self, base_name):
        record = self.store.load(base_name)
        if record is None:
            raise base.NotFound('No record of Azure set %s in the journal: it was never planned with it.'
                                % base_name)
        return record

    def resolve_source(self, source):
        image = parse_image(source)
        if image.get('id'):
            return image['id']
        return '%s:%s:%s:%s' % (image['publisher'], image['offer'], image['sku'], image['version'])

    def check_source(self, source, location, scope):
        location = location or self.launch.get('location')
        try:
            planning.check_subscription(self.arm.subscription)
            planning.check_resource_group(self.group)
            planning.check_location(location)
            planning.check_tags(self.launch.get('tags'))
        except planning.PlanError as err:
            raise base.InvalidRequest(str(err))
        probe = {'plan': planning.plan('probe', 'probe-set', self.group, location, 'm', scope or 'scope',
                                       subscription=self.arm.subscription)}
        ws = azset.WorkspaceSet(self.arm, probe, lambda r: None, dict(self.launch, image=parse_image(source)))
        ws.preflight()
        return location

    def check_storage(self, location, storage):
        return None

    def launch_options(self):
        return dict(self.launch)

    def candidate(self, avoid=(), sleep=None):
        raise base.InvalidRequest('An Azure set is named from its workspace: use candidate_for.')

    def candidate_for(self, workspace, stamp, avoid=(), sleep=None):
        for n in range(len(avoid), len(avoid) + 100):
            try:
                name = planning.base_name(workspace, '%s\n%d' % (stamp, n) if n else stamp)
            except planning.PlanError as err:
                raise base.InvalidRequest(str(err))
            if name not in avoid:
                return name
        raise base.Conflict('No free set name for %s.' % workspace)

    def allocate(self, allocation):
        a = allocation
        launch = dict(self.launch, **(a.options or {}))
        record = self.store.load(a.candidate)
        if record is None:
            try:
                record = {'plan': planning.plan(a.workspace, a.candidate, launch.get('resource_group'),
                                                a.location or launch.get('location'),
                                                self.marker(a.workspace, a.candidate, a.nonce), a.scope,
                                                labels=a.labels, extra=launch.get('tags'),
                                                subscription=self.arm.subscription),
                          'image': a.source}
            except planning.PlanError as err:
                raise base.InvalidRequest(str(err))
            # The complete planned identity, durable before the first PUT.
            self.store.save(record)
        ws = self._set(record)
        ws.options['hostname'] = a.hostname
        try:
            ws.create()
        except base.ProviderError as err:
            if not record.get('dispatched') or isinstance(err, base.UnknownOutcome):
                raise
            # Members of the set may exist: whatever this request was, the allocation as a whole is not "surely
            # not carried out". The caller looks (find by the candidate) before anything else.
            raise base.UnknownOutcome('Set %s is partly made (%s): %s' % (
                a.candidate, ', '.join(sorted(record.get('ids') or {})) or 'a request went out', err))
        return task_handle('create', a.candidate)

    def allocation_task(self, allocation, since):
        # The set's creation is resumable from its record: waiting on its handle finishes it.
        record = self.store.load(allocation.candidate)
        return task_handle('create', allocation.candidate) if record and record.get('plan') else None

    def resource_of(self, candidate, task, location=None):
        """The VM's ARM id the set's creation recorded (the candidate itself before there is one)."""
        record = self.store.load(base_of(candidate)) or {}
        return (record.get('ids') or {}).get(VM) or candidate

    # ------------------------------------------------------------------------------- looking

    def find(self, resource_id, location=None, search=False):
        if resource_id is None:
            return None
        name = base_of(resource_id)
        record = self.store.load(name)
        if record is None:
            return None
        vm = self._set(record).read(VM)
        if vm is not None and str(resource_id).startswith('/') and not planning.same_id(vm.get('id'), resource_id):
            raise azset.Contradiction('VM %s has id %s now, recorded %s: it was replaced. Nothing is done to it.'
                                      % (vm.get('name'), vm.get('id'), resource_id))
        if vm is None:
            # A set whose VM is gone (or never made) still stands while any member does.
            ws = self._set(record)
            for member in (NIC, PIP, DISK):
                doc = ws.read(member)
                if doc is not None:
                    return base.Resource(record['ids'].get(VM) or name, record['plan']['location'],
                                         marker_text=(doc.get('tags') or {}).get(TAG_MARKER), native=doc)
            return None
        return base.Resource(vm['id'], vm.get('location'), deleting=bool(record.get('claims')),
                             marker_text=(vm.get('tags') or {}).get(TAG_MARKER), native=vm)

    def published_host_keys(self, resource):
        """The host keys the VM's cloud-init printed to its serial console at boot, read from the serial log boot
        diagnostics keep: Resource Manager answers a short-lived SAS link to it (retrieveBootDiagnosticsData), which
        is read over TLS from Azure Storage, so nobody on the network path to the VM can answer for it. [] until
        they are there (no link yet, the log not written yet, or no key block in it yet)."""
        record = self._record(base_of(resource.id))
        url = self.arm.boot_log_url(self._set(record).path(VM), azset.VERSION[VM])
        if not url:
            return []
        text = self.arm.read_blob(url)
        return hostkeys.console_host_keys(text) if text else []

    def power(self, resource, absent_ok=True):
        record = self.store.load(base_of(resource.id))
        view = None
        if record is not None:
            path = self._set(record).path(VM) + '/instanceView'
            try:
                view = self.arm.send('GET', path, azset.VERSION[VM]).body
            except base.NotFound:
                view = None
        if view is None:
            if not absent_ok:
                raise base.NotFound('%s has no VM.' % self.label(resource.id))
            return base.Power(None)
        codes = [s.get('code') for s in view.get('statuses') or []]
        return base.Power(base.RUNNING if 'PowerState/running' in codes or 'PowerState/starting' in codes
                          else base.STOPPED)

    def addresses(self, resource):
        record = self.store.load(base_of(resource.id))
        if record is None:
            return []
        pip = self._set(record).read(PIP)
        found = ((pip or {}).get('properties') or {}).get('ipAddress')
        return [('eth0', 'inet', found)] if found else []

    def list(self, every_kind=False):
        out = []
        groups = planning.groups_of(azset.inventory(self.arm, self.arm.subscription, self.group))
        for base_name, group in sorted(groups.items()):
            head = group.get(VM) or next((group[m] for m in planning.MEMBERS if m in group), {})
            tags = head.get('tags') or {}
            keys = sorted(tags) + (['ephemera'] if any(k.startswith(TAG_PREFIX) for k in tags) else [])
            rid = (group.get(VM) or {}).get('id') or base_name
            resource = base.Resource(rid, head.get('location'), marker_text=tags.get(TAG_MARKER), native=head)
            out.append({'id': rid, 'location': head.get('location'), 'kind': KIND, 'name': head.get('name'),
                        'status': 'complete' if planning.exact_group(base_name, group) is None else 'incomplete',
                        'lock': None, 'pool': tags.get(TAG_SCOPE), 'tags': keys, 'resource': resource,
                        'members': sorted(m for m in group if m != 'mixed'), 'set': tags.get(TAG_SET)})
        return out

    def find_listed(self, entry):
        return entry.get('resource') if entry.get('resource') is not None else self.find(entry['id'])

    def in_scope(self, entry, scope, tag=None):
        return entry.get('pool') == scope or (tag is not None and tag in entry.get('tags', ()))

    # -------------------------------------------------------------------------------- acting

    def plan_settings(self, resource, settings):
        return {}

    def apply_settings(self, resource, changes):
        return None

    def _post(self, resource, action):
        record = self._record(base_of(resource.id))
        self.arm.send('POST', self._set(record).path(VM) + '/' + action, azset.VERSION[VM], acts=True)
        return task_handle(action, record['plan']['base'])

    def start(self, resource):
        if self.power(resource, absent_ok=False).running:
            return None
        return self._post(resource, 'start')

    def shutdown(self, resource, timeout):
        if not self.power(resource).running:
            return None
        return self._post(resource, 'powerOff')

    def stop(self, resource):
        if not self.power(resource).running:
            return None
        return self._post(resource, 'powerOff')

    def is_image(self, resource):
        return False

    def make_image(self, resource):
        raise base.InvalidRequest('Template builds are for Proxmox VE; on Azure give a marketplace image.')

    def delete_blocker(self, resource, source=None):
        record = self.store.load(base_of(resource.id))
        if record is not None and record.get('contradiction'):
            return record['contradiction']
        vm = (resource.native or {}) if (resource.native or {}).get('type', '').lower() == planning.TYPES[VM].lower() \
            else None
        reason = planning.cascade(VM, vm) if vm else None
        if reason:
            return ('VM %s: %s. The collection never relies on cascade delete: delete the set by hand.'
                    % (vm.get('name'), reason))
        return None

    def delete(self, resource):
        name = base_of(resource.id)
        self._record(name)
        return task_handle('delete', name)

    def deleted_since(self, resource_id, location, since):
        return False

    # --------------------------------------------------------------------------------- tasks

    def wait(self, handle, timeout):
        action, base_name, at = parse_handle(handle)
        record = self._record(base_name)
        ws = self._set(record)
        if action == 'create':
            ws.create()
            ws.check_binding()
            return base.TaskResult(handle)
        label = self.label(base_name)
        if action == 'delete':
            def probe(remaining):
                while True:  # a member deleted: the next one's turn at once
                    state, member = ws.delete_tick()
                    if state == azset.DONE:
                        return waiter.done()
                    if state in (azset.IN_USE, azset.RUNNING, azset.ACCEPTED):
                        return waiter.pending((member, state))

            result = waiter.wait_for(probe, timeout, steady(1.0), sleep=self.sleep,
                                     what=lambda last: ('the delete of %s' % label, last and '%s is %s' % last))
            if result.ok:
                return base.TaskResult(handle)
            member, state = result.value or ('a member', 'not gone')
            err = base.TaskTimeout('%s: deleting %s is still %s after %d s. Check it in the resource group\'s '
                                   'activity log, then run again: the next run goes on with the delete.'
                                   % (label, member, state, timeout))
        elif action in ('start', 'powerOff'):
            want = base.RUNNING if action == 'start' else base.STOPPED

            def probe(remaining):
                state = self.power(base.Resource(base_name, None)).state
                return waiter.done() if state == want else waiter.pending(state)

            result = waiter.wait_for(probe, timeout, steady(1.0), sleep=self.sleep,
                                     what=lambda last: ('%s to be %s' % (label, want), last and 'it is %s' % last))
            if result.ok:
                return base.TaskResult(handle)
            err = base.TaskTimeout('%s is not %s after %d s. Check its instance view (power state) and the resource '
                                   'group\'s activity log, then run again.' % (label, want, timeout))
        else:
            raise base.NotFound('Unknown Azure task %s.' % handle)
        err.task_id = handle
        raise err

    def task_status(self, handle):
        action, base_name, at = parse_handle(handle)
        record = self.store.load(base_name) or {}
        if action == 'create':
            return base.TaskResult(handle) if record.get('binding') else base.TaskResult(handle, 'running', None)
        if action == 'delete':
            done = all(m in record.get('claims', {}) or m not in record.get('ids', {}) for m in planning.MEMBERS)
            return base.TaskResult(handle) if done else base.TaskResult(handle, 'running', None)
        return base.TaskResult(handle)

    def close(self):
        pass
