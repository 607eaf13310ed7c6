# -*- coding: utf-8 -*-
# Copyright: ephemera.workspaces contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
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

import time

from ansible_collections.ephemera.workspaces.plugins.module_utils.core import failpoint
from ansible_collections.ephemera.workspaces.plugins.module_utils.core import lease as leasing
from ansible_collections.ephemera.workspaces.plugins.module_utils.core import ownership
from ansible_collections.ephemera.workspaces.plugins.module_utils.core import waiter
from ansible_collections.ephemera.workspaces.plugins.module_utils.core.errors import EphemeraError
from ansible_collections.ephemera.workspaces.plugins.module_utils.core.journal import epoch
from ansible_collections.ephemera.workspaces.plugins.module_utils.providers import registry
from ansible_collections.ephemera.workspaces.plugins.module_utils.flows import lease as lease_flow
from ansible_collections.ephemera.workspaces.plugins.module_utils.flows.base import RESOURCE_ID, Flow, StepResult
from ansible_collections.ephemera.workspaces.plugins.module_utils.providers.base import (
    Locked,
    NotFound,
    ProviderError,
    TaskFailed,
    TaskTimeout,
    Transient,
    UnknownOutcome,
)

STEPS = ('mark', 'shutdown', 'stop', 'delete', 'finish')
# 'inspect' only reads: whether the container is there (and so whether there is work to archive).
STEP_LABELS = {'inspect': 'inspect', 'retain': 'retain', 'mark': 'mark destroying', 'shutdown': 'shutdown', 'stop': 'force stop', 'delete': 'delete',
               'finish': 'mark destroyed'}
# The steps as the destroy role numbers them: the archive guard first.
ROLE_STEPS = ('guard',) + STEPS
ROLE_LABELS = dict(STEP_LABELS, guard='archive guard')


def failure_message(name, step, err):
    """The one message a failed step ends with: the workspace (or the orphan's VMID), the step, what happened and
    what to do (``err`` says both)."""
    if step == 'orphan':
        return 'Destroying the orphan CT %s failed: %s' % (name, err)
    if step not in ROLE_STEPS:
        return 'Workspace %s, %s: %s' % (name, ROLE_LABELS.get(step, step), err)
    return 'Destroying workspace %s failed at step %d/%d (%s): %s' % (
        name, ROLE_STEPS.index(step) + 1, len(ROLE_STEPS), ROLE_LABELS[step], err)


# The states of a parent's fork (flows/fork.py) that did not end: its children are destroyed by the fork only.
UNFINISHED_FORK = ('started', 'snapshotted', 'copied', 'adopted')


# Cleanup debt that needs a person is retried rarely; debt that may clear by itself soon.
OPERATOR_RETRY = 6 * 3600
SOON_RETRY = 300


class DestroyError(EphemeraError):
    """A destruction step could not finish; the message says why and what to do."""


class NotOurs(DestroyError):
    """The container's marker does not prove it is this workspace's: it is never shut down or deleted."""


class NeedsOperator(DestroyError):
    """A condition that retrying cannot cure: protection, a stale lock, HA keeping it up."""


class Target:
    """The resource a destruction acts on: its id, location, the resource as found (None when absent) and what
    its marker proved."""

    def __init__(self, vmid, node, resource, verdict):
        self.vmid = vmid
        self.node = node
        self.resource = resource
        self.verdict = verdict

    @property
    def absent(self):
        return self.resource is None


class DestroyFlow(Flow):
    """The steps of one workspace's destruction. ``params`` are the module's options; the rest as :class:`Flow`'s."""

    # ------------------------------------------------------------------ helpers

    def _label(self, target):
        return self.provider.label(target.vmid)

    def _vmids(self):
        """The resources this workspace may own: the confirmed id, else the candidate an allocation may have made."""
        vmid = self.resource_id or self.candidate_id
        if not self.resource_id and vmid and self.tasks.get('clone'):
            # The allocation answered (its handle is recorded) and the run died before confirming it: where the id
            # comes from the answer, the handle names the resource.
            vmid = self.provider.resource_of(vmid, self.tasks['clone'], self.location)
        return [vmid] if vmid else []

    def locate(self):
        """The workspace's resource as it is now, or None when the journal names none."""
        vmids = self._vmids()
        if not vmids:
            return None
        vmid, node = vmids[0], self.location
        # Not at the recorded location: it may have been moved, so the provider looks where it is.
        try:
            resource = self.provider.find(vmid, node, search=True)
        except Transient as err:
            # Throttled past its patience, or a listing that could not be read whole: nothing is proven, absence
            # least of all. The cleanup stays owed.
            if not self.check_mode:
                self.event('observed', 'inventory_unreadable', {'vmid': vmid, 'error': str(err)})
            raise self._debt(Target(vmid, node, None, None), 'locate', err)
        if resource is not None:
            node = resource.location
        elif not self.resource_id:
            self._absence_unproven(vmid, node)
        elif self.provider.confirms_delete_by_task and self.tasks.get('delete'):
            self._delete_confirmed(vmid, node)
        verdict = None if resource is None else self.provider.verify(resource, self.name, ownership.record_nonce(self.ws))
        if resource is not None and resource.id != vmid:
            # Found by its candidate id (a cloud's idempotency token): from here on, the resource's own id, recorded
            # once its marker proves it ours.
            vmid = resource.id
            if verdict == ownership.VERIFIED and not self.check_mode:
                self.save('resource_found', detail={'candidate': self.candidate_id, 'resource_id': vmid},
                          **self.resource_fields(resource_id=vmid, location=node))
        if verdict not in (None, ownership.VERIFIED) and self._deleted_by_us(vmid, node):
            # Our delete of this id went through (its answer was lost with the run that sent it), and the provider
            # has handed the id to a new resource since: ours is gone, the newcomer is none of this destruction's.
            if not self.check_mode:
                self.event('observed', 'vmid_reused', {'vmid': vmid, 'verdict': verdict})
            return Target(vmid, node, None, None)
        return Target(vmid, node, resource, verdict)

    def _absence_unproven(self, vmid, node):
        """Raise (keeping cleanup debt) when an allocation of ``vmid`` whose answer was lost was dispatched less than
        the provider's absence window ago: a complete, empty inventory does not prove yet that it made nothing."""
        window = self.provider.absence_window
        sent = (self.ws.get('facts') or {}).get('clone_dispatched_at')
        if not window or not sent or (self.ws.get('facts') or {}).get('clone_dispatched') != self.candidate_id:
            return
        age = time.time() - sent
        if age >= window or self.check_mode:
            return
        err = DestroyError('The allocation of %s was dispatched %d s ago and its answer was lost; %s shows no resource '
                           'for it, which proves nothing until %d s after the dispatch (a new resource can show up '
                           'late). The cleanup debt stays; destroy again (or let reconcile retry) after %d s.'
                           % (self.provider.label(vmid), age, self.provider.name, window, int(window - age) + 1))
        raise self._debt(Target(vmid, node, None, None), 'delete', err)

    def _delete_confirmed(self, vmid, node):
        """Raise (keeping cleanup debt) unless the recorded delete's task succeeded: on a provider that can hide a
        resource whose deletion still runs (Hetzner Cloud), a 404 alone does not complete a known delete."""
        handle = self.tasks['delete']
        try:
            if self.check_mode:
                if not self.provider.task_status(handle).succeeded:
                    raise DestroyError('%s is not found, and its delete (%s) is not confirmed yet.'
                                       % (self.provider.label(vmid), handle))
                return
            self.provider.wait(handle, timeout=self.params['task_timeout'])
        except (TaskFailed, TaskTimeout, Transient, UnknownOutcome) as err:
            raise self._debt(Target(vmid, node, None, None), 'delete', err)

    def _deleted_by_us(self, vmid, node):
        """True when a delete of ``vmid`` was dispatched and the provider shows it finished (a delete task of ours,
        started after the dispatch, that succeeded)."""
        sent = [epoch(e['at']) for e in self.journal.events(self.name)
                if e['kind'] == 'dispatched' and e['action'] == 'delete' and (e['detail'] or {}).get('vmid') == vmid]
        return bool(sent) and self.provider.deleted_since(vmid, node, min(sent))

    def _require_ours(self, target, step):
        if target.verdict == ownership.VERIFIED:
            return
        reason = {
            ownership.ABSENT: 'it carries no ownership marker',
            ownership.FOREIGN: 'its marker belongs to another controller',
            ownership.MISMATCH: "its marker is genuine but names another workspace or another VMID (copied there)",
            ownership.FORGED: 'its marker does not verify (edited or forged)',
            ownership.REPLAYED: "its marker is genuine but of an earlier life of this workspace (a restored backup "
                                "or a copy), not of the %s this record made" % self.provider.noun,
        }.get(target.verdict, 'its marker could not be checked')
        err = NotOurs('%s is not workspace %s\'s: %s. It was not touched. If the journal is right, someone '
                      'replaced the %s; inspect it and remove it by hand if it should go.'
                      % (self.provider.label(target.vmid, target.node), self.name, reason, self.provider.noun),
                      vmid=target.vmid,
                      verdict=target.verdict)
        if not self.check_mode:
            self.save('ownership_refused', detail={'step': step, 'vmid': target.vmid, 'verdict': target.verdict},
                      failure={'step': step, 'message': str(err)})
        raise err

    def _power(self, target):
        return self.provider.power(self.provider.ref(target.vmid, target.node))

    def _wait_status(self, target, wanted, timeout):
        def probe(remaining):
            status = self._power(target).state
            if status is None:
                return waiter.done(None)
            return waiter.done(status) if status == wanted else waiter.pending(status)

        def what(status):
            return '%s to be %s' % (self._label(target), wanted), status and 'it is %s' % status
        return waiter.wait_for(probe, timeout, waiter.Backoff(start=0.1, maximum=2.0), what=what)

    def run(self, step):
        failpoint.enter(self.name, 'destroy.' + step)
        if step == 'inspect':
            return self.inspect()
        if step == 'retain':
            # A release without delete is a destroy's decision too: refused for a child of an unfinished fork.
            self.refuse_unfinished_fork()
            return self.retain()
        if step not in STEPS:
            raise DestroyError('Unknown step %r; the steps are %s.' % (step, ', '.join(STEPS)))
        if self.ws is None:
            label = STEP_LABELS[step]
            return StepResult(False, '%s: workspace %s is not recorded; nothing to destroy' % (label, self.name))
        if self.ws['status'] == 'destroyed' and self.ws['desired_state'] == 'destroyed':
            return StepResult(False, '%s: already destroyed' % STEP_LABELS[step])
        self.refuse_unfinished_fork()
        if step != 'mark' and self.ws['desired_state'] != 'destroyed' and not self.check_mode:
            raise DestroyError('Workspace %s is not marked for destruction: run the mark step first.' % self.name)
        # In check mode each step looks at the container and predicts what it would do, as if the steps before it
        # had run the way they are expected to.
        return getattr(self, 'step_' + step)()

    # The id of the fork whose abandon step runs this destruction (ForkFlow): its children are its to destroy.
    for_fork = None

    def refuse_unfinished_fork(self):
        """Refuse to destroy a child of a fork that did not end: the fork's all-or-nothing is its parent's to keep
        (rerun the fork to finish it, or abandon it, which destroys every child). Changes nothing."""
        mark = ((self.ws or {}).get('facts') or {}).get('fork') or {}
        if not mark.get('parent') or not mark.get('id') or mark['id'] == self.for_fork:
            return
        if self.ws['desired_state'] == 'destroyed':
            # Decided already (by the fork's abandon step, whose run ended early): going on is what it asked for.
            return
        parent = self.journal.get_workspace(mark['parent'])
        fork = ((parent or {}).get('facts') or {}).get('fork') or {}
        if fork.get('id') != mark['id'] or fork.get('state') not in UNFINISHED_FORK:
            return
        rerun = ('ansible-playbook ephemera.workspaces.fork -e workspace=%s with the same children'
                 % mark['parent'])
        if fork['state'] == 'adopted':
            todo = ('It was adopted (every child reached identity reset), so it is finished, not abandoned: run it '
                    'again to finish it (%s), then destroy %s.' % (rerun, self.name))
        else:
            todo = ('Run it again to finish it (%s), then destroy %s; or abandon it (ansible-playbook '
                    'ephemera.workspaces.fork -e workspace=%s -e fork_abandon=true), which destroys every child of '
                    'the fork.' % (rerun, self.name, mark['parent']))
        raise DestroyError('Workspace %s is a child of fork %s of %s, which is not finished (%s): destroying one child '
                           'alone would break the fork\'s all or nothing, so nothing was changed. %s'
                           % (self.name, mark['id'], mark['parent'], fork['state'], todo))

    def inspect(self):
        """Whether the workspace's container exists and runs; changes nothing."""
        target = self.locate() if self.ws is not None else None
        if target is None or target.absent:
            return StepResult(False, 'inspect: no container', present=False, running=False)
        running = self._power(target).running
        return StepResult(False, 'inspect: %s %s' % (self._label(target), 'running' if running else 'stopped'),
                          present=True, running=running, vmid=target.vmid, verdict=target.verdict)

    def retain(self):
        """Release without delete: the workspace stops counting as running work and keeps its resource and record
        until its retention ends (``retain_ttl`` from now; the expiry sweep deletes it then, and the labels on its
        resource say so); a later destroy resumes the cleanup sooner."""
        if self.ws is None:
            raise DestroyError('Workspace %s is not recorded; there is nothing to retain.' % self.name)
        if self.ws['status'] == 'destroyed':
            raise DestroyError('Workspace %s was destroyed; there is nothing to retain.' % self.name)
        if self.ws['desired_state'] == 'destroyed':
            raise DestroyError('The destruction of %s was decided already: finish it (ephemera.workspaces.destroy '
                               '-e workspace=%s); it cannot be retained now.' % (self.name, self.name))
        cleanup = dict(self.ws.get('cleanup') or {})
        if cleanup.get('retained'):
            # A retain that stopped before the cloud's own deletion time was lifted finishes it.
            lifted = None if self.check_mode else lease_flow.lift_deadline(self.journal, self.provider, self.ws)
            return StepResult(bool(lifted), 'retain: %s is retained already%s'
                              % (self.name, '; %s' % lifted if lifted else ''))
        try:
            cleanup = leasing.retained(cleanup, time.time(), self.params.get('retain_ttl'))
        except leasing.LeaseError as err:
            raise DestroyError(str(err), step='retain')
        until = leasing.format_time(cleanup['retained_until'])
        if self.check_mode:
            return StepResult(True, 'retain: would retain %s until %s (released without delete)' % (self.name, until))
        self.ws = self.save('retained', kind='recorded', detail={'status': self.ws['status'], 'retained_until': until},
                            cleanup=cleanup)
        notes = [lease_flow.write_labels(self.journal, self.provider, self.ws),
                 lease_flow.lift_deadline(self.journal, self.provider, self.ws)]
        return StepResult(True, 'retain: %s released without delete; its resource and record stay until %s, when the '
                          'expiry sweep deletes it%s' % (self.name, until, ''.join('; %s' % n for n in notes if n)),
                          retained_until=until)

    # --------------------------------------------------------------- 1. mark

    def step_mark(self):
        if self.ws['desired_state'] == 'destroyed' and self.ws['status'] == 'destroying':
            return StepResult(False, 'mark destroying: already marked')
        if self.check_mode:
            return StepResult(True, 'mark destroying: would mark %s' % self.name)
        # A retained workspace released with delete: the cleanup it owns resumes.
        cleanup = {k: v for k, v in (self.ws.get('cleanup') or {}).items() if k not in ('retained', 'retained_at', 'retained_until')}
        self.save('destroy', kind='recorded', detail={'from_status': self.ws['status']}, desired_state='destroyed',
                  status='destroying', failure=None, cleanup=cleanup)
        return StepResult(True, 'mark destroying: %s is being destroyed; new agent operations are refused' % self.name)

    # ----------------------------------------------------------- 2. shutdown

    def step_shutdown(self):
        target = self.locate()
        if target is None or target.absent:
            return StepResult(False, 'shutdown: no %s' % self.provider.noun)
        self._require_ours(target, 'shutdown')
        label = self._label(target)
        if not self._power(target).running:
            return StepResult(False, 'shutdown: %s is not running' % label)
        if self.check_mode:
            return StepResult(True, 'shutdown: would shut %s down' % label)
        timeout = self.params['shutdown_timeout']
        self.event('dispatched', 'shutdown', {'vmid': target.vmid, 'timeout': timeout})
        try:
            upid = self.provider.shutdown(target.resource, timeout)
            if upid:
                self.save('shutdown', detail={'upid': upid}, **self.with_task('shutdown', upid))
                self.provider.wait(upid, timeout=timeout + 30)
        except (TaskFailed, TaskTimeout, UnknownOutcome) as err:
            # A guest that ignores the shutdown is stopped by force in the next step.
            self.event('observed', 'shutdown_incomplete', {'vmid': target.vmid, 'error': str(err)})
        except ProviderError as err:
            self.event('observed', 'shutdown_refused', {'vmid': target.vmid, 'error': str(err)})
        running = self._power(target).running
        return StepResult(True, 'shutdown: %s %s' % (label, 'stopped' if not running
                                                     else 'ignored the shutdown; it is stopped by force next'))

    # --------------------------------------------------------------- 3. stop

    def step_stop(self):
        target = self.locate()
        if target is None or target.absent:
            return StepResult(False, 'force stop: no %s' % self.provider.noun)
        self._require_ours(target, 'stop')
        label = self._label(target)
        power = self._power(target)
        if not power.running:
            return StepResult(False, 'force stop: %s is not running' % label)
        if self.check_mode:
            if 'shutdown' not in self.tasks:
                # The shutdown before it is expected to stop the container: it is forced only if that times out.
                return StepResult(False, 'force stop: not expected: the shutdown stops %s (it is forced only if the '
                                         'shutdown times out)' % label)
            return StepResult(True, 'force stop: would stop %s' % label)
        self.event('dispatched', 'stop', {'vmid': target.vmid})
        try:
            upid = self.provider.stop(target.resource)
            if upid:
                self.save('stop', detail={'upid': upid}, **self.with_task('stop', upid))
                self.provider.wait(upid, timeout=self.params['task_timeout'])
        except (TaskTimeout, UnknownOutcome) as err:
            # The stop may still land: the status wait below tells.
            self.event('observed', 'stop_incomplete', {'vmid': target.vmid, 'error': str(err)})
        except ProviderError as err:
            raise self._debt(target, 'stop', err)
        # An HA-managed container is stopped by the HA manager, a little later than its task ends.
        result = self._wait_status(target, 'stopped', self.params['task_timeout'])
        if not result.ok:
            err = NeedsOperator('%s is still running after a forced stop%s.'
                                % (label, ': ' + power.held_by if power.held_by else ''))
            raise self._debt(target, 'stop', err, operator=bool(power.held_by))
        return StepResult(True, 'force stop: %s stopped' % label)

    # ------------------------------------------------------------- 4. delete

    def _blocker(self, target):
        """A NeedsOperator for a condition no retry cures, or None."""
        params = self.ws['params']
        said = self.provider.delete_blocker(target.resource, params.get('template_vmid') or params.get('template'))
        return NeedsOperator(said) if said else None

    def step_delete(self):
        target = self.locate()
        if target is None or target.absent:
            return StepResult(False, 'delete: the %s is already absent' % self.provider.noun)
        self._require_ours(target, 'delete')
        blocker = self._blocker(target)
        if blocker is not None:
            raise self._debt(target, 'delete', blocker, operator=True)
        if self.check_mode:
            return StepResult(True, 'delete: would delete %s with purge' % self._label(target))
        deadline = time.monotonic() + self.params['lock_timeout']
        backoff = waiter.Backoff(start=0.5, maximum=5.0, factor=1.7, jitter=0.3)
        while True:
            self.event('dispatched', 'delete', dict({'vmid': target.vmid, 'node': target.node},
                                                    **self.provider.delete_options()))
            try:
                upid = self.provider.delete(target.resource)
            except NotFound:
                return StepResult(True, 'delete: %s was already gone' % self._label(target))
            except UnknownOutcome as err:
                # The delete may have been carried out: look before anything else.
                self.event('observed', 'delete_outcome_unknown', {'vmid': target.vmid, 'error': str(err)})
                target = self.locate()
                if target is None or target.absent:
                    return StepResult(True, 'delete: the %s is gone (the answer was lost)' % self.provider.noun)
                upid = None
                if not target.resource.deleting:
                    self._require_ours(target, 'delete')
                    continue
            except Locked as err:
                if time.monotonic() > deadline:
                    stuck = DestroyError('%s stayed locked for %d s (%s). It is retried by the next reconcile.'
                                         % (self._label(target), self.params['lock_timeout'], err))
                    raise self._debt(target, 'delete', stuck)
                self.event('observed', 'delete_locked', {'vmid': target.vmid, 'error': str(err)})
                self.sleep(backoff.next_delay())
                target = self.locate()
                if target is None or target.absent:
                    return StepResult(True, 'delete: the %s went while it was locked' % self.provider.noun)
                self._require_ours(target, 'delete')
                continue
            except ProviderError as err:
                # A rejection: this attempt's dispatch did nothing; the next one reads ownership again and records anew.
                self.event('observed', 'delete_rejected', {'vmid': target.vmid, 'error': str(err),
                                                           'kind': err.error_kind})
                raise self._debt(target, 'delete', err)
            break
        try:
            if upid:
                self.save('delete', detail={'upid': upid}, **self.with_task('delete', upid))
                self.provider.wait(upid, timeout=self.params['task_timeout'])
            else:
                self._wait_gone(target)
        except (TaskFailed, TaskTimeout, DestroyError) as err:
            raise self._debt(target, 'delete', err)
        return StepResult(True, 'delete: %s deleted' % self._label(target), upid=upid)

    def _wait_gone(self, target):
        def probe(remaining):
            return waiter.done() if self.provider.find(target.vmid, target.node) is None else waiter.pending()
        label = self._label(target)
        if not waiter.wait_for(probe, self.params['task_timeout'], waiter.Backoff(start=0.2, maximum=2.0),
                               what='%s to be gone after its delete' % label).ok:
            raise DestroyError('%s is still there %d s after its delete. Check its tasks (or activity log) for a '
                               'delete that is slow or failed, then run the destroy again (task_timeout gives a slow '
                               'delete more time).' % (label, self.params['task_timeout']))

    def _debt(self, target, step, err, operator=False):
        """Record the failure as cleanup debt (and on the workspace); returns the error to raise."""
        if self.check_mode:
            return err
        retry = OPERATOR_RETRY if operator else SOON_RETRY
        self.journal.record_cleanup_debt(self.name, self.provider.resource_key(target.vmid, target.node), err,
                                         retry_in=retry, claim=self.claim)
        self.save('destroy_blocked', detail={'step': step, 'vmid': target.vmid, 'error': str(err),
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
                # The id now holds someone else's resource: ours is gone, theirs is none of our business.
                self.event('observed', 'vmid_reused', {'vmid': target.vmid, 'verdict': target.verdict})
            else:
                raise DestroyError('%s is still there; run the delete step (or destroy again).' % self._label(target))
        # The debt may be kept under the candidate id too (recorded before the resource's own id was known).
        vmids = self._vmids()
        for vmid in vmids + [c for c in [self.candidate_id] if c is not None and c not in vmids]:
            self.journal.clear_cleanup_debt(self.name, self.provider.resource_key(
                vmid, target.node if target else self.location), claim=self.claim)
        released = self.journal.release_address(self.name, claim=self.claim)
        self.save('destroyed', status='destroyed', activity='unknown', failure=None,
                  detail={'vmid': self.resource_id, 'released': released})
        return StepResult(True, 'mark destroyed: %s destroyed%s' % (
            self.name, '; address %s released' % ', '.join(released) if released else ''))


def destroy_orphan(journal, provider, secret, vmid, node=None, task_timeout=300, check_mode=False):
    """Delete one resource that the journal does not know, on an operator's explicit request.

    Still marker-checked: only a resource whose marker proves it was made by this controller (for the
    workspace the marker names, at this id) is stopped and deleted. The deletion is logged under that
    workspace's name. ``provider`` a Provider or the API client of one.
    """
    provider = registry.bind(provider, secret)
    label = provider.label(vmid)
    if node is None:
        resource = provider.find(vmid, search=True)
        if resource is None:
            return StepResult(False, '%s does not exist; nothing to destroy' % label)
        node = resource.location
    else:
        resource = provider.find(vmid, node)
        if resource is None:
            return StepResult(False, '%s does not exist on %s; nothing to destroy' % (label, node))
    name = provider.marker_fields(resource).get('workspace')
    verdict = provider.verify(resource, name) if name else ownership.ABSENT
    if verdict != ownership.VERIFIED:
        raise NotOurs('%s does not carry a marker of this controller that verifies (%s); it is not deleted. '
                      'Remove it by hand if it should go.' % (provider.label(vmid, node), verdict), vmid=vmid,
                      verdict=verdict)
    record = journal.get_workspace(name)
    if record is not None and record[RESOURCE_ID] == vmid and record['status'] != 'destroyed':
        raise DestroyError('%s is workspace %s, which the journal knows: destroy it by name (workspace=%s).'
                           % (label, name, name))
    if check_mode:
        return StepResult(True, 'would delete orphan %s of workspace %s' % (label, name))
    journal.append_event(name, 'dispatched', 'orphan_delete', {'vmid': vmid, 'node': node})
    if provider.power(resource, absent_ok=False).running:
        stopping = provider.stop(resource)
        if stopping:
            provider.wait(stopping, timeout=task_timeout)
    try:
        provider.wait(provider.delete(resource), timeout=task_timeout)
    except NotFound:
        pass
    journal.append_event(name, 'observed', 'orphan_deleted', {'vmid': vmid, 'node': node})
    return StepResult(True, 'deleted orphan %s of workspace %s' % (label, name), workspace=name)
