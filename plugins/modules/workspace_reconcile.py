#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: ephemera.workspaces contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

DOCUMENTATION = r'''
module: workspace_reconcile
short_description: Compare the journal with the cluster, finish pending destructions, report everything else
version_added: 0.1.0
description:
  - Reads every workspace record and makes one C(/cluster/resources) call, then looks closer only where needed
    (candidate VMIDs of unfinished creates, ready workspaces, pool and tag members the journal does not know).
  - Acts on two things only, and only on containers whose ownership marker verifies, each under the workspace's
    queue. It continues destructions that were decided (desired state V(destroyed)) until the container is absent,
    and it settles cleanup debt whose container is gone.
  - Reports the rest, never deleting anything on its own. Unfinished creates are listed in RV(resume_create) for the
    C(ephemera.workspaces.reconcile) playbook to resume through the create flow (which adopts a clone only when its
    marker verifies). Containers in the pool or with the tag that the journal does not know are reported as
    V(orphan) (ours by marker; a lost or restored journal makes every live workspace look like this) or V(foreign).
    An orphan goes only by an operator's explicit request (M(ephemera.workspaces.workspace_destroy) with C(vmid) and
    C(confirm_orphan)).
  - Safe to run at any time. A workspace that a live run works on is left to that run and reported as V(busy).
  - On AWS (whose instance ids are never given to another instance), an instance bound exactly to a workspace the
    journal records as destroyed (its id is the record's, or it was launched with the client token the record holds,
    and its marker verifies for that life of the workspace) was left behind; it is reported as V(destroyed_present),
    and deleted with O(orphans=delete). Instances with our tags but no such record stay report-only.
  - On Azure the orphan sweep inventories the resource group's VMs, NICs, public IPs and managed disks once (shared
    virtual networks, subnets, security groups and the group itself never) and reports every group of sets with its
    verdict and why. A set is deleted with O(orphans=delete) only when it is exact (four members, canonical names and
    topology), bound to the record of a workspace the journal holds as destroyed (same ids, its marker verifies), and
    kept the same fingerprint through O(azure_orphan_grace) seconds and two successful inventories; the quarantine is
    kept in the journal and any change starts it again. Only O(orphans=delete) outside check mode counts an
    inventory. The deletion goes member by member as a release does.
author:
  - Ephemera maintainers (@ephemera)
extends_documentation_fragment:
  - ephemera.workspaces.controller
  - ephemera.workspaces.controller.shutdown
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
    description: Reports what it would do; finishes nothing.
  diff_mode:
    support: none
    description: Not supported.
options:
  pool:
    description: The pool whose members are compared with the journal.
    type: str
    default: disposable-workspaces
  tag:
    description: Containers with this tag are compared with the journal too (tags are hints, never proof).
    type: str
    default: ephemera
  orphans:
    description:
      - What to do with a resource bound exactly to a destroyed record on a provider whose ids are never reused
        (AWS). V(report) lists it as V(destroyed_present). V(delete) deletes it under the workspace's queue,
        confirmed by absence (V(orphan_deleted)); when it cannot, the workspace keeps cleanup debt and the finding
        is V(destroy_blocked).
      - Nothing else is ever deleted as an orphan, whatever this says. Resources the journal has no record of,
        copies of our tags and other controllers' resources are only reported. On Proxmox VE, where a VMID is
        given again, a container at a destroyed workspace's VMID stays report-only too.
      - Check mode deletes nothing.
    type: str
    choices: [report, delete]
    default: report
  fleet:
    description:
      - Reconcile the whole fleet - every provider the journal holds a workspace on (and, for AWS and Compute Engine,
        whose connections serve one region or zone, each region or zone), besides O(provider) - one after another,
        each through its own connection from this task's options and the providers' environment variables.
      - A place that cannot be reached is reported, the others are still reconciled, and then the task fails
        naming it.
      - V(false) reconciles O(provider) alone (in its configured region or zone); a workspace that lives elsewhere
        is the finding V(other_provider) and is not looked at.
    type: bool
    default: false
'''

EXAMPLES = r'''
- name: Reconcile
  ephemera.workspaces.workspace_reconcile:
  register: reconcile

- name: Show the report
  ansible.builtin.debug:
    var: reconcile.report
'''

RETURN = r'''
report:
  description: A summary line with the counts, then one line per finding (kind, workspace, container, detail).
  returned: always
  type: list
  elements: str
counts:
  description: Findings by kind (V(destroyed), V(destroy_pending), V(destroy_blocked), V(orphan_deleted) (a resource
    left behind by a destroyed workspace, deleted with O(orphans=delete)), V(destroyed_present) (a container at the
    id of a workspace the journal records as destroyed), V(debt_settled), V(debt_open),
    V(busy), V(unfinished_create), V(unfinished_fork) (a child of a fork not adopted yet, left to its fork),
    V(template_build) (a template build's candidate, left to its builds), V(pool_member) (a warm pool member, left
    to pool_fill),
    V(adoptable), V(candidate_taken), V(missing), V(not_ours), V(failed), V(orphan),
    V(unreadable), V(foreign), V(other_provider) (a workspace of another provider or region, not looked at),
    V(ok)); with O(fleet), also V(unreachable) (a place that could not be reached).
  returned: always
  type: dict
findings:
  description: One dict per finding, with kind, workspace, vmid, node and detail (and, with O(fleet), its place).
  returned: always
  type: list
  elements: dict
resume_create:
  description: Workspaces whose create stopped before V(ready), for the create flow to resume.
  returned: always
  type: list
  elements: str
places:
  description: With O(fleet), the findings by kind of each place reconciled (V(proxmox), V(aws us-east-1), ...).
  returned: when O(fleet) is true
  type: dict
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
from ansible_collections.ephemera.workspaces.plugins.module_utils.core.errors import EphemeraError
from ansible_collections.ephemera.workspaces.plugins.module_utils.providers.registry import api_from_params, provider_argument_spec
from ansible_collections.ephemera.workspaces.plugins.module_utils.flows.reconcile import FleetReconcile, Reconciler


def module_args():
    """The options of the module, declared once: its action plugin validates a task against them too."""
    spec = dict(
        pool=dict(type='str', default='disposable-workspaces'),
        tag=dict(type='str', default='ephemera'),
        orphans=dict(type='str', default='report', choices=['report', 'delete']),
        fleet=dict(type='bool', default=False),
    )
    spec.update(controller_argument_spec(shutdown=True))
    spec.update(provider_argument_spec())
    spec.update(journal_argument_spec())
    spec.update(history_argument_spec())
    return dict(argument_spec=spec, supports_check_mode=True)


def run(module):
    """The module's work; ``module`` is an AnsibleModule, or its in-process stand-in."""
    journal = open_history(module)
    if journal is None:
        path = resolve_location(module.params['journal_path'], module.params.get('journal_url'))
        module.exit_json(changed=False, counts={}, findings=[], resume_create=[], report=[
            'No journal at %s yet: nothing was recorded by this controller, so there is nothing to reconcile.' % path])
    with journal:
        try:
            secret = controller_secret(journal.path, module.params['controller_secret'], module.check_mode,
                                       journal=journal, warn=module.warn)
            if module.params['fleet']:
                reconciler = FleetReconcile(journal, module.params, secret, api_from_params,
                                            check_mode=module.check_mode)
                result = reconciler.result(reconciler.run())
            else:
                reconciler = Reconciler(journal, api_from_params(module.params), secret, module.params,
                                        check_mode=module.check_mode)
                result = reconciler.run()
        except EphemeraError as err:
            module.fail_json(msg=str(err), **err.details)
    if module.params['fleet'] and reconciler.unreachable:
        module.fail_json(changed=reconciler.changed, msg=reconciler.unreachable_message('reconcile'), **result)
    module.exit_json(changed=reconciler.changed, **result)


def main():
    run(AnsibleModule(**module_args()))


if __name__ == '__main__':
    main()
