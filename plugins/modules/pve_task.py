#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: ephemera.workspaces contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

DOCUMENTATION = r'''
module: pve_task
short_description: Wait for a Proxmox VE task, or look at it
version_added: 0.1.0
description:
  - Follows a Proxmox VE task by its UPID, the id PVE returns for every asynchronous call (clone, start,
    shutdown, destroy, ...).
  - "With O(wait=true) (the default) it waits until the task stops and fails if the task failed, with the last
    lines of the task log in the message. C(WARNINGS: n) counts as success; the warnings are returned."
  - The wait is bounded by wall-clock time (O(timeout)), however slow each look at the task is. A task that
    is still running at the deadline goes on in PVE; the module then fails and says so.
  - With O(wait=false) it looks once and returns what it saw, whatever the task's outcome.
  - It only reads; it never changes a task or the cluster.
author:
  - Ephemera maintainers (@ephemera)
requirements:
  - boto3 >= 1.28
  - hcloud >= 2.27
extends_documentation_fragment:
  - ephemera.workspaces.proxmox
attributes:
  check_mode:
    support: full
    description: The module only reads, so check mode does the same as a normal run.
  diff_mode:
    support: none
    description: Nothing changes, so there is nothing to compare.
  action_group:
    support: full
    description: Use C(group/ephemera.workspaces.proxmox) in C(module_defaults) to set the connection options.
    membership:
      - ephemera.workspaces.proxmox
options:
  upid:
    description:
      - The task's id, as PVE returned it, for example
        V(UPID:pve1:0001A2B3:00C4D5E6:65F0A1B2:vzclone:9000:root@pam:). The node to ask is taken from it.
    type: str
    required: true
  wait:
    description:
      - Wait until the task stops, and fail if it failed.
      - If V(false), look once and return the task as it is (running, or stopped with any exit status).
    type: bool
    default: true
  timeout:
    description:
      - With O(wait), the most seconds to wait, by the clock.
    type: int
    default: 300
'''

EXAMPLES = r'''
- name: Clone the template and remember the task
  ansible.builtin.uri:
    url: "https://pve1.example.com:8006/api2/json/nodes/pve1/lxc/9000/clone"
    method: POST
    body_format: form-urlencoded
    body: {newid: 105, hostname: agent-105}
    headers:
      Authorization: "PVEAPIToken={{ pve_token_id }}={{ pve_token_secret }}"
  register: clone

- name: Wait for the clone
  ephemera.workspaces.pve_task:
    api_host: pve1.example.com
    api_token_id: "{{ pve_token_id }}"
    api_token_secret: "{{ pve_token_secret }}"
    upid: "{{ clone.json.data }}"
    timeout: 600
  register: cloned

- name: Show warnings of a task that succeeded with warnings
  ansible.builtin.debug:
    var: cloned.task.warning_lines
  when: cloned.task.warnings > 0

- name: Look at a task without waiting (connection options from PROXMOX_* environment variables)
  ephemera.workspaces.pve_task:
    upid: "{{ some_upid }}"
    wait: false
  register: seen
'''

RETURN = r'''
task:
  description: The task as last seen.
  returned: success, and on failure once the task's status was read
  type: dict
  contains:
    upid:
      description: The task's UPID.
      type: str
      sample: "UPID:pve1:000003E8:00001B58:6B105231:vzclone:9000:root@pam:"
    node:
      description: The node that runs the task.
      type: str
      sample: pve1
    type:
      description: The task type.
      type: str
      sample: vzclone
    id:
      description: The object the task works on, usually a guest id. For a clone it is the source's id.
      type: str
      sample: "9000"
    user:
      description: The user or API token that started the task.
      type: str
      sample: root@pam
    starttime:
      description: When the task started, in seconds since the epoch.
      type: int
      sample: 1796231729
    status:
      description: V(running) or V(stopped).
      type: str
      sample: stopped
    exitstatus:
      description:
        - "How the task ended, V(null) while it runs: V(OK), C(WARNINGS: n), or the error."
      type: str
      sample: OK
    succeeded:
      description:
        - "V(true) for exit status V(OK) or C(WARNINGS: n), V(false) for any other, V(null) while the task runs."
      type: bool
      sample: true
    warnings:
      description: "The number of warnings of a task that ended with C(WARNINGS: n), else V(0)."
      type: int
      sample: 0
    warning_lines:
      description: The task log's C(WARN) lines, when the task ended with warnings.
      type: list
      elements: str
      sample: []
    log_tail:
      description: The last lines (at most 20) of the log of a task that failed or warned; empty otherwise.
      type: list
      elements: str
      sample: ["TASK ERROR: CT is locked (backup)"]
    elapsed:
      description: Seconds the module waited.
      type: float
      sample: 4.211
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
# END failure_facts.PROXMOX
path:
  description: The API path of the request that failed.
  returned: failure, when an API request failed
  type: str
  sample: /nodes/pve1/lxc/9000/clone
'''

from ansible.module_utils.basic import AnsibleModule, missing_required_lib

from ansible_collections.ephemera.workspaces.plugins.module_utils.core.module import fail_from
from ansible_collections.ephemera.workspaces.plugins.module_utils.providers.base import ProviderError
from ansible_collections.ephemera.workspaces.plugins.module_utils.providers.registry import api_from_params, load_pve_libraries, provider_argument_spec


def look_at_task(params):
    """The task's result dict: after waiting for it (PveTaskFailed, PveTaskTimeout if it did not succeed) or at once."""
    with api_from_params(params) as client:
        if params['wait']:
            return client.wait_task(params['upid'], timeout=params['timeout']).as_dict()
        return client.task_status(params['upid']).as_dict()


def argument_spec():
    spec = dict(
        upid=dict(type='str', required=True),
        wait=dict(type='bool', default=True),
        timeout=dict(type='int', default=300),
    )
    spec.update(provider_argument_spec(['proxmox']))
    return spec


def module_args():
    """The options of the module, declared once: its action plugin validates a task against them too."""
    return dict(argument_spec=argument_spec(), supports_check_mode=True)


def run(module):
    """The module's work; ``module`` is an AnsibleModule, or its in-process stand-in."""
    missing, error = load_pve_libraries()
    if missing:
        module.fail_json(msg=missing_required_lib(missing), exception=error)
    if module.params['timeout'] < 0:
        module.fail_json(msg='timeout must be 0 or more seconds, not {0}'.format(module.params['timeout']))
    try:
        task = look_at_task(module.params)
    except ProviderError as err:
        fail_from(module, err)
    module.exit_json(changed=False, task=task)


def main():
    run(AnsibleModule(**module_args()))


if __name__ == '__main__':
    main()
