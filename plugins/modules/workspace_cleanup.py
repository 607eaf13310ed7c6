#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: ephemera.workspaces contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

DOCUMENTATION = r'''
module: workspace_cleanup
short_description: Delete the containers whose lease labels say they are over, and only those that are ours
version_added: 0.2.0
description:
  - The direct cleanup sweep by labels, a person's command. It reads the lease labels (state, expires_at, keep,
    created_at) and the ownership marker of every container in the pool, or with the tag, and decides from the labels
    alone by the table of the collection's C(docs/leases.md). Finished states (V(failed), V(released), V(expired))
    are deleted; V(leased), V(ready), V(active) and any other state once past C(expires_at); V(running) and
    V(provisioning) only 12 hours past C(expires_at). Containers without lease labels, with C(keep=true), or whose
    C(expires_at) is missing or still to come are skipped.
  - A container is deleted only when its ownership marker verifies for this controller. Labels are hints anyone can
    copy, so one that the labels would delete without a verifying marker is reported, never deleted.
  - A container whose workspace the journal knows (by the name its marker gives, or by its VMID) is never deleted
    here. It is reported as known to the journal, to be released through its queue (the C(destroy) playbook, or the
    expiry sweep).
  - Without O(apply), and always in check mode, it only reports what it would delete. It is meant to be run by a
    person, never on a schedule. A lost or restored journal makes every live workspace look unknown to it, and a
    timer would then delete the fleet as the leases run out.
  - The journal may be missing (a lost journal is when this sweep is needed); then every container counts as unknown
    to it, and no journal is created. The controller secret is never created either; without one no marker verifies,
    and nothing is deleted.
  - A deletion looks at the container once more right before it acts, stops it by force if it runs, deletes it with
    C(purge=1), and counts only once the container is observed absent. It is recorded in the journal, when there is
    one, under the workspace the marker names. A container that cannot be read or deleted is reported with its
    error, and the sweep goes on with the others.
  - Templates are never looked at.
  - On Azure a set is also judged by the orphan sweep (as M(ephemera.workspaces.workspace_reconcile) does); it is
    deleted only when the labels say so and it is an exact set bound to the record of a workspace the journal holds
    as destroyed that kept the same fingerprint through O(azure_orphan_grace) seconds and two successful
    inventories. Only O(apply) counts an inventory in that quarantine.
author:
  - Ephemera maintainers (@ephemera)
extends_documentation_fragment:
  - ephemera.workspaces.controller
  - ephemera.workspaces.proxmox
  - ephemera.workspaces.provider
  - ephemera.workspaces.aws
  - ephemera.workspaces.hetzner
  - ephemera.workspaces.gcp
  - ephemera.workspaces.azure
  - ephemera.workspaces.journal
attributes:
  check_mode:
    support: full
    description: Reports what it would delete and deletes nothing, whatever O(apply) says.
  diff_mode:
    support: none
    description: Not supported.
options:
  apply:
    description:
      - Delete what the sweep selects. Without it the module only reports what it would delete, even outside check
        mode.
    type: bool
    default: false
  pool:
    description: The pool whose members are swept.
    type: str
    default: disposable-workspaces
  tag:
    description: Containers with this tag are swept too (a tag is a hint, never proof of ownership).
    type: str
    default: ephemera
  fleet:
    description:
      - Sweep the whole fleet - every provider the journal holds a workspace on (and, for AWS and Compute Engine,
        whose connections serve one region or zone, each region or zone), besides O(provider) - one after another,
        each through its own connection from this task's options and the providers' environment variables. Without
        a journal only O(provider) is swept.
      - A place that cannot be reached (credentials missing or refused, its SDK not installed) is reported, the
        others are still swept, and then the task fails naming it.
      - V(false) sweeps O(provider) alone, in its configured region or zone.
    type: bool
    default: false
'''

EXAMPLES = r'''
- name: Show what the cleanup sweep would delete
  ephemera.workspaces.workspace_cleanup:
  register: cleanup

- name: Print the report
  ansible.builtin.debug:
    var: cleanup.report

- name: Delete it
  ephemera.workspaces.workspace_cleanup:
    apply: true
'''

RETURN = r'''
report:
  description:
    - A summary line first, C(cleanup (dry run)) or C(cleanup (applied)) with the numbers to delete, deleted, reported,
      skipped and failed, followed by what it could not use (no journal, no controller secret).
    - Then one line per container, deletions and failures first (action, container, workspace, reason).
  returned: always
  type: list
  elements: str
  sample: ["cleanup (dry run): 1 to delete, 0 deleted, 0 reported, 1 skipped, 0 failed",
           "would delete CT 105 on pve1      fix-login                state ready: expires_at ... has passed",
           "skipped      CT 106 on pve1      review-api               state ready: expires_at ... has not passed"]
counts:
  description:
    - The number of containers by what was done with them (V(deleted), V(would_delete), V(reported), V(skipped),
      V(failed)), and V(to_delete), how many the sweep selected for deletion; with O(fleet), also V(unreachable),
      the places not reached.
  returned: always
  type: dict
  sample: {"to_delete": 1, "deleted": 1, "would_delete": 0, "reported": 1, "skipped": 3, "failed": 0}
entries:
  description:
    - One dict per container in the pool or with the tag.
    - C(id) and C(location) (VMID and node), C(resource_name) (its hostname), C(name) (the workspace its marker names,
      or null), C(labels) (its lease labels), C(verdict) (the ownership verdict, V(verified), V(absent), V(foreign),
      V(mismatch), V(forged) or V(unverified)), C(decision) (what the labels decide, V(delete), V(skip) or V(report)),
      C(reason), C(known) (the journal knows its workspace), C(action) (V(deleted), V(would delete), V(reported),
      V(skipped) or V(failed)) and C(error) (why it failed, or null).
    - With O(fleet), each entry names its C(place) (V(aws eu-west-1), V(proxmox)), and a place that could not be
      reached is an entry with C(action) V(unreachable) and the reason in C(detail).
  returned: always
  type: list
  elements: dict
places:
  description: With O(fleet), the containers by action of each place swept (V(proxmox), V(aws us-east-1), ...).
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

from ansible_collections.ephemera.workspaces.plugins.module_utils.core.errors import EphemeraError, JournalMissing
from ansible_collections.ephemera.workspaces.plugins.module_utils.core.journal import Journal, resolve_location
from ansible_collections.ephemera.workspaces.plugins.module_utils.core.module import (
    controller_argument_spec,
    journal_argument_spec,
)
from ansible_collections.ephemera.workspaces.plugins.module_utils.flows.cleanup import FleetCleanup, Sweep, sweep_secret
from ansible_collections.ephemera.workspaces.plugins.module_utils.providers.registry import api_from_params, provider_argument_spec


def module_args():
    """The options of the module, declared once: its action plugin validates a task against them too."""
    spec = dict(
        apply=dict(type='bool', default=False),
        pool=dict(type='str', default='disposable-workspaces'),
        tag=dict(type='str', default='ephemera'),
        fleet=dict(type='bool', default=False),
    )
    spec.update(controller_argument_spec())
    spec.update(provider_argument_spec())
    spec.update(journal_argument_spec())
    return dict(argument_spec=spec, supports_check_mode=True)


def run(module):
    """The module's work; ``module`` is an AnsibleModule, or its in-process stand-in."""
    params = module.params
    # Check mode never deletes, whatever apply says.
    apply = bool(params['apply']) and not module.check_mode
    journal = None
    client = None
    try:
        path = resolve_location(params['journal_path'], params.get('journal_url'))
        try:
            # Never made: a missing journal means every container is unknown to it. A dry run only reads it.
            journal = Journal.open(path, create=False, readonly=not apply, url=params.get('journal_url'))
        except JournalMissing:
            journal = None
        secret = sweep_secret(path, params['controller_secret'])
        if params['fleet']:
            sweep = FleetCleanup(journal, params, secret, api_from_params, apply=apply, journal_path=path)
            result = sweep.result(sweep.run())
        else:
            client = api_from_params(params)
            sweep = Sweep(journal, client, secret, pool=params['pool'], tag=params['tag'], apply=apply,
                          task_timeout=params['task_timeout'], lock_timeout=params['lock_timeout'],
                          journal_path=path, params=params)
            result = sweep.run()
    except EphemeraError as err:
        module.fail_json(msg=str(err), **err.details)
    finally:
        if journal is not None:
            journal.close()
        if client is not None:
            client.close()
    if params['fleet'] and sweep.unreachable:
        module.fail_json(changed=sweep.changed, msg=sweep.unreachable_message('cleanup sweep'), **result)
    module.exit_json(changed=sweep.changed, **result)


def main():
    run(AnsibleModule(**module_args()))


if __name__ == '__main__':
    main()
