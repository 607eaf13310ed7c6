"""Guests over real SSH: sshd follows the container's power state, each guest has its own files and key."""

import os
import signal
import socket
import time

import paramiko
import pytest

from tests.localpve import LocalCluster, system
from tests.localpve import clone_workspace, guest_address, proxmox, ssh, ssh_run, wait_task
from tests.localpve.system import alive


def refused(address, port):
    probe = socket.socket()
    probe.settimeout(1)
    try:
        probe.connect((address, port))
        return False
    except ConnectionRefusedError:
        return True
    finally:
        probe.close()


def wait_for(check, timeout=10):
    """check() until it returns something true; that value (pytest.fail after timeout seconds)."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail('condition not met within {0}s: {1}'.format(timeout, check))
        time.sleep(0.05)


def test_started_container_answers_ssh_on_its_reported_address(localpve):
    info = localpve.info
    api = proxmox(info)
    ws = clone_workspace(api, info, hostname='ws-ssh')
    root = info['guest_root'].format(vmid=ws.vmid)

    # One attempt, no retry: sshd listens before the start task reports OK (a refused connection fails at once).
    client = ssh(info, ws.address)
    try:
        status, out, err = ssh_run(client, 'echo "$LOCALPVE_VMID $LOCALPVE_GUEST_ROOT"; '
                                           'mkdir -p "$LOCALPVE_GUEST_ROOT/workspace/repo" && '
                                           'echo hello > "$LOCALPVE_GUEST_ROOT/workspace/repo/README"')
        assert (status, out.decode().split(), err) == (0, [str(ws.vmid), root], b'')
        sftp = client.open_sftp()
        with sftp.open(root + '/workspace/repo/README') as fh:
            assert fh.read() == b'hello\n'
    finally:
        client.close()
    with open(os.path.join(root, 'workspace', 'repo', 'README'), encoding='utf-8') as fh:
        assert fh.read() == 'hello\n'
    # The template's authorized key came with the clone.
    with open(os.path.join(root, 'root', '.ssh', 'authorized_keys'), encoding='utf-8') as fh:
        assert fh.read().split()[:2] == info['ssh_public_key'].split()[:2]


def test_stop_closes_the_address_and_destroy_removes_the_files(localpve):
    info = localpve.info
    api = proxmox(info)
    vmid, node, address = clone_workspace(api, info, hostname='ws-stop')
    client = ssh(info, address)
    session = client.get_transport().open_session()
    session.exec_command('sleep 30')
    pid = [g['sshd_pid'] for g in localpve.status()['guests'] if g['vmid'] == vmid][0]

    assert wait_task(api, api.nodes(node).lxc(vmid).status.stop.post())['exitstatus'] == 'OK'
    assert refused(address, info['ssh_port'])
    assert not os.path.exists('/proc/{0}'.format(pid))
    # The session died with the container.
    assert session.recv_exit_status() == -1
    client.close()
    assert api.nodes(node).lxc(vmid).interfaces.get() is None

    root = info['guest_root'].format(vmid=vmid)
    assert os.path.isdir(root)
    assert wait_task(api, api.nodes(node).lxc(vmid).delete(purge=1))['exitstatus'] == 'OK'
    assert not os.path.exists(os.path.dirname(root))


def test_a_guests_temporary_files_are_its_own_and_go_with_it(localpve):
    """What a guest's programs leave in their temporary directory (the agent CLIs unpack a library there at every
    start) is under the container's own directory, not the host's /tmp, and is removed with the container."""
    info = localpve.info
    api = proxmox(info)
    vmid, node, address = clone_workspace(api, info, hostname='ws-tmp')
    client = ssh(info, address)
    try:
        status, out, err = ssh_run(client, 'mktemp')
    finally:
        client.close()
    left = out.decode().strip()
    guest_dir = os.path.dirname(info['guest_root'].format(vmid=vmid))
    assert (status, err) == (0, b'')
    assert os.path.dirname(left) == os.path.join(guest_dir, 'tmp') and os.path.isfile(left)
    assert wait_task(api, api.nodes(node).lxc(vmid).status.stop.post())['exitstatus'] == 'OK'
    assert wait_task(api, api.nodes(node).lxc(vmid).delete(purge=1))['exitstatus'] == 'OK'
    assert not os.path.exists(left)


def test_guests_have_their_own_address_files_and_host_key(localpve):
    info = localpve.info
    api = proxmox(info)
    first = clone_workspace(api, info, hostname='ws-a')
    second = clone_workspace(api, info, hostname='ws-b')
    assert first[2] != second[2]
    keys = set()
    for ws in (first, second):
        client = ssh(info, ws.address)
        keys.add(client.get_transport().get_remote_server_key().get_base64())
        assert ssh_run(client, 'echo {0} > "$LOCALPVE_GUEST_ROOT/mine"'.format(ws.vmid))[0] == 0
        client.close()
    assert len(keys) == 2
    for ws in (first, second):
        with open(os.path.join(info['guest_root'].format(vmid=ws.vmid), 'mine'), encoding='utf-8') as fh:
            assert fh.read() == '{0}\n'.format(ws.vmid)
    with open(info['ssh_known_hosts'], encoding='utf-8') as fh:
        known = fh.read()
    for key in keys:
        assert key in known


def test_dhcp_lease_comes_after_the_delay(localpve_factory):
    cluster = localpve_factory(addressing='dhcp', dhcp_delay=0.5)
    info = cluster.info
    api = proxmox(info)
    vmid, node, address = clone_workspace(api, info, hostname='ws-dhcp')
    assert 'ip=dhcp' in api.nodes(node).lxc(vmid).config.get()['net0']
    # Right after the start there is no address yet: a real "waiting for DHCP".
    assert address is None
    address = wait_for(lambda: guest_address(api, node, vmid))
    client = ssh(info, address)
    client.close()
    # A stop and start keeps the lease address, as a DHCP server remembers the MAC.
    assert wait_task(api, api.nodes(node).lxc(vmid).status.stop.post())['exitstatus'] == 'OK'
    assert wait_task(api, api.nodes(node).lxc(vmid).status.start.post())['exitstatus'] == 'OK'
    assert wait_for(lambda: guest_address(api, node, vmid)) == address


def test_dhcp_that_never_answers_leaves_no_address(localpve_factory):
    cluster = localpve_factory(addressing='dhcp', dhcp_delay=None)
    info = cluster.info
    api = proxmox(info)
    vmid, node = clone_workspace(api, info, hostname='ws-nodhcp')[:2]
    time.sleep(1.0)
    assert guest_address(api, node, vmid) is None
    guest = [g for g in cluster.status()['guests'] if g['vmid'] == vmid][0]
    assert (guest['sshd'], guest['sshd_pid']) == ('no-address', None)
    # Turning DHCP back on reaches the waiting guest.
    cluster.dhcp(0)
    ssh(info, wait_for(lambda: guest_address(api, node, vmid))).close()


def test_sshd_refuses_for_a_while_then_answers(localpve):
    info = localpve.info
    api = proxmox(info)
    localpve.guest_fault('refuse', seconds=1.5)
    ws = clone_workspace(api, info, hostname='ws-refuse')
    assert refused(ws.address, info['ssh_port'])
    assert [g['sshd'] for g in localpve.status()['guests'] if g['vmid'] == ws.vmid] == ['refusing']
    client = wait_for(lambda: _try_ssh(info, ws.address))
    client.close()
    # The fault was for one start only.
    assert localpve.guest_faults()[0]['times'] == 0


def test_sshd_that_never_comes_up(localpve):
    info = localpve.info
    api = proxmox(info)
    first = clone_workspace(api, info, hostname='ws-first')
    localpve.guest_fault('never', vmid=first.vmid + 1)
    ws = clone_workspace(api, info, hostname='ws-never')
    assert ws.vmid == first.vmid + 1
    time.sleep(0.5)
    assert refused(ws.address, info['ssh_port'])
    assert [g['sshd'] for g in localpve.status()['guests'] if g['vmid'] == ws.vmid] == ['suppressed']
    ssh(info, first.address).close()


def test_ssh_session_dropped_in_the_middle_of_a_command(localpve):
    info = localpve.info
    api = proxmox(info)
    address = clone_workspace(api, info, hostname='ws-drop').address
    localpve.guest_fault('drop', match='sleep 3', after=0.3)
    client = ssh(info, address)
    assert ssh_run(client, 'echo started; sleep 3; echo finished')[:2] == (-1, b'started\n')
    client.close()
    # The guest itself is still there: a new connection works.
    client = ssh(info, address)
    assert ssh_run(client, 'echo again') == (0, b'again\n', b'')
    client.close()


def _try_ssh(info, address):
    try:
        return ssh(info, address, timeout=5)
    except (OSError, paramiko.SSHException):
        return None


def test_container_made_from_an_os_template_takes_the_keys_of_its_creation(localpve):
    info = localpve.info
    api = proxmox(info)
    vmid = int(api.cluster.nextid.get())
    upid = api.nodes('pve2').lxc.post(vmid=vmid, ostemplate='local:vztmpl/debian-12-standard_12.12-1_amd64.tar.zst',
                                      hostname='made', storage=info['storage'], rootfs='{0}:4'.format(info['storage']),
                                      net0='name=eth0,bridge={0},ip=dhcp'.format(info['bridge']),
                                      **{'ssh-public-keys': info['ssh_public_key']})
    assert wait_task(api, upid)['exitstatus'] == 'OK'
    assert wait_task(api, api.nodes('pve2').lxc(vmid).status.start.post())['exitstatus'] == 'OK'
    client = ssh(info, guest_address(api, 'pve2', vmid))
    assert ssh_run(client, 'echo "$LOCALPVE_VMID"') == (0, '{0}\n'.format(vmid).encode(), b'')
    client.close()


def test_guests_of_an_offline_node_are_unreachable_until_it_returns(localpve):
    info = localpve.info
    api = proxmox(info)
    ws = clone_workspace(api, info, hostname='ws-node')
    localpve.pve_node(ws.node, online=False)
    wait_for(lambda: refused(ws.address, info['ssh_port']))
    localpve.pve_node(ws.node, online=True)
    wait_for(lambda: _try_ssh(info, ws.address)).close()


def test_sshd_killed_from_outside_stays_down_until_the_next_start(localpve):
    info = localpve.info
    api = proxmox(info)
    ws = clone_workspace(api, info, hostname='ws-killed')

    def guest():
        return [g for g in localpve.status()['guests'] if g['vmid'] == ws.vmid][0]
    os.kill(guest()['sshd_pid'], signal.SIGKILL)
    assert 'sshd exited with -9' in wait_for(lambda: guest()['sshd'] == 'failed' and guest()['error'])
    assert refused(ws.address, info['ssh_port'])
    assert wait_task(api, api.nodes(ws.node).lxc(ws.vmid).status.reboot.post())['exitstatus'] == 'OK'
    ssh(info, ws.address).close()


def test_reboot_ends_the_sessions_of_the_last_boot(localpve):
    info = localpve.info
    api = proxmox(info)
    ws = clone_workspace(api, info, hostname='ws-reboot')
    before = [g['sshd_pid'] for g in localpve.status()['guests'] if g['vmid'] == ws.vmid]
    client = ssh(info, ws.address)
    session = client.get_transport().open_session()
    session.exec_command('sleep 30')
    assert wait_task(api, api.nodes(ws.node).lxc(ws.vmid).status.reboot.post())['exitstatus'] == 'OK'
    assert session.recv_exit_status() == -1
    client.close()
    after = [g['sshd_pid'] for g in localpve.status()['guests'] if g['vmid'] == ws.vmid]
    assert after != before and alive(after[0]) and not alive(before[0])
    ssh(info, ws.address).close()


def _detached(client, what):
    """Start ``sleep 300`` in a session of its own that outlives the SSH session (as the agent runner does);
    returns its pid."""
    status, out, err = ssh_run(client, 'setsid sh -c \'echo $$; exec sleep 300 # {0}\' < /dev/null > "$LOCALPVE_GUEST_ROOT/'
                                       '{0}.pid" 2>&1 & sleep 0.2; cat "$LOCALPVE_GUEST_ROOT/{0}.pid"'.format(what))
    assert status == 0, err
    pid = int(out.split()[0])
    assert system.alive(pid) and 'sleep 300' in system.cmdline(pid)
    return pid


def test_stopping_a_container_or_the_cluster_ends_what_its_sessions_started_in_sessions_of_their_own(tmp_path):
    cluster = LocalCluster.start(str(tmp_path / 'localpve'))
    running = True
    try:
        info = cluster.info
        api = proxmox(info)
        halted, kept = clone_workspace(api, info, hostname='ws-halted'), clone_workspace(api, info, hostname='ws-kept')
        pids = {}
        for ws in (halted, kept):
            client = ssh(info, ws.address)
            try:
                pids[ws.vmid] = _detached(client, 'detached')
            finally:
                client.close()
        # The sessions are closed: the detached processes live on, as the agent runner does in a running container.
        assert all(system.alive(pid) for pid in pids.values())

        assert wait_task(api, api.nodes(halted.node).lxc(halted.vmid).status.stop.post())['exitstatus'] == 'OK'
        assert system.wait_gone([pids[halted.vmid]], 10)
        assert system.alive(pids[kept.vmid])

        running = False
        cluster.stop()
        assert system.wait_gone([pids[kept.vmid]], 10)
    finally:
        if running:
            cluster.stop()
