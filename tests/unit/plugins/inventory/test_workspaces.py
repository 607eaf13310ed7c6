"""The inventory plugin's pure logic: how journal records and one /cluster/resources answer become hosts."""

import json

import pytest

from ansible_collections.ephemera.workspaces.plugins.inventory import workspaces as inv
from ansible_collections.ephemera.workspaces.plugins.module_utils.core import ownership

SECRET = b'unit-secret'
CONTROLLER = 'ctl-1'
POOL = 'disposable-workspaces'


def record(name, status='ready', vmid=None, **fields):
    base = dict(name=name, status=status, activity='idle', desired_state='present', vmid=vmid, candidate_vmid=None,
                node='pve1', repo='https://git/r.git', ref='main', purpose='p', failure=None, address=None,
                params={'pool': POOL, 'agent_user': 'agent', 'ssh_user': 'root', 'ssh_port': 22, 'tags': ['t1']},
                progress={}, created_at='2026-01-01T00:00:00Z', updated_at='2026-01-01T00:00:00Z')
    base.update(fields)
    return base


def resource(vmid, name, status='running', pool=POOL, node='pve1', **extra):
    item = dict(vmid=vmid, name=name, status=status, node=node, type='lxc', template=0)
    if pool:
        item['pool'] = pool
    item.update(extra)
    return item


@pytest.mark.parametrize('answer, expected', [
    (None, None),
    ([], None),
    ([{'name': 'lo', 'ip-addresses': [{'ip-address-type': 'inet', 'ip-address': '127.0.0.1'}]}], None),
    ([{'name': 'lo', 'ip-addresses': [{'ip-address-type': 'inet', 'ip-address': '127.0.0.1'}]},
      {'name': 'eth0', 'ip-addresses': [{'ip-address-type': 'inet6', 'ip-address': 'fe80::1'},
                                        {'ip-address-type': 'inet6', 'ip-address': '2001:db8::5'},
                                        {'ip-address-type': 'inet', 'ip-address': '127.0.3.4'}]}], '127.0.3.4'),
    ([{'name': 'eth0', 'ip-addresses': [{'ip-address-type': 'inet6', 'ip-address': 'fe80::1'},
                                        {'ip-address-type': 'inet6', 'ip-address': '2001:db8::5'}]}], '2001:db8::5'),
    ([{'name': 'eth0', 'inet': '10.0.0.5/24'}], None),  # the legacy single-address field is not read
])
def test_pick_address(answer, expected):
    assert inv.pick_address(answer) == expected


@pytest.mark.parametrize('text, tags', [(None, []), ('', []), ('b;a', ['a', 'b']), ('a, b c;a', ['a', 'b', 'c'])])
def test_parse_tags(text, tags):
    assert inv.parse_tags(text) == tags


@pytest.mark.parametrize('rec, operation, step', [
    (record('w', 'ready'), None, None),
    (record('w', 'destroyed'), None, None),
    (record('w', 'destroying'), None, 'destroy'),
    (record('w', 'requested'), None, 'request'),
    (record('w', 'booting', progress={'request': 1, 'vmid': 1, 'clone': 1, 'wait_clone': 1, 'configure': 1}), None,
     'start'),
    (record('w', 'failed', failure={'step': 'ssh', 'message': 'x'}), None, 'ssh'),
    (record('w', 'failed', failure=None, progress={'request': 1}), None, 'vmid'),
    (record('w', 'provisioning'), {'step': 'clone'}, 'clone'),
    (record('w', 'provisioning', progress={'request': 1}), {'step': None}, 'vmid'),
])
def test_current_step(rec, operation, step):
    assert inv.current_step(rec, operation) == step


def test_assemble_without_cluster_keeps_the_journal_view():
    snap = inv.assemble([record('a', vmid=101, address='127.0.0.5')], [], {}, None, [POOL])
    [ws] = snap['workspaces']
    assert (ws['live_status'], ws['address'], ws['address_source']) == ('unknown', '127.0.0.5', 'journal')
    assert ws['tags'] == ['ephemera', 't1']
    assert snap['orphans'] == []


def test_assemble_matches_by_vmid_and_finds_orphans():
    records = [record('a', vmid=101, address='127.0.0.5'), record('b', 'booting', vmid=102),
               record('c', 'provisioning', candidate_vmid=103), record('d', 'failed', vmid=104),
               record('e', 'destroyed', vmid=105), record('f', vmid=106)]
    debts = [dict(workspace='d', resource='lxc/104@pve1', attempts=2, last_error='locked', next_retry='x', other=1)]
    resources = [resource(101, 'agent-a', tags='ephemera;team'), resource(102, 'agent-b', node='pve2'),
                 resource(103, 'agent-c', pool=None, lock='create'), resource(105, 'agent-e'),
                 resource(106, 'renamed-f'), resource(107, 'stray', status='stopped'),
                 resource(108, 'elsewhere', pool='other'), resource(9000, 'tpl', template=1)]
    snap = inv.assemble(records, debts, {}, resources, [POOL])
    ws = {w['name']: w for w in snap['workspaces']}
    assert ws['a']['live_status'] == 'running' and ws['a']['tags'] == ['ephemera', 'team']
    assert not ws['a']['needs_address'] and not ws['a']['check_marker']
    assert ws['b']['node'] == 'pve2' and ws['b']['needs_address']
    # The candidate of a clone in flight is the workspace's when it bears its name.
    assert (ws['c']['vmid'], ws['c']['lock'], ws['c']['pool']) == (103, 'create', None)
    assert ws['d']['live_status'] == 'absent' and ws['d']['cleanup_debt'] == [
        dict(resource='lxc/104@pve1', attempts=2, last_error='locked', next_retry='x')]
    # A destroyed workspace claims nothing: its old id, taken again, is an orphan.
    assert ws['e']['live_status'] == 'absent'
    assert ws['f']['check_marker']
    assert [(o['vmid'], o['reason']) for o in snap['orphans']] == [(105, 'not_in_journal'), (107, 'not_in_journal')]
    assert all(o['check_marker'] for o in snap['orphans'])


def test_assemble_ignores_a_candidate_under_another_name():
    snap = inv.assemble([record('c', 'provisioning', candidate_vmid=103)], [], {}, [resource(103, 'someone-else')],
                        [POOL])
    assert snap['workspaces'][0]['vmid'] is None and snap['workspaces'][0]['live_status'] == 'absent'
    assert [o['vmid'] for o in snap['orphans']] == [103]


def test_apply_marker_on_a_renamed_container_of_ours_keeps_it():
    snap = inv.assemble([record('f', vmid=106)], [], {}, [resource(106, 'renamed-f')], [POOL])
    ws = snap['workspaces'][0]
    inv.apply_marker(snap, ws, ownership.render(SECRET, CONTROLLER, 'f', 106), SECRET, CONTROLLER)
    assert (ws['marker'], ws['live_status']) == ('verified', 'running') and snap['orphans'] == []


def test_apply_marker_on_a_foreign_container_at_our_vmid_makes_an_orphan():
    snap = inv.assemble([record('f', vmid=106)], [], {}, [resource(106, 'intruder', tags='x', lock='backup')], [POOL])
    ws = snap['workspaces'][0]
    inv.apply_marker(snap, ws, ownership.render(SECRET, CONTROLLER, 'g', 106), SECRET, CONTROLLER)
    assert (ws['marker'], ws['live_status'], ws['lock'], ws['tags']) == ('mismatch', 'mismatch', None, ['ephemera', 't1'])
    [orphan] = snap['orphans']
    assert (orphan['vmid'], orphan['reason'], orphan['marker_workspace']) == (106, 'marker_mismatch', 'g')


@pytest.mark.parametrize('description, secret, verdict', [
    (None, SECRET, 'absent'),
    ('note only', None, 'absent'),
    (ownership.render(SECRET, 'other-controller', 'x', 107), None, 'foreign'),
    (ownership.render(SECRET, CONTROLLER, 'x', 107), None, 'unverified'),
    (ownership.render(SECRET, CONTROLLER, 'x', 107), SECRET, 'verified'),
    (ownership.render(b'not-ours', CONTROLLER, 'x', 107), SECRET, 'forged'),
    (ownership.render(SECRET, CONTROLLER, 'x', 999), SECRET, 'mismatch'),
])
def test_orphan_marker_verdicts(description, secret, verdict):
    snap = inv.assemble([], [], {}, [resource(107, 'stray')], [POOL])
    [orphan] = snap['orphans']
    inv.apply_marker(snap, orphan, description, secret, CONTROLLER)
    assert orphan['marker'] == verdict
    assert orphan['marker_workspace'] == ('x' if description and 'workspace=' in description else None)


@pytest.mark.parametrize('filters, names', [
    ({}, ['a', 'b', 'd']),
    ({'status': 'destroyed'}, ['c', 'd']),
    ({'status': ['ready', 'failed']}, ['a', 'b']),
    ({'node': 'pve2'}, ['b']),
    ({'tag': ['t1']}, ['a', 'b', 'd']),
    ({'tag': ['t1', 'team']}, ['a']),
    ({'tag': 'nope'}, []),
])
def test_filters(filters, names):
    records = [record('a', vmid=101), record('b', 'failed', node='pve2'), record('c', 'destroyed'),
               record('d', 'destroyed')]
    debts = [dict(workspace='d', resource='r', attempts=1, last_error='e', next_retry='x')]
    snap = inv.assemble(records, debts, {}, [resource(101, 'agent-a', tags='t1;team')], [POOL])
    assert [w['name'] for w in snap['workspaces'] if inv.wanted(w, filters)] == names


def test_make_unsafe_keeps_every_value():
    value = inv.make_unsafe({'a': 'plain', 'b': ['{{ x }}', 1, None], 'c': {'d': '{% if %}'}})
    assert value['a'] == 'plain'
    assert isinstance(value['b'][0], str) and value['b'][1:] == [1, None]
    assert value['b'][0] == '{{ x }}' and value['c']['d'] == '{% if %}'


@pytest.mark.parametrize('name, safe', [('pve1', 'pve1'), ('pve-2.lab', 'pve_2_lab')])
def test_safe_group(name, safe):
    assert inv.safe_group(name) == safe


@pytest.mark.parametrize('fields, groups', [
    ({}, ['status_ready', 'activity_idle', 'node_pve1']),
    ({'node': 'pve-2', 'activity': 'blocked'}, ['status_ready', 'activity_blocked', 'node_pve_2']),
    ({'node': None}, ['status_ready', 'activity_idle']),
    ({'cleanup_debt': [{'resource': 'r'}]}, ['status_ready', 'activity_idle', 'node_pve1', 'cleanup_debt']),
    ({'live_status': 'absent'}, ['status_ready', 'activity_idle', 'node_pve1', 'missing']),
    ({'live_status': 'mismatch', 'status': 'failed'}, ['status_failed', 'activity_idle', 'node_pve1', 'missing']),
    ({'live_status': 'absent', 'status': 'destroying'}, ['status_destroying', 'activity_idle', 'node_pve1']),
    ({'live_status': 'absent', 'vmid': None}, ['status_ready', 'activity_idle', 'node_pve1']),
    ({'live_status': 'unknown'}, ['status_ready', 'activity_idle', 'node_pve1']),
])
def test_workspace_groups(fields, groups):
    ws = inv.workspace_entry(record('a', vmid=101), [], None)
    ws.update(fields)
    assert inv.workspace_groups(ws) == groups


def test_a_template_builds_candidate_is_no_host_and_no_orphan():
    params = dict(record('x')['params'], build={'template': 'workspace', 'version': 2})
    records = [record('tb-workspace-v2', 'bootstrapping', vmid=120, params=params), record('a', vmid=101)]
    resources = [resource(120, 'agent-tb-workspace-v2'), resource(101, 'agent-a')]
    snap = inv.assemble(records, [], {}, resources, [POOL])
    entries = {w['name']: w for w in snap['workspaces']}
    assert snap['orphans'] == []
    assert not inv.wanted(entries['tb-workspace-v2'], {})
    assert not inv.wanted(entries['tb-workspace-v2'], {'status': ['bootstrapping']})
    assert inv.wanted(entries['a'], {})


# ------------------------------------------------------------------------------------------- AWS

def aws_record(name, status='ready', instance=None, region='us-east-1', **fields):
    base = record(name, status, vmid=instance, node=region, **fields)
    base.update(provider='aws', location=region, resource_id=instance)
    return base


def instance(iid, name='agent-x', status='running', region='us-east-1', tags=('ephemera-workspace',)):
    return dict(id=iid, location=region, kind='instance', name=name, status=status, lock=None, pool=None,
                tags=list(tags))


def judge_by(markers):
    """judge() over {instance id: (workspace its genuine marker names, nonce)}; anything else is forged."""
    def judge(entry, workspace, nonce):
        named = markers.get(entry['id'])
        if named is None:
            return ownership.FORGED, None
        if workspace is not None and named[0] != workspace:
            return ownership.MISMATCH, named[0]
        if nonce is not ownership.ANY and nonce is not None and named[1] != nonce:
            return ownership.REPLAYED, named[0]
        return ownership.VERIFIED, named[0]
    return judge


def test_assemble_cloud_matches_instances_and_reports_orphans_with_why():
    records = [aws_record('a', instance='i-a', address='10.0.0.5'), aws_record('b', 'booting', instance='i-b'),
               aws_record('c', 'provisioning'), aws_record('d', instance='i-d'),
               aws_record('e', 'destroyed', instance='i-e'), aws_record('f', instance='i-f', region='eu-west-1')]
    listing = {'us-east-1': [instance('i-a'), instance('i-b', status='pending'), instance('i-c'),
                             instance('i-d'), instance('i-e'), instance('i-lost'), instance('i-copy')],
               'eu-west-1': None}
    markers = {'i-a': ('a', None), 'i-b': ('b', None), 'i-c': ('c', None), 'i-d': ('someone', None),
               'i-e': ('e', None), 'i-lost': ('lost', None)}
    snap = inv.assemble_cloud('aws', records, [], {}, listing, judge_by(markers))
    ws = {w['name']: w for w in snap['workspaces']}
    assert (ws['a']['live_status'], ws['a']['instance_id'], ws['a']['marker']) == ('running', 'i-a', 'verified')
    assert not ws['a']['needs_address'] and ws['b']['live_status'] == 'pending'
    # A create whose instance id is not recorded yet is matched by its verifying marker.
    assert (ws['c']['instance_id'], ws['c']['live_status']) == ('i-c', 'running') and ws['c']['needs_address']
    # The instance at d's id carries another workspace's marker: d is missing, the instance an orphan.
    assert (ws['d']['live_status'], ws['d']['marker']) == ('mismatch', 'mismatch')
    assert 'missing' in inv.cloud_groups(ws['d'])
    assert ws['e']['live_status'] == 'absent'
    # A region that could not be read keeps the journal's view.
    assert ws['f']['live_status'] == 'unknown' and 'missing' not in inv.cloud_groups(ws['f'])
    orphans = {o['instance_id']: o for o in snap['orphans']}
    assert sorted(orphans) == ['i-copy', 'i-d', 'i-e', 'i-lost']
    assert (orphans['i-copy']['reason'], orphans['i-copy']['marker']) == ('not_in_journal', 'forged')
    assert (orphans['i-d']['reason'], orphans['i-d']['marker_workspace']) == ('marker_mismatch', 'someone')
    assert (orphans['i-e']['reason'], orphans['i-e']['marker']) == ('destroyed_in_journal', 'verified')
    assert (orphans['i-lost']['reason'], orphans['i-lost']['marker'], orphans['i-lost']['marker_workspace']) == (
        'not_in_journal', 'verified', 'lost')
    assert all(o['provider'] == 'aws' and o['region'] == 'us-east-1' and o['vmid'] is None for o in orphans.values())


def test_assemble_cloud_never_matches_an_earlier_life_or_two_candidates():
    now, before = ownership.new_nonce(), ownership.new_nonce()
    records = [aws_record('r', 'provisioning', facts={'marker_nonce': now}), aws_record('two', 'provisioning')]
    listing = {'us-east-1': [instance('i-old'), instance('i-x1'), instance('i-x2')]}
    markers = {'i-old': ('r', before), 'i-x1': ('two', None), 'i-x2': ('two', None)}
    snap = inv.assemble_cloud('aws', records, [], {}, listing, judge_by(markers))
    ws = {w['name']: w for w in snap['workspaces']}
    # The instance of an earlier life of r (its marker's nonce is not the record's) is not r's.
    assert (ws['r']['instance_id'], ws['r']['live_status']) == (None, 'absent')
    # Two instances verify for one create: neither is taken for it.
    assert ws['two']['instance_id'] is None
    assert sorted(o['instance_id'] for o in snap['orphans']) == ['i-old', 'i-x1', 'i-x2']


def test_cloud_hosts_have_provider_region_and_instance_vars_and_groups():
    snap = inv.assemble_cloud('aws', [aws_record('a', instance='i-a', region='eu-central-1')], [], {},
                              {'eu-central-1': [instance('i-a', region='eu-central-1')]},
                              judge_by({'i-a': ('a', None)}))
    [ws] = snap['workspaces']
    shown = inv.cloud_vars(ws)
    assert (shown['provider'], shown['region'], shown['instance_id'], shown['vmid'], shown['node']) == (
        'aws', 'eu-central-1', 'i-a', None, None)
    assert inv.cloud_groups(ws) == ['status_ready', 'activity_idle', 'provider_aws', 'region_eu_central_1']
    assert not inv.wanted(ws, {'node': 'pve1'}) and inv.wanted(ws, {'status': 'ready'})


def test_a_warm_pool_member_on_a_cloud_is_in_the_warm_pool_groups_as_on_proxmox():
    member = aws_record('warm-0a1b2c3d', 'registering', instance='i-m', params={'pool_member': {'pool': 'warm'}})
    taken = aws_record('warm-9f8e7d6c', 'destroyed', params={'pool_member': {'pool': 'warm'}})
    snap = inv.assemble_cloud('aws', [member, taken], [], {}, {'us-east-1': [instance('i-m')]},
                              judge_by({'i-m': ('warm-0a1b2c3d', None)}))
    ws = {w['name']: w for w in snap['workspaces']}
    assert inv.cloud_vars(ws['warm-0a1b2c3d'])['warm_pool'] == 'warm'
    assert inv.cloud_groups(ws['warm-0a1b2c3d'])[-2:] == ['warm_pool_members', 'warm_pool_warm']
    assert 'warm_pool_members' not in inv.cloud_groups(ws['warm-9f8e7d6c'])


def test_a_cloud_snapshot_is_plain_data_for_the_cache():
    """The listing entries hold the provider's resources; what the snapshot keeps (and a cache plugin stores) must
    be plain data."""
    entry = dict(instance('i-a'), resource=object())
    snap = inv.assemble_cloud('aws', [aws_record('a', instance='i-a')], [], {}, {'us-east-1': [entry,
                              dict(instance('i-b'), resource=object())]}, judge_by({'i-a': ('a', None)}))
    [ws] = snap['workspaces']
    assert ws.pop('live') is entry
    json.dumps(snap)
    assert [o['instance_id'] for o in snap['orphans']] == ['i-b']


def test_without_the_secret_an_instance_is_its_workspaces_when_its_marker_names_it():
    def judge(entry, workspace, nonce):
        named = {'i-a': 'a', 'i-b': 'someone'}[entry['id']]
        return ownership.UNVERIFIED, named
    records = [aws_record('a', instance='i-a'), aws_record('b', instance='i-b')]
    snap = inv.assemble_cloud('aws', records, [], {}, {'us-east-1': [instance('i-a'), instance('i-b')]}, judge)
    ws = {w['name']: w for w in snap['workspaces']}
    assert (ws['a']['live_status'], ws['a']['marker']) == ('running', 'unverified')
    assert (ws['b']['live_status'], ws['b']['marker']) == ('mismatch', 'unverified')
    assert [(o['instance_id'], o['reason']) for o in snap['orphans']] == [('i-b', 'marker_unverified')]
