#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: ephemera.workspaces contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function
__metaclass__ = type

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
author:
  - Ephemera maintainers (@ephemera)
extends_documentation_fragment:
  - ephemera.workspaces.controller
  - ephemera.workspaces.controller.shutdown
  - ephemera.workspaces.proxmox
  - ephemera.workspaces.journal
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
  description: Findings by kind (V(destroyed), V(destroy_pending), V(destroy_blocked), V(debt_settled), V(debt_open),
    V(busy), V(unfinished_create), V(adoptable), V(candidate_taken), V(missing), V(not_ours), V(failed), V(orphan),
    V(unreadable), V(foreign), V(ok)).
  returned: always
  type: dict
findings:
  description: One dict per finding, with kind, workspace, vmid, node and detail.
  returned: always
  type: list
  elements: dict
resume_create:
  description: Workspaces whose create stopped before V(ready), for the create flow to resume.
  returned: always
  type: list
  elements: str
'''

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.ephemera.workspaces.plugins.module_utils.core.journal import resolve_path
from ansible_collections.ephemera.workspaces.plugins.module_utils.core.module import (
    controller_argument_spec,
    controller_secret,
    journal_argument_spec,
    open_journal,
)
from ansible_collections.ephemera.workspaces.plugins.module_utils.core.errors import EphemeraError
from ansible_collections.ephemera.workspaces.plugins.module_utils.providers.proxmox.client import client_from_params, connection_argument_spec
from ansible_collections.ephemera.workspaces.plugins.module_utils.flows.reconcile import Reconciler


def module_args():
    """The options of the module, declared once: its action plugin validates a task against them too."""
    spec = dict(
        pool=dict(type='str', default='disposable-workspaces'),
        tag=dict(type='str', default='ephemera'),
    )
    spec.update(controller_argument_spec(shutdown=True))
    spec.update(connection_argument_spec())
    spec.update(journal_argument_spec())
    return dict(argument_spec=spec, supports_check_mode=True)


def run(module):
    """The module's work; ``module`` is an AnsibleModule, or its in-process stand-in."""
    journal = open_journal(module)
    if journal is None:
        path = resolve_path(module.params['journal_path'])
        module.exit_json(changed=False, counts={}, findings=[], resume_create=[], report=[
            'No journal at %s yet: nothing was recorded by this controller, so there is nothing to reconcile.' % path])
    with journal:
        try:
            client = client_from_params(module.params)
            secret = controller_secret(journal.path, module.params['controller_secret'], module.check_mode)
            reconciler = Reconciler(journal, client, secret, module.params, check_mode=module.check_mode)
            result = reconciler.run()
        except EphemeraError as err:
            module.fail_json(msg=str(err), **err.details)
    module.exit_json(changed=reconciler.changed, **result)


def main():
    run(AnsibleModule(**module_args()))


if __name__ == '__main__':
    main()
