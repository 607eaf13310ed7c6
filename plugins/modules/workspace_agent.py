#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: ephemera.workspaces contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

DOCUMENTATION = r'''
module: workspace_agent
short_description: See what a workspace's coding agent does, or brief it again
version_added: 0.4.0
description:
  - Without O(text), asks the agent runner of one ready workspace (O(name)), or of every ready workspace, what
    its agent does, and records the answer in the journal. The runner reads the agent's own event stream, so the
    answer is the agent's C(activity) (V(active), V(blocked) while it waits for an approval or input it cannot
    get, V(idle) when it finished) with its session, the error it stopped on (a key the model endpoint refused, a
    rate limit, an overloaded endpoint) and its last events. The inventory, M(ephemera.workspaces.workspace_info)
    and the status playbook then show this observation.
  - With O(text), a follow-up brief. The agent continues its session (claude-code C(--resume), codex
    C(exec resume), opencode C(--session)) with the message. Run it inside the workspace's queue (operation kind
    C(brief), the C(ephemera.workspaces.brief) playbook), so that it never overlaps a create, destroy or archive.
    An agent still working is waited for up to O(wait_idle) seconds, or stopped first with O(interrupt). The task
    then waits until the model answered, like the create's V(brief) step.
author:
  - Ephemera maintainers (@ephemera)
requirements:
  - paramiko >= 3.2
extends_documentation_fragment:
  - ephemera.workspaces.journal
attributes:
  check_mode:
    support: full
    description: Asks the runner and reports; records nothing and sends no message.
  diff_mode:
    support: none
    description: Not supported.
options:
  name:
    description:
      - The workspace. Without it (and without O(text)), every ready workspace is asked, O(parallel) at a time.
    type: str
  text:
    description:
      - A follow-up brief for the agent, continuing its session. It goes onto the agent's command line, like the
        purpose; it must not start with C(-).
    type: str
  interrupt:
    description: With O(text), stop an agent that is still working (TERM, then KILL) and continue its session now.
    type: bool
    default: false
  wait_idle:
    description: With O(text), seconds to wait for a working agent to finish (or block) before the message is sent.
    type: int
    default: 300
  brief_timeout:
    description: With O(text), seconds to wait for the model to answer the agent once the message was sent.
    type: int
    default: 120
  agent_credentials:
    description:
      - With O(text), new environment variables for the agent (a rotated API key). They replace the credentials
        file before the agent continues; never on a command line, in the journal or in the output.
    type: dict
  claim:
    description: The queue claim of the run (the C(claim) that M(ephemera.workspaces.queue) returned).
    type: dict
  parallel:
    description: Without O(name), how many workspaces are asked at once.
    type: int
    default: 8
  activity_timeout:
    description: Seconds one workspace has to answer (the SSH connection and the runner's answer each).
    type: int
    default: 10
  ssh_private_key:
    description:
      - Private key to log in to the guests with, when the one the workspace was created with has moved (an AWX
        job's key file has another path in every job). Without it, the path recorded at the create.
    type: path
'''

EXAMPLES = r'''
- name: What does the agent of fix-login do?
  ephemera.workspaces.workspace_agent:
    name: fix-login
  register: seen

- name: Every ready workspace's agent, recorded for the inventory and the status playbook
  ephemera.workspaces.workspace_agent:

- name: Tell the agent what to do next, in the same session (inside the workspace's queue, see playbooks/brief.yml)
  ephemera.workspaces.workspace_agent:
    name: fix-login
    text: Now add a test for the login redirect.
    claim: "{{ op.claim }}"
'''

RETURN = r'''
workspaces:
  description:
    - Per workspace asked, what its runner answered. C(agent) is also recorded on the workspace (C(facts.agent)).
    - C(agent.error) is C({kind, message, at}) with C(kind) one of V(auth), V(rate_limit), V(overloaded), V(server),
      V(network), V(agent); C(agent.waiting) lists the approvals the agent could not get; C(agent.events) are its
      last events (C(type), C(text), C(at)), at most 10.
  returned: always
  type: list
  elements: dict
  sample: [{"name": "fix-login", "activity": "idle", "answered": true,
            "agent": {"name": "claude-code", "session": "4f1c0a6e-0d7e-4a53-9c61-2f0c1d9b7d11", "error": null,
                      "waiting": [], "briefs": 2, "running": false, "exit": 0,
                      "events": [{"type": "tool", "text": "Write /workspace/repo/farewell.py", "at": 1796400000.1}],
                      "observed_at": 1796400003.2}}]
activity:
  description: With O(name), the agent's activity, or V(unknown) when its runner did not answer.
  returned: when O(name) is given
  type: str
  sample: idle
agent:
  description: With O(name), what was recorded of its agent (as in RV(workspaces)).
  returned: when O(name) is given and the runner answered
  type: dict
# BEGIN failure_facts.GUEST: written by scripts/module_docs.py from plugins/doc_fragments/failure_facts.py
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
# END failure_facts.GUEST
rc:
  description: The exit status of the command that failed in the guest.
  returned: failure, when a command in the guest failed
  type: int
  sample: 1
stderr_tail:
  description: The last lines of the standard error of the command that failed in the guest.
  returned: failure, when a command in the guest failed
  type: str
  sample: "python3: can't open file '/opt/ephemera/agent_runner.py': [Errno 2] No such file or directory"
'''

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.ephemera.workspaces.plugins.module_utils.core.errors import EphemeraError
from ansible_collections.ephemera.workspaces.plugins.module_utils.core.journal import resolve_location
from ansible_collections.ephemera.workspaces.plugins.module_utils.core.module import journal_argument_spec
from ansible_collections.ephemera.workspaces.plugins.module_utils.flows.agent import AgentFlow
from ansible_collections.ephemera.workspaces.plugins.module_utils.operation import fail_step


def module_args():
    """The options of the module, declared once: its action plugin validates a task against them too."""
    spec = dict(
        name=dict(type='str'),
        text=dict(type='str'),
        interrupt=dict(type='bool', default=False),
        wait_idle=dict(type='int', default=300),
        brief_timeout=dict(type='int', default=120),
        agent_credentials=dict(type='dict', no_log=True),
        claim=dict(type='dict'),
        parallel=dict(type='int', default=8),
        activity_timeout=dict(type='int', default=10),
        ssh_private_key=dict(type='path'),
    )
    spec.update(journal_argument_spec())
    return dict(argument_spec=spec, supports_check_mode=True, required_by={'text': ('name',)})


def run(module):
    """The module's work; ``module`` is an AnsibleModule, or its in-process stand-in."""
    params = dict(module.params)
    for name in ('wait_idle', 'brief_timeout', 'parallel', 'activity_timeout'):
        if params[name] < (1 if name == 'parallel' else 0):
            least = 'at least 1' if name == 'parallel' else 'zero or more'
            module.fail_json(msg='%s must be %s, not %d.' % (name, least, params[name]))
    try:
        with AgentFlow.open(params, check_mode=module.check_mode) as flow:
            if flow is None:
                # No journal yet: nothing was ever created with it, so no agent to ask (a status run on a new
                # controller); a brief or a named workspace is an error.
                if params['name'] is not None:
                    module.fail_json(msg='No journal at %s: workspace %s was never created with it. Check '
                                         'journal_path (ephemera_journal_path, EPHEMERA_JOURNAL).'
                                         % (resolve_location(params['journal_path'], params.get('journal_url')),
                                            params['name']))
                module.exit_json(changed=False, workspaces=[], msg='no journal yet: no workspace to ask')
            try:
                if params['text'] is not None:
                    result = flow.brief(params['name'], params['text'])
                else:
                    result = flow.observe(params['name'])
            except EphemeraError as err:
                what = 'The follow-up brief of workspace %s failed' % params['name'] if params['text'] is not None \
                    else 'Asking %s failed' % ('workspace %s' % params['name'] if params['name'] else 'the workspaces')
                # A queued brief that failed is recorded as failed in the queue (the role has no rescue).
                fail_step(module, '%s: %s' % (what, err), flow.journal, params['claim'], **err.details)
    except EphemeraError as err:
        module.fail_json(msg=str(err), **err.details)
    module.exit_json(**result)


def main():
    run(AnsibleModule(**module_args()))


if __name__ == '__main__':
    main()
