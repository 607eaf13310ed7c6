# -*- coding: utf-8 -*-
# Copyright: ephemera.workspaces contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A workspace on Azure is a set of four resources: a VM, its NIC, its public IP and its managed OS disk.

This module is plain logic, no SDK and no connection: the canonical names of a set, Azure's naming and tag rules,
the planned identity a create records before its first PUT, what a fresh read of each member must show before it
is deleted, the creation-prefix cases, and the orphan sweep's exact groups, fingerprints and quarantine.
"""

import hashlib
import json
import re

from ansible_collections.ephemera.workspaces.plugins.module_utils.core import lease as leasing

VM = 'vm'
NIC = 'nic'
PIP = 'pip'
DISK = 'disk'
# Creation order (the OS disk comes with the VM) and deletion order.
CREATE_ORDER = (PIP, NIC, VM)
DELETE_ORDER = (VM, NIC, PIP, DISK)
MEMBERS = DELETE_ORDER
SUFFIX = {VM: '-vm', NIC: '-nic', PIP: '-pip', DISK: '-osdisk'}
TYPES = {VM: 'Microsoft.Compute/virtualMachines', NIC: 'Microsoft.Network/networkInterfaces',
         PIP: 'Microsoft.Network/publicIPAddresses', DISK: 'Microsoft.Compute/disks'}
KIND_OF_TYPE = {v.lower(): k for k, v in TYPES.items()}

TAG_PREFIX = 'ephemera:'
TAG_MARKER = 'ephemera:marker'
TAG_WORKSPACE = 'ephemera:workspace'
TAG_SCOPE = 'ephemera:scope'
TAG_SET = 'ephemera:set'
TAG_MEMBER = 'ephemera:member'
LABEL_KEYS = (leasing.LABEL_STATE, leasing.LABEL_EXPIRES_AT, leasing.LABEL_KEEP, leasing.LABEL_CREATED_AT)
# The tags a fresh read must show unchanged before a member is deleted (the lease's keep and expiry included).
BOUND_TAGS = (TAG_MARKER, TAG_WORKSPACE, TAG_SET, TAG_MEMBER) + tuple(TAG_PREFIX + k for k in
                                                                      (leasing.LABEL_EXPIRES_AT, leasing.LABEL_KEEP))

# The base of a set's names: letters, digits and hyphens, starting with a letter and ending with a letter or
# digit; at most 57 characters so that "<base>-osdisk" stays within a Linux VM's 64 (and every member's 80).
BASE = re.compile(r'^[A-Za-z][A-Za-z0-9-]{0,55}[A-Za-z0-9]$|^[A-Za-z]$')
RESOURCE_GROUP = re.compile(r'^[-\w.()]{1,90}$', re.U)
LOCATION = re.compile(r'^[a-z0-9]{1,40}$')
TAG_KEY_BAD = re.compile(r'[<>%&\\?/]')
SUBSCRIPTION = re.compile(r'^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$')


class PlanError(ValueError):
    """Input Azure would refuse, caught before any request: the message says what to change."""


def base_name(workspace, stamp):
    """The base of the names of ``workspace``'s set for its record made at ``stamp``: the workspace's name and a
    short digest of the record, so that a new life of the workspace gets new names and a rerun the same ones."""
    digest = hashlib.sha256(('%s\n%s' % (workspace, stamp)).encode('utf-8')).hexdigest()[:8]
    base = '%s-%s' % (str(workspace).lower(), digest)
    check_base(base, workspace)
    return base


def check_base(base, workspace=None):
    if not BASE.match(base or ''):
        raise PlanError('Workspace name %r cannot name Azure resources: use at most 48 letters, digits and hyphens, '
                        'starting with a letter and ending with a letter or digit (the VM, NIC, public IP and disk are '
                        'named after it).' % (workspace if workspace is not None else base,))


def names(base):
    """{member: canonical name} of the set ``base``."""
    return {m: base + SUFFIX[m] for m in MEMBERS}


def check_resource_group(group):
    if not group or not RESOURCE_GROUP.match(group) or group.endswith('.'):
        raise PlanError('Resource group %r breaks Azure\'s rule: 1 to 90 letters, digits, underscores, hyphens, '
                        'periods and parentheses, not ending with a period. Give azure_resource_group.' % (group,))


def check_location(location):
    if not location or not LOCATION.match(location):
        raise PlanError('Location %r is not an Azure location name (lower-case letters and digits, such as '
                        'westeurope). Give azure_location.' % (location,))


def check_subscription(subscription):
    if not subscription or not SUBSCRIPTION.match(subscription):
        raise PlanError('Subscription id %r is not a GUID. Give azure_subscription_id (or AZURE_SUBSCRIPTION_ID).'
                        % (subscription,))


def check_tags(tags):
    """PlanError unless Azure takes every tag of ``tags`` (user tags: none may start with ephemera:)."""
    for key, value in sorted((tags or {}).items()):
        if not isinstance(key, str) or not key or len(key) > 512 or TAG_KEY_BAD.search(key):
            raise PlanError('Tag key %r is not allowed: Azure takes 1 to 512 characters without < > %% & \\ ? /.'
                            % (key,))
        if key.lower().startswith(('azure', 'microsoft', 'windows')) or key.startswith(TAG_PREFIX):
            raise PlanError('Tag key %r is reserved (azure, microsoft, windows and %s prefixes). Choose another '
                            'key.' % (key, TAG_PREFIX))
        if len('' if value is None else str(value)) > 256:
            raise PlanError('Tag %s has a value longer than 256 characters, which Azure does not take.' % key)
    if len(tags or {}) + len(BOUND_TAGS) + len(LABEL_KEYS) + 1 > 50:
        raise PlanError('Too many tags: Azure takes 50 on a resource and the collection needs %d of them.'
                        % (len(BOUND_TAGS) + len(LABEL_KEYS) + 1))


def member_tags(common, member):
    """The tags member ``member`` carries: the set's common tags and its own role."""
    out = dict(common)
    out[TAG_MEMBER] = member
    return out


def plan(workspace, base, group, location, marker, scope, labels=None, extra=None, subscription=None):
    """The complete planned identity of a set, recorded before the first PUT: subscription, resource group,
    location, the canonical names of the four members and the tags each carries. PlanError for input Azure would
    refuse (nothing is sent)."""
    check_base(base, workspace)
    check_resource_group(group)
    check_location(location)
    if subscription is not None:
        check_subscription(subscription)
    check_tags(extra)
    common = dict(extra or {})
    common.update({TAG_MARKER: marker, TAG_WORKSPACE: workspace, TAG_SCOPE: scope, TAG_SET: base})
    for key, value in (labels or {}).items():
        common[TAG_PREFIX + key] = str(value)
    return {'subscription': subscription, 'resource_group': group, 'location': location, 'base': base,
            'names': names(base), 'tags': {m: member_tags(common, m) for m in MEMBERS}}


def resource_id(subscription, group, member, name):
    return '/subscriptions/%s/resourceGroups/%s/providers/%s/%s' % (subscription, group, TYPES[member], name)


def same_id(a, b):
    """ARM ids compare without regard to case."""
    return a is not None and b is not None and a.lower() == b.lower()


# ------------------------------------------------------------------------------ a member as read

def _props(doc):
    return (doc or {}).get('properties') or {}


def attachments(member, doc):
    """What member ``member`` (its ARM document) is attached to, as a dict of ids (lower case) and options."""
    p = _props(doc)
    if member == VM:
        storage = p.get('storageProfile') or {}
        os_disk = storage.get('osDisk') or {}
        nics = (p.get('networkProfile') or {}).get('networkInterfaces') or []
        return {'nics': sorted((n.get('id') or '').lower() for n in nics),
                'nic_delete': sorted(((n.get('properties') or {}).get('deleteOption') or 'Detach') for n in nics),
                'os_disk': ((os_disk.get('managedDisk') or {}).get('id') or '').lower() or None,
                'os_disk_delete': os_disk.get('deleteOption') or 'Detach',
                'data_disks': len(storage.get('dataDisks') or [])}
    if member == NIC:
        pips, pip_delete = [], []
        for conf in p.get('ipConfigurations') or []:
            ref = (conf.get('properties') or {}).get('publicIPAddress')
            if ref:
                pips.append((ref.get('id') or '').lower())
                pip_delete.append((ref.get('properties') or {}).get('deleteOption') or 'Detach')
        return {'vm': ((p.get('virtualMachine') or {}).get('id') or '').lower() or None, 'pips': sorted(pips),
                'pip_delete': sorted(pip_delete)}
    if member == PIP:
        conf = (p.get('ipConfiguration') or {}).get('id') or ''
        return {'nic': conf.lower().split('/ipconfigurations/')[0] or None}
    if member == DISK:
        return {'vm': (doc.get('managedBy') or '').lower() or None}
    raise ValueError(member)


def cascade(member, doc):
    """A sentence when the VM would take something with it (deleteOption Delete) or holds a data disk; else None."""
    if member != VM:
        return None
    a = attachments(VM, doc)
    if a['data_disks']:
        return 'it has %d data disk(s), which are not part of a workspace' % a['data_disks']
    if 'Delete' in a['nic_delete'] or a['os_disk_delete'] == 'Delete':
        return 'it is set to delete its NIC or OS disk with it (deleteOption Delete)'
    return None


def check_member(record, member, doc, claims=None):
    """None when ``doc`` (a fresh read of ``member``) is still what ``record`` planned and recorded: its id, its
    location, its bound tags and its attachments (to the set's own members, or to nothing where the member it
    was attached to has a claim of its deletion); else a sentence that says what differs."""
    plan_ = record['plan']
    ids = record.get('ids') or {}
    claims = claims or record.get('claims') or {}
    name = plan_['names'][member]
    if doc is None:
        return '%s %s is gone' % (member, name)
    if ids.get(member) and not same_id(doc.get('id'), ids[member]):
        return '%s %s has id %s, recorded %s: it was replaced' % (member, name, doc.get('id'), ids[member])
    if (doc.get('location') or '').lower() != plan_['location'].lower():
        return '%s %s is in %s, planned %s' % (member, name, doc.get('location'), plan_['location'])
    tags = doc.get('tags') or {}
    want = plan_['tags'][member]
    for key in BOUND_TAGS:
        if tags.get(key) != want.get(key):
            return '%s %s carries %s=%r, recorded %r' % (member, name, key, tags.get(key), want.get(key))
    reason = cascade(member, doc)
    if reason:
        return 'VM %s: %s; it is left for a person to delete' % (name, reason)
    a = attachments(member, doc)

    def ours(other, value):
        if value is None:
            return True
        return ids.get(other) is not None and value == ids[other].lower() and other not in claims

    def may_be_gone(other, value):
        # Attached to nothing: fine when the other member was deleted by us (claimed) or never made.
        return value is None and (other in claims or not ids.get(other))

    if member == VM:
        if a['nics'] != [(ids.get(NIC) or '').lower()]:
            return 'VM %s is attached to NICs %s, recorded %s' % (name, a['nics'], ids.get(NIC))
        if ids.get(DISK) and a['os_disk'] != ids[DISK].lower():
            return 'VM %s has OS disk %s, recorded %s' % (name, a['os_disk'], ids[DISK])
    elif member == NIC:
        if not (ours(VM, a['vm']) or may_be_gone(VM, a['vm'])):
            return 'NIC %s is attached to %s, not to the set\'s VM' % (name, a['vm'])
        if a['pips'] != ([ids[PIP].lower()] if ids.get(PIP) else []):
            return 'NIC %s carries public IPs %s, recorded %s' % (name, a['pips'], ids.get(PIP))
        if 'Delete' in a['pip_delete']:
            return 'NIC %s is set to delete its public IP with it (deleteOption Delete)' % name
    elif member == PIP:
        if not (ours(NIC, a['nic']) or may_be_gone(NIC, a['nic'])):
            return 'public IP %s is bound to %s, not to the set\'s NIC' % (name, a['nic'])
    elif member == DISK:
        if not (ours(VM, a['vm']) or may_be_gone(VM, a['vm'])):
            return 'disk %s is managed by %s, not by the set\'s VM' % (name, a['vm'])
    return None


# ------------------------------------------------------------------------------ creation prefixes

CLEAN = 'clean'
REPORT = 'report'


def classify_prefix(record, found):
    """What the ordinary release may do with a set whose creation stopped early. ``found`` is {member: ARM
    document or None} read now by canonical name. (CLEAN, members to delete in order) for an unattached canonical
    public IP alone, or the exact public IP and NIC together (and for a complete set); (REPORT, sentence) for a NIC
    without its public IP, a disk without its NIC and public IP, foreign attachments and replacements."""
    plan_ = record['plan']
    present = [m for m in MEMBERS if found.get(m) is not None]
    if not present:
        return CLEAN, []
    for member in present:
        tags = (found[member].get('tags') or {})
        if member == DISK and not tags and os_disk_of_ours(plan_, found):
            # Created with our VM and not tagged yet (Azure does not copy a VM's tags to its OS disk).
            continue
        if tags.get(TAG_MARKER) != plan_['tags'][member][TAG_MARKER] or tags.get(TAG_SET) != plan_['base']:
            return REPORT, '%s %s does not carry the set\'s marker: it is not ours to delete' % (
                member, plan_['names'][member])
    ids = dict(record.get('ids') or {})
    for member in present:
        if ids.get(member) and not same_id(ids[member], found[member].get('id')):
            return REPORT, '%s %s has id %s, recorded %s: it was replaced' % (
                member, plan_['names'][member], found[member].get('id'), ids[member])
        ids[member] = found[member].get('id')
    probe = dict(record, ids=ids)
    if set(present) == {PIP}:
        if attachments(PIP, found[PIP])['nic'] is not None:
            return REPORT, 'public IP %s is bound to %s' % (plan_['names'][PIP], attachments(PIP, found[PIP])['nic'])
        return CLEAN, [PIP]
    if set(present) == {PIP, NIC}:
        a = attachments(NIC, found[NIC])
        if a['vm'] is not None or a['pips'] != [ids[PIP].lower()]:
            return REPORT, 'NIC %s is attached to %s with public IPs %s' % (plan_['names'][NIC], a['vm'], a['pips'])
        if not same_id(attachments(PIP, found[PIP])['nic'], ids[NIC]):
            return REPORT, 'public IP %s is not bound to the set\'s NIC' % plan_['names'][PIP]
        return CLEAN, [NIC, PIP]
    if NIC in present and PIP not in present:
        return REPORT, 'NIC %s stands without its public IP' % plan_['names'][NIC]
    if DISK in present and not {NIC, PIP} <= set(present):
        return REPORT, 'disk %s stands without its NIC and public IP' % plan_['names'][DISK]
    for member in present:
        doc = found[member]
        if member == DISK and not doc.get('tags') and os_disk_of_ours(plan_, found):
            doc = dict(doc, tags=plan_['tags'][DISK])
        reason = check_member(probe, member, doc, claims={})
        if reason:
            return REPORT, reason
    return CLEAN, [m for m in DELETE_ORDER if m in present]


def os_disk_of_ours(plan_, found):
    """True when ``found`` holds our VM (its marker and set) and the disk is that VM's OS disk, managed by it."""
    vm, disk = found.get(VM), found.get(DISK)
    if vm is None or disk is None:
        return False
    tags = vm.get('tags') or {}
    if tags.get(TAG_MARKER) != plan_['tags'][VM][TAG_MARKER] or tags.get(TAG_SET) != plan_['base']:
        return False
    return (attachments(VM, vm)['os_disk'] == (disk.get('id') or '').lower()
            and attachments(DISK, disk)['vm'] == (vm.get('id') or '').lower())


# ------------------------------------------------------------------------------ orphan sweep

def groups_of(listing):
    """{set base: {member: document}} of an inventory (documents of the four types in the resource group) that
    carry a set tag; a member kind seen twice in a set, or a member whose role tag disagrees with its type, makes
    the group mixed ({'mixed': sentence})."""
    out = {}
    for doc in listing:
        tags = doc.get('tags') or {}
        base = tags.get(TAG_SET)
        kind = KIND_OF_TYPE.get((doc.get('type') or '').lower())
        if not base or kind is None:
            continue
        group = out.setdefault(base, {})
        if tags.get(TAG_MEMBER) != kind:
            group['mixed'] = '%s %s says it is the set\'s %s' % (kind, doc.get('name'), tags.get(TAG_MEMBER))
        elif kind in group:
            group['mixed'] = 'the set has two of %s' % kind
        else:
            group[kind] = doc
    return out


def exact_group(base, group, location=None):
    """None when ``group`` is exact: all four members under their canonical names, the same marker, workspace and
    set on each, one location, and the canonical topology (VM -> its NIC and OS disk, NIC -> its public IP, no
    data disks, no delete-with options); else a sentence (report-only)."""
    if 'mixed' in group:
        return group['mixed']
    missing = [m for m in MEMBERS if m not in group]
    if missing:
        return 'set %s is incomplete (no %s)' % (base, ', '.join(missing))
    canonical = names(base)
    for m in MEMBERS:
        if (group[m].get('name') or '').lower() != canonical[m].lower():
            return '%s %s is not named canonically (%s)' % (m, group[m].get('name'), canonical[m])
    first = group[VM].get('tags') or {}
    for m in MEMBERS:
        tags = group[m].get('tags') or {}
        for key in (TAG_MARKER, TAG_WORKSPACE, TAG_SET):
            if tags.get(key) != first.get(key):
                return 'set %s has mixed %s tags' % (base, key)
    locations = set((group[m].get('location') or '').lower() for m in MEMBERS)
    if len(locations) != 1 or (location and location.lower() not in locations):
        return 'set %s spans locations %s' % (base, sorted(locations))
    reason = cascade(VM, group[VM])
    if reason:
        return 'VM of set %s: %s' % (base, reason)
    vm, nic, pip, disk = (attachments(m, group[m]) for m in (VM, NIC, PIP, DISK))
    ids = {m: (group[m].get('id') or '').lower() for m in MEMBERS}
    if (vm['nics'] != [ids[NIC]] or vm['os_disk'] != ids[DISK] or nic['vm'] != ids[VM] or nic['pips'] != [ids[PIP]]
            or pip['nic'] != ids[NIC] or disk['vm'] != ids[VM] or 'Delete' in nic['pip_delete']):
        return 'set %s does not have the canonical topology' % base
    return None


def fingerprint(group):
    """A digest of a group's members, ids, tags, locations and topology: any change changes it."""
    parts = []
    for m in MEMBERS:
        doc = group.get(m)
        if doc is None:
            parts.append([m, None])
            continue
        parts.append([m, (doc.get('id') or '').lower(), doc.get('name'), sorted((doc.get('tags') or {}).items()),
                      (doc.get('location') or '').lower(), sorted(attachments(m, doc).items())])
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode('utf-8')).hexdigest()


def quarantine(state, base, print_, now, grace):
    """Advance the quarantine of set ``base`` after one successful inventory that showed fingerprint ``print_``.
    ``state`` ({base: {fingerprint, since, inventories}}) is changed in place; returns True when the group has kept
    the same fingerprint for ``grace`` seconds and through at least two successful inventories. Any change
    starts the quarantine again."""
    entry = state.get(base)
    if entry is None or entry.get('fingerprint') != print_:
        state[base] = {'fingerprint': print_, 'since': now, 'inventories': 1}
        return False
    entry['inventories'] = int(entry.get('inventories') or 0) + 1
    return entry['inventories'] >= 2 and now - float(entry['since']) >= grace


def forget_missing(state, seen):
    """Drop the quarantine of groups the latest successful inventory did not show."""
    for base in [b for b in state if b not in seen]:
        del state[base]
