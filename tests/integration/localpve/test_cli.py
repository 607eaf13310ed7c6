"""The command line: up, status, fault, down as processes; bad input gets a clear message and leaves nothing."""

import json
import os
import signal
import socket
import subprocess
import sys

import pytest

from tests.localpve import ControlClient, clone_workspace, proxmox, ssh
from tests.localpve.cluster import pick_host
from tests.localpve.config import ROOT
from tests.localpve.process import leftover_listeners
from tests.localpve.system import alive, cmdline, listening, wait_gone, with_environment


def cli(state, *args):
    return subprocess.run([sys.executable, '-m', 'tests.localpve'] + list(args) + ['--state-dir', str(state)],
                          cwd=ROOT, capture_output=True, text=True, timeout=120, check=False)


def mentioning(text):
    """Pids of processes whose command line contains text."""
    return [int(p) for p in os.listdir('/proc') if p.isdigit() and text in cmdline(int(p))]


def test_up_status_fault_down_and_up_again(tmp_path):
    state = tmp_path / 'state'
    host = pick_host()
    started = cli(state, 'up', '--host', host, '--api-port', '0', '--proxy-port', '0', '--time-scale', '0', '--json')
    assert started.returncode == 0, started.stderr
    info = json.loads(started.stdout)
    for key in ('api_url', 'api_host', 'api_port', 'ca_file', 'user', 'password', 'token_id', 'token_secret', 'nodes',
                'template_vmid', 'pool', 'ssh_private_key', 'ssh_user', 'address_range', 'guest_root', 'proxy_url',
                'control'):
        assert info[key], key
    api = proxmox(info)
    ws = clone_workspace(api, info, hostname='cli')
    ssh(info, ws.address).close()

    status = cli(state, 'status')
    assert status.returncode == 0 and 'running (pid {0})'.format(info['pid']) in status.stdout
    guests = json.loads(cli(state, 'status', '--json').stdout)['guests']
    sshd = [g['sshd_pid'] for g in guests if g['vmid'] == ws.vmid][0]
    assert alive(sshd)
    added = cli(state, 'fault', 'proxy', 'drop-response', 'POST', '/nodes/*/lxc/*/clone', '--times', '2')
    assert added.returncode == 0 and json.loads(added.stdout)['times'] == 2
    listed = json.loads(cli(state, 'fault', 'list').stdout)
    assert [r['action'] for r in listed['proxy_rules']] == ['drop-response']

    stopped = cli(state, 'down')
    assert stopped.returncode == 0, stopped.stderr
    assert not alive(info['pid']) and not alive(sshd)
    assert leftover_listeners(info) == []
    assert not [s for s in listening() if s[0] in (host, ws.address)]
    assert not mentioning(str(state))
    assert cli(state, 'status').returncode == 3

    again = cli(state, 'up', '--host', host, '--api-port', '0', '--proxy-port', '0', '--time-scale', '0', '--json')
    assert again.returncode == 0, again.stderr
    info = json.loads(again.stdout)
    try:
        api = proxmox(info)
        assert api.nodes(ws.node).lxc(ws.vmid).status.current.get()['status'] == 'running'
        ssh(info, ws.address).close()
    finally:
        assert cli(state, 'down').returncode == 0
    assert not mentioning(str(state))


@pytest.mark.parametrize('args, message', [
    (['--host', '10.1.2.3'], 'not a loopback address'),
    (['--host', '0.0.0.0'], 'not a loopback address'),
    (['--sshd', '/nonexistent/sshd'], 'sshd not found at /nonexistent/sshd'),
    (['--guest-range', '192.168.1.10-192.168.1.20'], 'leaves 127.0.0.0/8'),
    (['--api-port', '70000'], 'not a port number'),
])
def test_bad_options_are_refused_before_anything_starts(tmp_path, args, message):
    state = tmp_path / 'state'
    result = cli(state, 'up', '--host', pick_host(), *args)
    assert result.returncode == 1
    assert message in result.stderr
    assert not (state / 'cluster.json').exists()
    assert not mentioning(str(state))


def test_port_in_use_is_named_and_nothing_stays(tmp_path):
    state = tmp_path / 'state'
    host = pick_host()
    busy = socket.socket()
    busy.bind((host, 0))
    busy.listen()
    port = busy.getsockname()[1]
    try:
        result = cli(state, 'up', '--host', host, '--api-port', '0', '--proxy-port', str(port))
        assert result.returncode == 1
        assert 'proxy port {0} on {1} is in use'.format(port, host) in result.stderr
        assert not (state / 'cluster.json').exists()
        assert not mentioning(str(state))
        assert [s for s in listening() if s[0] == host] == [(host, port)]
    finally:
        busy.close()


def test_malformed_fault_rules_are_refused(localpve_process):
    state = localpve_process.info['state_dir']
    before = set(mentioning(state))
    bad_method = cli(state, 'fault', 'proxy', 'drop-response', 'FETCH', '/nodes/*/lxc/*/clone')
    assert bad_method.returncode == 1
    assert 'malformed fault rule: method must be one of' in bad_method.stderr
    bad_path = cli(state, 'fault', 'proxy', 'reset', 'GET', 'nodes')
    assert 'must start with /' in bad_path.stderr
    no_seconds = cli(state, 'fault', 'proxy', 'delay', 'GET', '/version')
    assert no_seconds.returncode == 2 and '--seconds' in no_seconds.stderr
    zero = cli(state, 'fault', 'proxy', 'reset', 'GET', '/version', '--times', '0')
    assert zero.returncode == 2 and 'must be at least 1' in zero.stderr
    unknown = cli(state, 'fault', 'pve', 'fail', 'POST', '/nodes/pve1/lxc/9000/status/start', '--error', 'bogus')
    assert unknown.returncode == 1 and "no error 'bogus'" in unknown.stderr
    assert localpve_process.proxy_rules() == []
    assert set(mentioning(state)) == before


def test_killed_cluster_process_takes_its_guests_down_and_up_restores_it(tmp_path):
    state = tmp_path / 'state'
    args = ['--host', pick_host(), '--api-port', '0', '--proxy-port', '0', '--time-scale', '0', '--json']
    info = json.loads(cli(state, 'up', *args).stdout)
    api = proxmox(info)
    ws = clone_workspace(api, info, hostname='survivor')
    client = ssh(info, ws.address)
    session = client.get_transport().open_session()
    session.exec_command('sleep 600')
    ControlClient(info).save()
    guest = [g for g in ControlClient(info).status()['guests'] if g['vmid'] == ws.vmid][0]

    again = cli(state, 'up', *args)
    assert again.returncode == 1 and 'already running' in again.stderr

    os.kill(info['pid'], signal.SIGKILL)
    assert wait_gone([info['pid'], guest['sshd_pid']], 10)
    assert cli(state, 'status').returncode == 3
    # The guest's command outlived its sshd; the next up (or down) ends it.
    guest_commands = ('LOCALPVE_GUEST_ROOT=' + str(state / 'guests') + os.sep).encode()
    assert [p for p in with_environment(guest_commands) if 'sleep 600' in cmdline(p)]
    client.close()

    restarted = cli(state, 'up', *args)
    assert restarted.returncode == 0, restarted.stderr
    info = json.loads(restarted.stdout)
    try:
        # The commands the dead cluster's guests still ran are gone; the guest is back with its files.
        assert not with_environment(guest_commands)
        assert proxmox(info).nodes(ws.node).lxc(ws.vmid).status.current.get()['status'] == 'running'
        ssh(info, ws.address).close()
    finally:
        assert cli(state, 'down').returncode == 0
    second = cli(state, 'down')
    assert second.returncode == 0 and 'was not running' in second.stdout
