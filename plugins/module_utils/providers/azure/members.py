# -*- coding: utf-8 -*-
# Copyright: ephemera.workspaces contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A workspace's set of four Azure resources, made and taken away one verified member at a time.

Everything it decides is written to its record (a dict) through ``save`` before it goes on; ``save`` must be
durable (the journal) and raise when it cannot write, which stops the work and leaves it as debt. The record:

``plan``        the planned identity (plan.plan), written before the first PUT
``dispatched``  {member: epoch} a creating PUT was sent (its answer may be lost)
``ops``         {member: operation} a creating PUT that runs on (its polling URLs)
``ids``         {member: ARM id} the stable id each member answered with
``binding``     the VM's id bound to its name and tags
``deleting``    {member, id, at} a DELETE about to be sent for exactly that id
``accepted``    {member, id, op, at} a DELETE Azure accepted that runs on (not yet a success)
``claims``      {member: {id, at}} the owned-delete claims: members whose deletion we confirmed
``debt``        sentences of what was left for a person, newest last
"""

import base64
import copy
import hashlib
import json
import time

from ansible_collections.ephemera.workspaces.plugins.module_utils.core import waiter
from ansible_collections.ephemera.workspaces.plugins.module_utils.providers import base
from ansible_collections.ephemera.workspaces.plugins.module_utils.providers.azure import plan as planning
from ansible_collections.ephemera.workspaces.plugins.module_utils.providers.azure.client import (
    API_VERSIONS, PENDING, SUCCEEDED, OperationFailed, operation_of, steady)
from ansible_collections.ephemera.workspaces.plugins.module_utils.providers.azure.plan import (
    CREATE_ORDER, DELETE_ORDER, DISK, MEMBERS, NIC, PIP, VM)

VERSION = {VM: API_VERSIONS['compute'], DISK: API_VERSIONS['disks'], NIC: API_VERSIONS['network'],
           PIP: API_VERSIONS['network']}
# The VM's administrator user when none is given: never the agent's (the bootstrap makes that one, unprivileged).
ADMIN_USER = 'ephemera'
# What osProfile.customData may hold once decoded (Azure's limit).
CUSTOM_DATA_LIMIT = 65535
DONE = 'done'
DELETED = 'deleted'
ACCEPTED = 'accepted'
RUNNING = 'running'
IN_USE = 'in_use'


class Contradiction(base.Refused):
    """What Azure shows contradicts what the record holds (a replaced identity, a changed binding, a member gone
    without our claim, foreign attachments): reported, and deletion is withheld."""


class Debt(base.Refused):
    """Work that cannot safely go on: left as cleanup debt, with the sentence of why."""


class WorkspaceSet:
    """The set of ``record`` in Azure (``arm``: a client.Arm). ``options``: vm_size, image (publisher, offer, sku,
    version), subnet_id, admin_username, ssh_public_key."""

    def __init__(self, arm, record, save, options=None, clock=time.time, sleep=time.sleep, lost_window=120,
                 timeout=900, interval=1.0):
        self.arm = arm
        self.record = record
        self._save = save
        self.options = dict(options or {})
        self.clock = clock
        self.sleep = sleep
        self.lost_window = lost_window
        self.timeout = timeout
        self.interval = interval
        for key in ('dispatched', 'ops', 'ids', 'claims'):
            record.setdefault(key, {})
        record.setdefault('debt', [])

    # ------------------------------------------------------------------ basics

    @property
    def plan(self):
        return self.record['plan']

    def save(self):
        """Write the record durably; a failed write stops the work (raised as it came)."""
        self._save(self.record)

    def path(self, member):
        p = self.plan
        return planning.resource_id(p['subscription'] or self.arm.subscription, p['resource_group'], member,
                                    p['names'][member])

    def read(self, member):
        return self.arm.get(self.path(member), VERSION[member])

    def debt(self, sentence, cls=Debt):
        self.record['debt'].append(sentence)
        try:
            self.save()
        except Exception:  # pylint: disable=broad-except
            pass
        return cls(sentence)

    # ------------------------------------------------------------------ create

    def body(self, member):
        p, o, ids = self.plan, self.options, self.record['ids']
        out = {'location': p['location'], 'tags': dict(p['tags'][member])}
        if member == PIP:
            out['sku'] = {'name': 'Standard'}
            out['properties'] = {'publicIPAllocationMethod': 'Static', 'publicIPAddressVersion': 'IPv4'}
        elif member == NIC:
            out['properties'] = {'ipConfigurations': [{'name': 'ipconfig1', 'properties': {
                'subnet': {'id': o['subnet_id']}, 'privateIPAllocationMethod': 'Dynamic',
                'publicIPAddress': {'id': ids[PIP], 'properties': {'deleteOption': 'Detach'}}}}]}
        elif member == VM:
            image = dict(o.get('image') or {})
            user = o.get('admin_username') or ADMIN_USER
            out['properties'] = {
                'hardwareProfile': {'vmSize': o.get('vm_size') or 'Standard_B1s'},
                'storageProfile': {
                    'imageReference': image,
                    'osDisk': {'name': p['names'][DISK], 'createOption': 'FromImage', 'deleteOption': 'Detach',
                               'managedDisk': {'storageAccountType': 'Standard_LRS'}}},
                'osProfile': {'computerName': o.get('hostname') or p['names'][VM][:64], 'adminUsername': user,
                              'linuxConfiguration': {'disablePasswordAuthentication': True, 'ssh': {'publicKeys': [
                                  {'path': '/home/%s/.ssh/authorized_keys' % user,
                                   'keyData': o.get('ssh_public_key') or ''}]}},
                              'customData': custom_data(o.get('ssh_public_key') or '')},
                'networkProfile': {'networkInterfaces': [
                    {'id': ids[NIC], 'properties': {'primary': True, 'deleteOption': 'Detach'}}]},
                # Boot diagnostics in managed storage (no storageUri): the serial log where cloud-init prints the
                # host keys the first SSH connection is pinned to (provider.published_host_keys).
                'diagnosticsProfile': {'bootDiagnostics': {'enabled': True}}}
        return out

    def _identity(self, member, doc):
        """Contradiction unless ``doc`` (found under the member's canonical name) is the one we planned."""
        tags = doc.get('tags') or {}
        want = self.plan['tags'][member]
        for key in (planning.TAG_MARKER, planning.TAG_SET, planning.TAG_MEMBER):
            if tags.get(key) != want.get(key):
                raise self.debt('%s %s exists without the set\'s %s tag: it is not ours; nothing was changed. Look '
                                'at it, or give the workspace another name.' % (member, self.plan['names'][member], key),
                                Contradiction)
        if (doc.get('location') or '').lower() != self.plan['location'].lower():
            raise self.debt('%s %s is in %s, planned %s.' % (member, self.plan['names'][member], doc.get('location'),
                                                             self.plan['location']), Contradiction)

    def _settle(self, member, doc):
        """Wait until ``doc``'s provisioning ends; the settled document."""
        name = self.plan['names'][member]
        seen = {'doc': doc, 'looks': 0}

        def probe(remaining):
            seen['looks'] += 1
            if seen['looks'] > 1:
                seen['doc'] = self.read(member)
                if seen['doc'] is None:
                    raise self.debt('%s %s went away while it was being provisioned.' % (member, name))
            state = ((seen['doc'].get('properties') or {}).get('provisioningState') or 'Succeeded').lower()
            if state == 'succeeded':
                return waiter.done(seen['doc'])
            if state in ('failed', 'canceled'):
                raise OperationFailed('%s %s ended provisioning %s.' % (member, name, state))
            return waiter.pending(state)

        result = waiter.wait_for(probe, self.timeout, steady(self.interval), sleep=self.sleep,
                                 what=lambda state: ('the provisioning of %s %s' % (member, name), state))
        if result.ok:
            return result.value
        raise base.TaskTimeout('%s %s is still %s after %d s. Check it in the resource group\'s activity log, then run '
                               'again: the next run looks at it again.' % (member, name, result.value, self.timeout))

    def _look_again(self, member):
        """After a PUT whose answer was lost, the member read again and again within the lost-answer window; None
        when it never showed. A 404 is not permission to allocate again."""
        deadline = self.record['dispatched'][member] + self.lost_window
        while True:
            doc = self.read(member)
            if doc is not None or self.clock() >= deadline:
                return doc
            self.sleep(self.interval)

    def _check(self, what, path, version, hint):
        try:
            return self.arm.send('GET', path, version, what=what).body or {}
        except base.NotFound as err:
            raise base.InvalidRequest('%s: %s. %s' % (what, err, hint))
        except base.Refused as err:
            if isinstance(err, base.InvalidRequest):
                raise
            raise base.InvalidRequest('%s: %s. %s' % (what, err, hint))

    def preflight(self):
        """Check before the first PUT what can be checked: the subscription and resource group, the location, the
        VM size there, the image there and the subnet. InvalidRequest saying what to change; nothing is made."""
        p, o = self.plan, self.options
        sub = p['subscription'] or self.arm.subscription
        self._check('Resource group %s in subscription %s' % (p['resource_group'], sub),
                    '/subscriptions/%s/resourcegroups/%s' % (sub, p['resource_group']), '2022-09-01',
                    'Give an existing azure_resource_group and the azure_subscription_id it belongs to.')
        sizes = self._check('VM sizes in location %s' % p['location'],
                            '/subscriptions/%s/providers/Microsoft.Compute/locations/%s/vmSizes' % (sub, p['location']),
                            VERSION[VM], 'Give an Azure location (azure_location) where the subscription has VMs.')
        names_ = sorted(s_.get('name') for s_ in sizes.get('value') or [])
        size = o.get('vm_size') or 'Standard_B1s'
        if size.lower() not in [n.lower() for n in names_]:
            raise base.InvalidRequest('VM size %s is not offered in %s; give one of: %s.'
                                      % (size, p['location'], ', '.join(names_[:20])))
        image = dict(o.get('image') or {})
        if image.get('id'):
            self._check_managed_image(image['id'])
        elif not all(image.get(k) for k in ('publisher', 'offer', 'sku')):
            raise base.InvalidRequest('The image needs publisher, offer and sku (and a version, or latest); got %r.'
                                      % (image,))
        else:
            self._check_marketplace_image(image)
        subnet = o.get('subnet_id')
        if not subnet:
            raise base.InvalidRequest('No subnet: give azure_subnet_id (the id of a subnet of a virtual network in %s).'
                                      % p['location'])
        self._check('Subnet %s' % subnet, subnet, VERSION[NIC], 'Give the id of an existing subnet (azure_subnet_id).')
        custom_data(o.get('ssh_public_key') or '')

    def _check_marketplace_image(self, image):
        p = self.plan
        sub = p['subscription'] or self.arm.subscription
        versions = self._check(
            'Image %s:%s:%s in %s' % (image['publisher'], image['offer'], image['sku'], p['location']),
            '/subscriptions/%s/providers/Microsoft.Compute/locations/%s/publishers/%s/artifacttypes/vmimage/offers/%s'
            '/skus/%s/versions' % (sub, p['location'], image['publisher'], image['offer'], image['sku']), VERSION[VM],
            'Give an image (publisher, offer, sku) offered in this location.')
        found = [v.get('name') for v in (versions if isinstance(versions, list) else versions.get('value') or [])]
        version = image.get('version') or 'latest'
        if not found or (version != 'latest' and version not in found):
            raise base.InvalidRequest('Image %s:%s:%s has no version %s in %s (versions: %s).'
                                      % (image['publisher'], image['offer'], image['sku'], version, p['location'],
                                         ', '.join(found) or 'none'))

    def _check_managed_image(self, image_id):
        """A managed image (an image of your own: az image create) is there, in the set's location, Linux and
        generalized (a specialized one would ignore the set's osProfile: its SSH key and cloud-init's data)."""
        p = self.plan
        doc = self._check('Managed image %s' % image_id, image_id, VERSION[VM],
                          'Give the id of a managed image in this subscription (az image list --query "[].id").')
        where = (doc.get('location') or '').lower()
        if where != p['location'].lower():
            raise base.InvalidRequest('Managed image %s is in %s, and the workspace goes to %s: a VM is made from an '
                                      'image of its own location. Copy the image there (or capture it again in %s), '
                                      'or set azure_location to %s.' % (image_id, where, p['location'], p['location'],
                                                                        where))
        os_disk = (((doc.get('properties') or {}).get('storageProfile') or {}).get('osDisk') or {})
        if (os_disk.get('osType') or 'Linux').lower() != 'linux' or \
                (os_disk.get('osState') or 'Generalized').lower() != 'generalized':
            raise base.InvalidRequest('Managed image %s is a %s %s image; workspaces need a generalized Linux image '
                                      '(waagent -deprovision+user, az vm deallocate, az vm generalize, then az image '
                                      'create).' % (image_id, os_disk.get('osState'), os_disk.get('osType')))
        state = (doc.get('properties') or {}).get('provisioningState') or 'Succeeded'
        if state.lower() != 'succeeded':
            raise base.InvalidRequest('Managed image %s is %s; wait until it is Succeeded and run again.'
                                      % (image_id, state))

    def create(self):
        """Make what is missing of the set, public IP -> NIC -> VM, recording each stable id; then tag the OS disk
        and bind the VM. Resumable: a rerun goes on where the record stops."""
        ids = self.record['ids']
        if not ids and not self.record['dispatched']:
            self.preflight()
        for member in CREATE_ORDER:
            if member in ids:
                continue
            doc = self.read(member)
            if doc is None and member in self.record['dispatched']:
                doc = self._look_again(member)
                if doc is None:
                    raise self.debt(
                        'The PUT of %s %s was sent and its answer lost, and Azure has not shown it since (%d s). It '
                        'is not made again; it stays as cleanup debt: look for it in resource group %s before '
                        'destroying this workspace.' % (member, self.plan['names'][member], self.lost_window,
                                                        self.plan['resource_group']), base.KeptAsDebt)
            if doc is None:
                self.record['dispatched'][member] = self.clock()
                self.save()
                try:
                    answer = self.arm.send('PUT', self.path(member), VERSION[member], self.body(member), acts=True,
                                           what='Creating %s %s' % (member, self.plan['names'][member]))
                except (base.Transient, base.Refused) as err:
                    if isinstance(err, base.UnknownOutcome):
                        raise
                    # Surely not carried out (the request never reached Azure, or Azure refused it): a rerun may
                    # send the same PUT again.
                    self.record['dispatched'].pop(member, None)
                    self.save()
                    raise
                op = operation_of(answer.status, answer.headers)
                if op and (op.get('async') or op.get('location')):
                    self.record['ops'][member] = op
                    self.save()
                    self.arm.wait(op, self.timeout, self.interval,
                                  what='the creation of %s %s' % (member, self.plan['names'][member]))
                doc = self.read(member) or self._look_again(member)
                if doc is None:
                    raise self.debt('Azure answered the PUT of %s %s, and does not show it.'
                                    % (member, self.plan['names'][member]), base.KeptAsDebt)
            self._identity(member, doc)
            doc = self._settle(member, doc)
            ids[member] = doc['id']
            self.record['ops'].pop(member, None)
            self.save()
        self._disk()
        self.bind()
        return ids

    def _disk(self):
        """Record the VM's OS disk and give it the set's tags (Azure does not copy a VM's tags to its disk)."""
        vm = self.read(VM)
        if vm is None or not planning.same_id(vm.get('id'), self.record['ids'][VM]):
            raise self.debt('VM %s changed identity after it was created.' % self.plan['names'][VM], Contradiction)
        reason = planning.cascade(VM, vm)
        if reason:
            raise self.debt('VM %s: %s.' % (self.plan['names'][VM], reason), Contradiction)
        disk_id = planning.attachments(VM, vm)['os_disk']
        want = self.path(DISK).lower()
        if disk_id != want:
            raise self.debt('VM %s has OS disk %s, planned %s.' % (self.plan['names'][VM], disk_id, want),
                            Contradiction)
        disk = self.read(DISK)
        if disk is None:
            raise self.debt('The OS disk %s of VM %s does not exist.' % (self.plan['names'][DISK], self.plan['names'][VM]))
        tags = disk.get('tags') or {}
        if any(tags.get(k) != v for k, v in self.plan['tags'][DISK].items()):
            merged = dict(tags, **self.plan['tags'][DISK])
            self.arm.send('PATCH', self.path(DISK), VERSION[DISK], {'tags': merged}, acts=True,
                          what='Tagging disk %s' % self.plan['names'][DISK])
        self.record['ids'][DISK] = disk['id']
        self.save()

    def bind(self):
        self.record['binding'] = {'vm_id': self.record['ids'][VM], 'name': self.plan['names'][VM],
                                  'tags': {k: self.plan['tags'][VM].get(k) for k in planning.BOUND_TAGS}}
        self.save()

    def check_binding(self):
        """The final readiness read: the VM still has the id bound to its name and tags. A changed identity is a
        Contradiction, recorded: deletion is withheld from then on."""
        binding = self.record.get('binding')
        vm = self.read(VM)
        tags = (vm or {}).get('tags') or {}
        if (binding is None or vm is None or not planning.same_id(vm.get('id'), binding['vm_id'])
                or any(tags.get(k) != v for k, v in binding['tags'].items())):
            self.record['contradiction'] = ('VM %s no longer matches the identity bound at its creation (id %s); '
                                            'nothing is bootstrapped or deleted. Look at it.'
                                            % (self.plan['names'][VM], (binding or {}).get('vm_id')))
            raise self.debt(self.record['contradiction'], Contradiction)
        return vm

    # ------------------------------------------------------------------ delete

    def _claim(self, member, member_id):
        self.record['claims'][member] = {'id': member_id, 'at': self.clock()}
        self.record.pop('deleting', None)
        self.record.pop('accepted', None)
        self.save()

    def _adopt_prefix(self):
        """Before deleting a set whose creation did not finish: what stands under the canonical names, classified;
        the exact prefixes are adopted (their ids recorded), the others withhold deletion."""
        if self.record.get('prefix') or all(m in self.record['ids'] for m in DELETE_ORDER):
            return
        for member in CREATE_ORDER:
            if member in self.record['dispatched'] and member not in self.record['ids'] \
                    and member not in self.record['claims']:
                # A PUT whose outcome is unknown (its answer lost, or the run stopped after recording it) may
                # still show: its absence counts only once its lost-answer window has passed.
                self._look_again(member)
        found = {m: self.read(m) for m in DELETE_ORDER if m not in self.record['claims']}
        verdict, what = planning.classify_prefix(self.record, found)
        if verdict == planning.REPORT:
            raise self.debt('The creation of set %s stopped early and what stands is not ours to delete alone: %s. '
                            'It is left for a person.' % (self.plan['base'], what), Contradiction)
        for member in what:
            self.record['ids'].setdefault(member, found[member]['id'])
        if DISK in what and not (found[DISK].get('tags') or {}):
            self.save()
            self._disk()
        self.record['prefix'] = list(what)
        self.save()

    def delete_tick(self):
        """One step of taking the set away, VM -> NIC -> public IP -> disk: delete at most one member, or poll one
        accepted deletion. (DELETED | ACCEPTED | RUNNING | IN_USE, member), or (DONE, None) when every member is
        claimed or was never made."""
        if self.record.get('contradiction'):
            raise Contradiction(self.record['contradiction'])
        accepted = self.record.get('accepted')
        if accepted:
            return self._poll_accepted(accepted)
        self._adopt_prefix()
        for member in DELETE_ORDER:
            if member in self.record['claims']:
                continue
            recorded = self.record['ids'].get(member)
            doc = self.read(member)
            if doc is None:
                deleting = self.record.get('deleting') or {}
                if recorded and deleting.get('member') == member and deleting.get('id') == recorded:
                    # Our DELETE of exactly this id went out and its answer was lost: its absence is ours.
                    self._claim(member, recorded)
                    return DELETED, member
                if recorded:
                    raise self.debt('%s %s (%s) is gone, and no claim of ours records its deletion: it was taken '
                                    'away by someone else or replaced. The cleanup stops here.'
                                    % (member, self.plan['names'][member], recorded), Contradiction)
                if member in self.record['dispatched'] and self.record.get('prefix') is None:
                    raise self.debt('%s %s was requested and never seen: it may still appear. It stays as debt.'
                                    % (member, self.plan['names'][member]))
                continue
            if not recorded:
                raise self.debt('%s %s stands, and the record holds no id of it: it is left for a person.'
                                % (member, self.plan['names'][member]), Contradiction)
            reason = planning.check_member(self.record, member, doc)
            if reason:
                raise self.debt('%s. The cleanup stops; nothing more is deleted.' % reason, Contradiction)
            return self._delete(member, recorded)
        return DONE, None

    def _delete(self, member, member_id):
        self.record['deleting'] = {'member': member, 'id': member_id, 'at': self.clock()}
        self.save()
        try:
            answer = self.arm.send('DELETE', self.path(member), VERSION[member], acts=True,
                                   what='Deleting %s %s' % (member, self.plan['names'][member]))
        except base.Locked:
            # In use (a NIC still on a VM, an IP still on a NIC): the next tick reads ownership again.
            self.record.pop('deleting', None)
            self.save()
            return IN_USE, member
        op = operation_of(answer.status, answer.headers)
        if op is not None:
            self.record['accepted'] = {'member': member, 'id': member_id, 'op': op, 'at': self.clock()}
            self.save()
            return ACCEPTED, member
        return self._confirm(member, member_id)

    def _confirm(self, member, member_id):
        doc = self.read(member)
        if doc is not None and planning.same_id(doc.get('id'), member_id):
            return RUNNING, member
        if doc is not None:
            raise self.debt('%s %s was replaced while it was being deleted (%s now).'
                            % (member, self.plan['names'][member], doc.get('id')), Contradiction)
        self._claim(member, member_id)
        return DELETED, member

    def _poll_accepted(self, accepted):
        member = accepted['member']
        verdict = self.arm.poll(accepted['op'])
        if verdict == PENDING:
            return RUNNING, member
        if verdict != SUCCEEDED:
            self.record.pop('accepted', None)
            self.record.pop('deleting', None)
            self.save()
            raise OperationFailed('Deleting %s %s failed: %s. The next run reads it again and retries.'
                                  % (member, self.plan['names'][member], verdict))
        return self._confirm(member, accepted['id'])

    def delete(self, max_ticks=200, pause=1.0):
        """Tick until the set is gone (DONE); in-use and running answers wait ``pause`` between ticks."""
        for dummy in range(max_ticks):
            state, member = self.delete_tick()
            if state == DONE:
                return True
            if state in (IN_USE, RUNNING, ACCEPTED):
                self.sleep(pause)
        raise base.TaskTimeout('Set %s is not gone after %d steps.' % (self.plan['base'], max_ticks))


# ------------------------------------------------------------------------------ orphan sweep

# A group's verdict in one orphan-sweep inventory.
CANDIDATE = 'candidate'
QUARANTINED = 'quarantined'
REPORT_ONLY = 'report-only'
# The journal's provider-state keys of the quarantine: <prefix><subscription>/<resource group>/<set base>.
QUARANTINE_PREFIX = 'azure/quarantine/'
# The successful inventories a group must be seen in, unchanged, before it may be deleted.
INVENTORIES = 2


class Incomplete(base.Transient):
    """A listing of the resource group that could not be read whole: it says nothing of what is absent, and it
    counts as no inventory."""


def custom_data(public_key):
    """osProfile.customData: a cloud-init cloud-config (base64, as Azure takes it) that authorizes ``public_key`` for
    root as well as the administrator user. The controller logs in as root; the agent is a user of its own, made by
    the bootstrap without sudo, never the administrator user, which Azure gives sudo."""
    key = ' '.join(str(public_key).split())
    text = '#cloud-config\nssh_authorized_keys:\n  - %s\ndisable_root: false\n' % key
    if len(text.encode('utf-8')) > CUSTOM_DATA_LIMIT:
        raise base.InvalidRequest('The SSH public key is %d bytes long; Azure takes at most %d bytes of custom data. '
                                  'Give a public key of one line.' % (len(key), CUSTOM_DATA_LIMIT))
    return base64.b64encode(text.encode('utf-8')).decode('ascii')


def inventory(arm, subscription, group):
    """Every VM, NIC, public IP and managed disk of the resource group (a complete read, or an error): shared
    VNets, subnets, NSGs and the resource group itself are never listed. A listing that breaks off (a page that
    fails, a broken answer) raises Incomplete; refused credentials and a missing group raise as they came."""
    prefix = '/subscriptions/%s/resourceGroups/%s/providers/' % (subscription, group)
    out = []
    for member in DELETE_ORDER:
        try:
            items = arm.list(prefix + planning.TYPES[member], VERSION[member])
        except (base.Refused, base.NotFound):
            raise
        except (base.ProviderError, ValueError, TypeError, AttributeError) as err:
            raise Incomplete('The listing of %s in resource group %s is incomplete (%s): nothing was judged from '
                             'it. Run again once Azure answers.' % (planning.TYPES[member], group, err))
        if not isinstance(items, list) or not all(isinstance(i, dict) for i in items):
            raise Incomplete('The listing of %s in resource group %s is incomplete (not a list of resources).'
                             % (planning.TYPES[member], group))
        out.extend(items)
    return out


def identity_print(group):
    """The fingerprint of a group (plan.fingerprint: members, ids, names, tags, locations, attachments) together
    with each member's immutable identity (a VM's vmId, a NIC's or public IP's resourceGuid, a disk's uniqueId), so
    that a member deleted and made again under the same ARM id counts as a change."""
    parts = [planning.fingerprint(group)]
    for member in MEMBERS:
        props = ((group.get(member) or {}).get('properties') or {}) if isinstance(group.get(member), dict) else {}
        parts.append([member, props.get('vmId') or props.get('resourceGuid') or props.get('uniqueId')])
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode('utf-8')).hexdigest()


def head_of(members):
    """The document a group is shown by: its VM, else its first member."""
    return members.get(VM) or next((members[m] for m in MEMBERS if m in members), {})


def address_of(members):
    """The public address of a group's public IP, or None."""
    pip = members.get(PIP) or {}
    return ((pip.get('properties') or {}).get('ipAddress')) or None


def listed_sets(listing):
    """One entry per set of an inventory (documents carrying our set tag), as the provider's listing shows a set:
    id (the VM's ARM id, or the set's base without a VM), location, name, status (complete: the exact group;
    incomplete otherwise, with ``problem`` saying why), pool (the scope tag), tags (the keys), set, members,
    marker_text, address and the head document (``native``)."""
    out = []
    for base_, members in sorted(planning.groups_of(listing).items()):
        head = head_of(members)
        tags = head.get('tags') or {}
        problem = planning.exact_group(base_, members)
        keys = sorted(tags) + (['ephemera'] if any(k.startswith(planning.TAG_PREFIX) for k in tags) else [])
        out.append({'id': (members.get(VM) or {}).get('id') or base_, 'location': (head.get('location') or '').lower(),
                    'kind': 'azure-set', 'name': head.get('name'), 'status': 'complete' if problem is None else 'incomplete',
                    'problem': problem, 'lock': None, 'pool': tags.get(planning.TAG_SCOPE), 'tags': keys,
                    'set': base_, 'members': sorted(m for m in members if m != 'mixed'),
                    'marker_text': tags.get(planning.TAG_MARKER), 'address': address_of(members), 'native': head,
                    'docs': members})
    return out


def _since(value):
    return time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime(float(value)))


def survey(listing, state, bind, now, grace, location=None):
    """Judge every group of one complete inventory (``listing``, from :func:`inventory`) and advance the
    quarantine ``state`` ({base: {fingerprint, since, inventories}}, changed in place).

    ``bind(base, members)`` gives (record, None) when the group is bound to an exact retained record (its
    record: ``ids`` must match the group's), or (None, why not). A group is a CANDIDATE for deletion when it is
    exact (plan.exact_group), bound, and has kept the same fingerprint (identity_print) for ``grace`` seconds and
    through at least two successful inventories; an exact, bound group that has not yet is QUARANTINED; every
    other group is REPORT_ONLY and its quarantine is dropped. Returns {base: {verdict, why, members, print,
    since, inventories, record}}; deletes nothing."""
    groups = planning.groups_of(listing)
    out = {}
    for base_, members in sorted(groups.items()):
        reason = planning.exact_group(base_, members, location)
        record = None
        if reason is None:
            record, reason = bind(base_, members)
            if reason is None and record is None:
                reason = 'set %s is bound to no retained record' % base_
        if reason is None:
            ids = record.get('ids') or {}
            if any(not planning.same_id(ids.get(m), members[m].get('id')) for m in DELETE_ORDER if ids.get(m)):
                reason = 'set %s does not match its record\'s ids' % base_
        shown = {'members': sorted(m for m in members if m != 'mixed'), 'record': record, 'since': None,
                 'inventories': 0, 'print': None}
        if reason is not None:
            state.pop(base_, None)
            out[base_] = dict(shown, verdict=REPORT_ONLY, why=reason)
            continue
        print_ = identity_print(members)
        before = state.get(base_)
        ready = planning.quarantine(state, base_, print_, now, grace)
        entry = state[base_]
        shown.update(print=print_, since=entry['since'], inventories=entry['inventories'])
        if ready:
            why = ('exact, bound to its retained record, unchanged since %s (%d s) through %d inventories'
                   % (_since(entry['since']), now - float(entry['since']), entry['inventories']))
            out[base_] = dict(shown, verdict=CANDIDATE, why=why)
            continue
        restarted = before is not None and before.get('fingerprint') != print_
        left = max(0, int(float(entry['since']) + grace - now + 0.999))
        why = ('exact and bound to its retained record; %sin quarantine since %s: %d of %d inventories, %d s of the '
               '%d s grace left' % ('it changed, so its quarantine started again; ' if restarted else '',
                                    _since(entry['since']), entry['inventories'], INVENTORIES, left, grace))
        out[base_] = dict(shown, verdict=QUARANTINED, why=why)
    planning.forget_missing(state, set(groups))
    return out


def sweep(arm, subscription, group, state, retained, now, grace, location=None, verify=None):
    """One orphan-sweep inventory. ``state`` is the quarantine (kept by the caller between runs), ``retained``
    maps a set base to its retained record (or None); ``verify(base, members, record)``, when given, a sentence
    when the group must not be deleted (its marker does not verify for that record, say). Returns {'candidates':
    [base ready for deletion], 'waiting': [...], 'report': {base: sentence}}; deletes nothing itself."""
    def bind(base_, members):
        record = retained(base_)
        if record is not None and verify is not None:
            reason = verify(base_, members, record)
            if reason:
                return None, reason
        return record, None
    judged = survey(inventory(arm, subscription, group), state, bind, now, grace, location)
    return {'candidates': [b for b, j in judged.items() if j['verdict'] == CANDIDATE],
            'waiting': [b for b, j in judged.items() if j['verdict'] == QUARANTINED],
            'report': {b: j['why'] for b, j in judged.items() if j['verdict'] == REPORT_ONLY}}


def fresh_print(arm, record):
    """The identity print of a set read afresh, member by member (a GET each), right before its deletion; None
    when a member is gone."""
    p = record['plan']
    members = {}
    for member in MEMBERS:
        path = planning.resource_id(p['subscription'] or arm.subscription, p['resource_group'], member,
                                    p['names'][member])
        doc = arm.get(path, VERSION[member])
        if doc is None:
            return None
        members[member] = doc
    return identity_print(members)


class QuarantineStore:
    """The quarantine of one resource group's sets, durable in the journal's provider state: one key per set
    (QUARANTINE_PREFIX + subscription/group/base), each written with compare-and-set on its generation, so that
    two sweeps at once cannot both count an inventory. A write that fails raises: nothing is deleted on a state
    that was not written."""

    def __init__(self, journal, subscription, group, claim=None):
        self.journal = journal
        self.prefix = '%s%s/%s/' % (QUARANTINE_PREFIX, subscription, group)
        self.claim = claim
        self._loaded = {}

    def load(self):
        """{base: {fingerprint, since, inventories}} as the journal holds it."""
        self._loaded = {}
        for key, value, generation in self.journal.provider_states(self.prefix):
            self._loaded[key[len(self.prefix):]] = (copy.deepcopy(value), generation)
        return {b: copy.deepcopy(v) for b, (v, g) in self._loaded.items()}

    def save(self, state):
        """Write what changed since load: new and changed entries, and drop the forgotten ones."""
        for base_, value in sorted(state.items()):
            old = self._loaded.get(base_)
            if old is not None and old[0] == value:
                continue
            self.journal.put_provider_state(self.prefix + base_, value, generation=old[1] if old else None,
                                            claim=self.claim)
        for base_, (value, generation) in sorted(self._loaded.items()):
            if base_ not in state:
                self.journal.delete_provider_state(self.prefix + base_, generation, claim=self.claim)

    def forget(self, base_):
        """Drop one set's quarantine (it was deleted)."""
        held = self.journal.provider_state(self.prefix + base_)
        if held is not None:
            self.journal.delete_provider_state(self.prefix + base_, held[1], claim=self.claim)
