#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: ephemera.workspaces contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

DOCUMENTATION = r'''
module: workspace_create
short_description: Run one step of a workspace's creation
version_added: 0.1.0
description:
  - Creating a workspace takes thirteen steps, from recording the request to a briefed agent. This module runs the
    one named by O(step). The role M(ephemera.workspaces.workspace_create) (and the playbook
    C(ephemera.workspaces.create)) runs them in order, each as its own task, so the output shows which step runs or
    failed. A create that took a warm pool member runs the steps it has left as one task (V(warm_rest)).
  - Every step is idempotent. A step whose work is done reports C(changed=false); a rerun after a failure or a crash
    resumes at the first unfinished step, looking at the cluster before it repeats anything whose outcome is unknown.
  - Every step records what it is about to do in the journal before it acts, and what it observed afterwards.
  - The request (template, repository, purpose, sizes, guest settings) is recorded by the V(request) step. Later steps
    read it from the journal; a second request for the same name with different parameters is refused.
author:
  - Ephemera maintainers (@ephemera)
requirements:
  - paramiko >= 3.2
extends_documentation_fragment:
  - ephemera.workspaces.controller
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
    description: Reports whether the step would act; changes nothing in the journal, the cluster or the guest.
  diff_mode:
    support: partial
    description: Returns the changes the step makes to the container's settings.
    details:
      - Only the V(configure) step returns C(diff), with C(before) and C(after) of the container settings it changes
        (cores, memory, net0, tags); in check mode too, read from the container without changing it.
      - The other steps return no diff.
options:
  name:
    description:
      - The workspace's name. It becomes the container's host name C(agent-<name>).
      - 1 to 40 lower-case letters, digits and dashes.
    type: str
    required: true
  step:
    description:
      - The step to run.
      - V(warm_rest) runs what a create whose V(vmid) step took a warm pool member (C(details.from_pool)) has left,
        V(configure), V(bootstrap), V(checkout), V(brief) and V(ready), one after the other in this one task, over
        one SSH connection to the guest. Each is recorded before it acts and fails as it would as a step of its own
        (the message names it); a rerun goes on at the first one not done. Refused for a workspace that took no
        member.
    type: str
    required: true
    choices: [request, vmid, clone, wait_clone, configure, start, address, ssh, bootstrap, checkout, runner, brief, ready,
              warm_rest]
  then_warm_rest:
    description:
      - With O(step=vmid), when the step takes a warm pool member (C(details.from_pool)), it goes on with what
        V(warm_rest) runs, in the same task, so that the rest of the create needs no task of its own (the role does
        this).
        The result is the V(vmid) step's, with C(details.steps) of the rest; the first of them that fails ends the
        task with its own message. A step that takes no member answers as without this option.
      - Ignored by the other steps.
    type: bool
    default: false
  claim:
    description:
      - The queue claim under which this run works on the workspace, as returned by M(ephemera.workspaces.queue).
        Every journal write carries it; a run that lost its claim writes nothing.
    type: dict
  idempotency_key:
    description:
      - A key that makes a retried request safe, for example the AWX workflow's id. With the V(request) step, a key
        that already finished a creation with the same parameters replays that result (C(details.replayed)) and the
        later steps change nothing; the same key with other parameters is refused. The V(ready) step stores the
        result. Keys are kept as SHA-256 hashes for 24 hours.
    type: str
  requested_by:
    description:
      - Who asks for the workspace (the role passes AWX's C(awx_user_name)); by default the user running Ansible, as
        C(user@host). The V(request) step records it with the workspace.
      - A later request for the same workspace by someone else that amends what its agent is told (O(purpose),
        O(agents), O(agent_base_urls), O(agent_models)) is refused, unless O(rebrief_others) says so, since a new
        purpose briefs the running agent again and replaces the work it does for the one who asked.
    type: str
  job_id:
    description: The AWX job that asks (the role passes C(awx_job_id)), recorded with O(requested_by).
    type: str
  rebrief_others:
    description:
      - Let this request amend the brief of a workspace someone else requested (see O(requested_by)); the workspace
        is then recorded as requested by this one.
    type: bool
    default: false
  resume:
    description:
      - With the V(request) step, continue the request recorded for O(name) instead of making one. The request options
        (O(template), O(repo), O(purpose), sizes, guest settings) are not needed and, when given, not used. The
        secrets the workspace was requested with (O(agent_credentials), O(git_token)) are still needed by the steps
        that use them. The C(ephemera.workspaces.reconcile) playbook resumes unfinished creates this way.
      - Without it, a new request needs O(template), O(repo) and O(purpose).
    type: bool
    default: false
  template:
    description:
      - What to clone, used by the V(request) step; required for a new request.
      - The VMID of a prepared LXC template, or the name of a template built by M(ephemera.workspaces.workspace_template),
        which stands for the version its pointer names when the request is recorded. The workspace records that version
        (C(params.template_version)) and goes on from it, whatever a later build switches the name to.
    type: raw
  node:
    description: Node of the template. If not set, the node the cluster reports for the template.
    type: str
  pool:
    description: Pool the clone joins.
    type: str
    default: disposable-workspaces
  full_clone:
    description: Make a full clone instead of a linked clone.
    type: bool
    default: false
  storage:
    description: Target storage of a full clone. Not allowed for linked clones.
    type: str
  repo:
    description:
      - URL of the repository to check out. Required for a new request.
      - An http, https or git URL with a login in it (C(https://TOKEN@host/...)) is refused; give the token as
        O(git_token).
    type: str
  ref:
    description:
      - Branch, tag or commit to check out.
      - Left out, or blank (a blank AWX survey answer comes as null or an empty string), the repository's default
        branch, the one its HEAD names. Where the controller can ask the repository (an http, https or git URL), the
        V(request) step asks (C(git ls-remote --symref)) and records that branch as the workspace's ref; otherwise
        the clone in the guest takes it and the V(checkout) step records it in the workspace's facts
        (C(default_branch)).
      - A later request for the same workspace without a ref means the same branch.
    type: str
  purpose:
    description:
      - What the agent is asked to do; its brief. Required for a new request.
      - At most 8000 characters, and not starting with C(-) (the agent would read it as an option).
    type: str
  ttl:
    description:
      - The workspace's lifetime in seconds, from its request. It expires then however busy it is.
      - At most 86400 (a day); a larger one is refused at the request. Default 5400.
      - Set at the first request; a later request with another value is refused (heartbeats extend a lease).
    type: int
  idle_timeout:
    description:
      - Seconds without a heartbeat or agent activity after which the workspace expires (never later than its
        O(ttl)). Default 1800, or the O(ttl) when that is shorter; longer than O(ttl) is refused.
    type: int
  keep:
    description:
      - When its lease ends (idle, or at its O(ttl)), the expiry sweep retains the workspace - released without
        delete, for its C(retain_ttl), 7 days by default - instead of deleting it, and deletes it when that retention
        ends. It still expires when idle or at its O(ttl).
    type: bool
  agent:
    description:
      - Which agent the runner starts. V(claude-code), V(codex) and V(opencode) are the real CLIs, started headless with
        their event streams read for the activity; any other name must be defined in O(agents).
      - Refused at the V(request) step, before anything is allocated, when the template was built by
        M(ephemera.workspaces.workspace_template) and its verified tools lack the agent's command (C(claude),
        C(codex), C(opencode)).
    type: str
    default: claude-code
  agents:
    description:
      - Agents of your own, or changes to the built-in ones (an entry replaces the built-in of its name). Each is a
        command line (a list of arguments, C({purpose}) standing for the brief; its activity follows the process
        only) or a dict with C(command), C(continue) (the follow-up command line, C({session}) standing for the
        agent's session id), C(events) (the form of its standard output, one of V(claude), V(codex), V(opencode) and
        V(lines)), C(environment) (variables that are not secrets), C(files) (configuration files under the agent's
        home) and C(tool) (the command a template must have verified).
      - See docs/agents.md for the built-in ones' command lines.
    type: dict
  agent_base_urls:
    description:
      - A model endpoint per agent (an LLM gateway of your own), keyed by the agent's name, for example
        V(claude-code) to C(https://llm.example.com/anthropic) and V(codex) to C(https://llm.example.com/openai/v1).
      - claude-code gets it as E(ANTHROPIC_BASE_URL); codex and opencode get a provider of that URL in their
        configuration that reads the key from E(OPENAI_API_KEY). An http(s) URL without credentials; give the key
        in O(agent_credentials).
    type: dict
  agent_models:
    description:
      - A model per agent, keyed by the agent's name. claude-code gets it as E(ANTHROPIC_MODEL); codex
        and opencode in their configuration (default C(gpt-5.5); opencode without a base URL takes its own).
    type: dict
  brief_timeout:
    description:
      - Seconds the V(brief) step waits for the model to answer the agent's first request. A key the endpoint
        refuses, a rate limit or an overloaded endpoint fails the step with advice, and a rerun goes on at the brief;
        a model still thinking when the time is up leaves the agent working.
    type: int
    default: 120
  cores:
    description: CPU cores of the container.
    type: int
    default: 2
  memory:
    description: Memory of the container in MiB.
    type: int
    default: 2048
  bridge:
    description: Bridge of the container's C(net0).
    type: str
    default: vmbr0
  address_mode:
    description:
      - V(dhcp) waits for the address the container gets; V(static) leases one from O(address_range), recorded in the
        journal and never handed out twice.
    type: str
    choices: [dhcp, static]
    default: dhcp
  address_range:
    description: With O(address_mode=static), the addresses to lease from (C(a.b.c.d-a.b.c.e), C(a.b.c.0/24)).
    type: str
  address_prefix:
    description: Prefix length of a static address.
    type: int
    default: 24
  gateway:
    description: Gateway of a static address.
    type: str
  tags:
    description: Extra tags for the container (C(ephemera) is always set). Tags are hints, never proof of ownership.
    type: list
    elements: str
    default: []
  checkout_path:
    description:
      - Where the repository is checked out inside the guest. Its directory is handed to the agent user, so it is an
        absolute, normalised path whose directory is neither C(/) nor a system directory (such as C(/etc), C(/home),
        C(/tmp) or C(/var)).
    type: str
    default: /workspace/repo
  guest_root:
    description:
      - Prefix of every path the collection uses inside the guest; C({vmid}) is replaced by the container's VMID.
        V(/) on real guests; the local try-out cluster gives each guest a directory of its own.
    type: str
    default: /
  ssh_user:
    description:
      - User to log in to the guest as. It runs the bootstrap, the checkout's hand-over and the archive as root, so it
        is V(root) (the guest's image must authorize the controller's key for root, as every provider here does).
    type: str
    default: root
  ssh_port:
    description: SSH port of the guest.
    type: int
    default: 22
  ssh_private_key:
    description:
      - Private key whose public half the template authorizes.
      - If not set, the keys of the ssh-agent that E(SSH_AUTH_SOCK) names log in (how AWX hands over a Machine
        credential); the key file wins when both are there.
    type: path
  agent_user:
    description:
      - User the agent runner and the agent run as; made by the V(bootstrap) step if missing, unprivileged (no sudo).
      - Never V(root), O(ssh_user), or a user the provider makes for the controller's login (O(azure_admin_username),
        O(gcp_ssh_user)); the request is refused, since the agent would hold that login.
    type: str
    default: agent
  agent_user_is_ssh_user:
    description:
      - Run the agent as O(ssh_user) itself (O(agent_user) must then equal it). B(Unsafe) - the agent holds the
        controller's login to the guest, root's rights where O(ssh_user) is root, and none of the guest-side
        defences hold (docs/security.md). Only for a guest that has no user of its own for the agent, as the try-out
        cluster's and try-out cloud's host tier, where every guest is this machine's SSH user.
    type: bool
    default: false
  agent_credentials:
    description:
      - Environment variables the agent needs (API keys, such as E(ANTHROPIC_API_KEY) for claude-code, E(OPENAI_API_KEY) for
        codex and for opencode with a base URL). Written by the V(bootstrap) step into one file readable only by the
        agent user, read by the runner when it starts the agent; never on a command line, in the journal or in the
        output. Given to the V(brief) step too, they replace the file first (a key the endpoint refused).
      - The V(request) step records the variables' names (never their values). A later run that is to do the
        V(bootstrap) step without any O(agent_credentials) (a resume by reconcile without the vault) is refused
        with what to pass, and nothing changes.
    type: dict
  git_token:
    description:
      - Token for cloning a private repository over HTTPS. Used only by the V(checkout) step, through a temporary
        helper that is removed afterwards, on success and on failure.
      - The V(request) step records that one was given; a later run that is to do the V(checkout) step without it
        is refused with what to pass, and nothing changes.
    type: str
  git_username:
    description: User name sent with O(git_token).
    type: str
    default: git
  address_timeout:
    description: Seconds to wait for the container's address.
    type: int
    default: 120
  ssh_timeout:
    description: Seconds to keep trying SSH, with backoff.
    type: int
    default: 120
  runner_timeout:
    description: Seconds to wait for the agent runner to answer; a runner whose process exited fails the step at once.
    type: int
    default: 60
  pools:
    description:
      - The warm pools (C(ephemera_pools), see M(ephemera.workspaces.workspace_pool)). The V(vmid) step of a request
        that matches one (provider, node, template, and the pool's repository or none) takes a warm member that
        passes its claim check (its container runs, carries its marker, its runner answers) instead of cloning; the
        workspace records it as C(facts.from_pool). A member failing the check is released; with none left the
        create goes on cold.
    type: list
    elements: dict
'''

EXAMPLES = r'''
- name: Record the request
  ephemera.workspaces.workspace_create:
    name: fix-login
    step: request
    template: 9000
    repo: https://git.example.com/app.git
    ref: main
    purpose: Fix the login redirect loop
- name: Clone the template
  ephemera.workspaces.workspace_create:
    name: fix-login
    step: clone
'''

RETURN = r'''
step:
  description: The step that ran.
  returned: always
  type: str
msg:
  description: What the step did or found.
  returned: always
  type: str
  sample: "clone: CT 105 from template 9000"
workspace:
  description: The workspace's journal record after the step (see M(ephemera.workspaces.workspace_info)).
  returned: when the workspace is recorded
  type: dict
task_names:
  description:
    - The name of each step's task in the role, by step, in the words of the provider (steps 2 to 6 differ from one
      provider to another); the role names its tasks with them.
  returned: when O(step=request) succeeded
  type: dict
  sample: {"vmid": "candidate client token", "clone": "launch the instance", "wait_clone": "wait for the launch",
           "configure": "configure the instance", "start": "start the instance", "ready": "mark ready"}
details:
  description:
    - Facts of the step that ran. V(request), replaying an earlier request with the same O(idempotency_key),
      C(replayed) (V(true)) and C(result) (name, vmid, node, address, status); V(vmid) C(vmid), the candidate id
      (or the container of the warm pool member it took, with C(from_pool), the pool, and with O(then_warm_rest)
      C(steps) as V(warm_rest) returns them);
      V(clone) C(vmid) and C(upid), the clone task (only C(vmid) when a clone made earlier was adopted);
      V(wait_clone) C(vmid) and C(warnings), the clone task's warning lines; V(start) C(upid); V(address)
      C(address); V(ssh) C(attempts), the connections it took; V(checkout) C(head), the commit checked out;
      V(warm_rest) C(steps), each step that ran with its C(step), C(changed), C(msg) and C(details) (on failure
      those before the one that failed).
    - Empty for the other steps, for a step that was done already or would run in check mode, and on failure, whose
      facts are keys of the result itself (RV(kind), RV(rc), ...).
  returned: always
  type: dict
  sample: {"vmid": 105, "upid": "UPID:pve1:000003E8:00001B58:6B105231:vzclone:9000:root@pam:"}
# BEGIN failure_facts.PROXMOX: written by scripts/module_docs.py from plugins/doc_fragments/failure_facts.py
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
# END failure_facts.PROXMOX
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
# END failure_facts.GUEST
'''

import contextlib
from urllib.parse import urlsplit

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.ephemera.workspaces.plugins.module_utils.core.module import (
    controller_argument_spec,
    controller_secret,
    history_argument_spec,
    journal_argument_spec,
    open_journal,
)
from ansible_collections.ephemera.workspaces.plugins.module_utils.flows.create import (
    STEPS,
    WARM_REST,
    CreateFlow,
    failure_message,
    step_labels,
    task_names,
)
from ansible_collections.ephemera.workspaces.plugins.module_utils.core.errors import EphemeraError
from ansible_collections.ephemera.workspaces.plugins.module_utils.core.journal import resolve_location
from ansible_collections.ephemera.workspaces.plugins.module_utils.core import failpoint
from ansible_collections.ephemera.workspaces.plugins.module_utils.providers.base import provider_of
from ansible_collections.ephemera.workspaces.plugins.module_utils.providers.registry import api_from_params, provider_argument_spec
from ansible_collections.ephemera.workspaces.plugins.module_utils.operation import fail_step, running_step, running_steps

# Steps that never talk to the Proxmox API (ready does: it puts the lease's ready label on the container).
GUEST_STEPS = ('ssh', 'bootstrap', 'checkout', 'runner', 'brief')
# The step value that runs WARM_REST in one task.
WARM = 'warm_rest'


def argument_spec():
    spec = dict(
        name=dict(type='str', required=True),
        step=dict(type='str', required=True, choices=list(STEPS) + [WARM]),
        then_warm_rest=dict(type='bool', default=False),
        claim=dict(type='dict'),
        idempotency_key=dict(type='str', no_log=False),
        requested_by=dict(type='str'),
        job_id=dict(type='str'),
        rebrief_others=dict(type='bool', default=False),
        resume=dict(type='bool', default=False),
        template=dict(type='raw'),
        node=dict(type='str'),
        pool=dict(type='str', default='disposable-workspaces'),
        full_clone=dict(type='bool', default=False),
        storage=dict(type='str'),
        repo=dict(type='str'),
        ref=dict(type='str'),
        purpose=dict(type='str'),
        ttl=dict(type='int'),
        idle_timeout=dict(type='int'),
        keep=dict(type='bool'),
        agent=dict(type='str', default='claude-code'),
        agents=dict(type='dict'),
        agent_base_urls=dict(type='dict'),
        agent_models=dict(type='dict'),
        brief_timeout=dict(type='int', default=120),
        cores=dict(type='int', default=2),
        memory=dict(type='int', default=2048),
        bridge=dict(type='str', default='vmbr0'),
        address_mode=dict(type='str', default='dhcp', choices=['dhcp', 'static']),
        address_range=dict(type='str'),
        address_prefix=dict(type='int', default=24),
        gateway=dict(type='str'),
        tags=dict(type='list', elements='str', default=[]),
        checkout_path=dict(type='str', default='/workspace/repo'),
        guest_root=dict(type='str', default='/'),
        ssh_user=dict(type='str', default='root'),
        ssh_port=dict(type='int', default=22),
        ssh_private_key=dict(type='path'),
        agent_user=dict(type='str', default='agent'),
        agent_user_is_ssh_user=dict(type='bool', default=False),
        agent_credentials=dict(type='dict', no_log=True),
        git_token=dict(type='str', no_log=True),
        git_username=dict(type='str', default='git'),
        address_timeout=dict(type='int', default=120),
        ssh_timeout=dict(type='int', default=120),
        runner_timeout=dict(type='int', default=60),
        pools=dict(type='list', elements='dict'),
    )
    spec.update(controller_argument_spec())
    spec.update(provider_argument_spec())
    spec.update(journal_argument_spec())
    spec.update(history_argument_spec())
    return spec


def hide_repo_password(module, repo):
    """A password in the repository URL (refused by the request step) is masked wherever the result shows it."""
    try:
        password = urlsplit(repo).password if repo else None
    except ValueError:
        password = None
    if password:
        module.no_log_values.add(password)


def module_args():
    """The options of the module, declared once: its action plugin validates a task against them too."""
    return dict(
        argument_spec=argument_spec(),
        supports_check_mode=True,
        required_if=[
            ('address_mode', 'static', ('address_range',)),
        ],
    )


def run(module):
    """The module's work; ``module`` is an AnsibleModule, or its in-process stand-in."""
    params = dict(module.params)
    hide_repo_password(module, params['repo'])
    if params['storage'] and not params['full_clone']:
        module.fail_json(msg='storage is allowed for full clones only (full_clone: true); linked clones stay on the '
                             "template's storage.")
    step = params['step']
    if step == WARM:
        run_warm_rest(module, params)
        return
    result = dict(changed=False, step=step, details={})
    journal = open_journal(module)
    with journal if journal is not None else contextlib.nullcontext():
        try:
            flow = create_flow(module, params, journal, with_api=step not in GUEST_STEPS)
            failpoint.enter(params['name'], 'create.' + step)
            with running_step(journal, params['claim'], flow.labels[step], params['name'], module.check_mode):
                outcome = flow.run(step)
        except EphemeraError as err:
            result.update(err.details)
            fail_step(module, failure_message(params['name'], step, err, step_labels(provider_of(params))), journal,
                      params['claim'], params['name'], **result)
        result.update(changed=outcome.changed, msg=outcome.msg, details=outcome.extra)
        if step == 'request':
            # What the role names steps 2 to 13 by: in the words of the provider.
            result['task_names'] = task_names(provider_of(params))
        if outcome.diff is not None:
            result['diff'] = outcome.diff
        if step == 'vmid' and params['then_warm_rest'] and outcome.extra.get('from_pool') and not module.check_mode:
            ran = warm_rest(module, journal, flow, params, result)
            result['details'] = dict(result['details'], steps=ran)
            result.update(changed=result['changed'] or any(each['changed'] for each in ran),
                          msg='; '.join([result['msg']] + [each['msg'] for each in ran]))
        if flow.ws is not None:
            result['workspace'] = flow.ws
    module.exit_json(**result)


def create_flow(module, params, journal, with_api=True):
    """The create's flow for one task: its journal connection (None in check mode before the journal exists), the
    provider's API client unless ``with_api`` is false (a step that only talks to the guest), the controller
    secret."""
    path = journal.path if journal is not None else resolve_location(params['journal_path'], params.get('journal_url'))
    client = api_from_params(params) if with_api else None
    secret = controller_secret(path, params['controller_secret'], module.check_mode, journal=journal, warn=module.warn)
    return CreateFlow(journal, client, params, secret, claim=params['claim'], check_mode=module.check_mode,
                      diff=module._diff)


def run_warm_rest(module, params):
    """The step value ``warm_rest``: WARM_REST in this one task (see warm_rest)."""
    result = dict(changed=False, step=WARM, details={'steps': []})
    journal = open_journal(module)
    flow = None
    with journal if journal is not None else contextlib.nullcontext():
        try:
            flow = create_flow(module, params, journal)
            flow.check_warm_rest()
        except EphemeraError as err:
            result.update(err.details)
            fail_step(module, failure_message(params['name'], WARM_REST[0], err, step_labels(provider_of(params))),
                      journal, params['claim'], params['name'], **result)
        ran = warm_rest(module, journal, flow, params, result)
        result.update(changed=any(each['changed'] for each in ran), msg='; '.join(each['msg'] for each in ran),
                      details={'steps': ran})
        if flow.ws is not None:
            result['workspace'] = flow.ws
    module.exit_json(**result)


def warm_rest(module, journal, flow, params, result):
    """The steps WARM_REST one after the other with ``flow`` (its journal connection, API client and controller
    secret): each begun, recorded as the queue's step and run as its own task runs it, over one SSH connection to
    the guest; the steps that ran ([{step, changed, msg, details}]). The first that fails ends the task with its own
    message, ``result`` and the steps before it in its details."""
    name, claim = params['name'], params['claim']
    ran = []
    current = WARM_REST[0]
    try:
        with running_steps(journal, claim, name, module.check_mode) as record, flow.one_guest_connection():
            for current in WARM_REST:
                failpoint.enter(name, 'create.' + current)
                record(flow.labels[current])
                outcome = flow.run(current)
                ran.append(dict(step=current, changed=outcome.changed, msg=outcome.msg, details=outcome.extra))
                if outcome.diff is not None:
                    result['diff'] = outcome.diff
    except EphemeraError as err:
        failed = {k: v for k, v in result.items() if k != 'msg'}
        failed['details'] = dict(result.get('details') or {}, steps=ran)
        failed.update(err.details)
        fail_step(module, failure_message(name, current, err, flow.labels), journal, claim, name, **failed)
    return ran


def main():
    run(AnsibleModule(**module_args()))


if __name__ == '__main__':
    main()
