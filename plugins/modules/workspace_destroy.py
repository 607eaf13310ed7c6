#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: ephemera.workspaces contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

DOCUMENTATION = r'''
module: workspace_destroy
short_description: Run one step of a workspace's destruction, or delete one orphaned container
version_added: 0.1.0
description:
  - Destroying a workspace takes five steps; this module runs the one named by O(step). The role
    M(ephemera.workspaces.workspace_destroy) (and the playbook C(ephemera.workspaces.destroy)) runs them in order.
  - V(mark) records the decision (desired state V(destroyed), status V(destroying)) before anything happens; from
    then on, create, brief and archive of the workspace are refused. V(shutdown) shuts the container down within
    O(shutdown_timeout); V(stop) stops it by force if it is still running; V(delete) deletes it with C(purge=1) and
    waits for the task; V(finish) confirms it absent, releases its static address and marks the workspace
    V(destroyed). The record and its event log stay.
  - Before a container is shut down, stopped or deleted, its ownership marker (in its description) must verify for
    this controller, this workspace and this VMID. A container without our marker, with a forged token, or with a
    marker copied from another VMID is never touched; the step fails and records why.
  - An already absent container, or a workspace that was never recorded, is success with C(changed=false).
  - A delete that cannot finish becomes cleanup debt in the journal (see M(ephemera.workspaces.workspace_info)),
    retried by the next reconcile. Protection, a stale C(create) lock and an HA manager that keeps the container up
    are reported with what to do, not retried in a loop. C(destroy-unreferenced-disks) is never used.
  - With O(vmid) and O(confirm_orphan=true), deletes one container that the journal does not know (an orphan that
    reconcile reported), still only if its marker proves this controller made it.
author:
  - Ephemera maintainers (@ephemera)
requirements:
  - paramiko >= 3.2
extends_documentation_fragment:
  - ephemera.workspaces.controller
  - ephemera.workspaces.controller.shutdown
  - ephemera.workspaces.archive
  - ephemera.workspaces.proxmox
  - ephemera.workspaces.provider
  - ephemera.workspaces.aws
  - ephemera.workspaces.hetzner
  - ephemera.workspaces.gcp
  - ephemera.workspaces.azure
  - ephemera.workspaces.journal
  - ephemera.workspaces.history
attributes:
  check_mode:
    support: full
    description: Reports whether the step would act; changes nothing.
  diff_mode:
    support: none
    description: Not supported.
options:
  name:
    description: The workspace to destroy. Required unless O(vmid) is given.
    type: str
  step:
    description:
      - The step to run. Required with O(name).
      - V(inspect) only reads whether the container exists and runs (C(details.present), C(details.running)).
      - V(guard) stands before the destruction. When the destruction is not decided yet and the container runs, it
        archives the unsaved work (with O(archive=false), only checks that there is none) and refuses to go on when the
        work could be lost. A stopped container's work cannot be checked, so its destruction is refused too. With
        O(discard_unsaved_work=true) none of these stops the destruction.
      - V(retain) releases the workspace without deleting it. It stops counting as running work and keeps its
        container and record for O(retain_ttl) seconds; then the expiry sweep deletes it (its lease labels say so,
        for a sweep by labels). Its cleanup status becomes V(retained). A later destruction (the other steps)
        resumes the cleanup sooner.
    type: str
    choices: [guard, inspect, retain, mark, shutdown, stop, delete, finish]
  retain_ttl:
    description:
      - With O(step=retain), how long the workspace stays retained, in seconds (1 to 2592000, 30 days). When it has
        passed, the expiry sweep (M(ephemera.workspaces.workspace_expire)) archives and deletes it.
      - A workspace retained already keeps the end it was given.
    type: int
    default: 604800
  archive:
    description:
      - With O(step=guard), archive the unsaved work before the destruction (see M(ephemera.workspaces.workspace_archive)
        and the archive options). V(false) only checks that there is none.
    type: bool
    default: true
  discard_unsaved_work:
    description:
      - With O(step=guard), destroy even when unsaved work would be lost, because the container is stopped, the archive
        fails, or (with O(archive=false)) there is unsaved work.
    type: bool
    default: false
  vmid:
    description:
      - Delete this orphaned container (one reconcile reported) instead of a workspace by name. Needs
        O(confirm_orphan=true).
    type: int
  node:
    description: With O(vmid), the container's node; looked up in the cluster if not given.
    type: str
  confirm_orphan:
    description: Confirms the deletion of the orphan O(vmid).
    type: bool
    default: false
  claim:
    description: The queue claim of this run (from M(ephemera.workspaces.queue)); every journal write carries it.
    type: dict
'''

EXAMPLES = r'''
- name: Mark a workspace for destruction
  ephemera.workspaces.workspace_destroy:
    name: fix-login
    step: mark

- name: Delete an orphan that reconcile reported
  ephemera.workspaces.workspace_destroy:
    vmid: 117
    confirm_orphan: true
'''

RETURN = r'''
step:
  description: The step that ran (V(orphan) for an orphan deletion).
  returned: always
  type: str
msg:
  description: What the step did or found.
  returned: always
  type: str
  sample: "delete: CT 105 deleted"
workspace:
  description: The workspace's journal record after the step.
  returned: when the workspace is recorded
  type: dict
details:
  description:
    - Facts of the step that ran. V(inspect) C(present) and C(running), and for a container that is there its
      C(vmid) and C(verdict), the check of its ownership marker (V(verified) when it is this workspace's);
      V(guard), when it archived or checked the work, what M(ephemera.workspaces.workspace_archive) returns
      (C(verdict), C(unsaved), C(state), C(archive), C(push), C(archive_dir), C(notes)); V(delete) C(upid), the
      delete task; an orphan's deletion C(workspace), the workspace whose container it was.
    - Empty for the other steps, for a step that had nothing to do or would run in check mode, and on failure, whose
      facts are keys of the result itself (RV(kind), RV(verdict), ...).
  returned: always
  type: dict
  sample: {"present": true, "running": true, "vmid": 105, "verdict": "verified"}
# BEGIN failure_facts.PROXMOX: written by scripts/module_docs.py from plugins/doc_fragments/failure_facts.py
kind:
  description:
    - What kind of failure it was, and so what a caller may do next (the collection's C(docs/errors.md) has the
      table). From the API V(not_found), V(locked), V(lock_timeout), V(already_exists), V(parameter),
      V(permission), V(auth), V(tls), V(unreachable), V(transient), V(unknown_outcome) or V(other); from a Proxmox
      task V(task_failed) or V(task_timeout).
  returned: failure, when the Proxmox VE API or one of its tasks failed
  type: str
  sample: locked
status:
  description: The HTTP status of the API's answer to the request that failed.
  returned: failure, when the API answered the request with an error
  type: int
  sample: 500
pve_message:
  description: Proxmox VE's own message about the request that failed.
  returned: failure, when the API answered the request with an error
  type: str
  sample: CT is locked (disk)
errors:
  description: Proxmox VE's message for each parameter it refused.
  returned: failure, when the API refused parameters of the request
  type: dict
  sample: {"hostname": "invalid format - value does not look like a valid DNS name"}
transport:
  description:
    - How the connection to the API failed when no answer came. After V(refused), V(dns), V(connect_failed) and
      V(connect_timeout) nothing was sent; after V(read_timeout) and V(connection_lost) the request may have been
      carried out; V(tls) is a certificate or TLS handshake failure.
  returned: failure, when the API could not be reached or its answer was lost
  type: str
  sample: read_timeout
method:
  description: The HTTP method of the API request that failed.
  returned: failure, when an API request failed
  type: str
  sample: POST
path:
  description:
    - The API path of the request that failed.
    - When the journal or the controller secret could not be used, that file instead.
  returned: failure, when an API request failed, or the journal or the controller secret could not be used
  type: str
  sample: /nodes/pve1/lxc/9000/clone
lock:
  description: The lock the container holds, when RV(kind) is V(locked).
  returned: failure, when the container is locked
  type: str
  sample: disk
upid:
  description: The id of the Proxmox task that did not finish in time, or a value given as a task id that is not one.
  returned: failure, when a task did not finish in time or a task id is malformed
  type: str
  sample: "UPID:pve1:000003E8:00001B58:6B105231:vzclone:9000:root@pam:"
task:
  description:
    - The Proxmox task as last seen, with its exit status and the last lines of its log, as
      M(ephemera.workspaces.pve_task) returns it.
  returned: failure, when a Proxmox task failed or did not finish in time
  type: dict
  sample: {"upid": "UPID:pve1:000003E8:00001B58:6B105231:vzclone:9000:root@pam:", "node": "pve1",
           "type": "vzclone", "id": "9000", "user": "root@pam", "starttime": 1796231729, "status": "stopped",
           "exitstatus": "clone failed: no space left on device", "succeeded": false, "warnings": 0,
           "warning_lines": [], "log_tail": ["TASK ERROR: clone failed: no space left on device"], "elapsed": 12.4}
# END failure_facts.PROXMOX
# BEGIN failure_facts.GUEST: written by scripts/module_docs.py from plugins/doc_fragments/failure_facts.py
address:
  description: The address of the guest that SSH failed on.
  returned: failure, when SSH to the guest failed
  type: str
  sample: 192.0.2.15
attempts:
  description: How many times SSH to the guest was tried, with backoff, before it was given up.
  returned: failure, when the guest did not accept SSH in the time allowed
  type: int
  sample: 7
rc:
  description: The exit status of the command that failed in the guest.
  returned: failure, when a command in the guest failed
  type: int
  sample: 128
stderr_tail:
  description: The last lines of the standard error of the command that failed in the guest.
  returned: failure, when a command in the guest failed
  type: str
  sample: "fatal: could not read Username for 'https://git.example.com': terminal prompts disabled"
# END failure_facts.GUEST
vmid:
  description: The container whose ownership marker does not verify for this workspace.
  returned: failure, when a container's marker refused the step
  type: int
  sample: 105
verdict:
  description:
    - Why the container's ownership marker refused the step. V(absent) (no marker), V(foreign) (another
      controller's), V(mismatch) (ours, for another workspace or container), V(forged) (it does not verify).
  returned: failure, when a container's marker refused the step
  type: str
  sample: absent
'''

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.ephemera.workspaces.plugins.module_utils.core.journal import resolve_location
from ansible_collections.ephemera.workspaces.plugins.module_utils.core.module import (
    controller_argument_spec,
    controller_secret,
    history_argument_spec,
    journal_argument_spec,
    open_history,
)
from ansible_collections.ephemera.workspaces.plugins.module_utils.flows.archive import ArchiveFlow
from ansible_collections.ephemera.workspaces.plugins.module_utils.flows.archive import argument_spec as archive_argument_spec
from ansible_collections.ephemera.workspaces.plugins.module_utils.flows.destroy import (
    STEP_LABELS,
    DestroyFlow,
    StepResult,
    destroy_orphan,
    failure_message,
)
from ansible_collections.ephemera.workspaces.plugins.module_utils.core.errors import EphemeraError
from ansible_collections.ephemera.workspaces.plugins.module_utils.core import failpoint
from ansible_collections.ephemera.workspaces.plugins.module_utils.providers.registry import api_from_params, provider_argument_spec
from ansible_collections.ephemera.workspaces.plugins.module_utils.operation import fail_step, running_step


def argument_spec():
    spec = dict(
        name=dict(type='str'),
        step=dict(type='str', choices=['guard'] + list(STEP_LABELS)),
        archive=dict(type='bool', default=True),
        discard_unsaved_work=dict(type='bool', default=False),
        vmid=dict(type='int'),
        node=dict(type='str'),
        confirm_orphan=dict(type='bool', default=False),
        claim=dict(type='dict'),
        retain_ttl=dict(type='int', default=604800),
    )
    spec.update(archive_argument_spec())
    spec.update(controller_argument_spec(shutdown=True))
    spec.update(provider_argument_spec())
    spec.update(journal_argument_spec())
    spec.update(history_argument_spec())
    return spec


def guard(journal, flow, params, check_mode):
    """The guard step: what the cluster shows of the container, then the archive's verdict on its work."""
    flow.refuse_unfinished_fork()
    seen = flow.run('inspect').extra
    failpoint.enter(params['name'], 'destroy.guard')
    changed, msg, result = ArchiveFlow(journal, params, claim=params['claim'], check_mode=check_mode).guard(
        seen['present'], seen['running'], archive=params['archive'], discard=params['discard_unsaved_work'],
        noun=flow.provider.noun)
    return StepResult(changed, msg, **{k: v for k, v in result.items() if k not in ('changed', 'msg')})


def module_args():
    """The options of the module, declared once: its action plugin validates a task against them too."""
    return dict(
        argument_spec=argument_spec(),
        supports_check_mode=True,
        required_one_of=[('name', 'vmid')],
        mutually_exclusive=[('name', 'vmid')],
        required_by={'name': 'step'},
    )


def run(module):
    """The module's work; ``module`` is an AnsibleModule, or its in-process stand-in."""
    params = module.params
    if params['vmid'] is not None and not params['confirm_orphan']:
        module.fail_json(msg='Deleting CT %d needs confirm_orphan=true: it is not a workspace the journal knows, so '
                             'say explicitly that it should go. Its ownership marker is still checked.' % params['vmid'])
    step = params['step'] or 'orphan'
    result = dict(changed=False, step=step, details={})
    journal = open_history(module)
    if journal is None:
        module.exit_json(msg='%s: no journal at %s yet, so nothing was recorded or marked by this controller; '
                             'nothing would be destroyed' % (step, resolve_location(params['journal_path'], params.get('journal_url'))), **result)
    with journal:
        try:
            client = api_from_params(params)
            secret = controller_secret(journal.path, params['controller_secret'], module.check_mode,
                                       journal=journal, warn=module.warn)
            if params['vmid'] is not None:
                outcome = destroy_orphan(journal, client, secret, params['vmid'], params['node'],
                                         task_timeout=params['task_timeout'], check_mode=module.check_mode)
            else:
                flow = DestroyFlow(journal, client, params, secret, claim=params['claim'], check_mode=module.check_mode)
                failpoint.enter(params['name'], 'destroy.' + step)
                label = STEP_LABELS.get(step, 'archive guard')
                # The inspect step only reads: it neither records itself nor needs its claim kept.
                with running_step(journal, params['claim'] if step != 'inspect' else None, label, params['name'],
                                  module.check_mode):
                    outcome = flow.run(step) if step != 'guard' else guard(journal, flow, params, module.check_mode)
        except EphemeraError as err:
            result.update(err.details)
            fail_step(module, failure_message(params['name'] or params['vmid'], step, err), journal, params['claim'],
                      params['name'], **result)
        result.update(changed=outcome.changed, msg=outcome.msg, details=outcome.extra)
        if params['name']:
            result['workspace'] = journal.get_workspace(params['name'])
    module.exit_json(**result)


def main():
    run(AnsibleModule(**module_args()))


if __name__ == '__main__':
    main()
