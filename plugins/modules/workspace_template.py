#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: ephemera.workspaces contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

DOCUMENTATION = r'''
module: workspace_template
short_description: Run one step of a template build, or switch a template to another version
version_added: 0.2.0
description:
  - Builds a new version of a workspace template without ever changing a template in place. The V(prepare) step
    records the build (the next version, the source template, the candidate's record); the candidate is a full clone
    of the source with this controller's ownership marker, started and reached over SSH like a workspace
    (V(vmid) to V(ssh)); V(provision) installs the system packages as root, makes the non-root agent user and
    installs the agent tooling as that user; V(verify) runs every listed tool as the agent user and records its
    version; V(clean) removes what no workspace may inherit; V(stop) and V(convert) turn the candidate into a
    template; V(finalize) switches the template's pointer to the new version in one journal transaction.
  - A step that fails aborts the build; the candidate is removed through the ownership-checked delete, the version is
    recorded as failed with every error it met, and the pointer stays where it was. Creates that name the template go
    on from the current version during the whole build.
  - V(switch) points the template at another built version (O(version)), for a switch back.
  - The role M(ephemera.workspaces.template_build) (playbook C(ephemera.workspaces.template_build)) runs the steps in
    order under the template's queue, so two builds of one template never overlap.
author:
  - Ephemera maintainers (@ephemera)
requirements:
  - paramiko >= 3.2
  - boto3 >= 1.28
  - hcloud >= 2.27
extends_documentation_fragment:
  - ephemera.workspaces.controller
  - ephemera.workspaces.controller.shutdown
  - ephemera.workspaces.proxmox
  - ephemera.workspaces.journal
  - ephemera.workspaces.history
attributes:
  check_mode:
    support: full
    description: Reports what the step would do; the V(prepare) step still checks the source, the storage and the lists.
  diff_mode:
    support: none
    description: No step returns a diff.
options:
  template:
    description:
      - The template's name (1 to 30 lower-case letters, digits and dashes). Creates name it as their O(ephemera.workspaces.workspace_create#module:template).
    type: str
    required: true
  step:
    description: The step to run.
    type: str
    required: true
    choices: [prepare, vmid, clone, wait_clone, configure, start, address, ssh, provision, verify, clean, stop, convert,
              finalize, switch]
  claim:
    description: The queue claim of the run (M(ephemera.workspaces.queue), kind V(template_build)).
    type: dict
  source:
    description:
      - What the V(prepare) step clones, the VMID of a prepared LXC template (the seed), or a template name (its
        current version). Default the current version of O(template) itself.
    type: raw
  version:
    description: With V(switch), the built version to point O(template) at.
    type: int
  vmid:
    description:
      - The VMID for the new version's container. Default a free one from the cluster. An existing guest, a
        template above all, is refused.
    type: int
  node:
    description: The node to build on. Default the source template's node.
    type: str
  pool:
    description: The pool the candidate (and so the new template) joins.
    type: str
    default: disposable-workspaces
  storage:
    description: The storage for the new template's volume (a full clone). Default the source's.
    type: str
  cores:
    description: Cores of the candidate while it is provisioned.
    type: int
    default: 2
  memory:
    description: Memory of the candidate in MiB while it is provisioned.
    type: int
    default: 2048
  bridge:
    description: The bridge of the candidate's network device.
    type: str
    default: vmbr0
  address_mode:
    description: How the candidate gets its address, as for a workspace (M(ephemera.workspaces.workspace_create)).
    type: str
    default: dhcp
    choices: [dhcp, static]
  address_range:
    description: With O(address_mode=static), the range the candidate's address is leased from (released at V(finalize)).
    type: str
  address_prefix:
    description: With O(address_mode=static), the prefix length of the address.
    type: int
    default: 24
  gateway:
    description: With O(address_mode=static), the gateway.
    type: str
  packages:
    description:
      - Debian packages installed as root, from the guest's apt sources. The default includes Debian's C(rustc) and
        C(cargo) (the Rust toolchain of the release, not rustup's).
    type: list
    elements: str
    default: [git, gh, nodejs, npm, python3, python3-venv, golang, rustc, cargo, ripgrep, fd-find, jq, openssh-server,
              curl, ca-certificates, build-essential, bash, less, procps, unzip, xz-utils]
  npm_packages:
    description: npm packages installed as the agent user, under its C(~/.local), from the npm registry.
    type: list
    elements: str
    default: [pnpm, bun, "@openai/codex", "@anthropic-ai/claude-code", opencode-ai, "@anthropic-ai/claude-agent-sdk"]
  agent_commands:
    description:
      - Shell command lines run as the agent user in a login shell after the npm packages.
      - The default installs uv from PyPI into a virtual environment of its own under the agent's home
        (C(~/.local/venvs/uv)) and links C(uv) and C(uvx) into C(~/.local/bin); Debian's own pip refuses to install
        into the system Python (PEP 668).
    type: list
    elements: str
    default: ["python3 -m venv ~/.local/venvs/uv && ~/.local/venvs/uv/bin/pip install --quiet
              --disable-pip-version-check --upgrade uv && ln -sf ~/.local/venvs/uv/bin/uv ~/.local/venvs/uv/bin/uvx
              ~/.local/bin/"]
  tools:
    description:
      - What V(verify) runs as the agent user in a login shell. Each item is a name (run as C(<name> --version)) or a
        dict with C(name) and the C(command) that prints its version. Every one must answer; the first line of each
        answer is recorded with the version.
    type: list
    elements: raw
    default: [git, gh, node, pnpm, bun, python3, uv, {name: go, command: go version}, rustc, cargo, rg, fdfind, jq,
              codex, claude, opencode,
              {name: claude-agent-sdk,
               command: "npm ls --global --prefix ~/.local --parseable --long @anthropic-ai/claude-agent-sdk"}]
  agent_user:
    description: The non-root user the agents run as; made by V(provision) if the source lacks it.
    type: str
    default: agent
  checkout_path:
    description: Where workspaces check out their repository; V(clean) makes sure the template has none there.
    type: str
    default: /workspace/repo
  ssh_user:
    description: The user the controller logs in as.
    type: str
    default: root
  ssh_port:
    description: The port of the guests' SSH server.
    type: int
    default: 22
  ssh_private_key:
    description: Private key whose public half the source template authorizes.
    type: path
  address_timeout:
    description: Seconds to wait for the candidate's address.
    type: int
    default: 120
  ssh_timeout:
    description: Seconds to keep trying SSH to the candidate, with backoff.
    type: int
    default: 120
  provision_timeout:
    description: Seconds each of V(provision), V(verify) and V(clean) may take in the guest.
    type: int
    default: 1800
'''

EXAMPLES = r'''
- name: Record a build of template "workspace" from the seed template 9000
  ephemera.workspaces.workspace_template:
    template: workspace
    step: prepare
    source: 9000

- name: Switch back to version 3
  ephemera.workspaces.workspace_template:
    template: workspace
    step: switch
    version: 3
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
  sample: "switch the pointer: template workspace is v4 (CT 131) now; v3 kept for a switch back"
details:
  description:
    - Facts of the step. V(prepare) C(version), C(candidate) (the candidate's record), C(source), C(aborted)
      (unfinished builds abandoned) and C(finished) (built versions whose run died after the switch, their records
      finished); V(verify) C(tools), each tool's version; V(finalize) and V(switch)
      C(version), C(previous), C(vmid), and for V(finalize) C(tools) and C(removable), older versions no build
      removes, each with the number of recorded workspaces cloned from it.
  returned: always
  type: dict
  sample: {"version": 4, "previous": 3, "vmid": 131, "tools": {"jq": "jq-1.6", "node": "v18.20.4"},
           "removable": [{"version": 1, "vmid": 104, "clones": 0}]}
template:
  description: The template's pointer after the step (C(current), C(previous)) and its versions.
  returned: when the journal records the template
  type: dict
output:
  description: The last lines of the output of the provisioning, verification or cleaning command that failed.
  returned: failure, when a command of V(provision), V(verify) or V(clean) failed
  type: str
  sample: "E: Unable to locate package ephemera-no-such-package"
missing:
  description: The tools that did not answer, each with its exit status and output.
  returned: failure, when V(verify) found tools that do not answer
  type: list
  elements: str
errors:
  description: Every error the aborted build met (the step's and, if any, the removal's).
  returned: failure, when a build step failed and the build was aborted
  type: list
  elements: str
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

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.ephemera.workspaces.plugins.module_utils.core.module import (
    controller_argument_spec,
    controller_secret,
    history_argument_spec,
    journal_argument_spec,
    open_journal,
)
from ansible_collections.ephemera.workspaces.plugins.module_utils.flows.template import (
    STEP_LABELS,
    STEPS,
    TemplateBuild,
    failure_message,
    handle_failure,
)
from ansible_collections.ephemera.workspaces.plugins.module_utils.core.errors import EphemeraError
from ansible_collections.ephemera.workspaces.plugins.module_utils.core.journal import resolve_location
from ansible_collections.ephemera.workspaces.plugins.module_utils.core import failpoint
from ansible_collections.ephemera.workspaces.plugins.module_utils.providers.registry import api_from_params, provider_argument_spec
from ansible_collections.ephemera.workspaces.plugins.module_utils.operation import fail_step, running_step

DEFAULT_PACKAGES = ['git', 'gh', 'nodejs', 'npm', 'python3', 'python3-venv', 'golang', 'rustc', 'cargo', 'ripgrep',
                    'fd-find', 'jq', 'openssh-server', 'curl', 'ca-certificates', 'build-essential', 'bash', 'less',
                    'procps', 'unzip', 'xz-utils']
DEFAULT_NPM = ['pnpm', 'bun', '@openai/codex', '@anthropic-ai/claude-code', 'opencode-ai',
               '@anthropic-ai/claude-agent-sdk']
DEFAULT_COMMANDS = ['python3 -m venv ~/.local/venvs/uv && ~/.local/venvs/uv/bin/pip install --quiet '
                    '--disable-pip-version-check --upgrade uv && ln -sf ~/.local/venvs/uv/bin/uv '
                    '~/.local/venvs/uv/bin/uvx ~/.local/bin/']
DEFAULT_TOOLS = ['git', 'gh', 'node', 'pnpm', 'bun', 'python3', 'uv', {'name': 'go', 'command': 'go version'}, 'rustc',
                 'cargo', 'rg', 'fdfind', 'jq', 'codex', 'claude', 'opencode',
                 {'name': 'claude-agent-sdk',
                  'command': 'npm ls --global --prefix ~/.local --parseable --long @anthropic-ai/claude-agent-sdk'}]


def argument_spec():
    spec = dict(
        template=dict(type='str', required=True),
        step=dict(type='str', required=True, choices=list(STEPS) + ['switch']),
        claim=dict(type='dict'),
        source=dict(type='raw'),
        version=dict(type='int'),
        vmid=dict(type='int'),
        node=dict(type='str'),
        pool=dict(type='str', default='disposable-workspaces'),
        storage=dict(type='str'),
        cores=dict(type='int', default=2),
        memory=dict(type='int', default=2048),
        bridge=dict(type='str', default='vmbr0'),
        address_mode=dict(type='str', default='dhcp', choices=['dhcp', 'static']),
        address_range=dict(type='str'),
        address_prefix=dict(type='int', default=24),
        gateway=dict(type='str'),
        packages=dict(type='list', elements='str', default=DEFAULT_PACKAGES),
        npm_packages=dict(type='list', elements='str', default=DEFAULT_NPM),
        agent_commands=dict(type='list', elements='str', default=DEFAULT_COMMANDS),
        tools=dict(type='list', elements='raw', default=DEFAULT_TOOLS),
        agent_user=dict(type='str', default='agent'),
        checkout_path=dict(type='str', default='/workspace/repo'),
        ssh_user=dict(type='str', default='root'),
        ssh_port=dict(type='int', default=22),
        ssh_private_key=dict(type='path'),
        address_timeout=dict(type='int', default=120),
        ssh_timeout=dict(type='int', default=120),
        provision_timeout=dict(type='int', default=1800),
    )
    spec.update(controller_argument_spec(shutdown=True))
    spec.update(provider_argument_spec(['proxmox']))
    spec.update(journal_argument_spec())
    spec.update(history_argument_spec())
    return spec


def module_args():
    """The options of the module, declared once: its action plugin validates a task against them too."""
    return dict(argument_spec=argument_spec(), supports_check_mode=True,
                required_if=[('address_mode', 'static', ('address_range',))])


def run(module):
    """The module's work; ``module`` is an AnsibleModule, or its in-process stand-in."""
    params = dict(module.params)
    step = params['step']
    result = dict(changed=False, step=step, details={})
    journal = open_journal(module)
    with journal if journal is not None else contextlib.nullcontext():
        path = journal.path if journal is not None else resolve_location(params['journal_path'], params.get('journal_url'))
        build = None
        try:
            client = api_from_params(params)
            secret = controller_secret(path, params['controller_secret'], module.check_mode,
                                       journal=journal, warn=module.warn)
            build = TemplateBuild(journal, client, params, secret, claim=params['claim'], check_mode=module.check_mode)
            failpoint.enter('template:%s' % params['template'], 'template.' + step)
            with running_step(journal, params['claim'], STEP_LABELS[step], 'template:%s' % params['template'],
                              module.check_mode):
                outcome = build.run(step)
        except EphemeraError as err:
            result.update(err.details)
            msg = failure_message(params['template'], step, err)
            if build is not None:
                try:
                    errors = handle_failure(build, step, err)
                except EphemeraError as abort_err:
                    errors = [str(err), 'aborting the build: %s' % abort_err]
                if errors is not None:
                    result['errors'] = errors
                    msg += ' The build was aborted: %s; the template still points where it did.' % (
                        'its candidate was removed' if len(errors) == 1 else 'removing its candidate failed too (%s)'
                        % errors[-1])
            _add_template(result, journal, params['template'])
            fail_step(module, msg, journal, params['claim'], None, **result)
        result.update(changed=outcome.changed, msg=outcome.msg, details=outcome.extra)
        _add_template(result, journal, params['template'])
    module.exit_json(**result)


def _add_template(result, journal, name):
    if journal is None:
        return
    pointer = journal.template(name)
    versions = journal.template_versions(name)
    if pointer or versions:
        result['template'] = dict(pointer or {'name': name, 'current': None, 'previous': None}, versions=versions)


def main():
    run(AnsibleModule(**module_args()))


if __name__ == '__main__':
    main()
