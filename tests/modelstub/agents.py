"""Running the real agent CLIs headless against a ModelStub, each with a HOME of its own.

    run = run_agent('codex', bin_dir, stub, 'sk-test-1', repo, home, 'Write hello.txt')
    run.returncode, run.events, run.session

What each CLI is given (docs/agent-cli-facts.md says why):
- claude: ANTHROPIC_BASE_URL (the stub's URL, no /v1) and ANTHROPIC_API_KEY in the environment, no config file;
  ``claude -p PROMPT --output-format stream-json --verbose --permission-mode acceptEdits``.
- codex: ~/.codex/config.toml with a provider of its own (base_url = stub + /v1, env_key = OPENAI_API_KEY,
  wire_api = "responses") and the key in OPENAI_API_KEY; ``codex exec --json -s workspace-write PROMPT``.
- opencode: ~/.config/opencode/opencode.json with an @ai-sdk/openai-compatible provider (baseURL = stub + /v1,
  apiKey = {env:OPENAI_API_KEY}); ``opencode run --format json PROMPT``.

TMPDIR is a directory beside HOME (codex makes no helper binaries when its home lies under TMPDIR), and
npm_config_registry points at the stub (opencode asks the npm registry for @opencode-ai/plugin on every start;
the stub answers 404 and records it), so a run reaches nothing but the stub.
"""

import json
import os
import subprocess
import time

KINDS = ('claude', 'codex', 'opencode')
# A model codex has metadata for: with another name codex falls back to generic metadata, says so in an
# "error" item, and offers no apply_patch tool.
CODEX_MODEL = 'gpt-5.5'
OPENCODE_MODEL = 'stub-model'
CLAUDE_FLAGS = ['--output-format', 'stream-json', '--verbose', '--permission-mode', 'acceptEdits']
CODEX_FLAGS = ['--json', '-s', 'workspace-write']
OPENCODE_FLAGS = ['--format', 'json']


def codex_config(base_url, model=CODEX_MODEL, retries=None, idle_timeout_ms=None, extra=''):
    lines = ['model = %s' % json.dumps(model), 'model_provider = "stub"', '', '[model_providers.stub]',
             'name = "stub"', 'base_url = %s' % json.dumps(base_url), 'env_key = "OPENAI_API_KEY"',
             'wire_api = "responses"']
    if retries is not None:
        lines += ['request_max_retries = %d' % retries, 'stream_max_retries = %d' % retries]
    if idle_timeout_ms is not None:
        lines.append('stream_idle_timeout_ms = %d' % idle_timeout_ms)
    return '\n'.join(lines) + '\n' + extra


def opencode_config(base_url, model=OPENCODE_MODEL, permission=None, options=None):
    config = {'$schema': 'https://opencode.ai/config.json', 'autoupdate': False, 'share': 'disabled',
              'provider': {'stub': {'npm': '@ai-sdk/openai-compatible', 'name': 'stub',
                                    'options': dict({'baseURL': base_url, 'apiKey': '{env:OPENAI_API_KEY}'},
                                                    **(options or {})),
                                    'models': {model: {'name': model}}}},
              'model': 'stub/%s' % model, 'small_model': 'stub/%s' % model}
    if permission is not None:
        config['permission'] = permission
    return json.dumps(config, indent=2) + '\n'


def prepare(kind, home, stub_url, **config):
    """Write the CLI's configuration under ``home`` (and make it); returns the TMPDIR to use (beside home)."""
    os.makedirs(home, exist_ok=True)
    tmpdir = os.path.join(os.path.dirname(os.path.abspath(home)), os.path.basename(home) + '-tmp')
    os.makedirs(tmpdir, exist_ok=True)
    if kind == 'codex':
        os.makedirs(os.path.join(home, '.codex'), exist_ok=True)
        with open(os.path.join(home, '.codex', 'config.toml'), 'w', encoding='utf-8') as out:
            out.write(codex_config(stub_url + '/v1', **config))
    elif kind == 'opencode':
        os.makedirs(os.path.join(home, '.config', 'opencode'), exist_ok=True)
        with open(os.path.join(home, '.config', 'opencode', 'opencode.json'), 'w', encoding='utf-8') as out:
            out.write(opencode_config(stub_url + '/v1', **config))
    elif kind != 'claude':
        raise ValueError('unknown agent kind %r' % kind)
    return tmpdir


def environment(kind, bin_dir, home, tmpdir, stub_url, key):
    """A clean environment: nothing of the caller's but what is named here."""
    env = {'PATH': '%s:/usr/local/bin:/usr/bin:/bin' % bin_dir, 'HOME': home, 'TMPDIR': tmpdir, 'LANG': 'C.UTF-8',
           'USER': 'agent', 'SHELL': '/bin/bash', 'NO_COLOR': '1',
           'npm_config_registry': stub_url + '/npm/', 'npm_config_update_notifier': 'false'}
    if kind == 'claude':
        env.update({'ANTHROPIC_BASE_URL': stub_url, 'CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC': '1',
                    'DISABLE_AUTOUPDATER': '1'})
        if key is not None:
            env['ANTHROPIC_API_KEY'] = key
    else:
        if key is not None:
            env['OPENAI_API_KEY'] = key
    if kind == 'opencode':
        env.update({'OPENCODE_DISABLE_AUTOUPDATE': '1', 'OPENCODE_DISABLE_MODELS_FETCH': '1',
                    'OPENCODE_DISABLE_LSP_DOWNLOAD': '1'})
    return env


def command(kind, prompt, session=None, latest=False, extra=()):
    """The headless command line of a first prompt, or of a follow-up in ``session`` (or the latest one)."""
    if kind == 'claude':
        argv = ['claude', '-p', prompt] + CLAUDE_FLAGS
        if session:
            argv += ['--resume', session]
        elif latest:
            argv += ['--continue']
        return argv + list(extra)
    if kind == 'codex':
        argv = ['codex', 'exec'] + CODEX_FLAGS + list(extra)
        if session:
            return argv + ['resume', session, prompt]
        if latest:
            return argv + ['resume', '--last', prompt]
        return argv + [prompt]
    if kind == 'opencode':
        argv = ['opencode', 'run'] + OPENCODE_FLAGS + list(extra)
        if session:
            argv += ['--session', session]
        elif latest:
            argv += ['--continue']
        return argv + [prompt]
    raise ValueError('unknown agent kind %r' % kind)


def parse_events(text):
    """The JSON objects of an event stream (one a line); other lines are skipped."""
    events = []
    for line in text.splitlines():
        line = line.strip()
        if line.startswith('{'):
            try:
                events.append(json.loads(line))
            except ValueError:
                pass
    return events


def session_of(kind, events):
    """The session id an event stream names: claude's session_id, codex's thread_id, opencode's sessionID."""
    for event in events:
        if kind == 'claude' and event.get('session_id'):
            return event['session_id']
        if kind == 'codex' and event.get('type') == 'thread.started':
            return event.get('thread_id')
        if kind == 'opencode' and event.get('sessionID'):
            return event['sessionID']
    return None


class AgentRun:
    def __init__(self, kind, argv, env, returncode, stdout, stderr, seconds, timed_out=False):
        self.kind = kind
        self.argv = argv
        self.env = env
        self.returncode = returncode
        self.stdout = stdout
        self.stderr = stderr
        self.seconds = seconds
        self.timed_out = timed_out
        self.events = parse_events(stdout)
        self.session = session_of(kind, self.events)

    def types(self):
        return [e.get('type') for e in self.events]

    def __repr__(self):
        return 'AgentRun(%s rc=%r %.1fs, %d events, session %s)' % (
            self.kind, self.returncode, self.seconds, len(self.events), self.session)

    def explain(self):
        """Everything a failed assertion should show."""
        return '%r\nargv: %r\nstdout:\n%s\nstderr:\n%s' % (self, self.argv, self.stdout[-6000:],
                                                           self.stderr[-3000:])


def run_agent(kind, bin_dir, stub, key, cwd, home, prompt, session=None, latest=False, timeout=60,
              extra_args=(), extra_env=None, config=None):
    """Run one headless turn of the CLI ``kind`` in ``cwd`` with stdin from /dev/null; returns an AgentRun.
    The process (and its process group) is killed by pid if it outlives ``timeout``."""
    tmpdir = prepare(kind, home, stub.url, **(config or {}))
    env = environment(kind, bin_dir, home, tmpdir, stub.url, key)
    env.update(extra_env or {})
    argv = command(kind, prompt, session=session, latest=latest, extra=extra_args)
    argv[0] = os.path.join(bin_dir, argv[0])
    started = time.monotonic()
    proc = subprocess.Popen(argv, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    timed_out = False
    try:
        stdout, stderr = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        timed_out = True
        _kill_group(proc.pid)
        stdout, stderr = proc.communicate()
    _kill_group(proc.pid)  # whatever the CLI left running in its process group
    return AgentRun(kind, argv, env, proc.returncode, stdout, stderr, time.monotonic() - started, timed_out)


def _kill_group(pid):
    try:
        os.killpg(pid, 9)
    except OSError:
        pass
