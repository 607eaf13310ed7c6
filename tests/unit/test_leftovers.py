"""The end-of-session check finds what a test left running under its temporary directory, and fails the run."""

import os
import signal
import subprocess
import sys
import textwrap

from tests.leftovers import leftovers
from tests.localpve import system

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _stop(proc):
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(10)


def test_a_process_naming_the_directory_is_found_and_one_naming_a_sibling_is_not(tmp_path):
    base = tmp_path / 'run'
    base.mkdir()
    sibling = tmp_path / 'run5'
    sibling.mkdir()
    procs = {
        'cwd': subprocess.Popen(['sleep', '61'], cwd=str(base)),
        'argv': subprocess.Popen(['sh', '-c', 'sleep 62; : %s/state' % base], cwd='/'),
        'env': subprocess.Popen(['sleep', '63'], cwd='/', env=dict(os.environ, SOME_JOURNAL=str(base / 'j.sqlite'))),
        'sibling': subprocess.Popen(['sleep', '64'], cwd=str(sibling)),
    }
    try:
        found = leftovers([str(base)])
        assert set(found) == set(procs[k].pid for k in ('cwd', 'argv', 'env')), found
        assert found[procs['cwd'].pid] == 'sleep 61'
        assert str(base) in found[procs['argv'].pid]
    finally:
        for proc in procs.values():
            _stop(proc)
    assert leftovers([str(base)]) == {}


STRAY = '''
import os
import subprocess


def test_starts_a_process_and_leaves_it_running(tmp_path):
    stray = subprocess.Popen(['sleep', '120'], cwd=str(tmp_path), start_new_session=True)
    with open(os.environ['STRAY_PID_FILE'], 'w') as out:
        out.write(str(stray.pid))


def test_another_file_next_to_it():
    pass
'''

CLEAN = '''
import subprocess


def test_starts_a_process_and_ends_it(tmp_path):
    subprocess.run(['true'], cwd=str(tmp_path), check=True)
'''


def _pytest(tmp_path, files, workers):
    suite = tmp_path / 'suite'
    suite.mkdir()
    for name, text in files.items():
        (suite / name).write_text(textwrap.dedent(text))
    env = dict(os.environ, PYTHONPATH=ROOT, STRAY_PID_FILE=str(tmp_path / 'stray.pid'))
    argv = [sys.executable, '-m', 'pytest', '-p', 'tests.leftovers', '-p', 'no:cacheprovider', '--rootdir',
            str(suite), '--basetemp', str(tmp_path / 'base'), str(suite)]
    if workers:
        argv += ['-n', str(workers), '--dist', 'loadfile']
    return subprocess.run(argv, cwd=str(tmp_path), env=env, capture_output=True, text=True, timeout=120,
                          check=False)


def test_a_session_that_leaves_a_process_running_fails_naming_it_and_the_process_is_ended(tmp_path):
    # Two xdist workers, as make integration runs them: the stray comes from a worker, the controller finds it.
    done = _pytest(tmp_path, {'test_stray.py': STRAY, 'test_other.py': 'def test_nothing():\n    pass\n'}, workers=2)
    stray = int((tmp_path / 'stray.pid').read_text())
    try:
        assert done.returncode == 1, done.stdout + done.stderr
        assert '3 passed' in done.stdout
        assert 'left running' in done.stdout
        assert '%d sleep 120' % stray in done.stdout
        assert system.wait_gone([stray], 10), 'the stray was not ended'
    finally:
        if system.alive(stray) and system.cmdline(stray) == 'sleep 120':
            os.kill(stray, signal.SIGKILL)


def test_a_session_that_ends_what_it_started_passes(tmp_path):
    done = _pytest(tmp_path, {'test_clean.py': CLEAN}, workers=0)
    assert done.returncode == 0, done.stdout + done.stderr
    assert 'left running' not in done.stdout
