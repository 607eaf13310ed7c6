"""The provider seam and the Proxmox provider against a real fakepve server over HTTPS.

Each call of the seam is run against the fake, and each error kind of the seam is provoked with PVE's own
error answers (fakepve's catalogue) or with the fake's stateful behaviour (locks, running tasks).
"""

import time

import pytest

from ansible_collections.ephemera.workspaces.plugins.module_utils.providers import registry
from ansible_collections.ephemera.workspaces.plugins.module_utils.core import ownership
from ansible_collections.ephemera.workspaces.plugins.module_utils.providers import base
from ansible_collections.ephemera.workspaces.plugins.module_utils.providers.proxmox import client as pve
from ansible_collections.ephemera.workspaces.plugins.module_utils.providers.proxmox.containers import (
    parse_resource_key,
    resource_key,
)
from ansible_collections.ephemera.workspaces.plugins.module_utils.providers.proxmox.provider import (
    ProxmoxProvider,
    interface_addresses,
    merge_net,
    same_net,
)

TEMPLATE = 9000
POOL = 'disposable-workspaces'
SECRET = b'provider-test-secret'
OPEN = []


@pytest.fixture(autouse=True)
def close_clients(request):
    if 'fakepve' in request.fixturenames:
        request.getfixturevalue('fakepve')  # the server stops after its clients closed
    yield
    while OPEN:
        OPEN.pop().close()


@pytest.fixture
def site(fakepve, fakepve_cafile):
    """A fake with a template on pve1 and our pool; (fakepve, provider with the controller secret)."""
    fakepve.add_ct(TEMPLATE, 'tpl', template=True, config={
        'rootfs': 'local-lvm:base-%d-disk-0,size=8G' % TEMPLATE,
        'net0': 'name=eth0,bridge=vmbr0,hwaddr=BC:24:11:00:23:28,ip=dhcp,type=veth'})
    provider = make_provider(fakepve, fakepve_cafile, SECRET)
    provider.client.post('/pools', poolid=POOL)
    return fakepve, provider


def make_provider(fakepve, cafile, secret=None, **options):
    client = pve.PveClient(fakepve.url, api_user='root@pam', api_password='secret', ca_file=cafile, get_retries=0,
                           **options)
    OPEN.append(client)
    return ProxmoxProvider(client, secret)


def allocation(candidate, workspace='ws1', **extra):
    args = dict(source=TEMPLATE, location='pve1', hostname='agent-' + workspace, scope=POOL)
    args.update(extra)
    return base.Allocation(candidate, workspace, **args)


NONCE = '0f' * 16


def allocate(provider, candidate, workspace='ws1'):
    handle = provider.allocate(allocation(candidate, workspace, nonce=NONCE))
    provider.wait(handle, timeout=30)
    return provider.find(candidate, 'pve1')


# ------------------------------------------------------------------------------ error kinds

@pytest.mark.parametrize('cls, kind, seam', [
    (pve.PveNotFound, base.NOT_FOUND, base.NotFound),
    (pve.PveAlreadyExists, base.CONFLICT, base.Conflict),
    (pve.PveLocked, base.LOCKED, base.Locked),
    (pve.PveLockTimeout, base.LOCKED, base.Locked),
    (pve.PveTransient, base.TRANSIENT, base.Transient),
    (pve.PveUnreachable, base.TRANSIENT, base.Transient),
    (pve.PveUnknownOutcome, base.UNKNOWN_OUTCOME, base.UnknownOutcome),
    (pve.PveParameterError, base.REFUSED, base.Refused),
    (pve.PvePermissionDenied, base.REFUSED, base.Refused),
    (pve.PveAuthError, base.REFUSED, base.Refused),
    (pve.PveTlsError, base.REFUSED, base.Refused),
    (pve.PveConfigError, base.REFUSED, base.Refused),
    (pve.PveApiError, base.REFUSED, base.ProviderError),
])
def test_every_pve_error_is_one_of_the_seams_kinds(cls, kind, seam):
    err = cls('x') if cls is pve.PveConfigError else cls('x', method='GET', path='/p')
    assert isinstance(err, seam) and isinstance(err, base.ProviderError)
    assert err.error_kind == kind
    others = [c for c in (base.NotFound, base.Conflict, base.Locked, base.Transient, base.UnknownOutcome, base.Refused)
              if c is not seam]
    assert not any(isinstance(err, c) for c in others)


def test_task_failures_and_timeouts_are_a_refusal_and_an_unknown_outcome():
    task = pve.TaskResult('UPID:pve1:0001A2B3:00C4D5E6:65F0A1B2:vzstart:105:root@pam:', 'stopped', 'boom')
    failed = pve.PveTaskFailed(task)
    timeout = pve.PveTaskTimeout(task.upid, 5, 5.1, task)
    assert isinstance(failed, base.TaskFailed) and failed.error_kind == base.REFUSED
    assert failed.task_id == task.upid
    assert isinstance(timeout, base.TaskTimeout) and timeout.error_kind == base.UNKNOWN_OUTCOME
    assert timeout.task_id == task.upid


def test_provider_message_is_pves_own_text():
    err = pve.PveLocked('GET /x: CT is locked (backup)', lock='backup', pve_message='CT is locked (backup)')
    assert err.provider_message == 'CT is locked (backup)'


# ------------------------------------------------------------------------------ registry

def test_bind_wraps_a_client_and_rebinds_a_provider(fakepve, fakepve_cafile):
    provider = make_provider(fakepve, fakepve_cafile)
    assert registry.bind(None) is None
    bound = registry.bind(provider.client, SECRET)
    assert isinstance(bound, ProxmoxProvider) and bound.client is provider.client and bound.secret == SECRET
    assert registry.bind(bound, SECRET) is bound
    other = registry.bind(bound, b'other')
    assert other.secret == b'other' and other.controller == ownership.controller_id(b'other')
    assert registry.provider_class('proxmox') is ProxmoxProvider
    with pytest.raises(TypeError):
        registry.bind(object())
    with pytest.raises(ValueError, match='Unknown provider'):
        registry.provider_class('nope')


# ------------------------------------------------------------------------------ identity

def test_cleanup_debt_ids_are_built_and_read_in_one_place():
    provider = ProxmoxProvider(client=None)
    assert provider.resource_key(105, 'pve1') == resource_key(105, 'pve1') == 'lxc/105@pve1'
    assert provider.resource_key(105) == 'lxc/105'
    assert provider.parse_resource_key('lxc/105@pve1') == parse_resource_key('lxc/105@pve1') == (105, 'pve1')
    for other in ('guest:git-askpass@lxc/105', 'qemu/100@pve1', 'lxc/x@pve1', '', None):
        assert provider.parse_resource_key(other) == (None, None)
    assert provider.label(105) == 'CT 105' and provider.label(105, 'pve2') == 'CT 105 on pve2'


# ------------------------------------------------------------------------------ allocation

def test_check_source_returns_the_templates_node(site):
    fakepve, provider = site
    assert provider.check_source(TEMPLATE, None, POOL) == 'pve1'
    assert provider.check_source(TEMPLATE, 'pve1', POOL) == 'pve1'


@pytest.mark.parametrize('source, location, scope, said', [
    (9999, None, POOL, 'Template 9999 does not exist'),
    (105, None, POOL, r'VMID 105 \(box\) is not an LXC template'),
    (TEMPLATE, 'pve2', POOL, 'lives on node pve1, not pve2'),
    (TEMPLATE, None, 'nope', "Pool 'nope' does not exist"),
])
def test_check_source_refuses_what_cannot_work(site, source, location, scope, said):
    fakepve, provider = site
    fakepve.add_ct(105, 'box')
    with pytest.raises(base.InvalidRequest, match=said) as caught:
        provider.check_source(source, location, scope)
    assert caught.value.error_kind == base.REFUSED


def test_candidate_is_the_next_free_id_and_avoids_ids_found_taken(site):
    fakepve, provider = site
    first = provider.candidate()
    assert first == 100
    slept = []
    with pytest.raises(base.Conflict, match='kept offering VMIDs that were just found taken'):
        provider.candidate(avoid={first}, sleep=slept.append)
    assert len(slept) == 10


def test_allocate_writes_the_marker_with_the_claim_and_the_resource_verifies(site):
    fakepve, provider = site
    resource = allocate(provider, 100)
    assert resource.id == 100 and resource.location == 'pve1' and resource.lock is None
    ct = fakepve.ct(100)
    assert ct.config['hostname'] == 'agent-ws1' and ct.pool == POOL
    assert resource.marker_text == provider.marker('ws1', 100, NONCE)
    assert provider.verify(resource, 'ws1') == ownership.VERIFIED
    assert provider.verify(resource, 'ws1', NONCE) == ownership.VERIFIED
    assert provider.verify(resource, 'ws1', '1e' * 16) == ownership.REPLAYED
    assert provider.verify(resource, 'ws1', None) == ownership.REPLAYED  # a record made before nonces wants v1
    assert provider.marker_fields(resource)['workspace'] == 'ws1'
    clone = [r for r in fakepve.requests if r[0] == 'POST' and r[1].endswith('/clone')][0]
    assert 'storage' not in str(clone)  # a linked clone takes no storage


def test_allocate_an_id_that_is_taken_is_a_conflict(site):
    fakepve, provider = site
    fakepve.add_ct(100, 'theirs')
    with pytest.raises(base.Conflict):
        provider.allocate(allocation(100))


def test_allocate_from_a_locked_template_is_locked(site):
    fakepve, provider = site
    fakepve.fail('POST', '/nodes/pve1/lxc/%d/clone' % TEMPLATE, error='locked')
    with pytest.raises(base.Locked):
        provider.allocate(allocation(100))


def test_allocate_without_an_answer_is_an_unknown_outcome(site):
    fakepve, provider = site
    fakepve.fail('POST', '/nodes/pve1/lxc/%d/clone' % TEMPLATE, status=502, message='Bad Gateway', html=True)
    with pytest.raises(base.UnknownOutcome):
        provider.allocate(allocation(100))


def test_allocation_task_is_found_when_one_task_of_ours_fits(site):
    fakepve, provider = site
    since = time.time()
    handle = provider.allocate(allocation(100))
    provider.wait(handle, timeout=30)
    assert provider.allocation_task(allocation(100), since) == handle
    assert provider.allocation_task(allocation(100), since + 3600) is None
    provider.wait(provider.allocate(allocation(101, 'ws2')), timeout=30)
    assert provider.allocation_task(allocation(100), since) is None  # two fit: none is chosen


# ------------------------------------------------------------------------------ looking

def test_find_an_absent_resource_is_none_and_search_follows_a_moved_one(site):
    fakepve, provider = site
    assert provider.find(100, 'pve1') is None
    fakepve.add_ct(100, 'moved', node='pve2')
    assert provider.find(100, 'pve1') is None
    found = provider.find(100, 'pve1', search=True)
    assert (found.id, found.location) == (100, 'pve2')


def test_verify_gives_one_verdict_for_each_case(site, fakepve_cafile):
    fakepve, provider = site
    ours = allocate(provider, 100)
    fakepve.add_ct(101, 'plain')
    assert provider.verify(provider.find(101, 'pve1'), 'ws1') == ownership.ABSENT
    assert provider.verify(ours, 'other-ws') == ownership.MISMATCH
    fakepve.add_ct(102, 'copy', config={'description': ours.marker_text})
    assert provider.verify(provider.find(102, 'pve1'), 'ws1') == ownership.MISMATCH
    forged = ours.marker_text[:-4] + '0000'
    fakepve.add_ct(103, 'forged', config={'description': forged.replace('vmid=100', 'vmid=103')})
    assert provider.verify(provider.find(103, 'pve1'), 'ws1') == ownership.FORGED
    stranger = make_provider(fakepve, fakepve_cafile, b'another controller')
    assert stranger.verify(ours, 'ws1') == ownership.FOREIGN
    assert make_provider(fakepve, fakepve_cafile).verify(ours, 'ws1') == base.UNVERIFIED
    assert provider.verify(None, 'ws1') == ownership.ABSENT


def test_list_and_scope(site):
    fakepve, provider = site
    allocate(provider, 100)
    fakepve.add_ct(101, 'tagged', config={'tags': 'ephemera;x'})
    fakepve.add_vm(102, 'vm', pool=POOL)
    listed = {e['id']: e for e in provider.list()}
    assert TEMPLATE not in listed
    assert listed[100]['location'] == 'pve1' and listed[100]['pool'] == POOL and listed[100]['kind'] == 'lxc'
    assert listed[101]['tags'] == ['ephemera', 'x']
    assert provider.in_scope(listed[100], POOL) and not provider.in_scope(listed[101], POOL)
    assert provider.in_scope(listed[101], POOL, 'ephemera')
    assert 102 not in listed and 102 in [e['id'] for e in provider.list(every_kind=True)]


# ------------------------------------------------------------------------------ acting

def test_settings_are_planned_as_a_diff_and_applied_with_the_digest(site):
    fakepve, provider = site
    resource = allocate(provider, 100)
    settings = base.Settings(cores=2, memory=2048, bridge='vmbr1', ip='10.0.0.5/24', gateway='10.0.0.1',
                             tags=['ephemera', 't1', 'ephemera'])
    changes = provider.plan_settings(resource, settings)
    assert sorted(changes) == ['cores', 'memory', 'net0', 'tags']
    assert changes['memory'] == (512, 2048)
    mac = resource.native['net0'].split('hwaddr=')[1].split(',')[0]  # the clone's own
    assert changes['net0'] == (resource.native['net0'],
                               'name=eth0,bridge=vmbr1,hwaddr=%s,ip=10.0.0.5/24,type=veth,gw=10.0.0.1' % mac)
    assert changes['tags'] == (None, 'ephemera;t1')
    provider.apply_settings(resource, changes)
    assert provider.plan_settings(provider.find(100, 'pve1'), settings) == {}
    with pytest.raises(base.ProviderError, match='detected modified configuration') as caught:
        provider.apply_settings(resource, {'memory': (2048, 1024)})  # the digest it read is stale
    assert caught.value.error_kind == base.REFUSED


def test_start_address_shutdown_stop_with_nothing_to_do_as_none(site):
    fakepve, provider = site
    resource = allocate(provider, 100)
    provider.apply_settings(resource, provider.plan_settings(resource, base.Settings(1, 512, 'vmbr0', '127.0.9.9/8')))
    assert provider.power(resource).state == base.STOPPED
    assert provider.addresses(resource) == []
    assert provider.shutdown(resource, 10) is None and provider.stop(resource) is None
    provider.wait(provider.start(resource), 30)
    assert provider.power(resource).running
    assert provider.start(resource) is None
    assert provider.addresses(resource) == [('eth0', 'inet', '127.0.9.9')]
    provider.wait(provider.shutdown(resource, 10), 40)
    assert provider.power(resource).state == base.STOPPED
    provider.wait(provider.start(resource), 30)
    provider.wait(provider.stop(resource), 30)
    assert provider.power(resource).state == base.STOPPED
    assert provider.power(provider.ref(4242, 'pve1')).state is None  # gone


def test_a_start_that_fails_in_its_task_is_a_task_failure_with_the_log(site):
    fakepve, provider = site
    resource = allocate(provider, 100)
    fakepve.ct(100).start_error = 'no rootfs'
    handle = provider.start(resource)
    with pytest.raises(base.TaskFailed) as caught:
        provider.wait(handle, 30)
    assert caught.value.task_id == handle and 'TASK ERROR: no rootfs' in caught.value.log_tail
    status = provider.task_status(handle)
    assert (status.status, status.exitstatus) == ('stopped', 'no rootfs')


@pytest.mark.fakepve(time_scale=1)
def test_a_task_still_running_at_the_deadline_is_a_timeout(site):
    fakepve, provider = site
    fakepve.add_ct(105, 'box').start_secs = 60
    handle = provider.start(provider.ref(105, 'pve1'))
    with pytest.raises(base.TaskTimeout) as caught:
        provider.wait(handle, 0.3)
    assert caught.value.task_id == handle
    assert provider.task_status(handle).status == 'running'


def test_an_unknown_task_is_not_found(site):
    fakepve, provider = site
    with pytest.raises(base.NotFound):
        provider.task_status('UPID:pve1:000003E8:00001B58:6B105231:vzstart:105:root@pam:')


def test_delete_is_confirmed_by_absence_and_by_its_task(site):
    fakepve, provider = site
    resource = allocate(provider, 100)
    since = time.time()
    assert provider.delete_blocker(resource, TEMPLATE) is None
    assert provider.delete_options() == {'purge': 1}
    provider.wait(provider.delete(resource), 30)
    assert provider.find(100, 'pve1') is None
    assert provider.deleted_since(100, 'pve1', since)
    assert not provider.deleted_since(100, 'pve1', since + 3600)
    with pytest.raises(base.NotFound):
        provider.delete(resource)


@pytest.mark.parametrize('error, seam', [
    ('locked', base.Locked),
    ('config_lock_timeout', base.Locked),
    ('no_quorum', base.Transient),
    ('permission_denied', base.Refused),
    ('protection_mode_enabled', base.ProviderError),
    ('configuration_file_does_not_exist', base.NotFound),
])
def test_delete_errors_are_the_seams_kinds(site, error, seam):
    fakepve, provider = site
    resource = allocate(provider, 100)
    fakepve.fail('DELETE', '/nodes/pve1/lxc/100', error=error)
    with pytest.raises(seam):
        provider.delete(resource)


def test_delete_blockers_say_what_a_person_must_do(site):
    fakepve, provider = site
    allocate(provider, 100)
    fakepve.ct(100).config['protection'] = 1
    assert 'pct set 100 --protection 0' in provider.delete_blocker(provider.find(100, 'pve1'), TEMPLATE)
    del fakepve.ct(100).config['protection']
    fakepve.snapshot_lock(100, 'create')
    found = provider.find(100, 'pve1')
    assert found.lock == 'create' and not found.deleting
    assert 'pct unlock 100' in provider.delete_blocker(found)  # (the fake lists ended tasks as active too)
    assert 'pct unlock 105' in provider.unlock_hint(105)


# ------------------------------------------------------------------------------ pure helpers

def test_interface_addresses_read_ip_addresses_not_legacy_inet():
    answer = [
        {'name': 'lo', 'ip-addresses': [{'ip-address-type': 'inet', 'ip-address': '127.0.0.1'}]},
        {'name': 'eth0', 'inet': '10.0.0.9/24', 'ip-addresses': [
            {'ip-address-type': 'inet6', 'ip-address': 'fe80::1'},
            {'ip-address-type': 'inet', 'ip-address': '10.0.0.5'}]},
        {'name': 'eth1', 'inet': '10.0.1.9/24'},
    ]
    found = interface_addresses(answer)
    assert found == [('eth0', 'inet6', 'fe80::1'), ('eth0', 'inet', '10.0.0.5')]
    assert base.first_address(found) == '10.0.0.5' and base.reachable_address(found) == '10.0.0.5'
    assert base.first_address(found, expected='10.0.0.9') is None
    assert base.reachable_address([('eth0', 'inet6', 'fe80::1'), ('eth0', 'inet6', '2001:db8::5')]) == '2001:db8::5'
    assert interface_addresses(None) == [] and base.reachable_address([]) is None


def test_nic_values_merge_and_compare():
    template = 'name=eth0,bridge=vmbr0,firewall=1,hwaddr=BC:24:11:00:23:28,ip=dhcp,type=veth'
    merged = merge_net(template, 'name=eth0,bridge=vmbr1,ip=10.0.0.5/24,gw=10.0.0.1')
    assert merged == 'name=eth0,bridge=vmbr1,firewall=1,hwaddr=BC:24:11:00:23:28,ip=10.0.0.5/24,type=veth,gw=10.0.0.1'
    assert same_net(template, 'type=veth,ip=dhcp,hwaddr=BC:24:11:00:23:28,firewall=1,bridge=vmbr0,name=eth0')


def test_remark_gives_a_warm_members_container_to_a_workspace_and_refuses_a_changed_one(site):
    fakepve, provider = site
    member = allocate(provider, 100, workspace='debian-0a1b2c3d')
    nonce = '2c' * 16
    labels = {'state': 'provisioning', 'expires_at': '1796500000', 'keep': 'false', 'created_at': '1796490000'}
    provider.remark(member, 'fix-login', nonce, 'agent-fix-login', labels)
    taken = provider.find(100, 'pve1')
    assert provider.verify(taken, 'fix-login', nonce) == ownership.VERIFIED
    assert provider.verify(taken, 'debian-0a1b2c3d', NONCE) != ownership.VERIFIED
    assert fakepve.ct(100).config['hostname'] == 'agent-fix-login'
    assert provider.labels(taken)['state'] == 'provisioning'
    # The member's config as read before the re-signing: its digest is stale, nothing is written.
    with pytest.raises(base.ProviderError):
        provider.remark(member, 'other', '3d' * 16, 'agent-other')
    assert provider.verify(provider.find(100, 'pve1'), 'fix-login', nonce) == ownership.VERIFIED
