# -*- coding: utf-8 -*-
# Copyright: ephemera.workspaces contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Reconciliation: compare the journal (intent) with the cluster (reality), finish what is pending, report the rest.

Safe at any time, also while other runs work: a workspace whose queue holds a live run is left to
that run. What reconcile *does*: it continues destructions that were decided (desired state
``destroyed``) until the container is absent, and retries due cleanup debt, both only on
containers whose marker proves they are ours. Everything else it *reports*: unfinished creates
(for the playbook to resume through the create flow), evidence of clones that a crashed run left
(adoptable when the marker verifies), ready workspaces whose container is gone or no longer ours,
and pool or tag members the journal does not know: orphans of ours (a lost or restored journal
makes every live workspace look like one) and foreign containers. It never deletes an orphan:
that is an explicit, per-VMID action of an operator (``destroy`` with ``vmid=`` and confirmation).

Nor does it delete a container found at the id of a workspace the journal records as destroyed: that
destruction observed its container gone, so whatever stands there now came back some other way (a
restored backup, a copied marker on a container that got the same VMID). It is reported as
``destroyed_present``, for an operator to look at.

On a provider whose ids are never given to a second resource (``Provider.unique_ids``: an EC2 instance id),
a resource bound exactly to a destroyed record (its id is the record's resource id, or it is the one resource
of the record's candidate id, the client token recorded before the create was dispatched; its marker verifies
for that workspace and that life of it) can only be that workspace's own, left behind (a create whose answer
was lost, then destroyed before the resource showed). With ``orphans: delete`` reconcile deletes exactly those,
confirmed by absence, and keeps cleanup debt when it cannot; in report mode, and always for everything else
(no record, a tag copy, another controller's), it reports with why. Descriptions are written by anyone who may edit a
container in the pool: one that cannot be read or verified is reported for that container alone, and the
pass goes on with the others.
"""

import concurrent.futures

from ansible_collections.ephemera.workspaces.plugins.module_utils.core import failpoint
from ansible_collections.ephemera.workspaces.plugins.module_utils.core import ownership
from ansible_collections.ephemera.workspaces.plugins.module_utils.core import pools
from ansible_collections.ephemera.workspaces.plugins.module_utils.core import waiter
from ansible_collections.ephemera.workspaces.plugins.module_utils.providers import registry
from ansible_collections.ephemera.workspaces.plugins.module_utils.flows import fleet
from ansible_collections.ephemera.workspaces.plugins.module_utils.flows import placing
from ansible_collections.ephemera.workspaces.plugins.module_utils.flows.base import (
    CANDIDATE_ID,
    LOCATION,
    RESOURCE_ID,
    TASKS,
    unadopted_fork,
)
from ansible_collections.ephemera.workspaces.plugins.module_utils.flows.destroy import STEPS as DESTROY_STEPS, DestroyFlow
from ansible_collections.ephemera.workspaces.plugins.module_utils.core.errors import EphemeraError
from ansible_collections.ephemera.workspaces.plugins.module_utils.providers.base import NotFound, ProviderError
from ansible_collections.ephemera.workspaces.plugins.module_utils.core.queue import Queue
from ansible_collections.ephemera.workspaces.plugins.module_utils.operation import Operation

IN_PROGRESS = ('requested', 'provisioning', 'booting', 'bootstrapping', 'registering')
# Finding kinds, in the order the report lists them.
KINDS = ('destroyed', 'destroy_pending', 'destroy_blocked', 'orphan_deleted', 'destroyed_present', 'debt_settled',
         'debt_open', 'busy',
         'unfinished_create', 'unfinished_fork', 'template_build', 'pool_member', 'adoptable', 'candidate_taken',
         'missing',
         'not_ours', 'unreadable', 'failed', 'orphan', 'foreign', 'other_provider', 'ok')
CONFIG_READERS = 8
# What reconcile does with a resource bound exactly to a destroyed record, on a provider whose ids are unique.
ORPHAN_MODES = ('report', 'delete')
# Why a resource in our scope is not ours, by its marker's verdict.
WHY_NOT_OURS = {
    ownership.ABSENT: 'it carries no ownership marker',
    ownership.FOREIGN: 'its marker is another controller\'s',
    ownership.FORGED: 'its marker names this controller but does not verify (a copy of our tags?)',
    ownership.MISMATCH: 'its marker was made for another resource (copied from one of ours?)',
    ownership.REPLAYED: 'its marker is of an earlier life of the workspace',
    ownership.UNVERIFIED: 'without the controller secret no marker can be checked',
}


def delete_bound(journal, provider, name, resource, claim, task_timeout):
    """Delete ``resource``, left behind by the destroyed workspace ``name``, and confirm it absent; each act is
    recorded under the workspace. Anything short of that keeps cleanup debt (and raises)."""
    rid, where = resource.id, resource.location
    key = provider.resource_key(rid, where)
    detail = {'resource': rid, 'location': where, 'by': 'reconcile'}
    journal.append_event(name, 'dispatched', 'orphan_delete', detail, claim=claim)
    try:
        blocker = provider.delete_blocker(resource)
        if blocker:
            raise EphemeraError(blocker)
        try:
            handle = provider.delete(resource)
            if handle:
                provider.wait(handle, timeout=task_timeout)
        except NotFound:
            pass  # gone already: the look below confirms it

        def probe(remaining):
            return waiter.done() if provider.find(rid, where) is None else waiter.pending()
        label = provider.label(rid, where)
        if not waiter.wait_for(probe, task_timeout, waiter.Backoff(start=0.2, maximum=2.0),
                               what='%s to be gone after its delete' % label).ok:
            raise EphemeraError('%s is still there %d s after its delete. Check its tasks (or activity log) for a '
                                'delete that is slow or failed, then reconcile again.' % (label, task_timeout))
    except EphemeraError as err:
        journal.record_cleanup_debt(name, key, str(err), claim=claim)
        journal.append_event(name, 'observed', 'orphan_delete_failed', dict(detail, error=str(err)), claim=claim)
        raise
    journal.clear_cleanup_debt(name, key, claim=claim)
    journal.append_event(name, 'observed', 'orphan_deleted', detail, claim=claim)


def describe(err):
    """An unexpected error in one line: its type and message, cut short."""
    return ('%s: %s' % (type(err).__name__, err))[:200]


class Finding:
    __slots__ = ('kind', 'workspace', 'vmid', 'node', 'detail')

    def __init__(self, kind, workspace=None, vmid=None, node=None, detail=''):
        self.kind = kind
        self.workspace = workspace
        self.vmid = vmid
        self.node = node
        self.detail = detail

    def as_dict(self):
        return {k: getattr(self, k) for k in self.__slots__}

    def line(self, label=None):
        who = self.workspace or '-'
        if self.vmid and label is not None:
            where = label(self.vmid, self.node)
        else:
            where = 'CT %s on %s' % (self.vmid, self.node) if self.vmid else 'no container'
        return '%-17s %-24s %-20s %s' % (self.kind, who, where, self.detail)


class Reconciler:
    """One reconciliation pass over a journal and a provider (``provider``: a Provider, or the API client of one)."""

    def __init__(self, journal, provider, secret, params, check_mode=False):
        self.journal = journal
        self.provider = registry.bind(provider, secret)
        self.secret = secret
        self.params = params
        self.check_mode = check_mode
        self.pool = params.get('pool') or 'disposable-workspaces'
        self.tag = params.get('tag') or 'ephemera'
        self.orphans = params.get('orphans') or 'report'
        if self.orphans not in ORPHAN_MODES:
            raise EphemeraError('orphans is %r: give report or delete.' % (self.orphans,))
        self.findings = []
        self.resume_create = []
        self.changed = False
        self._ready_configs = {}
        self._destroyed = {}
        self._debts_of = {}

    def _add(self, kind, ws=None, vmid=None, node=None, detail=''):
        self.findings.append(Finding(kind, ws, vmid, node, detail))

    # --------------------------------------------------------------- observe

    def _resources(self):
        return {g['id']: g for g in self.provider.list()}

    def _find(self, vmid, node):
        return self.provider.find(vmid, node)

    def _finds(self, guests):
        """The resource of each listed guest (None when gone, the error when it could not be read), read with
        bounded concurrency."""
        out = {}
        with concurrent.futures.ThreadPoolExecutor(max_workers=CONFIG_READERS) as pool:
            futures = {pool.submit(self._find, g['id'], g['location']): g['id'] for g in guests}
            for future in concurrent.futures.as_completed(futures):
                try:
                    out[futures[future]] = future.result()
                except ProviderError as err:
                    out[futures[future]] = err
                except Exception as err:  # pylint: disable=broad-except
                    # One container that cannot be read is that container's finding, never the whole pass's end.
                    out[futures[future]] = EphemeraError(describe(err))
        return out

    def _verdict(self, resource, name, nonce=ownership.ANY):
        return self.provider.verify(resource, name, nonce)

    # ------------------------------------------------------------------ run

    def run(self):
        cluster = self._resources()
        records = []
        self._elsewhere = set()
        for ws in self.journal.list_workspaces():
            if fleet.lives_here(self.provider, ws):
                records.append(ws)
                continue
            # Another provider's (or another region's) workspace: its resources are not in this listing, so this
            # pass says nothing about it but where it lives; a reconcile of that place (fleet=true) looks at it.
            self._elsewhere.add(ws['name'])
            if ws['status'] != 'destroyed':
                self._add('other_provider', ws['name'], None, None, 'lives on %s; left to a reconcile that talks to '
                          'it' % placing.place_of(ws))
        # Destroyed records by name: a resource bound exactly to one of them is that workspace's, left behind.
        self._destroyed = {ws['name']: ws for ws in records
                           if ws['status'] == 'destroyed' and ws['desired_state'] == 'destroyed'}
        self._debts_of = {}
        for debt in self.journal.cleanup_debts():
            if debt['workspace'] in self._destroyed:
                self._debts_of.setdefault(debt['workspace'], []).append(debt)
        known = set()
        queue = Queue(self.journal)
        busy = self._busy(queue)
        # Every ready workspace's marker is checked: its config is read in one batch, with bounded concurrency.
        self._ready_configs = self._finds([cluster[ws[RESOURCE_ID]] for ws in records
                                           if ws['status'] == 'ready' and ws['desired_state'] != 'destroyed'
                                           and ws[RESOURCE_ID] and ws[RESOURCE_ID] in cluster])
        for ws in records:
            # A destroyed record's id may hold someone else's resource by now: only _record claims it, and only
            # when the marker there is still this workspace's.
            if not (ws['status'] == 'destroyed' and ws['desired_state'] == 'destroyed'):
                known.update(rid for rid in (ws[RESOURCE_ID], ws[CANDIDATE_ID]) if rid)
            if (ws.get('params') or {}).get('build'):
                # A template build's candidate (or a version's container, once built): left to the builds of its
                # template, whose next prepare step removes the candidate of a build that died.
                if ws['status'] not in ('destroyed', 'template'):
                    self._add('template_build', ws['name'], ws[RESOURCE_ID], ws[LOCATION], 'candidate of template %s '
                              'v%s; the next build of that template removes it if its build died'
                              % (ws['params']['build'].get('template'), ws['params']['build'].get('version')))
                continue
            member = (ws.get('params') or {}).get('pool_member')
            if member and ws['status'] != 'destroyed':
                # A warm pool member: its container is accounted for (never an orphan), and its create is the fill's
                # to finish, never a create to resume (it has no request to brief).
                self._add('pool_member', ws['name'], ws[RESOURCE_ID] or ws[CANDIDATE_ID], ws[LOCATION],
                          'member of warm pool %s (%s); pool_fill finishes, refills and deletes members'
                          % (member.get('pool'), self._membership(member.get('pool'), ws['name'])))
                continue
            if ws['name'] in busy:
                self._add('busy', ws['name'], ws[RESOURCE_ID], ws[LOCATION], 'a live run works on it (%s); left to it'
                          % busy[ws['name']])
                continue
            try:
                if self._record(ws, cluster, queue):
                    known.add(ws[RESOURCE_ID])
            except EphemeraError as err:
                self._add('destroy_blocked', ws['name'], ws[RESOURCE_ID], ws[LOCATION], str(err))
            except Exception as err:  # pylint: disable=broad-except
                # One record or container that cannot be looked at never stops the pass for the others.
                self._add('unreadable', ws['name'], ws[RESOURCE_ID], ws[LOCATION], 'could not be checked: %s'
                          % describe(err))
        self._debts(cluster, busy)
        sweep = self.provider.set_sweep(self.journal, self.params, counting=self.counting)
        if sweep is not None:
            self._set_sweep(sweep, records, busy)
        else:
            self._strangers(cluster, known)
        return self.report()

    def _membership(self, pool, name):
        record = pools.member(self.journal, pool, name) if pool else None
        return record['state'] if record else 'no membership record'

    def _busy(self, queue):
        """Workspace name -> who runs it, for workspaces whose queue has a live running entry."""
        busy = {}
        for entry in queue.entries(target_type='workspace', states=['running'], recent=0):
            if entry.get('runner_alive'):
                owner = entry.get('owner') or {}
                busy[entry['target']] = '%s #%d by %s pid %s' % (entry['kind'], entry['id'], owner.get('host'),
                                                                 owner.get('pid'))
        return busy

    def _record(self, ws, cluster, queue):
        """Look at one record; True when it turned out to account for a container the record no longer names as
        live (a destroyed workspace whose container is still there)."""
        name = ws['name']
        vmid = ws[RESOURCE_ID]
        node = ws[LOCATION]
        present = cluster.get(vmid) if vmid else None
        nonce = ownership.record_nonce(ws)
        if ws['desired_state'] == 'destroyed':
            if ws['status'] == 'destroyed':
                if not present:
                    self._settle(ws, cluster)
                    return
                if self.provider.sweeps_sets:
                    return True  # its set is judged by the provider's set sweep (_set_sweep)
                resource = self._find(vmid, present['location'])
                verdict = self._verdict(resource, name, nonce)
                if verdict not in (ownership.VERIFIED, ownership.REPLAYED):
                    return False  # the VMID went to another container since: _strangers reports it if it is ours to see
                if verdict == ownership.VERIFIED and self.provider.unique_ids:
                    self._bound(ws, resource, 'its id is the record\'s')
                    return True
                # Never deleted: the destruction saw its container gone, and a marker can be copied or restored.
                which = 'a genuine' if verdict == ownership.VERIFIED else 'an earlier'
                self._add('destroyed_present', name, vmid, present['location'],
                          'destroyed in the journal, yet a %s with %s marker of it is there (a restored backup or a '
                          'copied marker?); not touched: inspect it, and %s if it should go'
                          % (self.provider.noun, which, self._removal(vmid, present['location'])))
                return True
            self._destroy(ws, queue)
            return False
        if ws['status'] in IN_PROGRESS:
            self._unfinished(ws, cluster)
            return
        if ws['status'] == 'failed':
            failure = ws['failure'] or {}
            self._add('failed', name, vmid, node, 'failed at %s: %s' % (failure.get('step'),
                                                                        (failure.get('message') or '')[:160]))
            return
        if ws['status'] == 'ready':
            if not present:
                self._add('missing', name, vmid, node, 'ready in the journal, but the %s is gone' % self.provider.noun)
                return
            resource = self._ready_configs.get(vmid)
            if isinstance(resource, Exception):
                self._add('unreadable', name, vmid, present['location'], 'its config could not be read: %s' % resource)
                return
            verdict = self._verdict(resource, name, nonce)
            if verdict != ownership.VERIFIED:
                self._add('not_ours', name, vmid, present['location'], 'the %s at this %s is not ours (%s)'
                          % (self.provider.noun, self.provider.id_noun, verdict))
                return
            self._add('ok', name, vmid, present['location'], 'ready; %s' % present.get('status'))

    def _unfinished(self, ws, cluster):
        name = ws['name']
        parent = unadopted_fork(self.journal, ws)
        if parent:
            # Its fork adopts it or destroys it, all its siblings with it: a create resumed alone would brief it.
            self._add('unfinished_fork', name, ws[RESOURCE_ID] or ws[CANDIDATE_ID], ws[LOCATION],
                      'a child of an unfinished fork of %s: run that fork again, or undo it with fork_abandon=true'
                      % parent)
            return
        detail = 'create stopped at status %s (done: %s)' % (ws['status'], ', '.join(sorted(ws['progress'])) or '-')
        candidate = ws[CANDIDATE_ID]
        if not ws[RESOURCE_ID] and candidate:
            guest = cluster.get(candidate)
            if guest:
                verdict = self._verdict(self._find(candidate, guest['location']), name, ownership.record_nonce(ws))
                if verdict == ownership.VERIFIED:
                    self._add('adoptable', name, candidate, guest['location'],
                              'our clone exists with a verifying marker; resuming the create adopts it')
                else:
                    self._add('candidate_taken', name, candidate, guest['location'],
                              'the candidate %s holds a %s that is not ours (%s); the create takes another'
                              % (self.provider.id_noun, self.provider.noun, verdict))
        for step, upid in sorted((ws[TASKS] or {}).items()):
            try:
                task = self.provider.task_status(upid)
                detail += '; %s task %s' % (step, task.exitstatus or task.status)
            except EphemeraError:
                detail += '; %s task unknown' % step
        self._add('unfinished_create', name, ws[RESOURCE_ID] or candidate, ws[LOCATION], detail)
        self.resume_create.append(name)

    def _destroy(self, ws, queue):
        """Continue a decided destruction until the container is absent, under the workspace's queue."""
        name = ws['name']
        if self.check_mode:
            self._add('destroy_pending', name, ws[RESOURCE_ID], ws[LOCATION], 'would continue the destruction')
            return
        failpoint.enter(name, 'reconcile.destroy')
        operation = Operation.claim_if_free(self.journal, 'destroy', name, 'reconcile found the workspace busy',
                                            source='schedule', requested_by='reconcile')
        if operation is None:
            # Someone is ahead: reconcile never waits behind other runs.
            self._add('busy', name, ws[RESOURCE_ID], ws[LOCATION], 'another run is queued on it; left to it')
            return
        flow_params = dict(name=name, shutdown_timeout=self.params.get('shutdown_timeout', 60),
                           task_timeout=self.params.get('task_timeout', 300),
                           lock_timeout=self.params.get('lock_timeout', 60))
        flow = DestroyFlow(self.journal, self.provider, flow_params, self.secret, claim=operation.claim)

        def step(name_of_step):
            def act():
                failpoint.enter(name, 'destroy.' + name_of_step)
                flow.run(name_of_step)
            return 'reconcile: ' + name_of_step, act

        steps = [step(each) for each in DESTROY_STEPS]
        self.changed = True
        operation.run(steps, {'workspace': name, 'status': 'destroyed'})
        self._add('destroyed', name, ws[RESOURCE_ID], ws[LOCATION], 'pending destruction finished')

    def _debts(self, cluster, busy):
        for debt in self.journal.cleanup_debts(due_only=True):
            if debt['workspace'] in self._elsewhere:
                continue
            try:
                self._debt(debt, cluster, busy)
            except Exception as err:  # pylint: disable=broad-except
                self._add('unreadable', debt['workspace'], None, None, 'cleanup debt %s could not be checked: %s'
                          % (debt['resource'], describe(err)))

    def _debt(self, debt, cluster, busy):
        name, resource = debt['workspace'], debt['resource']
        if name in busy:
            return
        ws = self.journal.get_workspace(name)
        if ws is not None and ws['desired_state'] == 'destroyed':
            return  # its destruction (above) settles it
        vmid, node = self.provider.parse_resource_key(resource)
        if vmid is None:
            self._add('debt_open', name, None, None, '%s: %s' % (resource, debt['last_error']))
            return
        guest = cluster.get(vmid)
        if guest is None:
            if not self.check_mode:
                self.journal.clear_cleanup_debt(name, resource)
                self.changed = True
            self._add('debt_settled', name, vmid, node, 'the %s is gone' % self.provider.noun)
            return
        if self._verdict(self._find(vmid, guest['location']), name) != ownership.VERIFIED:
            self._add('debt_open', name, vmid, guest['location'], 'not deleted: its marker does not verify')
            return
        said = 'attempt %d failed: %s' % (debt['attempts'], debt['last_error'][:160])
        self._add('debt_open', name, vmid, guest['location'], said)

    def _strangers(self, cluster, known):
        """Pool or tag members the journal does not know: ours (orphans) or foreign. Reported, never touched."""
        members = [g for vmid, g in sorted(cluster.items()) if vmid not in known and
                   self.provider.in_scope(g, self.pool, self.tag)]
        resources = self._finds(members)
        for guest in members:
            vmid, node = guest['id'], guest['location']
            resource = resources.get(vmid)
            if isinstance(resource, Exception):
                self._add('foreign', None, vmid, node, 'config unreadable: %s' % resource)
                continue
            try:
                self._stranger(resource, vmid, node)
            except Exception as err:  # pylint: disable=broad-except
                self._add('unreadable', None, vmid, node, 'its marker could not be checked: %s' % describe(err))

    def _removal(self, vmid, node):
        """How an operator removes the resource at ``vmid`` after a look: the destroy playbook deletes an orphan by
        VMID; an instance id is not one."""
        if isinstance(vmid, int):
            return 'remove it with destroy vmid=%s confirm_orphan=true' % vmid
        return 'remove %s by hand' % self.provider.label(vmid, node)

    def _stranger(self, resource, vmid, node):
        name = self.provider.marker_fields(resource).get('workspace')
        verdict = self._verdict(resource, name) if name else self._verdict(resource, '')
        gone = self._destroyed.get(name) if name and verdict == ownership.VERIFIED else None
        if gone is not None and self.provider.unique_ids and self._candidate_of(gone, resource):
            self._bound(gone, resource, 'it is the one resource of the record\'s candidate id %s' % gone[CANDIDATE_ID])
            return
        if name and verdict == ownership.VERIFIED:
            self._add('orphan', name, vmid, node, 'ours (marker verifies) but unknown to the journal; '
                      '%s if it should go, or restore the journal' % self._removal(vmid, node))
        else:
            # The name a description claims is not shown: anyone may write it.
            why = ' (%s)' % verdict
            if self.provider.unique_ids:
                why += ': %s; reported, never touched' % WHY_NOT_OURS.get(verdict, 'its marker does not prove it ours')
            self._add('foreign', None, vmid, node, 'in the pool but not ours' + why)

    # --------------------------------------------------------------- resources left behind by destroyed records

    def _candidate_of(self, ws, resource):
        """True when ``resource`` is the one resource of the destroyed record's candidate id (on EC2, the instance
        launched with the client token the record holds), in the record's location, and the record names no other."""
        if ws[RESOURCE_ID] not in (None, resource.id) or not ws[CANDIDATE_ID]:
            return False
        if ws[LOCATION] and resource.location != ws[LOCATION]:
            return False
        if self.provider.verify(resource, ws['name'], ownership.record_nonce(ws)) != ownership.VERIFIED:
            return False
        found = self.provider.find(ws[CANDIDATE_ID], ws[LOCATION])
        return found is not None and found.id == resource.id

    def _bound(self, ws, resource, how):
        """A resource bound exactly to the destroyed record ``ws`` (``how`` says by what): deleted in delete mode,
        else reported."""
        name, rid, where = ws['name'], resource.id, resource.location
        said = ('ours, bound to the destroyed record of %s (%s, its marker verifies for that life of it); ids are '
                'never reused here, so it was left behind (a create whose answer was lost, say)' % (name, how))
        if self.orphans != 'delete' or self.check_mode:
            self._add('destroyed_present', name, rid, where, said + (
                '; would delete it' if self.orphans == 'delete' else
                '; not touched: reconcile with orphans=delete deletes it'))
            return
        failpoint.enter(name, 'reconcile.orphan_delete')
        operation = Operation.claim_if_free(self.journal, 'destroy', name, 'reconcile found the workspace busy',
                                            source='schedule', requested_by='reconcile')
        if operation is None:
            self._add('busy', name, rid, where, 'another run is queued on it; left to it')
            return
        # A provider that keeps its progress in the journal (Azure) writes it under this run's claim.
        self.provider.use_journal(self.journal, operation.claim, name)
        self.changed = True
        try:
            delete_bound(self.journal, self.provider, name, resource, operation.claim,
                         self.params.get('task_timeout', 300))
        except EphemeraError as err:
            operation.failed(str(err))
            self._add('destroy_blocked', name, rid, where, '%s; not deleted: %s (kept as cleanup debt)' % (said, err))
            return
        operation.succeeded({'workspace': name, 'status': 'destroyed', 'orphan': rid})
        self._add('orphan_deleted', name, rid, where, said + '; deleted, and observed absent')

    # --------------------------------------------------------------- a provider's set sweep with its quarantine

    @property
    def counting(self):
        """True when this pass may count an inventory in a set's quarantine: it may delete (orphans=delete) and is
        no check."""
        return self.orphans == 'delete' and not self.check_mode

    def _set_sweep(self, sweep, records, busy):
        """A provider whose workspaces are sets of resources: every group of sets in its scope judged from one
        complete inventory (Provider.set_sweep). Sets of live workspaces are left to their records; a set bound to a
        destroyed record is deleted with orphans=delete once its quarantine passed; every other group is reported
        with its verdict and why, never touched."""
        counting = self.counting
        destroyed = {ws['name']: ws for ws in records}
        for group in sweep.run(records):
            if group.live:
                continue
            try:
                self._set_group(sweep, group, destroyed.get(group.holder), busy, counting)
            except Exception as err:  # pylint: disable=broad-except
                self._add('unreadable', group.holder, group.id, group.location, 'set %s could not be looked at: %s'
                          % (group.base, describe(err)))

    def _set_group(self, sweep, group, ws, busy, counting):
        said = sweep.sentence(group)
        if ws is not None:
            name = ws['name']
            if name in busy:
                self._add('busy', name, group.id, group.location, 'a live run works on it (%s); left to it' % busy[name])
                return
            if group.deletable and counting:
                if not sweep.unchanged(group):
                    self._add('destroyed_present', name, group.id, group.location, 'set %s of the destroyed workspace; '
                              '%s; but it changed right before its deletion: its quarantine started again, nothing '
                              'was deleted' % (group.base, said))
                    return
                resource = self.provider.find(group.id, group.location)
                if resource is None:
                    self._add('destroyed_present', name, group.id, group.location, 'set %s was gone before its deletion'
                              % group.base)
                    return
                self._bound(ws, resource, 'set %s, %s' % (group.base, said))
                if self.findings and self.findings[-1].kind == 'orphan_deleted':
                    sweep.deleted(group)
                return
            if group.deletable:
                more = '; would delete it' if self.orphans == 'delete' else '; reconcile with orphans=delete deletes it'
            elif group.quarantined:
                more = '' if counting else ' (this report counted no inventory: only orphans=delete does)'
            else:
                more = '; it is left for a person'
            self._add('destroyed_present', name, group.id, group.location, 'set %s of the destroyed workspace; %s%s'
                      % (group.base, said, more))
            return
        if group.marker == ownership.VERIFIED:
            self._add('orphan', group.named, group.id, group.location, 'set %s is ours (its marker verifies) and no '
                      'record of this journal holds it; %s; reported, never touched' % (group.base, said))
            return
        self._add('foreign', None, group.id, group.location, 'set %s is not ours (%s): %s; %s; reported, never touched'
                  % (group.base, group.marker, WHY_NOT_OURS.get(group.marker, 'its marker does not prove it ours'),
                     said))

    def _settle(self, ws, cluster):
        """Settle the cleanup debt a destroyed record keeps for a resource left behind once that resource is
        observed gone (a look through the provider, not just the listing)."""
        for debt in self._debts_of.get(ws['name'], ()):
            rid, where = self.provider.parse_resource_key(debt['resource'])
            if rid is None or rid in cluster:
                continue
            try:
                if self.provider.find(rid, where) is not None:
                    continue
            except ProviderError:
                continue
            if not self.check_mode:
                self.journal.clear_cleanup_debt(ws['name'], debt['resource'])
                self.changed = True
            self._add('debt_settled', ws['name'], rid, where, 'the resource left behind is gone')

    # --------------------------------------------------------------- report

    def report(self):
        order = {k: i for i, k in enumerate(KINDS)}
        findings = sorted(self.findings, key=lambda f: (order.get(f.kind, 99), f.workspace or '', f.vmid or 0))
        counts = {k: 0 for k in KINDS}
        for finding in findings:
            counts[finding.kind] += 1
        summary = ', '.join('%d %s' % (n, k) for k, n in counts.items() if n) or 'nothing to report'
        lines = ['reconcile: %s' % summary] + [f.line(self.provider.label) for f in findings if f.kind != 'ok']
        return {'counts': counts, 'findings': [f.as_dict() for f in findings], 'report': lines,
                'resume_create': sorted(set(self.resume_create))}


class FleetReconcile(fleet.FleetRun):
    """Reconcile every place the journal holds workspaces in (fleet.places), one after another: each place's
    findings (with their ``place``), report lines and creates to resume, gathered."""

    kind_key = 'kind'

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.report_lines = []
        self.resume_create = []

    def sweep(self, provider, params):
        reconciler = Reconciler(self.journal, provider, self.secret, params, check_mode=self.check_mode)
        result = reconciler.run()
        findings = [f for f in result['findings'] if f['kind'] != 'other_provider']
        label = fleet.place_of_provider(provider)
        self.report_lines += ['[%s] %s' % (label, line) for line in result['report']
                              if not line.startswith('other_provider ')]
        if provider.name == registry.provider_of(self.params):
            # A create is resumed by a run of its own provider's settings: the others' unfinished creates are
            # findings (unfinished_create), for a reconcile with that provider to resume.
            self.resume_create += result['resume_create']
        return reconciler.changed, findings

    def result(self, findings):
        counts = {k: 0 for k in KINDS + ('unreachable',)}
        counts.update(placing.counts_of(findings, 'kind'))
        summary = ', '.join('%d %s' % (n, k) for k, n in counts.items() if n) or 'nothing to report'
        unreachable = ['[%s] unreachable: %s' % (f['place'], f['detail']) for f in findings
                       if f['kind'] == 'unreachable']
        return {'counts': counts, 'findings': findings, 'places': self.by_place,
                'report': ['reconcile (the fleet): %s' % summary] + self.report_lines + unreachable,
                'resume_create': sorted(set(self.resume_create))}
