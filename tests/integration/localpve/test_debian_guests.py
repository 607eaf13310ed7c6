"""The debian guest tier: every container a Debian bookworm userland of its own (tests/localpve/debian.py).

One cluster for the module (in this process, time scale 0). The base root is built once per machine (a minute
or two the first time), then every start finds it in the cache.
"""

import json
import os
import signal
import time
import uuid

import pytest

from tests.localpve import LocalCluster, clone_workspace, guest_address, proxmox, ssh, ssh_run, system, wait_task
from tests.localpve.cluster import pick_host
from tests.localpve.config import ClusterError, Options
from tests.localpve.control import ControlClient
from tests.localpve.process import down, up

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason='the debian guest tier needs root (mounts, namespaces)')


@pytest.fixture(scope='module')
def cluster(tmp_path_factory):
    state = tmp_path_factory.mktemp('debian')
    started = LocalCluster.start(state / 'cluster', guests='debian')
    try:
        yield started
    finally:
        started.stop()


@pytest.fixture(scope='module')
def api(cluster):
    # A full clone copies a root (a few seconds), and with time scale 0 the clone request waits for it.
    return proxmox(cluster.info, timeout=120)


def root_of(cluster, vmid):
    return cluster.info['guest_root'].format(vmid=vmid)


def run(cluster, address, command):
    """(exit status, stdout) of ``command`` over SSH as root; stderr must be empty when it succeeds."""
    client = ssh(cluster.info, address, timeout=5)
    try:
        status, out, err = ssh_run(client, command)
    finally:
        client.close()
    assert status != 0 or err == b'', err
    return status, out.decode()


def guest(cluster, vmid):
    return [g for g in cluster.status()['guests'] if g['vmid'] == vmid][0]


def task_ok(api, upid):
    status = wait_task(api, upid)
    assert status['exitstatus'] == 'OK', status
    return status


def running(root, command, timeout=10):
    """Pids of the processes in the guest of ``root`` whose command line is ``command``, once there is one (a
    command started in the background of an SSH session may not have started when the session ends)."""
    deadline = time.monotonic() + timeout
    while True:
        found = [pid for pid in system.rooted_under(root) if system.cmdline(pid) == command]
        if found or time.monotonic() > deadline:
            return found
        time.sleep(0.02)


def mounted(path):
    return [p for p in system.mount_points() if p == path or p.startswith(path + os.sep)]


def test_the_cluster_says_how_the_collection_reaches_its_guests(cluster):
    info = cluster.info
    assert (info['guests'], info['ssh_user'], info['agent_user'], info['guest_prefix']) == ('debian', 'root', 'agent',
                                                                                            '/')
    assert os.path.isfile(os.path.join(info['debian_base'], 'usr', 'sbin', 'sshd'))
    # The base lives outside the checkout and the state directory.
    assert not info['debian_base'].startswith(info['state_dir'])


def test_a_guest_runs_commands_in_a_debian_userland_of_its_own(cluster, api):
    info = cluster.info
    first = clone_workspace(api, info, hostname='deb-a')
    second = clone_workspace(api, info, hostname='deb-b')
    status, out = run(cluster, first.address, '. /etc/os-release && echo "$VERSION_CODENAME"; hostname; id -u agent; '
                                              'id -un; runuser -u agent -- id -un; echo $HOME; '
                                              'test -e %s && echo host-visible; ps -e -o pid=,comm=' % info['state_dir'])
    lines = out.split('\n')
    assert status == 0 and lines[:6] == ['bookworm', 'deb-a', '1000', 'root', 'agent', '/root']
    assert 'host-visible' not in out
    processes = dict(line.split(None, 1) for line in lines[6:] if line.strip())
    # Its own pid namespace: the guest's first process is 1, and only the guest's processes are there.
    assert processes['1'] == 'init' and 'sshd' in processes.values()
    assert set(processes.values()) <= {'init', 'sshd', 'bash', 'ps'}

    name = 'only-in-a-' + uuid.uuid4().hex[:8]
    assert run(cluster, first.address, 'echo {0} > /root/{0} && cat /root/{0}'.format(name)) == (0, name + '\n')
    # The file is in the first guest's root (as the harness sees it), not in the second guest, not on this machine.
    with open(os.path.join(root_of(cluster, first.vmid), 'root', name), encoding='utf-8') as fh:
        assert fh.read() == name + '\n'
    assert run(cluster, second.address, 'test -e /root/{0}'.format(name))[0] != 0
    assert not os.path.exists(os.path.join(root_of(cluster, second.vmid), 'root', name))
    assert not os.path.exists(os.path.join('/root', name))
    # Each guest presents its own host key, which the harness publishes.
    keys = [guest(cluster, ws.vmid)['host_key'] for ws in (first, second)]
    assert keys[0] != keys[1]
    with open(info['ssh_known_hosts'], encoding='utf-8') as fh:
        known = fh.read()
    assert all(key in known for key in keys)


def test_a_linked_clone_sees_the_template_and_keeps_its_writes_to_itself(cluster, api):
    info = cluster.info
    template_root = root_of(cluster, info['template_vmid'])
    ws = clone_workspace(api, info, hostname='deb-linked')
    root = root_of(cluster, ws.vmid)
    # The template's own files (its agent user, /workspace, root's key) are there.
    status, out = run(cluster, ws.address, 'stat -c "%U %a" /workspace /home/agent; cat /root/.ssh/authorized_keys; '
                                           'echo changed > /etc/motd; rm /etc/issue; touch /workspace/mine')
    assert status == 0
    assert out.split('\n')[:2] == ['agent 755', 'agent 755']
    assert out.split()[4:6] == info['ssh_public_key'].split()[:2]
    with open(os.path.join(template_root, 'etc', 'motd'), encoding='utf-8') as fh:
        assert 'changed' not in fh.read()
    assert os.path.exists(os.path.join(template_root, 'etc', 'issue'))
    assert not os.path.exists(os.path.join(template_root, 'workspace', 'mine'))
    assert not os.path.exists(os.path.join(root, 'etc', 'issue'))
    # An overlay whose lower layers are the template's: nothing of the template was copied.
    with open(os.path.join(os.path.dirname(root), 'stack.json'), encoding='utf-8') as fh:
        stack = json.load(fh)
    with open(os.path.join(os.path.dirname(template_root), 'stack.json'), encoding='utf-8') as fh:
        template = json.load(fh)
    assert stack['lowers'][1:] == template['lowers'] and stack['lowers'][0].endswith(template['own'])
    assert _fstype(root) == 'overlay'


def test_the_template_is_frozen(cluster):
    template_root = root_of(cluster, cluster.info['template_vmid'])
    with pytest.raises(OSError) as raised:
        with open(os.path.join(template_root, 'workspace', 'x'), 'w', encoding='utf-8'):
            pass
    assert raised.value.errno == 30  # EROFS, even for root


def test_a_full_clone_is_a_copy_and_a_converted_template_freezes(cluster, api):
    info = cluster.info
    node = info['template_node']
    source = clone_workspace(api, info, hostname='deb-source')
    assert run(cluster, source.address, 'echo before > /root/f1')[0] == 0
    task_ok(api, api.nodes(node).lxc(source.vmid).status.stop.post())

    full = int(api.cluster.nextid.get())
    task_ok(api, api.nodes(node).lxc(source.vmid).clone.post(newid=full, hostname='deb-full', full=1))
    full_root = root_of(cluster, full)
    assert _fstype(full_root) != 'overlay'
    with open(os.path.join(full_root, 'root', 'f1'), encoding='utf-8') as fh:
        assert fh.read() == 'before\n'
    # Independent both ways.
    with open(os.path.join(root_of(cluster, source.vmid), 'root', 'f2'), 'w', encoding='utf-8') as out:
        out.write('after\n')
    with open(os.path.join(full_root, 'root', 'f3'), 'w', encoding='utf-8') as out:
        out.write('mine\n')
    assert not os.path.exists(os.path.join(full_root, 'root', 'f2'))
    assert not os.path.exists(os.path.join(root_of(cluster, source.vmid), 'root', 'f3'))
    task_ok(api, api.nodes(node).lxc(full).status.start.post())
    assert run(cluster, guest_address(api, node, full), 'cat /root/f1 /root/f3') == (0, 'before\nmine\n')
    # Its clones carry the source's static address, as on PVE: one of them runs at a time.
    task_ok(api, api.nodes(node).lxc(full).status.stop.post())

    # Converted to a template, the source's files can no longer change; a linked clone of it sees them.
    task_ok(api, api.nodes(node).lxc(source.vmid).template.post())
    with pytest.raises(OSError):
        with open(os.path.join(root_of(cluster, source.vmid), 'root', 'f4'), 'w', encoding='utf-8'):
            pass
    linked = int(api.cluster.nextid.get())
    task_ok(api, api.nodes(node).lxc(source.vmid).clone.post(newid=linked, hostname='deb-linked-2', full=0))
    task_ok(api, api.nodes(node).lxc(linked).status.start.post())
    assert run(cluster, guest_address(api, node, linked), 'cat /root/f1 /root/f2; id -u agent') == (
        0, 'before\nafter\n1000\n')

    # The template goes before its linked clone: the clone keeps working on the template's layer ...
    layers = os.path.join(os.path.dirname(os.path.dirname(full_root)), 'layers')
    with open(os.path.join(os.path.dirname(root_of(cluster, source.vmid)), 'stack.json'), encoding='utf-8') as fh:
        source_layer = json.load(fh)['own']
    task_ok(api, api.nodes(node).lxc(source.vmid).delete())
    assert not os.path.exists(os.path.dirname(root_of(cluster, source.vmid)))
    assert run(cluster, guest_address(api, node, linked), 'cat /root/f1') == (0, 'before\n')
    assert source_layer in os.listdir(layers)
    # ... which goes with the last container that lies on it.
    task_ok(api, api.nodes(node).lxc(linked).status.stop.post())
    for vmid in (linked, full):
        task_ok(api, api.nodes(node).lxc(vmid).delete())
    assert source_layer not in os.listdir(layers)


def test_a_clone_from_a_snapshot_starts_from_the_snapshots_files(cluster, api):
    info = cluster.info
    node = info['template_node']
    source = clone_workspace(api, info, hostname='deb-snap')
    assert run(cluster, source.address, 'echo at-snapshot > /root/s1')[0] == 0
    task_ok(api, api.nodes(node).lxc(source.vmid).snapshot.post(snapname='s1'))
    kept = os.path.join(os.path.dirname(root_of(cluster, source.vmid)), 'snapshots', 's1')
    assert os.path.isdir(kept)
    # Written after the snapshot: no clone of it sees these.
    assert run(cluster, source.address, 'echo later > /root/s2; echo changed > /root/s1')[0] == 0
    child = int(api.cluster.nextid.get())
    task_ok(api, api.nodes(node).lxc(source.vmid).clone.post(newid=child, hostname='deb-snap-child', full=1,
                                                             snapname='s1'))
    child_root = root_of(cluster, child)
    with open(os.path.join(child_root, 'root', 's1'), encoding='utf-8') as fh:
        assert fh.read() == 'at-snapshot\n'
    assert not os.path.exists(os.path.join(child_root, 'root', 's2'))
    # The clone carries its source's static address: one of them runs at a time.
    task_ok(api, api.nodes(node).lxc(source.vmid).status.stop.post())
    task_ok(api, api.nodes(node).lxc(child).status.start.post())
    assert run(cluster, guest_address(api, node, child), 'cat /root/s1; id -u agent') == (0, 'at-snapshot\n1000\n')
    task_ok(api, api.nodes(node).lxc(child).status.stop.post())
    # The snapshot's files go with it.
    task_ok(api, api.nodes(node).lxc(source.vmid).snapshot('s1').delete())
    assert not os.path.exists(kept)
    for vmid in (child, source.vmid):
        task_ok(api, api.nodes(node).lxc(vmid).delete())


def test_stop_ends_every_process_of_the_guest_and_destroy_removes_its_files(cluster, api):
    info = cluster.info
    node = info['template_node']
    ws = clone_workspace(api, info, hostname='deb-stop')
    root = root_of(cluster, ws.vmid)
    # Processes that leave the SSH session: in a session of their own, and as the agent user.
    assert run(cluster, ws.address, 'setsid sleep 600 </dev/null >/dev/null 2>&1 & '
                                    'runuser -u agent -- sh -c "nohup sleep 601 </dev/null >/dev/null 2>&1 &"')[0] == 0
    assert running(root, 'sleep 600') and running(root, 'sleep 601')
    inside = system.rooted_under(root)
    first = guest(cluster, ws.vmid)['init_pid']
    assert first in inside

    task_ok(api, api.nodes(node).lxc(ws.vmid).status.stop.post())
    assert system.rooted_under(root) == []
    assert not any(system.alive(pid) for pid in inside)
    # Its files stay while it is stopped; a new start is a new boot.
    assert mounted(root) == [root]
    task_ok(api, api.nodes(node).lxc(ws.vmid).status.start.post())
    status, out = run(cluster, ws.address, 'ps -e -o args=')
    assert status == 0 and 'sleep 60' not in out
    assert guest(cluster, ws.vmid)['init_pid'] not in (None, first)

    task_ok(api, api.nodes(node).lxc(ws.vmid).status.stop.post())
    task_ok(api, api.nodes(node).lxc(ws.vmid).delete())
    assert mounted(os.path.dirname(root)) == []
    assert not os.path.exists(os.path.dirname(root))


def test_a_new_address_restarts_sshd_and_leaves_the_guests_processes_running(cluster, api):
    info = cluster.info
    node = info['template_node']
    ws = clone_workspace(api, info, hostname='deb-move')
    assert run(cluster, ws.address, 'setsid sleep 602 </dev/null >/dev/null 2>&1 &')[0] == 0
    sleeper = running(root_of(cluster, ws.vmid), 'sleep 602')
    first = guest(cluster, ws.vmid)['init_pid']
    net0 = api.nodes(node).lxc(ws.vmid).config.get()['net0']
    moved = ws.address.rsplit('.', 1)[0] + '.250'
    api.nodes(node).lxc(ws.vmid).config.put(net0=net0.replace('ip={0}/'.format(ws.address), 'ip={0}/'.format(moved)))
    deadline = time.monotonic() + 10
    while guest(cluster, ws.vmid)['address'] != moved or guest(cluster, ws.vmid)['sshd'] != 'up':
        assert time.monotonic() < deadline, guest(cluster, ws.vmid)
        time.sleep(0.05)
    status, out = run(cluster, moved, 'ps -e -o args=')
    assert status == 0 and 'sleep 602' in out
    assert len(sleeper) == 1 and system.alive(sleeper[0]) and guest(cluster, ws.vmid)['init_pid'] == first
    task_ok(api, api.nodes(node).lxc(ws.vmid).status.stop.post())
    assert not system.alive(sleeper[0])


def test_a_session_is_dropped_in_the_middle_of_a_command(cluster, api):
    ws = clone_workspace(api, cluster.info, hostname='deb-drop')
    cluster.guest_fault('drop', vmid=ws.vmid, match='sleep 3', after=0.3)
    client = ssh(cluster.info, ws.address, timeout=5)
    try:
        assert ssh_run(client, 'echo started; sleep 3; echo finished')[:2] == (-1, b'started\n')
    finally:
        client.close()
    assert run(cluster, ws.address, 'echo again') == (0, 'again\n')


def test_a_container_made_from_an_os_template_is_the_base_with_the_keys_of_its_creation(cluster, api):
    info = cluster.info
    vmid = int(api.cluster.nextid.get())
    task_ok(api, api.nodes('pve2').lxc.post(vmid=vmid, ostemplate='local:vztmpl/debian-12-standard_12.12-1_amd64.tar.zst',
                                            hostname='deb-made', storage='local-lvm', pool=info['pool'],
                                            net0='name=eth0,bridge=vmbr0,ip=dhcp',
                                            **{'ssh-public-keys': info['ssh_public_key']}))
    task_ok(api, api.nodes('pve2').lxc(vmid).status.start.post())
    status, out = run(cluster, guest_address(api, 'pve2', vmid),
                      '. /etc/os-release; echo $VERSION_CODENAME; id agent 2>/dev/null || echo no agent user')
    assert (status, out) == (0, 'bookworm\nno agent user\n')


def test_a_cluster_that_died_takes_its_guests_processes_and_down_removes_its_mounts(tmp_path):
    opts = Options(state_dir=str(tmp_path / 'died'), host=pick_host(), api_port=0, proxy_port=0, time_scale=0,
                   guests='debian').check()
    client = ControlClient(up(opts))
    guests = os.path.join(opts.state_dir, 'guests')
    try:
        api = proxmox(client.info)
        ws = clone_workspace(api, client.info, hostname='deb-died')
        assert run(client, ws.address, 'setsid sleep 603 </dev/null >/dev/null 2>&1 &')[0] == 0
        assert mounted(guests) and system.rooted_under(guests)
        os.kill(client.info['pid'], signal.SIGKILL)
        assert system.wait_gone([client.info['pid']], 10)
        # The guests' processes die with the cluster; its mounts stay until the next up or down.
        deadline = time.monotonic() + 10
        while system.rooted_under(guests):
            assert time.monotonic() < deadline, [system.cmdline(pid) for pid in system.rooted_under(guests)]
            time.sleep(0.05)
        assert mounted(guests)
    finally:
        down(opts.state_dir)
    assert mounted(guests) == []
    assert system.rooted_under(guests) == []


def test_a_restarted_cluster_finds_its_guests_files_again(tmp_path):
    cluster = LocalCluster.start(tmp_path / 'again', guests='debian')
    try:
        api = proxmox(cluster.info)
        ws = clone_workspace(api, cluster.info, hostname='deb-again')
        assert run(cluster, ws.address, 'echo kept > /workspace/kept')[0] == 0
    finally:
        cluster.stop()
    guests = os.path.join(str(tmp_path / 'again'), 'guests')
    assert mounted(guests) == []
    assert system.rooted_under(guests) == []
    with pytest.raises(ClusterError, match='has debian guests'):
        LocalCluster.start(tmp_path / 'again', guests='host')
    cluster = LocalCluster.start(tmp_path / 'again', guests='debian')
    try:
        api = proxmox(cluster.info)
        node = cluster.info['template_node']
        with open(os.path.join(root_of(cluster, ws.vmid), 'workspace', 'kept'), encoding='utf-8') as fh:
            assert fh.read() == 'kept\n'
        task_ok(api, api.nodes(node).lxc(ws.vmid).status.stop.post())
        task_ok(api, api.nodes(node).lxc(ws.vmid).status.start.post())
        assert run(cluster, ws.address, 'cat /workspace/kept') == (0, 'kept\n')
    finally:
        cluster.stop()
    assert mounted(guests) == []


def _fstype(path):
    with open('/proc/self/mountinfo', encoding='utf-8') as fh:
        for line in fh:
            fields = line.split()
            if fields[4] == path:
                return fields[fields.index('-') + 1]
    return None
