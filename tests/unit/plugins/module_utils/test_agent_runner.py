"""The agent runner as a real process on a real Unix socket."""

import json
import os
import signal
import subprocess
import sys
import threading
import time

import pytest
import yaml

from ansible_collections.ephemera.workspaces.plugins.module_utils.guest import agent_runner, operations

RUNNER = agent_runner.__file__
ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), '..', '..', '..', '..'))


@pytest.fixture
def runner(tmp_path):
    state = tmp_path / 'state'
    sock = str(tmp_path / 'runner.sock')
    config = tmp_path / 'config.json'
    flag = tmp_path / 'finish'
    config.write_text(json.dumps({'agents': {
        'fake': ['sh', '-c', 'echo "working on: {purpose}"; while [ ! -e %s ]; do sleep 0.05; done; echo done' % flag],
        'missing': ['/nonexistent/agent'],
        # Does nothing until stopped; works in a process of its own (no output) until it used 1.5 s of CPU time, on
        # a loaded machine too (for 30 s at most).
        'still': ['sleep', '120'],
        'busy': [sys.executable, '-c', 'import os, time\nif os.fork() == 0:\n    t = time.time()\n'
                 '    while time.process_time() < 1.5 and time.time() - t < 30:\n        pass\n    os._exit(0)\n'
                 'os.wait()']},
        'workdir': str(tmp_path)}))
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
    answer = runner.call({'op': 'ping'})
    assert {k: answer[k] for k in ('ok', 'alive', 'activity', 'briefed', 'version')} == {
        'ok': True, 'alive': True, 'activity': 'idle', 'briefed': False, 'version': 2}
    assert answer['agent']['events'] == [] and answer['agent']['session'] is None


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


def test_progress_moves_with_the_agents_cpu_time_and_not_while_it_only_runs(runner):
    """What the controller counts as work: an agent that runs and does nothing shows the same progress at every
    look; one whose child process computes shows its CPU time grow."""
    assert runner.call({'op': 'brief', 'purpose': 'wait', 'agent': 'still'})['activity'] == 'active'
    first = runner.call({'op': 'ping'})['agent']['progress']
    time.sleep(1)
    again = runner.call({'op': 'ping'})
    assert again['activity'] == 'active' and again['agent']['progress'] == first and first['cpu'] == 0
    os.kill(runner.call({'op': 'status'})['agent_process']['pid'], signal.SIGTERM)
    wait_activity(runner, 'idle')
    runner.call({'op': 'brief', 'purpose': 'compute', 'agent': 'busy'})
    deadline, seen = time.monotonic() + 30, first
    while time.monotonic() < deadline and not (seen.get('cpu') or 0) >= 1:
        time.sleep(0.2)
        seen = runner.call({'op': 'ping'})['agent']['progress']
    assert seen['cpu'] >= 1 and seen['events'] > first['events'], seen
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


def test_the_documented_stand_in_agent_gets_the_purpose_verbatim_and_runs_none_of_it(runner, tmp_path):
    """The stand-in agent of the Molecule scenario (extensions/molecule/host_vars/localhost.yml) takes the purpose
    as an argument of its script: quotes, $(...) and backquotes in it are printed as written, nothing is run. The
    same purpose pasted into the script's text, as the stand-in once had it, runs the commands it carries."""
    with open(os.path.join(ROOT, 'extensions', 'molecule', 'host_vars', 'localhost.yml')) as handle:
        documented = yaml.safe_load(handle)['ephemera_agents']['fake']
    marks = [str(tmp_path / name) for name in ('dollar', 'backquote', 'after')]
    purpose = 'it\'s "quoted" $(touch %s) `touch %s`; touch %s' % tuple(marks)
    config = json.loads((tmp_path / 'config.json').read_text())
    config['agents']['documented'] = documented
    (tmp_path / 'config.json').write_text(json.dumps(config))
    answer = runner.call({'op': 'brief', 'purpose': purpose, 'agent': 'documented'})
    assert answer['ok'], answer
    pid = runner.call({'op': 'status'})['agent_process']['pid']
    try:
        deadline = time.monotonic() + 10
        while 'working on: ' not in '\n'.join(runner.call({'op': 'status'})['log_tail']):
            assert time.monotonic() < deadline, runner.call({'op': 'status'})
            time.sleep(0.05)
        assert 'working on: ' + purpose in runner.call({'op': 'status'})['log_tail']
        assert [mark for mark in marks if os.path.exists(mark)] == []
    finally:
        os.killpg(pid, signal.SIGTERM)
    pasted = [part.replace('{purpose}', purpose) for part in ['sh', '-c', 'echo "working on: {purpose}"']]
    subprocess.run(pasted, capture_output=True, timeout=30, check=False)
    assert [mark for mark in marks if os.path.exists(mark)] == marks[:2]  # its "; touch" stays inside the quotes


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


# ---------------------------------------------------------------- structured event streams
#
# A stand-in that writes a claude-code stream-json scenario line by line: the runner's reading of the stream, unit
# by unit. tests/integration/agents runs the real CLIs end to end.

FAKE_STREAM = r'''
import json, os, sys, time
scenario = json.load(open(sys.argv[1]))
args = sys.argv[2:]
step = scenario['resume'] if '--resume' in args else scenario['first']
for item in step:
    if 'sleep' in item:
        time.sleep(item['sleep'])
    elif 'wait_for' in item:
        while not os.path.exists(item['wait_for']):
            time.sleep(0.02)
    elif 'env' in item:
        print(json.dumps({'type': 'assistant', 'message': {'content': [
            {'type': 'text', 'text': 'the key is %s' % os.environ.get(item['env'])}]}}), flush=True)
    elif 'args' in item:
        print(json.dumps({'type': 'assistant', 'message': {'content': [{'type': 'text', 'text': ' '.join(args)}]}}),
              flush=True)
    elif 'exit' in item:
        sys.exit(item['exit'])
    else:
        print(json.dumps(item), flush=True)
'''


def init(session='s-1'):
    return {'type': 'system', 'subtype': 'init', 'session_id': session}


def tool(name, **args):
    return {'type': 'assistant', 'message': {'content': [{'type': 'tool_use', 'name': name, 'input': args}]}}


def result(text='done', denials=(), error=False):
    return {'type': 'result', 'subtype': 'error_during_execution' if error else 'success', 'is_error': error,
            'result': text, 'permission_denials': list(denials)}


@pytest.fixture
def streamed(runner, tmp_path):
    """Configure the agent 'streamer' with a scenario: {'first': [...], 'resume': [...]}."""
    fake = tmp_path / 'fake_agent.py'
    fake.write_text(FAKE_STREAM)

    def configure(scenario, credentials=None):
        (tmp_path / 'scenario.json').write_text(json.dumps(scenario))
        config = json.loads((tmp_path / 'config.json').read_text())
        config['agents']['streamer'] = {
            'command': [sys.executable, str(fake), str(tmp_path / 'scenario.json'), '{purpose}'],
            'continue': [sys.executable, str(fake), str(tmp_path / 'scenario.json'), '--resume', '{session}',
                         '{purpose}'],
            'events': 'claude'}
        if credentials is not None:
            env = tmp_path / 'agent.env'
            env.write_text(''.join('%s=%s\n' % kv for kv in credentials.items()))
            config['environment_file'] = str(env)
        (tmp_path / 'config.json').write_text(json.dumps(config))
    return configure


def wait_agent(r, check, timeout=10):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        answer = r.call({'op': 'ping'})
        if check(answer):
            return answer
        time.sleep(0.05)
    raise AssertionError('the agent never got there: %s' % answer)


def test_the_event_stream_names_the_session_and_moves_activity_from_active_to_idle(runner, streamed, tmp_path):
    gate = tmp_path / 'gate'
    streamed({'first': [init('sess-42'), tool('Write', file_path='/w/farewell.py', content='x'), {'wait_for': str(gate)},
                        {'type': 'assistant', 'message': {'content': [{'type': 'text', 'text': 'Wrote it.'}]}},
                        result('Wrote farewell.py')]})
    assert runner.call({'op': 'brief', 'purpose': 'add a farewell', 'agent': 'streamer'})['ok']
    working = wait_agent(runner, lambda a: a['agent']['answered'])
    assert working['activity'] == 'active' and working['agent']['session'] == 'sess-42'
    assert [e['text'] for e in working['agent']['events'] if e['type'] == 'tool'] == ['Write /w/farewell.py']
    gate.touch()
    done = wait_agent(runner, lambda a: a['activity'] == 'idle')
    agent = done['agent']
    assert agent['exit'] == 0 and agent['error'] is None and agent['waiting'] == []
    assert [e['type'] for e in agent['events']][-3:] == ['text', 'result', 'exited']


def test_an_approval_the_headless_agent_could_not_get_leaves_it_blocked(runner, streamed):
    streamed({'first': [init(), tool('Bash', command='rm -rf build'),
                        result('I need permission to run rm', denials=[{'tool_name': 'Bash',
                                                                        'tool_input': {'command': 'rm -rf build'}}])]})
    assert runner.call({'op': 'brief', 'purpose': 'clean up', 'agent': 'streamer'})['ok']
    blocked = wait_agent(runner, lambda a: not a['agent']['running'])
    assert blocked['activity'] == 'blocked'
    assert blocked['agent']['waiting'] == ['needs approval: Bash rm -rf build']


def test_a_refused_key_is_an_auth_error_and_the_same_brief_starts_the_agent_again(runner, streamed):
    # The refusal comes well after the runner's start watch (START_GRACE, 0.5 s), even on a loaded machine: the brief
    # itself succeeds, and the error is the agent's, seen in its events.
    streamed({'first': [init(), {'sleep': 2.0},
                        {'type': 'assistant', 'error': 'authentication_failed', 'message': {'content': [
                            {'type': 'text', 'text': 'Invalid API key \u00b7 Fix external API key'}]}},
                        result('Invalid API key', error=True), {'exit': 1}]})
    assert runner.call({'op': 'brief', 'purpose': 'p', 'agent': 'streamer'})['ok']
    failed = wait_agent(runner, lambda a: not a['agent']['running'])
    assert failed['activity'] == 'idle'
    assert failed['agent']['error']['kind'] == 'auth' and 'Invalid API key' in failed['agent']['error']['message']
    streamed({'first': [init(), result('ok')]})
    again = runner.call({'op': 'brief', 'purpose': 'p', 'agent': 'streamer'})
    assert again['ok'] and again['already'] is False
    fine = wait_agent(runner, lambda a: not a['agent']['running'])
    assert fine['agent']['error'] is None and fine['activity'] == 'idle'


def test_a_message_continues_the_session_its_events_named_and_waits_for_an_idle_agent(runner, streamed, tmp_path):
    gate = tmp_path / 'gate'
    streamed({'first': [init('sess-7'), {'wait_for': str(gate)}, result()],
              'resume': [init('sess-7'), {'args': True}, result('second change made')]})
    assert runner.call({'op': 'brief', 'purpose': 'first change', 'agent': 'streamer'})['ok']
    wait_agent(runner, lambda a: a['agent']['session'] == 'sess-7')
    busy = runner.call({'op': 'message', 'text': 'now the second'})
    assert not busy['ok'] and busy['busy'] and 'still working' in busy['error']
    gate.touch()
    wait_agent(runner, lambda a: a['activity'] == 'idle')
    sent = runner.call({'op': 'message', 'text': 'now the second'})
    assert sent['ok'] and sent['agent']['briefs'] == 2
    after = wait_agent(runner, lambda a: not a['agent']['running'] and a['agent']['events'][-1]['type'] == 'exited')
    texts = [e['text'] for e in after['agent']['events'] if e['type'] == 'text']
    assert texts[-1] == '--resume sess-7 now the second'
    assert after['activity'] == 'idle' and after['agent']['session'] == 'sess-7'


def test_a_message_before_any_brief_or_to_an_agent_without_a_continue_line_is_refused(runner):
    assert 'never briefed' in runner.call({'op': 'message', 'text': 'x'})['error']
    assert runner.call({'op': 'brief', 'purpose': 'p', 'agent': 'fake'})['ok']
    runner.flag.touch()
    wait_activity(runner, 'idle')
    assert 'cannot continue a session' in runner.call({'op': 'message', 'text': 'x'})['error']


def test_a_restarted_runner_reads_on_where_the_last_one_stopped(runner, streamed, tmp_path):
    gate = tmp_path / 'gate'
    streamed({'first': [init(), tool('Edit', file_path='a.py'), {'wait_for': str(gate)}, tool('Edit', file_path='b.py'),
                        result()]})
    assert runner.call({'op': 'brief', 'purpose': 'p', 'agent': 'streamer'})['ok']
    wait_agent(runner, lambda a: a['agent']['answered'])
    runner.procs[0].send_signal(signal.SIGKILL)
    runner.procs[0].wait(10)
    runner.start()
    gate.touch()
    done = wait_agent(runner, lambda a: not a['agent']['running'])
    tools = [e['text'] for e in done['agent']['events'] if e['type'] == 'tool']
    assert tools == ['Edit a.py', 'Edit b.py']  # each read once, none lost
    assert done['activity'] == 'idle'


def test_the_credentials_reach_the_agent_environment_but_no_event(runner, streamed):
    streamed({'first': [init(), {'env': 'ANTHROPIC_API_KEY'}, result()]}, credentials={'ANTHROPIC_API_KEY': 'sk-ant-secret-123'})
    assert runner.call({'op': 'brief', 'purpose': 'p', 'agent': 'streamer'})['ok']
    done = wait_agent(runner, lambda a: not a['agent']['running'])
    said = [e['text'] for e in done['agent']['events'] if e['type'] == 'text']
    # The agent had the key (it printed it), and the runner's events carry it masked.
    assert said == ['the key is ********']
    assert 'sk-ant-secret-123' not in json.dumps(runner.call({'op': 'status'}))


def test_an_agent_that_retries_a_refused_key_is_stopped_at_once_with_the_auth_error(runner, streamed):
    retry = {'type': 'system', 'subtype': 'api_retry', 'attempt': 1, 'max_retries': 10, 'error_status': 401,
             'error': 'authentication_failed'}
    streamed({'first': [init(), retry, {'sleep': 60}, result()]})
    started = time.monotonic()
    assert runner.call({'op': 'brief', 'purpose': 'p', 'agent': 'streamer'})['ok']
    stopped = wait_agent(runner, lambda a: not a['agent']['running'], timeout=15)
    assert time.monotonic() - started < 10
    assert stopped['agent']['error']['kind'] == 'auth' and stopped['activity'] == 'idle'
    assert 'stopped' in [e['type'] for e in stopped['agent']['events']]


@pytest.fixture
def process_tree():
    """A real process tree: a parent whose child computed for 0.3 s of CPU and sleeps, and whose other child
    sleeps; the parent's pid, killed afterwards with its children."""
    code = ('import os, subprocess, sys, time\n'
            'if os.fork() == 0:\n'
            '    while time.process_time() < 0.3:\n'
            '        pass\n'
            '    time.sleep(60)\n'
            '    os._exit(0)\n'
            'subprocess.Popen(["sleep", "60"])\n'
            'print("ready", flush=True)\n'
            'time.sleep(60)\n')
    proc = subprocess.Popen([sys.executable, '-c', code], stdout=subprocess.PIPE, text=True, start_new_session=True)
    assert proc.stdout.readline() == 'ready\n'
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and agent_runner.cpu_seconds(proc.pid) < 0.3:
        time.sleep(0.05)
    yield proc.pid
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


def test_cpu_seconds_walks_down_the_agents_own_processes_only(process_tree, monkeypatch):
    """The agent's CPU time counts its live descendants, and is found without reading every process of the guest
    (a guest may run thousands): the walk gives what a scan of /proc gives, and needs no scan."""
    by_scan = agent_runner._cpu_seconds_by_scan(process_tree)
    assert by_scan >= 0.3
    monkeypatch.setattr(agent_runner, '_proc_stats', lambda: pytest.fail('the whole of /proc was scanned'))
    walked = agent_runner.cpu_seconds(process_tree)
    assert abs(walked - by_scan) < 0.05, (walked, by_scan)
    assert agent_runner.cpu_seconds(2 ** 22 + 1) is None


def test_cpu_seconds_scans_proc_where_the_kernel_lists_no_children(process_tree, monkeypatch):
    """A kernel built without CONFIG_PROC_CHILDREN has no /proc/PID/task/TID/children: one scan of /proc instead."""
    monkeypatch.setattr(agent_runner, '_lists_children', lambda pid: False)
    monkeypatch.setattr(agent_runner, '_children', lambda pid: pytest.fail('a children list was read'))
    assert abs(agent_runner.cpu_seconds(process_tree) - agent_runner._cpu_seconds_by_scan(process_tree)) < 0.05
    assert agent_runner.cpu_seconds(process_tree) >= 0.3


class ShellGuest:
    """A guest that is this machine's shell: runs the command as SSH would give it to the guest's sh."""

    def __init__(self, env):
        self.env = env

    def run(self, command, stdin=None, check=True, timeout=None, what=None, point=True, max_output=None):
        return subprocess.run(['sh', '-c', command], input=stdin, capture_output=True, text=True, timeout=timeout,
                              env=self.env, check=False)


def test_the_sweeps_call_answers_whatever_python_environment_the_guest_has(runner, tmp_path):
    """The call the sweep makes on every live workspace runs the runner's own client isolated and without ``site``:
    what the guest's Python environment adds at start-up (here a sitecustomize that writes and fails) is never run,
    and never costs the call its answer."""
    hooks = tmp_path / 'hooks'
    hooks.mkdir()
    ran = tmp_path / 'sitecustomize-ran'
    (hooks / 'sitecustomize.py').write_text('open(%r, "w").write("ran")\nprint("{\\"ok\\": false}")\n'
                                            'raise SystemExit(7)\n' % str(ran))
    env = dict(os.environ, PYTHONPATH=str(hooks), PATH=os.environ.get('PATH', '/usr/bin:/bin'))
    # The guest's python3 is the one on PATH, as it is in a guest; it must find no sitecustomize of its own either.
    layout = type('Layout', (), {'runner': RUNNER, 'socket': str(tmp_path / 'runner.sock'), 'agent_user': 'agent'})
    answer = operations.runner_call(ShellGuest(env), layout, 'agent', {'op': 'ping'}, timeout=10)
    assert answer['ok'] is True and answer['alive'] is True and answer['activity'] == 'idle', answer
    assert not ran.exists()
    # The same environment does reach a python3 started without the flags: the hook is real.
    subprocess.run(['python3', '-c', 'pass'], env=env, capture_output=True, check=False)
    assert ran.read_text() == 'ran'


def test_the_watch_looks_five_times_a_second_while_the_agent_moves_and_once_a_second_while_it_waits(monkeypatch):
    """A thousand waiting runners on one host must not take its cores: the watch slows down while nothing changes
    and is quick again as soon as the events or the activity move (the real runner is the tests' above)."""
    looks = iter([(False, 'idle')] * 5 + [(True, 'active'), (False, 'active'), (False, 'idle'), (False, 'idle')])
    pauses = []

    class Quiet(Exception):
        pass

    class Runner:
        lock = threading.Lock()

        def read_stream(self):
            self.look = next(looks)
            return self.look[0]

        def activity(self):
            return self.look[1]

    def sleep(seconds):
        pauses.append(seconds)
        if len(pauses) == 9:
            raise Quiet()
    monkeypatch.setattr(agent_runner.time, 'sleep', sleep)
    with pytest.raises(Quiet):
        agent_runner._watch(Runner())
    assert pauses == [0.2, 0.4, 0.8, 1.0, 1.0, 0.2, 0.4, 0.2, 0.4]
