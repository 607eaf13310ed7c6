# -*- coding: utf-8 -*-
# Copyright: ephemera.workspaces contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Creating a workspace: thirteen idempotent, resumable steps from "requested" to "ready".

Each step reads the journal, looks at the cluster or the guest where the journal leaves doubt,
writes what it is about to do *before* it does it, acts, and records what it observed. A step
that finds its work done changes nothing, so a rerun resumes at the first unfinished step, and a
controller that died anywhere leaves a journal from which the next run can finish or clean up.

The VMID protocol (see docs/internals/create.md): the candidate from /cluster/nextid is persisted before the
clone; the clone request writes our ownership marker into the new container's description
atomically with the VMID claim; "already exists" means take a new candidate; a lost answer means
look at the candidate first and adopt it only when its marker verifies.
"""

import contextlib
import time

from ansible_collections.ephemera.workspaces.plugins.module_utils.core import failpoint
from ansible_collections.ephemera.workspaces.plugins.module_utils.core import lease as leasing
from ansible_collections.ephemera.workspaces.plugins.module_utils.guest import agents as agent_defs
from ansible_collections.ephemera.workspaces.plugins.module_utils.guest import operations as guest_ops
from ansible_collections.ephemera.workspaces.plugins.module_utils.core import ownership
from ansible_collections.ephemera.workspaces.plugins.module_utils.core import waiter
from ansible_collections.ephemera.workspaces.plugins.module_utils.core.errors import (
    EphemeraError,
    JournalError,
    StaleGenerationError,
)
from ansible_collections.ephemera.workspaces.plugins.module_utils.core.run_identity import Owner
from ansible_collections.ephemera.workspaces.plugins.module_utils.flows.base import (
    Flow,
    StepResult,
)
from ansible_collections.ephemera.workspaces.plugins.module_utils.providers.base import (
    Allocation,
    Conflict,
    KeptAsDebt,
    Locked,
    NotFound,
    Provider,
    ProviderError,
    Refused,
    Settings,
    TaskFailed,
    UnknownOutcome,
    provider_of,
)
from ansible_collections.ephemera.workspaces.plugins.module_utils.providers import registry
from ansible_collections.ephemera.workspaces.plugins.module_utils.flows import agent as agent_flow
from ansible_collections.ephemera.workspaces.plugins.module_utils.flows import lease as lease_flow
from ansible_collections.ephemera.workspaces.plugins.module_utils.guest.ssh import (
    Guest,
    SshHostKeyMismatch,
    wait_for_guest,
)
# The request (step 1) and the warm pools have files of their own; the names callers import from here stay here.
from ansible_collections.ephemera.workspaces.plugins.module_utils.flows.create_pool import (  # noqa: F401 pylint: disable=unused-import
    POOLED_STEPS,
    WarmPoolSteps,
)
from ansible_collections.ephemera.workspaces.plugins.module_utils.flows.create_request import (  # noqa: F401 pylint: disable=unused-import
    NAME,
    PURPOSE_MAX,
    TEMPLATE_NAME,
    CreateError,
    RequestStep,
    address_candidates,
    declared_pools,
    resolve_template,
    template_value,
    usable_address,
    validate_agent_user,
    validate_checkout_path,
    validate_name,
    validate_purpose,
    validate_ref,
    validate_repo,
)

STEPS = ('request', 'vmid', 'clone', 'wait_clone', 'configure', 'start', 'address', 'ssh', 'bootstrap', 'checkout',
         'runner', 'brief', 'ready')
# What a create that took a warm pool member has left after its candidate step, in their order: run by one task (the
# module's step ``warm_rest``), one step after the other as the tasks of their own would run them, over one worker,
# one journal connection and one SSH connection to the guest.
WARM_REST = tuple(step for step in STEPS if step not in POOLED_STEPS and step != 'request')
# Each step's short label (messages, failures, the queue's current step) and the role's task name for it. Steps 2 to 6
# are said in the provider's words (Provider.step_words: "launch the instance" on EC2, "clone the template" on
# Proxmox VE): step_labels() and task_names() of a provider; these are the words of the seam itself.
STEP_LABELS = {
    'request': 'persist request', 'address': 'wait address', 'ssh': 'ssh', 'bootstrap': 'bootstrap',
    'checkout': 'checkout', 'runner': 'runner', 'brief': 'brief', 'ready': 'ready',
}
TASK_NAMES = {
    'request': 'persist request', 'address': 'wait for its address', 'ssh': 'wait for SSH',
    'bootstrap': 'bootstrap and inject credentials', 'checkout': 'check out the repository',
    'runner': 'install the agent runner', 'brief': 'brief the agent', 'ready': 'mark ready',
}
STEP_LABELS.update((step, words[0]) for step, words in Provider.step_words().items())
TASK_NAMES.update((step, words[1]) for step, words in Provider.step_words().items())


def step_labels(provider):
    """{step: short label} in the words of ``provider`` (its name)."""
    return dict(STEP_LABELS, **{step: words[0] for step, words in registry.provider_class(provider).step_words().items()})


def task_names(provider):
    """{step: the role's task name} in the words of ``provider`` (its name): what step 1 answers, for the role to
    name steps 2 to 13 by."""
    return dict(TASK_NAMES, **{step: words[1] for step, words in registry.provider_class(provider).step_words().items()})


# The status a workspace shows while each step runs.
STEP_STATUS = {
    'request': 'requested', 'vmid': 'provisioning', 'clone': 'provisioning', 'wait_clone': 'provisioning',
    'configure': 'provisioning', 'start': 'booting', 'address': 'booting', 'ssh': 'booting',
    'bootstrap': 'bootstrapping', 'checkout': 'bootstrapping', 'runner': 'registering', 'brief': 'registering',
    'ready': 'ready',
}
# Each id lost to another client is an allocation that client made: in a run of many forks every sibling's clone
# is one. Enough attempts for the last of many parallel clones of one template, with a pause between them.
CLONE_ATTEMPTS = 32
ASKPASS_DEBT = 'guest:git-askpass'


def failure_message(name, step, err, labels=None):
    """The one message a failed step ends with: the workspace, the step (in ``labels``: step_labels() of the
    provider), what happened and what to do (``err`` says both)."""
    if step == 'request':
        return 'The request for workspace %s was refused: %s' % (name, err)
    label = (labels or STEP_LABELS)[step]
    return 'Workspace %s failed at step %d/%d (%s): %s' % (name, STEPS.index(step) + 1, len(STEPS), label, err)


class CreateFlow(RequestStep, WarmPoolSteps, Flow):
    """The steps of one workspace's creation. ``params`` are the module's options; the rest as :class:`Flow`'s.

    ``journal`` is None in check mode when none exists yet; ``provider`` None for steps that do not need it.
    """

    # ``phase`` of a failure: the status the workspace had when the step failed ("failed while booting").
    STEP_STATUS = STEP_STATUS

    # ------------------------------------------------------------------ helpers

    @property
    def request(self):
        """The persisted request (what step 1 recorded)."""
        return self.ws['params'] if self.ws else {}

    @property
    def source_id(self):
        """The VMID the workspace is cloned from: the one its template name resolved to when it was requested, or for
        a fork's child its parent's (cloned from the fork's snapshot)."""
        req = self.request
        if req.get('fork'):
            return req['fork']['source']
        return req.get('template_vmid') or req['template']

    def _layout(self):
        req = self.request
        return guest_ops.Layout(req['guest_root'], self.resource_id, req['checkout_path'], req['agent_user'])

    @property
    def labels(self):
        """The steps' short labels in the words of this workspace's provider (step_labels)."""
        return step_labels(provider_of(self.ws or self.params))

    @property
    def ssh_user(self):
        """The user this run logs in as (a connection setting of the run, not of the workspace)."""
        return self.params.get('ssh_user') or self.request.get('ssh_user') or 'root'

    def _guest(self):
        req = self.request
        facts = self.ws['facts']
        # Before the first connection pinned a key: the keys the machine published through the provider, if any.
        keys = [facts.get('host_key'), facts.get('host_key_next')] if facts.get('host_key') else \
            list(facts.get('host_keys_published') or [])
        return Guest(self.ws['address'], port=self.params.get('ssh_port') or req['ssh_port'], user=self.ssh_user,
                     key_file=self.params.get('ssh_private_key') or req.get('ssh_key_path'), host_key=keys)

    def run(self, step):
        if step not in STEPS:
            raise CreateError('Unknown step %r; the steps are %s.' % (step, ', '.join(STEPS)))
        failpoint.enter(self.name, 'create.' + step)
        if step != 'request':
            if self.ws is None and self.check_mode:
                return StepResult(True, '%s: would run' % self.labels[step])
            if self.ws is None:
                raise CreateError('Workspace %r is not recorded: run the request step first.' % self.name)
            if self.ws['desired_state'] == 'destroyed' or self.ws['status'] in ('destroying', 'destroyed'):
                raise CreateError('Workspace %r is %s; it takes no further create steps.'
                                  % (self.name, self.ws['status']), step=step)
            if step in self.ws['progress']:
                return StepResult(False, '%s: already done' % self.labels[step])
            if step in ('bootstrap', 'checkout'):
                self._refuse_missing_secrets(step)
            # A request recorded before these checks existed is checked again where it is used.
            if step == 'checkout':
                validate_checkout_path(self.request.get('checkout_path'), step=step)
            if step == 'bootstrap':
                # The SSH user is a setting of each run: the agent is never the one this run logs in as.
                self._check_agent_user(self.request, step=step)
            if step == 'brief':
                validate_purpose(self.request.get('purpose'), step=step)
            if self.check_mode and step == 'configure' and self.diff and self.resource_id:
                return self.check_configure()
            if self.check_mode:
                return StepResult(True, '%s: would run' % self.labels[step])
            if self.ws['status'] != STEP_STATUS[step] and step != 'ready':
                self.save('status', detail={'step': step, 'status': STEP_STATUS[step]}, status=STEP_STATUS[step],
                          failure=None)
        try:
            return getattr(self, 'step_' + step)()
        except EphemeraError as err:
            # Every failure of a recorded workspace is in the journal, also one a step did not foresee. A run that
            # lost its claim (or whose record moved on) must not write; a journal that cannot take the failure
            # leaves the error itself to report.
            if step != 'request' and not getattr(err, 'recorded', False) and not isinstance(err, StaleGenerationError):
                try:
                    self.fail(step, err)
                except JournalError:
                    pass
            raise

    # --------------------------------------------------------------- 2. vmid

    def _next_candidate(self, avoid=()):
        try:
            # A provider whose ids come from its answer derives its idempotency token from the record: the request's
            # time, and how many candidates a failed allocation used up (a token once used never asks again).
            stamp = (self.ws['progress'] or {}).get('request')
            spent = len((self.ws.get('facts') or {}).get('spent_candidates') or [])
            return self.provider.candidate_for(self.name, '%s/%d' % (stamp, spent) if spent else stamp, avoid,
                                               sleep=self.sleep)
        except Conflict as err:
            raise CreateError(str(err))

    def step_vmid(self):
        if self.candidate_id:
            if self.ws['facts'].get('from_pool') and self.ws['facts'].get('pool_member'):
                # Took a pool member's container, killed before the member's record was closed: closed now.
                self._close_member(self.journal.get_workspace(self.ws['facts']['pool_member']), self.candidate_id)
            self.done('vmid')
            return StepResult(False, '%s: %s (kept)' % (self.labels['vmid'], self.candidate_id))
        taken = self._from_pool()
        if taken is not None:
            return taken
        vmid = self._next_candidate()
        self.save('candidate_vmid', kind='recorded', **self.resource_fields(candidate_id=vmid))
        self.done('vmid')
        return StepResult(True, '%s: %s' % (self.labels['vmid'], vmid), vmid=vmid)

    # -------------------------------------------------------------- 3. clone

    def _inspect_candidate(self, vmid):
        """'ours' (marker verifies), 'taken' (exists, not ours), or 'absent'; and the resource."""
        resource = self.provider.find(vmid, self.request['node'])
        if resource is None:
            return 'absent', None
        verdict = self.provider.verify(resource, self.name, ownership.record_nonce(self.ws))
        return ('ours' if verdict == ownership.VERIFIED else 'taken'), resource

    def _allocation(self, candidate):
        req = self.request
        options = None
        if req.get('launch') is not None:
            terms = self.ws.get('lease') or {}
            # The lease id is the life's client token; created_by the controller host that recorded the request;
            # ends_at the lease's cap (created_at + ttl), which no heartbeat moves: a provider whose cloud deletes a
            # machine by itself at a time (Compute Engine) sets it from this.
            lease = {'id': terms.get('id') or candidate,
                     'created_by': terms.get('created_by') or req.get('created_by')}
            # A warm pool member's machine has none: the workspace that takes it has a lease of its own, which a
            # deletion time set now (and changed on Compute Engine only on a stopped instance) would cut short; the
            # expiry sweep deletes a member nobody took.
            if (terms.get('created_at') is not None and terms.get('ttl') is not None
                    and not req.get('pool_member')):
                lease['ends_at'] = float(terms['created_at']) + float(terms['ttl'])
            options = dict(req['launch'], lease=lease)
        return Allocation(candidate, self.name, self.source_id, req['node'], 'agent-%s' % self.name, req['pool'],
                          full=req['full_clone'], storage=req['storage'], labels=self._labels('provisioning'),
                          nonce=ownership.record_nonce(self.ws), options=options,
                          snapshot=(req.get('fork') or {}).get('snapshot'))

    def _labels(self, state):
        """The lease labels the resource carries in ``state`` (None for a workspace made before leases)."""
        terms = self.ws.get('lease')
        return leasing.lease_labels(terms, state) if terms else None

    def _adopt(self, vmid, reason):
        # The task that made it, found after its answer was lost, when one task fits.
        upid = self.provider.allocation_task(self._allocation(vmid), self.ws['facts'].get('clone_dispatched_at') or 0)
        tasks = self.with_task('clone', upid) if upid else {}
        self.save('adopted', detail={'vmid': vmid, 'reason': reason, 'upid': upid},
                  **dict(tasks, **self.resource_fields(candidate_id=vmid)))
        self.done('clone')
        return StepResult(True, 'clone: adopted %s (%s)' % (self.provider.label(vmid), reason), vmid=vmid)

    def step_clone(self):
        req = self.request
        candidate = self.candidate_id
        taken = set()
        facts = self.ws['facts']
        if facts.get('clone_dispatched') == candidate:
            # An earlier run sent this clone and may have died before hearing the answer: look first.
            state = self._inspect_candidate(candidate)[0]
            if state == 'ours':
                return self._adopt(candidate, 'found after an earlier run lost track of its clone')
            if state == 'taken':
                taken.add(candidate)
                candidate = self._new_candidate(candidate, taken, 'taken by another client')
        lock_deadline = time.monotonic() + self.params['lock_timeout']
        # Short enough that a template lock released by one clone is soon taken by the next one.
        backoff = waiter.Backoff(start=0.3, maximum=2.0, factor=1.5, jitter=0.3)
        # Parallel runs that all asked for the next free id at once: spread them out, so that each round of the
        # race is not run again by the same clients at the same instant.
        spread = waiter.Backoff(start=0.05, maximum=1.0, factor=1.5, jitter=0.5)
        attempts = 0
        while True:
            attempts += 1
            if attempts > CLONE_ATTEMPTS:
                if not taken:
                    raise CreateError('Gave up after %d clone attempts: no answer to them came back, and %s did not '
                                      'show. Check that the provider\'s API answers, then run the create again: it '
                                      'looks for the clone first.' % (CLONE_ATTEMPTS, self.provider.label(candidate)))
                lost = ', '.join(str(t) for t in sorted(taken))
                raise CreateError('Gave up after %d clone attempts: other clients took every %s offered to us '
                                  'meanwhile (%s). Run the create again when fewer allocations are under way, or '
                                  'with fewer forks.' % (CLONE_ATTEMPTS, self.provider.id_noun, lost))
            # The marker's nonce is recorded before the first clone that writes it, and kept for this life of the
            # workspace: an old marker (a restored backup, a copy) at a reused VMID does not carry it.
            nonce = ownership.record_nonce(self.ws) or ownership.new_nonce()
            self.save('clone', kind='dispatched', detail={'vmid': candidate, 'template': self.source_id,
                                                          'full': 1 if req['full_clone'] else 0},
                      facts=dict(self.ws['facts'], clone_dispatched=candidate, clone_dispatched_at=time.time(),
                                 marker_nonce=nonce))
            try:
                upid = self.provider.allocate(self._allocation(candidate))
            except Refused as err:
                # An answer that refused the allocation: it made nothing, so the dispatch is no longer one whose
                # outcome is unknown (a destroy need not wait out the provider's absence window for it).
                self.save('clone', kind='observed', detail={'vmid': candidate, 'refused': str(err)},
                          facts=dict(self.ws['facts'], clone_dispatched=None, clone_refused=candidate))
                raise
            except Conflict:
                state = self._inspect_candidate(candidate)[0]
                if state == 'ours':
                    return self._adopt(candidate, 'our clone was already there')
                taken.add(candidate)
                self.sleep(spread.next_delay())
                candidate = self._new_candidate(candidate, taken, 'already exists')
                continue
            except KeptAsDebt:
                # An earlier run's request that the provider will not send again: looking and allocating again
                # would only meet it again. The step fails with the provider's sentence.
                raise
            except UnknownOutcome as err:
                state = self._inspect_candidate(candidate)[0]
                if state == 'ours':
                    return self._adopt(candidate, 'the clone answer was lost (%s)' % err.transport)
                if state == 'taken':
                    taken.add(candidate)
                    self.sleep(spread.next_delay())
                    candidate = self._new_candidate(candidate, taken, 'taken while our answer was lost')
                continue
            except Locked as err:
                # Parallel linked clones of one template contend on its lock: back off and try again.
                if time.monotonic() > lock_deadline:
                    raise CreateError('Template %s stayed locked for %d s (%s). Retry later.'
                                      % (self.source_id, self.params['lock_timeout'], err))
                attempts -= 1
                self.save('clone', kind='observed', detail={'vmid': candidate, 'locked': str(err.provider_message)})
                self.sleep(backoff.next_delay())
                continue
            self.save('clone', kind='observed', detail={'vmid': candidate, 'upid': upid},
                      **self.with_task('clone', upid))
            self.done('clone')
            return StepResult(True, 'clone: %s from template %s' % (self.provider.label(candidate), self.source_id),
                              vmid=candidate, upid=upid)

    def _new_candidate(self, old, taken, why):
        vmid = self._next_candidate(avoid=taken)
        self.save('candidate_vmid', kind='recorded', detail={'old': old, 'new': vmid, 'why': why},
                  **self.resource_fields(candidate_id=vmid))
        return vmid

    # --------------------------------------------------------- 4. wait clone

    def _forget_candidate(self):
        """The record's fields that drop the candidate, so that the rerun takes a new one and allocates again."""
        fields = dict(self.without_tasks('clone'), **self.resource_fields(candidate_id=None))
        fields['progress'] = {k: v for k, v in self.ws['progress'].items() if k not in ('vmid', 'clone')}
        spent = list((self.ws.get('facts') or {}).get('spent_candidates') or [])
        fields['facts'] = dict(self.ws['facts'], spent_candidates=spent + [self.candidate_id])
        return fields

    def step_wait_clone(self):
        vmid = self.candidate_id
        upid = self.tasks.get('clone')
        try:
            if upid:
                task = self.provider.wait(upid, timeout=self.params['task_timeout'])
                warnings = task.warning_lines
            else:
                self._wait_unlocked(vmid)
                warnings = []
        except TaskFailed as err:
            self._clean_failed_clone(vmid)
            raise self.fail('wait_clone', err, **self._forget_candidate())
        # The resource's id: the candidate, or (where the id comes from the answer) the one the handle names.
        resource_id = self.provider.resource_of(vmid, upid, self.request['node'])
        self.save('clone_confirmed', detail={'vmid': vmid, 'resource_id': resource_id, 'warnings': warnings},
                  **self.resource_fields(resource_id=resource_id, location=self.request['node']))
        self.done('wait_clone')
        return StepResult(True, 'wait clone task: %s cloned' % self.provider.label(vmid), vmid=vmid, warnings=warnings)

    def _wait_unlocked(self, vmid):
        def probe(remaining):
            resource = self.provider.find(vmid, self.request['node'])
            if resource is None:
                return waiter.failed(None)
            return waiter.pending(resource) if resource.lock else waiter.done(resource)
        label = self.provider.label(vmid)
        result = waiter.wait_for(probe, self.params['task_timeout'], what='%s to be unlocked after its clone' % label)
        if result.outcome == waiter.FAILED:
            raise self.fail('wait_clone', CreateError('%s vanished while its clone ran: the clone failed. Rerun to '
                                                      'clone again.' % label), **self._forget_candidate())
        if not result.ok:
            raise CreateError('%s is still locked after %d s. %s'
                              % (label, self.params['task_timeout'], self.provider.unlock_hint(vmid)))

    def _clean_failed_clone(self, vmid):
        """Delete what a failed clone left, only when our marker proves it is ours."""
        state, resource = self._inspect_candidate(vmid)
        if state != 'ours':
            return
        try:
            self.provider.wait(self.provider.delete(resource), timeout=self.params['task_timeout'])
            self.save('partial_clone_removed', detail={'vmid': vmid})
        except ProviderError as err:
            self.journal.record_cleanup_debt(self.name, self.provider.resource_key(vmid, self.request['node']), err,
                                             retry_in=60, claim=self.claim)

    # ----------------------------------------------------------- 5. configure

    def _settings(self, address):
        """The settings the request asks for, with the workspace's static ``address`` (for the static mode)."""
        req = self.request
        if req['address_mode'] == 'static':
            ip, gateway = '%s/%d' % (address, req['address_prefix']), req['gateway']
        else:
            ip, gateway = 'dhcp', None
        return Settings(req['cores'], req['memory'], req['bridge'], ip, gateway, ['ephemera'] + list(req['tags'] or []))

    def _static_address(self):
        """The workspace's static address: its lease (made now if it has none; in check mode only looked up)."""
        req = self.request
        candidates = address_candidates(req['address_range'])
        if not self.check_mode:
            return self.journal.lease_address(req['address_range'], self.name, candidates, claim=self.claim)
        leases = self.journal.address_leases()
        mine = [lease['address'] for lease in leases if lease['workspace'] == self.name]
        taken = set(lease['address'] for lease in leases)
        return (mine or [a for a in candidates if a not in taken] or [None])[0]

    def _plan_configure(self):
        """(resource, {setting: (before, after)}, static address or None): what the configure step changes."""
        resource = self.provider.find(self.resource_id, self.location)
        if resource is None or self.provider.verify(resource, self.name,
                                                    ownership.record_nonce(self.ws)) != ownership.VERIFIED:
            raise CreateError('%s does not carry our marker for %s; refusing to touch it. Reconcile reports it; '
                              'destroy this workspace (its record) and create it again.'
                              % (self.provider.label(self.resource_id), self.name))
        address = self._static_address() if self.request['address_mode'] == 'static' else None
        return resource, self.provider.plan_settings(resource, self._settings(address)), address

    @staticmethod
    def _diff(changes):
        return {'before': {k: before for k, (before, after) in changes.items()},
                'after': {k: after for k, (before, after) in changes.items()}}

    def check_configure(self):
        """Check mode with a diff asked for: what the configure step would change, read from the container."""
        changes = self._plan_configure()[1]
        return StepResult(bool(changes), 'configure: %s' % ('would change %s' % ', '.join(sorted(changes))
                                                            if changes else 'nothing to change'),
                          diff=self._diff(changes))

    def step_configure(self):
        resource, changes, address = self._plan_configure()
        if changes:
            self.save('configure', kind='dispatched', detail={k: after for k, (before, after) in changes.items()})
            self.provider.apply_settings(resource, changes)
        self.done('configure', address=address if address is not None else self.ws['address'])
        return StepResult(bool(changes), 'configure: %s' % (', '.join(sorted(changes)) or 'nothing to change'),
                          diff=self._diff(changes) if self.diff else None)

    # --------------------------------------------------------------- 6. start

    def step_start(self):
        vmid = self.resource_id
        resource = self.provider.ref(vmid, self.location)
        label = self.provider.label(vmid)
        if self.provider.power(resource, absent_ok=False).running:
            self.done('start')
            return StepResult(False, 'start: %s is running' % label)
        upid = self._start_in_flight()
        try:
            upid = self._start(resource, upid)
        except (ProviderError, CreateError) as first:
            # Cold-start fallback: a start that fails is often a guest left half up by an earlier start. Stop it
            # gracefully, then by force, and start once more; if that fails too, both errors are told.
            self.save('start_failed', detail={'vmid': vmid, 'error': str(first)})
            self._stop(resource, 30, 'start failed')
            try:
                upid = self._start(resource, None)
            except (ProviderError, CreateError) as second:
                both = CreateError('%s did not start, twice. First start: %s. Start after a stop: %s. %s, then rerun.'
                                   % (label, first, second, self.provider.start_advice(vmid)),
                                   log_tail=getattr(second, 'log_tail', None))
                # The second start's task, for diagnosis (its log is kept with the failure).
                both.task_id = getattr(second, 'task_id', None)
                raise both
            self.done('start', facts=dict(self.ws['facts'], cold_start_retry=str(first)))
            return StepResult(True, 'start: %s started on the second try (the first failed: %s)' % (label, first),
                              upid=upid)
        self.done('start')
        return StepResult(True, 'start: %s started' % label, upid=upid)

    def _start(self, resource, upid):
        """Start the container (or wait for the start ``upid`` in flight); its task handle once it runs."""
        if upid is None:
            self.save('start', kind='dispatched', detail={'vmid': resource.id})
            try:
                upid = self.provider.start(resource)
            except UnknownOutcome:
                upid = None
            if upid:
                self.save('start', detail={'upid': upid}, **self.with_task('start', upid))
        if upid:
            self.provider.wait(upid, timeout=self.params['task_timeout'])
        else:
            self._wait_running(resource)
        return upid

    def _stop(self, resource, shutdown_timeout, why):
        """A graceful shutdown (``shutdown_timeout`` seconds), then a forced stop if it still runs; each dispatch and
        what it answered is recorded with ``why``. The caller checks the outcome."""
        for action, call in (('shutdown', lambda: self.provider.shutdown(resource, shutdown_timeout)),
                             ('stop', lambda: self.provider.stop(resource))):
            if not self.provider.power(resource).running:
                return
            self.event('dispatched', action, {'vmid': resource.id, 'why': why})
            try:
                handle = call()
                if handle:
                    timeout = shutdown_timeout + 30 if action == 'shutdown' else self.params['task_timeout']
                    self.provider.wait(handle, timeout=timeout)
            except ProviderError as err:
                self.event('observed', action + '_failed', {'vmid': resource.id, 'error': str(err)})

    def _start_in_flight(self):
        """The handle of a start an earlier run dispatched that may still bring the container up, else None.

        A start task that ended (failed, or succeeded for a container that has stopped since) cannot: the step
        starts the container again.
        """
        upid = self.tasks.get('start')
        if not upid:
            return None
        try:
            task = self.provider.task_status(upid)
        except NotFound:
            return None
        return upid if task.status == 'running' else None

    def _wait_running(self, resource):
        def probe(remaining):
            return waiter.done() if self.provider.power(resource, absent_ok=False).running else waiter.pending()
        label = self.provider.label(resource.id)
        if not waiter.wait_for(probe, self.params['task_timeout'], what='%s to be running' % label).ok:
            raise CreateError('%s is not running %d s after it was started. Check its start task and console in the '
                              'provider (a disk, memory or boot problem), then rerun (task_timeout gives a slow start '
                              'more time).' % (label, self.params['task_timeout']))

    # ------------------------------------------------------------- 7. address

    def step_address(self):
        resource = self.provider.ref(self.resource_id, self.location)
        expected = self.ws['address'] if self.request['address_mode'] == 'static' else None

        def probe(remaining):
            try:
                addresses = self.provider.addresses(resource)
            except ProviderError:
                return waiter.pending()
            address = usable_address(addresses, expected)
            return waiter.done(address) if address else waiter.pending()

        result = waiter.wait_for(probe, self.params['address_timeout'], waiter.Backoff(start=0.2, maximum=3.0),
                                 what='%s to report %s' % (self.provider.label(resource.id),
                                                           'its static address %s' % expected if expected
                                                           else self.provider.address_source))
        if not result.ok:
            what = 'its static address %s' % expected if expected else self.provider.address_source
            advice = self.provider.address_advice
            if expected:
                advice += (', and that %s is in the static range of that network and no other machine uses it'
                           % expected)
            message = ('%s did not report %s within %d s (%d looks). %s, then rerun (address_timeout gives a slow '
                       'network more time).' % (self.provider.label(resource.id), what, self.params['address_timeout'],
                                                result.attempts, advice))
            raise CreateError(message)
        facts, said, warned = self._published_host_keys(resource)
        self.done('address', address=result.value, **({'facts': facts} if facts else {}))
        return StepResult(True, 'wait address: %s%s' % (result.value, said), address=result.value,
                          **({'warnings': warned} if warned else {}))

    def _published_host_keys(self, resource):
        """(facts with ``host_keys_published``, or None; a sentence; warnings): the SSH host keys the machine published
        through the provider's API (docs/internals/security.md, host keys), waited for up to ``ssh_timeout``, so that the first
        connection is pinned to them rather than trusting whatever key answers at the address."""
        source = self.provider.host_key_source
        facts = self.ws['facts']
        if source is None or facts.get('host_key'):
            return None, '', []
        if facts.get('host_keys_published'):
            return None, '; host keys from %s' % source, []

        def probe(remaining):
            try:
                keys = self.provider.published_host_keys(resource)
            except ProviderError:
                return waiter.pending()
            return waiter.done(keys) if keys else waiter.pending()
        timeout = self.params['ssh_timeout']
        result = waiter.wait_for(probe, timeout, waiter.Backoff(start=0.5, maximum=5.0),
                                 what='the host keys %s publishes in %s' % (self.provider.label(resource.id), source))
        if result.ok:
            self.save('host_keys_published', kind='observed', detail={'source': source, 'host_keys': result.value})
            return dict(facts, host_keys_published=result.value), '; host keys from %s' % source, []
        warning = ('%s published no SSH host key in %s within %d s: the first SSH connection trusts the key it is '
                   'shown. %s' % (self.provider.label(resource.id), source, timeout, self.provider.host_key_advice))
        self.save('host_keys_published', kind='observed',
                  detail={'source': source, 'host_keys': [], 'reason': warning})
        return None, '; no host keys published', [warning]

    # ----------------------------------------------------------------- 8. ssh

    def step_ssh(self):
        published = not self.ws['facts'].get('host_key') and self.ws['facts'].get('host_keys_published')
        try:
            with wait_for_guest(self._guest, self.params['ssh_timeout']) as connected:
                host_key, attempts = connected.host_key, connected.attempts
        except SshHostKeyMismatch as err:
            if not published:
                raise
            self.save('ssh', kind='observed', detail={'refused': str(err)})
            raise CreateError('%s answers at %s with a host key that is not one of those it published in %s (%s); '
                              'nothing was sent to it. Something else may answer at its address: look at %s and '
                              'the network path, then destroy this workspace and create it again.'
                              % (self.naming.label(self.resource_id), self.ws['address'],
                                 self.naming.host_key_source, err, self.naming.host_key_source))
        self.done('ssh', facts=dict(self.ws['facts'], host_key=host_key))
        return StepResult(True, 'ssh: %s answers (attempt %d)' % (self.ws['address'], attempts), attempts=attempts)

    # The connection the guest steps of one warm_rest share (one_guest_connection), once one of them opened it.
    _shared_guest = None
    _sharing = False

    def _with_guest(self, action):
        if self._sharing:
            if self._shared_guest is None:
                self._shared_guest = self._guest().connect()
            return action(self._shared_guest)
        with self._guest().connect() as connected:
            return action(connected)

    @contextlib.contextmanager
    def one_guest_connection(self):
        """The steps run in this block use one SSH connection to the guest, opened by the first that needs it and
        closed at the end (a step that fails ends the block). Only for the steps after a warm pool member was taken:
        none of them changes the host key the connection is pinned to (a cold bootstrap renews it)."""
        self._sharing = True
        try:
            yield
        finally:
            self._sharing = False
            shared, self._shared_guest = self._shared_guest, None
            if shared is not None:
                shared.close()

    def check_warm_rest(self):
        """Refuse to run WARM_REST as one task for a workspace whose candidate step took no warm pool member (the
        steps a member did are not all done): its steps run one by one. Nothing is written."""
        if self.ws is None:
            return
        missing = [step for step in POOLED_STEPS if step not in self.ws['progress']]
        if missing:
            raise CreateError('Workspace %r took no warm pool member (%s not done): the step warm_rest runs only what '
                              'a create that took one has left. Run the steps one by one (the role does, when its '
                              'candidate step answers no from_pool).' % (self.name, ', '.join(missing)))

    # ------------------------------------------------------------ 9. bootstrap

    def step_bootstrap(self):
        req = self.request
        credentials = self.params.get('agent_credentials')
        if self.ws['facts'].get('from_pool'):
            # The member was bootstrapped and given host keys of its own when it was made: only the request's
            # credentials are new.
            self._with_guest(lambda g: guest_ops.write_credentials(g, self._layout(), credentials))
            self.done('bootstrap')
            return StepResult(True, 'bootstrap: credentials written (the agent user and host keys came with pool '
                              'member %s)' % self.ws['facts'].get('pool_member'))
        with self._guest().connect() as connected:
            keys = self._renew_host_keys(connected)
        self._with_guest(lambda g: guest_ops.bootstrap(g, self._layout(), self.ssh_user, credentials))
        # What a provider puts into its machines besides, from the launch settings the request recorded (a guest step
        # has no provider connection): refused, or a sentence and warnings.
        said, warned = self.naming.guest_setup(self._with_guest, self._layout(), self.ws['address'],
                                               req.get('launch') or {})
        self.done('bootstrap')
        return StepResult(True, 'bootstrap: agent user %s, credentials written; %s%s'
                          % (req['agent_user'], keys, '; ' + said if said else ''), **({'warnings': warned} if warned else {}))

    def _renew_host_keys(self, guest):
        """Give the clone host keys of its own, made in it now, and pin the new key (docs/internals/security.md, host keys).

        A clone carries its template's host keys; every clone of a template would present the same key. Over the
        connection the first SSH pinned, new keys are made next to the served ones; the key sshd will present is
        recorded (``host_key_next``) before the keys are put in place and sshd reloads; a connection that presents
        it confirms it, and it becomes the pinned ``host_key``. A rerun finds the stamp and finishes the same way.
        """
        layout = self._layout()
        stamp = '%s %s %s' % (self.name, self.resource_id, int((self.ws['progress'] or {}).get('request') or 0))
        verdict, key = guest_ops.host_keys_look(guest, layout, guest.host_key, stamp)
        if verdict == 'foreign' or key is None:
            self.save('host_keys', kind='observed', detail={'renewed': False, 'reason': 'sshd does not serve the keys '
                                                            'in /etc/ssh'})
            return 'host keys: the ones sshd serves are not in /etc/ssh, left as they are'
        if key == ' '.join(guest.host_key.split()[:2]):
            if self.ws['facts'].get('host_key') != key or self.ws['facts'].get('host_key_next'):
                facts = {k: v for k, v in self.ws['facts'].items() if k != 'host_key_next'}
                self.save('host_keys', kind='observed', detail={'renewed': True, 'host_key': key},
                          facts=dict(facts, host_key=key))
            return 'host keys: made for this workspace'
        self.save('host_keys', kind='dispatched', detail={'host_key_next': key},
                  facts=dict(self.ws['facts'], host_key_next=key))
        guest_ops.host_keys_install(guest, layout, stamp, install=(verdict == 'new'))
        with wait_for_guest(lambda: Guest(guest.host, port=guest.port, user=guest.user, key_file=guest.key_file,
                                          host_key=key), self.params['ssh_timeout']):
            pass
        facts = {k: v for k, v in self.ws['facts'].items() if k != 'host_key_next'}
        self.save('host_keys', kind='observed', detail={'renewed': True, 'host_key': key},
                  facts=dict(facts, host_key=key))
        return 'host keys: new ones made in the guest, the new key pinned'

    # ------------------------------------------------------------ 10. checkout

    def step_checkout(self):
        req = self.request
        debt = '%s@%s' % (ASKPASS_DEBT, self.naming.resource_key(self.resource_id))
        try:
            head, branch = self._with_guest(lambda g: guest_ops.checkout(
                g, self._layout(), self.ssh_user, req['repo'], req['ref'], git_token=self.params.get('git_token'),
                git_username=self.params.get('git_username') or 'git',
                # A member of a pool of this repository has it cloned already: fetched again, not cloned.
                fetched=bool(self.ws['facts'].get('from_pool') and self.ws['facts'].get('pool_fetched'))))
        except guest_ops.GuestError as err:
            if err.details.get('helper_left'):
                # Visible until a later checkout removes it (or the container goes).
                self.journal.record_cleanup_debt(self.name, debt, err, retry_in=60, claim=self.claim)
            raise
        self.journal.clear_cleanup_debt(self.name, debt, claim=self.claim)
        facts = dict(self.ws['facts'], head=head)
        if req['ref'] is None:
            # Asked for the default branch and only the guest could ask: the branch its clone found.
            facts['default_branch'] = branch
        self.done('checkout', facts=facts)
        at = req['ref'] if req['ref'] is not None else '%s (the default branch)' % (branch or 'HEAD')
        return StepResult(True, 'checkout: %s at %s (%s)' % (req['repo'], at, head[:12]), head=head)

    # -------------------------------------------------------------- 11. runner

    def step_runner(self):
        started = self._with_guest(lambda g: guest_ops.install_runner(
            g, self._layout(), self.ssh_user, self._runner_agents(), timeout=self.params['runner_timeout']))
        self.done('runner')
        return StepResult(True, 'runner: %s' % ('started' if started else 'already answering'))

    # --------------------------------------------------------------- 12. brief

    def _runner_agents(self):
        """The runner configuration's agents: the workspace's agent with its endpoint and model."""
        req = self.request
        try:
            return agent_defs.runner_agents(req['agent'], req.get('agents'), req.get('agent_base_urls'),
                                            req.get('agent_models'))
        except agent_defs.AgentError as err:
            raise CreateError(str(err))

    def step_brief(self):
        req = self.request
        # A purpose amended after a brief (the request step recorded ``rebrief``) replaces the agent's work.
        replace = bool(self.ws['facts'].get('rebrief'))
        layout = self._layout()
        credentials = self.params.get('agent_credentials')
        timeout = self.params.get('brief_timeout')
        timeout = 120 if timeout is None else timeout

        def brief(g):
            if credentials:
                # A retry of the brief with corrected credentials (a key the model endpoint refused) takes them now.
                guest_ops.write_credentials(g, layout, credentials)
            answer = guest_ops.brief(g, layout, self.ssh_user, req['purpose'], req['agent'], self._runner_agents(),
                                     replace=replace)
            if answer.get('already'):
                return answer, False
            # Briefed and working: the model answered the agent's first request, or the agent stopped trying.
            return agent_flow.wait_for_answer(lambda: guest_ops.runner_call(g, layout, self.ssh_user, {'op': 'ping'},
                                                                            point=False), timeout, sleep=self.sleep,
                                              first=answer)

        try:
            answer, slow = self._with_guest(brief)
        except guest_ops.GuestError as err:
            error = (err.details.get('agent') or {}).get('error') or {}
            if error.get('kind'):
                raise CreateError('%s (%s); %s.' % (
                    str(err).rstrip('.'), error['kind'], agent_flow.advice(error['kind'], req['agent'])), step='brief')
            raise
        facts = {k: v for k, v in self.ws['facts'].items() if k != 'rebrief'}
        seen = agent_flow.observation(answer)
        if seen is not None:
            facts['agent'] = seen
        activity = answer.get('activity') if answer.get('activity') in agent_flow.ACTIVITIES else 'unknown'
        try:
            agent_flow.check_briefed(answer, req['agent'])
        except agent_flow.AgentError as err:
            raise self.fail('brief', CreateError(str(err), step='brief'), facts=facts, activity=activity)
        self.done('brief', activity=activity, facts=facts)
        note = ''
        if slow:
            note = '; the model has not answered within %d s: the agent waits for it' % timeout
        elif seen and seen.get('waiting'):
            note = '; it waits for %s' % '; '.join(seen['waiting'])
        return StepResult(not answer.get('already'), 'brief: %s briefed (%s)%s' % (req['agent'], activity, note),
                          activity=activity)

    # --------------------------------------------------------------- 13. ready

    def step_ready(self):
        req = self.request
        answer = self._with_guest(lambda g: guest_ops.runner_call(g, self._layout(), self.ssh_user, {'op': 'ping'}))
        if not answer.get('alive'):
            raise self.fail('ready', CreateError('The agent runner stopped answering: %s' % answer.get('error')),
                            progress={k: v for k, v in self.ws['progress'].items() if k not in ('runner', 'brief')})
        # The labels first: a run killed between them and the record repeats this step, and writes them again.
        note = lease_flow.write_labels(self.journal, self.provider, self.ws, state='ready', claim=self.claim)
        fields = {}
        seen = agent_flow.observation(answer)
        if seen is not None:
            fields['facts'] = dict(self.ws['facts'], agent=seen)
        activity = answer.get('activity') if answer.get('activity') in agent_flow.ACTIVITIES else 'unknown'
        self.save('ready', status='ready', activity=activity, failure=None,
                  progress=dict(self.ws['progress'], ready=time.time()), **fields)
        if self.params.get('idempotency_key'):
            claim = self.journal.begin_idempotent(self.params['idempotency_key'], 'create',
                                                  self._idempotency_request(req), owner=Owner.of_run(),
                                                  claim=self.claim)
            if not claim.replayed:
                self.journal.finish_idempotent(claim, self._result())
        return StepResult(True, 'ready: %s at %s%s' % (self.name, self.ws['address'], '; %s' % note if note else ''))
