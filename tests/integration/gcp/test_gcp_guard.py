"""The expiry guard runs for real, as the timer's service would run it: the standalone script under the system's
python3 (the standard library only), against the metadata server the fake serves for its instance and the Compute
Engine fake. It deletes an expired machine, leaves a live one, and when its service account may not delete the
instance it says so loudly in the guest's log and on the serial console, and tries again on the next tick."""

import os
import subprocess
import sys

from ansible_collections.ephemera.workspaces.plugins.module_utils.providers.gcp import guard
from tests.integration.gcp.test_gcp_provider import allocation, provider

SCRIPT = guard.__file__
PYTHON = '/usr/bin/python3' if os.path.exists('/usr/bin/python3') else sys.executable


def tick(fake, name, log, command='run'):
    meta = fake.metadata_server(name)
    done = subprocess.run([PYTHON, SCRIPT, command, '--metadata', meta, '--api', fake.url, '--log', str(log),
                           '--serial', meta + '/serial'], capture_output=True, text=True, timeout=60, check=False,
                          env={'PATH': '/usr/bin:/bin'})
    return done.returncode, done.stdout


def serial(p, name):
    return p.compute.call('instances.getSerialPortOutput', p.compute.instances.get_serial_port_output,
                          project=p.project, zone=p.zone, instance=name).contents


def make(fake, workspace, state, expires_at):
    p = provider(fake)
    a = allocation(p, workspace, state=state, expires_at=expires_at)
    p.wait(p.allocate(a), 10)
    return p, a.candidate


def test_guard_leaves_a_live_machine_and_deletes_an_expired_one(gcpfake, tmp_path):
    p, live = make(gcpfake, 'guard-live', 'ready', 4102444800)
    code, out = tick(gcpfake, live, tmp_path / 'live.log')
    assert code == 0 and live in gcpfake.instances
    assert 'skip (state ready: expires_at 4102444800 has not passed)' in out
    assert 'skip' in serial(p, live)
    assert tick(gcpfake, live, tmp_path / 'live.log', 'check')[0] == 0

    p, old = make(gcpfake, 'guard-expired', 'ready', 1000)
    code, out = tick(gcpfake, old, tmp_path / 'old.log')
    assert code == 0, out
    assert 'delete (state ready: expires_at 1000 has passed)' in out
    assert 'self-delete of instance %s requested' % old in (tmp_path / 'old.log').read_text()
    assert old not in gcpfake.instances
    p.wait(p.delete(p.find(live)), 10)


def test_refused_self_delete_is_loud_and_retried(gcpfake, tmp_path):
    p, name = make(gcpfake, 'guard-denied', 'failed', 1000)
    account = gcpfake.instances[name]['serviceAccounts'][0]['email']
    gcpfake.deny(account)
    try:
        code, out = tick(gcpfake, name, tmp_path / 'check.log', 'check')
        assert code == 3 and 'GUARD CANNOT WORK' in out
        code, out = tick(gcpfake, name, tmp_path / 'guard.log')
        assert code == 1
        assert 'GUARD FAILED: the self-delete of instance %s was refused' % name in out
        assert '403' in out and guard.PERMISSION in out
        assert 'GUARD FAILED' in (tmp_path / 'guard.log').read_text()
        assert 'GUARD FAILED' in serial(p, name)
        assert name in gcpfake.instances
    finally:
        gcpfake.denied.clear()
    # The next tick, with the permission granted, deletes it.
    code, out = tick(gcpfake, name, tmp_path / 'guard.log')
    assert code == 0 and name not in gcpfake.instances
