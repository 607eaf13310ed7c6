"""The Azure provider's logic at unit level: the planned identity and Azure's naming rules, the two polling rules,
ARM errors mapped onto the seam's kinds, and the set's create, delete, creation-prefix and orphan-sweep rules
against a recorded-answer ARM double (an in-memory Resource Manager with ARM's in-use rules). The same paths run
against the try-out cloud's ARM fake in tests/integration/azure/."""

import base64
import copy

import pytest

from ansible_collections.ephemera.workspaces.plugins.module_utils.providers import base
from ansible_collections.ephemera.workspaces.plugins.module_utils.providers.azure import client as azclient
from ansible_collections.ephemera.workspaces.plugins.module_utils.providers.azure import members as azset
from ansible_collections.ephemera.workspaces.plugins.module_utils.providers.azure import options as azoptions
from ansible_collections.ephemera.workspaces.plugins.module_utils.providers.azure import provider as azprovider
from ansible_collections.ephemera.workspaces.plugins.module_utils.providers.azure import plan as azplan
from ansible_collections.ephemera.workspaces.plugins.module_utils.providers.azure.plan import DISK, NIC, PIP, VM

SUB = '7a5e0c43-1f3b-4c1e-9b7e-0d1e5c0a0b01'
GROUP = 'workspaces'
SUBNET = '/subscriptions/%s/resourceGroups/%s/providers/Microsoft.Network/virtualNetworks/v/subnets/default' % (
    SUB, GROUP)
OPTIONS = {'vm_size': 'Standard_B1s', 'subnet_id': SUBNET, 'ssh_public_key': 'ssh-ed25519 AAAA test',
           'image': {'publisher': 'Debian', 'offer': 'debian-12', 'sku': '12-gen2', 'version': 'latest'}}


# ------------------------------------------------------------------------------ the plan

def test_base_name_is_stable_per_record_and_new_per_life():
    a = azplan.base_name('ws1', '2026-12-03T10:00:00Z')
    assert a == azplan.base_name('ws1', '2026-12-03T10:00:00Z')
    assert a != azplan.base_name('ws1', '2026-12-03T11:00:00Z')
    assert azplan.names(a) == {VM: a + '-vm', NIC: a + '-nic', PIP: a + '-pip', DISK: a + '-osdisk'}


@pytest.mark.parametrize('workspace', ['-ws', 'ws_1', 'ws.1', 'x' * 60, 'ws 1', ''])
def test_names_that_break_azure_rules_are_refused_before_anything(workspace):
    with pytest.raises(azplan.PlanError) as err:
        azplan.base_name(workspace, 'stamp')
    assert 'letters, digits and hyphens' in str(err.value)


@pytest.mark.parametrize('field,value,words', [
    ('group', 'bad/group', 'Resource group'), ('group', 'ends.', 'Resource group'),
    ('location', 'West Europe', 'location name'), ('subscription', 'not-a-guid', 'GUID'),
])
def test_plan_refuses_bad_scope(field, value, words):
    args = dict(group=GROUP, location='westeurope', subscription=SUB)
    args[field] = value
    with pytest.raises(azplan.PlanError) as err:
        azplan.plan('ws1', 'ws1-abc', args['group'], args['location'], 'm', 'scope', subscription=args['subscription'])
    assert words in str(err.value)


@pytest.mark.parametrize('tags,words', [({'a/b': 'x'}, 'not allowed'), ({'ephemera:x': '1'}, 'reserved'),
                                        ({'k': 'v' * 257}, '256'), ({'k%d' % i: 'v' for i in range(45)}, '50')])
def test_plan_refuses_tags_azure_does_not_take(tags, words):
    with pytest.raises(azplan.PlanError) as err:
        azplan.plan('ws1', 'ws1-abc', GROUP, 'westeurope', 'm', 'scope', extra=tags)
    assert words in str(err.value)


def test_plan_records_the_complete_identity_with_tags_on_each_member():
    p = azplan.plan('ws1', 'ws1-abc', GROUP, 'westeurope', 'MARKER', 'scope', labels={'keep': 'false'},
                    extra={'team': 'x'}, subscription=SUB)
    assert p['resource_group'] == GROUP and p['location'] == 'westeurope' and p['subscription'] == SUB
    assert set(p['tags']) == {VM, NIC, PIP, DISK}
    for member, tags in p['tags'].items():
        assert tags[azplan.TAG_MARKER] == 'MARKER' and tags[azplan.TAG_MEMBER] == member
        assert tags['ephemera:keep'] == 'false' and tags['team'] == 'x' and tags[azplan.TAG_SET] == 'ws1-abc'


# ------------------------------------------------------------------------------ polling rules

@pytest.mark.parametrize('status,body,verdict', [
    (200, None, azclient.PENDING), (200, {}, azclient.PENDING), (200, {'status': ''}, azclient.PENDING),
    (200, {'status': 'InProgress'}, azclient.PENDING), (200, {'status': 'Succeeded'}, azclient.SUCCEEDED),
    (202, {'status': 'Succeeded'}, azclient.PENDING), (500, None, azclient.PENDING),
])
def test_async_operation_empty_never_counts_as_success(status, body, verdict):
    assert azclient.judge_async(status, body) == verdict


@pytest.mark.parametrize('state', ['Failed', 'Canceled'])
def test_async_operation_failed_or_canceled_fails(state):
    verdict = azclient.judge_async(200, {'status': state, 'error': {'code': 'X', 'message': 'boom'}})
    assert verdict not in (azclient.PENDING, azclient.SUCCEEDED) and state in verdict and 'boom' in verdict


@pytest.mark.parametrize('status,body,verdict', [
    (202, None, azclient.PENDING), (202, {'status': 'Succeeded'}, azclient.PENDING),
    (200, None, azclient.SUCCEEDED), (204, None, azclient.SUCCEEDED), (200, {'id': 'x'}, azclient.SUCCEEDED),
    (200, {'status': 'InProgress'}, azclient.PENDING), (200, {'status': 'Running'}, azclient.PENDING),
])
def test_location_polling(status, body, verdict):
    assert azclient.judge_location(status, body) == verdict


def test_location_polling_with_explicit_failure_fails():
    verdict = azclient.judge_location(200, {'status': 'Failed', 'error': {'message': 'no'}})
    assert verdict not in (azclient.PENDING, azclient.SUCCEEDED)


def test_operation_of_prefers_what_the_answer_names():
    assert azclient.operation_of(200, {}) is None
    assert azclient.operation_of(201, {}) is None
    assert azclient.operation_of(202, {'Location': 'https://l'}) == {'async': None, 'location': 'https://l'}
    op = azclient.operation_of(201, {'Azure-AsyncOperation': 'https://a', 'Location': 'https://l'})
    assert op == {'async': 'https://a', 'location': 'https://l'}


# ------------------------------------------------------------------------------ ARM answers -> kinds

class Response:
    def __init__(self, status, body=None, headers=None):
        self.status_code = status
        self.headers = headers or {}
        self._text = '' if body is None else __import__('json').dumps(body)

    def text(self):
        return self._text

    def iter_bytes(self):
        yield self._text.encode()

    def close(self):
        pass


class Recorded:
    """An SDK client's send_request that plays recorded answers (or raises recorded exceptions)."""

    def __init__(self, answers):
        self.answers = list(answers)
        self.sent = []

    def send_request(self, request, stream=False):
        self.sent.append((request.method, request.url))
        answer = self.answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer


def arm(answers):
    client = Recorded(answers)
    slept = []
    return azclient.Arm(SUB, client, client, sleep=slept.append), client, slept


def test_throttling_waits_retry_after_then_goes_on():
    a, client, slept = arm([Response(429, {'error': {'code': 'TooManyRequests'}}, {'Retry-After': '2'}),
                            Response(200, {'id': 'x'})])
    assert a.send('GET', '/x', '1').body == {'id': 'x'}
    assert slept == [2.0] and len(client.sent) == 2


@pytest.mark.parametrize('status,code,kind', [
    (401, 'InvalidAuthenticationToken', base.Refused), (403, 'AuthorizationFailed', base.Refused),
    (404, 'ResourceNotFound', base.NotFound), (404, 'ResourceGroupNotFound', base.NotFound),
    (400, 'NicInUse', base.Locked), (409, 'InUseNetworkInterfaceCannotBeDeleted', base.Locked),
    (503, 'ServerBusy', base.Transient), (400, 'InvalidParameter', base.Refused),
    (409, 'ScopeLocked', base.Refused),
])
def test_arm_errors_map_onto_kinds(status, code, kind):
    a, dummy, dummy2 = arm([Response(status, {'error': {'code': code, 'message': 'msg'}})])
    with pytest.raises(kind) as err:
        a.send('PUT', '/x', '1', {}, acts=True)
    assert code in str(err.value)
    if status in (401, 403):
        assert 'AZURE_CLIENT_ID' in str(err.value)
    if code == 'ScopeLocked':
        assert 'remove it (az lock list, az lock delete)' in str(err.value)


def test_a_listing_follows_every_next_link():
    a, client, dummy = arm([Response(200, {'value': [{'id': 'a'}], 'nextLink': 'https://arm/list?page=2&api-version=1'}),
                            Response(200, {'value': [{'id': 'b'}]})])
    assert [i['id'] for i in a.list('/x', '1')] == ['a', 'b'] and len(client.sent) == 2


@pytest.mark.parametrize('case', ['self-link', 'earlier-link', 'later-page-fails', 'endless'])
def test_a_listing_that_cannot_be_read_to_its_end_is_incomplete_not_short(case):
    page2 = 'https://arm/list?page=2&api-version=1'
    if case == 'self-link':
        answers = [Response(200, {'value': [{'id': 'a'}], 'nextLink': page2}),
                   Response(200, {'value': [{'id': 'b'}], 'nextLink': page2})]
    elif case == 'earlier-link':
        answers = [Response(200, {'value': [], 'nextLink': page2}),
                   Response(200, {'value': [], 'nextLink': 'https://arm/list?page=3&api-version=1'}),
                   Response(200, {'value': [], 'nextLink': page2})]
    elif case == 'later-page-fails':
        answers = [Response(200, {'value': [{'id': 'a'}], 'nextLink': page2}),
                   Response(403, {'error': {'code': 'AuthorizationFailed', 'message': 'm'}})]
    else:
        answers = [Response(200, {'value': [], 'nextLink': 'https://arm/list?page=%d&api-version=1' % (n + 2)})
                   for n in range(azclient.MAX_PAGES + 1)]
    a, client, dummy = arm(answers)
    with pytest.raises(base.IncompleteInventory) as err:
        a.list('/x', '1')
    assert 'confirms nothing' in str(err.value) and len(client.sent) <= azclient.MAX_PAGES


def test_a_lost_answer_to_a_request_that_acts_is_unknown_outcome():
    from azure.core.exceptions import ServiceRequestError, ServiceResponseError
    a, dummy, dummy2 = arm([ServiceResponseError('connection reset'), ServiceResponseError('reset'),
                            ServiceRequestError('refused')])
    with pytest.raises(base.UnknownOutcome):
        a.send('PUT', '/x', '1', {}, acts=True)
    with pytest.raises(base.Transient) as err:
        a.send('GET', '/x', '1')
    assert not isinstance(err.value, base.UnknownOutcome)
    with pytest.raises(base.Transient):
        a.send('PUT', '/x', '1', {}, acts=True)


def test_wrong_credentials_are_refused_with_what_to_check():
    from azure.core.exceptions import ClientAuthenticationError
    a, dummy, dummy2 = arm([ClientAuthenticationError('AADSTS7000215: Invalid client secret provided.')])
    with pytest.raises(base.Refused) as err:
        a.get('/x', '1')
    assert 'AZURE_CLIENT_SECRET' in str(err.value) and 'Invalid client secret' in str(err.value)


def test_poll_reads_the_status_document_before_location():
    a, client, dummy = arm([Response(200, {}), Response(200, {'status': 'Succeeded'})])
    op = {'async': 'https://arm/op/1?api-version=1', 'location': 'https://arm/res/1?api-version=1'}
    assert a.poll(op) == azclient.PENDING
    assert a.poll(op) == azclient.SUCCEEDED
    assert [u for m, u in client.sent] == [op['async'], op['async']]


def test_wait_on_an_operation_that_fails_raises_task_failed():
    a, dummy, dummy2 = arm([Response(202), Response(200, {'status': 'Failed'})])
    with pytest.raises(base.TaskFailed):
        a.wait({'async': None, 'location': 'https://l'}, 30, 0.0)


# ------------------------------------------------------------------------------ the ARM double

def lower(text):
    return (text or '').lower()


class Op:
    def __init__(self, answers, then=None):
        self.answers = list(answers)
        self.then = then


class ArmDouble:
    """An in-memory Resource Manager: the four types with ARM's attachments and in-use rules, the OS disk made by
    the VM PUT, and scripted faults (lost answers after acting, asynchronous operations in either style)."""

    subscription = SUB

    def __init__(self):
        self.docs = {}
        self.calls = []
        self.faults = []        # (method, kind or None, fault)
        self.ops = {}

    def kind(self, path):
        return azplan.KIND_OF_TYPE[lower('/'.join(path.split('/providers/')[1].split('/')[:2]))]

    def get(self, path, version):
        self.calls.append(('GET', path))
        doc = self.docs.get(lower(path))
        return copy.deepcopy(doc)

    def list(self, path, version):
        return [copy.deepcopy(d) for k, d in sorted(self.docs.items()) if k.startswith(lower(path) + '/')]

    def _fault(self, method, kind):
        for i, (m, k, fault) in enumerate(self.faults):
            if m == method and k in (None, kind):
                del self.faults[i]
                return fault
        return None

    def send(self, method, path, version=None, body=None, acts=False, what=None):
        self.calls.append((method, path))
        if method == 'GET':
            return azclient.Answer(200, {}, self.preflight(path))
        kind = self.kind(path)
        fault = self._fault(method, kind)
        if fault == 'reject':
            raise base.Refused('%s: HTTP 400 InvalidParameter' % what)
        if method == 'PUT':
            self._put(kind, path, body)
        elif method == 'PATCH':
            self.docs[lower(path)]['tags'] = dict(body['tags'])
        elif method == 'DELETE':
            if fault == 'in-use':
                raise base.Locked('%s: HTTP 400 InUse' % what)
            if fault in ('async', 'location', 'async-fail'):
                key = 'https://arm/op/%d' % len(self.ops)
                self.ops[key] = (path, fault)
                heads = {'Azure-AsyncOperation': key} if fault != 'location' else {'Location': key}
                return azclient.Answer(202, heads, None)
            self._delete(kind, path)
        if fault == 'lose':
            raise base.UnknownOutcome('%s: the answer was lost' % what)
        return azclient.Answer(200 if method != 'DELETE' else 200, {}, self.docs.get(lower(path)))

    refuse = None

    def preflight(self, path):
        if self.refuse and self.refuse in path:
            raise base.NotFound('HTTP 404 NotFound')
        if path.endswith('/vmSizes'):
            return {'value': [{'name': 'Standard_B1s'}]}
        if path.endswith('/versions'):
            return [{'name': '0.1'}]
        return {}

    def poll(self, op):
        key = op.get('async') or op.get('location')
        path, style = self.ops[key]
        ticks = self.ops.setdefault(key + '#', [0])
        ticks[0] += 1
        if ticks[0] < 2:
            return azclient.PENDING
        if style == 'async-fail':
            return 'the operation ended Failed'
        if lower(path) in self.docs:
            self._delete(self.kind(path), path)
        return azclient.SUCCEEDED

    def _put(self, kind, path, body):
        doc = {'id': path, 'name': path.rsplit('/', 1)[1], 'type': azplan.TYPES[kind], 'location': body['location'],
               'tags': dict(body.get('tags') or {}), 'properties': copy.deepcopy(body.get('properties') or {})}
        doc['properties']['provisioningState'] = 'Succeeded'
        if kind == NIC:
            for conf in doc['properties']['ipConfigurations']:
                pip = conf['properties'].get('publicIPAddress')
                if pip:
                    conf['id'] = path + '/ipConfigurations/' + conf['name']
                    self.docs[lower(pip['id'])]['properties']['ipConfiguration'] = {'id': conf['id']}
        if kind == VM:
            os_disk = doc['properties']['storageProfile']['osDisk']
            disk_path = path.split('/providers/')[0] + '/providers/Microsoft.Compute/disks/' + os_disk['name']
            os_disk['managedDisk'] = {'id': disk_path}
            self.docs[lower(disk_path)] = {'id': disk_path, 'name': os_disk['name'], 'type': azplan.TYPES[DISK],
                                           'location': body['location'], 'tags': {}, 'managedBy': path,
                                           'properties': {'provisioningState': 'Succeeded'}}
            for ref in doc['properties']['networkProfile']['networkInterfaces']:
                self.docs[lower(ref['id'])]['properties']['virtualMachine'] = {'id': path}
        self.docs[lower(path)] = doc

    def _delete(self, kind, path):
        doc = self.docs.get(lower(path))
        if doc is None:
            return
        p = doc['properties']
        if kind == NIC and p.get('virtualMachine'):
            raise base.Locked('NicInUse')
        if kind == PIP and p.get('ipConfiguration'):
            raise base.Locked('PublicIPAddressInUse')
        if kind == DISK and doc.get('managedBy'):
            raise base.Locked('OperationNotAllowed: disk attached')
        if kind == VM:
            self.docs[lower(p['storageProfile']['osDisk']['managedDisk']['id'])].pop('managedBy', None)
            for ref in p['networkProfile']['networkInterfaces']:
                self.docs[lower(ref['id'])]['properties'].pop('virtualMachine', None)
        if kind == NIC:
            for conf in p['ipConfigurations']:
                pip = conf['properties'].get('publicIPAddress')
                if pip and lower(pip['id']) in self.docs:
                    self.docs[lower(pip['id'])]['properties'].pop('ipConfiguration', None)
        del self.docs[lower(path)]

    def puts(self):
        return [p.rsplit('/', 2)[1] for m, p in self.calls if m == 'PUT']

    def deletes(self):
        return [p.rsplit('/', 1)[1] for m, p in self.calls if m == 'DELETE']


class Journal:
    """Durable writes as the flows' journal makes them: copies, and a write that can be made to fail."""

    def __init__(self):
        self.writes = []
        self.fail = False

    def __call__(self, record):
        if self.fail:
            raise OSError('journal write failed')
        self.writes.append(copy.deepcopy(record))


def new_set(double=None, **kw):
    double = double or ArmDouble()
    journal = Journal()
    record = {'plan': azplan.plan('ws1', 'ws1-abc', GROUP, 'westeurope', 'MARKER', 'scope', labels={'keep': 'false'},
                                  subscription=SUB)}
    clock = [1000.0]

    def tick():
        clock[0] += 1
        return clock[0]
    ws = azset.WorkspaceSet(double, record, journal, OPTIONS, clock=tick, sleep=lambda s: None, lost_window=5,
                            interval=0.0, **kw)
    return ws, double, journal


def test_create_records_the_plan_before_the_first_put_then_each_id_in_order():
    ws, double, journal = new_set()
    ws.save()
    assert journal.writes[0]['plan']['names'][VM] == 'ws1-abc-vm' and not double.puts()
    ids = ws.create()
    assert [p.split('/')[-1] for m, p in double.calls if m == 'PUT'] == ['ws1-abc-pip', 'ws1-abc-nic', 'ws1-abc-vm']
    assert set(ids) == {VM, NIC, PIP, DISK}
    # Each PUT had its dispatch recorded before it, and its id after.
    for member in (PIP, NIC, VM):
        before = [w for w in journal.writes if member in w['dispatched']][0]
        assert member not in before['ids']
    disk = double.docs[lower(ids[DISK])]
    assert disk['tags'][azplan.TAG_MARKER] == 'MARKER' and disk['tags'][azplan.TAG_MEMBER] == DISK
    assert ws.record['binding']['vm_id'] == ids[VM]
    assert ws.check_binding()['id'] == ids[VM]


def test_a_changed_vm_identity_at_the_readiness_read_is_a_contradiction_that_withholds_deletion():
    ws, double, dummy = new_set()
    ids = ws.create()
    double.docs[lower(ids[VM])]['tags'][azplan.TAG_MARKER] = 'OTHER'
    with pytest.raises(azset.Contradiction):
        ws.check_binding()
    with pytest.raises(azset.Contradiction):
        ws.delete_tick()
    assert not double.deletes()


def test_a_lost_network_put_followed_by_404_is_not_permission_to_put_again():
    double = ArmDouble()
    ws, double, dummy = new_set(double)
    # The PUT of the NIC never reached a resource that shows: dispatched, then 404 through the window.
    double.faults.append(('PUT', NIC, 'lose'))
    real_put = double._put

    def vanish(kind, path, body):
        if kind != NIC:
            real_put(kind, path, body)
    double._put = vanish
    with pytest.raises(base.UnknownOutcome):
        ws.create()
    double._put = real_put
    with pytest.raises(base.KeptAsDebt) as err:
        ws.create()
    assert 'not made again' in str(err.value) and ws.record['debt']
    assert double.puts().count('networkInterfaces') == 1


def test_a_lost_put_answer_that_took_effect_is_found_and_recorded():
    ws, double, dummy = new_set()
    double.faults.append(('PUT', PIP, 'lose'))
    with pytest.raises(base.UnknownOutcome):
        ws.create()
    ids = ws.create()
    assert double.puts().count('publicIPAddresses') == 1 and PIP in ids


def test_a_foreign_resource_under_a_canonical_name_is_never_adopted():
    ws, double, dummy = new_set()
    path = ws.path(PIP)
    double._put(PIP, path, {'location': 'westeurope', 'tags': {'owner': 'someone'}})
    with pytest.raises(azset.Contradiction):
        ws.create()
    assert not double.puts()


def run_delete(ws):
    states = []
    while True:
        state, member = ws.delete_tick()
        states.append((state, member))
        if state == azset.DONE:
            return states


def test_delete_order_one_member_per_tick_each_claimed_before_the_next():
    ws, double, journal = new_set()
    ws.create()
    states = run_delete(ws)
    assert states == [(azset.DELETED, VM), (azset.DELETED, NIC), (azset.DELETED, PIP), (azset.DELETED, DISK),
                      (azset.DONE, None)]
    assert double.deletes() == ['ws1-abc-vm', 'ws1-abc-nic', 'ws1-abc-pip', 'ws1-abc-osdisk']
    assert not double.docs
    claimed = []
    for write in journal.writes:
        if write.get('claims') and (not claimed or set(write['claims']) != claimed[-1]):
            claimed.append(set(write['claims']))
        # A DELETE is recorded (``deleting``) only after every earlier member's claim.
        if write.get('deleting'):
            order = list(azplan.DELETE_ORDER)
            assert set(write['claims']) == set(order[:order.index(write['deleting']['member'])])
    assert claimed == [{VM}, {VM, NIC}, {VM, NIC, PIP}, {VM, NIC, PIP, DISK}]


@pytest.mark.parametrize('style', ['async', 'location'])
def test_an_accepted_delete_is_recorded_apart_and_polled_on_its_own_tick(style):
    ws, double, journal = new_set()
    ws.create()
    double.faults.append(('DELETE', VM, style))
    assert ws.delete_tick() == (azset.ACCEPTED, VM)
    assert ws.record['accepted']['member'] == VM and VM not in ws.record['claims']
    assert ws.delete_tick() == (azset.RUNNING, VM)
    assert ws.delete_tick() == (azset.DELETED, VM)
    assert VM in ws.record['claims'] and 'accepted' not in ws.record
    assert double.deletes() == ['ws1-abc-vm']


def test_a_failed_async_delete_records_no_progress_and_is_retried():
    ws, double, dummy = new_set()
    ws.create()
    double.faults.append(('DELETE', VM, 'async-fail'))
    assert ws.delete_tick() == (azset.ACCEPTED, VM)
    ws.delete_tick()
    with pytest.raises(base.TaskFailed):
        ws.delete_tick()
    assert VM not in ws.record['claims'] and lower(ws.record['ids'][VM]) in double.docs
    assert run_delete(ws)[-1] == (azset.DONE, None) and not double.docs


def test_in_use_is_retried_next_tick_with_a_fresh_ownership_check():
    ws, double, dummy = new_set()
    ws.create()
    run = ws.delete_tick()
    assert run == (azset.DELETED, VM)
    double.faults.append(('DELETE', NIC, 'in-use'))
    assert ws.delete_tick() == (azset.IN_USE, NIC)
    # Behind our back the NIC got a foreign VM: the next tick's fresh read stops.
    double.docs[lower(ws.record['ids'][NIC])]['properties']['virtualMachine'] = {'id': '/x/foreign-vm'}
    with pytest.raises(azset.Contradiction):
        ws.delete_tick()
    assert double.deletes() == ['ws1-abc-vm', 'ws1-abc-nic']


def test_a_member_gone_without_our_claim_stops_the_cleanup():
    ws, double, dummy = new_set()
    ids = ws.create()
    ws.delete_tick()
    del double.docs[lower(ids[NIC])]
    double.docs[lower(ids[PIP])]['properties'].pop('ipConfiguration', None)
    with pytest.raises(azset.Contradiction) as err:
        ws.delete_tick()
    assert 'no claim' in str(err.value) and lower(ids[PIP]) in double.docs


def test_a_lost_delete_answer_is_finished_by_the_next_tick():
    ws, double, dummy = new_set()
    ws.create()
    double.faults.append(('DELETE', VM, 'lose'))
    with pytest.raises(base.UnknownOutcome):
        ws.delete_tick()
    assert ws.delete_tick() == (azset.DELETED, VM)
    assert run_delete(ws)[-1] == (azset.DONE, None) and not double.docs


def test_a_failed_progress_write_stops_the_cleanup():
    ws, double, journal = new_set()
    ws.create()
    journal.fail = True
    with pytest.raises(OSError):
        ws.delete_tick()
    assert not double.deletes()


@pytest.mark.parametrize('change', ['tag', 'keep', 'location', 'replaced'])
def test_a_member_that_changed_is_not_deleted(change):
    ws, double, dummy = new_set()
    ids = ws.create()
    doc = double.docs[lower(ids[VM])]
    if change == 'tag':
        doc['tags'][azplan.TAG_MARKER] = 'OTHER'
    elif change == 'keep':
        doc['tags']['ephemera:keep'] = 'true'
    elif change == 'location':
        doc['location'] = 'northeurope'
    else:
        doc['id'] = doc['id'] + '-new'
    with pytest.raises(azset.Contradiction):
        ws.delete_tick()
    assert not double.deletes()


@pytest.mark.parametrize('cascade', ['nic', 'disk', 'data'])
def test_a_vm_set_to_cascade_or_with_a_data_disk_is_report_only(cascade):
    ws, double, dummy = new_set()
    ids = ws.create()
    props = double.docs[lower(ids[VM])]['properties']
    if cascade == 'nic':
        props['networkProfile']['networkInterfaces'][0]['properties']['deleteOption'] = 'Delete'
    elif cascade == 'disk':
        props['storageProfile']['osDisk']['deleteOption'] = 'Delete'
    else:
        props['storageProfile']['dataDisks'] = [{'lun': 0}]
    with pytest.raises(azset.Contradiction) as err:
        ws.delete_tick()
    assert 'left for a person' in str(err.value) and not double.deletes()


def stop_after(ws, double, member):
    """Create until ``member`` exists, then lose the process."""
    real = double.send

    def send(method, path, *a, **k):
        answer = real(method, path, *a, **k)
        if method == 'PUT' and double.kind(path) == member:
            raise KeyboardInterrupt()
        return answer
    double.send = send
    with pytest.raises(KeyboardInterrupt):
        ws.create()
    double.send = real


@pytest.mark.parametrize('member,deleted', [(PIP, ['ws1-abc-pip']), (NIC, ['ws1-abc-nic', 'ws1-abc-pip']),
                                            (VM, ['ws1-abc-vm', 'ws1-abc-nic', 'ws1-abc-pip', 'ws1-abc-osdisk'])])
def test_a_creation_prefix_of_our_own_is_cleaned_by_the_ordinary_release(member, deleted):
    ws, double, dummy = new_set()
    stop_after(ws, double, member)
    assert run_delete(ws)[-1] == (azset.DONE, None)
    assert double.deletes() == deleted and not double.docs


def stop_after_dispatch(ws, member):
    """Create until ``member``'s PUT is recorded as dispatched, then lose the process before it is sent."""
    real = ws._save

    def save(record):
        real(record)
        if member in record['dispatched'] and member not in record['ids']:
            raise KeyboardInterrupt()
    ws._save = save
    with pytest.raises(KeyboardInterrupt):
        ws.create()
    ws._save = real


@pytest.mark.parametrize('shows', [False, True])
def test_a_put_recorded_and_never_seen_is_counted_absent_only_after_its_window(shows):
    ws, double, dummy = new_set()
    stop_after_dispatch(ws, NIC)
    assert double.puts().count('networkInterfaces') == 0
    reads = []
    real = double.get

    def get(path, version):
        if double.kind(path) == NIC:
            reads.append(ws.clock())
            if shows and len(reads) == 3:
                # The PUT did go out after all and Azure shows the NIC late, within the window.
                double.send('PUT', ws.path(NIC), azset.VERSION[NIC], ws.body(NIC))
        return real(path, version)
    double.get = get
    states = run_delete(ws)
    # The release read the NIC again until the window ended (or it showed) before taking absence as proof.
    assert len(reads) >= 3 and states[-1] == (azset.DONE, None) and not double.docs
    assert double.deletes() == (['ws1-abc-nic', 'ws1-abc-pip'] if shows else ['ws1-abc-pip'])
    if not shows:
        assert reads[-1] >= ws.record['dispatched'][NIC] + ws.lost_window


@pytest.mark.parametrize('case', ['nic-alone', 'disk-alone', 'pip-foreign-nic'])
def test_a_creation_prefix_that_is_not_exact_is_report_only(case):
    ws, double, dummy = new_set()
    stop_after(ws, double, NIC)
    pip = lower(ws.path(PIP))
    if case == 'nic-alone':
        del double.docs[pip]
        for conf in double.docs[lower(ws.path(NIC))]['properties']['ipConfigurations']:
            conf['properties'].pop('publicIPAddress', None)
    elif case == 'disk-alone':
        double.docs.clear()
        double.docs[lower(ws.path(DISK))] = {'id': ws.path(DISK), 'name': 'ws1-abc-osdisk', 'location': 'westeurope',
                                             'tags': dict(ws.plan['tags'][DISK]), 'properties': {}}
    else:
        del double.docs[lower(ws.path(NIC))]
        double.docs[pip]['properties']['ipConfiguration'] = {'id': '/x/foreign-nic/ipConfigurations/c'}
    before = copy.deepcopy(double.docs)
    with pytest.raises(azset.Contradiction):
        ws.delete_tick()
    assert double.docs == before and not double.deletes()


# ------------------------------------------------------------------------------ orphan sweep

def test_orphan_sweep_waits_for_grace_and_two_inventories_and_any_change_resets():
    ws, double, dummy = new_set()
    ids = ws.create()
    state = {}
    retained = {'ws1-abc': ws.record}

    def sweep(now):
        return azset.sweep(double, SUB, GROUP, state, retained.get, now, 900, 'westeurope')
    assert sweep(0) == {'candidates': [], 'waiting': ['ws1-abc'], 'report': {}}
    assert sweep(1000)['candidates'] == ['ws1-abc']
    # A change during quarantine (a tag) starts it again: two more inventories and the grace period.
    double.docs[lower(ids[PIP])]['tags']['note'] = 'changed'
    assert sweep(1001)['waiting'] == ['ws1-abc']
    assert sweep(1500)['candidates'] == []
    assert sweep(1902)['candidates'] == ['ws1-abc']


def test_orphan_sweep_one_inventory_is_not_enough_even_after_the_grace():
    ws, double, dummy = new_set()
    ws.create()
    state = {'ws1-abc': {'fingerprint': 'old', 'since': 0, 'inventories': 5}}
    out = azset.sweep(double, SUB, GROUP, state, {'ws1-abc': ws.record}.get, 5000, 900)
    assert out['candidates'] == [] and state['ws1-abc']['inventories'] == 1


def test_orphan_sweep_reports_incomplete_mixed_and_unbound_groups():
    ws, double, dummy = new_set()
    ids = ws.create()
    assert azset.sweep(double, SUB, GROUP, {}, lambda b: None, 0, 900)['report'] == {
        'ws1-abc': 'set ws1-abc is bound to no retained record'}
    double.docs[lower(ids[PIP])]['tags'][azplan.TAG_MARKER] = 'OTHER'
    assert 'mixed' in azset.sweep(double, SUB, GROUP, {}, {'ws1-abc': ws.record}.get, 0, 900)['report']['ws1-abc']
    del double.docs[lower(ids[DISK])]
    assert 'incomplete' in azset.sweep(double, SUB, GROUP, {}, {'ws1-abc': ws.record}.get, 0, 900)['report']['ws1-abc']


def test_the_sweep_inventories_only_the_four_types():
    double = ArmDouble()
    paths = []
    double.list = lambda path, version: paths.append(path) or []
    azset.inventory(double, SUB, GROUP)
    assert sorted(p.rsplit('/providers/', 1)[1] for p in paths) == sorted(azplan.TYPES.values())


@pytest.mark.parametrize('change,words', [
    ({'vm_size': 'Standard_Nope'}, 'VM size Standard_Nope'), ({'image': {'publisher': 'Debian'}}, 'publisher, offer'),
    ({'image': dict(OPTIONS['image'], version='9.9')}, 'no version 9.9'), ({'subnet_id': None}, 'azure_subnet_id'),
    ({'refuse': '/resourcegroups/'}, 'azure_resource_group'), ({'refuse': '/subnets/'}, 'existing subnet'),
    ({'refuse': '/vmSizes'}, 'azure_location'), ({'refuse': '/versions'}, 'offered in this location'),
])
def test_bad_input_is_refused_before_the_first_put(change, words):
    ws, double, journal = new_set()
    double.refuse = change.pop('refuse', None)
    ws.options.update(change)
    with pytest.raises(base.InvalidRequest) as err:
        ws.create()
    assert words in str(err.value)
    assert not double.puts() and not ws.record['dispatched'] and not journal.writes


def test_the_provider_is_registered_and_bound_to_an_arm_client(tmp_path):
    from ansible_collections.ephemera.workspaces.plugins.module_utils.providers.registry import bind, provider_class
    from ansible_collections.ephemera.workspaces.plugins.module_utils.providers.azure import provider as azprovider
    assert provider_class('azure') is azprovider.AzureProvider
    bound = bind(azclient.Arm(SUB, None, None), b's' * 32)
    assert isinstance(bound, azprovider.AzureProvider) and bound.secret == b's' * 32


def test_the_provider_refuses_bad_names_and_images_before_anything():
    from ansible_collections.ephemera.workspaces.plugins.module_utils.providers.azure import provider as azprovider
    p = azprovider.AzureProvider(ArmDouble(), b's' * 32, {'resource_group': GROUP, 'location': 'westeurope'})
    with pytest.raises(base.InvalidRequest) as err:
        p.candidate_for('Bad_Name', 'stamp')
    assert 'letters, digits and hyphens' in str(err.value)
    with pytest.raises(base.InvalidRequest):
        p.resolve_source('Debian/debian-12')
    assert p.resolve_source('Debian:debian-12:12-gen2') == 'Debian:debian-12:12-gen2:latest'
    assert azprovider.AzureProvider.parse_resource_key(azprovider.AzureProvider.resource_key('ws-1', 'westeurope')) \
        == ('ws-1', 'westeurope')


def test_a_put_that_surely_did_not_happen_may_be_sent_again():
    ws, double, dummy = new_set()
    double.faults.append(('PUT', VM, 'reject'))
    with pytest.raises(base.Refused):
        ws.create()
    assert VM not in ws.record['dispatched'] and lower(ws.path(VM)) not in double.docs
    ws.create()
    assert double.puts().count('virtualMachines') == 2 and VM in ws.record['ids']
    assert len([d for d in double.docs.values() if d['type'] == azplan.TYPES[VM]]) == 1


def test_the_vm_lets_root_in_through_custom_data_and_its_administrator_is_not_the_agent():
    ws, double, journal = new_set()
    ws.create()
    profile = ws.body(VM)['properties']['osProfile']
    assert profile['adminUsername'] == 'ephemera' and profile['adminUsername'] == azset.ADMIN_USER
    config = base64.b64decode(profile['customData']).decode()
    assert config.startswith('#cloud-config\n') and 'disable_root: false' in config
    assert '  - ssh-ed25519 AAAA test\n' in config
    assert azprovider.launch_options({})['admin_username'] == 'ephemera'
    assert azoptions.azure_argument_spec()['azure_admin_username']['default'] == 'ephemera'


def test_a_public_key_larger_than_azure_takes_is_refused_before_anything_is_made():
    ws, double, journal = new_set()
    ws.options = dict(ws.options, ssh_public_key='ssh-ed25519 ' + 'A' * 70000)
    with pytest.raises(base.InvalidRequest, match='at most 65535 bytes of custom data'):
        ws.create()
    assert not double.puts()


def test_an_image_is_a_marketplace_urn_or_a_managed_images_id_and_nothing_else():
    from ansible_collections.ephemera.workspaces.plugins.module_utils.providers.azure.provider import parse_image
    managed = '/subscriptions/s/resourceGroups/rg/providers/Microsoft.Compute/images/agents-1'
    assert parse_image(managed) == {'id': managed}
    assert parse_image(managed.lower()) == {'id': managed.lower()}
    assert parse_image('Canonical:ubuntu-24_04-lts:server') == {
        'publisher': 'Canonical', 'offer': 'ubuntu-24_04-lts', 'sku': 'server', 'version': 'latest'}
    for text, words in ((managed.replace('/images/', '/galleries/g/images/') + '/versions/1.0.0', 'compute gallery'),
                        (managed + '/extra', 'not the id of a managed image'),
                        ('Canonical:ubuntu', 'publisher:offer:sku')):
        with pytest.raises(base.InvalidRequest) as refused:
            parse_image(text)
        assert words in str(refused.value), (text, str(refused.value))
