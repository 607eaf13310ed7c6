"""Fault injection: the proxy's rules, fakepve's own faults, and the foreign client, seen from a real client."""

import pytest
import requests
from proxmoxer.core import ResourceException

from tests.localpve import ClusterError, clone_workspace, proxmox, wait_task

CLONE = '/nodes/*/lxc/*/clone'


def clone(api, info, vmid, hostname='ws', **extra):
    return api.nodes(info['template_node']).lxc(info['template_vmid']).clone.post(
        newid=vmid, hostname=hostname, full=0, pool=info['pool'], **extra)


def test_dropped_response_the_clone_happens_but_the_client_never_hears(localpve):
    info = localpve.info
    api, raw = proxmox(info), proxmox(info, via='api')
    rule = localpve.proxy_add('drop-response', 'POST', CLONE)
    vmid = int(api.cluster.nextid.get())
    with pytest.raises(requests.exceptions.ConnectionError):
        clone(api, info, vmid, hostname='lost-response', description='marker-123')
    config = raw.nodes('pve1').lxc(vmid).config.get()
    assert (config['hostname'], config['description']) == ('lost-response', 'marker-123')
    tasks = raw.nodes('pve1').tasks.get(typefilter='vzclone', vmid=info['template_vmid'], source='all')
    assert [(t['user'], t['status']) for t in tasks] == [(info['user'], 'OK')]
    rules = localpve.proxy_rules()
    assert [(r['id'], len(r['hits']), r['spent']) for r in rules] == [(rule['id'], 1, True)]
    # Spent: the next request goes through.
    assert wait_task(api, clone(api, info, vmid + 1))['exitstatus'] == 'OK'


def test_reset_before_forwarding_nothing_happens(localpve):
    info = localpve.info
    api, raw = proxmox(info), proxmox(info, via='api')
    localpve.proxy_add('reset', 'post', '/api2/json/nodes/pve1/lxc/9000/clone')
    vmid = int(api.cluster.nextid.get())
    with pytest.raises(requests.exceptions.ConnectionError):
        clone(api, info, vmid)
    assert vmid not in [ct['vmid'] for ct in raw.cluster.resources.get(type='vm')]


def test_delayed_response_outlives_the_client_timeout(localpve):
    info = localpve.info
    # A token needs no login request, so the short timeout only meets the delayed clone.
    slow = proxmox(info, auth='token', timeout=0.5)
    localpve.proxy_add('delay', 'POST', CLONE, seconds=2)
    vmid = int(proxmox(info).cluster.nextid.get())
    with pytest.raises(requests.exceptions.ReadTimeout):
        clone(slow, info, vmid)
    assert proxmox(info, via='api').nodes('pve1').lxc(vmid).config.get()['hostname'] == 'ws'


def test_error_rule_answers_like_pve_without_forwarding_and_skip_lets_some_through(localpve):
    info = localpve.info
    api = proxmox(info)
    localpve.proxy_add('error', '*', '/cluster/nextid', skip=1, times=2, status=500,
                       message="can't lock file '/var/lock/pve-manager/pve-nextid.lck' - got timeout")
    seen = len([r for r in localpve.pve.requests if r[1].endswith('/cluster/nextid')])
    assert int(api.cluster.nextid.get()) >= 100
    for dummy in range(2):
        with pytest.raises(ResourceException) as failure:
            api.cluster.nextid.get()
        assert failure.value.status_code == 500
        assert 'got timeout' in failure.value.content
    assert int(api.cluster.nextid.get()) >= 100
    # Two of the four requests reached the API.
    assert len([r for r in localpve.pve.requests if r[1].endswith('/cluster/nextid')]) == seen + 2


def test_malformed_rules_are_refused_with_the_reason(localpve):
    for bad, reason in ((dict(action='explode', method='GET', path='/x'), 'action must be one of'),
                        (dict(action='reset', method='FETCH', path='/x'), 'method must be one of'),
                        (dict(action='reset', method='GET', path='nodes'), 'must start with /'),
                        (dict(action='reset', method='GET', path='/x', times=0), 'times must be at least 1'),
                        (dict(action='delay', method='GET', path='/x'), 'a delay needs seconds'),
                        (dict(action='error', method='GET', path='/x', status=200, message='m'), 'at least 400'),
                        (dict(action='reset', method='GET', path='/x', seconds=1), 'only a delay takes seconds')):
        with pytest.raises(ClusterError, match=reason):
            localpve.proxy_add(**bad)
    with pytest.raises(ClusterError, match='guest fault must be one of'):
        localpve.guest_fault('melt')
    with pytest.raises(ClusterError, match="no error 'nonsense'"):
        localpve.pve_fail('POST', '/nodes/pve1/lxc/9000/clone', error='nonsense')
    assert localpve.proxy_rules() == []


def test_foreign_client_takes_our_vmid_as_the_clone_arrives(localpve):
    info = localpve.info
    api = proxmox(info)
    localpve.foreign_snipe(on='clone')
    vmid = int(api.cluster.nextid.get())
    with pytest.raises(ResourceException) as failure:
        clone(api, info, vmid)
    assert "CT {0} already exists on node 'pve1'".format(vmid) in failure.value.content
    config = api.nodes('pve1').lxc(vmid).config.get()
    assert config['hostname'] == 'claimed-{0}'.format(vmid)
    assert info['foreign_user'] in config['description']
    tasks = api.nodes('pve1').tasks.get(vmid=vmid, source='all')
    assert [t['user'] for t in tasks] == [info['foreign_user']]


def test_foreign_client_takes_the_vmid_nextid_offered(localpve):
    info = localpve.info
    api = proxmox(info)
    localpve.foreign_snipe(on='nextid', pool=info['pool'])
    vmid = int(api.cluster.nextid.get())
    members = api.pools.get(poolid=info['pool'])[0]['members']
    assert vmid in [m['vmid'] for m in members]
    with pytest.raises(ResourceException, match='already exists'):
        clone(api, info, vmid)
    # The arm was for once: the next id is free to use.
    assert clone_workspace(api, info, start=False)[0] == vmid + 1


def test_foreign_containers_in_and_outside_the_pool(localpve):
    info = localpve.info
    api = proxmox(info)
    inside = localpve.foreign_create(pool=info['pool'], start=True)
    outside = localpve.foreign_create(how='create', node='pve2')
    resources = {r['vmid']: r for r in api.cluster.resources.get(type='vm')}
    assert resources[inside['vmid']]['pool'] == info['pool']
    assert resources[inside['vmid']]['status'] == 'running'
    assert 'pool' not in resources[outside['vmid']]
    assert resources[outside['vmid']]['node'] == 'pve2'
    localpve.foreign_edit(inside['vmid'], 'edited by someone else')
    assert api.nodes('pve1').lxc(inside['vmid']).config.get()['description'] == 'edited by someone else'


def test_foreign_client_rewrites_the_description_of_a_fresh_clone(localpve):
    info = localpve.info
    api = proxmox(info)
    localpve.foreign_tamper('not yours any more')
    vmid = clone_workspace(api, info, start=False, description='ours')[0]
    assert api.nodes('pve1').lxc(vmid).config.get()['description'] == 'not yours any more'


def test_fakepve_faults_from_the_harness(localpve):
    info = localpve.info
    api = proxmox(info)
    vmid = clone_workspace(api, info, start=False)[0]
    localpve.pve_quorum(False)
    with pytest.raises(ResourceException, match='no quorum'):
        api.nodes('pve1').lxc(vmid).status.start.post()
    localpve.pve_quorum(True)
    localpve.pve_fail('POST', '/nodes/pve1/lxc/{0}/status/start'.format(vmid), status=500,
                      message='CT is locked (backup)', times=1)
    with pytest.raises(ResourceException, match=r'CT is locked \(backup\)'):
        api.nodes('pve1').lxc(vmid).status.start.post()
    localpve.pve_ct(vmid, start_error='startup for container {0} failed'.format(vmid))
    status = wait_task(api, api.nodes('pve1').lxc(vmid).status.start.post())
    assert status['exitstatus'] == 'startup for container {0} failed'.format(vmid)
    localpve.pve_ct(vmid, start_error='')
    localpve.pve_lock(vmid, 'create')
    with pytest.raises(ResourceException, match=r'CT is locked \(create\)'):
        api.nodes('pve1').lxc(vmid).config.put(description='x')
    localpve.pve_unlock(vmid)
    localpve.pve_node('pve2', online=False)
    with pytest.raises(ResourceException) as failure:
        api.nodes('pve2').lxc.get()
    assert failure.value.status_code == 595
    names = [e['name'] for e in localpve.pve_errors('POST', '/nodes/pve1/lxc/{0}/status/start'.format(vmid))]
    assert 'already_running' in names
    localpve.clear()
    assert api.nodes('pve2').lxc.get() == []
    assert wait_task(api, api.nodes('pve1').lxc(vmid).status.start.post())['exitstatus'] == 'OK'
