# -*- coding: utf-8 -*-
# Copyright: ephemera.workspaces contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A create's request: what it may ask for (the checks of each option), what it records, what a later request for
the same workspace may change, and step 1, which records it. CreateFlow (flows/create.py) mixes RequestStep in."""

import ipaddress
import os
import re
import time
from urllib.parse import urlsplit

from ansible_collections.ephemera.workspaces.plugins.module_utils.core import lease as leasing
from ansible_collections.ephemera.workspaces.plugins.module_utils.core import pools as pooling
from ansible_collections.ephemera.workspaces.plugins.module_utils.guest import agents as agent_defs
from ansible_collections.ephemera.workspaces.plugins.module_utils.core.errors import EphemeraError
from ansible_collections.ephemera.workspaces.plugins.module_utils.core.queue import default_requester
from ansible_collections.ephemera.workspaces.plugins.module_utils.core.run_identity import Owner
from ansible_collections.ephemera.workspaces.plugins.module_utils.flows.base import (
    StepResult,
    unadopted_fork,
)
from ansible_collections.ephemera.workspaces.plugins.module_utils.providers.base import (
    InvalidRequest,
    ProviderError,
    first_address,
)
from ansible_collections.ephemera.workspaces.plugins.module_utils.providers import registry
from ansible_collections.ephemera.workspaces.plugins.module_utils.flows import preflight
from ansible_collections.ephemera.workspaces.plugins.module_utils.guest.ssh import (
    SshError,
    check_private_key,
)

# What a request records of the module's options (besides the lease, the requester and the secrets' names).
REQUEST_KEYS = ('template', 'node', 'pool', 'full_clone', 'storage', 'repo', 'ref', 'purpose', 'agent', 'agents',
                'cores', 'memory', 'bridge', 'address_mode', 'address_range', 'address_prefix', 'gateway',
                'checkout_path', 'guest_root', 'ssh_user', 'ssh_port', 'agent_user', 'agent_user_is_ssh_user', 'tags',
                'agent_base_urls', 'agent_models')
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
REPO_SCHEMES = ('https', 'http', 'ssh', 'git', 'file')
# git's own short form of an SSH URL: [user@]host:path
SCP_LIKE = re.compile(r'^(?:[A-Za-z0-9._-]+@)?[A-Za-z0-9.-]+:(?!//)\S+$')
# What git check-ref-format refuses, and what would read as an option.
BAD_REF = re.compile(r'^-|\.\.|@\{|//|/\.|^\.|[\x00-\x20\x7f~^:?*\[\\]|\.lock$|\.$|/$|^@$')
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


class RequestStep:
    """Step 1 of CreateFlow: check the request, record it (or replay, correct or amend an earlier one)."""

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
