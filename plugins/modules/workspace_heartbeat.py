#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: ephemera.workspaces contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

DOCUMENTATION = r'''
module: workspace_heartbeat
short_description: Keep a workspace's lease alive
version_added: 0.2.0
description:
  - Records that someone is working in the workspace. Its C(last_touched_at) becomes now, and its C(expires_at) is
    recomputed as the earlier of C(created_at + ttl) and C(now + idle_timeout). A heartbeat never extends a lease
    past its ttl, so a busy workspace still expires at its ttl.
  - A heartbeat at or after C(expires_at), or once the workspace's cleanup has started, is refused and changes
    nothing. It can never revive a lease that expiry owns.
  - The new expiry is also written into the lease labels on the container, beside its ownership marker, so that a
    cleanup sweep reads it without the journal. When that write fails, the journal keeps the heartbeat and the
    result says so.
author:
  - Ephemera maintainers (@ephemera)
extends_documentation_fragment:
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
    description: Says what the lease would become; writes nothing.
  diff_mode:
    support: none
    description: Not supported.
options:
  name:
    description: The workspace.
    type: str
    required: true
'''

EXAMPLES = r'''
- name: Keep fix-login alive while its reviewer works in it
  ephemera.workspaces.workspace_heartbeat:
    name: fix-login
'''

RETURN = r'''
lease:
  description:
    - The lease after the heartbeat. Times are RFC 3339 in UTC; C(ttl) and C(idle_timeout) are in seconds.
    - C(expires_in) is the number of seconds from now until C(expires_at).
  returned: success
  type: dict
  sample: {"created_at": "2026-12-03T10:00:00Z", "last_touched_at": "2026-12-03T10:20:00Z",
           "expires_at": "2026-12-03T10:50:00Z", "expires_in": 1799, "ttl": 5400, "idle_timeout": 1800,
           "keep": false}
labels:
  description: Why the lease labels on the container were not updated; absent when they were.
  returned: when the labels could not be written
  type: str
'''

import time

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.ephemera.workspaces.plugins.module_utils.core.errors import EphemeraError
from ansible_collections.ephemera.workspaces.plugins.module_utils.core.journal import Journal
from ansible_collections.ephemera.workspaces.plugins.module_utils.core.module import journal_argument_spec
from ansible_collections.ephemera.workspaces.plugins.module_utils.core import lease as leasing
from ansible_collections.ephemera.workspaces.plugins.module_utils.flows import lease as lease_flow
from ansible_collections.ephemera.workspaces.plugins.module_utils.providers.base import DEFAULT_PROVIDER, provider_of
from ansible_collections.ephemera.workspaces.plugins.module_utils.providers.registry import api_from_params, provider_argument_spec


def module_args():
    """The options of the module, declared once: its action plugin validates a task against them too."""
    spec = dict(name=dict(type='str', required=True))
    spec.update(provider_argument_spec())
    spec.update(journal_argument_spec())
    return dict(argument_spec=spec, supports_check_mode=True)


def run(module):
    """The module's work; ``module`` is an AnsibleModule, or its in-process stand-in."""
    params = module.params
    try:
        # An existing journal only: a heartbeat for a workspace of another journal must not make an empty one.
        with Journal.open(params['journal_path'], create=False, url=params.get('journal_url')) as journal:
            # The provider the options name: a cloud provider, or Proxmox VE when they give its API host.
            talks = params.get('api_host') or provider_of(params) != DEFAULT_PROVIDER
            client = api_from_params(params) if talks else None
            ws, note = lease_flow.heartbeat(journal, client, params['name'], now=time.time(),
                                            check_mode=module.check_mode)
    except EphemeraError as err:
        module.fail_json(msg=str(err))
    result = dict(changed=True, lease=leasing.view(ws, time.time())['lease'],
                  msg='%s: %s until %s' % (params['name'], 'would be kept' if module.check_mode else 'kept',
                                           leasing.view(ws, time.time())['lease']['expires_at']))
    if note:
        result['labels'] = note
    module.exit_json(**result)


def main():
    run(AnsibleModule(**module_args()))


if __name__ == '__main__':
    main()
