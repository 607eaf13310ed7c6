# -*- coding: utf-8 -*-
# Copyright: ephemera.workspaces contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Creating a workspace: thirteen idempotent, resumable steps from "requested" to "ready".

Each step reads the journal, looks at the cluster or the guest where the journal leaves doubt,
writes what it is about to do *before* it does it, acts, and records what it observed. A step
that finds its work done changes nothing, so a rerun resumes at the first unfinished step, and a
controller that died anywhere leaves a journal from which the next run can finish or clean up.

The VMID protocol (see docs/internals/create.md): the candidate from /cluster/nextid is persisted before the
clone; the clone request writes our ownership marker into the new container's description
atomically with the VMID claim; "already exists" means take a new candidate; a lost answer means
look at the candidate first and adopt it only when its marker verifies.
"""

import contextlib
import ipaddress
import os
import re
import time
from urllib.parse import urlsplit

from ansible_collections.ephemera.workspaces.plugins.module_utils.core import failpoint
from ansible_collections.ephemera.workspaces.plugins.module_utils.core import lease as leasing
from ansible_collections.ephemera.workspaces.plugins.module_utils.core import pools as pooling
from ansible_collections.ephemera.workspaces.plugins.module_utils.guest import agents as agent_defs
from ansible_collections.ephemera.workspaces.plugins.module_utils.guest import operations as guest_ops
from ansible_collections.ephemera.workspaces.plugins.module_utils.core import ownership
from ansible_collections.ephemera.workspaces.plugins.module_utils.core import waiter
from ansible_collections.ephemera.workspaces.plugins.module_utils.core.errors import (
    EphemeraError,
    JournalError,
    StaleGenerationError,
)
from ansible_collections.ephemera.workspaces.plugins.module_utils.core.queue import default_requester
from ansible_collections.ephemera.workspaces.plugins.module_utils.core.run_identity import Owner
from ansible_collections.ephemera.workspaces.plugins.module_utils.flows.base import (
    LOCATION,
    RESOURCE_ID,
    Flow,
    StepResult,
    unadopted_fork,
)
from ansible_collections.ephemera.workspaces.plugins.module_utils.providers.base import (
    Allocation,
    Conflict,
    InvalidRequest,
    Locked,
    NotFound,
    Provider,
    ProviderError,
    Refused,
    Settings,
    TaskFailed,
    UnknownOutcome,
    first_address,
    provider_of,
)
from ansible_collections.ephemera.workspaces.plugins.module_utils.providers import registry
from ansible_collections.ephemera.workspaces.plugins.module_utils.flows import agent as agent_flow
from ansible_collections.ephemera.workspaces.plugins.module_utils.flows import lease as lease_flow
from ansible_collections.ephemera.workspaces.plugins.module_utils.flows import preflight
from ansible_collections.ephemera.workspaces.plugins.module_utils.guest.ssh import (
    Guest,
    SshError,
    SshHostKeyMismatch,
    check_private_key,
    wait_for_guest,
)

# The steps a warm pool member did that a workspace taking it does not repeat, and what it takes of the member's facts
# (the host key the member's first connection pinned and its bootstrap renewed). The configure step runs (the request's
# settings), the bootstrap only writes the request's credentials, then the checkout, the brief and ready.
POOLED_STEPS = ('vmid', 'clone', 'wait_clone', 'start', 'address', 'ssh', 'runner')
MEMBER_FACTS = ('host_key', 'host_keys_published', 'pool_fetched')
# What a request records of the module's options (besides the lease, the requester and the secrets' names).
REQUEST_KEYS = ('template', 'node', 'pool', 'full_clone', 'storage', 'repo', 'ref', 'purpose', 'agent', 'agents',
                'cores', 'memory', 'bridge', 'address_mode', 'address_range', 'address_prefix', 'gateway',
                'checkout_path', 'guest_root', 'ssh_user', 'ssh_port', 'agent_user', 'agent_user_is_ssh_user', 'tags',
                'agent_base_urls', 'agent_models')
STEPS = ('request', 'vmid', 'clone', 'wait_clone', 'configure', 'start', 'address', 'ssh', 'bootstrap', 'checkout',
         'runner', 'brief', 'ready')
# What a create that took a warm pool member has left after its candidate step, in their order: run by one task (the
# module's step ``warm_rest``), one step after the other as the tasks of their own would run them, over one worker,
# one journal connection and one SSH connection to the guest.
WARM_REST = tuple(step for step in STEPS if step not in POOLED_STEPS and step != 'request')
# Each step's short label (messages, failures, the queue's current step) and the role's task name for it. Steps 2 to 6
# are said in the provider's words (Provider.step_words: "launch the instance" on EC2, "clone the template" on
# Proxmox VE): step_labels() and task_names() of a provider; these are the words of the seam itself.
STEP_LABELS = {
    'request': 'persist request', 'address': 'wait address', 'ssh': 'ssh', 'bootstrap': 'bootstrap',
    'checkout': 'checkout', 'runner': 'runner', 'brief': 'brief', 'ready': 'ready',
}
TASK_NAMES = {
    'request': 'persist request', 'address': 'wait for its address', 'ssh': 'wait for SSH',
    'bootstrap': 'bootstrap and inject credentials', 'checkout': 'check out the repository',
    'runner': 'install the agent runner', 'brief': 'brief the agent', 'ready': 'mark ready',
}
STEP_LABELS.update((step, words[0]) for step, words in Provider.step_words().items())
TASK_NAMES.update((step, words[1]) for step, words in Provider.step_words().items())


def step_labels(provider):
    """{step: short label} in the words of ``provider`` (its name)."""
    return dict(STEP_LABELS, **{step: words[0] for step, words in registry.provider_class(provider).step_words().items()})


def task_names(provider):
    """{step: the role's task name} in the words of ``provider`` (its name): what step 1 answers, for the role to
    name steps 2 to 13 by."""
    return dict(TASK_NAMES, **{step: words[1] for step, words in registry.provider_class(provider).step_words().items()})


# The status a workspace shows while each step runs.
STEP_STATUS = {
    'request': 'requested', 'vmid': 'provisioning', 'clone': 'provisioning', 'wait_clone': 'provisioning',
    'configure': 'provisioning', 'start': 'booting', 'address': 'booting', 'ssh': 'booting',
    'bootstrap': 'bootstrapping', 'checkout': 'bootstrapping', 'runner': 'registering', 'brief': 'registering',
    'ready': 'ready',
}
# Request parameters that make a workspace what it is: a second request with the same name must match them.
IDENTITY = ('template', 'node', 'pool', 'full_clone', 'repo', 'ref', 'agent', 'address_mode')
# What a later request may correct while the workspace has not checked out yet (the checkout then takes it).
CORRECTABLE = ('repo', 'ref')
# What a later request for the same workspace may amend, taking effect at the next brief: the purpose (a person
# corrects a brief: a briefed workspace is briefed again), the agents' command lines (a brief that failed because
# of a wrong command is retried with a corrected one), their model endpoints and models.
AMENDABLE = ('purpose', 'agents', 'agent_base_urls', 'agent_models')
# What an idempotency key stands for: the identity and the purpose (the same key with another brief is another
# request).
KEYED = IDENTITY + ('purpose',)
# How the controller reaches the guest: read from each run, never part of the workspace's identity (an AWX job's
# key file has another path in every job). The record keeps the last run's for the readers (the inventory).
CONNECTION = ('ssh_user', 'ssh_port', 'ssh_key_path')
NAME = re.compile(r'^[a-z0-9](?:[a-z0-9-]{0,38}[a-z0-9])?$')
TEMPLATE_NAME = re.compile(r'^[a-z0-9](?:[a-z0-9-]{0,28}[a-z0-9])?$')
# Each id lost to another client is an allocation that client made: in a run of many forks every sibling's clone
# is one. Enough attempts for the last of many parallel clones of one template, with a pause between them.
CLONE_ATTEMPTS = 32
REPO_SCHEMES = ('https', 'http', 'ssh', 'git', 'file')
# git's own short form of an SSH URL: [user@]host:path
SCP_LIKE = re.compile(r'^(?:[A-Za-z0-9._-]+@)?[A-Za-z0-9.-]+:(?!//)\S+$')
# What git check-ref-format refuses, and what would read as an option.
BAD_REF = re.compile(r'^-|\.\.|@\{|//|/\.|^\.|[\x00-\x20\x7f~^:?*\[\\]|\.lock$|\.$|/$|^@$')
ASKPASS_DEBT = 'guest:git-askpass'
# The brief goes onto the agent's command line: long enough for a real brief, short of what an argument may hold.
PURPOSE_MAX = 8000
# What a checkout path may be made of; its parent is handed to the agent user, so it is never one of these.
CHECKOUT_CHARS = re.compile(r'^[A-Za-z0-9._/+@-]+$')
SYSTEM_DIRS = ('/bin', '/boot', '/dev', '/etc', '/home', '/lib', '/lib32', '/lib64', '/libx32', '/media', '/mnt',
               '/opt', '/proc', '/root', '/run', '/sbin', '/srv', '/sys', '/tmp', '/usr', '/var', '/var/lib',
               '/var/tmp', '/var/lib/ephemera')
# What useradd takes as a user name (Debian's default NAME_REGEX, without upper case).
AGENT_USER = re.compile(r'^[a-z_][a-z0-9_-]{0,31}$')
SYSTEM_TREES = ('/bin', '/boot', '/dev', '/etc', '/lib', '/lib32', '/lib64', '/libx32', '/proc', '/root', '/run',
                '/sbin', '/sys', '/usr', '/var/lib/ephemera')


class CreateError(EphemeraError):
    """A step could not finish; the message says what to do, ``step`` which step it was."""


def failure_message(name, step, err, labels=None):
    """The one message a failed step ends with: the workspace, the step (in ``labels``: step_labels() of the
    provider), what happened and what to do (``err`` says both)."""
    if step == 'request':
        return 'The request for workspace %s was refused: %s' % (name, err)
    label = (labels or STEP_LABELS)[step]
    return 'Workspace %s failed at step %d/%d (%s): %s' % (name, STEPS.index(step) + 1, len(STEPS), label, err)


def validate_name(name):
    if not isinstance(name, str) or not NAME.match(name):
        raise CreateError('Invalid workspace name %r: use 1 to 40 lower-case letters, digits and dashes, starting and '
                          'ending with a letter or digit (it becomes the host name agent-<name>).' % (name,))


def _without_userinfo(text):
    """``text`` (a URL) with whatever stands before the host's ``@`` masked, for messages."""
    scheme, sep, rest = text.partition('://')
    authority, slash, path = rest.partition('/')
    if '@' in authority:
        authority = '********@' + authority.rpartition('@')[2]
    return scheme + sep + authority + slash + path


def validate_repo(url):
    """Refuse a repository URL git cannot use, that would read as an option, or that carries a login (a token in
    the URL would be recorded in the journal, the events, the queue, the archive records, the guest's
    .git/config and process lists)."""
    text = url if isinstance(url, str) else ''
    if not text or text != text.strip() or any(c.isspace() or ord(c) < 32 for c in text) or text.startswith('-'):
        raise CreateError('Repository %r is not a URL: give https://host/path.git, ssh://host/path, git@host:path or '
                          'a path (/srv/git/app.git).' % (url,), step='request')
    if '://' in text:
        parts = urlsplit(text)
        if parts.scheme not in REPO_SCHEMES or (parts.scheme != 'file' and not parts.hostname):
            raise CreateError('Repository %r: use one of the schemes %s with a host (file:// takes a path).'
                              % (url, ', '.join(REPO_SCHEMES)), step='request')
        userinfo = parts.netloc.rpartition('@')[0] if '@' in parts.netloc else None
        if parts.password or (userinfo is not None and parts.scheme in ('https', 'http', 'git')):
            raise CreateError('Repository URL %s carries a login (user or token before the host); it would be recorded '
                              'in the journal, the queue and the guest\'s git config. Give the URL without it, and '
                              'the token as git_token (and the user as git_username), from a vault or an AWX '
                              'credential.' % _without_userinfo(text), step='request')
        return
    if not text.startswith('/') and not SCP_LIKE.match(text):
        raise CreateError('Repository %r is not a URL: give https://host/path.git, ssh://host/path, git@host:path or '
                          'a path (/srv/git/app.git).' % (url,), step='request')


def validate_purpose(purpose, step='request'):
    """Refuse a purpose the agent would read as an option (a leading ``-``), that no command line can carry (a NUL),
    or longer than PURPOSE_MAX characters. The purpose is the text of a request: a survey answer, a person's words."""
    text = purpose if isinstance(purpose, str) else ''
    if not text.strip():
        raise CreateError('The purpose is empty: say what the agent should do.', step=step)
    if text.lstrip().startswith('-'):
        raise CreateError('The purpose starts with "-" (%r...): the agent would read it as an option of its command '
                          'line. Start it with a word.' % text.lstrip()[:20], step=step)
    if '\x00' in text:
        raise CreateError('The purpose contains a NUL character, which no command line can carry. Remove it.',
                          step=step)
    if len(text) > PURPOSE_MAX:
        raise CreateError('The purpose has %d characters; at most %d are accepted. Shorten it, or put the details in '
                          'a file of the repository and point to it.' % (len(text), PURPOSE_MAX), step=step)


def validate_checkout_path(path, step='request'):
    """Refuse a checkout path that is not absolute and normalised, or whose directory (handed to the agent user)
    is ``/`` or a system directory."""
    text = path if isinstance(path, str) else ''
    parent = os.path.dirname(text)
    problem = None
    if not text.startswith('/') or not CHECKOUT_CHARS.match(text):
        problem = 'it must be an absolute path of letters, digits and "._/+@-"'
    elif os.path.normpath(text) != text or text.startswith('//'):
        problem = 'it is not normalised (no "..", ".", "//" or trailing "/"): give %s' % os.path.normpath(text)
    elif text == '/' or parent == '/' or parent in SYSTEM_DIRS or any(
            text == tree or text.startswith(tree + '/') for tree in SYSTEM_TREES):
        problem = ('its directory %s is handed to the agent user, and must not be "/" or a system directory' %
                   (parent or text))
    if problem:
        raise CreateError('checkout_path %r is refused: %s. Use a directory of its own, such as /workspace/repo.'
                          % (path, problem), step=step)


def validate_agent_user(agent_user, ssh_user, shared=False, logins=None, step='request'):
    """Refuse an agent user the agent must not be: root, the user the controller logs in as (``ssh_user``), or a user
    the provider makes for the controller's login (``logins``: {option: user}); ``shared`` (the request's
    agent_user_is_ssh_user) lets the agent run as the SSH user itself, where a guest has no other user (the try-out
    cluster's host tier)."""
    text = agent_user if isinstance(agent_user, str) else ''
    if not AGENT_USER.match(text):
        raise CreateError('agent_user %r is not a user name: give lower-case letters, digits, "_" and "-", starting '
                          'with a letter or "_" (at most 32): the name of an unprivileged user of its own, such as '
                          'agent.' % (agent_user,), step=step)
    if shared:
        if text != ssh_user:
            raise CreateError('agent_user_is_ssh_user is true, but agent_user %r is not ssh_user %r: with it the agent '
                              'runs as the SSH user itself. Set agent_user to %r, or (better) leave '
                              'agent_user_is_ssh_user false and give an unprivileged user of its own.'
                              % (text, ssh_user, ssh_user), step=step)
        return
    give = ('Give an unprivileged user of its own that is neither root nor the SSH user, such as agent (the default; '
            'the bootstrap step makes it), and keep ssh_user root.')
    if text == 'root':
        raise CreateError('agent_user root is refused: the agent runs whatever a prompt talks it into, and as root it '
                          'would own the guest, its credentials and the controller\'s login to it. ' + give, step=step)
    if text == ssh_user:
        raise CreateError('agent_user %r is ssh_user as well: the agent would hold the controller\'s own login to the '
                          'guest (and with it whatever that user may do, root\'s rights where it has them). %s Only '
                          'a guest that has no other user (the try-out cluster\'s host tier) may set '
                          'agent_user_is_ssh_user: true.' % (text, give), step=step)
    for option, user in sorted((logins or {}).items()):
        if text == user:
            raise CreateError('agent_user %r is the user %s makes for the controller\'s login: the agent would hold '
                              'that login (and its sudo). %s' % (text, option, give), step=step)


def asked_otherwise(key, recorded, asked, facts):
    """True when a request asks for another ``key`` (an IDENTITY parameter) than the workspace's record holds. No node
    asks for wherever it is; no ref for the default branch, which the record holds resolved, or which the checkout
    named (``facts.default_branch``) when only the guest could ask."""
    if recorded == asked or (key in ('node', 'ref') and not asked):
        return False
    return not (key == 'ref' and asked == facts.get('default_branch'))


def validate_ref(ref):
    """Refuse a ref git cannot name (git check-ref-format) or that would read as an option."""
    if not isinstance(ref, str) or not ref or BAD_REF.search(ref):
        raise CreateError('Ref %r is not a branch, tag or commit name git accepts (no spaces, "..", "~^:?*[\\", '
                          'leading "-" or trailing "/" or ".lock").' % (ref,), step='request')


def address_candidates(text):
    """Addresses of a range: 'a.b.c.d-a.b.c.e', a CIDR network (its hosts), or one address."""
    text = (text or '').strip()
    try:
        if '-' in text:
            first, last = (ipaddress.ip_address(part.strip()) for part in text.split('-', 1))
            if int(last) < int(first):
                raise ValueError('the range ends before it starts')
            return [str(ipaddress.ip_address(n)) for n in range(int(first), int(last) + 1)]
        if '/' in text:
            return [str(a) for a in ipaddress.ip_network(text, strict=False).hosts()]
        return [str(ipaddress.ip_address(text))]
    except ValueError as exc:
        raise CreateError('address_range %r is not a range (a.b.c.d-a.b.c.e), a network (a.b.c.0/24) or an address: %s'
                          % (text, exc))


def usable_address(addresses, expected=None):
    """The first IPv4 address among a provider's (interface, family, address) tuples (``expected`` only)."""
    return first_address(addresses, 'inet', expected)


def template_value(template):
    """A request's template as recorded: a VMID as an int, a template name as it is."""
    if isinstance(template, bool):
        return template
    if isinstance(template, int) or (isinstance(template, str) and template.isdigit()):
        return int(template)
    return template


def resolve_template(journal, template):
    """(vmid, location or None, {name, version} or None) of what a request names as its template: a VMID as it is,
    a template name through the journal's pointer (the version a build switched it to last)."""
    template = template_value(template)
    if isinstance(template, int) and not isinstance(template, bool):
        return template, None, None
    if not isinstance(template, str) or not TEMPLATE_NAME.match(template):
        raise CreateError('Template %r is neither a VMID nor a template name (1 to 30 lower-case letters, digits and '
                          'dashes).' % (template,), step='request')
    pointer = journal.template(template) if journal is not None else None
    if not pointer or pointer['current'] is None:
        raise CreateError('Template %r has no built version in the journal. Build one (ansible-playbook '
                          'ephemera.workspaces.template_build -e \'{"template": "%s", "source": VMID}\'), or give the '
                          'VMID of a prepared template.' % (template, template), step='request')
    version = journal.template_version(template, pointer['current'])
    return version['resource_id'], version['location'], {'name': template, 'version': version['version']}


def declared_pools(specs, provider):
    """The pool declarations ``specs`` checked and completed (a declaration that names no provider is
    ``provider``'s, the run's); PoolError for one that is wrong, and for one whose provider keeps no pools yet (its
    ``pool_refusal``), naming the provider and what to do."""
    pools = []
    for spec in specs or []:
        pool = pooling.validate_pool(spec, provider=provider)
        try:
            cls = registry.provider_class(pool['provider'])
        except ValueError as err:
            raise pooling.PoolError('Pool %s: %s' % (pool['name'], err))
        if cls.pool_refusal:
            raise pooling.PoolError(
                'Pool %s is declared for provider %s, which keeps no warm pools yet: %s. Remove the pool from '
                'ephemera_pools (creates on %s stay cold), or declare it for a provider that keeps them.'
                % (pool['name'], pool['provider'], cls.pool_refusal, pool['provider']))
        pools.append(pool)
    return pools


class CreateFlow(Flow):
    """The steps of one workspace's creation. ``params`` are the module's options; the rest as :class:`Flow`'s.

    ``journal`` is None in check mode when none exists yet; ``provider`` None for steps that do not need it.
    """

    # ``phase`` of a failure: the status the workspace had when the step failed ("failed while booting").
    STEP_STATUS = STEP_STATUS

    # ------------------------------------------------------------------ helpers

    @property
    def request(self):
        """The persisted request (what step 1 recorded)."""
        return self.ws['params'] if self.ws else {}

    @property
    def source_id(self):
        """The VMID the workspace is cloned from: the one its template name resolved to when it was requested, or for
        a fork's child its parent's (cloned from the fork's snapshot)."""
        req = self.request
        if req.get('fork'):
            return req['fork']['source']
        return req.get('template_vmid') or req['template']

    def _layout(self):
        req = self.request
        return guest_ops.Layout(req['guest_root'], self.resource_id, req['checkout_path'], req['agent_user'])

    @property
    def labels(self):
        """The steps' short labels in the words of this workspace's provider (step_labels)."""
        return step_labels(provider_of(self.ws or self.params))

    @property
    def ssh_user(self):
        """The user this run logs in as (a connection setting of the run, not of the workspace)."""
        return self.params.get('ssh_user') or self.request.get('ssh_user') or 'root'

    def _guest(self):
        req = self.request
        facts = self.ws['facts']
        # Before the first connection pinned a key: the keys the machine published through the provider, if any.
        keys = [facts.get('host_key'), facts.get('host_key_next')] if facts.get('host_key') else \
            list(facts.get('host_keys_published') or [])
        return Guest(self.ws['address'], port=self.params.get('ssh_port') or req['ssh_port'], user=self.ssh_user,
                     key_file=self.params.get('ssh_private_key') or req.get('ssh_key_path'), host_key=keys)

    def run(self, step):
        if step not in STEPS:
            raise CreateError('Unknown step %r; the steps are %s.' % (step, ', '.join(STEPS)))
        failpoint.enter(self.name, 'create.' + step)
        if step != 'request':
            if self.ws is None and self.check_mode:
                return StepResult(True, '%s: would run' % self.labels[step])
            if self.ws is None:
                raise CreateError('Workspace %r is not recorded: run the request step first.' % self.name)
            if self.ws['desired_state'] == 'destroyed' or self.ws['status'] in ('destroying', 'destroyed'):
                raise CreateError('Workspace %r is %s; it takes no further create steps.'
                                  % (self.name, self.ws['status']), step=step)
            if step in self.ws['progress']:
                return StepResult(False, '%s: already done' % self.labels[step])
            if step in ('bootstrap', 'checkout'):
                self._refuse_missing_secrets(step)
            # A request recorded before these checks existed is checked again where it is used.
            if step == 'checkout':
                validate_checkout_path(self.request.get('checkout_path'), step=step)
            if step == 'bootstrap':
                # The SSH user is a setting of each run: the agent is never the one this run logs in as.
                self._check_agent_user(self.request, step=step)
            if step == 'brief':
                validate_purpose(self.request.get('purpose'), step=step)
            if self.check_mode and step == 'configure' and self.diff and self.resource_id:
                return self.check_configure()
            if self.check_mode:
                return StepResult(True, '%s: would run' % self.labels[step])
            if self.ws['status'] != STEP_STATUS[step] and step != 'ready':
                self.save('status', detail={'step': step, 'status': STEP_STATUS[step]}, status=STEP_STATUS[step],
                          failure=None)
        try:
            return getattr(self, 'step_' + step)()
        except EphemeraError as err:
            # Every failure of a recorded workspace is in the journal, also one a step did not foresee. A run that
            # lost its claim (or whose record moved on) must not write; a journal that cannot take the failure
            # leaves the error itself to report.
            if step != 'request' and not getattr(err, 'recorded', False) and not isinstance(err, StaleGenerationError):
                try:
                    self.fail(step, err)
                except JournalError:
                    pass
            raise

    # ------------------------------------------------------------- 1. request

    def _check_source(self, req):
        """Refuse a template or pool that cannot work, before anything is recorded; the template's location."""
        try:
            return self.provider.check_source(req['template_vmid'], req['node'], req['pool'])
        except (InvalidRequest, ProviderError) as err:
            raise CreateError(str(err), step='request')

    def step_request(self):
        validate_name(self.name)
        if self.params.get('resume'):
            return self._resume()
        missing = [k for k in ('template', 'repo', 'purpose') if self.params.get(k) in (None, '')]
        if missing:
            raise CreateError('A new request for workspace %r needs template, repo and purpose; %s %s not given. To '
                              'continue the request recorded for it, set resume=true instead.'
                              % (self.name, ', '.join(missing), 'is' if len(missing) == 1 else 'are'), step='request')
        req = self._settings_of_request()
        # Whose workspace it is: the brief is theirs to amend (_check_amender).
        req['requester'] = self._requester()
        # Which secrets the request came with (names, never values), so that a run resuming it without them
        # (a reconcile without the vault) is refused before a step goes on with none.
        req['inputs'] = {'agent_env': sorted(self.params.get('agent_credentials') or {}),
                         'git_login': bool(self.params.get('git_token'))}
        req['template'] = template_value(req['template'])
        validate_repo(req['repo'])
        # Left out or blank (a blank AWX survey answer: None or ''): the repository's default branch.
        req['ref'] = req['ref'] or None
        if req['ref'] is not None:
            validate_ref(req['ref'])
        validate_purpose(req['purpose'])
        validate_checkout_path(req['checkout_path'])
        self._check_agent_user(req)
        self._check_agent(req)
        self._declared_pools(step='request')
        if req['address_mode'] == 'static':
            address_candidates(req['address_range'])
        try:
            terms = leasing.validate_request(self.params.get('ttl'), self.params.get('idle_timeout'),
                                             self.params.get('keep'))
        except leasing.LeaseError as err:
            raise CreateError(str(err), step='request')
        self._check_key()
        ws = self.ws
        if ws is not None and ws['status'] != 'destroyed':
            return self._request_again(ws, req)
        replay = self._begin_idempotent(req)
        if replay is not None:
            return replay
        node = self._resolve_source_of(req)
        repository = self._check_repository(req)
        if self.check_mode:
            pool = self._pool_for_check(req, node)
            if pool is None:
                return StepResult(True, 'request: would record workspace %s%s' % (self.name, repository))
            return StepResult(True, 'request: would record workspace %s%s; it would take a member of warm pool %s '
                              'if one is warm%s' % (self.name, repository, pool['name'], ', and refill the pool after'
                                                    if pool['refill'] else ''),
                              pool=pool['name'], refill=pool['refill'])
        now = time.time()
        terms = leasing.new_lease(now, **terms)
        fields = dict(status='requested', desired_state='present', repo=req['repo'], ref=req['ref'],
                      purpose=req['purpose'], params=req, progress={'request': now}, lease=terms,
                      lease_expires_at=terms['expires_at'], cleanup={},
                      **self.resource_fields(provider=self.provider.name, location=node))
        if ws is None:
            self.ws = self.journal.create_workspace(self.name, **fields)
        else:
            # A destroyed workspace of the same name starts a new life; its record and history stay.
            fields.update(self.resource_fields(resource_id=None, candidate_id=None, tasks={}))
            self.ws = self.save('recreated', kind='recorded', address=None, failure=None, facts={}, activity='unknown',
                                **fields)
        return StepResult(True, 'request: recorded workspace %s%s' % (self.name, repository))

    def _settings_of_request(self):
        """The request's recorded parameters as this run's options give them (the secrets only by name, later)."""
        req = {k: self.params.get(k) for k in REQUEST_KEYS}
        req['agents'] = req['agents'] or {}
        req['agent_base_urls'] = req['agent_base_urls'] or {}
        req['agent_models'] = req['agent_models'] or {}
        # Stored under a name the journal does not mask: it is the key file's path, not the key.
        req['ssh_key_path'] = self.params['ssh_private_key']
        return req

    def _resolve_source_of(self, req):
        """Resolve what ``req`` clones from into ``req`` (template_vmid, template_version, node); the node."""
        # A template name stands for its current version now: the workspace records which one it came from, and
        # goes on from it whatever a later build switches the name to.
        if self.provider.journal_templates:
            req['template_vmid'], template_node, version = resolve_template(self.journal, req['template'])
        else:
            # A cloud's image (an AMI id, or a name it resolves to one) is resolved once and recorded: a rerun, or
            # a resume, launches from the same image whatever the name points to later.
            req['template_vmid'], template_node, version = self._resolve_source(req), None, None
            req['launch'] = self.provider.launch_options()
            req['created_by'] = Owner.of_run().host
        if version:
            req['template_version'] = version
            req['node'] = req['node'] or template_node
        req['node'] = self._check_source(req)
        return req['node']

    def _resolve_source(self, req):
        """The id a cloud provider allocates from for the request's source; refused before anything is recorded."""
        if req['address_mode'] == 'static':
            raise CreateError('address_mode static is for Proxmox VE bridges; on %s the address comes from the '
                              'cloud: leave address_mode at dhcp.' % self.provider.name, step='request')
        try:
            return self.provider.resolve_source(req['template'])
        except ProviderError as err:
            raise CreateError(str(err), step='request')

    def _check_key(self):
        """Refuse a key file that cannot log in anywhere (missing, unreadable, not a private key) before anything
        is cloned; the key is this run's, so a rerun with the right one goes on."""
        try:
            check_private_key(self.params.get('ssh_private_key'))
        except SshError as err:
            raise CreateError(str(err), step='request')

    def _check_agent_user(self, req, step='request'):
        """Refuse an agent user that is root, the SSH user or a login the provider makes (validate_agent_user)."""
        try:
            # The guest steps run without a provider: the logins it makes were checked at the request, and only the
            # SSH user is a setting of each run.
            logins = self.provider.login_users() if self.provider is not None else {}
        except ProviderError as err:
            raise CreateError(str(err), step=step)
        ssh_user = self.ssh_user if step != 'request' else req.get('ssh_user') or 'root'
        # A request recorded before the option existed says nothing: this run's setting counts.
        shared = req['agent_user_is_ssh_user'] if 'agent_user_is_ssh_user' in req else self.params.get(
            'agent_user_is_ssh_user')
        validate_agent_user(req.get('agent_user'), ssh_user, shared=bool(shared), logins=logins, step=step)

    def _check_agent(self, req):
        """Refuse, before anything is recorded, an agent that is not configured, an ``agents`` entry that cannot be
        started, an endpoint that is not one, or an agent whose tool the template's recorded, verified tools lack."""
        try:
            agent_defs.check(req['agents'])
            for name, url in sorted(req['agent_base_urls'].items()):
                agent_defs.check_endpoint(name, url)
            known = agent_defs.catalogue(req['agents'])
            if req['agent'] not in known:
                raise agent_defs.AgentError('Unknown agent %r; configured agents: %s. Choose one of them, or define it '
                                            'in agents.' % (req['agent'], ', '.join(sorted(known))))
        except agent_defs.AgentError as err:
            raise CreateError(str(err), step='request')
        tool = agent_defs.tool_of(req['agent'], known[req['agent']])
        built = self._template_tools(req['template']) if tool else None
        if built is None:
            return
        version, tools = built
        if tool not in tools:
            raise CreateError('Template %s version %s has no %s: its build verified %s. Choose an agent it has, or '
                              'build a version with %s (template_build with the default tool list, or %s in '
                              'ephemera_tools and the package that installs it).'
                              % (version['name'], version['version'], tool, ', '.join(sorted(tools)) or 'no tools',
                                 tool, tool), step='request')

    def _template_tools(self, template):
        """(template version, its verified tools) of what the request names, when the journal has a build of it;
        None when it does not (a template prepared by hand, a cloud image): nothing is known to refuse."""
        if self.journal is None or not self.provider.journal_templates:
            return None
        value = template_value(template)
        if isinstance(value, str):
            pointer = self.journal.template(value)
            if not pointer or pointer['current'] is None:
                return None
            version = self.journal.template_version(value, pointer['current'])
        else:
            built = [v for v in self.journal.template_versions(state='built') if v.get('resource_id') == value]
            if not built:
                return None
            version = built[-1]
        if not version or version.get('state') != 'built':
            return None
        return version, dict(version.get('tools') or {})

    def _check_repository(self, req):
        """Ask the repository from the controller whether it has the ref (where the controller can reach it);
        a note for the step's message when it could not tell. A request without a ref gets the repository's default
        branch here, recorded as its ref; where the controller cannot ask, the guest's clone takes the default
        branch and the checkout step records which it was."""
        try:
            verdict = preflight.probe_repository(req['repo'], req['ref'], token=self.params.get('git_token'),
                                                 username=self.params.get('git_username') or 'git')
        except preflight.RepositoryRefused as err:
            raise CreateError(str(err), step='request')
        notes = [verdict.note] if verdict.note else []
        if verdict.branch:
            req['ref'] = verdict.branch
            notes.insert(0, 'ref: %s, the default branch' % verdict.branch)
        elif req['ref'] is None:
            notes.insert(0, 'ref: the default branch, which the checkout names')
        return ' (%s)' % '; '.join(notes) if notes else ''

    def _resume(self):
        """Continue the request recorded for the workspace (reconcile resumes creates by name this way)."""
        ws = self.ws
        if ws is None or ws['status'] == 'destroyed':
            raise CreateError('Workspace %r has no create to resume: %s. Create it with template, repo and purpose.'
                              % (self.name, 'it is not recorded' if ws is None else 'it was destroyed'), step='request')
        if ws['desired_state'] == 'destroyed' or ws['status'] == 'destroying':
            raise CreateError('Workspace %r is being destroyed; it is not resumed.' % self.name, step='request')
        parent = unadopted_fork(self.journal, ws)
        if parent:
            raise CreateError('Workspace %r is a child of an unfinished fork of %s: only that fork adopts it, once every '
                              'child reached identity reset. Run the fork again (ephemera.workspaces.fork -e workspace=%s '
                              'with the same children), or undo it (-e fork_abandon=true).' % (self.name, parent, parent),
                              step='request')
        self._check_key()
        for step in ('bootstrap', 'checkout'):
            self._refuse_missing_secrets(step)
        return StepResult(False, 'request: resuming the recorded request (%s)' % ws['status'])

    def _request_again(self, ws, req):
        """A request for a workspace that is recorded: replay, resume, or refuse other parameters."""
        if ws['desired_state'] == 'destroyed' or ws['status'] == 'destroying':
            raise CreateError('Workspace %r is being destroyed; wait for that to finish, then create it again.'
                              % self.name, step='request')
        different = [k for k in IDENTITY if asked_otherwise(k, ws['params'].get(k), req[k], ws['facts'] or {})]
        recorded = ws.get('lease') or {}
        different += ['%s' % k for k in ('ttl', 'idle_timeout', 'keep')
                      if self.params.get(k) is not None and recorded.get(k) != self.params[k]]
        if different and set(different) <= set(CORRECTABLE):
            return self._correct(ws, req, different)
        if different:
            raise CreateError('A workspace named %r exists with other parameters (%s). Choose another name, or '
                              'destroy it first%s.' % (self.name, ', '.join('%s: %r, not %r' % (
                                  k, ws['params'].get(k, recorded.get(k)), req.get(k, self.params.get(k)))
                                  for k in different),
                                  '; a lease is extended by heartbeats, never by a new request'
                                  if set(different) & set(('ttl', 'idle_timeout', 'keep')) else ''), step='request')
        for step in ('bootstrap', 'checkout'):
            self._refuse_missing_secrets(step)
        key = self.params.get('idempotency_key')
        if key and not self.check_mode:
            claim = self.journal.begin_idempotent(key, 'create', self._idempotency_request(req), owner=Owner.of_run(),
                                                  claim=self.claim)
            if claim.replayed:
                return self._replayed(claim)
            if ws['status'] == 'ready':
                # No step is left to run, so the result is known now: store it for the next use of the key.
                self.journal.finish_idempotent(claim, self._result())
        amended = {k: req[k] for k in AMENDABLE if ws['params'].get(k) != req[k]}
        connection = {k: req[k] for k in CONNECTION if ws['params'].get(k) != req[k]}
        if amended:
            self._check_amender(ws, req, amended)
            if ws['params'].get('requester') != req['requester']:
                connection['requester'] = req['requester']
        if self.check_mode or not (amended or connection):
            if not amended:
                return StepResult(False, 'request: already recorded (%s)' % ws['status'])
            return StepResult(True, 'request: already recorded (%s); would amend %s' % (ws['status'], ', '.join(sorted(amended))))
        if not amended:
            # Bookkeeping for the readers, not a change to the workspace: a rerun from another AWX job reports none.
            self.save('connection', kind='recorded', detail={'changed': sorted(connection)},
                      params=dict(ws['params'], **connection))
            return StepResult(False, 'request: already recorded (%s)' % ws['status'])
        fields = dict(params=dict(ws['params'], **dict(amended, **connection)))
        rebrief = 'purpose' in amended and 'brief' in ws['progress']
        if 'purpose' in amended:
            fields['purpose'] = amended['purpose']
        if rebrief:
            # The brief and ready steps run again, now, with the corrected purpose, replacing the agent's work.
            fields['progress'] = {k: v for k, v in ws['progress'].items() if k not in ('brief', 'ready')}
            fields['facts'] = dict(ws['facts'], rebrief=True)
        self.save('amended', kind='recorded', detail={'changed': sorted(amended), 'rebrief': rebrief}, **fields)
        return StepResult(True, 'request: already recorded (%s); %s amended, %s'
                          % (ws['status'], ', '.join(sorted(amended)),
                             'the agent is briefed again' if rebrief else 'taking effect at the brief'))

    def _correct(self, ws, req, different):
        """A request that corrects the repository or ref (and maybe the purpose) of a recorded workspace: taken while
        the workspace has not checked out yet, checked as a new request's are (the controller asks the repository
        where it can reach it, a missing ref becomes the new repository's default branch), and recorded, so that the
        checkout step (and whatever failed before it) runs with it. Refused once it checked out, saying what to run.
        The requester's own correction only, as any amendment (``rebrief_others``)."""
        was = ', '.join('%s %r' % (k, ws['params'].get(k)) for k in different)
        if 'checkout' in ws['progress']:
            raise CreateError('Workspace %r has checked out %s@%s already; another repository or ref is another '
                              'workspace. Destroy it first (ansible-playbook ephemera.workspaces.destroy -e '
                              'workspace=%s), then create it again, or choose another name.'
                              % (self.name, ws['params'].get('repo'), ws['params'].get('ref') or '(its default branch)',
                                 self.name), step='request')
        # No ref asked: the corrected repository's default branch, which the check names where it can.
        note = self._check_repository(req)
        corrected = {k: req[k] for k in CORRECTABLE + AMENDABLE if ws['params'].get(k) != req[k]}
        self._check_amender(ws, req, corrected)
        for step in ('bootstrap', 'checkout'):
            self._refuse_missing_secrets(step)
        said = ', '.join('%s %r' % (k, corrected[k]) for k in sorted(corrected))
        if self.check_mode:
            return StepResult(True, 'request: would correct %s (was %s) before the checkout%s' % (said, was, note))
        params = dict(ws['params'], requester=req['requester'], **corrected)
        facts = {k: v for k, v in (ws['facts'] or {}).items() if k != 'default_branch'}
        self.save('corrected', kind='recorded', detail={'changed': sorted(corrected), 'was': {
            k: ws['params'].get(k) for k in sorted(corrected) if k in CORRECTABLE}}, params=params,
            repo=params['repo'], ref=params['ref'], purpose=params['purpose'], facts=facts)
        return StepResult(True, 'request: corrected %s (was %s) before the checkout%s' % (said, was, note))

    def _requester(self):
        """Who asks (``requested_by``, else user@host) and from which AWX job, as the request records it."""
        return {'by': self.params.get('requested_by') or default_requester(),
                'job_id': self.params.get('job_id') or None}

    def _check_amender(self, ws, req, amended):
        """Refuse, changing nothing, an amendment of the agent's brief by someone else than the workspace's requester
        (a new purpose briefs the running agent again, replacing its work), unless ``rebrief_others`` says so. A
        workspace recorded before requesters were recorded has none to protect."""
        recorded = ws['params'].get('requester') or {}
        if not recorded.get('by') or recorded['by'] == req['requester']['by'] or self.params.get('rebrief_others'):
            return
        job = ' (AWX job %s)' % recorded['job_id'] if recorded.get('job_id') else ''
        raise CreateError('Workspace %r was requested by %s%s; this request by %s would change %s%s. Ask %s, create '
                          'a workspace of another name, or have the job run with rebrief_others=true (an admin of '
                          'the AWX template sets it) to take the workspace over.'
                          % (self.name, recorded['by'], job, req['requester']['by'], ', '.join(sorted(amended)),
                             ' and brief its running agent again, replacing its work' if 'purpose' in amended
                             and 'brief' in ws['progress'] else '', recorded['by']), step='request')

    def _refuse_missing_secrets(self, step):
        """Refuse, changing nothing, a run that is to do ``step`` without the secrets the workspace was requested with.

        Written without them, the agent would start with no API key, or the clone would fail asking for a login.
        """
        if step in self.ws['progress']:
            return
        inputs = self.ws['params'].get('inputs') or {}
        given = self.params.get('agent_credentials') or {}
        if step == 'bootstrap' and [n for n in inputs.get('agent_env') or () if n not in given]:
            missing = 'agent_credentials (%s)' % ', '.join(inputs['agent_env'])
        elif step == 'checkout' and inputs.get('git_login') and not self.params.get('git_token'):
            missing = 'git_token'
        else:
            return
        err = CreateError('Workspace %r was requested with %s, and this run does not pass them, so its %s step cannot go on. '
                          'Pass them again as in the first request (extra vars from a vault or an AWX credential); '
                          'reconcile needs them too to resume it.' % (self.name, missing, step), step=step)
        err.recorded = True  # a run short of input: nothing about the workspace failed, its record stays as it was
        raise err

    def _result(self):
        """What a request with an idempotency key replays."""
        return {'name': self.name, 'vmid': self.resource_id, 'node': self.location, 'address': self.ws['address'],
                'status': 'ready'}

    def _replayed(self, claim):
        return StepResult(False, 'request: replayed the result of an earlier request with this idempotency key',
                          replayed=True, result=claim.result)

    def _idempotency_request(self, req):
        return dict([('name', self.name)] + [(k, req.get(k)) for k in KEYED if k != 'node'])

    def _begin_idempotent(self, req):
        """None to go on, or the StepResult that replays a finished request with the same key."""
        key = self.params.get('idempotency_key')
        if not key or self.check_mode:
            return None
        claim = self.journal.begin_idempotent(key, 'create', self._idempotency_request(req), owner=Owner.of_run(),
                                              claim=self.claim)
        return self._replayed(claim) if claim.replayed else None

    # ------------------------------------------------------------ warm pools

    def record_member(self, pool, version=None):
        """Record this workspace as a member of warm pool ``pool`` (a validated declaration): a request that is the
        pool's (its template, location and repository; the run's sizes and guest settings) with no purpose, ref or
        secrets, so that every create step before the checkout of a ref and the brief can run for it."""
        if self.ws is not None:
            return StepResult(False, 'pool member %s: already recorded (%s)' % (self.name, self.ws['status']))
        req = self._settings_of_request()
        req.update(template=template_value(pool['template']), node=pool['location'], repo=pool.get('repo'), ref=None,
                   purpose=None, requester={'by': 'pool_fill', 'job_id': self.params.get('job_id') or None},
                   inputs={'agent_env': [], 'git_login': False}, pool_member={'pool': pool['name']})
        if req['address_mode'] == 'static':
            raise CreateError('Pool %s: a member takes its address by DHCP (a static address is leased to a '
                              'workspace by name); set address_mode dhcp for the pool fill.' % pool['name'],
                              step='request')
        self._check_agent_user(req)
        self._check_agent(req)
        self._check_key()
        node = self._resolve_source_of(req)
        if version is not None and (req.get('template_version') or {}).get('version') not in (None, version):
            raise CreateError('Pool %s: template %s moved to version %s while the member was recorded for version '
                              '%s; the next fill makes members of the new one.'
                              % (pool['name'], pool['template'], req['template_version']['version'], version),
                              step='request')
        if self.check_mode:
            return StepResult(True, 'pool member %s: would record it' % self.name)
        now = time.time()
        # A member nobody takes is given up at the end of its lease, however idle it is meanwhile.
        terms = leasing.new_lease(now, ttl=pool['lease'], idle_timeout=pool['lease'], keep=False)
        self.ws = self.journal.create_workspace(
            self.name, claim=self.claim, status='requested', desired_state='present', repo=req['repo'], ref=None,
            purpose=None, params=req, progress={'request': now}, lease=terms, lease_expires_at=terms['expires_at'],
            cleanup={}, **self.resource_fields(provider=self.provider.name, location=node))
        return StepResult(True, 'pool member %s: recorded for pool %s' % (self.name, pool['name']))

    def _declared_pools(self, step=None):
        """The ``pools`` option, each declaration checked (CreateError saying what to correct)."""
        try:
            return declared_pools(self.params.get('pools'), self.provider.name if self.provider is not None
                                  else provider_of(self.params))
        except pooling.PoolError as err:
            raise CreateError('%s Correct ephemera_pools and run again.' % err, step=step)

    def _pool_request(self):
        """What a pool must match for this workspace: provider, location, template and repository."""
        req = self.request
        return {'provider': self.provider.name, 'location': req.get('node'), 'template': req.get('template'),
                'repo': req.get('repo')}

    def _pool_for_check(self, req, node):
        """The declared pool whose member a new request ``req`` (at ``node``) would try to take, for check mode to
        say (and the create playbook's refill to report what it would fill); None when it would go cold."""
        if (not self.params.get('pools') or self.provider is None or req.get('fork')
                or req.get('address_mode') == 'static'):
            return None
        return pooling.matching_pool(self._declared_pools(step='request'), {
            'provider': self.provider.name, 'location': req.get('node') or node, 'template': req.get('template'),
            'repo': req.get('repo')})

    def _from_pool(self):
        """The vmid step's result when a warm member of a pool that matches the request became this workspace, else
        None (no pool declared or matching, none warm, each failing its claim check): the create goes on cold."""
        req = self.request
        declared = self.params.get('pools') or []
        if (not declared or self.check_mode or req.get('fork') or req.get('pool_member') or self.provider is None
                or req.get('address_mode') == 'static' or self.ws['facts'].get('cold')):
            return None
        pool = pooling.matching_pool(self._declared_pools(), self._pool_request())
        if pool is None:
            return None
        version = (req.get('template_version') or {}).get('version')
        life = (self.ws['progress'] or {}).get('request')
        record = pooling.claim_member(self.journal, pool['name'], self.name, claim=self.claim, check=self._claim_check,
                                      version=version, life=life)
        if record is None:
            # Noted, so that a rerun of this step does not look again and take a member after a cold clone began.
            self.save('pool_empty', kind='observed', detail={'pool': pool['name']},
                      facts=dict(self.ws['facts'], cold='pool %s had no warm member that passed its claim check'
                                 % pool['name']))
            return None
        return self._take_member(pool, record)

    def _claim_check(self, record):
        """True when member ``record`` may be given out: its record names a resource that carries its marker, runs,
        and whose agent runner answers; else why not (the member is then released)."""
        member = self.journal.get_workspace(record['member'])
        noun = self.provider.noun
        if member is None or member['status'] == 'destroyed' or not member[RESOURCE_ID]:
            return 'its workspace record names no %s' % noun
        if member['desired_state'] != 'present' or (member.get('lease') and
                                                    leasing.is_expired(member['lease'], time.time())):
            return 'its lease expired: the expiry sweep deletes it'
        try:
            resource = self.provider.find(member[RESOURCE_ID], member[LOCATION])
            if resource is None:
                return 'its %s %s is gone' % (noun, self.provider.label(member[RESOURCE_ID]))
            verdict = self.provider.verify(resource, member['name'], ownership.record_nonce(member))
            if verdict != ownership.VERIFIED:
                return 'its %s does not carry its marker (%s)' % (noun, verdict)
            if not self.provider.power(resource).running:
                return 'its %s %s is not running' % (noun, self.provider.label(resource.id))
        except ProviderError as err:
            return 'its %s could not be looked at: %s' % (noun, err)
        answer = agent_flow.ask(member, key_file=self.params.get('ssh_private_key'),
                                timeout=min(10, self.params.get('ssh_timeout') or 10))
        if not answer.get('alive'):
            return 'its agent runner does not answer: %s' % (answer.get('error') or answer)
        return True

    def _close_member(self, member, vmid):
        """End the life of claimed member record ``member``: its container (``vmid``, None when it vanished) is this
        workspace's now; the record stays, for audit."""
        if member is None or member['status'] == 'destroyed':
            return
        self.journal.update_workspace(
            member['name'], member['generation'], claim=self.claim,
            event={'kind': 'observed', 'action': 'pool_claimed', 'detail': {'by': self.name, 'vmid': vmid}},
            status='destroyed', desired_state='destroyed', facts=dict(member['facts'] or {}, claimed_by=self.name),
            **self.resource_fields(resource_id=None, candidate_id=None))

    def _take_member(self, pool, record):
        """Make the claimed member ``record`` this workspace: its container re-signed with this workspace's marker,
        host name and lease labels, its record's container, address and host key taken over, the member's record
        closed. Every part is done again or found done by a rerun (the claim stays this workspace's)."""
        member = self.journal.get_workspace(record['member'])
        facts = self.ws['facts']
        nonce = ownership.record_nonce(self.ws) or ownership.new_nonce()
        if facts.get('from_pool') != pool['name'] or facts.get('marker_nonce') != nonce:
            # The nonce the container's new marker carries, recorded before it is written (journal first).
            self.save('pool_claim', kind='dispatched', detail={'pool': pool['name'], 'member': record['member']},
                      facts=dict(facts, from_pool=pool['name'], pool_member=record['member'], marker_nonce=nonce))
        if self.resource_id is None:
            resource = None
            if member is not None and member[RESOURCE_ID]:
                resource = self.provider.find(member[RESOURCE_ID], member[LOCATION])
            if resource is None:
                # Gone between its claim check and now: this workspace goes on cold, the member's life ends here.
                self._close_member(member, None)
                self.save('pool_member_gone', kind='observed', detail={'member': record['member']},
                          facts=dict(self.ws['facts'], from_pool=None, cold='pool member %s vanished after its claim'
                                     % record['member']))
                return None
            mine = self.provider.verify(resource, self.name, nonce)
            if mine != ownership.VERIFIED:
                if self.provider.verify(resource, member['name'], ownership.record_nonce(member)) != ownership.VERIFIED:
                    raise CreateError('%s, the %s of pool member %s, carries neither its marker nor this '
                                      'workspace\'s; refusing to touch it. Reconcile reports it; destroy this '
                                      'workspace and create it again.' % (self.provider.label(resource.id),
                                                                          self.provider.noun, record['member']))
                self.provider.remark(resource, self.name, nonce, 'agent-%s' % self.name, self._labels('provisioning'),
                                     created_by=self.request.get('created_by'))
            mfacts = dict(member['facts'] or {})
            if member['params'].get('repo') and member['params'].get('repo') == self.request.get('repo'):
                mfacts['pool_fetched'] = True
            now = time.time()
            # The candidate step itself is done once the member's record is closed below: a run killed in between
            # closes it on its rerun (step_vmid), so that no two live records name the container.
            done = {step: now for step in POOLED_STEPS if step != 'vmid'}
            self.save('pool_member_taken', detail={'pool': pool['name'], 'member': record['member'],
                                                   'vmid': member[RESOURCE_ID]},
                      address=member['address'], progress=dict(self.ws['progress'], **done),
                      facts=dict(self.ws['facts'], **{k: mfacts[k] for k in MEMBER_FACTS if k in mfacts}),
                      **self.resource_fields(resource_id=member[RESOURCE_ID], candidate_id=member[RESOURCE_ID],
                                             location=member[LOCATION]))
        self._close_member(member, member[RESOURCE_ID] if member else None)
        self.done('vmid')
        return StepResult(True, '%s: %s taken from warm pool %s (member %s)'
                          % (self.labels['vmid'], self.provider.label(self.resource_id), pool['name'], record['member']),
                          vmid=self.resource_id, from_pool=pool['name'], refill=bool(pool.get('refill')))

    # --------------------------------------------------------------- 2. vmid

    def _next_candidate(self, avoid=()):
        try:
            # A provider whose ids come from its answer derives its idempotency token from the record: the request's
            # time, and how many candidates a failed allocation used up (a token once used never asks again).
            stamp = (self.ws['progress'] or {}).get('request')
            spent = len((self.ws.get('facts') or {}).get('spent_candidates') or [])
            return self.provider.candidate_for(self.name, '%s/%d' % (stamp, spent) if spent else stamp, avoid,
                                               sleep=self.sleep)
        except Conflict as err:
            raise CreateError(str(err))

    def step_vmid(self):
        if self.candidate_id:
            if self.ws['facts'].get('from_pool') and self.ws['facts'].get('pool_member'):
                # Took a pool member's container, killed before the member's record was closed: closed now.
                self._close_member(self.journal.get_workspace(self.ws['facts']['pool_member']), self.candidate_id)
            self.done('vmid')
            return StepResult(False, '%s: %s (kept)' % (self.labels['vmid'], self.candidate_id))
        taken = self._from_pool()
        if taken is not None:
            return taken
        vmid = self._next_candidate()
        self.save('candidate_vmid', kind='recorded', **self.resource_fields(candidate_id=vmid))
        self.done('vmid')
        return StepResult(True, '%s: %s' % (self.labels['vmid'], vmid), vmid=vmid)

    # -------------------------------------------------------------- 3. clone

    def _inspect_candidate(self, vmid):
        """'ours' (marker verifies), 'taken' (exists, not ours), or 'absent'; and the resource."""
        resource = self.provider.find(vmid, self.request['node'])
        if resource is None:
            return 'absent', None
        verdict = self.provider.verify(resource, self.name, ownership.record_nonce(self.ws))
        return ('ours' if verdict == ownership.VERIFIED else 'taken'), resource

    def _allocation(self, candidate):
        req = self.request
        options = None
        if req.get('launch') is not None:
            terms = self.ws.get('lease') or {}
            # The lease id is the life's client token; created_by the controller host that recorded the request;
            # ends_at the lease's cap (created_at + ttl), which no heartbeat moves: a provider whose cloud deletes a
            # machine by itself at a time (Compute Engine) sets it from this.
            lease = {'id': terms.get('id') or candidate,
                     'created_by': terms.get('created_by') or req.get('created_by')}
            # A warm pool member's machine has none: the workspace that takes it has a lease of its own, which a
            # deletion time set now (and changed on Compute Engine only on a stopped instance) would cut short; the
            # expiry sweep deletes a member nobody took.
            if (terms.get('created_at') is not None and terms.get('ttl') is not None
                    and not req.get('pool_member')):
                lease['ends_at'] = float(terms['created_at']) + float(terms['ttl'])
            options = dict(req['launch'], lease=lease)
        return Allocation(candidate, self.name, self.source_id, req['node'], 'agent-%s' % self.name, req['pool'],
                          full=req['full_clone'], storage=req['storage'], labels=self._labels('provisioning'),
                          nonce=ownership.record_nonce(self.ws), options=options,
                          snapshot=(req.get('fork') or {}).get('snapshot'))

    def _labels(self, state):
        """The lease labels the resource carries in ``state`` (None for a workspace made before leases)."""
        terms = self.ws.get('lease')
        return leasing.lease_labels(terms, state) if terms else None

    def _adopt(self, vmid, reason):
        # The task that made it, found after its answer was lost, when one task fits.
        upid = self.provider.allocation_task(self._allocation(vmid), self.ws['facts'].get('clone_dispatched_at') or 0)
        tasks = self.with_task('clone', upid) if upid else {}
        self.save('adopted', detail={'vmid': vmid, 'reason': reason, 'upid': upid},
                  **dict(tasks, **self.resource_fields(candidate_id=vmid)))
        self.done('clone')
        return StepResult(True, 'clone: adopted %s (%s)' % (self.provider.label(vmid), reason), vmid=vmid)

    def step_clone(self):
        req = self.request
        candidate = self.candidate_id
        taken = set()
        facts = self.ws['facts']
        if facts.get('clone_dispatched') == candidate:
            # An earlier run sent this clone and may have died before hearing the answer: look first.
            state = self._inspect_candidate(candidate)[0]
            if state == 'ours':
                return self._adopt(candidate, 'found after an earlier run lost track of its clone')
            if state == 'taken':
                taken.add(candidate)
                candidate = self._new_candidate(candidate, taken, 'taken by another client')
        lock_deadline = time.monotonic() + self.params['lock_timeout']
        # Short enough that a template lock released by one clone is soon taken by the next one.
        backoff = waiter.Backoff(start=0.3, maximum=2.0, factor=1.5, jitter=0.3)
        # Parallel runs that all asked for the next free id at once: spread them out, so that each round of the
        # race is not run again by the same clients at the same instant.
        spread = waiter.Backoff(start=0.05, maximum=1.0, factor=1.5, jitter=0.5)
        attempts = 0
        while True:
            attempts += 1
            if attempts > CLONE_ATTEMPTS:
                lost = ', '.join(str(t) for t in sorted(taken))
                raise CreateError('Gave up after %d clone attempts: other clients took every %s offered to us '
                                  'meanwhile (%s). Run the create again when fewer allocations are under way, or '
                                  'with fewer forks.' % (CLONE_ATTEMPTS, self.provider.id_noun, lost))
            # The marker's nonce is recorded before the first clone that writes it, and kept for this life of the
            # workspace: an old marker (a restored backup, a copy) at a reused VMID does not carry it.
            nonce = ownership.record_nonce(self.ws) or ownership.new_nonce()
            self.save('clone', kind='dispatched', detail={'vmid': candidate, 'template': self.source_id,
                                                          'full': 1 if req['full_clone'] else 0},
                      facts=dict(self.ws['facts'], clone_dispatched=candidate, clone_dispatched_at=time.time(),
                                 marker_nonce=nonce))
            try:
                upid = self.provider.allocate(self._allocation(candidate))
            except Refused as err:
                # An answer that refused the allocation: it made nothing, so the dispatch is no longer one whose
                # outcome is unknown (a destroy need not wait out the provider's absence window for it).
                self.save('clone', kind='observed', detail={'vmid': candidate, 'refused': str(err)},
                          facts=dict(self.ws['facts'], clone_dispatched=None, clone_refused=candidate))
                raise
            except Conflict:
                state = self._inspect_candidate(candidate)[0]
                if state == 'ours':
                    return self._adopt(candidate, 'our clone was already there')
                taken.add(candidate)
                self.sleep(spread.next_delay())
                candidate = self._new_candidate(candidate, taken, 'already exists')
                continue
            except UnknownOutcome as err:
                state = self._inspect_candidate(candidate)[0]
                if state == 'ours':
                    return self._adopt(candidate, 'the clone answer was lost (%s)' % err.transport)
                if state == 'taken':
                    taken.add(candidate)
                    self.sleep(spread.next_delay())
                    candidate = self._new_candidate(candidate, taken, 'taken while our answer was lost')
                continue
            except Locked as err:
                # Parallel linked clones of one template contend on its lock: back off and try again.
                if time.monotonic() > lock_deadline:
                    raise CreateError('Template %s stayed locked for %d s (%s). Retry later.'
                                      % (self.source_id, self.params['lock_timeout'], err))
                attempts -= 1
                self.save('clone', kind='observed', detail={'vmid': candidate, 'locked': str(err.provider_message)})
                self.sleep(backoff.next_delay())
                continue
            self.save('clone', kind='observed', detail={'vmid': candidate, 'upid': upid},
                      **self.with_task('clone', upid))
            self.done('clone')
            return StepResult(True, 'clone: %s from template %s' % (self.provider.label(candidate), self.source_id),
                              vmid=candidate, upid=upid)

    def _new_candidate(self, old, taken, why):
        vmid = self._next_candidate(avoid=taken)
        self.save('candidate_vmid', kind='recorded', detail={'old': old, 'new': vmid, 'why': why},
                  **self.resource_fields(candidate_id=vmid))
        return vmid

    # --------------------------------------------------------- 4. wait clone

    def _forget_candidate(self):
        """The record's fields that drop the candidate, so that the rerun takes a new one and allocates again."""
        fields = dict(self.without_tasks('clone'), **self.resource_fields(candidate_id=None))
        fields['progress'] = {k: v for k, v in self.ws['progress'].items() if k not in ('vmid', 'clone')}
        spent = list((self.ws.get('facts') or {}).get('spent_candidates') or [])
        fields['facts'] = dict(self.ws['facts'], spent_candidates=spent + [self.candidate_id])
        return fields

    def step_wait_clone(self):
        vmid = self.candidate_id
        upid = self.tasks.get('clone')
        try:
            if upid:
                task = self.provider.wait(upid, timeout=self.params['task_timeout'])
                warnings = task.warning_lines
            else:
                self._wait_unlocked(vmid)
                warnings = []
        except TaskFailed as err:
            self._clean_failed_clone(vmid)
            raise self.fail('wait_clone', err, **self._forget_candidate())
        # The resource's id: the candidate, or (where the id comes from the answer) the one the handle names.
        resource_id = self.provider.resource_of(vmid, upid, self.request['node'])
        self.save('clone_confirmed', detail={'vmid': vmid, 'resource_id': resource_id, 'warnings': warnings},
                  **self.resource_fields(resource_id=resource_id, location=self.request['node']))
        self.done('wait_clone')
        return StepResult(True, 'wait clone task: %s cloned' % self.provider.label(vmid), vmid=vmid, warnings=warnings)

    def _wait_unlocked(self, vmid):
        def probe(remaining):
            resource = self.provider.find(vmid, self.request['node'])
            if resource is None:
                return waiter.failed(None)
            return waiter.pending(resource) if resource.lock else waiter.done(resource)
        label = self.provider.label(vmid)
        result = waiter.wait_for(probe, self.params['task_timeout'], what='%s to be unlocked after its clone' % label)
        if result.outcome == waiter.FAILED:
            raise self.fail('wait_clone', CreateError('%s vanished while its clone ran: the clone failed. Rerun to '
                                                      'clone again.' % label), **self._forget_candidate())
        if not result.ok:
            raise CreateError('%s is still locked after %d s. %s'
                              % (label, self.params['task_timeout'], self.provider.unlock_hint(vmid)))

    def _clean_failed_clone(self, vmid):
        """Delete what a failed clone left, only when our marker proves it is ours."""
        state, resource = self._inspect_candidate(vmid)
        if state != 'ours':
            return
        try:
            self.provider.wait(self.provider.delete(resource), timeout=self.params['task_timeout'])
            self.save('partial_clone_removed', detail={'vmid': vmid})
        except ProviderError as err:
            self.journal.record_cleanup_debt(self.name, self.provider.resource_key(vmid, self.request['node']), err,
                                             retry_in=60, claim=self.claim)

    # ----------------------------------------------------------- 5. configure

    def _settings(self, address):
        """The settings the request asks for, with the workspace's static ``address`` (for the static mode)."""
        req = self.request
        if req['address_mode'] == 'static':
            ip, gateway = '%s/%d' % (address, req['address_prefix']), req['gateway']
        else:
            ip, gateway = 'dhcp', None
        return Settings(req['cores'], req['memory'], req['bridge'], ip, gateway, ['ephemera'] + list(req['tags'] or []))

    def _static_address(self):
        """The workspace's static address: its lease (made now if it has none; in check mode only looked up)."""
        req = self.request
        candidates = address_candidates(req['address_range'])
        if not self.check_mode:
            return self.journal.lease_address(req['address_range'], self.name, candidates, claim=self.claim)
        leases = self.journal.address_leases()
        mine = [lease['address'] for lease in leases if lease['workspace'] == self.name]
        taken = set(lease['address'] for lease in leases)
        return (mine or [a for a in candidates if a not in taken] or [None])[0]

    def _plan_configure(self):
        """(resource, {setting: (before, after)}, static address or None): what the configure step changes."""
        resource = self.provider.find(self.resource_id, self.location)
        if resource is None or self.provider.verify(resource, self.name,
                                                    ownership.record_nonce(self.ws)) != ownership.VERIFIED:
            raise CreateError('%s does not carry our marker for %s; refusing to touch it. Reconcile reports it; '
                              'destroy this workspace (its record) and create it again.'
                              % (self.provider.label(self.resource_id), self.name))
        address = self._static_address() if self.request['address_mode'] == 'static' else None
        return resource, self.provider.plan_settings(resource, self._settings(address)), address

    @staticmethod
    def _diff(changes):
        return {'before': {k: before for k, (before, after) in changes.items()},
                'after': {k: after for k, (before, after) in changes.items()}}

    def check_configure(self):
        """Check mode with a diff asked for: what the configure step would change, read from the container."""
        changes = self._plan_configure()[1]
        return StepResult(bool(changes), 'configure: %s' % ('would change %s' % ', '.join(sorted(changes))
                                                            if changes else 'nothing to change'),
                          diff=self._diff(changes))

    def step_configure(self):
        resource, changes, address = self._plan_configure()
        if changes:
            self.save('configure', kind='dispatched', detail={k: after for k, (before, after) in changes.items()})
            self.provider.apply_settings(resource, changes)
        self.done('configure', address=address if address is not None else self.ws['address'])
        return StepResult(bool(changes), 'configure: %s' % (', '.join(sorted(changes)) or 'nothing to change'),
                          diff=self._diff(changes) if self.diff else None)

    # --------------------------------------------------------------- 6. start

    def step_start(self):
        vmid = self.resource_id
        resource = self.provider.ref(vmid, self.location)
        label = self.provider.label(vmid)
        if self.provider.power(resource, absent_ok=False).running:
            self.done('start')
            return StepResult(False, 'start: %s is running' % label)
        upid = self._start_in_flight()
        try:
            upid = self._start(resource, upid)
        except (ProviderError, CreateError) as first:
            # Cold-start fallback: a start that fails is often a guest left half up by an earlier start. Stop it
            # gracefully, then by force, and start once more; if that fails too, both errors are told.
            self.save('start_failed', detail={'vmid': vmid, 'error': str(first)})
            self._stop(resource, 30, 'start failed')
            try:
                upid = self._start(resource, None)
            except (ProviderError, CreateError) as second:
                both = CreateError('%s did not start, twice. First start: %s. Start after a stop: %s. %s, then rerun.'
                                   % (label, first, second, self.provider.start_advice(vmid)),
                                   log_tail=getattr(second, 'log_tail', None))
                # The second start's task, for diagnosis (its log is kept with the failure).
                both.task_id = getattr(second, 'task_id', None)
                raise both
            self.done('start', facts=dict(self.ws['facts'], cold_start_retry=str(first)))
            return StepResult(True, 'start: %s started on the second try (the first failed: %s)' % (label, first),
                              upid=upid)
        self.done('start')
        return StepResult(True, 'start: %s started' % label, upid=upid)

    def _start(self, resource, upid):
        """Start the container (or wait for the start ``upid`` in flight); its task handle once it runs."""
        if upid is None:
            self.save('start', kind='dispatched', detail={'vmid': resource.id})
            try:
                upid = self.provider.start(resource)
            except UnknownOutcome:
                upid = None
            if upid:
                self.save('start', detail={'upid': upid}, **self.with_task('start', upid))
        if upid:
            self.provider.wait(upid, timeout=self.params['task_timeout'])
        else:
            self._wait_running(resource)
        return upid

    def _stop(self, resource, shutdown_timeout, why):
        """A graceful shutdown (``shutdown_timeout`` seconds), then a forced stop if it still runs; each dispatch and
        what it answered is recorded with ``why``. The caller checks the outcome."""
        for action, call in (('shutdown', lambda: self.provider.shutdown(resource, shutdown_timeout)),
                             ('stop', lambda: self.provider.stop(resource))):
            if not self.provider.power(resource).running:
                return
            self.event('dispatched', action, {'vmid': resource.id, 'why': why})
            try:
                handle = call()
                if handle:
                    timeout = shutdown_timeout + 30 if action == 'shutdown' else self.params['task_timeout']
                    self.provider.wait(handle, timeout=timeout)
            except ProviderError as err:
                self.event('observed', action + '_failed', {'vmid': resource.id, 'error': str(err)})

    def _start_in_flight(self):
        """The handle of a start an earlier run dispatched that may still bring the container up, else None.

        A start task that ended (failed, or succeeded for a container that has stopped since) cannot: the step
        starts the container again.
        """
        upid = self.tasks.get('start')
        if not upid:
            return None
        try:
            task = self.provider.task_status(upid)
        except NotFound:
            return None
        return upid if task.status == 'running' else None

    def _wait_running(self, resource):
        def probe(remaining):
            return waiter.done() if self.provider.power(resource, absent_ok=False).running else waiter.pending()
        label = self.provider.label(resource.id)
        if not waiter.wait_for(probe, self.params['task_timeout'], what='%s to be running' % label).ok:
            raise CreateError('%s is not running %d s after it was started. Check its start task and console in the '
                              'provider (a disk, memory or boot problem), then rerun (task_timeout gives a slow start '
                              'more time).' % (label, self.params['task_timeout']))

    # ------------------------------------------------------------- 7. address

    def step_address(self):
        resource = self.provider.ref(self.resource_id, self.location)
        expected = self.ws['address'] if self.request['address_mode'] == 'static' else None

        def probe(remaining):
            try:
                addresses = self.provider.addresses(resource)
            except ProviderError:
                return waiter.pending()
            address = usable_address(addresses, expected)
            return waiter.done(address) if address else waiter.pending()

        result = waiter.wait_for(probe, self.params['address_timeout'], waiter.Backoff(start=0.2, maximum=3.0),
                                 what='%s to report %s' % (self.provider.label(resource.id),
                                                           'its static address %s' % expected if expected
                                                           else self.provider.address_source))
        if not result.ok:
            what = 'its static address %s' % expected if expected else self.provider.address_source
            advice = self.provider.address_advice
            if expected:
                advice += (', and that %s is in the static range of that network and no other machine uses it'
                           % expected)
            message = ('%s did not report %s within %d s (%d looks). %s, then rerun (address_timeout gives a slow '
                       'network more time).' % (self.provider.label(resource.id), what, self.params['address_timeout'],
                                                result.attempts, advice))
            raise CreateError(message)
        facts, said, warned = self._published_host_keys(resource)
        self.done('address', address=result.value, **({'facts': facts} if facts else {}))
        return StepResult(True, 'wait address: %s%s' % (result.value, said), address=result.value,
                          **({'warnings': warned} if warned else {}))

    def _published_host_keys(self, resource):
        """(facts with ``host_keys_published``, or None; a sentence; warnings): the SSH host keys the machine published
        through the provider's API (docs/internals/security.md, host keys), waited for up to ``ssh_timeout``, so that the first
        connection is pinned to them rather than trusting whatever key answers at the address."""
        source = self.provider.host_key_source
        facts = self.ws['facts']
        if source is None or facts.get('host_key'):
            return None, '', []
        if facts.get('host_keys_published'):
            return None, '; host keys from %s' % source, []

        def probe(remaining):
            try:
                keys = self.provider.published_host_keys(resource)
            except ProviderError:
                return waiter.pending()
            return waiter.done(keys) if keys else waiter.pending()
        timeout = self.params['ssh_timeout']
        result = waiter.wait_for(probe, timeout, waiter.Backoff(start=0.5, maximum=5.0),
                                 what='the host keys %s publishes in %s' % (self.provider.label(resource.id), source))
        if result.ok:
            self.save('host_keys_published', kind='observed', detail={'source': source, 'host_keys': result.value})
            return dict(facts, host_keys_published=result.value), '; host keys from %s' % source, []
        warning = ('%s published no SSH host key in %s within %d s: the first SSH connection trusts the key it is '
                   'shown. %s' % (self.provider.label(resource.id), source, timeout, self.provider.host_key_advice))
        self.save('host_keys_published', kind='observed',
                  detail={'source': source, 'host_keys': [], 'reason': warning})
        return None, '; no host keys published', [warning]

    # ----------------------------------------------------------------- 8. ssh

    def step_ssh(self):
        published = not self.ws['facts'].get('host_key') and self.ws['facts'].get('host_keys_published')
        try:
            with wait_for_guest(self._guest, self.params['ssh_timeout']) as connected:
                host_key, attempts = connected.host_key, connected.attempts
        except SshHostKeyMismatch as err:
            if not published:
                raise
            self.save('ssh', kind='observed', detail={'refused': str(err)})
            raise CreateError('%s answers at %s with a host key that is not one of those it published in %s (%s); '
                              'nothing was sent to it. Something else may answer at its address: look at %s and '
                              'the network path, then destroy this workspace and create it again.'
                              % (self.naming.label(self.resource_id), self.ws['address'],
                                 self.naming.host_key_source, err, self.naming.host_key_source))
        self.done('ssh', facts=dict(self.ws['facts'], host_key=host_key))
        return StepResult(True, 'ssh: %s answers (attempt %d)' % (self.ws['address'], attempts), attempts=attempts)

    # The connection the guest steps of one warm_rest share (one_guest_connection), once one of them opened it.
    _shared_guest = None
    _sharing = False

    def _with_guest(self, action):
        if self._sharing:
            if self._shared_guest is None:
                self._shared_guest = self._guest().connect()
            return action(self._shared_guest)
        with self._guest().connect() as connected:
            return action(connected)

    @contextlib.contextmanager
    def one_guest_connection(self):
        """The steps run in this block use one SSH connection to the guest, opened by the first that needs it and
        closed at the end (a step that fails ends the block). Only for the steps after a warm pool member was taken:
        none of them changes the host key the connection is pinned to (a cold bootstrap renews it)."""
        self._sharing = True
        try:
            yield
        finally:
            self._sharing = False
            shared, self._shared_guest = self._shared_guest, None
            if shared is not None:
                shared.close()

    def check_warm_rest(self):
        """Refuse to run WARM_REST as one task for a workspace whose candidate step took no warm pool member (the
        steps a member did are not all done): its steps run one by one. Nothing is written."""
        if self.ws is None:
            return
        missing = [step for step in POOLED_STEPS if step not in self.ws['progress']]
        if missing:
            raise CreateError('Workspace %r took no warm pool member (%s not done): the step warm_rest runs only what '
                              'a create that took one has left. Run the steps one by one (the role does, when its '
                              'candidate step answers no from_pool).' % (self.name, ', '.join(missing)))

    # ------------------------------------------------------------ 9. bootstrap

    def step_bootstrap(self):
        req = self.request
        credentials = self.params.get('agent_credentials')
        if self.ws['facts'].get('from_pool'):
            # The member was bootstrapped and given host keys of its own when it was made: only the request's
            # credentials are new.
            self._with_guest(lambda g: guest_ops.write_credentials(g, self._layout(), credentials))
            self.done('bootstrap')
            return StepResult(True, 'bootstrap: credentials written (the agent user and host keys came with pool '
                              'member %s)' % self.ws['facts'].get('pool_member'))
        with self._guest().connect() as connected:
            keys = self._renew_host_keys(connected)
        self._with_guest(lambda g: guest_ops.bootstrap(g, self._layout(), self.ssh_user, credentials))
        # What a provider puts into its machines besides, from the launch settings the request recorded (a guest step
        # has no provider connection): refused, or a sentence and warnings.
        said, warned = self.naming.guest_setup(self._with_guest, self._layout(), self.ws['address'],
                                               req.get('launch') or {})
        self.done('bootstrap')
        return StepResult(True, 'bootstrap: agent user %s, credentials written; %s%s'
                          % (req['agent_user'], keys, '; ' + said if said else ''), **({'warnings': warned} if warned else {}))

    def _renew_host_keys(self, guest):
        """Give the clone host keys of its own, made in it now, and pin the new key (docs/internals/security.md, host keys).

        A clone carries its template's host keys; every clone of a template would present the same key. Over the
        connection the first SSH pinned, new keys are made next to the served ones; the key sshd will present is
        recorded (``host_key_next``) before the keys are put in place and sshd reloads; a connection that presents
        it confirms it, and it becomes the pinned ``host_key``. A rerun finds the stamp and finishes the same way.
        """
        layout = self._layout()
        stamp = '%s %s %s' % (self.name, self.resource_id, int((self.ws['progress'] or {}).get('request') or 0))
        verdict, key = guest_ops.host_keys_look(guest, layout, guest.host_key, stamp)
        if verdict == 'foreign' or key is None:
            self.save('host_keys', kind='observed', detail={'renewed': False, 'reason': 'sshd does not serve the keys '
                                                            'in /etc/ssh'})
            return 'host keys: the ones sshd serves are not in /etc/ssh, left as they are'
        if key == ' '.join(guest.host_key.split()[:2]):
            if self.ws['facts'].get('host_key') != key or self.ws['facts'].get('host_key_next'):
                facts = {k: v for k, v in self.ws['facts'].items() if k != 'host_key_next'}
                self.save('host_keys', kind='observed', detail={'renewed': True, 'host_key': key},
                          facts=dict(facts, host_key=key))
            return 'host keys: made for this workspace'
        self.save('host_keys', kind='dispatched', detail={'host_key_next': key},
                  facts=dict(self.ws['facts'], host_key_next=key))
        guest_ops.host_keys_install(guest, layout, stamp, install=(verdict == 'new'))
        with wait_for_guest(lambda: Guest(guest.host, port=guest.port, user=guest.user, key_file=guest.key_file,
                                          host_key=key), self.params['ssh_timeout']):
            pass
        facts = {k: v for k, v in self.ws['facts'].items() if k != 'host_key_next'}
        self.save('host_keys', kind='observed', detail={'renewed': True, 'host_key': key},
                  facts=dict(facts, host_key=key))
        return 'host keys: new ones made in the guest, the new key pinned'

    # ------------------------------------------------------------ 10. checkout

    def step_checkout(self):
        req = self.request
        debt = '%s@%s' % (ASKPASS_DEBT, self.naming.resource_key(self.resource_id))
        try:
            head, branch = self._with_guest(lambda g: guest_ops.checkout(
                g, self._layout(), self.ssh_user, req['repo'], req['ref'], git_token=self.params.get('git_token'),
                git_username=self.params.get('git_username') or 'git',
                # A member of a pool of this repository has it cloned already: fetched again, not cloned.
                fetched=bool(self.ws['facts'].get('from_pool') and self.ws['facts'].get('pool_fetched'))))
        except guest_ops.GuestError as err:
            if err.details.get('helper_left'):
                # Visible until a later checkout removes it (or the container goes).
                self.journal.record_cleanup_debt(self.name, debt, err, retry_in=60, claim=self.claim)
            raise
        self.journal.clear_cleanup_debt(self.name, debt, claim=self.claim)
        facts = dict(self.ws['facts'], head=head)
        if req['ref'] is None:
            # Asked for the default branch and only the guest could ask: the branch its clone found.
            facts['default_branch'] = branch
        self.done('checkout', facts=facts)
        at = req['ref'] if req['ref'] is not None else '%s (the default branch)' % (branch or 'HEAD')
        return StepResult(True, 'checkout: %s at %s (%s)' % (req['repo'], at, head[:12]), head=head)

    # -------------------------------------------------------------- 11. runner

    def step_runner(self):
        started = self._with_guest(lambda g: guest_ops.install_runner(
            g, self._layout(), self.ssh_user, self._runner_agents(), timeout=self.params['runner_timeout']))
        self.done('runner')
        return StepResult(True, 'runner: %s' % ('started' if started else 'already answering'))

    # --------------------------------------------------------------- 12. brief

    def _runner_agents(self):
        """The runner configuration's agents: the workspace's agent with its endpoint and model."""
        req = self.request
        try:
            return agent_defs.runner_agents(req['agent'], req.get('agents'), req.get('agent_base_urls'),
                                            req.get('agent_models'))
        except agent_defs.AgentError as err:
            raise CreateError(str(err))

    def step_brief(self):
        req = self.request
        # A purpose amended after a brief (the request step recorded ``rebrief``) replaces the agent's work.
        replace = bool(self.ws['facts'].get('rebrief'))
        layout = self._layout()
        credentials = self.params.get('agent_credentials')
        timeout = self.params.get('brief_timeout')
        timeout = 120 if timeout is None else timeout

        def brief(g):
            if credentials:
                # A retry of the brief with corrected credentials (a key the model endpoint refused) takes them now.
                guest_ops.write_credentials(g, layout, credentials)
            answer = guest_ops.brief(g, layout, self.ssh_user, req['purpose'], req['agent'], self._runner_agents(),
                                     replace=replace)
            if answer.get('already'):
                return answer, False
            # Briefed and working: the model answered the agent's first request, or the agent stopped trying.
            return agent_flow.wait_for_answer(lambda: guest_ops.runner_call(g, layout, self.ssh_user, {'op': 'ping'},
                                                                            point=False), timeout, sleep=self.sleep,
                                              first=answer)

        try:
            answer, slow = self._with_guest(brief)
        except guest_ops.GuestError as err:
            error = (err.details.get('agent') or {}).get('error') or {}
            if error.get('kind'):
                raise CreateError('%s (%s); %s.' % (
                    str(err).rstrip('.'), error['kind'], agent_flow.advice(error['kind'], req['agent'])), step='brief')
            raise
        facts = {k: v for k, v in self.ws['facts'].items() if k != 'rebrief'}
        seen = agent_flow.observation(answer)
        if seen is not None:
            facts['agent'] = seen
        activity = answer.get('activity') if answer.get('activity') in agent_flow.ACTIVITIES else 'unknown'
        try:
            agent_flow.check_briefed(answer, req['agent'])
        except agent_flow.AgentError as err:
            raise self.fail('brief', CreateError(str(err), step='brief'), facts=facts, activity=activity)
        self.done('brief', activity=activity, facts=facts)
        note = ''
        if slow:
            note = '; the model has not answered within %d s: the agent waits for it' % timeout
        elif seen and seen.get('waiting'):
            note = '; it waits for %s' % '; '.join(seen['waiting'])
        return StepResult(not answer.get('already'), 'brief: %s briefed (%s)%s' % (req['agent'], activity, note),
                          activity=activity)

    # --------------------------------------------------------------- 13. ready

    def step_ready(self):
        req = self.request
        answer = self._with_guest(lambda g: guest_ops.runner_call(g, self._layout(), self.ssh_user, {'op': 'ping'}))
        if not answer.get('alive'):
            raise self.fail('ready', CreateError('The agent runner stopped answering: %s' % answer.get('error')),
                            progress={k: v for k, v in self.ws['progress'].items() if k not in ('runner', 'brief')})
        # The labels first: a run killed between them and the record repeats this step, and writes them again.
        note = lease_flow.write_labels(self.journal, self.provider, self.ws, state='ready', claim=self.claim)
        fields = {}
        seen = agent_flow.observation(answer)
        if seen is not None:
            fields['facts'] = dict(self.ws['facts'], agent=seen)
        activity = answer.get('activity') if answer.get('activity') in agent_flow.ACTIVITIES else 'unknown'
        self.save('ready', status='ready', activity=activity, failure=None,
                  progress=dict(self.ws['progress'], ready=time.time()), **fields)
        if self.params.get('idempotency_key'):
            claim = self.journal.begin_idempotent(self.params['idempotency_key'], 'create',
                                                  self._idempotency_request(req), owner=Owner.of_run(),
                                                  claim=self.claim)
            if not claim.replayed:
                self.journal.finish_idempotent(claim, self._result())
        return StepResult(True, 'ready: %s at %s%s' % (self.name, self.ws['address'], '; %s' % note if note else ''))
