"""The datacenter: what it is seeded with, how clients reach it, and that it survives a restart."""

import json
import os
import ssl
import urllib.request

import pytest
import requests
from proxmoxer.core import AuthenticationError, ResourceException

from tests.localpve import LocalCluster, clone_workspace, guest_address, proxmox, ssh, ssh_run, wait_task


def test_seeded_like_a_real_site(localpve):
    info = localpve.info
    api = proxmox(info, auth='token')
    assert [n['node'] for n in api.nodes.get()] == info['nodes'] == ['pve1', 'pve2']
    assert [p['poolid'] for p in api.pools.get()] == [info['pool']] == ['disposable-workspaces']
    template = api.nodes(info['template_node']).lxc(info['template_vmid']).config.get()
    assert template['template'] == 1
    assert template['rootfs'].startswith('{0}:base-{1}-disk-0'.format(info['storage'], info['template_vmid']))
    assert 'bridge={0}'.format(info['bridge']) in template['net0']
    storage = api.storage(info['storage']).get()
    assert storage['type'] == 'lvmthin'
    assert info['guest_root'].endswith(os.path.join('guests', '{vmid}', 'root'))
    with open(os.path.join(info['state_dir'], 'cluster.json'), encoding='utf-8') as fh:
        assert json.load(fh) == info


def test_tls_verifies_against_the_ca_file_only(localpve):
    info = localpve.info
    for url in (info['api_url'], info['proxy_url']):
        reply = requests.get(url + '/api2/json/version', verify=info['ca_file'], timeout=5)
        assert reply.status_code == 401
        with pytest.raises(requests.exceptions.SSLError):
            requests.get(url + '/api2/json/version', timeout=5)
    context = ssl.create_default_context(cafile=info['ca_file'])
    with pytest.raises(urllib.error.HTTPError) as failure:
        urllib.request.urlopen(info['proxy_url'] + '/api2/json/nodes', context=context, timeout=5)
    assert failure.value.code == 401


def test_password_and_token_logins_work_wrong_ones_do_not(localpve):
    info = localpve.info
    for auth in ('password', 'token'):
        assert proxmox(info, auth=auth).version.get()['version'].startswith('9.')
    with pytest.raises(AuthenticationError):
        proxmox(dict(info, password='wrong'))
    with pytest.raises(ResourceException) as failure:
        proxmox(dict(info, token_secret='wrong'), auth='token').version.get()
    assert failure.value.status_code == 401


def test_restart_keeps_the_datacenter(tmp_path):
    state = tmp_path / 'state'
    cluster = LocalCluster.start(state)
    info = cluster.info
    api = proxmox(info)
    running, node, address = clone_workspace(api, info, hostname='kept', description='marker')
    stopped = clone_workspace(api, info, hostname='stopped', start=False)[0]
    with open(os.path.join(info['guest_root'].format(vmid=running), 'file'), 'w', encoding='utf-8') as out:
        out.write('still here')
    cluster.stop()

    cluster = LocalCluster.start(state, host=info['api_host'])
    try:
        again = cluster.info
        assert (again['password'], again['token_secret'], again['ca_file']) == (
            info['password'], info['token_secret'], info['ca_file'])
        api = proxmox(again)
        resources = {r['vmid']: r for r in api.cluster.resources.get(type='vm')}
        assert resources[running]['status'] == 'running'
        assert resources[running]['pool'] == info['pool']
        assert resources[stopped]['status'] == 'stopped'
        assert api.nodes(node).lxc(running).config.get()['description'] == 'marker'
        tasks = api.nodes(node).tasks.get(typefilter='vzclone', vmid=info['template_vmid'], source='all')
        assert len(tasks) == 2
        # A running container is reachable again, with its files.
        client = ssh(again, address)
        assert ssh_run(client, 'cat "$LOCALPVE_GUEST_ROOT/file"') == (0, b'still here', b'')
        client.close()
        # New ids continue after the old ones.
        assert int(api.cluster.nextid.get()) == stopped + 1
        assert wait_task(api, api.nodes(node).lxc(stopped).delete())['exitstatus'] == 'OK'
    finally:
        cluster.stop()


def test_fresh_forgets_the_datacenter(tmp_path):
    state = tmp_path / 'state'
    cluster = LocalCluster.start(state)
    vmid = clone_workspace(proxmox(cluster.info), cluster.info, start=False)[0]
    cluster.stop()
    # The try-out inventory's journal (inventories/localpve: journal.sqlite in the state directory) and its files.
    journal = ['journal.sqlite', 'journal.sqlite-wal', 'journal.sqlite.secret']
    for name in journal:
        (state / name).write_text('records of the datacenter')
    # A restart keeps the datacenter and its journal...
    LocalCluster.start(state).stop()
    assert all((state / name).exists() for name in journal)
    # ...--fresh forgets both: the records would name containers the new datacenter does not have.
    cluster = LocalCluster.start(state, fresh=True)
    try:
        vmids = [r['vmid'] for r in proxmox(cluster.info).cluster.resources.get(type='vm')]
        assert vmids == [cluster.info['template_vmid']]
        assert not os.path.exists(cluster.info['guest_root'].format(vmid=vmid))
        assert not [name for name in journal if (state / name).exists()]
    finally:
        cluster.stop()


def test_tasks_take_pve_like_time_with_a_time_scale(localpve_factory):
    # 0.1 real seconds per PVE second: a clone takes 0.4 s, a start 0.2 s.
    cluster = localpve_factory(time_scale=0.1)
    info = cluster.info
    api = proxmox(info)
    vmid = int(api.cluster.nextid.get())
    upid = api.nodes('pve1').lxc(info['template_vmid']).clone.post(newid=vmid, hostname='slow', full=0)
    # The id and the config exist at once, locked, while the task runs.
    assert api.nodes('pve1').lxc(vmid).config.get()['lock'] == 'create'
    assert api.nodes('pve1').tasks(upid).status.get()['status'] == 'running'
    assert wait_task(api, upid)['exitstatus'] == 'OK'
    config = api.nodes('pve1').lxc(vmid).config.get()
    assert 'lock' not in config and 'ip=127.' in config['net0']
    upid = api.nodes('pve1').lxc(vmid).status.start.post()
    assert api.nodes('pve1').tasks(upid).status.get()['status'] == 'running'
    assert wait_task(api, upid)['exitstatus'] == 'OK'
    ssh(info, guest_address(api, 'pve1', vmid)).close()
