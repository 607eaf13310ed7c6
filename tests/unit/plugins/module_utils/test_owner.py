"""Owner liveness from real processes and /proc."""

import os
import subprocess
import sys
import time

from ansible_collections.ephemera.workspaces.plugins.module_utils.owner import Owner, proc_start_time


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
