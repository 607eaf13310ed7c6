# -*- coding: utf-8 -*-
# Copyright: ephemera.workspaces contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Destroying a workspace: idempotent steps that never touch a container that is not ours.

``mark`` records the decision (desired state ``destroyed``, status ``destroying``) before anything
happens; ``shutdown`` and ``stop`` power the container off; ``delete`` removes it with ``purge=1``;
``finish`` confirms it absent and marks the workspace ``destroyed``. Every step that acts on the
container first proves ownership from the container's own description (marker + HMAC token for
this controller, workspace and VMID); without that proof nothing is shut down or deleted.

A delete that cannot finish becomes cleanup debt in the journal (attempts, last error, next retry),
which the next reconcile retries. Conditions no retry can cure (protection, a stale ``create``
lock, an HA manager that keeps the container up) are reported as such, with what to do.
"""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import time

from ansible_collections.ephemera.workspaces.plugins.module_utils.core import failpoint
from ansible_collections.ephemera.workspaces.plugins.module_utils.core import ownership
from ansible_collections.ephemera.workspaces.plugins.module_utils.core import waiter
from ansible_collections.ephemera.workspaces.plugins.module_utils.core.errors import EphemeraError
from ansible_collections.ephemera.workspaces.plugins.module_utils.core.journal import epoch
from ansible_collections.ephemera.workspaces.plugins.module_utils.providers.proxmox.client import (
    PveApiError,
    PveLocked,
    PveLockTimeout,
    PveNotFound,
    PveTaskFailed,
    PveTaskTimeout,
    PveUnknownOutcome,
)

STEPS = ('mark', 'shutdown', 'stop', 'delete', 'finish')
# 'inspect' only reads: whether the container is there (and so whether there is work to archive).
STEP_LABELS = {'inspect': 'inspect', 'mark': 'mark destroying', 'shutdown': 'shutdown', 'stop': 'force stop', 'delete': 'delete',
               'finish': 'mark destroyed'}
# Cleanup debt that needs a person is retried rarely; debt that may clear by itself soon.
OPERATOR_RETRY = 6 * 3600
SOON_RETRY = 300


class DestroyError(EphemeraError):
    """A destruction step could not finish; the message says why and what to do."""


class NotOurs(DestroyError):
    """The container's marker does not prove it is this workspace's: it is never shut down or deleted."""


class NeedsOperator(DestroyError):
    """A condition that retrying cannot cure: protection, a stale lock, HA keeping it up."""


class StepResult:
    def __init__(self, changed, msg, **extra):
        self.changed = changed
        self.msg = msg
        self.extra = extra


def resource_name(vmid, node):
    return 'lxc/%d@%s' % (int(vmid), node)


class Target:
    """The container a destruction acts on: vmid, node, and what its marker proved."""

    def __init__(self, vmid, node, config, verdict):
        self.vmid = vmid
        self.node = node
        self.config = config
        self.verdict = verdict

    @property
    def absent(self):
        return self.config is None

    @property
    def path(self):
        return '/nodes/%s/lxc/%d' % (self.node, self.vmid)


class DestroyFlow:
    """The steps of one workspace's destruction. ``params`` are the module's options."""

    def __init__(self, journal, client, params, secret, claim=None, check_mode=False, sleep=time.sleep):
        self.journal = journal
        self.client = client
        self.params = params
        self.secret = secret
        self.claim = claim
        self.check_mode = check_mode
        self.sleep = sleep
        self.name = params['name']
        self.ws = journal.get_workspace(self.name)
        self.controller = ownership.controller_id(secret)

    # ------------------------------------------------------------------ helpers

    def _save(self, action, kind='observed', detail=None, **fields):
        self.ws = self.journal.update_workspace(self.name, self.ws['generation'], claim=self.claim,
                                                event={'kind': kind, 'action': action, 'detail': detail or fields},
                                                **fields)
        return self.ws

    def _event(self, kind, action, detail):
        self.journal.append_event(self.name, kind, action, detail, claim=self.claim)

    def _node(self):
        return self.ws['node'] or self.ws['params'].get('node')

    def _vmids(self):
        """The containers this workspace may own: the confirmed VMID, else the candidate a clone may have made."""
        vmid = self.ws['vmid'] or self.ws['candidate_vmid']
        return [vmid] if vmid else []

    def locate(self):
        """The workspace's container as it is now, or None when the journal names none."""
        vmids = self._vmids()
        if not vmids:
            return None
        vmid, node = vmids[0], self._node()
        config = self._config(vmid, node)
        if config is None:
            # Not on the recorded node: it may have been migrated. Ask the cluster where it is.
            node = self._find_node(vmid) or node
            config = self._config(vmid, node) if node != self._node() else None
        verdict = None if config is None else ownership.verify(config.get('description'), self.secret, self.controller,
                                                            self.name, vmid)
        if verdict not in (None, ownership.VERIFIED) and self._deleted_by_us(vmid, node):
            # Our delete of this VMID went through (its answer was lost with the run that sent it), and PVE has
            # handed the VMID to a new container since: ours is gone, the newcomer is none of this destruction's.
            if not self.check_mode:
                self._event('observed', 'vmid_reused', {'vmid': vmid, 'verdict': verdict})
            return Target(vmid, node, None, None)
        return Target(vmid, node, config, verdict)

    def _deleted_by_us(self, vmid, node):
        """True when a delete of ``vmid`` was dispatched and the cluster shows it finished (a vzdestroy task of our
        user, started after the dispatch, that ended OK)."""
        sent = [epoch(e['at']) for e in self.journal.events(self.name)
                if e['kind'] == 'dispatched' and e['action'] == 'delete' and (e['detail'] or {}).get('vmid') == vmid]
        if not sent:
            return False
        try:
            tasks = self.client.get('/nodes/%s/tasks' % node, typefilter='vzdestroy', vmid=vmid, source='all',
                                    limit=200) or []
        except PveApiError:
            return False
        users = (self.client.user, self.client.token_id)
        return any(t.get('user') in users and t.get('status') == 'OK' and int(t.get('starttime', 0)) >= int(min(sent)) - 2
                   for t in tasks)

    def _config(self, vmid, node):
        try:
            return self.client.get('/nodes/%s/lxc/%d/config' % (node, vmid))
        except PveNotFound:
            return None

    def _find_node(self, vmid):
        for guest in self.client.get('/cluster/resources', type='vm') or []:
            if int(guest.get('vmid', -1)) == int(vmid) and guest.get('type') == 'lxc':
                return guest.get('node')
        return None

    def _require_ours(self, target, step):
        if target.verdict == ownership.VERIFIED:
            return
        reason = {
            ownership.ABSENT: 'it carries no ownership marker',
            ownership.FOREIGN: 'its marker belongs to another controller',
            ownership.MISMATCH: "its marker is genuine but names another workspace or another VMID (copied there)",
            ownership.FORGED: 'its marker does not verify (edited or forged)',
        }.get(target.verdict, 'its marker could not be checked')
        err = NotOurs('CT %d on %s is not workspace %s\'s: %s. It was not touched. If the journal is right, someone '
                      'replaced the container; inspect it and remove it by hand if it should go.'
                      % (target.vmid, target.node, self.name, reason), vmid=target.vmid, verdict=target.verdict)
        if not self.check_mode:
            self._save('ownership_refused', detail={'step': step, 'vmid': target.vmid, 'verdict': target.verdict},
                       failure={'step': step, 'message': str(err)})
        raise err

    def _status(self, target):
        try:
            return self.client.get('%s/status/current' % target.path) or {}
        except PveNotFound:
            return {}

    def _wait_status(self, target, wanted, timeout):
        def probe(remaining):
            status = self._status(target).get('status')
            if status is None:
                return waiter.done(None)
            return waiter.done(status) if status == wanted else waiter.pending(status)
        return waiter.wait_for(probe, timeout, waiter.Backoff(start=0.1, maximum=2.0))

    def run(self, step):
        failpoint.enter(self.name, 'destroy.' + step)
        if step == 'inspect':
            return self.inspect()
        if step not in STEPS:
            raise DestroyError('Unknown step %r; the steps are %s.' % (step, ', '.join(STEPS)))
        if self.ws is None:
            label = STEP_LABELS[step]
            return StepResult(False, '%s: workspace %s is not recorded; nothing to destroy' % (label, self.name))
        if self.ws['status'] == 'destroyed' and self.ws['desired_state'] == 'destroyed':
            return StepResult(False, '%s: already destroyed' % STEP_LABELS[step])
        if step != 'mark' and self.ws['desired_state'] != 'destroyed':
            if self.check_mode:
                return StepResult(True, '%s: would run' % STEP_LABELS[step])
            raise DestroyError('Workspace %s is not marked for destruction: run the mark step first.' % self.name)
        return getattr(self, 'step_' + step)()

    def inspect(self):
        """Whether the workspace's container exists and runs; changes nothing."""
        target = self.locate() if self.ws is not None else None
        if target is None or target.absent:
            return StepResult(False, 'inspect: no container', present=False, running=False)
        running = self._status(target).get('status') == 'running'
        return StepResult(False, 'inspect: CT %d %s' % (target.vmid, 'running' if running else 'stopped'),
                          present=True, running=running, vmid=target.vmid, verdict=target.verdict)

    # --------------------------------------------------------------- 1. mark

    def step_mark(self):
        if self.ws['desired_state'] == 'destroyed' and self.ws['status'] == 'destroying':
            return StepResult(False, 'mark destroying: already marked')
        if self.check_mode:
            return StepResult(True, 'mark destroying: would mark %s' % self.name)
        self._save('destroy', kind='recorded', detail={'from_status': self.ws['status']}, desired_state='destroyed',
                   status='destroying', failure=None)
        return StepResult(True, 'mark destroying: %s is being destroyed; new agent operations are refused' % self.name)

    # ----------------------------------------------------------- 2. shutdown

    def step_shutdown(self):
        target = self.locate()
        if target is None or target.absent:
            return StepResult(False, 'shutdown: no container')
        self._require_ours(target, 'shutdown')
        if self._status(target).get('status') != 'running':
            return StepResult(False, 'shutdown: CT %d is not running' % target.vmid)
        if self.check_mode:
            return StepResult(True, 'shutdown: would shut CT %d down' % target.vmid)
        timeout = self.params['shutdown_timeout']
        self._event('dispatched', 'shutdown', {'vmid': target.vmid, 'timeout': timeout})
        try:
            upid = self.client.post('%s/status/shutdown' % target.path, timeout=timeout, forceStop=0)
            self._save('shutdown', detail={'upid': upid}, upids=dict(self.ws['upids'], shutdown=upid))
            self.client.wait_task(upid, timeout=timeout + 30)
        except (PveTaskFailed, PveTaskTimeout, PveUnknownOutcome) as err:
            # A guest that ignores the shutdown is stopped by force in the next step.
            self._event('observed', 'shutdown_incomplete', {'vmid': target.vmid, 'error': str(err)})
        except PveApiError as err:
            if 'not running' not in (err.pve_message or ''):
                self._event('observed', 'shutdown_refused', {'vmid': target.vmid, 'error': str(err)})
        status = self._status(target).get('status')
        return StepResult(True, 'shutdown: CT %d %s' % (target.vmid, 'stopped' if status != 'running'
                                                        else 'ignored the shutdown; it is stopped by force next'))

    # --------------------------------------------------------------- 3. stop

    def step_stop(self):
        target = self.locate()
        if target is None or target.absent:
            return StepResult(False, 'force stop: no container')
        self._require_ours(target, 'stop')
        status = self._status(target)
        if status.get('status') != 'running':
            return StepResult(False, 'force stop: CT %d is not running' % target.vmid)
        if self.check_mode:
            return StepResult(True, 'force stop: would stop CT %d' % target.vmid)
        self._event('dispatched', 'stop', {'vmid': target.vmid})
        try:
            upid = self.client.post('%s/status/stop' % target.path)
            self._save('stop', detail={'upid': upid}, upids=dict(self.ws['upids'], stop=upid))
            self.client.wait_task(upid, timeout=self.params['task_timeout'])
        except (PveTaskTimeout, PveUnknownOutcome) as err:
            # The stop may still land: the status wait below tells.
            self._event('observed', 'stop_incomplete', {'vmid': target.vmid, 'error': str(err)})
        except PveTaskFailed as err:
            raise self._debt(target, 'stop', err)
        except PveApiError as err:
            if 'not running' not in (err.pve_message or ''):
                raise self._debt(target, 'stop', err)
        # An HA-managed container is stopped by the HA manager, a little later than its task ends.
        result = self._wait_status(target, 'stopped', self.params['task_timeout'])
        if not result.ok:
            managed = (status.get('ha') or {}).get('managed')
            err = NeedsOperator('CT %d is still running after a forced stop%s.' % (
                target.vmid, ': it is HA-managed and the HA manager keeps it up; remove it from HA '
                '(ha-manager remove ct:%d) and destroy again' % target.vmid if managed else ''))
            raise self._debt(target, 'stop', err, operator=bool(managed))
        return StepResult(True, 'force stop: CT %d stopped' % target.vmid)

    # ------------------------------------------------------------- 4. delete

    def _blocker(self, target):
        """A NeedsOperator for a condition no retry cures, or None."""
        config = target.config or {}
        if int(config.get('protection') or 0):
            return NeedsOperator('CT %d has protection set; PVE refuses to delete it. Remove the protection '
                                 '(pct set %d --protection 0) if it really should go, then destroy again.'
                                 % (target.vmid, target.vmid))
        if config.get('lock') == 'create' and not self._task_running(target):
            return NeedsOperator('CT %d is stuck in lock "create" with no task running: run "pct unlock %d" on node %s, '
                                 'then destroy again.' % (target.vmid, target.vmid, target.node))
        return None

    def _task_running(self, target):
        try:
            tasks = self.client.get('/nodes/%s/tasks' % target.node, source='active') or []
        except PveApiError:
            return True  # cannot tell: assume the lock is held for a reason
        return any(str(t.get('id')) in (str(target.vmid), str(self.ws['params'].get('template'))) for t in tasks)

    def step_delete(self):
        target = self.locate()
        if target is None or target.absent:
            return StepResult(False, 'delete: CT already absent')
        self._require_ours(target, 'delete')
        blocker = self._blocker(target)
        if blocker is not None:
            raise self._debt(target, 'delete', blocker, operator=True)
        if self.check_mode:
            return StepResult(True, 'delete: would delete CT %d with purge' % target.vmid)
        deadline = time.monotonic() + self.params['lock_timeout']
        backoff = waiter.Backoff(start=0.5, maximum=5.0, factor=1.7, jitter=0.3)
        while True:
            self._event('dispatched', 'delete', {'vmid': target.vmid, 'node': target.node, 'purge': 1})
            try:
                upid = self.client.delete(target.path, purge=1)
            except PveNotFound:
                return StepResult(True, 'delete: CT %d was already gone' % target.vmid)
            except PveUnknownOutcome as err:
                # The delete may have been carried out: look before anything else.
                self._event('observed', 'delete_outcome_unknown', {'vmid': target.vmid, 'error': str(err)})
                target = self.locate()
                if target is None or target.absent:
                    return StepResult(True, 'delete: CT gone (the answer was lost)')
                upid = None
                if target.config.get('lock') != 'destroyed':
                    self._require_ours(target, 'delete')
                    continue
            except (PveLocked, PveLockTimeout) as err:
                if time.monotonic() > deadline:
                    stuck = DestroyError('CT %d stayed locked for %d s (%s). It is retried by the next reconcile.'
                                         % (target.vmid, self.params['lock_timeout'], err))
                    raise self._debt(target, 'delete', stuck)
                self._event('observed', 'delete_locked', {'vmid': target.vmid, 'error': str(err)})
                self.sleep(backoff.next_delay())
                target = self.locate()
                if target is None or target.absent:
                    return StepResult(True, 'delete: CT gone while it was locked')
                self._require_ours(target, 'delete')
                continue
            except PveApiError as err:
                raise self._debt(target, 'delete', err)
            break
        try:
            if upid:
                self._save('delete', detail={'upid': upid}, upids=dict(self.ws['upids'], delete=upid))
                self.client.wait_task(upid, timeout=self.params['task_timeout'])
            else:
                self._wait_gone(target)
        except (PveTaskFailed, PveTaskTimeout, DestroyError) as err:
            raise self._debt(target, 'delete', err)
        return StepResult(True, 'delete: CT %d deleted' % target.vmid, upid=upid)

    def _wait_gone(self, target):
        def probe(remaining):
            return waiter.done() if self._config(target.vmid, target.node) is None else waiter.pending()
        if not waiter.wait_for(probe, self.params['task_timeout'], waiter.Backoff(start=0.2, maximum=2.0)).ok:
            raise DestroyError('CT %d is still there %d s after its delete.' % (target.vmid, self.params['task_timeout']))

    def _debt(self, target, step, err, operator=False):
        """Record the failure as cleanup debt (and on the workspace); returns the error to raise."""
        if self.check_mode:
            return err
        retry = OPERATOR_RETRY if operator else SOON_RETRY
        self.journal.record_cleanup_debt(self.name, resource_name(target.vmid, target.node), err, retry_in=retry,
                                         claim=self.claim)
        self._save('destroy_blocked', detail={'step': step, 'vmid': target.vmid, 'error': str(err),
                                              'needs_operator': operator},
                   failure={'step': step, 'message': str(err), 'needs_operator': operator})
        return err

    # ------------------------------------------------------------- 5. finish

    def step_finish(self):
        if self.check_mode:
            return StepResult(True, 'mark destroyed: would mark %s destroyed once its container is gone' % self.name)
        target = self.locate()
        if target is not None and not target.absent:
            if target.verdict != ownership.VERIFIED:
                # The VMID now holds someone else's container: ours is gone, theirs is none of our business.
                self._event('observed', 'vmid_reused', {'vmid': target.vmid, 'verdict': target.verdict})
            else:
                raise DestroyError('CT %d is still there; run the delete step (or destroy again).' % target.vmid)
        for vmid in self._vmids():
            self.journal.clear_cleanup_debt(self.name, resource_name(vmid, target.node if target else self._node()),
                                            claim=self.claim)
        released = self.journal.release_address(self.name, claim=self.claim)
        self._save('destroyed', status='destroyed', activity='unknown', failure=None,
                   detail={'vmid': self.ws['vmid'], 'released': released})
        return StepResult(True, 'mark destroyed: %s destroyed%s' % (
            self.name, '; address %s released' % ', '.join(released) if released else ''))


def destroy_orphan(journal, client, secret, vmid, node=None, task_timeout=300, check_mode=False):
    """Delete one container that the journal does not know, on an operator's explicit request.

    Still marker-checked: only a container whose marker proves it was made by this controller (for
    the workspace the marker names, at this VMID) is stopped and deleted. The deletion is logged
    under that workspace's name.
    """
    controller = ownership.controller_id(secret)
    if node is None:
        for guest in client.get('/cluster/resources', type='vm') or []:
            if int(guest.get('vmid', -1)) == int(vmid) and guest.get('type') == 'lxc':
                node = guest.get('node')
        if node is None:
            return StepResult(False, 'CT %d does not exist; nothing to destroy' % vmid)
    path = '/nodes/%s/lxc/%d' % (node, vmid)
    try:
        config = client.get(path + '/config')
    except PveNotFound:
        return StepResult(False, 'CT %d does not exist on %s; nothing to destroy' % (vmid, node))
    fields = ownership.parse(config.get('description')) or {}
    name = fields.get('workspace')
    verdict = ownership.verify(config.get('description'), secret, controller, name, vmid) if name else ownership.ABSENT
    if verdict != ownership.VERIFIED:
        raise NotOurs('CT %d on %s does not carry a marker of this controller that verifies (%s); it is not deleted. '
                      'Remove it by hand if it should go.' % (vmid, node, verdict), vmid=vmid, verdict=verdict)
    record = journal.get_workspace(name)
    if record is not None and record['vmid'] == vmid and record['status'] != 'destroyed':
        raise DestroyError('CT %d is workspace %s, which the journal knows: destroy it by name (workspace=%s).'
                           % (vmid, name, name))
    if check_mode:
        return StepResult(True, 'would delete orphan CT %d of workspace %s' % (vmid, name))
    journal.append_event(name, 'dispatched', 'orphan_delete', {'vmid': vmid, 'node': node})
    status = client.get(path + '/status/current') or {}
    if status.get('status') == 'running':
        client.wait_task(client.post(path + '/status/stop'), timeout=task_timeout)
    try:
        client.wait_task(client.delete(path, purge=1), timeout=task_timeout)
    except PveNotFound:
        pass
    journal.append_event(name, 'observed', 'orphan_deleted', {'vmid': vmid, 'node': node})
    return StepResult(True, 'deleted orphan CT %d of workspace %s' % (vmid, name), workspace=name)
