# -*- coding: utf-8 -*-
# Copyright: ephemera.workspaces contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)


class ModuleDocFragment:
    """The controller's secret and the waits every module that acts on containers shares."""

    DOCUMENTATION = r'''
options:
  controller_secret:
    description:
      - The secret that signs ownership markers. If not set, E(EPHEMERA_CONTROLLER_SECRET), else a secret made once
        next to the journal (C(<journal>.secret), mode 0600). Keep a copy in a vault. Without it no marker verifies,
        and nothing is destroyed.
      - A given secret (here or in E(EPHEMERA_CONTROLLER_SECRET)) must have at least 32 characters. The file must
        belong to the user running Ansible with no access for others, and is never read through a symbolic link.
    type: str
  task_timeout:
    description: Seconds to wait for a Proxmox task (clone, start, stop, delete).
    type: int
    default: 300
  lock_timeout:
    description:
      - Seconds to keep retrying while another task holds the lock, the template's for a clone (parallel clones of
        one template contend on it), or the container's for a delete.
    type: int
    default: 120
'''

    SHUTDOWN = r'''
options:
  shutdown_timeout:
    description: Seconds a graceful shutdown may take before the container is stopped by force.
    type: int
    default: 60
'''
