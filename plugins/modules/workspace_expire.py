#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: ephemera.workspaces contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

DOCUMENTATION = r'''
module: workspace_expire
short_description: Release the workspaces whose lease expired, after counting their agents' activity
version_added: 0.2.0
description:
  - One expiry sweep, made to run every few minutes (an AWX schedule, cron). It works from the journal. It asks
    the cluster only about the workspaces it releases (confirming that a deleted container is gone looks it up in
    the cluster's list, in case it moved to another node).
  - First it asks every ready workspace whose lease still runs for its agent's activity, many at once, one SSH
    round trip each, bounded by O(activity_timeout). It records the answer. V(active) or V(blocked) touches the
    lease as a heartbeat would, never past its ttl and never after it expired.
  - Then it releases at most O(limit) workspaces whose lease expired, or whose failed cleanup is due for a retry,
    each through its queue. A workspace another run works on is left for the next sweep. The release is the
    destroy playbook's path - unsaved work archived first, then the ownership-checked delete confirmed by absence.
  - A failed release keeps the workspace, counts the attempt, keeps the error and retries 5 minutes later. A
    success records when the cleanup completed and keeps the record for audit.
  - A workspace requested with C(keep=true) is retained when its lease ends instead - released without delete, for
    O(retain_ttl) seconds. A retained workspace (kept, or released without delete by the destroy playbook) is
    released with delete, as above, once its retention has ended.
author:
  - Ephemera maintainers (@ephemera)
requirements:
  - paramiko >= 3.2
extends_documentation_fragment:
  - ephemera.workspaces.controller
  - ephemera.workspaces.controller.shutdown
  - ephemera.workspaces.archive
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
    description: Asks for activity and says what it would release; records and releases nothing.
  diff_mode:
    support: none
    description: Not supported.
options:
  limit:
    description: At most this many workspaces are released by one sweep; the others are left for the next one.
    type: int
    default: 16
  parallel:
    description:
      - How many workspaces are asked for their activity at once, and how many due workspaces are released at
        once (each through its own queue, with a journal connection of its own).
      - With O(fleet=true), the places are swept one after another, each with this bound.
    type: int
    default: 8
  activity_timeout:
    description: Seconds one workspace has to answer for its activity (connection and answer each).
    type: int
    default: 10
  fleet:
    description:
      - Sweep the whole fleet - every provider the journal holds a workspace on (and, for AWS and Compute Engine,
        whose connections serve one region or zone, each region or zone), besides O(provider) - one after another,
        each through its own connection from this task's options and the providers' environment variables.
      - A place that cannot be reached (credentials missing or refused, its SDK not installed) is reported, the
        others are still swept, and then the task fails naming it.
      - V(false) sweeps O(provider) alone (in its configured region or zone) and reports a due workspace elsewhere
        as V(other_provider).
    type: bool
    default: false
  retain_ttl:
    description:
      - How long a workspace requested with C(keep=true) stays retained after its lease ended, in seconds (1 to
        2592000, 30 days). Then a later sweep deletes it.
    type: int
    default: 604800
'''

EXAMPLES = r'''
- name: Release what expired
  ephemera.workspaces.workspace_expire:
    limit: 16
  register: expiry

- name: What the sweep did
  ansible.builtin.debug:
    var: expiry.report
'''

RETURN = r'''
entries:
  description:
    - One entry per workspace the sweep looked at - V(workspace), V(action) and V(detail). The action is
      V(activity) (with V(activity)), V(no_answer), V(released), V(retained) (kept, released without delete),
      V(failed), V(busy), V(deferred), V(would_release), V(would_retain) or V(other_provider); with O(fleet), each
      entry names its V(place) (V(aws eu-west-1), V(proxmox)), and a place that could not be reached is an entry
      V(unreachable) with the reason.
  returned: always
  type: list
  elements: dict
counts:
  description: The entries by action.
  returned: always
  type: dict
places:
  description: With O(fleet), the entries by action of each place swept (V(proxmox), V(aws us-east-1), ...).
  returned: when O(fleet) is true
  type: dict
report:
  description: A summary line, then one line per entry.
  returned: always
  type: list
  elements: str
'''

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.ephemera.workspaces.plugins.module_utils.core.errors import EphemeraError
from ansible_collections.ephemera.workspaces.plugins.module_utils.core.module import (
    controller_argument_spec,
    controller_secret,
    history_argument_spec,
    journal_argument_spec,
    open_history,
)
from ansible_collections.ephemera.workspaces.plugins.module_utils.flows.archive import argument_spec as archive_argument_spec
from ansible_collections.ephemera.workspaces.plugins.module_utils.flows.expire import (
    DEFAULT_LIMIT, ExpirySweep, FleetSweep)
from ansible_collections.ephemera.workspaces.plugins.module_utils.flows.placing import counts_of
from ansible_collections.ephemera.workspaces.plugins.module_utils.providers.registry import api_from_params, provider_argument_spec


def module_args():
    """The options of the module, declared once: its action plugin validates a task against them too."""
    spec = dict(limit=dict(type='int', default=DEFAULT_LIMIT), parallel=dict(type='int', default=8),
                activity_timeout=dict(type='int', default=10), fleet=dict(type='bool', default=False),
                retain_ttl=dict(type='int', default=604800))
    spec.update(archive_argument_spec())
    spec.update(controller_argument_spec(shutdown=True))
    spec.update(provider_argument_spec())
    spec.update(journal_argument_spec())
    spec.update(history_argument_spec())
    return dict(argument_spec=spec, supports_check_mode=True)


def run(module):
    """The module's work; ``module`` is an AnsibleModule, or its in-process stand-in."""
    params = dict(module.params)
    for name in ('limit', 'parallel', 'activity_timeout'):
        if params[name] < 1:
            module.fail_json(msg='%s must be 1 or more, not %d.' % (name, params[name]))
    journal = open_history(module)
    if journal is None:
        summary = 'expire: no journal yet (a first run, new_journal), so nothing is leased and nothing expires'
        module.exit_json(changed=False, entries=[], counts={}, report=[summary], msg=summary)
    with journal:
        try:
            secret = controller_secret(journal.path, params['controller_secret'], module.check_mode,
                                       journal=journal, warn=module.warn)
            if params['fleet']:
                sweep = FleetSweep(journal, params, secret, api_from_params, check_mode=module.check_mode)
            else:
                sweep = ExpirySweep(journal, api_from_params(params), params, secret, check_mode=module.check_mode)
            entries = sweep.run()
        except EphemeraError as err:
            module.fail_json(msg='The expiry sweep stopped: %s' % err)
    counts = counts_of(entries)
    summary = 'expire: %d released, %d failed, %d busy, %d deferred, %d asked for activity' % (
        counts.get('released', 0), counts.get('failed', 0), counts.get('busy', 0), counts.get('deferred', 0),
        counts.get('activity', 0) + counts.get('no_answer', 0))
    if module.check_mode:
        summary += ', %d would be released' % counts.get('would_release', 0)
    report = [summary] + ['%s: %s: %s' % (e['workspace'] or e.get('place'), e['action'], e['detail']) for e in entries]
    result = dict(changed=sweep.changed, entries=entries, counts=counts, report=report, msg=summary)
    if params['fleet']:
        result['places'] = sweep.by_place
        report[1:1] = sweep.place_lines('nothing due')
        if sweep.unreachable:
            result['msg'] = sweep.unreachable_message('expiry sweep')
            module.fail_json(**result)
    module.exit_json(**result)


def main():
    run(AnsibleModule(**module_args()))


if __name__ == '__main__':
    main()
