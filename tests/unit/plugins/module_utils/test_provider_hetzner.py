"""The Hetzner Cloud provider against the try-out cloud's Hetzner fake over loopback (one fake for the file), with
hcloud itself making every request; the fake's answers parsed by hcloud's own models; the error table."""

import threading
import time

import pytest

from ansible_collections.ephemera.workspaces.plugins.module_utils.core import ownership
from ansible_collections.ephemera.workspaces.plugins.module_utils.providers import base
from ansible_collections.ephemera.workspaces.plugins.module_utils.providers.registry import provider_class
from ansible_collections.ephemera.workspaces.plugins.module_utils.providers.hetzner import client as hclient
from ansible_collections.ephemera.workspaces.plugins.module_utils.providers.hetzner import provider as hprovider
from tests.threads import side_by_side

hcloud = pytest.importorskip('hcloud')

SECRET = b's' * 32
NONCE = 'cd' * 16
TOKEN = 'test-token-' + 'x' * 53
PUBLIC_KEY = 'ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIHetznerFakeKeyForTestsOnly0000000000000000 t@h'


@pytest.fixture(scope='module')
def fake():
    from tests.localcloud.fixtures import hetzner_fake
    with hetzner_fake(TOKEN, '127.1.99.10-127.1.99.200', boot_secs=0.3, delete_secs=0.3) as cloud:
        yield cloud


@pytest.fixture
def cloud(fake):
    fake.clear_rules()
    yield fake
    fake.clear_rules()


def provider(fake, **launch):
    api = hclient.HCloud(TOKEN, fake.url, request_timeout=15, retry_timeout=15)
    opts = dict({'server_type': 'cx22', 'ssh_public_key': PUBLIC_KEY, 'networks': [], 'labels': {}}, **launch)
    return hprovider.HetznerProvider(api, SECRET, 'fsn1', opts, action_timeout=10)


def allocation(p, workspace, stamp='1'):
    name = p.candidate_for(workspace, stamp)
    return base.Allocation(name, workspace, 'ubuntu-24.04', 'fsn1', 'agent-' + workspace, 'disposable-workspaces',
                           labels={'state': 'provisioning', 'expires_at': '1900000000', 'keep': 'false',
                                   'created_at': '1800000000'}, nonce=NONCE)


def created(p, workspace):
    """The server of a new allocation for ``workspace``, as found."""
    a = allocation(p, workspace)
    return p.find(p.resource_of(a.candidate, p.allocate(a)))


def test_registered_and_seam_words():
    cls = provider_class('hetzner')
    assert cls is hprovider.HetznerProvider
    assert cls.resource_key('42', 'fsn1') == 'hcloud/42@fsn1'
    assert cls.parse_resource_key('hcloud/42@fsn1') == ('42', 'fsn1')
    assert cls.parse_resource_key('ec2/i-1@x') == (None, None)


@pytest.mark.parametrize('status,code,kind', [
    (400, 'invalid_input', base.InvalidRequest), (401, 'unauthorized', base.InvalidRequest),
    (403, 'forbidden', base.Refused), (405, '', base.Refused), (409, 'conflict', base.Locked),
    (410, '', base.Refused), (412, '', base.Refused), (423, 'locked', base.Locked),
    (429, 'rate_limit_exceeded', base.Transient), (409, 'uniqueness_error', base.Conflict),
    (408, 'timeout', base.UnknownOutcome), (422, '', base.UnknownOutcome), (500, 'server_error', base.UnknownOutcome),
    (502, '', base.UnknownOutcome), (503, 'unavailable', base.UnknownOutcome), (504, 'timeout', base.UnknownOutcome),
    (None, '', base.UnknownOutcome)])
def test_error_table_of_calls_that_act(status, code, kind):
    assert hclient.error_kind(status, code, acts=True) is kind
    rejected = status in (400, 401, 403, 405, 409, 410, 412, 423, 429)
    assert issubclass(kind, base.UnknownOutcome) is not rejected


def test_reads_are_transient_on_server_errors():
    assert hclient.error_kind(500, 'server_error', acts=False) is base.Transient
    assert hclient.error_kind(404, 'not_found', acts=False) is base.NotFound


def test_labels_hold_the_marker_and_fit_the_rules(cloud):
    p = provider(cloud)
    a = allocation(p, 'labels-ws')
    labels = p._labels_for(a)
    for key, value in labels.items():
        assert hprovider.VALUE_RE.match(value) and len(value) <= 63, (key, value)
    text = hprovider.marker_text(labels)
    assert ownership.parse(text)['workspace'] == 'labels-ws'
    with pytest.raises(base.InvalidRequest, match='label value'):
        p.candidate_for('bad/name', '1')
    with pytest.raises(base.InvalidRequest, match='label value'):
        hprovider.check_label('team', 'a b')


def test_a_warm_members_server_is_given_to_the_claiming_workspace(cloud):
    p = provider(cloud)
    assert p.pool_refusal is None
    member = created(p, 'hz-member')
    name = member.native['name']
    assert member.native['labels'].get('ephemera-created-by') != 'claimers-controller'
    p.remark(member, 'hz-claimer', 'ef' * 16, 'agent-hz-claimer', {'state': 'provisioning', 'keep': 'true'},
             created_by='claimers-controller')
    taken = p.find(member.id)
    assert p.verify(taken, 'hz-claimer', 'ef' * 16) == ownership.VERIFIED
    assert p.verify(taken, 'hz-member', NONCE) == ownership.MISMATCH
    labels = taken.native['labels']
    assert labels['ephemera-workspace'] == 'hz-claimer' and labels['ephemera-state'] == 'provisioning'
    assert labels['ephemera-keep'] == 'true' and labels['ephemera-scope'] == 'disposable-workspaces'
    assert labels['ephemera-created-by'] == 'claimers-controller'
    # Its name is what the marker binds: it stays.
    assert taken.native['name'] == name
    with pytest.raises(base.Conflict, match='changed since it was read'):
        p.remark(member, 'hz-third', 'ab' * 16, 'agent-hz-third')
    p.wait(p.delete(taken), 10)


def test_fake_answers_parse_with_hcloud_models(cloud):
    from hcloud.actions.domain import Action
    from hcloud.servers.client import BoundServer
    p = provider(cloud)
    a = allocation(p, 'models-ws')
    handle = p.allocate(a)
    server_id = hprovider.parse_handle(handle)[1]
    client = hcloud.Client(token=TOKEN, api_endpoint=cloud.url)
    server = client.servers.get_by_id(int(server_id))
    assert isinstance(server, BoundServer) and server.name == a.candidate
    assert server.public_net.ipv4.ip.startswith('127.1.99.')
    assert server.location.name == 'fsn1' and server.server_type.name == 'cx22'
    assert client.servers.get_all(label_selector=hprovider.L_MARKER)
    action = client.actions.get_by_id(hprovider.parse_handle(handle)[2])
    assert isinstance(action.data_model, Action) and action.command == 'create_server'
    assert client.ssh_keys.get_by_name(p.owned_key_name(a.candidate)).public_key == PUBLIC_KEY
    with pytest.raises(hcloud.APIException) as caught:
        client.servers.create(name=a.candidate, server_type=client.server_types.get_by_name('cx22'),
                              image=client.images.get_by_name('ubuntu-24.04'))
    assert caught.value.code == 'uniqueness_error'
    p.wait(p.delete(p.find(server_id)), 10)


def test_create_ready_and_confirmed_delete_removes_the_owned_key(cloud):
    p = provider(cloud)
    assert p.check_source('ubuntu-24.04', 'fsn1', 'disposable-workspaces') == 'fsn1'
    a = allocation(p, 'life-ws')
    handle = p.allocate(a)
    p.wait(handle, 10)
    server_id = p.resource_of(a.candidate, handle)
    resource = p.find(server_id)
    assert p.verify(resource, 'life-ws', NONCE) == ownership.VERIFIED
    assert p.addresses(resource)[0][2].startswith('127.1.99.')
    assert p.labels(resource)['state'] == 'provisioning'
    assert [e['id'] for e in p.list()].count(server_id) == 1
    key_name = p.owned_key_name(a.candidate)
    assert [k for k in cloud.ssh_keys.values() if k['name'] == key_name]
    deletion = p.delete(resource)
    assert hprovider.parse_handle(deletion)[3] > 0
    p.wait(deletion, 10)
    assert p.find(server_id) is None
    assert not [k for k in cloud.ssh_keys.values() if k['name'] == key_name]


def test_shared_key_is_never_removed(cloud):
    cloud.ssh_keys[1] = {'id': 1, 'name': 'team', 'fingerprint': 'f', 'public_key': PUBLIC_KEY, 'labels': {},
                         'created': '2025-01-01T00:00:00+00:00'}
    p = provider(cloud, ssh_key='team', ssh_public_key=None)
    a = allocation(p, 'shared-ws')
    handle = p.allocate(a)
    resource = p.find(p.resource_of(a.candidate, handle))
    deletion = p.delete(resource)
    assert hprovider.parse_handle(deletion)[3] == 0
    p.wait(deletion, 10)
    assert 1 in cloud.ssh_keys
    del cloud.ssh_keys[1]


def test_lost_create_answer_then_one_server_by_name(cloud):
    p = provider(cloud)
    a = allocation(p, 'lost-ws')
    cloud.add_rule('drop', 'POST', '/servers')
    with pytest.raises(base.UnknownOutcome):
        p.allocate(a)
    # The retry is refused by the name; the one server is found by it.
    with pytest.raises(base.Conflict):
        p.allocate(a)
    found = p.find(a.candidate)
    assert found is not None and p.verify(found, 'lost-ws', NONCE) == ownership.VERIFIED
    assert [s['name'] for s in cloud.servers.values()].count(a.candidate) == 1
    p.wait(p.delete(found), 10)


def test_unbindable_creation_is_reported_not_deleted(cloud):
    p = provider(cloud)
    a = allocation(p, 'unbound-ws')
    cloud.add_rule('foreign_answer', 'POST', '/servers')
    with pytest.raises(hprovider.UnresolvedAllocation, match='Unresolved allocation.*not deleted'):
        p.allocate(a)
    assert any(s['name'] == a.candidate for s in cloud.servers.values())
    p.wait(p.delete(p.find(a.candidate)), 10)


def test_404_does_not_complete_a_running_deletion_action(cloud):
    p = provider(cloud)
    resource = created(p, 'hidden-ws')
    cloud.add_rule('hide', 'DELETE', '/servers', seconds=2.0)
    handle = p.delete(resource)
    assert p.find(resource.id) is None     # hidden behind 404 while the action runs
    assert p.task_status(handle).status == 'running'
    started = time.monotonic()
    p.wait(handle, 10)
    assert time.monotonic() - started > 1.0
    assert cloud.actions[hprovider.parse_handle(handle)[2]]['status'] == 'success'


def test_failed_deletion_action_is_a_task_failure_and_the_server_stays(cloud):
    p = provider(cloud)
    resource = created(p, 'failing-ws')
    cloud.add_rule('fail_delete', 'DELETE', '/servers')
    with pytest.raises(base.TaskFailed, match='failed'):
        p.wait(p.delete(resource), 10)
    assert p.find(resource.id) is not None
    p.wait(p.delete(p.find(resource.id)), 10)


@pytest.mark.parametrize('status,kind', [(423, base.Locked), (429, base.Transient), (403, base.Refused),
                                         (500, base.UnknownOutcome), (422, base.UnknownOutcome)])
def test_delete_rejections_and_uncertain_answers_end_to_end(cloud, status, kind):
    p = provider(cloud)
    resource = created(p, 'reject-%d' % status)
    cloud.add_rule('error', 'DELETE', '/servers', status=status)
    with pytest.raises(kind) as caught:
        p.delete(resource)
    assert isinstance(caught.value, base.UnknownOutcome) is (status in (422, 500))
    assert p.find(resource.id) is not None   # the rule acted on nothing
    p.wait(p.delete(p.find(resource.id)), 10)


def test_threads_sharing_the_client_each_judge_their_own_answer(cloud):
    """The expiry sweep releases side by side through one client. A delete refused with 403 stays refused (nothing
    done) when another thread's request is answered 200 between the refusal's answer and its judgement."""
    p = provider(cloud)
    refused, other = created(p, 'refused-ws'), created(p, 'other-ws')
    cloud.add_rule('error', 'DELETE', '/servers', status=403)
    session = p.api.client._client._session  # pylint: disable=protected-access
    refusal_seen, other_answered = threading.Event(), threading.Event()

    def hold(response, *args, **kwargs):
        # In the deleting thread only: its 403 is in, and the other thread's answer comes before it is judged.
        if response.request.method == 'DELETE':
            refusal_seen.set()
            other_answered.wait(20)
    outcome = {}

    def delete():
        try:
            p.delete(refused)
        except base.ProviderError as err:
            outcome['error'] = err

    def read():
        refusal_seen.wait(20)
        try:
            outcome['found'] = p.find(other.id)
        finally:
            other_answered.set()
    session.hooks['response'].append(hold)
    try:
        ended = side_by_side(delete, read, timeout=30)
    finally:
        session.hooks['response'].remove(hold)
        cloud.clear_rules()
    assert ended and outcome['found'] is not None and outcome['found'].id == other.id
    assert isinstance(outcome['error'], base.Refused) and outcome['error'].status == 403, outcome['error']
    for resource in (refused, other):
        assert p.find(resource.id) is not None   # the refusal acted on nothing
        p.wait(p.delete(p.find(resource.id)), 10)


def test_malformed_delete_action_is_uncertain(cloud):
    p = provider(cloud)
    resource = created(p, 'malformed-ws')
    cloud.add_rule('malformed', 'DELETE', '/servers')
    with pytest.raises(base.UnknownOutcome, match='well-formed action'):
        p.delete(resource)
    p.wait(hprovider.task_handle('delete', resource.id), 10)


@pytest.mark.parametrize('launch,source,location,match', [
    ({}, 'ubuntu-24.04', 'mars1', 'Unknown location'),
    ({'server_type': 'cx999'}, 'ubuntu-24.04', 'fsn1', 'Unknown server type'),
    ({}, 'windows-95', 'fsn1', 'Unknown image'),
    ({'networks': ['nope']}, 'ubuntu-24.04', 'fsn1', 'Unknown network'),
    ({'labels': {'team': 'a b'}}, 'ubuntu-24.04', 'fsn1', 'label value'),
    ({'ssh_public_key': None}, 'ubuntu-24.04', 'fsn1', 'No way into the server'),
])
def test_bad_input_is_refused_before_anything_is_created(cloud, launch, source, location, match):
    before = len(cloud.servers)
    with pytest.raises(base.InvalidRequest, match=match):
        provider(cloud, **launch).check_source(source, location, 'disposable-workspaces')
    assert len(cloud.servers) == before


def test_missing_and_wrong_token(cloud):
    with pytest.raises(base.InvalidRequest, match='HCLOUD_TOKEN'):
        hclient.HCloud('', cloud.url)
    p = hprovider.HetznerProvider(hclient.HCloud('wrong', cloud.url, retry_timeout=1), SECRET, 'fsn1',
                                  {'ssh_public_key': PUBLIC_KEY})
    with pytest.raises(base.InvalidRequest, match='Check the API token'):
        p.check_source('ubuntu-24.04', 'fsn1', 'disposable-workspaces')


def test_an_answer_larger_than_the_cap_is_not_read_and_fails_clearly():
    """A server in the API's place answers 48 MiB (more than twice CLOUD_ANSWER_MAX) to hcloud's own requests: the
    client stops reading at the cap and fails saying what was wrong; a read is not repeated, a call that acts is an
    unknown outcome."""
    from ansible_collections.ephemera.workspaces.plugins.module_utils.providers import answers
    from tests.floodserver import MIB, FloodServer
    assert answers.CLOUD_ANSWER_MAX == 16 * MIB
    with FloodServer(48 * MIB, key='servers') as server:
        api = hclient.HCloud(TOKEN, server.url + '/v1', request_timeout=15, retry_timeout=15)
        with pytest.raises(base.Refused) as info:
            api.call('GET', '/servers')
        with pytest.raises(base.UnknownOutcome) as acted:
            api.call('POST', '/servers', acts=True, json={'name': 'ws'})
        assert server.settled(2)
    assert (server.hung_up, server.completed) == (2, 0)
    assert [method for method, dummy in server.requests] == ['GET', 'POST']  # neither repeated
    assert 'GET /servers: the answer of %s/v1/servers is larger than 16 MiB' % server.url in str(info.value)
    assert 'hetzner_endpoint' in str(info.value) and 'look before repeating it' in str(acted.value)
