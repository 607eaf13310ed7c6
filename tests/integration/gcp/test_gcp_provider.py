"""The GCP provider through google-cloud-compute's own REST clients against the Compute Engine fake: create to
running, confirmed deletion, a lost insert answer (one instance, never two, by the requestId; also when the fake broke
after the instance was made), a lost delete answer,
operation errors, rate limits, labels, orphans in the listing, and bad input refused before any insert."""

import pytest

from ansible_collections.ephemera.workspaces.plugins.module_utils.core import lease as leasing
from ansible_collections.ephemera.workspaces.plugins.module_utils.providers import base
from ansible_collections.ephemera.workspaces.plugins.module_utils.providers.gcp.client import Compute, credentials
from ansible_collections.ephemera.workspaces.plugins.module_utils.providers.gcp.provider import GcpProvider

SECRET = b's' * 32
KEY = 'ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIFakeKeyForTests test'


def provider(fake, secret=SECRET, zone=None, **launch):
    options = {'ssh_public_key': KEY, 'address': 'public', 'machine_type': 'e2-small', 'network': 'default'}
    options.update(launch)
    compute = Compute(fake.project, zone or fake.zone, credentials('anonymous'), endpoint=fake.url, retry_timeout=3)
    return GcpProvider(compute, secret, options, sleep=lambda s: None)


def allocation(p, workspace, stamp=1.0, state='provisioning', expires_at=2000000000):
    labels = {'state': state, 'expires_at': str(expires_at), 'keep': 'false', 'created_at': '1796000000'}
    return base.Allocation(p.candidate_for(workspace, stamp), workspace, 'debian-12', p.zone, workspace, 'scope-a',
                           labels=labels)


def test_create_to_running_and_confirmed_delete(gcpfake):
    p = provider(gcpfake)
    a = allocation(p, 'create-one')
    assert p.check_source('debian-12', None, 'scope-a') == gcpfake.zone
    handle = p.allocate(a)
    assert p.wait(handle, 10).succeeded
    found = p.find(a.candidate)
    assert p.verify(found, 'create-one') == 'verified'
    assert p.labels(found)['state'] == 'provisioning'
    assert gcpfake.instances[a.candidate]['labels']['ephemera-scope'] == 'scope-a'
    assert p.addresses(found) == [('nic0', 'inet', '127.0.0.1')]
    assert [e['id'] for e in p.list() if e['id'] == a.candidate] == [a.candidate]
    p.write_labels(found, {'state': 'ready'})
    assert p.labels(p.find(a.candidate))['state'] == 'ready'
    done = p.delete(p.find(a.candidate))
    assert p.wait(done, 10).succeeded
    assert p.find(a.candidate) is None
    calls = [(m, path) for m, path, q in gcpfake.calls if a.candidate in path]
    # DONE without an error, then a GET that answers 404.
    assert calls[-1] == ('GET', 'zones/%s/instances/%s' % (gcpfake.zone, a.candidate))


def test_lost_insert_answer_is_the_same_request(gcpfake):
    p = provider(gcpfake)
    a = allocation(p, 'lost-insert')
    before = gcpfake.inserts
    gcpfake.fault('drop', 'POST', r'/instances$', times=1)
    # The answer is lost; the client retries with the same requestId and gets the same operation.
    handle = p.allocate(a)
    assert p.wait(handle, 10).succeeded
    # A rerun (a new process after a crash) asks again with the same requestId: still one instance.
    again = provider(gcpfake).allocate(a)
    assert again.split('/')[4] == handle.split('/')[4]
    assert gcpfake.inserts - before == 1
    inserts = [q for m, path, q in gcpfake.calls if m == 'POST' and path.endswith('/instances')]
    assert len(set(q['requestId'] for q in inserts[-3:])) == 1
    p.wait(p.delete(p.find(a.candidate)), 10)


def test_an_insert_that_broke_after_its_instance_was_made_is_the_same_request_when_retried(gcpfake, monkeypatch):
    """The fake made the instance, then failed before it answered (here its metadata server, which it starts for an
    instance with an external address): the client retries with the same requestId and is answered with the insert's
    operation, as Compute Engine answers a repeated requestId, never "already exists"; still one instance. Another
    requestId for the same name is a new request: 409 alreadyExists."""
    from tests.pgserver import free_port
    gcpfake.metadata_port = free_port()
    started = gcpfake.metadata_server
    broke = []

    def breaks_once(name, *args, **kwargs):
        if not broke:
            broke.append(name)
            raise RuntimeError('the fake broke between the instance and its answer')
        return started(name, *args, **kwargs)
    monkeypatch.setattr(gcpfake, 'metadata_server', breaks_once)
    p = provider(gcpfake)
    a = allocation(p, 'half-made')
    before = gcpfake.inserts
    handle = p.allocate(a)
    assert p.wait(handle, 10).succeeded
    assert broke == [a.candidate] and gcpfake.inserts - before == 1
    inserts = [q for m, path, q in gcpfake.calls if m == 'POST' and path.endswith('/instances')]
    assert len(inserts) >= 2 and len(set(q['requestId'] for q in inserts[-2:])) == 1
    status, answer = gcpfake.insert({'name': a.candidate, 'machineType': 'zones/%s/machineTypes/e2-small'
                                     % gcpfake.zone}, 'another-request')
    assert status == 409 and answer['error']['errors'][0]['reason'] == 'alreadyExists'
    # Its metadata server was started at the address the insert gave it, at first use.
    assert gcpfake.metadata_server(a.candidate).endswith(':%d' % gcpfake.metadata_port)
    p.wait(p.delete(p.find(a.candidate)), 10)


def test_lost_insert_answer_without_retry_is_unknown_then_found(gcpfake):
    p = provider(gcpfake)
    p.compute.retry_timeout = 0
    a = allocation(p, 'lost-insert-2')
    gcpfake.fault('drop', 'POST', r'/instances$', times=1)
    with pytest.raises(base.UnknownOutcome):
        p.allocate(a)
    # Looking before repeating: the instance is there, with our marker.
    found = p.find(a.candidate)
    assert p.verify(found, 'lost-insert-2') == 'verified'
    assert p.wait(p.allocation_task(a, 0), 10).succeeded
    p.wait(p.delete(found), 10)


def test_lost_delete_answer_is_finished_by_the_next_run(gcpfake):
    p = provider(gcpfake)
    a = allocation(p, 'lost-delete')
    p.wait(p.allocate(a), 10)
    found = p.find(a.candidate)
    quick = provider(gcpfake)
    quick.compute.retry_timeout = 0
    gcpfake.fault('drop', 'DELETE', r'/instances/', times=1)
    with pytest.raises(base.UnknownOutcome):
        quick.delete(found)
    # The next run's delete is told the instance is gone (NotFound: the seam's "done" for a delete), and a GET
    # confirms the absence.
    with pytest.raises(base.NotFound):
        provider(gcpfake).delete(found)
    assert provider(gcpfake).find(a.candidate) is None
    assert a.candidate not in gcpfake.instances


def test_delete_operation_done_with_error_is_a_failure(gcpfake):
    p = provider(gcpfake)
    a = allocation(p, 'failing-delete')
    p.wait(p.allocate(a), 10)
    gcpfake.fault('fail_delete', 'DELETE', r'/instances/', times=1, message='Disk detach failed on the host.')
    handle = p.delete(p.find(a.candidate))
    with pytest.raises(base.TaskFailed) as err:
        p.wait(handle, 10)
    assert 'Disk detach failed on the host.' in str(err.value)
    assert p.find(a.candidate) is not None
    # Failed, not done: a later delete is a new request (a new requestId) and completes.
    assert p.wait(p.delete(p.find(a.candidate)), 10).succeeded


def test_operation_still_running_then_delete_not_done_before_404(gcpfake):
    p = provider(gcpfake)
    a = allocation(p, 'slow-ops')
    p.wait(p.allocate(a), 10)
    gcpfake.op_seconds = 0.6
    try:
        handle = p.delete(p.find(a.candidate))
        with pytest.raises(base.TaskTimeout):
            p.wait(handle, 0.1)
        assert p.task_status(handle).status == 'running'
        assert p.wait(handle, 10).succeeded
    finally:
        gcpfake.op_seconds = 0.0
    assert p.find(a.candidate) is None


def test_rate_limit_is_ridden_out(gcpfake):
    p = provider(gcpfake)
    gcpfake.fault('ratelimit', 'GET', r'^zones/[^/]+$', times=2)
    assert p.check_source('debian-12', None, 'scope-a') == gcpfake.zone


@pytest.mark.parametrize('change, words', [
    (dict(zone='europe-west9-z'), 'Zone europe-west9-z does not exist'),
    (dict(machine_type='e9-huge'), 'Machine type e9-huge is not offered'),
    (dict(network='nowhere'), 'Network nowhere does not exist'),
    (dict(labels={'Team': 'a'}), "Label key 'Team' breaks"),
    (dict(labels={'team': 'A.B'}), "Label team has the value 'A.B'"),
    (dict(labels={'state': 'x'}), 'is set by the collection'),
    (dict(ssh_public_key=None), 'No way into the instance'),
])
def test_bad_input_refused_before_an_insert(gcpfake, change, words):
    zone = change.pop('zone', None)
    p = provider(gcpfake, zone=zone, **change)
    before = list(gcpfake.instances)
    with pytest.raises(base.InvalidRequest) as err:
        p.check_source('debian-12', None, 'scope-a')
    assert words in str(err.value)
    assert list(gcpfake.instances) == before


def test_unknown_image_refused(gcpfake):
    with pytest.raises(base.InvalidRequest) as err:
        provider(gcpfake).check_source('no-such-image', None, 'scope-a')
    assert 'Image projects/%s/global/images/no-such-image does not exist' % gcpfake.project in str(err.value)


def test_credentials_the_google_way_refuse_clearly(tmp_path, monkeypatch):
    monkeypatch.delenv('GOOGLE_APPLICATION_CREDENTIALS', raising=False)
    with pytest.raises(base.InvalidRequest) as err:
        credentials('serviceaccount', None, environ={})
    assert 'GOOGLE_APPLICATION_CREDENTIALS' in str(err.value)
    with pytest.raises(base.InvalidRequest) as err:
        credentials('serviceaccount', str(tmp_path / 'missing.json'))
    assert 'does not exist' in str(err.value)
    bad = tmp_path / 'key.json'
    bad.write_text('{"type": "service_account", "private_key": "SECRET-SHOULD-NOT-SHOW"}')
    with pytest.raises(base.InvalidRequest) as err:
        credentials('serviceaccount', str(bad))
    assert 'SECRET-SHOULD-NOT-SHOW' not in str(err.value)


def test_orphans_carry_our_labels_and_foreign_marker_fails(gcpfake):
    p = provider(gcpfake)
    a = allocation(p, 'orphan-one')
    p.wait(p.allocate(a), 10)
    other = provider(gcpfake, secret=b'o' * 32)
    entry = [e for e in other.list() if e['id'] == a.candidate][0]
    assert entry['pool'] == 'scope-a' and 'ephemera' in entry['tags']
    assert other.verify(other.find_listed(entry), 'orphan-one') == 'foreign'
    assert p.verify(p.find_listed(entry), 'orphan-one') == 'verified'
    assert leasing.cleanup_decision(p.labels(p.find(a.candidate)), 1796000000, True).decision == 'skip'
    p.wait(p.delete(p.find(a.candidate)), 10)
