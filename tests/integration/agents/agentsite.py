"""A controller driving the real agent CLIs through the shipped playbooks on a try-out site, and the scenario every
provider runs: create (the CLI edits as scripted) -> active then idle -> a follow-up brief in the same session ->
destroy archives the agent's work -> a restore shows both changes -> the key is nowhere it must not be."""

import base64
import glob
import json
import os
import re
import secrets
import subprocess

from ansible_collections.ephemera.workspaces.plugins.module_utils.core.journal import Journal
from tests import ansible_run
from tests.ansible_run import wait_until
from tests.integration.create.createrun import files_containing, process_lists_containing
from tests.models.client import StubClient

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
PLAYBOOKS = os.path.join(ROOT, 'playbooks')
KEY_VARIABLE = {'claude-code': 'ANTHROPIC_API_KEY', 'codex': 'OPENAI_API_KEY', 'opencode': 'OPENAI_API_KEY'}
# What each real CLI says it is, in the User-Agent of its requests: a stand-in agent sends none of these.
USER_AGENT = {'claude-code': re.compile(r'^claude-cli/\d'), 'codex': re.compile(r'codex', re.I),
              'opencode': re.compile(r'opencode|ai-sdk', re.I)}
PROTOCOL = {'claude-code': 'anthropic', 'codex': 'responses', 'opencode': 'chat'}
FAREWELL = 'def farewell(name):\n    return "bye " + name\n'
TEST = 'from farewell import farewell\n\n\ndef test_farewell():\n    assert farewell("x") == "bye x"\n'
AGENTS = ('claude-code', 'codex', 'opencode')


def new_key(agent):
    return '%s-%s' % ('sk-ant' if agent == 'claude-code' else 'sk-proj', secrets.token_hex(16))


class AgentSite:
    """One journal on one try-out site (``info``: its cluster.json or cloud.json), the inventory that points the
    collection at it, and ``env`` that names the site's state directory. Extra vars go through files, so no secret
    sits on a command line."""

    def __init__(self, info, inventory, env, workdir, repo_url, checkout_of, journal_path=None, login=None):
        self.info = info
        self.inventory = inventory
        self.workdir = str(workdir)
        self.journal_path = journal_path or os.path.join(self.workdir, 'journal.sqlite')
        self.archives = os.path.join(self.workdir, 'archives')
        self.env = dict(env, EPHEMERA_JOURNAL=self.journal_path)
        self.repo_url = repo_url
        self.checkout_of = checkout_of
        # git_token and git_username of a repository that wants a login (given to the create and the destroy).
        self.login = dict(login or {})
        self.stub = StubClient.of_site(info)
        self.runs = []

    def playbook(self, name, fail=False, timeout=300, **extra_vars):
        path = os.path.join(self.workdir, 'vars-%d.json' % len(self.runs))
        with open(path, 'w') as out:
            json.dump(dict(extra_vars, ephemera_archive_dir=self.archives), out)
        run = ansible_run.Run.start(['ansible-playbook', '-i', self.inventory, os.path.join(PLAYBOOKS, name),
                                     '-e', '@' + path], env=self.env)
        self.runs.append(run)
        return run.wait(timeout, fail=fail)

    def create(self, name, agent, key, purpose, **extra):
        values = {'workspace': name, 'repo': self.repo_url, 'ref': 'main', 'purpose': purpose, 'agent': agent,
                  'agent_credentials': {KEY_VARIABLE[agent]: key}}
        values.update(self.login)
        values.update(extra)
        return self.playbook('create.yml', **values)

    def workspace(self, name):
        with Journal.open(self.journal_path, create=False) as journal:
            return journal.get_workspace(name)

    def events(self, name):
        with Journal.open(self.journal_path, create=False) as journal:
            return journal.events(name)

    def agent_of(self, name):
        ws = self.workspace(name)
        return ws, (ws['facts'] or {}).get('agent') or {}

    def observe(self, name):
        """The status playbook for one workspace: it asks the runner and records what the agent does."""
        run = self.playbook('status.yml', queue_target=name)
        assert run.ok, run.explain()
        return self.agent_of(name)

    def wait_idle(self, name, timeout=120):
        def finished():
            ws, seen = self.observe(name)
            return (ws, seen) if ws['activity'] in ('idle', 'blocked') else None
        return wait_until(finished, 'the agent of %s to finish' % name, timeout=timeout)

    def checkout(self, ws):
        return self.checkout_of(ws)

    def runner_stream(self, ws):
        """The agent's raw event stream and log, as the runner in the guest keeps them (for failure messages)."""
        runner = os.path.join(os.path.dirname(os.path.dirname(self.checkout(ws))), 'var', 'lib', 'ephemera', 'runner')
        out = []
        for name in ('stream.jsonl', 'agent.log'):
            try:
                out.append('%s:\n%s' % (name, read(os.path.join(runner, name))[-6000:]))
            except OSError as err:
                out.append('%s: %s' % (name, err))
        return '\n'.join(out)

    def journal_bytes(self):
        data = b''
        for suffix in ('', '-wal'):
            if os.path.exists(self.journal_path + suffix):
                with open(self.journal_path + suffix, 'rb') as src:
                    data += src.read()
        return data


def read(path):
    with open(path) as src:
        return src.read()


def edit_brief_archive_restore(site, agent, name, restore_dir, template_root=None, while_working=None, **extra):
    """The whole life of a workspace whose real CLI works as scripted; asserts each observable outcome.
    ``while_working(ws, key)`` looks at the guest while the agent works; ``extra`` goes to the create."""
    key = new_key(agent)
    site.stub.add_script(key, [
        {'write': 'farewell.py', 'content': FAREWELL},
        # The model takes a moment over its answer: the agent is seen working.
        {'text': 'Added farewell.', 'delay': 6},
        {'write': 'test_farewell.py', 'content': TEST},
        {'text': 'Added a test.'},
    ])
    purpose = 'Add a farewell function next to greet'
    run = site.create(name, agent, key, purpose, **extra)
    assert run.ok, run.explain()
    ws, seen = site.agent_of(name)
    assert ws['status'] == 'ready' and ws['activity'] == 'active', (ws['activity'], seen)
    if while_working is not None:
        while_working(ws, key)
    assert seen['name'] == agent and seen['session'] and seen['answered'] and seen['error'] is None
    assert any(e['type'] == 'tool' and 'farewell.py' in e['text'] for e in seen['events']), seen['events']

    # What the real CLI sent: its own protocol and user agent, the key from agent_credentials, the brief.
    sent = site.stub.requests(key, agent_only=True)
    assert sent and {r['protocol'] for r in sent} == {PROTOCOL[agent]}
    assert USER_AGENT[agent].search({k.lower(): v for k, v in sent[0]['headers'].items()}['user-agent'])
    assert purpose in json.dumps(sent[0]['body'])

    ws, seen = site.wait_idle(name)
    assert ws['activity'] == 'idle' and seen['exit'] == 0 and seen['error'] is None
    assert os.path.exists(os.path.join(site.checkout(ws), 'farewell.py')), site.runner_stream(ws)
    assert read(os.path.join(site.checkout(ws), 'farewell.py')) == FAREWELL
    session = seen['session']

    # A follow-up brief continues the same session: the CLI sends the first brief's history along.
    follow_up = site.playbook('brief.yml', workspace=name, message='Now add a test for farewell')
    assert follow_up.ok, follow_up.explain()
    ws, seen = site.wait_idle(name)
    assert seen['session'] == session and seen['briefs'] == 2 and seen['error'] is None
    later = [r for r in site.stub.requests(key, agent_only=True)
             if 'Now add a test for farewell' in json.dumps(r['body'])]
    assert later and purpose in json.dumps(later[0]['body'])
    assert read(os.path.join(site.checkout(ws), 'test_farewell.py')) == TEST

    # Destroy archives the agent's actual work; the archive's own restore commands bring both changes back.
    gone = site.playbook('destroy.yml', workspace=name, **site.login)
    assert gone.ok, gone.explain()
    assert site.workspace(name)['status'] == 'destroyed'
    ours = [m for m in glob.glob(os.path.join(site.archives, '**', 'metadata.json'), recursive=True)
            if json.loads(read(m))['workspace'] == name]
    assert ours, site.archives
    os.makedirs(restore_dir)
    script = 'set -e\n' + '\n'.join(json.loads(read(sorted(ours, key=os.path.getmtime)[-1]))['restore'])
    env = dict(os.environ)
    if site.login:
        # The person restoring logs in to the forge as they would: here with the token, in an HTTP header.
        basic = base64.b64encode(('%(git_username)s:%(git_token)s' % site.login).encode()).decode()
        env.update(GIT_CONFIG_COUNT='1', GIT_CONFIG_KEY_0='http.extraHeader',
                   GIT_CONFIG_VALUE_0='Authorization: Basic ' + basic)
    done = subprocess.run(['sh', '-c', script], cwd=restore_dir, capture_output=True, text=True, timeout=120, env=env,
                          check=False)
    assert done.returncode == 0, (script, done.stderr)
    work = [os.path.dirname(p) for p in glob.glob(os.path.join(restore_dir, '**', 'farewell.py'), recursive=True)]
    assert work, os.listdir(restore_dir)
    assert read(os.path.join(work[0], 'farewell.py')) == FAREWELL
    assert read(os.path.join(work[0], 'test_farewell.py')) == TEST

    # The key reached the agent's environment only. (The extra vars files hold it: they stand for the vault.)
    assert [f for f in files_containing(site.workdir, key) if not os.path.basename(f).startswith('vars-')] == []
    if template_root:
        assert files_containing(template_root, key) == []
    assert key not in site.journal_bytes().decode('latin-1')
    for each in site.runs:
        assert key not in each.output
    assert process_lists_containing(key) == []
    for secret in site.login.values():
        assert secret == site.login.get('git_username') or process_lists_containing(secret) == []
    return key
