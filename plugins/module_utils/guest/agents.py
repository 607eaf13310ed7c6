# -*- coding: utf-8 -*-
# Copyright: ephemera.workspaces contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The coding agents the collection knows, and what the agent runner is told to run for each.

A workspace's agent is one of its ``agents``: a name with, for the runner, the command line of a first brief
(``command``, ``{purpose}`` standing for the brief), the command line that continues the agent's session with a
follow-up (``continue``, ``{session}`` standing for the session id the agent's events named), the form of its event
stream (``events``), environment variables that are not secrets (``environment``), configuration files under the
agent's home (``files``) and the tool a template must have verified for it (``tool``). The built-in agents are
``claude-code``, ``codex`` and ``opencode``; an entry of the ``agents`` option replaces the built-in of that name,
and a plain list is a command line with no event stream (activity then follows the process only).

A model endpoint of the team's own (an LLM gateway) and a model are set per agent (``agent_base_urls``,
``agent_models``): for claude-code through its environment, for codex and opencode through a provider in their
configuration file that reads the key from the environment. Keys themselves are ``agent_credentials``: the
agent's environment only.
"""

import json
import posixpath
import time

try:
    from urllib.parse import urlsplit
except ImportError:  # pragma: no cover (Python 2 is not supported; the import keeps sanity's compile test quiet)
    from urlparse import urlsplit  # type: ignore

from ansible_collections.ephemera.workspaces.plugins.module_utils.core.errors import EphemeraError

STREAM_FORMATS = ('claude', 'codex', 'opencode', 'lines')
SPEC_KEYS = ('command', 'continue', 'continue_latest', 'events', 'environment', 'files', 'tool')

CLAUDE_FLAGS = ['--output-format', 'stream-json', '--verbose', '--permission-mode', 'acceptEdits']
# The workspace is codex's sandbox: its own (bubblewrap) needs user namespaces that a container does not give
# (in an LXC guest every command failed "bwrap: No permissions to create a new namespace"). codex exec never asks
# for approvals either way.
CODEX_FLAGS = ['--json', '--skip-git-repo-check', '--sandbox', 'danger-full-access']
OPENCODE_FLAGS = ['--format', 'json']

BUILTIN = {
    'claude-code': {
        'tool': 'claude',
        'events': 'claude',
        'command': ['claude', '-p', '{purpose}'] + CLAUDE_FLAGS,
        'continue': ['claude', '-p', '{purpose}', '--resume', '{session}'] + CLAUDE_FLAGS,
        'continue_latest': ['claude', '-p', '{purpose}', '--continue'] + CLAUDE_FLAGS,
        # No update checks, telemetry or error reports: the agent talks to its model endpoint only.
        'environment': {'CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC': '1', 'DISABLE_AUTOUPDATER': '1'},
        'key_variables': ['ANTHROPIC_API_KEY', 'ANTHROPIC_AUTH_TOKEN'],
    },
    'codex': {
        'tool': 'codex',
        'events': 'codex',
        'command': ['codex', 'exec'] + CODEX_FLAGS + ['{purpose}'],
        'continue': ['codex', 'exec'] + CODEX_FLAGS + ['resume', '{session}', '{purpose}'],
        'continue_latest': ['codex', 'exec'] + CODEX_FLAGS + ['resume', '--last', '{purpose}'],
        'key_variables': ['OPENAI_API_KEY'],
    },
    'opencode': {
        'tool': 'opencode',
        'events': 'opencode',
        'command': ['opencode', 'run'] + OPENCODE_FLAGS + ['{purpose}'],
        'continue': ['opencode', 'run'] + OPENCODE_FLAGS + ['--session', '{session}', '{purpose}'],
        'continue_latest': ['opencode', 'run'] + OPENCODE_FLAGS + ['--continue', '{purpose}'],
        # No self-update, no download of the model catalogue or of language servers at each start.
        'environment': {'OPENCODE_DISABLE_AUTOUPDATE': '1', 'OPENCODE_DISABLE_MODELS_FETCH': '1',
                        'OPENCODE_DISABLE_LSP_DOWNLOAD': '1'},
        'key_variables': ['OPENAI_API_KEY', 'ANTHROPIC_API_KEY'],
    },
}
DEFAULT_AGENT = 'claude-code'
# The model codex and opencode ask for when none is given: one codex has metadata for (with a name it does not know it
# drops its apply_patch tool; with its own default through a provider of ours, 0.171 offered the model no tools).
DEFAULT_MODELS = {'codex': 'gpt-5.5', 'opencode': 'gpt-5.5'}
OPENAI_BASE_URL = 'https://api.openai.com/v1'
# The name of the provider codex and opencode are configured with when a base URL is given.
PROVIDER = 'ephemera'


class AgentError(EphemeraError):
    """An agent's definition, endpoint or model cannot be what it says."""


def tool_of(name, spec):
    """The tool a template's build must have verified for the agent ``name``: the built-in agents' CLIs, or the
    ``tool`` an entry of the ``agents`` option names; None when the entry names none (nothing is checked)."""
    if isinstance(spec, dict):
        return spec.get('tool')
    return None


def catalogue(agents=None):
    """The built-in agents with the ``agents`` option's entries over them (an entry replaces one of its name)."""
    out = {name: dict(spec) for name, spec in BUILTIN.items()}
    for name, spec in (agents or {}).items():
        out[name] = spec
    return out


def check(agents):
    """Refuse an ``agents`` option whose entries cannot be started; returns nothing."""
    for name, spec in (agents or {}).items():
        if isinstance(spec, list):
            command = spec
        elif isinstance(spec, dict):
            unknown = sorted(set(spec) - set(SPEC_KEYS) - {'key_variables'})
            if unknown:
                raise AgentError('Agent %r: unknown key(s) %s; an agent is a list (its command line) or a dict of %s.'
                                 % (name, ', '.join(unknown), ', '.join(SPEC_KEYS)))
            command = spec.get('command')
            if spec.get('events', 'lines') not in STREAM_FORMATS:
                raise AgentError('Agent %r: events %r is not one of %s.' % (name, spec.get('events'),
                                                                            ', '.join(STREAM_FORMATS)))
            for key in ('continue', 'continue_latest'):
                if spec.get(key) is not None and not _argv(spec[key]):
                    raise AgentError('Agent %r: %s must be a command line (a list of strings).' % (name, key))
            for key in ('environment', 'files'):
                if spec.get(key) is not None and not (isinstance(spec[key], dict) and all(
                        isinstance(k, str) and isinstance(v, str) for k, v in spec[key].items())):
                    raise AgentError('Agent %r: %s must map names to strings.' % (name, key))
            for path in (spec.get('files') or {}):
                normal = posixpath.normpath(path)
                if path.startswith('/') or normal.startswith('..') or normal == '.':
                    raise AgentError('Agent %r: file %r must be a path under the agent\'s home (relative, no "..").'
                                     % (name, path))
        else:
            raise AgentError('Agent %r must be a command line (a list of strings) or a dict with "command".' % name)
        if not _argv(command):
            raise AgentError('Agent %r has no command line: give a non-empty list of strings, with {purpose} where the '
                             'brief goes (or read it from the EPHEMERA_PURPOSE variable).' % name)


def _argv(value):
    return isinstance(value, list) and bool(value) and all(isinstance(p, str) for p in value)


def check_endpoint(agent, url):
    """Refuse a base URL that is not an http(s) URL without credentials; returns it."""
    try:
        parts = urlsplit(url)
    except ValueError as err:
        raise AgentError('agent_base_urls[%r]: %r is not a URL (%s).' % (agent, url, err))
    if parts.scheme not in ('http', 'https') or not parts.hostname:
        raise AgentError('agent_base_urls[%r]: %r must be an http:// or https:// URL of the model endpoint (an LLM '
                         'gateway, say).' % (agent, url))
    if parts.username or parts.password:
        raise AgentError('agent_base_urls[%r] carries credentials in the URL; give the key in agent_credentials '
                         '(the agent\'s environment) instead.' % agent)
    return url


def runner_spec(name, agents=None, base_url=None, model=None):
    """What the runner's configuration says of the agent ``name``: its command lines, event stream, environment
    and files, with the endpoint and model applied."""
    spec = catalogue(agents).get(name)
    if spec is None:
        raise AgentError('Unknown agent %r; configured agents: %s.' % (name, ', '.join(sorted(catalogue(agents)))))
    if isinstance(spec, list):
        return {'command': list(spec), 'events': 'lines'}
    out = {k: v for k, v in spec.items() if k in SPEC_KEYS and k != 'tool'}
    out.setdefault('events', 'lines')
    environment = dict(out.get('environment') or {})
    files = dict(out.get('files') or {})
    form = out['events']
    if form == 'claude':
        if base_url:
            environment['ANTHROPIC_BASE_URL'] = base_url
        if model:
            environment['ANTHROPIC_MODEL'] = model
    elif form == 'codex':
        files.setdefault('.codex/config.toml', codex_config(base_url, model))
    elif form == 'opencode':
        files.setdefault('.config/opencode/opencode.json', opencode_config(base_url, model))
    if environment:
        out['environment'] = environment
    if files:
        out['files'] = files
    return out


def _toml(value):
    return json.dumps(value)


def codex_config(base_url=None, model=None):
    """codex's ~/.codex/config.toml: a provider of ours at the endpoint (OpenAI's own by default) that reads the key
    from OPENAI_API_KEY, over the Responses API."""
    lines = ['# Written by the ephemera agent runner before each start of codex.',
             'model = %s' % _toml(model or DEFAULT_MODELS['codex'])]
    lines += [
        'model_provider = %s' % _toml(PROVIDER),
        '',
        '[model_providers.%s]' % PROVIDER,
        'name = %s' % _toml(PROVIDER),
        'base_url = %s' % _toml(base_url or OPENAI_BASE_URL),
        'env_key = "OPENAI_API_KEY"',
        'wire_api = "responses"',
        '',
    ]
    return '\n'.join(lines)


def opencode_config(base_url=None, model=None):
    """opencode's ~/.config/opencode/opencode.json: with an endpoint, an OpenAI-compatible provider of ours that reads
    the key from OPENAI_API_KEY; no automatic updates or sharing either way."""
    config = {'$schema': 'https://opencode.ai/config.json', 'autoupdate': False, 'share': 'disabled'}
    if base_url:
        model = model or DEFAULT_MODELS['opencode']
        config['provider'] = {PROVIDER: {
            'npm': '@ai-sdk/openai-compatible', 'name': PROVIDER,
            'options': {'baseURL': base_url, 'apiKey': '{env:OPENAI_API_KEY}'},
            'models': {model: {'name': model}}}}
        config['model'] = '%s/%s' % (PROVIDER, model)
    elif model:
        config['model'] = model
    return json.dumps(config, indent=2, sort_keys=True) + '\n'


def runner_agents(name, agents=None, base_urls=None, models=None):
    """The runner configuration's ``agents``: the workspace's agent, ready to start."""
    base_url = (base_urls or {}).get(name)
    return {name: runner_spec(name, agents, check_endpoint(name, base_url) if base_url else None,
                              (models or {}).get(name))}


def _time(stamp):
    try:
        return time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime(float(stamp)))
    except (TypeError, ValueError):
        return 'at an unknown time'


def describe(record):
    """A workspace's agent in one line, from what the journal recorded of it (``facts.agent``)."""
    agent = (record.get('facts') or {}).get('agent') or record.get('agent')
    if not agent:
        return None
    line = '%s %s' % (agent.get('name') or (record.get('params') or {}).get('agent') or 'agent',
                      record.get('activity') or 'unknown')
    error = agent.get('error')
    if error:
        line += ', stopped on %s: %s' % (error.get('kind'), error.get('message'))
    if agent.get('waiting'):
        line += ', waits for %s' % '; '.join(agent['waiting'])
    events = [e for e in agent.get('events') or [] if isinstance(e, dict) and e.get('type') not in ('session', 'exited')]
    if events:
        line += '; last: %s' % events[-1].get('text')
    return '%s (observed %s)' % (line, _time(agent.get('observed_at')))
