#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: ephemera.workspaces contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

DOCUMENTATION = r'''
module: queue_info
short_description: Show the queue of long operations, what runs now and at which step
version_added: 0.1.0
description:
  - Returns the queued and running operations and the most recently finished ones, as data (RV(entries)) and as a
    readable tree (RV(tree)), one line per operation with its state, how long it has been in it, the step it is at,
    its runner and who asked for it, the children of a cascade below their parent.
  - A running entry whose runner died is shown as such; the next run on its target takes it over.
  - It only reads. A journal that does not exist yet is reported as empty, with a warning, and is not created.
author:
  - Ephemera maintainers (@ephemera)
extends_documentation_fragment:
  - ephemera.workspaces.journal
  - ephemera.workspaces.history
attributes:
  check_mode:
    support: full
    description: The module never changes anything.
  diff_mode:
    support: none
    description: Nothing to compare.
options:
  target:
    description:
      - Only operations on this workspace, template or group.
    type: str
  target_type:
    description:
      - Only operations on this type of target.
    type: str
    choices: [workspace, template, group]
  kind:
    description:
      - Only operations of these kinds.
    type: list
    elements: str
    choices: [brief, create, destroy, archive, fork, reconcile, template_build]
  state:
    description:
      - Only operations in these states.
    type: list
    elements: str
    choices: [queued, running, done, failed, cancelled]
  entry_id:
    description:
      - Only this entry (with its ancestors).
    type: int
  recent:
    description:
      - How many finished operations to show besides every queued and running one. V(0) shows none.
    type: int
    default: 20
'''

EXAMPLES = r'''
- name: What runs and waits now
  ephemera.workspaces.queue_info:
  register: queue

- name: Print it
  ansible.builtin.debug:
    msg: "{{ queue.tree }}"

- name: Operations on one workspace
  ephemera.workspaces.queue_info:
    target: fix-login-bug
    recent: 5
'''

RETURN = r'''
entries:
  description: The matching entries, oldest first; the ancestors of a cascade child come along.
  returned: always
  type: list
  elements: dict
  contains:
    id:
      description: The entry's id.
      type: int
    kind:
      description: The operation.
      type: str
    target_type:
      description: V(workspace), V(template) or V(group).
      type: str
    target:
      description: The name of what the operation acts on.
      type: str
    params:
      description: The request's parameters (secret-looking keys masked).
      type: dict
    source:
      description: Why it was first asked for (V(manual), V(schedule), V(approval), V(cascade)).
      type: str
    parent_id:
      description: The parent entry of a cascade child, else null.
      type: int
    children:
      description: The ids of its cascade children.
      type: list
      elements: int
    state:
      description: V(queued), V(running), V(done), V(failed) or V(cancelled).
      type: str
    step:
      description: The step the run is at (or stopped at), for example V(wait clone task).
      type: str
    step_at:
      description: When that step began (ISO 8601, UTC).
      type: str
    steps:
      description: The steps so far, each with the time it began.
      type: list
      elements: dict
    owner:
      description: The run that holds (or last held) the claim, as host, pid and start time of its C(ansible-playbook).
      type: dict
    runner_alive:
      description: For a running entry, whether its runner still lives; null otherwise.
      type: bool
    runner_judged_by:
      description:
        - For a running entry, how its runner is judged; null otherwise. V(process) on this host (the process of
          its C(ansible-playbook) run), V(lease) on another host (an AWX job in another container, another
          controller), where it counts as alive until its lease runs out, whether its job still runs or was killed.
      type: str
    takeover_at:
      description:
        - For a running entry, when another run may take it over (UTC); null while a runner on this host lives.
          For a runner on another host it is the end of its lease, or now when it has ended.
      type: str
    takeover_in:
      description: Seconds until RV(entries[].takeover_at), 0 when the next run may take the entry over now.
      type: int
    claims:
      description: How many times the entry was claimed (more than 1 after a takeover).
      type: int
    requested_by:
      description: Every request for it, oldest first, with who, source, AWX job id and the request's state.
      type: list
      elements: dict
    result:
      description: The outcome recorded when it finished (C(msg) or C(reason) for failures and cancellations).
      type: dict
    created_at:
      description: When it was queued.
      type: str
    started_at:
      description: When it was first claimed.
      type: str
    ended_at:
      description: When it finished.
      type: str
tree:
  description: The same entries as readable lines, a cascade's children indented below their parent.
  returned: always
  type: list
  elements: str
  sample:
    - '#12 create workspace fix-login: running for 1m04s, step "wait address" for 12s (runner ctl1 pid 4242);
       requested by alice (AWX job 4711, manual)'
    - '#13 destroy workspace fix-login: queued for 40s, behind #12; requested by cleanup (schedule)'
journal_path:
  description: The journal that was read.
  returned: always
  type: str
'''

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.ephemera.workspaces.plugins.module_utils.core.module import (
    history_argument_spec,
    journal_argument_spec,
    no_history,
)
from ansible_collections.ephemera.workspaces.plugins.module_utils.core.errors import EphemeraError, JournalMissing
from ansible_collections.ephemera.workspaces.plugins.module_utils.core.journal import Journal, resolve_location
from ansible_collections.ephemera.workspaces.plugins.module_utils.core.queue import KINDS, STATES, TARGET_TYPES, Queue, render_tree


def module_args():
    """The options of the module, declared once: its action plugin validates a task against them too."""
    argument_spec = dict(
        target=dict(type='str'),
        target_type=dict(type='str', choices=list(TARGET_TYPES)),
        kind=dict(type='list', elements='str', choices=sorted(KINDS)),
        state=dict(type='list', elements='str', choices=list(STATES)),
        entry_id=dict(type='int'),
        recent=dict(type='int', default=20),
    )
    argument_spec.update(journal_argument_spec())
    argument_spec.update(history_argument_spec())
    return dict(argument_spec=argument_spec, supports_check_mode=True)


def run(module):
    """The module's work; ``module`` is an AnsibleModule, or its in-process stand-in."""
    path = resolve_location(module.params['journal_path'], module.params.get('journal_url'))
    try:
        journal = Journal.open(path, readonly=True, url=module.params.get('journal_url'))
    except JournalMissing as err:
        if not module.params['new_journal']:
            module.fail_json(msg=no_history(path), journal_path=path)
        module.warn('%s Reporting an empty queue.' % err)
        module.exit_json(changed=False, entries=[], tree=[], journal_path=path)
    except EphemeraError as err:
        module.fail_json(msg=str(err), journal_path=path)
    if module.params['recent'] < 0:
        module.fail_json(msg='recent must be 0 or more, not %d.' % module.params['recent'], journal_path=path)
    with journal:
        try:
            entries = Queue(journal).entries(target=module.params['target'], target_type=module.params['target_type'],
                                             kinds=module.params['kind'], states=module.params['state'],
                                             entry_id=module.params['entry_id'], recent=module.params['recent'])
        except EphemeraError as err:  # a damaged page met while reading
            module.fail_json(msg=str(err), journal_path=path)
    module.exit_json(changed=False, entries=entries, tree=render_tree(entries), journal_path=path)


def main():
    run(AnsibleModule(**module_args()))


if __name__ == '__main__':
    main()
