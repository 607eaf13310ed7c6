"""The agent runner reading the event streams of the REAL claude-code, codex and opencode, with the built-in command
lines and configuration (guest/agents.py), against the scripted model endpoint (tests/models): the session each
names, activity active then idle, a follow-up that continues the session, a refused key stopped as an auth error,
and (claude-code, opencode) an approval the headless agent cannot get.

The CLIs are the pinned npm packages (tests/models/clis.py, installed once per machine). The runner runs here, as
this user, in a directory of its own that stands for the guest's root: the agent's home is the passwd home under
it, as on the host tier of the try-out cluster.
"""

import json
import os
import pwd
import subprocess
import sys
import time

import pytest

from ansible_collections.ephemera.workspaces.plugins.module_utils.guest import agent_runner
from ansible_collections.ephemera.workspaces.plugins.module_utils.guest import agents
from tests.models import ModelServer
from tests.models.clis import ensure_clis
from tests.models.tryout import link_clis

RUNNER = agent_runner.__file__
KEY_VARIABLE = {'claude-code': 'ANTHROPIC_API_KEY', 'codex': 'OPENAI_API_KEY', 'opencode': 'OPENAI_API_KEY'}
AGENTS = ('claude-code', 'codex', 'opencode')


@pytest.fixture(scope='module')
def clis():
    return ensure_clis()


@pytest.fixture(scope='module')
def stub():
    with ModelServer() as server:
        yield server


@pytest.fixture
def runner(tmp_path, clis, stub):
    """A runner in a guest root of its own under ``tmp_path``; ``start(agent, key, **spec changes)`` configures it."""
    root = tmp_path / 'guest'
    repo = root / 'workspace' / 'repo'
    repo.mkdir(parents=True)
    subprocess.run(['git', 'init', '--quiet', str(repo)], check=True)
    link_clis(str(root), pwd.getpwuid(os.getuid()).pw_name, clis)
    state, sock, config = tmp_path / 'state', str(tmp_path / 'runner.sock'), tmp_path / 'runner.json'
    procs = []

    def call(request):
        out = subprocess.run([sys.executable, RUNNER, 'call', '--socket', sock, json.dumps(request)],
                             capture_output=True, text=True, timeout=60, check=False)
        return json.loads(out.stdout)

    def start(agent, key, base_url=None):
        env_file = tmp_path / 'agent.env'
        env_file.write_text('%s=%s\n' % (KEY_VARIABLE[agent], key))
        url = base_url or (stub.url if agent == 'claude-code' else stub.url + '/v1')
        config.write_text(json.dumps({'agents': agents.runner_agents(agent, None, {agent: url}),
                                      'workdir': str(repo), 'environment_file': str(env_file), 'root': str(root)}))
        procs.append(subprocess.Popen([sys.executable, RUNNER, 'serve', '--state-dir', str(state), '--socket', sock,
                                       '--config', str(config)], start_new_session=True))
        deadline = time.monotonic() + 10
        while not (os.path.exists(sock) and call({'op': 'ping'}).get('alive')):
            assert time.monotonic() < deadline, 'the runner did not answer'
            time.sleep(0.05)

    def until(check, timeout=90):
        deadline = time.monotonic() + timeout
        while True:
            answer = call({'op': 'ping'})
            if check(answer):
                return answer
            assert time.monotonic() < deadline, answer
            time.sleep(0.1)

    yield type('R', (), {'start': staticmethod(start), 'call': staticmethod(call), 'until': staticmethod(until),
                         'repo': repo, 'root': root})
    for proc in procs:
        proc.terminate()
        proc.wait(10)
    # The agent the runner started, if it still runs (it lives in a session of its own).
    answer = json.loads((state / 'state.json').read_text()) if (state / 'state.json').exists() else {}
    pid = (answer.get('agent_process') or {}).get('pid')
    if pid and (answer.get('agent_process') or {}).get('ended_at') is None:
        try:
            os.killpg(pid, 9)
        except OSError:
            pass


@pytest.mark.parametrize('agent', AGENTS)
def test_the_runner_follows_the_real_cli_from_brief_to_idle_and_continues_its_session(runner, stub, agent):
    key = 'key-%s-%d' % (agent, os.getpid())
    stub.add_script(key, [{'write': 'farewell.py', 'content': 'def farewell():\n    return "bye"\n'},
                          {'text': 'Added.', 'delay': 3},
                          {'shell': 'echo tested > tested.txt'}, {'text': 'Tested.'}])
    runner.start(agent, key)
    assert runner.call({'op': 'brief', 'purpose': 'Add a farewell function', 'agent': agent})['ok']
    working = runner.until(lambda a: a['agent']['answered'])
    assert working['activity'] == 'active' and working['agent']['session']
    session = working['agent']['session']
    done = runner.until(lambda a: not a['agent']['running'])
    agent_seen = done['agent']
    assert done['activity'] == 'idle' and agent_seen['exit'] == 0 and agent_seen['error'] is None, agent_seen
    assert (runner.repo / 'farewell.py').read_text() == 'def farewell():\n    return "bye"\n'
    kinds = [e['type'] for e in agent_seen['events']]
    assert 'tool' in kinds and kinds[-1] == 'exited', agent_seen['events']

    sent = runner.call({'op': 'message', 'text': 'Now run the tests'})
    assert sent['ok'], sent
    again = runner.until(lambda a: not a['agent']['running'] and a['agent']['briefs'] == 2)
    assert again['agent']['session'] == session and again['agent']['error'] is None, again['agent']
    assert (runner.repo / 'tested.txt').read_text() == 'tested\n'
    # The follow-up carried the first brief's conversation: the same session, continued.
    later = [r for r in stub.requests(key, agent_only=True) if 'Now run the tests' in json.dumps(r['body'])]
    assert later and 'Add a farewell function' in json.dumps(later[0]['body'])
    # The key went to the endpoint in the request header, and into no event.
    assert key not in json.dumps(runner.call({'op': 'status'}))


@pytest.mark.parametrize('agent', AGENTS)
def test_a_key_the_endpoint_refuses_is_an_auth_error_and_the_agent_is_stopped(runner, stub, agent):
    key = 'refused-%s-%d' % (agent, os.getpid())
    stub.add_script(key, [{'error': 401}] * 40)
    runner.start(agent, key)
    started = time.monotonic()
    brief = runner.call({'op': 'brief', 'purpose': 'Add a farewell function', 'agent': agent})
    if brief['ok']:
        stopped = runner.until(lambda a: not a['agent']['running'])
    else:  # it stopped within its first half second
        stopped = runner.call({'op': 'ping'})
    assert stopped['agent']['error']['kind'] == 'auth', stopped['agent']
    assert time.monotonic() - started < 60
    assert stopped['activity'] == 'idle'


def test_claude_codes_denied_tool_leaves_it_blocked(runner, stub):
    key = 'approval-claude-%d' % os.getpid()
    stub.add_script(key, [{'approval': 'curl -s http://127.0.0.1:9/install.sh | sh'}, {'text': 'I need approval.'}])
    runner.start('claude-code', key)
    assert runner.call({'op': 'brief', 'purpose': 'Install the tooling', 'agent': 'claude-code'})['ok']
    done = runner.until(lambda a: not a['agent']['running'])
    assert done['activity'] == 'blocked' and 'curl' in done['agent']['waiting'][0], done['agent']


def test_opencode_asked_for_a_permission_it_cannot_get_is_blocked(runner, stub, tmp_path):
    key = 'approval-opencode-%d' % os.getpid()
    stub.add_script(key, [{'approval': 'curl -s http://127.0.0.1:9/install.sh | sh'}, {'text': 'I need approval.'}])
    runner.start('opencode', key)
    # A team's opencode configuration that asks before a shell command (the built-in one allows them).
    config = json.loads((tmp_path / 'runner.json').read_text())
    files = config['agents']['opencode']['files']
    settings = json.loads(files['.config/opencode/opencode.json'])
    settings['permission'] = {'bash': 'ask'}
    files['.config/opencode/opencode.json'] = json.dumps(settings)
    (tmp_path / 'runner.json').write_text(json.dumps(config))
    assert runner.call({'op': 'brief', 'purpose': 'Install the tooling', 'agent': 'opencode'})['ok']
    done = runner.until(lambda a: not a['agent']['running'])
    assert done['activity'] == 'blocked' and done['agent']['waiting'], done['agent']
