# -*- coding: utf-8 -*-
# Copyright: ephemera.workspaces contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The Azure orphan sweep of a reconcile or cleanup pass (AzureProvider.set_sweep): every group of sets in the
resource group judged from one complete inventory, and the quarantine that stands between a left-behind set and its
deletion.

A group is deleted only when it is exact (all four members, canonical names and topology, one location, the same
ownership tags), bound to an exact retained record (the record of a workspace this journal holds as destroyed
planned that set, the set's own record holds the same ids, and its marker verifies for that workspace and that
life of it), and it has kept the same fingerprint through the grace period and two successful inventories. The
quarantine (fingerprint, since, inventories) is durable in the journal's provider state, written before anything
is deleted; a listing that breaks off counts as no inventory. Everything else is reported with why, never touched:
sets of live workspaces are left to their records, and mixed, incomplete, unbound and foreign groups are
report-only. Shared virtual networks, subnets, security groups and the resource group are never inventoried.
"""

import time

from ansible_collections.ephemera.workspaces.plugins.module_utils.core import ownership
from ansible_collections.ephemera.workspaces.plugins.module_utils.providers.base import Resource
from ansible_collections.ephemera.workspaces.plugins.module_utils.providers.azure import members as azset
from ansible_collections.ephemera.workspaces.plugins.module_utils.providers.azure import plan as planning

DEFAULT_GRACE = 900
LIVE = 'live'
# The fields of a journal record that name its resource (docs/internals/journal.md).
RESOURCE_ID = 'resource_id'
CANDIDATE_ID = 'candidate_id'


def _vm_base(resource_id):
    text = str(resource_id or '')
    if text.lower().endswith(planning.SUFFIX[planning.VM]):
        return text.rstrip('/').rsplit('/', 1)[-1][:-len(planning.SUFFIX[planning.VM])]
    return None


def set_base(record):
    """The set base a journal record accounts for (its candidate id, else read from its VM's id), or None. A
    workspace that took a warm pool member's set records the VM's id as its candidate: its base is read from it."""
    candidate = record.get(CANDIDATE_ID)
    if candidate and not str(candidate).startswith('/'):
        return str(candidate)
    return _vm_base(candidate) or _vm_base(record.get(RESOURCE_ID))


class Group:
    """One group of the inventory as judged: its base, the id it is listed under (the VM's ARM id, or the base),
    its location, the sweep's verdict and why, its marker's verdict and the workspace the marker names, and the
    workspace whose record holds it (live or destroyed)."""

    __slots__ = ('base', 'id', 'location', 'verdict', 'why', 'marker', 'named', 'holder', 'live', 'record', 'print')

    def __init__(self, base, judged, members):
        head = azset.head_of(members)
        self.base = base
        self.id = (members.get(planning.VM) or {}).get('id') or base
        self.location = (head.get('location') or '').lower() or None
        self.verdict = judged['verdict']
        self.why = judged['why']
        self.record = judged.get('record')
        self.print = judged.get('print')
        self.marker = None
        self.named = None
        self.holder = None
        self.live = False

    @property
    def deletable(self):
        """True when its quarantine passed: an exact group bound to its destroyed record, unchanged through the
        grace period and two inventories."""
        return self.verdict == azset.CANDIDATE

    @property
    def quarantined(self):
        """True while it waits out its quarantine."""
        return self.verdict == azset.QUARANTINED


class AzureOrphans:
    """The orphan sweep over ``provider`` (an AzureProvider: its resource group and location) for one pass.

    ``journal`` an open Journal (or None: nothing is bound, nothing deleted); ``counting`` True when the pass may
    count the inventory in the quarantine (reconcile with orphans=delete, cleanup with apply, never in check mode):
    a report changes nothing, not even the quarantine."""

    def __init__(self, journal, provider, grace=None, counting=False, now=None, claim=None):
        self.journal = journal
        self.provider = provider
        self.arm = provider.arm
        self.subscription = provider.arm.subscription
        self.group = provider.group
        self.location = (provider.launch.get('location') or '').lower() or None
        self.grace = DEFAULT_GRACE if grace is None else int(grace)
        self.counting = counting and journal is not None
        self.now = time.time() if now is None else now
        self.store = azset.QuarantineStore(journal, self.subscription, self.group, claim) if journal is not None \
            else None
        self.groups = []
        if journal is not None:
            # The sets' records are read (and, deleting, written) through the pass's own journal.
            provider.use_journal(journal)

    # ------------------------------------------------------------------ binding

    def _marker(self, members, workspace=None, nonce=ownership.ANY):
        head = azset.head_of(members)
        resource = Resource((members.get(planning.VM) or {}).get('id') or (head.get('tags') or {}).get(planning.TAG_SET),
                            head.get('location'), marker_text=(head.get('tags') or {}).get(planning.TAG_MARKER),
                            native=head)
        return self.provider.verify(resource, workspace, nonce), self.provider.marker_fields(resource).get('workspace')

    def _bind(self, records):
        destroyed, live = {}, {}
        for ws in records:
            if ws.get('provider') != self.provider.name:
                continue
            base = set_base(ws)
            if base is None:
                continue
            if ws['status'] == 'destroyed' and ws['desired_state'] == 'destroyed':
                destroyed.setdefault(base, ws)
            else:
                live[base] = ws

        def bind(base, members):
            if base in live:
                return None, 'set %s belongs to workspace %s, which the journal holds as %s' % (
                    base, live[base]['name'], live[base]['status'])
            ws = destroyed.get(base)
            if ws is None:
                return None, ('set %s is bound to no retained record (no destroyed workspace of this journal '
                              'planned it)' % base)
            vm_id = (members.get(planning.VM) or {}).get('id')
            if ws.get(RESOURCE_ID) and not planning.same_id(ws[RESOURCE_ID], vm_id):
                return None, ('set %s: the record of %s names VM %s, the group has %s'
                              % (base, ws['name'], ws[RESOURCE_ID], vm_id))
            record = self.provider.store.load(base)
            if record is None or (record.get('plan') or {}).get('base') != base:
                return None, ('set %s: workspace %s was destroyed, and the record of its set is gone, so nothing binds '
                              'the group to it' % (base, ws['name']))
            verdict, named = self._marker(members, ws['name'], ownership.record_nonce(ws))
            if verdict != ownership.VERIFIED:
                return None, 'set %s: its marker does not verify for that life of workspace %s (%s)' % (
                    base, ws['name'], verdict)
            return dict(record, workspace=ws['name']), None
        return bind, destroyed, live

    # ------------------------------------------------------------------ the inventory

    def run(self, records):
        """Judge every group of one complete inventory of the resource group (a listing that breaks off raises
        members.Incomplete and counts for nothing). With ``counting`` the quarantine is written durably before this
        returns. Returns the groups (Group), by base."""
        listing = azset.inventory(self.arm, self.subscription, self.group)
        bind, destroyed, live = self._bind(records)
        state = self.store.load() if self.store is not None else {}
        judged = azset.survey(listing, state, bind, self.now, self.grace, self.location)
        if self.counting:
            self.store.save(state)
        docs = planning.groups_of(listing)
        self.groups = []
        for base in sorted(judged):
            group = Group(base, judged[base], docs[base])
            group.marker, group.named = self._marker(docs[base])
            if base in live:
                group.holder, group.live = live[base]['name'], True
            elif base in destroyed:
                group.holder = destroyed[base]['name']
            self.groups.append(group)
        return self.groups

    def by_id(self):
        return {g.id: g for g in self.groups}

    # ------------------------------------------------------------------ before a deletion

    def unchanged(self, group):
        """True when the set, read afresh member by member, still has the fingerprint its quarantine passed with.
        Otherwise its quarantine starts again from what was read now (when counting), and False."""
        fresh = azset.fresh_print(self.arm, group.record)
        if fresh == group.print:
            return True
        if self.counting:
            state = self.store.load()
            if fresh is None:
                state.pop(group.base, None)
            else:
                state[group.base] = {'fingerprint': fresh, 'since': time.time(), 'inventories': 1}
            self.store.save(state)
        return False

    def deleted(self, group):
        """Forget the quarantine of a set that was deleted."""
        if self.store is not None and self.counting:
            self.store.forget(group.base)

    # ------------------------------------------------------------------ wording

    def sentence(self, group):
        """What the sweep says of a group: its verdict and why."""
        return 'orphan sweep: %s: %s' % (group.verdict, group.why)
