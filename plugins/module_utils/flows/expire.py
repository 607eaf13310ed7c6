# -*- coding: utf-8 -*-
# Copyright: ephemera.workspaces contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The expiry sweep: the agents' activity counts as heartbeats, then expired workspaces are released.

A sweep works from the journal only (the cluster is asked about the workspaces it releases; only the
confirmation that a deleted container is gone reads the cluster's list, in case it moved), so that it
can run every few minutes:

1. **Activity.** Each ready workspace whose lease still runs is asked for its agent's activity: one
   SSH round trip to its runner, bounded by ``activity_timeout``, ``parallel`` at once. The answer is
   recorded by the thread that asked, while the other asks go on (``activity`` then shows what the
   agent does now, not what it did at its brief), and
   ``active`` or ``blocked`` touches the lease, as a heartbeat would (never past its ttl, never
   after it expired). A workspace that does not answer is left as it was.
2. **Release.** At most ``limit`` workspaces whose lease expired (and not retained), or whose failed
   cleanup is due for a retry, are claimed through their queue (a busy one is left for the next
   sweep) and destroyed through the release path, up to ``parallel`` at once: their unsaved work archived first, then the
   ownership-checked delete confirmed by absence. A failure keeps the workspace, counts the attempt,
   keeps the error and retries 5 minutes later; success clears the failure and records when the
   cleanup completed. The record stays, with its identity, for audit.
"""

import threading
import time
from concurrent.futures import ThreadPoolExecutor

from ansible_collections.ephemera.workspaces.plugins.module_utils.providers import registry
from ansible_collections.ephemera.workspaces.plugins.module_utils.core import failpoint
from ansible_collections.ephemera.workspaces.plugins.module_utils.core import lease as leasing
from ansible_collections.ephemera.workspaces.plugins.module_utils.core.errors import EphemeraError
from ansible_collections.ephemera.workspaces.plugins.module_utils.flows import agent as agent_flow
from ansible_collections.ephemera.workspaces.plugins.module_utils.flows import fleet
from ansible_collections.ephemera.workspaces.plugins.module_utils.flows import placing
from ansible_collections.ephemera.workspaces.plugins.module_utils.flows import lease as lease_flow
from ansible_collections.ephemera.workspaces.plugins.module_utils.flows import pool as pool_flow
from ansible_collections.ephemera.workspaces.plugins.module_utils.flows.archive import ArchiveFlow
from ansible_collections.ephemera.workspaces.plugins.module_utils.flows.destroy import STEPS as DESTROY_STEPS, DestroyFlow
from ansible_collections.ephemera.workspaces.plugins.module_utils.operation import Operation

DEFAULT_LIMIT = 16


# Why a workspace is due: its lease expired ('expired'), its failed cleanup is due again ('retry') or its retention
# is over ('retention ended'), all of which release it with delete; or its lease expired and it is kept ('kept'),
# which retains it (released without delete, until its retention ends).
KEPT = 'kept'


def due(ws, now):
    """Why the sweep acts on ``ws`` now ('expired', 'retry', 'retention ended', 'kept'), or None."""
    terms = ws.get('lease')
    cleanup = ws.get('cleanup') or {}
    if ws['status'] == 'destroyed':
        return None
    if cleanup.get('retained'):
        # Retention has an end, whether the workspace was released without delete or kept past its lease.
        return 'retention ended' if leasing.retention_ended(cleanup, now) else None
    if not terms:
        return None
    if cleanup.get('cleanup_retry_at') is not None:
        return 'retry' if leasing.retry_due(cleanup, now) else None
    if not leasing.is_expired(terms, now):
        return None
    return 'expired' if leasing.auto_release(terms) or ws['desired_state'] == 'destroyed' else KEPT


class ExpirySweep:
    """One sweep over the journal. ``provider`` a Provider or its API client, signing with ``secret``; ``params``
    the module's options (limit, parallel, activity_timeout, the archive's and the shutdown's)."""

    def __init__(self, journal, provider, params, secret, check_mode=False, clock=time.time):
        self.journal = journal
        self.provider = registry.bind(provider, secret)
        self.params = params
        self.secret = secret
        self.check_mode = check_mode
        self.clock = clock
        self.entries = []
        self.changed = False

    @staticmethod
    def _entry(name, action, detail, **extra):
        return dict(extra, workspace=name, action=action, detail=detail)

    def _add(self, name, action, detail, **extra):
        self.entries.append(self._entry(name, action, detail, **extra))

    def run(self):
        self.look_at_activity()
        now = self.clock()
        candidates = [(ws, due(ws, now)) for ws in self.journal.list_workspaces()]
        for ws, why in candidates:
            if why and not self._here(ws):
                self._add(ws['name'], 'other_provider', 'due (%s); it lives on %s, left to a sweep that talks to it'
                          % (why, placing.place_of(ws)))
        candidates = sorted([(ws, why) for ws, why in candidates if why and self._here(ws)],
                            key=lambda pair: (pair[0].get('lease') or {}).get('expires_at') or 0)
        limit = self.params.get('limit') or DEFAULT_LIMIT
        self.release_all(candidates[:limit])
        for ws, why in candidates[limit:]:
            self._add(ws['name'], 'deferred', 'due (%s), beyond this sweep\'s limit of %d' % (why, limit))
        return self.entries

    def _here(self, ws):
        """True when the workspace lives on the provider this sweep talks to (a record without one is Proxmox's),
        and, for a provider whose connection serves one location, in that location."""
        return self.provider is None or fleet.lives_here(self.provider, ws)

    # ------------------------------------------------------------------ activity

    def look_at_activity(self):
        """Ask every ready workspace whose lease runs for its agent's activity, up to ``parallel`` at once, and record
        each answer in the thread that asked, on a journal connection of that thread's own: the journal writes and
        the label writes overlap the other asks. The entries keep the order of the journal's list."""
        now = self.clock()
        live = [ws for ws in self.journal.list_workspaces(status='ready')
                if ws.get('lease') and ws['desired_state'] == 'present' and not leasing.is_expired(ws['lease'], now)
                and not (ws.get('cleanup') or {}).get('retained') and self._here(ws)]
        if not live:
            return
        width = max(1, min(self.params.get('parallel') or 8, len(live)))
        if width == 1:
            self.entries.extend(self._look(self.journal, ws) for ws in live)
            return
        own, opened, lock = threading.local(), [], threading.Lock()

        def look(ws):
            journal = getattr(own, 'journal', None)
            if journal is None:
                with lock:
                    journal = own.journal = self.journal.reopen()
                    opened.append(journal)
                if self.provider is not None:
                    # A label write that keeps state in the journal (Azure's sets) goes through this connection too.
                    self.provider.use_journal(journal)
            return self._look(journal, ws)
        try:
            with ThreadPoolExecutor(max_workers=width) as pool:
                self.entries.extend(pool.map(look, live))
        finally:
            for journal in opened:
                journal.close()

    def _look(self, journal, ws):
        """Ask one workspace's runner and record its answer on ``journal``; the sweep's entry for it."""
        return self._record_activity(journal, ws['name'], self._activity(ws))

    def _activity(self, ws):
        """The runner's answer to a ping ({'activity': ..., 'agent': ...}), or {'error': ...}; one bounded round trip."""
        return agent_flow.ask(ws, key_file=self.params.get('ssh_private_key'),
                              timeout=self.params.get('activity_timeout') or 10)

    def _record_activity(self, journal, name, answer):
        activity = answer.get('activity')
        if activity not in agent_flow.ACTIVITIES:
            return self._entry(name, 'no_answer', 'activity unknown: %s'
                               % (answer.get('error') or 'the runner did not say'))
        ws, touched = agent_flow.record(journal, name, answer, now=self.clock(), touch_lease=True,
                                        check_mode=self.check_mode)
        if touched:
            lease_flow.write_labels(journal, self.provider, ws)
        error = ((ws.get('facts') or {}).get('agent') or {}).get('error') if not self.check_mode else None
        return self._entry(name, 'activity', '%s%s; expires at %s' % (
            activity, ' (stopped on %s)' % error.get('kind') if error else '',
            leasing.format_time(leasing.compute_expires_at(ws['lease']))), activity=activity)

    # ------------------------------------------------------------------ release

    def release_all(self, due):
        """Release (or retain) every ``(ws, why)`` of ``due``, up to ``parallel`` at once, each through its own queue
        and a journal connection of its own; the entries keep the order of ``due`` (earliest expiry first)."""
        width = max(1, min(self.params.get('parallel') or 8, len(due)))
        if width == 1:
            for ws, why in due:
                self.release(ws, why)
            return
        workers = [self._worker() for dummy in due]
        try:
            with ThreadPoolExecutor(max_workers=width) as pool:
                for done in [pool.submit(worker.release, ws, why) for worker, (ws, why) in zip(workers, due)]:
                    done.result()
        finally:
            for worker in workers:
                worker.journal.close()
                self.entries.extend(worker.entries)
                self.changed = self.changed or worker.changed

    def _worker(self):
        """A sweep like this one for one release in a thread: the same provider and options, its own journal
        connection (a connection serves one thread at a time) and its own entries."""
        worker = ExpirySweep(self.journal.reopen(), None, self.params, self.secret, check_mode=self.check_mode,
                             clock=self.clock)
        worker.provider = self.provider
        return worker

    def release(self, ws, why):
        name = ws['name']
        if why == KEPT:
            return self.retain(ws)
        if self.check_mode:
            self._add(name, 'would_release', 'would archive its work and destroy it (%s)' % why)
            return
        failpoint.enter(name, 'expire.release')
        member = pool_flow.is_member(ws)
        if member and not pool_flow.release_member(self.journal, ws, 'its lease expired (%s)' % why):
            # A create claimed it meanwhile: it is that workspace's now.
            self._add(name, 'busy', 'a create took this warm pool member meanwhile; left to it')
            return
        operation = self._claim(ws, why)
        if operation is None:
            return
        # A warm pool member holds no work of anyone's: nothing to archive.
        params = dict(self.params, name=name, claim=operation.claim, archive=not member, discard_unsaved_work=False)
        flow = DestroyFlow(self.journal, self.provider, params, self.secret, claim=operation.claim)

        def guard():
            # A child of an unfinished fork is the fork's to destroy: refused before its work is archived.
            flow.refuse_unfinished_fork()
            if member:
                return
            seen = flow.run('inspect').extra
            failpoint.enter(name, 'destroy.guard')
            ArchiveFlow(self.journal, params, claim=operation.claim).guard(seen['present'], seen['running'],
                                                                           noun=flow.provider.noun)

        def step(each):
            def act():
                failpoint.enter(name, 'destroy.' + each)
                # Each step reads the record afresh, as a step module does: the guard's archive wrote to it.
                flow.ws = self.journal.get_workspace(name)
                flow.run(each)
            return 'expire: ' + each, act

        try:
            operation.run([('expire: archive guard', guard)] + [step(each) for each in DESTROY_STEPS],
                          {'workspace': name, 'status': 'destroyed', 'expired': why})
        except EphemeraError as err:
            self._settle(name, err, operation.claim)
            self._add(name, 'failed', str(err))
            return
        self._settle(name, None, None)
        if member:
            pool_flow.forget_member(self.journal, ws)
            self._add(name, 'released', 'warm pool member %s, destroyed (%s)' % (member, why))
            return
        self._add(name, 'released', 'archived and destroyed (%s)' % why)

    def _claim(self, ws, why):
        """The workspace's destroy claimed through its queue, with the event that says why (None, noted as busy, when
        another run is queued on it)."""
        name = ws['name']
        operation = Operation.claim_if_free(self.journal, 'destroy', name, 'the expiry sweep found it busy',
                                            source='schedule', requested_by='expire')
        if operation is None:
            self._add(name, 'busy', 'another run is queued on it; the next sweep looks again')
            return None
        self.changed = True
        self.journal.append_event(name, 'observed', 'expired', dict(why=why, **self._expiry(ws)), claim=operation.claim)
        return operation

    @staticmethod
    def _expiry(ws):
        """When the workspace's lease (or its retention) ended, for the event that says why it goes."""
        until = leasing.retained_until(ws.get('cleanup') or {})
        if until is not None:
            return {'retained_until': leasing.format_time(until)}
        return {'expires_at': leasing.format_time(leasing.compute_expires_at(ws['lease']))}

    def retain(self, ws):
        """A kept workspace whose lease ended: released without delete (the destroy's retain step, through its queue),
        until its retention ends; the sweep that comes after that deletes it."""
        name = ws['name']
        if self.check_mode:
            self._add(name, 'would_retain', 'kept (keep=true): would release it without delete, for %s s'
                      % leasing.validate_retain_ttl(self.params.get('retain_ttl')))
            return
        failpoint.enter(name, 'expire.retain')
        operation = self._claim(ws, KEPT)
        if operation is None:
            return
        flow = DestroyFlow(self.journal, self.provider, dict(self.params, name=name, claim=operation.claim), self.secret,
                           claim=operation.claim)
        outcome = {}

        def retain():
            outcome['result'] = flow.run('retain')
        try:
            operation.run([('expire: retain', retain)], {'workspace': name, 'status': 'retained', 'expired': KEPT})
        except EphemeraError as err:
            self._add(name, 'failed', str(err))
            return
        self._add(name, 'retained', 'kept (keep=true): released without delete until %s'
                  % outcome['result'].extra.get('retained_until'))

    def _settle(self, name, err, claim):
        """Record the cleanup's outcome on the workspace: the attempt failed (retry in 5 minutes), or it completed."""
        now = self.clock()

        def settle(ws):
            record = dict(ws.get('cleanup') or {})
            record = leasing.cleanup_failed(record, err, now) if err is not None else leasing.cleanup_succeeded(record, now)
            return dict(cleanup=record), {
                'kind': 'observed', 'action': 'cleanup_failed' if err is not None else 'cleanup_completed',
                'detail': {k: v for k, v in record.items() if v is not None}}
        # Read and written holding the record: a heartbeat or an activity look beside it waits instead of racing.
        self.journal.amend_workspace(name, settle)


class FleetSweep(fleet.FleetRun):
    """An expiry sweep of every place the journal holds workspaces in (fleet.places), one after another."""

    def sweep(self, provider, params):
        sweep = ExpirySweep(self.journal, provider, params, self.secret, check_mode=self.check_mode, clock=self.clock)
        entries = [e for e in sweep.run() if e['action'] != 'other_provider']
        return sweep.changed, entries
