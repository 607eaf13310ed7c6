"""Failpoints are for the crash tests only, but an operator may export their variables by mistake: the kill stays
within the run (never the shell that exported them, nor what else that shell runs), and the trace file is never
opened through a symbolic link. docs/internals/security.md, finding 14."""

import json
import os
import subprocess
import sys
import textwrap
import time

from ansible_collections.ephemera.workspaces.plugins.module_utils.core import failpoint

RUN = textwrap.dedent('''
    import subprocess, sys
    from ansible_collections.ephemera.workspaces.plugins.module_utils.core import failpoint
    child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(30)'], stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL)
    print('child', child.pid, flush=True)
    failpoint.enter('w1', 'create.clone')
    failpoint.reached('pve POST /nodes/*/lxc/*/clone')
    print('run survived', flush=True)
    child.kill()
''')


def alive(pid, within=5.0):
    """True when ``pid`` still runs ``within`` seconds from now (a killed process may take a moment to go)."""
    deadline = time.monotonic() + within
    while True:
        try:
            with open('/proc/%d/stat' % pid) as src:
                running = src.read().rpartition(')')[2].split()[0] != 'Z'
        except OSError:
            running = False
        if not running or time.monotonic() > deadline:
            return running
        time.sleep(0.05)


def test_a_kill_exported_in_a_shell_kills_the_run_and_never_the_shell(tmp_path):
    env = dict(os.environ, **{failpoint.TRACE_ENV: str(tmp_path / 'trace'), failpoint.KILL_ENV: json.dumps(
        {'workspace': 'w1', 'point': 'create.clone pve POST /nodes/*/lxc/*/clone'})})
    # The shell carries the variables (exported), runs something else beside the run, then the run.
    script = ('sleep 30 & echo bystander $!; "$0" -c "$1"; echo shell survived $?; kill -0 $! && echo still alive; '
              'kill $!')
    done = subprocess.run(['bash', '-c', script, sys.executable, RUN], env=env, capture_output=True, text=True,
                          timeout=60, check=False)
    out = {line.split()[0]: line.split()[1:] for line in done.stdout.splitlines()}
    assert out['shell'] == ['survived', '137'], done.stdout + done.stderr
    assert 'run' not in out and out['still'] == ['alive']
    assert not alive(int(out['child'][0]))


def test_the_trace_file_is_never_opened_through_a_symbolic_link(tmp_path):
    victim = tmp_path / 'victim'
    victim.write_text('precious\n')
    link = tmp_path / 'trace'
    os.symlink(str(victim), str(link))
    env = dict(os.environ, **{failpoint.TRACE_ENV: str(link)})
    env.pop(failpoint.KILL_ENV, None)
    done = subprocess.run([sys.executable, '-c', RUN], env=env, capture_output=True, text=True, timeout=60,
                          check=False)
    assert victim.read_text() == 'precious\n'
    assert done.returncode != 0 and 'TraceRefused' in done.stderr and 'cannot open the failpoint trace' in done.stderr
    for line in done.stdout.splitlines():
        if line.startswith('child '):
            os.kill(int(line.split()[1]), 9)


def test_a_trace_file_of_another_user_is_refused(tmp_path):
    trace = tmp_path / 'trace'
    trace.write_text('')
    os.chown(str(trace), 65534, -1)
    env = dict(os.environ, **{failpoint.TRACE_ENV: str(trace)})
    env.pop(failpoint.KILL_ENV, None)
    if os.geteuid() == 0:
        # root's own files are trusted; another user's are not, even for root.
        done = subprocess.run([sys.executable, '-c', RUN], env=env, capture_output=True, text=True, timeout=60,
                              check=False)
        assert done.returncode != 0 and 'not a regular file of this user' in done.stderr
        assert trace.read_text() == ''
        for line in done.stdout.splitlines():
            if line.startswith('child '):
                os.kill(int(line.split()[1]), 9)
