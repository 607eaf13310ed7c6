#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: ephemera.workspaces contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

DOCUMENTATION = r'''
module: queue
short_description: Queue a long operation on a workspace or template, wait for its turn, record its steps and outcome
version_added: 0.1.0
description:
  - Long operations (V(create), V(destroy), V(archive), V(reconcile) of a workspace, V(template_build) of a template)
    never overlap on one target. Each target has a first-in first-out queue in the journal; a run waits until its
    entry is the oldest one of its target, then holds a fenced I(claim) on it while it works.
  - O(state=claimed) queues the operation and waits for its turn. The result's RV(claimed) says whether this run got
    the claim and must do the work; pass RV(claim) to every later task of the operation (O(state=step) tasks, the
    modules that write the journal, and finally O(state=finished) or O(state=failed)). A run that lost its claim
    (taken over after it was thought dead, or cancelled) gets an error at its next journal write and writes nothing.
  - The same operation (same O(kind), O(target), O(params) and O(parent_id)) asked for while an entry for it is still
    queued joins that entry instead of queueing it twice ("also requested by"). Only one of the runs that asked does
    the work; the others wait for it and return its outcome with RV(folded=true). A request made after the run
    started is a new entry.
  - The claim belongs to the C(ansible-playbook) run, not to this module's process. If that run dies, the next run
    on the target takes over; for the same operation it resumes it (RV(resumed=true)), otherwise the dead entry is
    closed as failed (interrupted). The owner of a claim on another host is judged by a lease that every write renews.
  - O(state=enqueued) queues without waiting, for a parent operation that queues its children for other runs to run.
    O(state=cancelled) cancels an entry and its queued children.
author:
  - Ephemera maintainers (@ephemera)
extends_documentation_fragment:
  - ephemera.workspaces.journal
  - ephemera.workspaces.history
attributes:
  check_mode:
    support: full
    description: Reports what would happen (run at once, wait behind other entries, or join an entry); writes nothing.
  diff_mode:
    support: none
    description: Nothing to compare.
options:
  state:
    description:
      - V(claimed) queues the operation (or joins the identical queued one) and waits until this run may run it, or
        until it finished when another run ran it.
      - V(enqueued) queues it (or joins) and returns at once; this run will not run it.
      - V(step) records the step the claimed run is at, for example V(clone) or V(wait address), and renews the claim's
        lease.
      - V(finished) and V(failed) record the outcome of the claimed run; every run that joined the entry reports it.
      - V(cancelled) cancels the entry O(entry_id) and its queued children.
    type: str
    choices: [claimed, enqueued, step, finished, failed, cancelled]
    default: claimed
  kind:
    description:
      - The operation. Required with O(state=claimed) and O(state=enqueued).
    type: str
    choices: [brief, create, destroy, archive, fork, reconcile, template_build]
  target:
    description:
      - The name of the workspace, template or group the operation acts on. Required with O(state=claimed) and
        O(state=enqueued).
      - A workspace other than the one a V(create) makes must be recorded in the journal (or have a create queued).
    type: str
  target_type:
    description:
      - What O(target) names. Defaults to V(workspace), and to V(template) for V(template_build).
      - V(group) names a set of workspaces that a parent operation acts on (for example V(idle-2h)); its children are
        queued with O(parent_id).
    type: str
    choices: [workspace, template, group]
  params:
    description:
      - The parameters of the request (for example repository, ref and purpose). Requests are the same operation only
        if their parameters are equal. Stored in the journal with secret-looking keys masked; never put secrets here.
    type: dict
    default: {}
  parent_id:
    description:
      - Queue the operation as a child of this entry (a cascade). Refused if the parent was cancelled or finished.
    type: int
  source:
    description:
      - Why the operation is asked for. Defaults to V(cascade) with O(parent_id), else to what O(launch_type) implies,
        else V(manual).
    type: str
    choices: [manual, schedule, approval, cascade]
  launch_type:
    description:
      - AWX's C(awx_job_launch_type) of the job, used for O(source) when that is not given (V(scheduled) means
        V(schedule)).
    type: str
  requested_by:
    description:
      - Who or what asks, for example C(awx_user_name). Defaults to the AWX job (O(job_id)), else C(user@host).
    type: str
  job_id:
    description:
      - The AWX job id of this run (C(awx_job_id)). If not set, the environment variable E(JOB_ID) that AWX sets.
    type: str
  timeout:
    description:
      - Seconds to wait for this run's turn (or for the outcome of the entry it joined) with O(state=claimed). On
        timeout the module fails, says what is ahead, and withdraws its request; an entry nobody else waits for is
        cancelled. V(0) looks once.
    type: float
    default: 3600
  wait_for_own_run:
    description:
      - With O(state=claimed), wait even when the entry ahead is held by this same C(ansible-playbook) run (another host
        or loop item of the play). By default such a wait fails at once, because under the linear strategy the holder
        cannot reach its next task while this task waits; set it only for plays with the C(free) strategy.
    type: bool
    default: false
  lease:
    description:
      - Seconds a claim or a waiting request stays valid without a write, as seen from another host. Every write
        under the claim renews it; keep each step shorter than this. On the host of the run, liveness is checked on
        the process itself.
    type: float
    default: 600
  claim:
    description:
      - The claim returned as RV(claim) by O(state=claimed). Required with O(state=step), O(state=finished) and
        O(state=failed) (outside check mode).
    type: dict
  step:
    description:
      - The label of the step the run starts now. Required with O(state=step).
    type: str
  detail:
    description:
      - With O(state=step), details logged with the step in the target's event log.
    type: dict
  result:
    description:
      - With O(state=finished) or O(state=failed), the outcome to record; every joined run returns it.
    type: dict
  msg:
    description:
      - With O(state=failed), what went wrong; stored as the result's C(msg).
    type: str
  entry_id:
    description:
      - The entry to cancel with O(state=cancelled).
    type: int
  reason:
    description:
      - With O(state=cancelled), why; recorded with the entry and shown to the runs that waited for it.
    type: str
  force:
    description:
      - With O(state=cancelled), cancel an entry that is running under a live runner. That runner's next journal write
        is refused and it stops there.
    type: bool
    default: false
notes:
  - Run it on the controller (with C(delegate_to) V(localhost) in plays against other hosts), where the journal and
    the process that owns the claim are.
  - Quick reads (M(ephemera.workspaces.workspace_info), M(ephemera.workspaces.queue_info), the inventory) are not
    queued.
seealso:
  - module: ephemera.workspaces.queue_info
'''

EXAMPLES = r'''
- name: Wait for this run's turn to create the workspace
  ephemera.workspaces.queue:
    kind: create
    target: "{{ workspace_name }}"
    params: {repo: "{{ repo }}", ref: "{{ ref }}", purpose: "{{ purpose }}"}
    requested_by: "{{ awx_user_name | default(omit) }}"
    job_id: "{{ awx_job_id | default(omit) }}"
    launch_type: "{{ awx_job_launch_type | default(omit) }}"
    timeout: 1800
  register: op

- name: Do the work only if this run holds the claim (another run may have done it already)
  when: op.claimed
  block:
    - name: Step clone
      ephemera.workspaces.queue:
        state: step
        claim: "{{ op.claim }}"
        step: clone
    # ... the modules of the operation, each with claim: "{{ op.claim }}"
    - name: Record the outcome
      ephemera.workspaces.queue:
        state: finished
        claim: "{{ op.claim }}"
        result: {vmid: 105}
  rescue:
    - name: Record the failure
      ephemera.workspaces.queue:
        state: failed
        claim: "{{ op.claim }}"
        msg: "{{ ansible_failed_result.msg | default('failed') }}"
    - name: Fail the run
      ansible.builtin.fail:
        msg: "{{ ansible_failed_result.msg | default('failed') }}"

- name: Cancel a queued operation
  ephemera.workspaces.queue:
    state: cancelled
    entry_id: 42
    reason: superseded by a new request
'''

RETURN = r'''
entry:
  description: The queue entry, as M(ephemera.workspaces.queue_info) returns it.
  returned: always, except with O(state=step), O(state=finished) and O(state=failed) in check mode
  type: dict
  sample:
    id: 12
    kind: create
    target_type: workspace
    target: fix-login-bug
    state: running
    step: clone
    requested_by:
      - {requested_by: alice, source: manual, job_id: "4711", state: running}
claimed:
  description: This run holds the claim on RV(entry) and must run the operation.
  returned: with O(state=claimed)
  type: bool
claim:
  description:
    - The fenced claim C({entry_id, fence}) to pass as O(claim) to every later task of the operation; null when
      RV(claimed) is false.
  returned: with O(state=claimed)
  type: dict
folded:
  description:
    - With O(state=claimed), the entry was run by another run that asked for the same operation; its outcome is in
      C(entry.state) and C(entry.result).
    - With O(state=enqueued), the request joined an identical queued entry.
  returned: with O(state=claimed) and O(state=enqueued)
  type: bool
resumed:
  description: The claim was taken over from a run that died while it ran this entry; the work resumes from the journal.
  returned: with O(state=claimed)
  type: bool
resumed_from_step:
  description: With RV(resumed), the step at which the dead run stopped.
  returned: with O(state=claimed)
  type: str
request_id:
  description: This run's request in the entry's list of requesters.
  returned: with O(state=claimed) and O(state=enqueued)
  type: int
waited:
  description: Seconds this run waited.
  returned: with O(state=claimed)
  type: float
would:
  description: In check mode, what would happen (V(run), V(wait), V(join)) and the active entries ahead.
  returned: in check mode with O(state=claimed) and O(state=enqueued)
  type: dict
journal_path:
  description: The journal used.
  returned: always
  type: str
'''

import time

from ansible.module_utils.basic import AnsibleModule, env_fallback

from ansible_collections.ephemera.workspaces.plugins.module_utils.core.module import (
    history_argument_spec,
    journal_argument_spec,
    no_history,
    no_journal_in_database,
)
from ansible_collections.ephemera.workspaces.plugins.module_utils.core.errors import EphemeraError, JournalMissing
from ansible_collections.ephemera.workspaces.plugins.module_utils.core import failpoint
from ansible_collections.ephemera.workspaces.plugins.module_utils.core.journal import Journal, claim_parts, resolve_location
from ansible_collections.ephemera.workspaces.plugins.module_utils.core.run_identity import Owner, hostname, run_pid
from ansible_collections.ephemera.workspaces.plugins.module_utils.operation import Operation
from ansible_collections.ephemera.workspaces.plugins.module_utils.core.queue import (
    ACTIVE,
    CLAIMED,
    KINDS,
    SOURCES,
    TARGET_TYPES,
    Queue,
    describe,
    source_from_launch_type,
)

# The kinds that act on what earlier runs recorded.
HISTORY_KINDS = ('destroy', 'archive', 'reconcile')


def argument_spec():
    spec = dict(
        state=dict(type='str', default='claimed', choices=['claimed', 'enqueued', 'step', 'finished', 'failed', 'cancelled']),
        kind=dict(type='str', choices=sorted(KINDS)),
        target=dict(type='str'),
        target_type=dict(type='str', choices=list(TARGET_TYPES)),
        params=dict(type='dict', default={}),
        parent_id=dict(type='int'),
        source=dict(type='str', choices=list(SOURCES)),
        launch_type=dict(type='str'),
        requested_by=dict(type='str'),
        job_id=dict(type='str', fallback=(env_fallback, ['JOB_ID'])),
        timeout=dict(type='float', default=3600),
        wait_for_own_run=dict(type='bool', default=False),
        lease=dict(type='float', default=600),
        claim=dict(type='dict'),
        step=dict(type='str'),
        detail=dict(type='dict'),
        result=dict(type='dict'),
        msg=dict(type='str'),
        entry_id=dict(type='int'),
        reason=dict(type='str'),
        force=dict(type='bool', default=False),
    )
    spec.update(journal_argument_spec())
    spec.update(history_argument_spec())
    return spec


def without_journal(params, path, missing):
    """The check-mode answer on a controller that has no journal yet: an empty queue (a failure when it has a msg)."""
    if params['state'] in ('claimed', 'enqueued'):
        try:
            kind, target_type = Queue.check_request(params['kind'], params['target'], params['target_type'],
                                                    params['source'])
        except EphemeraError as err:
            return dict(msg=str(err), journal_path=path)
        if kind != 'create' and target_type == 'workspace':
            return dict(msg='%s Workspace %r is not known to it.' % (missing, params['target']), journal_path=path)
        return dict(changed=True, claimed=False, claim=None, folded=False, resumed=False, entry=None,
                    would={'action': 'run', 'entry_id': None, 'ahead': []}, journal_path=path)
    return dict(changed=False, entry=None, journal_path=path)


def run_claimed(queue, params, check_mode):
    """Queue (or join) the operation and wait for this run's turn or for the outcome; returns (result, failure msg)."""
    request = request_args(params)
    if check_mode:
        return dict(changed=True, claimed=False, claim=None, folded=False, resumed=False, entry=None,
                    would=queue.preview(**preview_args(request))), None
    started = time.time()
    enqueued = queue.enqueue(**request)
    turn = queue.wait(enqueued.request_id, timeout=params['timeout'], wait_for_own_run=params['wait_for_own_run'])
    result = dict(entry=turn.entry, request_id=turn.request_id, waited=round(time.time() - started, 3),
                  resumed=turn.resumed, resumed_from_step=turn.previous_step)
    if turn.outcome == CLAIMED:
        result.update(changed=True, claimed=True, claim=turn.claim, folded=False)
        return result, None
    entry = turn.entry
    result.update(changed=False, claimed=False, claim=None, folded=turn.folded)
    if entry['state'] == 'done':
        return result, None
    outcome = entry.get('result') or {}
    why = outcome.get('msg') or outcome.get('reason') or 'no reason recorded'
    return result, 'Operation %s %s: %s' % (describe(entry), 'was cancelled' if entry['state'] == 'cancelled'
                                            else 'failed (run by another run that asked for it too)', why)


def request_args(params):
    source = params['source']
    if source is None and params['parent_id'] is None and params['launch_type']:
        source = source_from_launch_type(params['launch_type'])
    return dict(kind=params['kind'], target=params['target'], target_type=params['target_type'],
                params=params['params'], source=source, requested_by=params['requested_by'], job_id=params['job_id'],
                parent_id=params['parent_id'])


def preview_args(request):
    return {key: request[key] for key in ('kind', 'target', 'target_type', 'params', 'source', 'parent_id')}


def module_args():
    """The options of the module, declared once: its action plugin validates a task against them too."""
    return dict(
        argument_spec=argument_spec(),
        required_if=[
            ('state', 'claimed', ('kind', 'target')),
            ('state', 'enqueued', ('kind', 'target')),
            ('state', 'step', ('step',)),
            ('state', 'cancelled', ('entry_id',)),
        ],
        supports_check_mode=True,
    )


def run(module):
    """The module's work; ``module`` is an AnsibleModule, or its in-process stand-in."""
    params = module.params
    state = params['state']
    path = resolve_location(params['journal_path'], params.get('journal_url'))
    if state in ('step', 'finished', 'failed') and params['claim'] is None:
        if module.check_mode:
            module.exit_json(changed=True, journal_path=path)
        module.fail_json(msg='state=%s needs the claim that state=claimed returned (claim: "{{ op.claim }}"); without '
                             'it this run has no right to write for the operation.' % state, journal_path=path)
    try:
        owner = Owner.of_run(lease_seconds=params['lease'])
        # Check mode writes nothing, and that includes making the journal on a controller's first run. An operation
        # on what earlier runs recorded never starts a journal, unless new_journal says this is the first run.
        # On PostgreSQL no operation starts the journal unless told: a database without it is as likely a wrong one.
        history = params['state'] in ('claimed', 'enqueued') and not params['new_journal'] \
            and (params['kind'] in HISTORY_KINDS or bool(params.get('journal_url')))
        journal = Journal.open(path, create=not module.check_mode and not history, url=params.get('journal_url'),
                               actor='%s pid %d' % (hostname(), run_pid()))
    except JournalMissing as err:
        if history:
            module.fail_json(msg=no_history(path) if params['kind'] in HISTORY_KINDS else no_journal_in_database(path),
                             journal_path=path)
        answer = without_journal(params, path, err)
        if 'msg' in answer:
            module.fail_json(**answer)
        module.exit_json(**answer)
    except EphemeraError as err:
        module.fail_json(msg=str(err), journal_path=path, **err.details)
    with journal:
        queue = Queue(journal, owner=owner, lease=params['lease'])
        if failpoint.active():
            target = params['target']
            if target is None and params['claim'] is not None:
                target = (queue.get(claim_parts(params['claim'])[0]) or {}).get('target')
            failpoint.enter(target, 'queue.' + state)
        failure = None
        try:
            if state == 'claimed':
                result, failure = run_claimed(queue, params, module.check_mode)
            elif state == 'enqueued':
                if module.check_mode:
                    result = dict(changed=True, folded=False, entry=None,
                                  would=queue.preview(**preview_args(request_args(params))))
                else:
                    enqueued = queue.enqueue(waits=False, claim=params['claim'], **request_args(params))
                    result = dict(changed=True, entry=enqueued.entry, folded=enqueued.folded,
                                  request_id=enqueued.request_id)
            elif module.check_mode and state == 'cancelled':
                entry = queue.get(params['entry_id'])
                result = dict(changed=bool(entry) and entry['state'] in ACTIVE, entry=entry)
            elif module.check_mode:
                result = dict(changed=True, entry=queue.get(claim_parts(params['claim'])[0]))
            elif state == 'step':
                result = dict(changed=True, entry=Operation(journal, params['claim'], queue).step(params['step'],
                                                                                                  params['detail']))
            elif state == 'finished':
                outcome = dict(params['result'] or {}, **({'msg': params['msg']} if params['msg'] else {}))
                result = dict(changed=True, entry=Operation(journal, params['claim'], queue).succeeded(outcome))
            elif state == 'failed':
                result = dict(changed=True, entry=Operation(journal, params['claim'], queue).failed(
                    params['msg'] or 'failed', params['result']))
            else:
                entry, changed = queue.cancel(params['entry_id'], params['reason'], params['requested_by'],
                                              params['force'])
                result = dict(changed=changed, entry=entry)
        except EphemeraError as err:
            module.fail_json(msg=str(err), journal_path=path, **err.details)
    result['journal_path'] = path
    if failure:
        module.fail_json(msg=failure, **result)
    module.exit_json(**result)


def main():
    run(AnsibleModule(**module_args()))


if __name__ == '__main__':
    main()
