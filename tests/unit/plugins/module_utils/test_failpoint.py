"""Failpoints: inert by default, a trace of every point passed, and a kill of the whole run at the n-th passage."""

import json
import os
import subprocess
import sys
import textwrap
import threading
import time

from ansible_collections.ephemera.workspaces.plugins.module_utils.core import failpoint
from tests.localpve.system import left_with_environment

SCRIPT = textwrap.dedent('''
    import os, subprocess, sys, time
    from ansible_collections.ephemera.workspaces.plugins.module_utils.core import failpoint
    # A child process that is part of the run: the kill takes it too.
    child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(20)'], stdout=subprocess.DEVNULL)
    print(child.pid, flush=True)
    failpoint.enter('w1', 'create.clone')
    for n in range(3):
        failpoint.reached('pve POST /nodes/*/lxc/*/clone')
    print('survived', flush=True)
    child.kill()
''')


def run(tmp_path, kill=None):
    env = dict(os.environ, **{failpoint.TRACE_ENV: str(tmp_path / 'trace')})
    env.pop(failpoint.KILL_ENV, None)
    if kill:
        env[failpoint.KILL_ENV] = json.dumps(kill)
    # The script is the run: this test process, which did not get the trace setting, is not part of it.
    return subprocess.run([sys.executable, '-c', SCRIPT], env=env, capture_output=True, text=True, timeout=60,
                          check=False)


def trace(tmp_path):
    with open(tmp_path / 'trace') as src:
        return src.read().splitlines()


def test_without_the_trace_variable_nothing_is_written_or_killed(tmp_path, monkeypatch):
    monkeypatch.delenv(failpoint.TRACE_ENV, raising=False)
    monkeypatch.setenv(failpoint.KILL_ENV, json.dumps({'workspace': '-', 'point': '- x', 'nth': 1}))
    failpoint.enter('w1', 'create.vmid')
    failpoint.reached('x')
    assert not failpoint.active() and os.listdir(tmp_path) == []


def test_every_point_passed_is_traced_with_its_workspace_and_step(tmp_path):
    done = run(tmp_path)
    assert done.returncode == 0 and 'survived' in done.stdout
    assert trace(tmp_path) == ['w1\tcreate.clone begin'] + ['w1\tcreate.clone pve POST /nodes/*/lxc/*/clone'] * 3


def test_the_nth_passage_kills_the_run_and_everything_below_it(tmp_path):
    done = run(tmp_path, {'workspace': 'w1', 'point': 'create.clone pve POST /nodes/*/lxc/*/clone', 'nth': 2})
    assert done.returncode == -9 and 'survived' not in done.stdout
    assert trace(tmp_path)[-1] == 'w1\tcreate.clone pve POST /nodes/*/lxc/*/clone' and len(trace(tmp_path)) == 3
    # SIGKILL is delivered at once but a busy machine may take a moment to finish the child off; one the kill
    # missed would still be sleeping in 5 s.
    assert gone_within(int(done.stdout.split()[0]), 5)


def gone_within(pid, seconds):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            with open('/proc/%d/stat' % pid) as src:
                if src.read().split(')')[-1].split()[0] in ('Z', 'X'):
                    return True
        except FileNotFoundError:
            return True
        time.sleep(0.05)
    return False


SPAWNER = textwrap.dedent('''
    import os, subprocess, sys, time
    from ansible_collections.ephemera.workspaces.plugins.module_utils.core import failpoint
    # A part of the run that keeps forking while the kill reads the process tree: nothing it forks may escape.
    spawner = subprocess.Popen([sys.executable, '-c', 'import os, time\\nwhile True:\\n    if os.fork() == 0:\\n'
                                '        time.sleep(30)\\n        os._exit(0)\\n    time.sleep(0.002)'],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(0.5)
    failpoint.enter('w1', 'create.clone')
    failpoint.reached('pve POST /nodes/*/lxc/*/clone')
    print('survived', flush=True)
    spawner.kill()
''')


def test_a_kill_leaves_no_process_of_the_run_even_one_forked_while_it_ran(tmp_path):
    trace_file = str(tmp_path / 'trace')
    env = dict(os.environ, **{failpoint.TRACE_ENV: trace_file, failpoint.KILL_ENV: json.dumps(
        {'workspace': 'w1', 'point': 'create.clone pve POST /nodes/*/lxc/*/clone'})})
    done = subprocess.run([sys.executable, '-c', SPAWNER], env=env, capture_output=True, text=True, timeout=60,
                          check=False)
    assert done.returncode == -9 and 'survived' not in done.stdout
    # A killed process may take a moment to be gone; one that escaped the kill would still be there in 5 s.
    assert left_with_environment(('%s=%s' % (failpoint.TRACE_ENV, trace_file)).encode()) == []


def test_another_workspace_or_point_does_not_kill(tmp_path):
    done = run(tmp_path, {'workspace': 'w2', 'point': 'create.clone pve POST /nodes/*/lxc/*/clone', 'nth': 1})
    assert done.returncode == 0 and 'survived' in done.stdout


def test_a_prefix_ending_in_a_star_names_every_workspace_of_that_prefix(tmp_path):
    done = run(tmp_path, {'workspace': 'w*', 'point': 'create.clone pve POST /nodes/*/lxc/*/clone', 'nth': 2})
    assert done.returncode == -9 and len(trace(tmp_path)) == 3
    os.makedirs(tmp_path / 'other')
    done = run(tmp_path / 'other', {'workspace': 'x*', 'point': 'create.clone pve POST /nodes/*/lxc/*/clone', 'nth': 1})
    assert done.returncode == 0 and 'survived' in done.stdout
    assert failpoint.names('w*', 'w1') and not failpoint.names('w1', 'w12') and not failpoint.names('*w', 'w')


def test_api_points_name_the_kind_of_call_not_the_object():
    assert failpoint.api_point('post', '/nodes/pve2/lxc/104/status/start') == 'pve POST /nodes/*/lxc/*/status/start'
    assert failpoint.api_point('DELETE', '/nodes/pve1/lxc/9000') == 'pve DELETE /nodes/*/lxc/*'
    assert failpoint.api_point('PUT', '/pools/disposable-workspaces') == 'pve PUT /pools/*'


def test_each_thread_traces_its_own_workspace_and_a_thread_without_one_the_last_entered(tmp_path, monkeypatch):
    """The expiry sweep releases several workspaces at once, one per thread: a point belongs to the workspace its
    thread entered, whatever another thread entered since; a thread that entered none (one a step started) takes
    the scope entered last in the process, as before."""
    monkeypatch.setenv(failpoint.TRACE_ENV, str(tmp_path / 'trace'))
    monkeypatch.delenv(failpoint.KILL_ENV, raising=False)
    entered, go = threading.Barrier(2), threading.Event()

    def release(name):
        failpoint.enter(name, 'destroy.delete')
        entered.wait(5)  # both have entered before either passes its point
        go.wait(5)
        failpoint.reached('pve DELETE /nodes/*/lxc/*')

    threads = [threading.Thread(target=release, args=(name,)) for name in ('w1', 'w2')]
    for thread in threads:
        thread.start()
    go.set()
    for thread in threads:
        thread.join(10)
    helper = threading.Thread(target=failpoint.reached, args=('guest command',))
    helper.start()
    helper.join(10)
    lines = trace(tmp_path)
    assert sorted(lines[:2]) == ['w1\tdestroy.delete begin', 'w2\tdestroy.delete begin']
    assert sorted(lines[2:4]) == ['w1\tdestroy.delete pve DELETE /nodes/*/lxc/*',
                                  'w2\tdestroy.delete pve DELETE /nodes/*/lxc/*']
    assert lines[4] in ('w1\tdestroy.delete guest command', 'w2\tdestroy.delete guest command')
