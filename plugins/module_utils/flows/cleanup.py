# -*- coding: utf-8 -*-
# Copyright: ephemera.workspaces contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The direct cleanup sweep by labels: a person's command that deletes what the labels on the resources say is over.

Every resource in our scope (the pool, or the tag) is read once: its lease labels, its ownership marker and the
marker's verdict. ``core.lease.cleanup_decision`` decides from those (the table in docs/leases.md): delete, skip or
report. The sweep then deletes a resource only when the table says delete, its marker verifies for this
controller, and the journal does not know its workspace. A workspace the journal knows is released through its own
queue (the destroy playbook, or the expiry sweep), never here, so that a deletion never races a run the journal
holds. The journal may be missing: a lost journal is exactly when this sweep is used, and then every resource counts
as unknown to it.

Without ``apply`` (and always in check mode) it only says what it would delete. It is never scheduled: a lost or
restored journal makes every live workspace look unknown, and a timer would then purge the fleet as leases lapse.

A deletion reads the resource again right before it acts (labels, marker, verdict, decision: all must still say
delete), stops it by force when it runs, deletes it with everything it owns, and is done only when the resource is
observed absent. Each deletion is recorded in the journal, when there is one, under the workspace the marker names.
One resource that cannot be read or deleted is reported with its error; the sweep goes on with the others.
"""

import concurrent.futures
import os
import time

from ansible_collections.ephemera.workspaces.plugins.module_utils.providers import registry
from ansible_collections.ephemera.workspaces.plugins.module_utils.core import lease as leasing
from ansible_collections.ephemera.workspaces.plugins.module_utils.core import ownership
from ansible_collections.ephemera.workspaces.plugins.module_utils.core import waiter
from ansible_collections.ephemera.workspaces.plugins.module_utils.core.errors import EphemeraError
from ansible_collections.ephemera.workspaces.plugins.module_utils.flows import fleet
from ansible_collections.ephemera.workspaces.plugins.module_utils.flows.base import CANDIDATE_ID, RESOURCE_ID
from ansible_collections.ephemera.workspaces.plugins.module_utils.providers.base import Locked, NotFound

# What the sweep did with a resource.
DELETED = 'deleted'
WOULD_DELETE = 'would delete'
REPORTED = 'reported'
SKIPPED = 'skipped'
FAILED = 'failed'
ACTIONS = (DELETED, WOULD_DELETE, REPORTED, SKIPPED, FAILED)
# The order the report lists resources in: what happened to them first.
ORDER = (DELETED, FAILED, WOULD_DELETE, REPORTED, SKIPPED)
CONFIG_READERS = 8


class CleanupError(EphemeraError):
    """One resource could not be deleted; the message says why and what to do."""


def sweep_secret(journal_path, given=None):
    """The controller secret to verify markers with, or None when there is none: ``given``, else
    EPHEMERA_CONTROLLER_SECRET, else the ``<journal>.secret`` file when it exists. Never made: a secret made now
    verifies no marker that exists, and without a secret nothing verifies, so nothing is deleted."""
    if given or os.environ.get(ownership.SECRET_ENV) or os.path.exists(ownership.secret_path(journal_path)):
        return ownership.load_secret(journal_path, given) or None
    return None


def known_message(name):
    return ('known to the journal: released through its queue (ephemera.workspaces.destroy -e workspace=%s, or the '
            'expiry sweep)' % name)


class Entry:
    """One resource of the sweep: where it is, what it carries, what the table decided and what was done."""

    __slots__ = ('id', 'location', 'resource_name', 'name', 'labels', 'verdict', 'decision', 'reason', 'action',
                 'error', 'known')

    def __init__(self, listed):
        self.id = listed['id']
        self.location = listed.get('location')
        self.resource_name = listed.get('name')
        self.name = None
        self.labels = {}
        self.verdict = None
        self.decision = None
        self.reason = ''
        self.action = None
        self.error = None
        self.known = False

    def as_dict(self):
        return {k: getattr(self, k) for k in self.__slots__}


class Sweep:
    """One sweep over ``provider`` (a Provider, or the API client of one) in ``pool`` and ``tag``.

    ``journal`` an open Journal, or None when there is none; ``secret`` the controller secret, or None (then no
    marker verifies and nothing is deleted); ``apply`` False: a dry run that changes nothing; ``params`` the module's
    options, where a provider's set sweep finds its own settings.
    """

    def __init__(self, journal, provider, secret, pool='disposable-workspaces', tag='ephemera', apply=False,
                 task_timeout=300, lock_timeout=120, now=None, sleep=time.sleep, journal_path=None, params=None):
        self.journal = journal
        self.journal_path = journal_path
        bound = registry.bind(provider, secret)
        # Without a secret nothing may verify, whatever secret a provider object was made with.
        self.provider = bound.with_secret(None) if secret is None and bound.secret is not None else bound
        self.secret = secret
        self.pool = pool
        self.tag = tag
        self.apply = apply
        self.task_timeout = task_timeout
        self.lock_timeout = lock_timeout
        self.now = time.time() if now is None else now
        self.sleep = sleep
        self.entries = []
        self.to_delete = 0
        # resource id -> the workspace the journal records as destroyed there (filled by _known)
        self.destroyed_at = {}
        self.params = params or {}
        # The provider's set sweep of this pass (Provider.set_sweep), and its groups by listed id (filled by
        # _set_sweep)
        self.sets = None
        self.set_groups = {}

    @property
    def changed(self):
        return any(e.action == DELETED for e in self.entries)

    # ------------------------------------------------------------------ the journal

    def _known(self):
        """(names, {resource id: name}) of the workspaces the journal holds and has not destroyed."""
        names, ids = set(), {}
        if self.journal is None:
            return names, ids
        for ws in self.journal.list_workspaces():
            if ws['status'] == 'destroyed':
                # A container there now came back some other way (a restored backup, a copied marker): never
                # deleted by a sweep.
                if ws[RESOURCE_ID] is not None:
                    self.destroyed_at[ws[RESOURCE_ID]] = ws['name']
                continue
            names.add(ws['name'])
            for rid in (ws[RESOURCE_ID], ws[CANDIDATE_ID]):
                if rid is not None:
                    ids.setdefault(rid, ws['name'])
        return names, ids

    def _event(self, name, kind, action, detail):
        if self.journal is not None and name:
            self.journal.append_event(name, kind, action, detail)

    # ------------------------------------------------------------------ looking

    def _members(self):
        # The provider lists no source (template) at all: a template is never a candidate of the sweep.
        return [g for g in sorted(self.provider.list(), key=lambda g: g['id'])
                if self.provider.in_scope(g, self.pool, self.tag)]

    def _find(self, listed):
        if self.provider.sweeps_sets:
            # A set as its listing shows it (sets without a record of ours included); read afresh before a deletion.
            return self.provider.find_listed(listed)
        return self.provider.find(listed['id'], listed.get('location'))

    def _reads(self, members):
        """The resource of each member (None when gone, the error when it could not be read), read with bounded
        concurrency."""
        out = {}
        with concurrent.futures.ThreadPoolExecutor(max_workers=CONFIG_READERS) as pool:
            futures = {pool.submit(self._find, g): g['id'] for g in members}
            for future in concurrent.futures.as_completed(futures):
                try:
                    out[futures[future]] = future.result()
                except EphemeraError as err:
                    out[futures[future]] = err
        return out

    def _judge(self, resource):
        """(labels, marker's workspace, verdict, Decision) of a resource as it is now."""
        labels = self.provider.labels(resource)
        name = self.provider.marker_fields(resource).get('workspace') or None
        verdict = self.provider.verify(resource)
        return labels, name, verdict, leasing.cleanup_decision(labels, self.now, verdict)

    # ------------------------------------------------------------------ the sweep

    def run(self):
        names, ids = self._known()
        members = self._members()
        self._set_sweep()
        resources = self._reads(members)
        selected = []
        for listed in members:
            entry = Entry(listed)
            self.entries.append(entry)
            resource = resources.get(listed['id'])
            if isinstance(resource, Exception):
                entry.action, entry.error = FAILED, str(resource)
                entry.reason = 'its configuration could not be read'
                continue
            if resource is None:
                entry.action, entry.reason = SKIPPED, 'gone since the cluster was listed'
                continue
            entry.location = resource.location
            entry.labels, entry.name, entry.verdict, decided = self._judge(resource)
            entry.decision, entry.reason = decided
            holder = entry.name if entry.name in names else ids.get(entry.id)
            entry.known = holder is not None
            if decided.decision == leasing.SKIP:
                entry.action = SKIPPED
            elif self.sets is not None and not entry.known:
                self._set_entry(entry, decided, resource, selected)
            elif self.destroyed_at.get(entry.id) is not None and self.destroyed_at[entry.id] == entry.name:
                entry.action = REPORTED
                entry.reason = ('%s; but workspace %s was destroyed at this id: this container came back some other '
                                'way (a restored backup, a copied marker) and is not deleted by a sweep; inspect it, '
                                'and remove it with destroy vmid=%s confirm_orphan=true if it should go'
                                % (decided.reason, entry.name, entry.id))
            elif entry.known:
                # Never deleted here: a run the journal holds may be working on it.
                entry.action = REPORTED
                entry.reason = '%s; %s' % (decided.reason, known_message(holder))
            elif decided.decision == leasing.DELETE:
                if resource.deleting:
                    entry.action, entry.reason = SKIPPED, '%s; a deletion of it is under way already' % decided.reason
                    continue
                self.to_delete += 1
                entry.action = WOULD_DELETE
                selected.append(entry)
            else:
                entry.action = REPORTED
        if self.apply:
            for entry in selected:
                self._delete(entry)
        return self.report()

    # ------------------------------------------------------------------ a provider's set sweep

    def _set_sweep(self):
        """A provider whose workspaces are sets of resources: judge every group of sets from one complete inventory
        (Provider.set_sweep); with apply the inventory counts in each set's quarantine, written durably before
        anything is deleted."""
        self.sets = self.provider.set_sweep(self.journal, self.params, counting=self.apply, now=self.now)
        if self.sets is None:
            return
        self.sets.run(self.journal.list_workspaces() if self.journal is not None else [])
        self.set_groups = self.sets.by_id()

    def _set_entry(self, entry, decided, resource, selected):
        """A set the journal holds no live workspace of: deleted only when the labels say so and the set sweep's
        quarantine passed (an exact group bound to its destroyed record); else reported with why."""
        group = self.set_groups.get(entry.id)
        said = self.sets.sentence(group) if group is not None else 'orphan sweep: not in its inventory'
        entry.reason = '%s; %s' % (decided.reason, said)
        if decided.decision != leasing.DELETE or group is None or not group.deletable:
            entry.action = REPORTED
        elif resource.deleting:
            entry.action, entry.reason = SKIPPED, '%s; a deletion of it is under way already' % decided.reason
        else:
            self.to_delete += 1
            entry.action = WOULD_DELETE
            selected.append(entry)

    # ------------------------------------------------------------------ deleting

    def _delete(self, entry):
        group = self.set_groups.get(entry.id) if self.sets is not None else None
        if group is not None and not self.sets.unchanged(group):
            entry.action = REPORTED
            entry.reason = ('not deleted: set %s changed right before its deletion, so its quarantine started again'
                            % group.base)
            return
        label = self.provider.label(entry.id, entry.location)
        detail = {'vmid': entry.id, 'node': entry.location, 'labels': entry.labels, 'reason': entry.reason,
                  'by': 'cleanup'}
        try:
            self._event(entry.name, 'dispatched', 'cleanup_delete', detail)
            outcome = self._remove(entry, label)
        except EphemeraError as err:
            entry.action, entry.error = FAILED, str(err)
            try:
                self._event(entry.name, 'observed', 'cleanup_delete_failed', dict(detail, error=str(err)))
            except EphemeraError:
                pass  # the error is in the result; the journal refused even this note
            return
        if outcome is not None:
            # It changed since it was read: what the table says now.
            entry.action, entry.reason = outcome
            self._event(entry.name, 'observed', 'cleanup_not_deleted', dict(detail, reason=entry.reason))
            return
        entry.action = DELETED
        if group is not None:
            self.sets.deleted(group)
        self._event(entry.name, 'observed', 'cleanup_deleted', detail)

    def _remove(self, entry, label):
        """Delete the entry's resource, looking at it again first; None when it was deleted and is gone, else
        (action, reason) when a fresh look says it must not be deleted (any more)."""
        deadline = time.monotonic() + self.lock_timeout
        backoff = waiter.Backoff(start=0.5, maximum=5.0, factor=1.7, jitter=0.3)
        while True:
            resource = self.provider.find(entry.id, entry.location)
            if resource is None:
                return SKIPPED, '%s was gone before it was deleted' % label
            labels, name, verdict, decided = self._judge(resource)
            if decided.decision != leasing.DELETE or name != entry.name:
                return (SKIPPED if decided.decision == leasing.SKIP else REPORTED,
                        'not deleted: its labels or marker changed since they were read (%s)' % decided.reason)
            blocker = self.provider.delete_blocker(resource)
            if blocker:
                raise CleanupError(blocker)
            try:
                if self.provider.power(resource, absent_ok=False).running:
                    stopping = self.provider.stop(resource)
                    if stopping:
                        self.provider.wait(stopping, timeout=self.task_timeout)
                handle = self.provider.delete(resource)
                if handle:
                    self.provider.wait(handle, timeout=self.task_timeout)
            except NotFound:
                pass  # gone meanwhile: the look below confirms it
            except Locked as err:
                if time.monotonic() > deadline:
                    raise CleanupError('%s stayed locked for %d s (%s); run the cleanup again once the lock is '
                                       'gone.' % (label, self.lock_timeout, err))
                self.sleep(backoff.next_delay())
                continue
            break
        self._wait_gone(entry, label)
        return None

    def _wait_gone(self, entry, label):
        def probe(remaining):
            return waiter.done() if self.provider.find(entry.id, entry.location) is None else waiter.pending()
        if not waiter.wait_for(probe, self.task_timeout, waiter.Backoff(start=0.2, maximum=2.0),
                               what='%s to be gone after its delete' % label).ok:
            raise CleanupError('%s is still there %d s after its delete. Check its tasks (or activity log) for a '
                               'delete that is slow or failed, then run the cleanup again.' % (label, self.task_timeout))

    # ------------------------------------------------------------------ the report

    def counts(self):
        counts = {action.replace(' ', '_'): 0 for action in ACTIONS}
        for entry in self.entries:
            counts[entry.action.replace(' ', '_')] += 1
        counts['to_delete'] = self.to_delete
        return counts

    def line(self, entry):
        what = self.provider.label(entry.id, entry.location)
        said = entry.reason + ('; error: %s' % entry.error if entry.error else '')
        return '%-12s %-18s %-24s %-10s %s' % (entry.action, what, entry.name or '-', entry.verdict or '-', said)

    def notes(self):
        """What the summary line must say besides the counts: a missing journal, a missing secret."""
        notes = []
        if self.secret is None:
            notes.append('no controller secret (controller_secret, %s or the secret file beside the journal): no '
                         'ownership marker verifies, so nothing is deleted' % ownership.SECRET_ENV)
        if self.journal is None:
            notes.append('no journal%s: every resource counts as unknown to it'
                         % (' at %s' % self.journal_path if self.journal_path else ''))
        return notes

    def report(self):
        counts = self.counts()
        summary = 'cleanup (%s): %d to delete, %d deleted, %d reported, %d skipped, %d failed' % (
            'applied' if self.apply else 'dry run', counts['to_delete'], counts[DELETED], counts[REPORTED],
            counts[SKIPPED], counts[FAILED])
        order = {action: i for i, action in enumerate(ORDER)}
        entries = sorted(self.entries, key=lambda e: (order[e.action], e.id))
        return {'entries': [e.as_dict() for e in entries], 'counts': counts,
                'report': ['; '.join([summary] + self.notes())] + [self.line(e) for e in entries]}


class FleetCleanup(fleet.FleetRun):
    """The label sweep of every place the journal holds workspaces in (fleet.places; without a journal, the
    configured one), one after another: each place's entries (with their ``place``), counts and report lines."""

    def __init__(self, journal, params, secret, connect, apply=False, journal_path=None):
        super().__init__(journal, params, secret, connect, check_mode=not apply)
        self.apply = apply
        self.journal_path = journal_path
        self.report_lines = []
        self.counts = {}

    def sweep(self, provider, params):
        sweep = Sweep(self.journal, provider, self.secret, pool=params['pool'], tag=params['tag'], apply=self.apply,
                      task_timeout=params['task_timeout'], lock_timeout=params['lock_timeout'],
                      journal_path=self.journal_path, params=params)
        result = sweep.run()
        for action, n in result['counts'].items():
            self.counts[action] = self.counts.get(action, 0) + n
        self.report_lines += ['[%s] %s' % (fleet.place_of_provider(provider), line) for line in result['report']]
        return sweep.changed, result['entries']

    def result(self, entries):
        counts = dict(self.counts, unreachable=len(self.unreachable))
        summary = 'cleanup of the fleet (%s): %d to delete, %d deleted, %d reported, %d skipped, %d failed' % (
            'applied' if self.apply else 'dry run', counts.get('to_delete', 0), counts.get(DELETED, 0),
            counts.get(REPORTED, 0), counts.get(SKIPPED, 0), counts.get(FAILED, 0))
        if self.unreachable:
            summary += ', %d not reached' % len(self.unreachable)
        unreachable = ['[%s] unreachable: %s' % (e['place'], e['detail']) for e in entries
                       if e['action'] == 'unreachable']
        return {'entries': entries, 'counts': counts, 'places': self.by_place,
                'report': [summary] + self.report_lines + unreachable}
