#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: ephemera.workspaces contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

DOCUMENTATION = r'''
module: workspace_lease_audit
short_description: List the workspaces whose cleanup is pending, failed or retained, or whose lease expired
version_added: 0.2.0
description:
  - Reads the journal and lists every workspace whose cleanup is pending, failed or retained, and every workspace
    whose lease expired while its cleanup has not started yet (category V(expired)), the ones the next expiry
    sweep releases.
  - For each it gives the resource, the lease's expiry, the cleanup's attempts, last error and next retry, and one
    sentence saying what to do.
  - The result is machine-readable (RV(entries), RV(counts)) and a report of one line per workspace (RV(report)).
  - It only reads. A journal that does not exist yet is reported as an empty audit, with a warning, and is not
    created. It never asks the cluster.
author:
  - Ephemera maintainers (@ephemera)
extends_documentation_fragment:
  - ephemera.workspaces.journal
attributes:
  check_mode:
    support: full
    description: The module never changes anything.
  diff_mode:
    support: none
    description: Nothing to compare.
options:
  statuses:
    description:
      - The categories to list. A workspace's category is its cleanup status - V(pending) (creation under way, or
        a destroy queued or running), V(failed), V(retained) (released without delete), V(complete) (deletion
        confirmed) or V(none) (no cleanup asked for) - except that V(none) with an expired lease is V(expired).
    type: list
    elements: str
    choices: [pending, failed, retained, expired, complete, none]
    default: [pending, failed, retained, expired]
  all:
    description:
      - List every workspace of the journal, whatever its category. O(statuses) is then ignored.
    type: bool
    default: false
  fleet:
    description:
      - Report the whole fleet place by place - every provider (and, for AWS and Compute Engine, region or zone)
        the journal holds listed workspaces in - as a line per place after the summary, and in RV(places).
      - The audit reads the journal only and connects to no provider, so no place can be out of its reach; the
        sweeps that act (M(ephemera.workspaces.workspace_expire) with O(ephemera.workspaces.workspace_expire#module:fleet))
        report a place they cannot reach.
      - V(false) lists the same workspaces, without the lines per place.
    type: bool
    default: false
'''

EXAMPLES = r'''
- name: What needs attention
  ephemera.workspaces.workspace_lease_audit:
  register: audit

- name: Print it
  ansible.builtin.debug:
    msg: "{{ audit.report }}"

- name: Fail a scheduled check when a cleanup failed
  ansible.builtin.assert:
    that: audit.counts.failed == 0
    fail_msg: "{{ audit.report }}"

- name: Only the failed cleanups
  ephemera.workspaces.workspace_lease_audit:
    statuses: [failed]
'''

RETURN = r'''
entries:
  description: The listed workspaces, sorted by name.
  returned: always
  type: list
  elements: dict
  contains:
    name:
      description: The workspace's name.
      type: str
    warm_pool:
      description: For a warm pool member (docs/pools.md), its pool; its report line says so. Null for a workspace.
      type: str
    category:
      description: V(pending), V(failed), V(retained), V(expired), V(complete) or V(none), as in O(statuses).
      type: str
    cleanup_status:
      description: The workspace's cleanup status, as M(ephemera.workspaces.workspace_info) shows it (V(none) for the
        V(expired) category).
      type: str
    status:
      description: The workspace's status (infrastructure readiness).
      type: str
    desired_state:
      description: V(present) or V(destroyed).
      type: str
    resource:
      description: C(provider), C(resource_id) (null before its allocation was confirmed) and C(location).
      type: dict
    place:
      description: Where the workspace lives - its provider, and its region or zone on AWS and Compute Engine
        (V(aws eu-west-1), V(hetzner), V(proxmox)).
      type: str
    expires_at:
      description: When the lease expires or expired (RFC 3339, UTC); null for a workspace made before leases, which
        never expires by itself.
      type: str
    expires_in:
      description: Seconds from now to RV(entries[].expires_at), negative once it passed; null without a lease.
      type: int
    keep:
      description: Whether the workspace was requested with C(keep=true) - the expiry sweep retains it when its lease
        ends instead of deleting it.
      type: bool
    retained_until:
      description: For a retained workspace, when its retention ends and the expiry sweep deletes it (RFC 3339, UTC);
        null otherwise.
      type: str
    retained_in:
      description: Seconds from now to RV(entries[].retained_until), negative once it passed; null if not retained.
      type: int
    attempts:
      description: The failed cleanup attempts - the record's count, or its cleanup debt's when that is higher.
      type: int
    last_error:
      description: The last cleanup error - the record's, else that of the cleanup debt that changed last; null if
        none.
      type: str
    failed_at:
      description: When the last attempt failed (RFC 3339, UTC), or null.
      type: str
    next_retry:
      description: When the cleanup is retried (RFC 3339, UTC), or null.
      type: str
    needs_operator:
      description: Whether the failure needs a person first (protection, HA, a stale lock), so a retry alone will
        fail again.
      type: bool
    cleanup_debt:
      description: The cleanups of the workspace's resources that could not finish - C(resource), C(attempts),
        C(last_error), C(next_retry).
      type: list
      elements: dict
    advice:
      description: One sentence saying what to do.
      type: str
  sample:
    - name: fix-login
      category: failed
      cleanup_status: failed
      status: destroying
      desired_state: destroyed
      resource: {provider: proxmox, resource_id: 101, location: pve1}
      expires_at: "2026-12-03T10:30:00Z"
      expires_in: -900
      keep: false
      attempts: 2
      last_error: CT 101 stayed locked for 120 s (backup).
      failed_at: "2026-12-03T10:40:00Z"
      next_retry: "2026-12-03T10:45:00Z"
      needs_operator: false
      cleanup_debt: []
      advice: retried at 2026-12-03T10:45:00Z by the expiry sweep or reconcile; to retry now run
        ephemera.workspaces.destroy -e workspace=fix-login
counts:
  description: The number of workspaces of the journal in each category, listed or not (every category, zero
    included).
  returned: always
  type: dict
  sample: {pending: 1, failed: 1, retained: 0, expired: 2, complete: 0, none: 0}
report:
  description:
    - "The audit for people: a summary line, C(lease audit: N pending, N failed, N retained, N expired) (and the
      other categories that were asked for), then one line per entry, C(NAME: CATEGORY (details): advice)."
    - The details of a failure are its attempt, last error and next retry; those of the others the status.
  returned: always
  type: list
  elements: str
  sample:
    - "lease audit: 0 pending, 1 failed, 0 retained, 0 expired"
    - "fix-login: failed (attempt 2, last error: CT 101 stayed locked for 120 s (backup), next retry
      2026-12-03T10:45:00Z): retried at 2026-12-03T10:45:00Z by the expiry sweep or reconcile; to retry now run
      ephemera.workspaces.destroy -e workspace=fix-login"
places:
  description: With O(fleet), the listed workspaces by category of each place (V(proxmox), V(aws us-east-1), ...).
  returned: when O(fleet) is true
  type: dict
  sample: {"aws us-east-1": {failed: 1}, hetzner: {retained: 2}}
journal_path:
  description: The journal that was read.
  returned: always
  type: str
'''

import time

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.ephemera.workspaces.plugins.module_utils.core.errors import EphemeraError, JournalMissing
from ansible_collections.ephemera.workspaces.plugins.module_utils.core.journal import Journal, resolve_location
from ansible_collections.ephemera.workspaces.plugins.module_utils.core.module import journal_argument_spec
from ansible_collections.ephemera.workspaces.plugins.module_utils.flows import audit
from ansible_collections.ephemera.workspaces.plugins.module_utils.flows import placing


def module_args():
    """The options of the module, declared once: its action plugin validates a task against them too."""
    argument_spec = dict(
        statuses=dict(type='list', elements='str', choices=list(audit.CATEGORIES),
                      default=list(audit.DEFAULT_CATEGORIES)),
        all=dict(type='bool', default=False),
        fleet=dict(type='bool', default=False),
    )
    argument_spec.update(journal_argument_spec())
    return dict(argument_spec=argument_spec, supports_check_mode=True)


def run(module):
    """The module's work; ``module`` is an AnsibleModule, or its in-process stand-in."""
    params = module.params
    path = resolve_location(params['journal_path'], params.get('journal_url'))
    selection = dict(categories=params['statuses'], every=params['all'])
    journal = None
    try:
        journal = Journal.open(path, readonly=True, url=params.get('journal_url'))
    except JournalMissing as err:
        module.warn('%s Reporting an empty audit.' % err)
    except EphemeraError as err:
        module.fail_json(msg=str(err), journal_path=path)
    if journal is None:
        found = audit.audit_records([], time.time(), **selection)
    else:
        with journal:
            try:
                found = audit.audit(journal, time.time(), **selection)
            except EphemeraError as err:  # a damaged page met while reading, or a record the lease rules refuse
                module.fail_json(msg=str(err), journal_path=path)
    result = dict(changed=False, entries=found['entries'], counts=found['counts'], report=found['report'],
                  journal_path=path)
    if params['fleet']:
        result['places'] = found['places']
        result['report'][1:1] = placing.place_lines(found['places'])
    module.exit_json(**result)


def main():
    run(AnsibleModule(**module_args()))


if __name__ == '__main__':
    main()
