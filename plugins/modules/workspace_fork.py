#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: ephemera.workspaces contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

DOCUMENTATION = r'''
module: workspace_fork
short_description: Run one step of forking a ready workspace into children, all or nothing
version_added: 0.2.0
description:
  - Copies a ready workspace (the parent) into children whose disks start as copies of the parent's, each with an
    identity of its own, each briefed with its own purpose. The playbook C(ephemera.workspaces.fork) runs the steps in
    order in the parent's queue, and V(abandon) in its rescue.
  - V(check) refuses what cannot work before anything is copied or recorded (a parent that is not ready or whose agent
    is working, a provider that cannot fork yet, too many children, names that are taken or given twice).
  - V(begin) records the fork (its snapshot's name, its children) in the parent's record and quiesces the parent;
    V(snapshot) takes the snapshot; V(children) clones each child from it and takes it through identity reset;
    V(adopt) is the commit point (every child reset, or none is adopted), then briefs each child and marks it ready;
    V(finish) removes the snapshot. V(abandon) destroys every child of an unadopted fork and removes the snapshot.
  - Proxmox VE (a snapshot, full clones from it) and AWS (an AMI of the instance made without reboot, launches
    from it) fork; a parent on another provider is refused, naming the provider and why.
author:
  - Ephemera maintainers (@ephemera)
requirements:
  - paramiko >= 3.2
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
    description: V(check) refuses or accepts as in a real run; the other steps report what they would do.
  diff_mode:
    support: none
    description: Returns no diff.
options:
  name:
    description: The parent workspace.
    type: str
    required: true
  step:
    description: The step to run.
    type: str
    required: true
    choices: [check, begin, snapshot, children, adopt, finish, abandon]
  claim:
    description:
      - The queue claim on the parent under which this run works, as returned by M(ephemera.workspaces.queue). Every
        journal write (the children's too) carries it.
    type: dict
  count:
    description: How many children, named C(<parent>-1) to C(<parent>-N). Exclusive with O(children).
    type: int
  children:
    description:
      - The children, each C({name, purpose}); a child without a purpose gets O(purpose), else the parent's.
    type: list
    elements: raw
  purpose:
    description: The brief of every child that has none of its own; by default the parent's purpose.
    type: str
  max_children:
    description: The most children one fork makes.
    type: int
    default: 16
  agent_credentials:
    description:
      - The children's own agent credentials (environment variables), written into each child after the parent's
        were removed; never in the journal or the output.
    type: dict
  ssh_user:
    description: User the controller logs in as over SSH; by default the one the parent was created with.
    type: str
  ssh_port:
    description: SSH port of the guests; by default the parent's.
    type: int
  ssh_private_key:
    description: Private key whose public half the guests authorize; by default the parent's.
    type: path
  address_timeout:
    description: Seconds to wait for a child's address.
    type: int
    default: 120
  ssh_timeout:
    description: Seconds to keep trying SSH, with backoff.
    type: int
    default: 120
  runner_timeout:
    description: Seconds to wait for a child's agent runner to answer.
    type: int
    default: 60
  brief_timeout:
    description: Seconds to wait for a child's agent to take its brief.
    type: int
    default: 120
'''

EXAMPLES = r'''
- name: Refuse a fork that cannot work, before anything is copied
  ephemera.workspaces.workspace_fork:
    name: fix-login
    step: check
    count: 4
'''

RETURN = r'''
msg:
  description: What the step did.
  returned: always
  type: str
  sample: "children: fix-login-1, fix-login-2 cloned from ephemera-fork-0a1b2c3d4e and reset"
step:
  description: The step that ran.
  returned: always
  type: str
  sample: children
details:
  description: What the step reports besides (C(children), C(fork_id), C(fork_point), C(snapshot), C(destroyed)).
  returned: always
  type: dict
  sample: {"children": ["fix-login-1", "fix-login-2"]}
fork:
  description: The fork as the parent's record holds it (id, state, snapshot, children, fork point).
  returned: when the parent is recorded
  type: dict
  sample: {"id": "0a1b2c3d4e", "state": "done", "snapshot": "ephemera-fork-0a1b2c3d4e", "fork_point": "4f1c..."}
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
'''

import contextlib

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.ephemera.workspaces.plugins.module_utils.core.module import (
    controller_argument_spec,
    controller_secret,
    history_argument_spec,
    journal_argument_spec,
    open_journal,
)
from ansible_collections.ephemera.workspaces.plugins.module_utils.flows.fork import (
    ABANDON,
    MAX_CHILDREN,
    STEP_LABELS,
    STEPS,
    ForkFlow,
    failure_message,
)
from ansible_collections.ephemera.workspaces.plugins.module_utils.core.errors import EphemeraError
from ansible_collections.ephemera.workspaces.plugins.module_utils.core.journal import resolve_location
from ansible_collections.ephemera.workspaces.plugins.module_utils.providers.registry import api_from_params, provider_argument_spec
from ansible_collections.ephemera.workspaces.plugins.module_utils.operation import fail_step, record_step


# The steps whose failure the playbook's rescue answers with the abandon step, under the same claim.
UNDONE_BY_ABANDON = ('begin', 'snapshot', 'children', 'adopt')


def argument_spec():
    spec = dict(
        name=dict(type='str', required=True),
        step=dict(type='str', required=True, choices=list(STEPS) + [ABANDON]),
        claim=dict(type='dict'),
        count=dict(type='int'),
        children=dict(type='list', elements='raw'),
        purpose=dict(type='str'),
        max_children=dict(type='int', default=MAX_CHILDREN),
        agent_credentials=dict(type='dict', no_log=True),
        ssh_user=dict(type='str'),
        ssh_port=dict(type='int'),
        ssh_private_key=dict(type='path'),
        address_timeout=dict(type='int', default=120),
        ssh_timeout=dict(type='int', default=120),
        runner_timeout=dict(type='int', default=60),
        brief_timeout=dict(type='int', default=120),
    )
    spec.update(controller_argument_spec(shutdown=True))
    spec.update(provider_argument_spec())
    spec.update(journal_argument_spec())
    spec.update(history_argument_spec())
    return spec


def module_args():
    """The options of the module, declared once: its action plugin validates a task against them too."""
    return dict(argument_spec=argument_spec(), supports_check_mode=True, mutually_exclusive=[('count', 'children')])


def run(module):
    """The module's work; ``module`` is an AnsibleModule, or its in-process stand-in."""
    params = dict(module.params)
    step = params['step']
    result = dict(changed=False, step=step, details={})
    journal = open_journal(module, create=False) if not module.check_mode else open_journal(module)
    with journal if journal is not None else contextlib.nullcontext():
        path = journal.path if journal is not None else resolve_location(params['journal_path'], params.get('journal_url'))
        try:
            secret = controller_secret(path, params['controller_secret'], module.check_mode,
                                       journal=journal, warn=module.warn)
            flow = ForkFlow(journal, api_from_params(params), params, secret, claim=params['claim'],
                            check_mode=module.check_mode)
            if step != 'check':
                record_step(journal, params['claim'], STEP_LABELS[step], params['name'], module.check_mode)
            outcome = flow.run(step)
        except EphemeraError as err:
            result.update(err.details)
            # A step the playbook's rescue undoes (abandon) leaves the queued operation to it: the claim stays held.
            held = None if step in UNDONE_BY_ABANDON else params['claim']
            fail_step(module, failure_message(params['name'], step, err), journal, held, params['name'], **result)
        result.update(changed=outcome.changed, msg=outcome.msg, details=outcome.extra)
        if flow.ws is not None:
            result['fork'] = (flow.ws.get('facts') or {}).get('fork') or {}
    module.exit_json(**result)


def main():
    run(AnsibleModule(**module_args()))


if __name__ == '__main__':
    main()
