"""The agent runner as a real process on a real Unix socket."""

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from ansible_collections.ephemera.workspaces.plugins.module_utils.guest import agent_runner

RUNNER = agent_runner.__file__


@pytest.fixture
def runner(tmp_path):
    state = tmp_path / 'state'
    sock = str(tmp_path / 'runner.sock')
    config = tmp_path / 'config.json'
    flag = tmp_path / 'finish'
    config.write_text(json.dumps({'agents': {
        'fake': ['sh', '-c', 'echo "working on: {purpose}"; while [ ! -e %s ]; do sleep 0.05; done; echo done' % flag],
        'missing': ['/nonexistent/agent']}, 'workdir': str(tmp_path)}))
    procs = []

    def start():
        proc = subprocess.Popen([sys.executable, RUNNER, 'serve', '--state-dir', str(state), '--socket', sock,
                                 '--config', str(config)], start_new_session=True)
        procs.append(proc)
        deadline = time.monotonic() + 10
        # The socket file of a killed runner may still be there: wait for an answer, not for the file.
        while time.monotonic() < deadline:
            if os.path.exists(sock) and call({'op': 'ping'}).get('alive'):
                return proc
            time.sleep(0.02)
        raise AssertionError('the runner did not answer')

    def call(request):
        out = subprocess.run([sys.executable, RUNNER, 'call', '--socket', sock, json.dumps(request)],
                             capture_output=True, text=True, timeout=30, check=False)
        return json.loads(out.stdout)

    start()
    yield type('R', (), {'call': staticmethod(call), 'start': staticmethod(start), 'procs': procs, 'flag': flag,
                         'state': state})
    for proc in procs:
        if proc.poll() is None:
            proc.terminate()
            proc.wait(10)
    flag.touch()


def wait_activity(r, wanted, timeout=10):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        answer = r.call({'op': 'ping'})
        if answer['activity'] == wanted:
            return answer
        time.sleep(0.05)
    raise AssertionError('activity never became %s: %s' % (wanted, answer))


def test_ping_before_brief_is_idle(runner):
    assert runner.call({'op': 'ping'}) == {'ok': True, 'alive': True, 'activity': 'idle', 'briefed': False,
                                           'version': 1}


def test_brief_runs_the_agent_and_tracks_activity(runner):
    answer = runner.call({'op': 'brief', 'purpose': 'fix the login bug', 'agent': 'fake'})
    assert answer['ok'] and answer['activity'] == 'active'
    assert runner.call({'op': 'brief', 'purpose': 'fix the login bug', 'agent': 'fake'})['already'] is True
    refused = runner.call({'op': 'brief', 'purpose': 'something else', 'agent': 'fake'})
    assert not refused['ok'] and 'still working' in refused['error']
    assert runner.call({'op': 'activity', 'state': 'blocked'})['activity'] == 'blocked'
    assert runner.call({'op': 'ping'})['activity'] == 'blocked'
    runner.call({'op': 'activity', 'state': 'active'})
    runner.flag.touch()
    wait_activity(runner, 'idle')
    status = runner.call({'op': 'status'})
    assert status['brief']['purpose'] == 'fix the login bug' and status['agent_process']['exit'] == 0
    assert 'working on: fix the login bug' in status['log_tail'] and 'done' in status['log_tail']


def test_runner_restart_keeps_the_brief_and_the_running_agent(runner):
    runner.call({'op': 'brief', 'purpose': 'keep me', 'agent': 'fake'})
    runner.procs[0].send_signal(signal.SIGKILL)
    runner.procs[0].wait(10)
    runner.start()
    ping = runner.call({'op': 'ping'})
    assert ping['briefed'] and ping['activity'] == 'active'  # the agent outlived its runner
    assert runner.call({'op': 'status'})['brief']['purpose'] == 'keep me'
    runner.flag.touch()
    wait_activity(runner, 'idle')


def test_bad_requests_get_clear_answers(runner):
    assert 'unknown op' in runner.call({'op': 'dance'})['error']
    assert 'unknown agent' in runner.call({'op': 'brief', 'purpose': 'x', 'agent': 'nope'})['error']
    assert 'cannot start the agent' in runner.call({'op': 'brief', 'purpose': 'x', 'agent': 'missing'})['error']
    assert 'no agent is running' in runner.call({'op': 'activity', 'state': 'blocked'})['error']
    assert runner.call({'op': 'ping'})['briefed'] is False


def test_call_to_a_dead_socket_says_not_answering(tmp_path):
    out = subprocess.run([sys.executable, RUNNER, 'call', '--socket', str(tmp_path / 'none.sock'), '{"op": "ping"}'],
                         capture_output=True, text=True, timeout=30, check=False)
    assert out.returncode == 3 and json.loads(out.stdout)['alive'] is False


def test_an_agent_that_fails_at_once_fails_the_brief_and_the_same_brief_starts_it_again(runner, tmp_path):
    config = json.loads((tmp_path / 'config.json').read_text())
    config['agents']['flaky'] = ['sh', '-c', 'echo "no key" >&2; exit 3']
    (tmp_path / 'config.json').write_text(json.dumps(config))
    failed = runner.call({'op': 'brief', 'purpose': 'x', 'agent': 'flaky'})
    assert not failed['ok'] and 'exited with status 3' in failed['error'] and 'no key' in failed['error']
    assert runner.call({'op': 'ping'})['activity'] == 'idle'
    # The configuration is read again at every brief: a corrected command line is used by the retry.
    config['agents']['flaky'] = ['sh', '-c', 'sleep 5']
    (tmp_path / 'config.json').write_text(json.dumps(config))
    retried = runner.call({'op': 'brief', 'purpose': 'x', 'agent': 'flaky'})
    assert retried['ok'] and not retried['already'] and retried['activity'] == 'active'
    assert runner.call({'op': 'brief', 'purpose': 'x', 'agent': 'flaky'})['already'] is True


def test_hooks_report_activity_through_the_environment(runner, tmp_path):
    config = json.loads((tmp_path / 'config.json').read_text())
    # The agent's own hook reports that it waits for approval, then works on.
    config['agents']['hooked'] = ['sh', '-c', 'python3 "$EPHEMERA_RUNNER" activity blocked && sleep 5']
    (tmp_path / 'config.json').write_text(json.dumps(config))
    assert runner.call({'op': 'brief', 'purpose': 'y', 'agent': 'hooked'})['ok']
    wait_activity(runner, 'blocked')


def test_a_socket_path_taken_by_something_else_is_refused(tmp_path):
    (tmp_path / 'runner.sock').mkdir()
    (tmp_path / 'config.json').write_text('{"agents": {}}')
    out = subprocess.run([sys.executable, RUNNER, 'serve', '--state-dir', str(tmp_path / 'state'), '--socket',
                          str(tmp_path / 'runner.sock'), '--config', str(tmp_path / 'config.json')],
                         capture_output=True, text=True, timeout=30, check=False)
    assert out.returncode == 5 and 'something other than a socket' in out.stdout
