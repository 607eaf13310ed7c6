#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: ephemera.workspaces contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

DOCUMENTATION = r'''
module: workspace_pool
short_description: Fill warm pools of workspaces made ahead of demand
version_added: 0.3.0
description:
  - Brings each pool of O(pools) to its size. A member is a container made through the create steps that do not
    depend on a request - clone, configure, start, address, SSH, bootstrap with host keys of its own, the fetch of
    the pool's repository (a pool with one), the agent runner installed and answering. It carries the ownership
    marker and lease labels like any workspace and is recorded in the journal as a pool member, C(filling) before
    anything is allocated and C(warm) when done.
  - A create whose request matches a pool takes a warm member (M(ephemera.workspaces.workspace_create) with the
    same O(pools)), so only the request's own steps are left - credentials, checkout of the ref, brief, ready.
  - First the containers of released members (a failed fill, a member that failed a create's claim check, a
    template switch, an expired lease) are deleted through the destroy steps, ownership-checked, and their
    membership forgotten; then members a killed fill left C(filling) are finished; then new ones are made. A
    member whose fill fails is released and its container deleted.
  - Each new member takes one of the pool's places in the journal, by compare-and-set, before anything is made for
    it, so two fills of one pool at once (two controllers) never fill it beyond its size; a member that finds every
    place held by a waiting member is given up (action V(full)).
  - The docs/pools.md page of the collection says what a pool costs, how to size it and how it is swept.
author:
  - Ephemera maintainers (@ephemera)
requirements:
  - paramiko >= 3.2
  # The create and destroy code it shares with every provider's modules imports these SDKs when they are used.
  - boto3 >= 1.28
  - hcloud >= 2.27
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
attributes:
  check_mode:
    support: full
    description: Says how many members each pool lacks and which released members would be deleted; does nothing.
  diff_mode:
    support: none
    description: Not supported.
options:
  pools:
    description:
      - The pools, as the inventory declares them in C(ephemera_pools). Each is a dict of C(name) (1 to 24
        lower-case letters, digits and dashes), C(location) (the node), C(template) (a template name or VMID),
        C(size), and optionally C(maximum) (default the size), C(lease) (seconds a member nobody takes waits, 60 to
        86400, default 5400), C(repo) (a repository its members have fetched), C(refill) (V(true) for a create that
        takes a member to fill the pool back, see O(refill); default V(false)) and C(provider) (default O(provider),
        the provider this fill runs with).
      - The fill makes members on O(provider), with that provider's options as M(ephemera.workspaces.workspace_create)
        takes them (C(location) is the node, region or zone; C(template) the template, image or AMI). A pool declared
        for another provider is left to a fill with that provider.
      - Warm pools are kept on Proxmox VE, AWS, Hetzner Cloud, Compute Engine and Azure. A pool declared for a
        provider that keeps none yet is refused, naming the provider; creates there stay cold.
      - A declaration that is wrong is refused with what to change, before anything is done.
    type: list
    elements: dict
    required: true
  refill:
    description:
      - The pool a create took a member of (the create playbook sets it) - only this pool is filled back to its size,
        and only when its declaration says C(refill) V(true); released members of other pools are left to a fill.
      - A refill that fails does not fail the task, whose workspace is ready by then - it warns that the pool is
        short and to run pool_fill (RV(refill_failed) is V(true)). In check mode it says what a refill after the
        create would start.
    type: str
  refill_workspace:
    description: The workspace whose create took the member, for the warning of a refill that fails.
    type: str
  pool:
    description: Proxmox VE pool the members' containers join.
    type: str
    default: disposable-workspaces
  full_clone:
    description: Make full clones instead of linked clones.
    type: bool
    default: false
  storage:
    description: Target storage of full clones. Not allowed for linked clones.
    type: str
  agent:
    description: The agent whose command the template must have; the runner is configured for it until a claim.
    type: str
    default: claude-code
  agents:
    description: Agents of your own, as M(ephemera.workspaces.workspace_create) takes them.
    type: dict
  agent_base_urls:
    description: A model endpoint per agent, as M(ephemera.workspaces.workspace_create) takes them.
    type: dict
  agent_models:
    description: A model per agent, as M(ephemera.workspaces.workspace_create) takes them.
    type: dict
  cores:
    description: CPU cores of a member's container.
    type: int
    default: 2
  memory:
    description: Memory of a member's container in MiB.
    type: int
    default: 2048
  bridge:
    description: Bridge of a member's C(net0).
    type: str
    default: vmbr0
  address_mode:
    description: Only V(dhcp); a static address is leased to a workspace by name.
    type: str
    choices: [dhcp]
    default: dhcp
  tags:
    description: Extra tags for the containers (C(ephemera) is always set).
    type: list
    elements: str
    default: []
  checkout_path:
    description:
      - Where a pool's repository is fetched inside the guest; the checkout path of the workspaces that take members.
    type: str
    default: /workspace/repo
  guest_root:
    description: Prefix of every path the collection uses inside the guest; C({vmid}) is replaced by the VMID.
    type: str
    default: /
  ssh_user:
    description: User to log in to the guest as.
    type: str
    default: root
  ssh_port:
    description: SSH port of the guest.
    type: int
    default: 22
  ssh_private_key:
    description: Private key whose public half the template authorizes (else the ssh-agent's keys).
    type: path
  agent_user:
    description: User the agent runner and the agent run as; made by the bootstrap if missing.
    type: str
    default: agent
  agent_user_is_ssh_user:
    description: Run the agent as O(ssh_user) itself (unsafe; see M(ephemera.workspaces.workspace_create)).
    type: bool
    default: false
  address_timeout:
    description: Seconds to wait for a member's address.
    type: int
    default: 120
  ssh_timeout:
    description: Seconds to keep trying SSH, with backoff.
    type: int
    default: 120
  runner_timeout:
    description: Seconds to wait for the agent runner to answer.
    type: int
    default: 60
'''

EXAMPLES = r'''
- name: Fill the pools the inventory declares
  ephemera.workspaces.workspace_pool:
    pools:
      - name: debian
        location: pve1
        template: debian-agent
        size: 2
  register: fill
'''

RETURN = r'''
pools:
  description: Each pool's members by state after the fill (C(filling), C(warm), C(claimed), C(released)).
  returned: always
  type: dict
  sample: {"debian": {"filling": 0, "warm": 2, "claimed": 3, "released": 0}}
entries:
  description:
    - One entry per member the fill acted on, or per pool that was full - C(pool), C(member), C(action) and
      C(detail). The action is V(warm), V(failed), V(deleted), V(delete_failed), V(busy), V(full), V(skipped) (a
      pool of another provider), V(would_fill) or V(would_delete).
  returned: always
  type: list
  elements: dict
report:
  description: A summary line, then one line per entry.
  returned: always
  type: list
  elements: str
refill_failed:
  description: A refill (O(refill)) failed; the warning says what, and that the pool is short until a fill.
  returned: when O(refill) is given
  type: bool
'''

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.ephemera.workspaces.plugins.module_utils.core.errors import EphemeraError
from ansible_collections.ephemera.workspaces.plugins.module_utils.core.module import (
    controller_argument_spec,
    controller_secret,
    journal_argument_spec,
    open_journal,
)
from ansible_collections.ephemera.workspaces.plugins.module_utils.flows.pool import PoolFill
from ansible_collections.ephemera.workspaces.plugins.module_utils.providers.registry import api_from_params, provider_argument_spec


def module_args():
    spec = dict(
        pools=dict(type='list', elements='dict', required=True),
        refill=dict(type='str'),
        refill_workspace=dict(type='str'),
        pool=dict(type='str', default='disposable-workspaces'),
        full_clone=dict(type='bool', default=False),
        storage=dict(type='str'),
        agent=dict(type='str', default='claude-code'),
        agents=dict(type='dict'),
        agent_base_urls=dict(type='dict'),
        agent_models=dict(type='dict'),
        cores=dict(type='int', default=2),
        memory=dict(type='int', default=2048),
        bridge=dict(type='str', default='vmbr0'),
        address_mode=dict(type='str', default='dhcp', choices=['dhcp']),
        tags=dict(type='list', elements='str', default=[]),
        checkout_path=dict(type='str', default='/workspace/repo'),
        guest_root=dict(type='str', default='/'),
        ssh_user=dict(type='str', default='root'),
        ssh_port=dict(type='int', default=22),
        ssh_private_key=dict(type='path'),
        agent_user=dict(type='str', default='agent'),
        agent_user_is_ssh_user=dict(type='bool', default=False),
        address_timeout=dict(type='int', default=120),
        ssh_timeout=dict(type='int', default=120),
        runner_timeout=dict(type='int', default=60),
    )
    spec.update(controller_argument_spec(shutdown=True))
    spec.update(provider_argument_spec())
    spec.update(journal_argument_spec())
    return dict(argument_spec=spec, supports_check_mode=True)


def run(module):
    """The module's work; ``module`` is an AnsibleModule, or its in-process stand-in."""
    params = dict(module.params)
    # What the create steps read that a member has none of: no template by request, no address range, no node.
    params.update(template=None, node=None, repo=None, ref=None, purpose=None, address_range=None, address_prefix=24,
                  gateway=None, brief_timeout=None)
    journal = open_journal(module)
    fill = None
    try:
        if journal is None:
            fill = PoolFill(None, None, params, None, check_mode=True)
            summary = fill.run()
        else:
            with journal:
                secret = controller_secret(journal.path, params['controller_secret'], module.check_mode,
                                           journal=journal, warn=module.warn)
                fill = PoolFill(journal, api_from_params(params), params, secret, check_mode=module.check_mode)
                summary = fill.run()
    except EphemeraError as err:
        if params.get('refill'):
            refill_failed(module, params, str(err), fill)
        module.fail_json(msg='The pool fill stopped: %s' % err, entries=fill.entries if fill else [])
    entries = fill.entries
    failed = [e for e in entries if e['action'] in ('failed', 'delete_failed')]
    line = '%s: %s' % ('refill' if params.get('refill') else 'pool_fill', '; '.join(
        '%s %d warm, %d filling' % (name, counts['warm'], counts['filling'])
        for name, counts in sorted(summary.items())) or 'no pools declared')
    report = [line] + ['%s %s: %s: %s' % (e['pool'], e['member'] or '-', e['action'], e['detail']) for e in entries]
    result = dict(changed=fill.changed, pools=summary, entries=entries, report=report, msg=line)
    if params.get('refill'):
        result['refill_failed'] = False
    if failed:
        result['msg'] = '%s; %d member(s) failed: %s' % (line, len(failed), '; '.join(
            '%s: %s' % (e['member'], e['detail']) for e in failed))
        if params.get('refill'):
            refill_failed(module, params, result['msg'], fill, result)
        module.fail_json(**result)
    module.exit_json(**result)


def refill_failed(module, params, why, fill, result=None):
    """End a refill that failed as a warning, not a failure: the workspace whose create took the member is ready."""
    workspace = params.get('refill_workspace')
    module.warn('%sthe refill of warm pool %s failed (%s). The pool is short of its size until a fill: run pool_fill '
                '(ansible-playbook -i INVENTORY ephemera.workspaces.pool_fill).'
                % ('Workspace %s is ready; ' % workspace if workspace else '', params['refill'], why))
    result = dict(result or dict(changed=bool(fill and fill.changed), pools={}, entries=fill.entries if fill else [],
                                 report=['refill: %s failed: %s' % (params['refill'], why)]))
    result.update(refill_failed=True, msg='refill of pool %s failed: %s' % (params['refill'], why))
    module.exit_json(**result)


def main():
    run(AnsibleModule(**module_args()))


if __name__ == '__main__':
    main()
