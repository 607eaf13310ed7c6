# -*- coding: utf-8 -*-
# Copyright: ephemera.workspaces contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
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
"""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import concurrent.futures

from ansible_collections.ephemera.workspaces.plugins.module_utils.core import failpoint
from ansible_collections.ephemera.workspaces.plugins.module_utils.core import ownership
from ansible_collections.ephemera.workspaces.plugins.module_utils.flows.destroy import (
    STEPS as DESTROY_STEPS,
    DestroyFlow,
    resource_name,
)
from ansible_collections.ephemera.workspaces.plugins.module_utils.core.errors import EphemeraError
from ansible_collections.ephemera.workspaces.plugins.module_utils.providers.proxmox.client import PveApiError, PveNotFound
from ansible_collections.ephemera.workspaces.plugins.module_utils.core.queue import Queue
from ansible_collections.ephemera.workspaces.plugins.module_utils.operation import Operation

IN_PROGRESS = ('requested', 'provisioning', 'booting', 'bootstrapping', 'registering')
# Finding kinds, in the order the report lists them.
KINDS = ('destroyed', 'destroy_pending', 'destroy_blocked', 'debt_settled', 'debt_open', 'busy', 'unfinished_create',
         'adoptable', 'candidate_taken', 'missing', 'not_ours', 'unreadable', 'failed', 'orphan', 'foreign', 'ok')
CONFIG_READERS = 8


class Finding:
    __slots__ = ('kind', 'workspace', 'vmid', 'node', 'detail')

    def __init__(self, kind, workspace=None, vmid=None, node=None, detail=''):
        self.kind = kind
        self.workspace = workspace
        self.vmid = vmid
        self.node = node
        self.detail = detail

    def as_dict(self):
        return dict((k, getattr(self, k)) for k in self.__slots__)

    def line(self):
        who = self.workspace or '-'
        where = 'CT %s on %s' % (self.vmid, self.node) if self.vmid else 'no container'
        return '%-17s %-24s %-20s %s' % (self.kind, who, where, self.detail)


class Reconciler:
    """One reconciliation pass over a journal and a cluster."""

    def __init__(self, journal, client, secret, params, check_mode=False):
        self.journal = journal
        self.client = client
        self.secret = secret
        self.params = params
        self.check_mode = check_mode
        self.controller = ownership.controller_id(secret)
        self.pool = params.get('pool') or 'disposable-workspaces'
        self.tag = params.get('tag') or 'ephemera'
        self.findings = []
        self.resume_create = []
        self.changed = False
        self._ready_configs = {}

    def _add(self, kind, ws=None, vmid=None, node=None, detail=''):
        self.findings.append(Finding(kind, ws, vmid, node, detail))

    # --------------------------------------------------------------- observe

    def _resources(self):
        guests = self.client.get('/cluster/resources', type='vm') or []
        return dict((int(g['vmid']), g) for g in guests if g.get('type') == 'lxc' and not int(g.get('template') or 0))

    def _config(self, vmid, node):
        try:
            return self.client.get('/nodes/%s/lxc/%d/config' % (node, vmid))
        except PveNotFound:
            return None

    def _configs(self, guests):
        """Config of each (vmid, node), read with bounded concurrency."""
        out = {}
        with concurrent.futures.ThreadPoolExecutor(max_workers=CONFIG_READERS) as pool:
            futures = dict((pool.submit(self._config, g['vmid'], g['node']), int(g['vmid'])) for g in guests)
            for future in concurrent.futures.as_completed(futures):
                try:
                    out[futures[future]] = future.result()
                except PveApiError as err:
                    out[futures[future]] = err
        return out

    def _verdict(self, config, name, vmid):
        return ownership.verify((config or {}).get('description'), self.secret, self.controller, name, vmid)

    # ------------------------------------------------------------------ run

    def run(self):
        cluster = self._resources()
        records = self.journal.list_workspaces()
        known = set()
        queue = Queue(self.journal)
        busy = self._busy(queue)
        # Every ready workspace's marker is checked: its config is read in one batch, with bounded concurrency.
        self._ready_configs = self._configs([cluster[int(ws['vmid'])] for ws in records
                                             if ws['status'] == 'ready' and ws['desired_state'] != 'destroyed'
                                             and ws['vmid'] and int(ws['vmid']) in cluster])
        for ws in records:
            # A destroyed record's VMID may hold someone else's container by now: only _record claims it, and only
            # when the marker there is still this workspace's.
            if not (ws['status'] == 'destroyed' and ws['desired_state'] == 'destroyed'):
                known.update(int(vmid) for vmid in (ws['vmid'], ws['candidate_vmid']) if vmid)
            if ws['name'] in busy:
                self._add('busy', ws['name'], ws['vmid'], ws['node'], 'a live run works on it (%s); left to it'
                          % busy[ws['name']])
                continue
            try:
                if self._record(ws, cluster, queue):
                    known.add(int(ws['vmid']))
            except EphemeraError as err:
                self._add('destroy_blocked', ws['name'], ws['vmid'], ws['node'], str(err))
        self._debts(cluster, busy)
        self._strangers(cluster, known)
        return self.report()

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
        vmid = ws['vmid']
        present = cluster.get(int(vmid)) if vmid else None
        if ws['desired_state'] == 'destroyed':
            if ws['status'] == 'destroyed':
                if not present:
                    return
                if self._verdict(self._config(vmid, present['node']), name, vmid) != ownership.VERIFIED:
                    return False  # the VMID went to another container since: _strangers reports it if it is ours to see
                self._destroy(ws, queue)
                return True
            self._destroy(ws, queue)
            return False
        if ws['status'] in IN_PROGRESS:
            self._unfinished(ws, cluster)
            return
        if ws['status'] == 'failed':
            failure = ws['failure'] or {}
            self._add('failed', name, vmid, ws['node'], 'failed at %s: %s' % (failure.get('step'),
                                                                              (failure.get('message') or '')[:160]))
            return
        if ws['status'] == 'ready':
            if not present:
                self._add('missing', name, vmid, ws['node'], 'ready in the journal, but the container is gone')
                return
            config = self._ready_configs.get(int(vmid))
            if isinstance(config, Exception):
                self._add('unreadable', name, vmid, present['node'], 'its config could not be read: %s' % config)
                return
            verdict = self._verdict(config, name, vmid)
            if verdict != ownership.VERIFIED:
                self._add('not_ours', name, vmid, present['node'], 'the container at this VMID is not ours (%s)'
                          % verdict)
                return
            self._add('ok', name, vmid, present['node'], 'ready; %s' % present.get('status'))

    def _unfinished(self, ws, cluster):
        name = ws['name']
        detail = 'create stopped at status %s (done: %s)' % (ws['status'], ', '.join(sorted(ws['progress'])) or '-')
        candidate = ws['candidate_vmid']
        if not ws['vmid'] and candidate:
            guest = cluster.get(int(candidate))
            if guest:
                verdict = self._verdict(self._config(candidate, guest['node']), name, candidate)
                if verdict == ownership.VERIFIED:
                    self._add('adoptable', name, candidate, guest['node'],
                              'our clone exists with a verifying marker; resuming the create adopts it')
                else:
                    self._add('candidate_taken', name, candidate, guest['node'],
                              'the candidate VMID holds a container that is not ours (%s); the create takes another'
                              % verdict)
        for step, upid in sorted((ws['upids'] or {}).items()):
            try:
                task = self.client.task_status(upid)
                detail += '; %s task %s' % (step, task.exitstatus or task.status)
            except EphemeraError:
                detail += '; %s task unknown' % step
        self._add('unfinished_create', name, ws['vmid'] or candidate, ws['node'], detail)
        self.resume_create.append(name)

    def _destroy(self, ws, queue):
        """Continue a decided destruction until the container is absent, under the workspace's queue."""
        name = ws['name']
        if self.check_mode:
            self._add('destroy_pending', name, ws['vmid'], ws['node'], 'would continue the destruction')
            return
        failpoint.enter(name, 'reconcile.destroy')
        operation = Operation.claim_if_free(self.journal, 'destroy', name, 'reconcile found the workspace busy',
                                            source='schedule', requested_by='reconcile')
        if operation is None:
            # Someone is ahead: reconcile never waits behind other runs.
            self._add('busy', name, ws['vmid'], ws['node'], 'another run is queued on it; left to it')
            return
        flow_params = dict(name=name, shutdown_timeout=self.params.get('shutdown_timeout', 60),
                           task_timeout=self.params.get('task_timeout', 300),
                           lock_timeout=self.params.get('lock_timeout', 60))
        flow = DestroyFlow(self.journal, self.client, flow_params, self.secret, claim=operation.claim)

        def step(name_of_step):
            def act():
                failpoint.enter(name, 'destroy.' + name_of_step)
                flow.run(name_of_step)
            return 'reconcile: ' + name_of_step, act

        def start_over():
            # Destroyed in the journal, yet our container is there: the destruction starts over.
            flow.ws = self.journal.update_workspace(name, ws['generation'], claim=operation.claim, status='destroying',
                                                    event={'kind': 'observed', 'action': 'destroyed_but_present'})

        steps = [step(each) for each in DESTROY_STEPS]
        if ws['status'] == 'destroyed':
            steps.insert(0, ('reconcile: start over', start_over))
        self.changed = True
        operation.run(steps, {'workspace': name, 'status': 'destroyed'})
        self._add('destroyed', name, ws['vmid'], ws['node'], 'pending destruction finished')

    def _debts(self, cluster, busy):
        for debt in self.journal.cleanup_debts(due_only=True):
            name, resource = debt['workspace'], debt['resource']
            if name in busy:
                continue
            ws = self.journal.get_workspace(name)
            if ws is not None and ws['desired_state'] == 'destroyed':
                continue  # its destruction (above) settles it
            vmid, node = _parse_resource(resource)
            if vmid is None:
                self._add('debt_open', name, None, None, '%s: %s' % (resource, debt['last_error']))
                continue
            guest = cluster.get(vmid)
            if guest is None:
                if not self.check_mode:
                    self.journal.clear_cleanup_debt(name, resource)
                    self.changed = True
                self._add('debt_settled', name, vmid, node, 'the container is gone')
                continue
            config = self._config(vmid, guest['node'])
            if self._verdict(config, name, vmid) != ownership.VERIFIED:
                self._add('debt_open', name, vmid, guest['node'], 'not deleted: its marker does not verify')
                continue
            said = 'attempt %d failed: %s' % (debt['attempts'], debt['last_error'][:160])
            self._add('debt_open', name, vmid, guest['node'], said)

    def _strangers(self, cluster, known):
        """Pool or tag members the journal does not know: ours (orphans) or foreign. Reported, never touched."""
        members = [g for vmid, g in sorted(cluster.items()) if vmid not in known and (
            g.get('pool') == self.pool or self.tag in (g.get('tags') or '').replace(',', ';').split(';'))]
        configs = self._configs(members)
        for guest in members:
            vmid = int(guest['vmid'])
            config = configs.get(vmid)
            if isinstance(config, Exception):
                self._add('foreign', None, vmid, guest['node'], 'config unreadable: %s' % config)
                continue
            fields = ownership.parse((config or {}).get('description')) or {}
            name = fields.get('workspace')
            if name and self._verdict(config, name, vmid) == ownership.VERIFIED:
                self._add('orphan', name, vmid, guest['node'], 'ours (marker verifies) but unknown to the journal; '
                          'destroy with vmid=%d confirm_orphan=true, or restore the journal' % vmid)
            else:
                self._add('foreign', None, vmid, guest['node'], 'in the pool but not ours (%s)'
                          % self._verdict(config, name or '', vmid))

    # --------------------------------------------------------------- report

    def report(self):
        order = dict((k, i) for i, k in enumerate(KINDS))
        findings = sorted(self.findings, key=lambda f: (order.get(f.kind, 99), f.workspace or '', f.vmid or 0))
        counts = dict((k, 0) for k in KINDS)
        for finding in findings:
            counts[finding.kind] += 1
        summary = ', '.join('%d %s' % (n, k) for k, n in counts.items() if n) or 'nothing to report'
        lines = ['reconcile: %s' % summary] + [f.line() for f in findings if f.kind != 'ok']
        return {'counts': counts, 'findings': [f.as_dict() for f in findings], 'report': lines,
                'resume_create': sorted(set(self.resume_create))}


def _parse_resource(resource):
    """(vmid, node) of 'lxc/<vmid>@<node>', or (None, None)."""
    try:
        kind, rest = resource.split('/', 1)
        vmid, node = rest.split('@', 1)
        return (int(vmid), node) if kind == 'lxc' else (None, None)
    except ValueError:
        return None, None


def debt_resource(vmid, node):
    return resource_name(vmid, node)
