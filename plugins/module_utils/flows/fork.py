# -*- coding: utf-8 -*-
# Copyright: ephemera.workspaces contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Forking a ready workspace into N children, all or nothing (docs/fork.md).

One operation in the parent's queue. The fork is recorded in the parent's record (``facts.fork``: its id, the
snapshot's name, the children) before anything is made; the snapshot is taken after its name is recorded; each
child is an ordinary workspace record made before its clone, cloned from the snapshot with the create flow's own
candidate/marker protocol, and taken through identity reset (new machine-id, runner state and agent session gone,
the parent's credentials removed and its own written, host keys of its own pinned, its own marker and lease).

The commit point is the parent's ``fork.state = 'adopted'``, written only when every child reached identity reset;
only then is any child briefed and marked ready. Before it, a failure (or the rescue of a killed run that is not
resumed) destroys every child and the snapshot, and the parent is as it was. A rerun of a killed fork resumes:
every step is idempotent, so it converges to all N children, or (through ``abandon``) to none.
"""

import os
import re
import threading
import time
from concurrent.futures import ThreadPoolExecutor

from ansible_collections.ephemera.workspaces.plugins.module_utils.core import failpoint
from ansible_collections.ephemera.workspaces.plugins.module_utils.core import lease as leasing
from ansible_collections.ephemera.workspaces.plugins.module_utils.core import waiter
from ansible_collections.ephemera.workspaces.plugins.module_utils.core.errors import EphemeraError
from ansible_collections.ephemera.workspaces.plugins.module_utils.flows.base import Flow, StepResult
from ansible_collections.ephemera.workspaces.plugins.module_utils.flows.create import (
    CreateFlow,
    validate_name,
    validate_purpose,
)
from ansible_collections.ephemera.workspaces.plugins.module_utils.flows.destroy import STEPS as DESTROY_STEPS
from ansible_collections.ephemera.workspaces.plugins.module_utils.flows.destroy import UNFINISHED_FORK, DestroyFlow
from ansible_collections.ephemera.workspaces.plugins.module_utils.guest import operations as guest_ops
from ansible_collections.ephemera.workspaces.plugins.module_utils.providers.base import Conflict, NotFound, UnknownOutcome

STEPS = ('check', 'begin', 'snapshot', 'children', 'adopt', 'finish')
# The rescue's step: every child destroyed, the snapshot deleted, the parent as it was.
ABANDON = 'abandon'
STEP_LABELS = {'check': 'check the request', 'begin': 'record the fork and quiesce the parent',
               'snapshot': 'snapshot the parent', 'children': 'clone and reset each child',
               'adopt': 'adopt and brief the children', 'finish': 'remove the snapshot', ABANDON: 'abandon the fork'}
# The most children one fork makes: each is a full copy of the parent's disk.
MAX_CHILDREN = 16
# The most children made at once (each in a thread of its own: SSH sessions, the provider's calls).
PARALLEL = 8
# The create steps a child takes before identity reset, and after it (bootstrap writes its own credentials and makes
# its own host keys, runner starts a runner with fresh state); brief and ready come after adoption.
BEFORE_RESET = ('vmid', 'clone', 'wait_clone', 'configure', 'start', 'address', 'ssh')
AFTER_RESET = ('bootstrap', 'runner')
ON_ADOPTION = ('brief', 'ready')
# A child's checkout is the parent's copy at the fork point: the create's checkout step is not run, its fact is set.
SNAPSHOT_NAME = re.compile(r'^[A-Za-z][A-Za-z0-9_-]{1,39}$')


class ForkError(EphemeraError):
    """The fork was refused or could not finish; the message says what to do."""


class SiblingFailed(ForkError):
    """A child stopped because another child of the fork failed (that one's error is the step's)."""


def failure_message(name, step, err):
    if step == 'check':
        return 'The fork of workspace %s was refused, nothing was copied: %s' % (name, err)
    return 'The fork of workspace %s failed at %s: %s' % (name, STEP_LABELS.get(step, step), err)


def plan_children(parent, count=None, children=None, purpose=None, limit=MAX_CHILDREN):
    """The children asked for: a list of ``{'name', 'purpose'}``. ``children`` names each (with a purpose of its
    own, or ``purpose``, or the parent's); ``count`` makes ``<parent>-1`` .. ``<parent>-N``. Refused when both or
    neither are given, above ``limit``, with a name given twice or that is the parent's."""
    if children and count is not None:
        raise ForkError('Give count or children, not both: count=N names the children %s-1 .. %s-N, children lists '
                        'each one ({name, purpose}).' % (parent['name'], parent['name']))
    if not children and count is None:
        raise ForkError('Say how many children: count=N, or children=[{name: ..., purpose: ...}, ...].')
    if count is not None and not children:
        if not isinstance(count, int) or isinstance(count, bool) or count < 1:
            raise ForkError('count must be a whole number of at least 1, not %r.' % (count,))
        children = [{'name': '%s-%d' % (parent['name'], i)} for i in range(1, count + 1)]
    if len(children) > limit:
        raise ForkError('%d children asked for; a fork makes at most %d (each is a full copy of the parent\'s disk). '
                        'Fork fewer at a time, or raise max_children if the cluster has room for them.'
                        % (len(children), limit))
    plan, seen = [], set()
    for entry in children:
        if isinstance(entry, str):
            entry = {'name': entry}
        if not isinstance(entry, dict) or not entry.get('name'):
            raise ForkError('Each child is {name: ..., purpose: ...} (purpose optional), not %r.' % (entry,))
        unknown = sorted(set(entry) - {'name', 'purpose'})
        if unknown:
            raise ForkError('Child %s has keys %s; a child takes only name and purpose.'
                            % (entry['name'], ', '.join(unknown)))
        name = entry['name']
        try:
            validate_name(name)
        except EphemeraError as err:
            raise ForkError(str(err))
        if name == parent['name'] or name in seen:
            raise ForkError('Child name %s is given twice (or is the parent\'s): every child needs a name of its own.'
                            % name)
        seen.add(name)
        brief = entry.get('purpose') or purpose or parent['purpose']
        try:
            validate_purpose(brief, step='check')
        except EphemeraError as err:
            raise ForkError('Child %s: %s' % (name, err))
        plan.append({'name': name, 'purpose': brief})
    return plan


def await_snapshot(provider, resource, name, timeout, sleep=time.sleep):
    """True once snapshot ``name`` of ``resource`` is finished; False when it is neither finished nor on its way, or
    still on its way after ``timeout`` seconds.

    Each look asks whether the snapshot is on its way before asking whether it is finished. A snapshot goes from the
    one to the other and never back, so one that finishes between the two questions is seen finished; asked the other
    way round, it would be seen as neither, and a snapshot that was there would fail the fork."""
    def probe(remaining):
        if provider.snapshot_pending(resource, name):
            return waiter.pending()
        return waiter.done() if provider.snapshot_exists(resource, name) else waiter.failed()
    return waiter.wait_for(probe, timeout, sleep=sleep, what='snapshot %s' % name).ok


class ForkFlow(Flow):
    """The steps of one fork; ``params['name']`` is the parent. ``destroy_params`` are what the children's
    destruction needs (timeouts)."""

    @property
    def fork(self):
        return (self.ws or {}).get('facts', {}).get('fork') or {}

    def _save_fork(self, action, **changes):
        fork = dict(self.fork, **changes)
        self.save(action, kind='recorded', detail=dict(changes, id=fork.get('id')),
                  facts=dict(self.ws['facts'], fork=fork))
        return fork

    def _in_progress(self):
        return self.fork.get('state') in UNFINISHED_FORK

    def run(self, step):
        if step not in STEPS + (ABANDON,):
            raise ForkError('Unknown step %r; the steps are %s.' % (step, ', '.join(STEPS + (ABANDON,))))
        failpoint.enter(self.name, 'fork.' + step)
        if step == 'check':
            return self.step_check()
        if self.check_mode:
            return StepResult(True, '%s: would run' % STEP_LABELS[step])
        if self.ws is None:
            raise ForkError('Workspace %s is not recorded: nothing to fork.' % self.name)
        return getattr(self, 'step_' + step)()

    # ------------------------------------------------------------------ check

    def _resource(self):
        resource = self.provider.find(self.resource_id, self.location, search=True)
        if resource is None:
            raise ForkError('The %s of workspace %s (%s) is not there. Run reconcile to see what happened to it.'
                            % (self.provider.noun, self.name, self.provider.label(self.resource_id)))
        return resource

    def step_check(self):
        """Refuse what cannot work before anything is copied or recorded: the plan of children, when it is new."""
        ws = self.ws
        if ws is None:
            raise ForkError('Workspace %s is not recorded in this journal: fork a workspace that create made ready.'
                            % self.name)
        refusal = self.provider.fork_refusal
        if refusal:
            raise ForkError('Workspace %s lives on %s, which cannot fork yet: %s. Create the children with '
                            'ephemera.workspaces.create instead.' % (self.name, self.provider.name, refusal))
        if self._in_progress():
            # A rerun of a fork that did not end: it goes on with the children recorded, not with new ones.
            recorded = self.fork['children']
            asked = self._plan(ws)
            if [c['name'] for c in asked] != [c['name'] for c in recorded]:
                raise ForkError('Workspace %s has an unfinished fork (%s, children %s). Run the fork again with the '
                                'same children to finish it, or run it with -e fork_abandon=true to remove it first.'
                                % (self.name, self.fork['id'], ', '.join(c['name'] for c in recorded)))
            return StepResult(False, 'check: the unfinished fork %s goes on' % self.fork['id'],
                              children=[c['name'] for c in recorded], resumed=True)
        if ws['status'] != 'ready' or ws['desired_state'] != 'present':
            raise ForkError('Workspace %s is %s, not ready: only a ready workspace (briefed, its checkout in place) is '
                            'forked. Finish its creation first (ephemera.workspaces.create -e workspace_create_resume'
                            '=true -e workspace=%s).' % (self.name, ws['status'], self.name))
        plan = self._plan(ws)
        taken = [c['name'] for c in plan if self._taken(c['name'])]
        if taken:
            raise ForkError('A workspace named %s exists already (not destroyed). Choose other child names (or '
                            'destroy those workspaces first).' % ', '.join(taken))
        self._resource()
        return StepResult(False, 'check: %s can be forked into %s' % (self.name, ', '.join(c['name'] for c in plan)),
                          children=[c['name'] for c in plan])

    def _plan(self, ws):
        return plan_children(ws, count=self.params.get('count'), children=self.params.get('children'),
                             purpose=self.params.get('purpose'), limit=self.params.get('max_children') or MAX_CHILDREN)

    def _taken(self, name):
        other = self.journal.get_workspace(name) if self.journal is not None else None
        return other is not None and not (other['status'] == 'destroyed' and other['desired_state'] == 'destroyed')

    # ------------------------------------------------------------------ begin

    def step_begin(self):
        if self._in_progress():
            if self.fork['state'] != 'started' or self.fork.get('quiesced_at'):
                return StepResult(False, 'begin: fork %s recorded already' % self.fork['id'])
            # A run killed between recording the fork and quiescing the parent: quiesce it now, before the snapshot.
            return self._quiesce(self.fork['id'])
        self.step_check()
        plan = self._plan(self.ws)
        fork_id = os.urandom(5).hex()
        snapshot = 'ephemera-fork-%s' % fork_id
        # Journal first: the snapshot's name and the children's names are recorded before either exists.
        self._save_fork('fork_started', id=fork_id, state='started', snapshot=snapshot, snapshot_taken=False,
                        children=plan, started_at=time.time(), ended_at=None, outcome=None, fork_point=None,
                        quiesced_at=None, adopted_at=None)
        return self._quiesce(fork_id)

    def _quiesce(self, fork_id):
        """The guest's writes flushed to its disk and the checkout's commit recorded as the fork point; the snapshot
        that follows is one instant of the disk (docs/fork.md says what a working agent means)."""
        head = self._with_parent(lambda g: guest_ops.fork_point(g, self._layout(), self._ssh_user()))
        self._save_fork('fork_point', fork_point=head, quiesced_at=time.time())
        return StepResult(True, 'begin: fork %s of %s recorded, fork point %s' % (fork_id, self.name, head or '(none)'),
                          fork_id=fork_id, fork_point=head)

    def _layout(self):
        req = self.ws['params']
        return guest_ops.Layout(req['guest_root'], self.resource_id, req['checkout_path'], req['agent_user'])

    def _ssh_user(self):
        return self.params.get('ssh_user') or self.ws['params'].get('ssh_user') or 'root'

    def _with_parent(self, action):
        parent = CreateFlow(self.journal, None, dict(self._child_params(self.name, None), name=self.name),
                            self.secret, claim=self.claim)
        with parent._guest().connect() as connected:  # pylint: disable=protected-access
            return action(connected)

    # --------------------------------------------------------------- snapshot

    def step_snapshot(self):
        fork = self.fork
        if fork.get('state') not in ('started',):
            return StepResult(False, 'snapshot: %s taken already' % fork.get('snapshot'))
        resource = self._resource()
        name = fork['snapshot']
        if not self.provider.snapshot_exists(resource, name):
            self.event('dispatched', 'fork_snapshot', {'snapshot': name, 'vmid': self.resource_id})
            try:
                handle = self.provider.snapshot(resource, name, self.provider.marker(self.name, self.resource_id))
            except (UnknownOutcome, Conflict):
                # The answer was lost, or the name is taken (an earlier run's copy whose answer was lost): the
                # snapshot may be on its way. Look before asking again.
                handle = None
            if handle:
                self.provider.wait(handle, timeout=self.params['task_timeout'])
            else:
                self._wait_snapshot(resource, name)
        self._save_fork('fork_snapshot', state='snapshotted', snapshot_taken=True)
        return StepResult(True, 'snapshot: %s of %s' % (name, self.provider.label(self.resource_id)), snapshot=name)

    def _wait_snapshot(self, resource, name):
        if not await_snapshot(self.provider, resource, name, self.params['task_timeout'], sleep=self.sleep):
            raise ForkError('Snapshot %s of %s did not appear after its request\'s answer was lost. Run the fork '
                            'again: it looks for the snapshot first.' % (name, self.provider.label(resource.id)))

    # --------------------------------------------------------------- children

    def _child_params(self, name, purpose):
        """The options a child's create steps read: the parent's request, this run's connection and secrets."""
        params = dict(self.params)
        params.update(name=name, idempotency_key=None, resume=True, purpose=purpose)
        return params

    def _child_flow(self, child):
        return CreateFlow(self.journal, self.provider, self._child_params(child['name'], child['purpose']),
                          self.secret, claim=self.claim, sleep=self.sleep)

    def _record_child(self, child):
        """The child's record, made before its clone: the parent's request with the child's purpose and the fork."""
        existing = self.journal.get_workspace(child['name'])
        fork = self.fork
        mark = {'parent': self.name, 'id': fork['id'], 'fork_point': fork.get('fork_point')}
        if existing is not None and (existing.get('facts') or {}).get('fork', {}).get('id') == fork['id']:
            return existing
        if existing is not None and existing['status'] != 'destroyed':
            raise ForkError('A workspace named %s appeared while the fork ran: the fork does not take it over.'
                            % child['name'])
        req = dict(self.ws['params'], purpose=child['purpose'],
                   fork={'parent': self.name, 'source': self.resource_id, 'snapshot': fork['snapshot'],
                         'id': fork['id']})
        req['full_clone'] = True
        req['inputs'] = {'agent_env': sorted(self.params.get('agent_credentials') or {}),
                         'git_login': False}
        now = time.time()
        parent_lease = self.ws.get('lease') or {}
        terms = leasing.new_lease(now, ttl=parent_lease.get('ttl'), idle_timeout=parent_lease.get('idle_timeout'))
        fields = dict(status='requested', desired_state='present', repo=self.ws['repo'], ref=self.ws['ref'],
                      purpose=child['purpose'], params=req, progress={'request': now}, lease=terms,
                      lease_expires_at=terms['expires_at'], cleanup={}, facts={'fork': mark},
                      **self.resource_fields(provider=self.provider.name, location=self.location))
        event = {'kind': 'recorded', 'action': 'forked', 'detail': mark}
        if existing is None:
            return self.journal.create_workspace(child['name'], event=event, claim=self.claim, **fields)
        fields.update(self.resource_fields(resource_id=None, candidate_id=None, tasks={}))
        return self.journal.update_workspace(child['name'], existing['generation'], event=event, claim=self.claim,
                                             address=None, failure=None, activity='unknown', **fields)

    def step_children(self):
        fork = self.fork
        if fork.get('state') in ('copied', 'adopted'):
            return StepResult(False, 'children: every child reached identity reset already')
        if fork.get('state') != 'snapshotted':
            raise ForkError('Fork %s has no snapshot yet: run the snapshot step first.' % fork.get('id'))
        children = fork['children']
        failed = threading.Event()
        # Where a clone locks its source, the children's clones take turns here instead of backing off on the lock
        # (a full copy of a large disk would outlast the create's lock_timeout).
        turns = threading.Lock() if self.provider.snapshot_copies_take_turns else None
        self._side_by_side(children, lambda worker, child: worker.make_child(child, failed, turns))
        made = [c['name'] for c in children]
        self._save_fork('fork_copied', state='copied')
        return StepResult(True, 'children: %s cloned from %s and reset' % (', '.join(made), fork['snapshot']),
                          children=made)

    def _side_by_side(self, children, work):
        """``work(flow, child)`` for every child at once, each in a thread with a fork flow and a journal connection
        of its own (a connection serves one thread at a time); a single child runs in this thread. All are waited
        for before this returns, so nothing acts on a child after a failure is reported; the first failure (in the
        children's order) is raised, a child's own before one that stopped for it (SiblingFailed).

        On Proxmox VE the clones of one snapshot take turns (step_children): a clone locks its source (``lock:
        disk``); what follows the clone runs side by side."""
        if len(children) == 1:
            work(self, children[0])
            return
        workers = [ForkFlow(self.journal.reopen(), self.provider, self.params, self.secret, claim=self.claim,
                            sleep=self.sleep) for dummy in children]
        errors = []
        try:
            with ThreadPoolExecutor(max_workers=min(PARALLEL, len(children))) as pool:
                futures = [pool.submit(work, worker, child) for worker, child in zip(workers, children)]
                for future in futures:
                    try:
                        future.result()
                    except Exception as err:  # pylint: disable=broad-except
                        errors.append(err)
        finally:
            for worker in workers:
                worker.journal.close()
        if errors:
            raise ([e for e in errors if not isinstance(e, SiblingFailed)] or errors)[0]

    def make_child(self, child, failed, turns=None):
        """One child from its record to identity reset, its host keys and a fresh runner; ``failed`` is set when
        one child fails, and the others stop at their next step; ``turns`` (a lock) is held from the child's clone
        to its confirmation."""
        def go_on():
            if failed.is_set():
                raise SiblingFailed('Child %s stopped: another child of the fork failed.' % child['name'])
        try:
            go_on()
            self._record_child(child)
            failpoint.enter(child['name'], 'fork.child')
            flow = self._child_flow(child)
            for step in BEFORE_RESET:
                if step == 'wait_clone':
                    continue
                go_on()
                if step != 'clone':
                    flow.run(step)
                    continue
                # A clone that was asked for is waited for: its resource is then confirmed, and the abandon step
                # destroys it without waiting out the provider's window for an allocation's late answer.
                with turns or threading.Lock():
                    flow.run('clone')
                    flow.run('wait_clone')
            go_on()
            flow = self._child_flow(child)
            self._reset(flow)
            for step in AFTER_RESET:
                go_on()
                flow.run(step)
            flow = self._child_flow(child)
            if not flow.ws['facts']['fork'].get('identity_reset_at'):
                flow.save('identity_reset', kind='observed', detail={'fork': self.fork['id']},
                          facts=dict(flow.ws['facts'], fork=dict(flow.ws['facts']['fork'], identity_reset_at=time.time())))
        except BaseException:
            failed.set()
            raise

    def _reset(self, flow):
        """Identity reset of one child, once: the parent's runner state, session and credentials removed, a new
        machine-id; the checkout's commit is the child's (the create's checkout step is done by the copy)."""
        facts = flow.ws['facts']
        if facts['fork'].get('machine_id'):
            return
        failpoint.enter(flow.name, 'fork.reset')
        machine_id, head = flow._with_guest(  # pylint: disable=protected-access
            lambda g: guest_ops.reset_identity(g, flow._layout(), flow.ssh_user))  # pylint: disable=protected-access
        fork = dict(facts['fork'], machine_id=machine_id)
        flow.save('identity_reset', kind='observed', detail={'machine_id': machine_id, 'head': head},
                  facts=dict(facts, fork=fork, head=head),
                  progress=dict(flow.ws['progress'], checkout=time.time()))

    # ------------------------------------------------------------------ adopt

    def step_adopt(self):
        fork = self.fork
        if fork.get('state') not in ('copied', 'adopted'):
            raise ForkError('Fork %s: not every child reached identity reset; none is adopted.' % fork.get('id'))
        if fork['state'] == 'copied':
            missing = [c['name'] for c in fork['children'] if not self._reset_done(c['name'])]
            if missing:
                raise ForkError('Children %s did not reach identity reset; none is adopted.' % ', '.join(missing))
            # The commit point: from here on the fork ends with all its children.
            fork = self._save_fork('fork_adopted', state='adopted', adopted_at=time.time())
        # Every child briefed at once; one that fails does not stop the others (the fork is adopted: a rerun briefs
        # the rest).
        self._side_by_side(fork['children'], lambda worker, child: worker.brief_child(child))
        briefed = [c['name'] for c in fork['children']]
        return StepResult(True, 'adopt: %s briefed and ready' % ', '.join(briefed), children=briefed)

    def brief_child(self, child):
        """Brief one adopted child and mark it ready."""
        for step in ON_ADOPTION:
            self._child_flow(child).run(step)

    def _reset_done(self, name):
        child = self.journal.get_workspace(name)
        return child is not None and child['desired_state'] == 'present' and \
            bool(((child.get('facts') or {}).get('fork') or {}).get('identity_reset_at'))

    # ----------------------------------------------------------------- finish

    def _drop_snapshot(self):
        fork = self.fork
        if not fork.get('snapshot'):
            return False
        try:
            resource = self.provider.find(self.resource_id, self.location, search=True)
            handle = self.provider.delete_snapshot(resource, fork['snapshot'])
        except NotFound:
            handle = None
        if handle:
            self.event('dispatched', 'fork_snapshot_delete', {'snapshot': fork['snapshot']})
            self.provider.wait(handle, timeout=self.params['task_timeout'])
        return bool(handle)

    def step_finish(self):
        fork = self.fork
        if fork.get('state') == 'done':
            return StepResult(False, 'finish: fork %s is finished' % fork['id'])
        if fork.get('state') != 'adopted':
            raise ForkError('Fork %s is not adopted; it is finished by abandoning it.' % fork.get('id'))
        dropped = self._drop_snapshot()
        names = [c['name'] for c in fork['children']]
        known = list(self.ws['facts'].get('fork_children') or [])
        self.save('fork_done', kind='recorded', detail={'id': fork['id'], 'children': names},
                  facts=dict(self.ws['facts'], fork=dict(fork, state='done', outcome='adopted', ended_at=time.time()),
                             fork_children=known + [n for n in names if n not in known]))
        return StepResult(dropped, 'finish: %s forked into %s; snapshot %s removed'
                          % (self.name, ', '.join(names), fork['snapshot']), children=names)

    # ---------------------------------------------------------------- abandon

    def step_abandon(self):
        fork = self.fork
        if not self._in_progress():
            return StepResult(False, 'abandon: no unfinished fork of %s' % self.name)
        if fork['state'] == 'adopted':
            raise ForkError('Fork %s was adopted (every child reached identity reset): it is finished, not abandoned. '
                            'Run the fork again to brief the rest of its children.' % fork['id'])
        destroyed = []
        for child in fork['children']:
            record = self.journal.get_workspace(child['name'])
            if record is None or ((record.get('facts') or {}).get('fork') or {}).get('id') != fork['id']:
                continue
            flow_params = dict(self.params, name=child['name'])
            for step in DESTROY_STEPS:
                flow = DestroyFlow(self.journal, self.provider, flow_params, self.secret, claim=self.claim,
                                   sleep=self.sleep)
                flow.for_fork = fork['id']
                flow.run(step)
            destroyed.append(child['name'])
        self._drop_snapshot()
        self._save_fork('fork_abandoned', state='abandoned', outcome='abandoned', ended_at=time.time())
        return StepResult(True, 'abandon: fork %s of %s undone: %s destroyed, snapshot %s removed'
                          % (fork['id'], self.name, ', '.join(destroyed) or 'no child', fork['snapshot']),
                          destroyed=destroyed)
