#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: ephemera.workspaces contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

DOCUMENTATION = r'''
module: workspace_info
short_description: Read workspace records from the journal
version_added: 0.1.0
description:
  - Returns what the journal knows about workspaces, one record each, without asking the cluster.
  - Use it to see a workspace's status (infrastructure readiness), its activity (what the agent inside is doing),
    its identifiers and task UPIDs, its last failure, its cleanup debt and, on request, its event log.
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
  name:
    description:
      - Name of one workspace. Without it, every workspace that matches O(status) and O(activity).
    type: str
  status:
    description:
      - Only workspaces in one of these statuses.
    type: list
    elements: str
    choices: [requested, provisioning, booting, bootstrapping, registering, ready, failed, destroying, destroyed, template]
  activity:
    description:
      - Only workspaces with one of these activities.
    type: list
    elements: str
    choices: [active, idle, blocked, unknown]
  events:
    description:
      - Include each workspace's event log (what was dispatched and observed, by whom, when), oldest first.
    type: bool
    default: false
  events_limit:
    description:
      - With O(events), only the last this many entries of each log. V(0) means all.
    type: int
    default: 50
'''

EXAMPLES = r'''
- name: Show one workspace with its recent history
  ephemera.workspaces.workspace_info:
    name: fix-login-bug
    events: true
  register: info

- name: Every workspace whose agent waits for input
  ephemera.workspaces.workspace_info:
    activity: [blocked]
  register: blocked
'''

RETURN = r'''
workspaces:
  description: The matching workspace records, sorted by name.
  returned: always
  type: list
  elements: dict
  contains:
    name:
      description: The workspace's name.
      type: str
    status:
      description: Infrastructure readiness, one of the statuses in O(status).
      type: str
    activity:
      description:
        - What the agent inside is doing, one of the activities in O(activity), as last observed (RV(workspaces[].agent)).
      type: str
    agent:
      description:
        - What was last observed of the agent, from its own event stream (docs/agents.md), or null before its brief.
        - C(name), C(session) (the agent's session id, which a follow-up brief continues), C(error) (C(kind) one of
          V(auth), V(rate_limit), V(overloaded), V(server), V(network), V(agent), with C(message) and C(at)),
          C(waiting) (approvals it could not get), C(briefs), C(running), C(exit), C(events) (its last 10 events,
          each C(type), C(text), C(at)) and C(observed_at).
        - Observed by the create's brief and ready steps, the C(brief) playbook, the expiry sweep and
          M(ephemera.workspaces.workspace_agent) (which the C(status) playbook runs first).
      type: dict
    agent_summary:
      description: RV(workspaces[].agent) in one line (the agent, its activity, its error, what it waits for, its last
        event), or null before its brief.
      type: str
      sample: "claude-code idle, stopped on auth: Invalid API key; last: Invalid API key (observed 2026-12-04T10:00:00Z)"
    ssh_command:
      description:
        - The command line that reaches the workspace as the controller does (its SSH user, port and key), pinned to
          the host key the create recorded, without any known-hosts file (OpenSSH's C(KnownHostsCommand), OpenSSH 8.5
          or later); null before the workspace has an address and a recorded key.
      type: str
      sample: "ssh -i /home/ops/.ssh/ephemera -p 22 -o UserKnownHostsFile=/dev/null ... root@192.0.2.15"
    fork:
      description:
        - The workspace's place in the fork tree (docs/fork.md) - C(parent) (the workspace it was forked from, or
          null), C(children) (the workspaces forked from it), C(fork_point) (the commit the copy was made at) and
          C(last_fork) (the id, state, outcome, snapshot and children of its last fork, or null), and C(summary) (all of
          it in one line, or null).
      type: dict
      sample: {"parent": null, "children": ["fix-1", "fix-2"], "fork_point": "4f1c2e...", "last_fork": null}
    from_pool:
      description: The warm pool whose member the create took (docs/pools.md), or null for a cold create.
      type: str
      sample: debian
    pool_member:
      description:
        - For a warm pool member's record, its C(pool), membership C(state) (V(filling), V(warm), V(claimed),
          V(released), or V(forgotten) once its container was deleted) and a one-line C(summary) (null once claimed
          or forgotten); null for a workspace.
      type: dict
      sample: {"pool": "debian", "state": "warm", "summary": "warm pool debian: warm"}
    checkout_path:
      description:
        - Where the repository is checked out, as the guest's files are reached (on the try-out places' host tier,
          under the guest's directory on this host).
      type: str
      sample: /workspace/repo
    desired_state:
      description: V(present) or V(destroyed); what the last request asked for.
      type: str
    provider:
      description: Who holds the workspace's resource, V(proxmox), V(aws), V(hetzner), V(gcp) or V(azure).
      type: str
    resource:
      description:
        - The resource as messages name it, in the words of its provider, once its allocation was confirmed, else
          null.
      type: str
      sample: instance i-0a1b2c3d4e5f67890 in eu-west-1
    resource_id:
      description: The resource's id once its allocation was confirmed (for Proxmox the container's VMID), else null.
      type: raw
    candidate_id:
      description: The id recorded before the allocation was sent (for Proxmox the candidate VMID).
      type: raw
    location:
      description: Where the resource lives (for Proxmox the node).
      type: str
    provider_tasks:
      description: The provider's task handles by step (for Proxmox UPIDs; for example C(clone), C(start), C(delete)).
      type: dict
    node:
      description: The Proxmox node the container lives on (the same as RV(workspaces[].location)).
      type: str
    vmid:
      description: The container's VMID once the clone was confirmed, else null (the same as RV(workspaces[].resource_id)).
      type: int
    candidate_vmid:
      description: The VMID chosen for the clone before it was confirmed (the same as RV(workspaces[].candidate_id)).
      type: int
    upids:
      description: Task UPIDs by step (the same as RV(workspaces[].provider_tasks)).
      type: dict
    address:
      description: The address the workspace is reached at.
      type: str
    repo:
      description: The repository checked out in the workspace.
      type: str
    ref:
      description: The branch, tag or commit checked out.
      type: str
    purpose:
      description: What the agent was asked to do.
      type: str
    params:
      description:
        - The request as the create's first step recorded it, without secrets (of the credentials only their names,
          in C(inputs)).
        - Among them C(checkout_path), where the repository is checked out, under C(guest_root) (with C({vmid})
          filled in) where a guest's files lie under a root of their own, as on the try-out cluster's host tier;
          C(agent), C(template), and the last run's connection, C(ssh_user), C(ssh_port) and C(ssh_key_path) (the
          path of the private key file, not the key).
      type: dict
    facts:
      description:
        - What the steps learned about the workspace, among them C(host_key), the SSH host key (V(type base64)) the
          C(ssh) step recorded and every later connection pins, and C(agent) (RV(workspaces[].agent)).
      type: dict
    failure:
      description: The last failure (step, message, task log tail), or null.
      type: dict
    generation:
      description: Counts the record's changes; every change is a compare-and-set on it.
      type: int
    created_at:
      description: When the workspace was first recorded (ISO 8601, UTC).
      type: str
    updated_at:
      description: When the record last changed (ISO 8601, UTC).
      type: str
    cleanup_debt:
      description: Cleanups that could not finish yet, with attempts, last error and next retry.
      type: list
      elements: dict
    lease:
      description:
        - The workspace's lease - C(created_at), C(last_touched_at) and C(expires_at) (RFC 3339, UTC), C(ttl) and
          C(idle_timeout) (seconds), C(keep), and C(expires_in), the seconds from now to C(expires_at) (negative once
          it expired).
        - None for a workspace made before leases, which does not expire by itself.
      type: dict
    cleanup_status:
      description:
        - V(pending) (creation under way, or a cleanup queued or running), V(complete) (deletion confirmed),
          V(failed) (an error, an identity conflict, remaining cleanup debt or no proof of deletion), V(retained)
          (released without delete, or held by a person), or V(none) (nobody asked for a cleanup).
        - Keep your own credentials for the workspace until it is V(complete).
      type: str
    cleanup:
      description: The cleanup's bookkeeping - attempts, the last error, when it failed, the next retry, when it
        completed.
      type: dict
    events:
      description: The event log, with O(events) only.
      type: list
      elements: dict
    operations:
      description:
        - The workspace's queued and running operations and its last 5 finished ones, oldest first, as
          M(ephemera.workspaces.queue_info) returns them; C(step) and C(step_at) show which phase a running one is in.
      type: list
      elements: dict
  sample:
    - name: fix-login-bug
      status: ready
      activity: active
      desired_state: present
      node: pve1
      vmid: 101
      address: 10.0.0.21
templates:
  description:
    - The templates built by M(ephemera.workspaces.workspace_template), each with its pointer and every version.
  returned: always
  type: list
  elements: dict
  contains:
    name:
      description: The template's name.
      type: str
    current:
      description: The version creates that name the template clone now; null before the first build finished.
      type: int
    previous:
      description: The version before it (for a switch back).
      type: int
    versions:
      description:
        - Every version, oldest first, with C(version), C(state) (V(building), V(built), V(failed)), C(source), the
          container (C(resource_id), C(location)), C(tools) (each tool's version) and C(errors) (of a failed build).
      type: list
      elements: dict
  sample: [{"name": "workspace", "current": 2, "previous": 1, "versions": [{"version": 1, "state": "built",
            "resource_id": 131, "tools": {"jq": "jq-1.6"}, "errors": []}]}]
journal_path:
  description: The journal that was read.
  returned: always
  type: str
'''

import time

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.ephemera.workspaces.plugins.module_utils.core import lease as leasing
from ansible_collections.ephemera.workspaces.plugins.module_utils.core import pools
from ansible_collections.ephemera.workspaces.plugins.module_utils.core.module import (
    history_argument_spec,
    journal_argument_spec,
    no_history,
)
from ansible_collections.ephemera.workspaces.plugins.module_utils.core.errors import EphemeraError, JournalMissing
from ansible_collections.ephemera.workspaces.plugins.module_utils.core.journal import (
    WORKSPACE_ACTIVITIES,
    WORKSPACE_STATUSES,
    Journal,
    resolve_location,
)
from ansible_collections.ephemera.workspaces.plugins.module_utils.core.queue import Queue
from ansible_collections.ephemera.workspaces.plugins.module_utils.guest import agents as agent_defs
from ansible_collections.ephemera.workspaces.plugins.module_utils.guest import pinning
from ansible_collections.ephemera.workspaces.plugins.module_utils.providers.base import provider_of, resource_label


def fork_tree(record):
    """Where the workspace stands in the fork tree: the parent it was forked from, the children forked from it,
    the fork point commit, and the state of its last fork (docs/fork.md)."""
    facts = record.get('facts') or {}
    mine, last = facts.get('fork') or {}, {}
    parent = mine.get('parent')
    if parent is None and mine:
        # The parent's record: its last (or running) fork.
        last = mine
    children = list(facts.get('fork_children') or [])
    said = []
    if parent:
        said.append('forked from %s at %s' % (parent, (mine.get('fork_point') or 'no commit')[:12]))
    if children:
        said.append('forked into %s' % ', '.join(children))
    if last and last.get('state') not in (None, 'done', 'abandoned'):
        said.append('fork %s unfinished (%s)' % (last.get('id'), last.get('state')))
    return {'parent': parent, 'children': children, 'summary': '; '.join(said) or None,
            'fork_point': mine.get('fork_point'),
            'last_fork': {k: last.get(k) for k in ('id', 'state', 'outcome', 'snapshot', 'children')}
            if last else None}


def pool_membership(journal, record):
    """{pool, state} of a warm pool member's record (docs/pools.md), else None."""
    pool = ((record.get('params') or {}).get('pool_member') or {}).get('pool')
    if not pool:
        return None
    member = pools.member(journal, pool, record['name'])
    state = member['state'] if member else 'forgotten'
    waiting = state in ('filling', 'warm', 'released')
    return {'pool': pool, 'state': state, 'summary': 'warm pool %s: %s%s' % (
        pool, state, ' (%s)' % member['reason'] if state == 'released' and member.get('reason') else '')
        if waiting else None}


def read_workspaces(journal, name=None, status=None, activity=None, events=False, events_limit=50):
    """The matching records, each with its cleanup debt, its operations and (optionally) its event log."""
    records = journal.list_workspaces(status=status, activity=activity, names=[name] if name else None)
    queue = Queue(journal)
    now = time.time()
    for record in records:
        record['cleanup_debt'] = journal.cleanup_debts(record['name'])
        record.update(leasing.view(record, now))
        record['agent'] = (record.get('facts') or {}).get('agent')
        record['agent_summary'] = agent_defs.describe(record) if record['agent'] else None
        params = record.get('params') or {}
        record['ssh_command'] = pinning.ssh_command(record)
        # How messages name its resource ('CT 105 on pve1', 'instance i-0abc in eu-west-1'), without the provider's
        # code: None before its allocation was confirmed.
        record['resource'] = (resource_label(provider_of(record), record['resource_id'], record.get('location'))
                              if record.get('resource_id') is not None else None)
        record['checkout_path'] = pinning.checkout_path(params.get('guest_root'), record.get('resource_id') or
                                                        record.get('vmid'), params.get('checkout_path'))
        record['operations'] = queue.entries(target=record['name'], target_type='workspace', recent=5)
        record['fork'] = fork_tree(record)
        record['from_pool'] = (record.get('facts') or {}).get('from_pool')
        record['pool_member'] = pool_membership(journal, record)
        if events:
            record['events'] = journal.events(record['name'], limit=events_limit or None)
    return records


def module_args():
    """The options of the module, declared once: its action plugin validates a task against them too."""
    argument_spec = dict(
        name=dict(type='str'),
        status=dict(type='list', elements='str', choices=list(WORKSPACE_STATUSES)),
        activity=dict(type='list', elements='str', choices=list(WORKSPACE_ACTIVITIES)),
        events=dict(type='bool', default=False),
        events_limit=dict(type='int', default=50),
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
        module.warn('%s Reporting no workspaces.' % err)
        module.exit_json(changed=False, workspaces=[], templates=[], journal_path=path)
    except EphemeraError as err:
        module.fail_json(msg=str(err), journal_path=path)
    with journal:
        try:
            workspaces = read_workspaces(journal, **{k: module.params[k] for k in
                                                     ('name', 'status', 'activity', 'events', 'events_limit')})
            templates = read_templates(journal)
        except EphemeraError as err:  # a damaged page met while reading
            module.fail_json(msg=str(err), journal_path=path)
    module.exit_json(changed=False, workspaces=workspaces, templates=templates, journal_path=path)


def read_templates(journal):
    """Every template's pointer with its versions (a template whose first build has not finished has no pointer)."""
    versions = journal.template_versions()
    pointers = {p['name']: p for p in journal.templates()}
    names = sorted(set(pointers) | set(v['name'] for v in versions))
    return [dict(pointers.get(name) or {'name': name, 'current': None, 'previous': None},
                 versions=[v for v in versions if v['name'] == name]) for name in names]


def main():
    run(AnsibleModule(**module_args()))


if __name__ == '__main__':
    main()
