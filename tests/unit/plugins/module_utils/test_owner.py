"""Owner liveness from real processes and /proc."""

import os
import subprocess
import sys
import time

from ansible_collections.ephemera.workspaces.plugins.module_utils.core.run_identity import Owner, proc_start_time


def test_start_time_is_field_22_after_the_last_paren(tmp_path):
    # A command name with spaces and parentheses must not shift the fields.
    script = tmp_path / 'we) ird (name'
    script.write_text('import time\ntime.sleep(30)\n')
    proc = subprocess.Popen([sys.executable, str(script)])
    try:
        with open('/proc/%d/stat' % proc.pid) as f:
            raw = f.read()
        expected = int(raw[raw.rfind(')') + 1:].split()[19])
        assert proc_start_time(proc.pid) == expected
        assert proc_start_time(proc.pid) >= proc_start_time(os.getpid())
    finally:
        proc.kill()
        proc.wait()


def test_current_process_is_alive():
    assert Owner.current().is_alive()


def test_dead_process_is_dead():
    proc = subprocess.Popen([sys.executable, '-c', 'pass'])
    proc.wait()
    owner = Owner.current(pid=proc.pid)
    assert owner.start_time is None or not owner.is_alive()
    assert not Owner(Owner.current().host, proc.pid, 12345).is_alive()


def test_reused_pid_with_another_start_time_is_dead():
    me = Owner.current()
    impostor = Owner(me.host, me.pid, me.start_time - 1)
    assert impostor.liveness() == 'dead'
    assert Owner(me.host, me.pid, me.start_time).liveness() == 'alive'


def test_other_host_is_judged_by_its_lease():
    now = time.time()
    assert Owner('elsewhere', 1, 1, lease_expires=now + 30).is_alive(now)
    assert not Owner('elsewhere', 1, 1, lease_expires=now - 1).is_alive(now)


def test_round_trip():
    me = Owner.current(lease_seconds=60)
    again = Owner.from_dict(me.to_dict())
    assert again == me and again.lease_expires == me.lease_expires


def _stat(pid):
    with open('/proc/%d/stat' % pid) as f:
        raw = f.read()
    return raw[raw.rfind(')') + 1:].split()


def test_zombie_is_dead():
    proc = subprocess.Popen([sys.executable, '-c', 'pass'])
    try:
        started = int(_stat(proc.pid)[19])
        deadline = time.monotonic() + 30
        while _stat(proc.pid)[0] != 'Z':  # exited, not reaped yet
            assert time.monotonic() < deadline
            time.sleep(0.01)
        assert not Owner(Owner.current().host, proc.pid, started).is_alive()
    finally:
        proc.wait()


FAKE_PLAYBOOK = '''
import os, subprocess, sys
worker = os.fork()
if worker == 0:
    # Like Ansible's forked workers: same command line as the main process; the module runs under a shell.
    code = 'from ansible_collections.ephemera.workspaces.plugins.module_utils.core.run_identity import run_pid; print(run_pid())'
    out = subprocess.run(['/bin/sh', '-c', '"%s" -c "%s"' % (sys.executable, code)], stdout=subprocess.PIPE)
    sys.stdout.write(out.stdout.decode())
    sys.stdout.flush()
    os._exit(0)
os.waitpid(worker, 0)
'''


def test_run_pid_is_the_main_ansible_playbook_process(tmp_path):
    script = tmp_path / 'ansible-playbook'
    script.write_text(FAKE_PLAYBOOK)
    proc = subprocess.Popen([sys.executable, str(script), 'site.yml'], stdout=subprocess.PIPE, text=True)
    out = proc.communicate(timeout=60)[0]
    assert int(out.strip()) == proc.pid


def test_run_pid_without_ansible_is_the_topmost_python_ancestor():
    code = 'from ansible_collections.ephemera.workspaces.plugins.module_utils.core.run_identity import run_pid; print(run_pid())'
    out = subprocess.run(['/bin/sh', '-c', '"%s" -c "%s"' % (sys.executable, code)], stdout=subprocess.PIPE, text=True,
                         check=True)
    found = int(out.stdout.strip())
    ancestors, pid = [], os.getpid()
    while pid > 1:
        ancestors.append(pid)
        pid = int(_stat(pid)[1])
    assert found in ancestors
    assert os.path.basename(open('/proc/%d/cmdline' % found).read().split('\0')[0]).startswith('python')
