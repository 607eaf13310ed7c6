# -*- coding: utf-8 -*-
# Copyright: ephemera.workspaces contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)


class ModuleDocFragment:
    """The result keys a module returns when the Proxmox VE API or a guest command failed: RETURN text, written once.

    Not a fragment to extend: ansible-core merges a fragment into a module's DOCUMENTATION only (its options,
    attributes, notes and seealso), and ansible-doc reads RETURN from the module's own string. scripts/module_docs.py
    copies these keys into the RETURN of each module between the marker lines ``# BEGIN failure_facts.PROXMOX`` and
    ``# END failure_facts.PROXMOX`` (GUEST alike); tests/unit/packaging/test_return_docs.py fails when a copy differs.
    """

    # The facts of a failed Proxmox VE API request or task (the error classes of providers/proxmox/client.py).
    PROXMOX = r'''
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
'''

    # The facts of a failed SSH connection to a guest or a command there (the errors of guest/ssh.py).
    GUEST = r'''
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
'''
