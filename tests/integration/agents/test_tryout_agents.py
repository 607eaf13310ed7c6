"""The real agent CLIs working in workspaces of the try-out cluster (host tier), against scripted model endpoints.

claude-code, codex and opencode, each once through the shipped playbooks: the create briefs the real CLI, which
edits the repository as its model's script says, activity goes active then idle as the CLI's own event stream
says, a follow-up brief continues the same session and makes a second change, and destroy archives the agent's
actual work, from which a restore shows both changes. Then an approval the headless agent cannot get (blocked),
a key the model endpoint refuses (the brief fails with advice, a rerun with the right key goes on at the brief),
and the key looked for everywhere it must not be.

The CLIs are the pinned npm packages (tests/models/clis.py); only their model endpoint is a stand-in
(tests/models), and every test checks what the CLI itself sent to it, so a stand-in agent fails them.
"""

import glob
import json
import os
import re
import secrets
import subprocess

import pytest

from tests.ansible_run import wait_until
from tests.integration.create.createrun import Controller, files_containing, process_lists_containing
from tests.integration.create.gitserver import Repo
from tests.integration.playbooks import running_cluster
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


@pytest.fixture(scope='module')
def site(tmp_path_factory):
    with running_cluster(tmp_path_factory.mktemp('agents-cluster')) as cluster:
        ctl = Controller(cluster, tmp_path_factory.mktemp('agents-controller'))
        ctl.repo = Repo(str(tmp_path_factory.mktemp('agents-repo')))
        ctl.stub = StubClient.of_site(cluster.info)
        ctl.archives = str(tmp_path_factory.mktemp('agents-archives'))
        try:
            yield ctl
        finally:
            ctl.stop()


def new_key(agent):
    return '%s-%s' % ('sk-ant' if agent == 'claude-code' else 'sk-proj', secrets.token_hex(16))


def create(site, name, agent, key, purpose, **extra):
    values = {'workspace': name, 'repo': site.repo.url, 'ref': 'main', 'purpose': purpose, 'agent': agent,
              'agent_credentials': {KEY_VARIABLE[agent]: key}, 'ephemera_archive_dir': site.archives}
    values.update(extra)
    return site.create(values, timeout=300)


def playbook(site, name, **extra_vars):
    run = site.start(extra_vars, playbook=os.path.join(PLAYBOOKS, name))
    return run.wait(300)


def agent_of(site, name):
    ws = site.workspace(name)
    return ws, (ws['facts'] or {}).get('agent') or {}


def observe(site, name):
    """The status playbook for one workspace: it asks the runner and records what the agent does."""
    run = playbook(site, 'status.yml', queue_target=name)
    assert run.ok, run.explain()
    return agent_of(site, name)


def wait_idle(site, name, timeout=120):
    return wait_until(lambda: observe(site, name)[0]['activity'] in ('idle', 'blocked') and observe(site, name),
                      'the agent of %s to finish' % name, timeout=timeout)


def checkout(site, ws):
    return os.path.join(site.info['guest_root'].replace('{vmid}', str(ws['vmid'])), 'workspace', 'repo')


@pytest.mark.parametrize('agent', ['claude-code', 'codex', 'opencode'])
def test_the_real_cli_edits_works_is_briefed_again_and_its_work_is_archived(site, agent, tmp_path):
    name, key = 'real-%s' % agent, new_key(agent)
    site.stub.add_script(key, [
        {'write': 'farewell.py', 'content': FAREWELL},
        # The model takes a moment over its answer: the agent is seen working.
        {'text': 'Added farewell.', 'delay': 6},
        {'write': 'test_farewell.py', 'content': TEST},
        {'text': 'Added a test.'},
    ])
    purpose = 'Add a farewell function next to greet'
    run = create(site, name, agent, key, purpose)
    assert run.ok, run.explain()
    ws, seen = agent_of(site, name)
    assert ws['status'] == 'ready' and ws['activity'] == 'active', (ws['activity'], seen)
    assert seen['name'] == agent and seen['session'] and seen['answered'] and seen['error'] is None
    assert any(e['type'] == 'tool' and 'farewell.py' in e['text'] for e in seen['events']), seen['events']

    # What the real CLI sent: its own protocol and user agent, the key from agent_credentials, the brief.
    sent = site.stub.requests(key, agent_only=True)
    assert sent and {r['protocol'] for r in sent} == {PROTOCOL[agent]}
    assert USER_AGENT[agent].search(dict((k.lower(), v) for k, v in sent[0]['headers'].items())['user-agent'])
    assert purpose in json.dumps(sent[0]['body'])

    ws, seen = wait_idle(site, name)
    assert ws['activity'] == 'idle' and seen['exit'] == 0 and seen['error'] is None
    with open(os.path.join(checkout(site, ws), 'farewell.py')) as src:
        assert src.read() == FAREWELL
    session = seen['session']

    # A follow-up brief continues the same session: the CLI sends the first brief's history along.
    follow_up = playbook(site, 'brief.yml', workspace=name, message='Now add a test for farewell')
    assert follow_up.ok, follow_up.explain()
    ws, seen = wait_idle(site, name)
    assert seen['session'] == session and seen['briefs'] == 2 and seen['error'] is None
    later = [r for r in site.stub.requests(key, agent_only=True) if 'Now add a test for farewell' in json.dumps(r['body'])]
    assert later and purpose in json.dumps(later[0]['body'])
    with open(os.path.join(checkout(site, ws), 'test_farewell.py')) as src:
        assert src.read() == TEST

    # Destroy archives the agent's actual work; the archive's own restore commands bring both changes back.
    gone = playbook(site, 'destroy.yml', workspace=name, ephemera_archive_dir=site.archives)
    assert gone.ok, gone.explain()
    assert site.workspace(name)['status'] == 'destroyed'
    metadata = sorted(glob.glob(os.path.join(site.archives, '**', 'metadata.json'), recursive=True),
                      key=os.path.getmtime)
    restored = [m for m in metadata if json.load(open(m))['workspace'] == name]
    assert restored, metadata
    place = tmp_path / 'restore'
    place.mkdir()
    script = 'set -e\n' + '\n'.join(json.load(open(restored[-1]))['restore'])
    subprocess.run(['sh', '-c', script], cwd=str(place), check=True, capture_output=True, timeout=120)
    work = [os.path.dirname(p) for p in glob.glob(str(place / '**' / 'farewell.py'), recursive=True)]
    assert work, os.listdir(str(place))
    with open(os.path.join(work[0], 'farewell.py')) as src:
        assert src.read() == FAREWELL
    with open(os.path.join(work[0], 'test_farewell.py')) as src:
        assert src.read() == TEST

    # The key reached the agent's environment only.
    # (The extra vars files the runs were given hold it: they stand for the vault.)
    assert [f for f in files_containing(site.workdir, key) if not os.path.basename(f).startswith('vars-')] == []
    assert files_containing(site.archives, key) == []
    assert files_containing(site.info['guest_root'].replace('{vmid}', str(site.info['template_vmid'])), key) == []
    assert key not in site.journal_bytes().decode('latin-1')
    for each in site.runs:
        assert key not in each.output
    assert process_lists_containing(key) == []


def test_an_approval_the_headless_agent_cannot_get_leaves_it_blocked(site):
    name, key = 'real-blocked', new_key('claude-code')
    site.stub.add_script(key, [{'approval': 'curl -s http://127.0.0.1:9/install.sh | sh'},
                               {'text': 'I need your approval to run the installer.'}])
    run = create(site, name, 'claude-code', key, 'Install the project tooling')
    assert run.ok, run.explain()
    ws, seen = wait_idle(site, name)
    assert ws['activity'] == 'blocked', seen
    assert seen['waiting'] and 'curl' in seen['waiting'][0]
    status = playbook(site, 'status.yml', queue_target=name)
    assert 'claude-code blocked, waits for needs approval: Bash curl' in status.output
    assert playbook(site, 'destroy.yml', workspace=name, ephemera_archive_dir=site.archives).ok


def test_a_refused_key_fails_the_brief_with_advice_and_a_rerun_with_the_right_key_goes_on(site):
    name, wrong, right = 'real-key', new_key('claude-code'), new_key('claude-code')
    site.stub.add_script(right, [{'write': 'notes.md', 'content': 'ok\n'}, {'text': 'Done.'}])
    # The try-out endpoint answers any key; this one it refuses, every time it is asked.
    site.stub.add_script(wrong, [{'error': 401}] * 50)
    failed = site.start({'workspace': name, 'repo': site.repo.url, 'purpose': 'Take notes', 'agent': 'claude-code',
                         'agent_credentials': {'ANTHROPIC_API_KEY': wrong}}).wait(300, fail=False)
    assert not failed.ok
    assert "refused the agent's key" in failed.output and 'ANTHROPIC_API_KEY' in failed.output
    ws, seen = agent_of(site, name)
    assert ws['status'] == 'failed' and ws['failure']['step'] == 'brief' and seen['error']['kind'] == 'auth'
    assert 'runner' in ws['progress'] and ws['vmid'] in site.guests()
    # The stand-in saw the wrong key and answered 401; the runner stopped the CLI at its first retry.
    refused = site.stub.requests(wrong)
    assert {r['answer'] for r in refused} == {'error'} and len(refused) <= 3
    again = create(site, name, 'claude-code', right, 'Take notes')
    assert again.ok, again.explain()
    steps = again.step_results()
    assert [n for n, r in sorted(steps.items()) if r.get('changed')] == [12, 13]
    ws, seen = wait_idle(site, name)
    assert seen['error'] is None and ws['status'] == 'ready'
    assert os.path.exists(os.path.join(checkout(site, ws), 'notes.md'))
    assert playbook(site, 'destroy.yml', workspace=name, ephemera_archive_dir=site.archives).ok
