"""Nothing in a Compute Engine workspace holds a credential, and Compute Engine itself deletes it at its deadline.

Against the Compute Engine fake (every answer checked against the Compute v1 discovery document), through
google-cloud-compute's own REST clients: an instance is inserted with no service account and with
``scheduling.terminationTime`` at the lease's end plus the grace and ``instanceTerminationAction: DELETE``; a process
in the instance asks its metadata server for a token and gets none (404, as Google's metadata server answers an
instance without a service account), and whatever token it makes up is refused (401) when it tries to relabel or
delete another workspace or to add SSH keys to it; an instance past its termination time is deleted by the "cloud"
with no controller running; a retain takes the termination time off (stopping the instance for it, as
instances.setScheduling allows on a stopped instance only); a request whose lease ended is refused before an insert.
The try-out cloud's playbook tests (test_gcp_playbooks.py) do the same from inside a real sshd guest."""

import json
import math
import time
import urllib.error
import urllib.request

import pytest

from ansible_collections.ephemera.workspaces.plugins.module_utils.core import lease as leasing
from ansible_collections.ephemera.workspaces.plugins.module_utils.providers import base
from ansible_collections.ephemera.workspaces.plugins.module_utils.providers.gcp import provider as gcp
from tests.integration.gcp.test_gcp_provider import allocation, provider


def make(fake, workspace, ends_in=3600, grace=None):
    """An instance of ``workspace`` made by the provider, its lease ending ``ends_in`` seconds from now."""
    p = provider(fake) if grace is None else provider(fake, deadline_grace=grace)
    a = allocation(p, workspace)
    ends_at = time.time() + ends_in
    a.options = {'lease': {'id': a.candidate, 'ends_at': ends_at}}
    p.wait(p.allocate(a), 10)
    return p, a.candidate, ends_at


def guest_get(url, headers=None):
    """(status, body) of a GET from inside the instance."""
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers or {}), timeout=10) as answer:
            return answer.status, answer.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode()


def guest_call(fake, method, path, token, body=None):
    """(status, body) of a Compute Engine call made from inside an instance with ``token``."""
    url = '%s/compute/v1/projects/%s/zones/%s/%s' % (fake.url, fake.project, fake.zone, path)
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(url, data=data, method=method, headers={
        'Authorization': 'Bearer %s' % token, 'Content-Type': 'application/json'})
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            return answer.status, answer.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode()


def test_the_instance_runs_with_no_service_account_and_its_deadline_set(gcpfake):
    p, name, ends_at = make(gcpfake, 'deadline-set', grace=600)
    instance = p.native(name)
    assert list(instance.service_accounts) == []
    want = leasing.format_time(int(math.ceil(ends_at)) + 600)
    assert instance.scheduling.termination_time == want
    assert instance.scheduling.instance_termination_action == 'DELETE'
    assert p.deadline_of(name) == (want, 'DELETE')
    p.wait(p.delete(p.find(name)), 10)


def test_nothing_in_an_instance_gets_a_token_or_touches_another_workspace(gcpfake):
    p, mine, dummy = make(gcpfake, 'agent-here')
    p, other, dummy = make(gcpfake, 'other-one')
    meta = gcpfake.metadata_server(mine) + '/computeMetadata/v1/'
    flavor = {'Metadata-Flavor': 'Google'}
    assert guest_get(meta + 'instance/name', flavor) == (200, mine)
    status, text = guest_get(meta + 'instance/service-accounts/default/token', flavor)
    assert status == 404 and 'access_token' not in text
    assert guest_get(meta + 'instance/service-accounts/', flavor)[0] == 404
    # Without a token from the metadata server, a process in the instance has only what it makes up: refused.
    other_path = 'instances/%s' % other
    fingerprint = gcpfake.instances[other]['labelFingerprint']
    for method, path, body in (
            ('POST', other_path + '/setLabels', {'labels': {'ephemera': 'workspace', 'state': 'failed'},
                                                 'labelFingerprint': fingerprint}),
            ('POST', other_path + '/setMetadata', {'fingerprint': 'AAAAAAAAAAA=',
                                                   'items': [{'key': 'ssh-keys', 'value': 'root:ssh-ed25519 AAAA x'}]}),
            ('POST', 'instances/%s/setLabels' % mine,
             {'labels': {'ephemera': 'workspace', 'keep': 'true'},
              'labelFingerprint': gcpfake.instances[mine]['labelFingerprint']}),
            ('DELETE', other_path, None)):
        status, text = guest_call(gcpfake, method, path, 'ya29.made-up-by-the-agent', body)
        assert status == 401, (method, path, status, text)
    assert p.labels(p.find(other))['state'] == 'provisioning'
    assert p.labels(p.find(mine))['keep'] == 'false'
    assert 'ssh-keys' in {i['key']: i['value'] for i in gcpfake.instances[other]['metadata']['items']}
    assert gcpfake.instances[other]['metadata']['items'][-1]['value'] != 'root:ssh-ed25519 AAAA x'
    for name in (mine, other):
        p.wait(p.delete(p.find(name)), 10)


def test_a_token_whose_account_lacks_the_permission_is_refused(gcpfake):
    """The fake refuses what IAM would: an instance that does run with a service account (made by someone else)
    gets a token, and a call its account was denied is 403."""
    p, other, dummy = make(gcpfake, 'iam-target')
    body = {'name': 'someone-elses', 'machineType': 'zones/%s/machineTypes/e2-small' % gcpfake.zone,
            'serviceAccounts': [{'email': 'vm@ephemera-test.iam.gserviceaccount.com', 'scopes': []}]}
    status, dummy = gcpfake.insert(body, None)
    assert status == 200
    meta = gcpfake.metadata_server('someone-elses') + '/computeMetadata/v1/'
    status, text = guest_get(meta + 'instance/service-accounts/default/token', {'Metadata-Flavor': 'Google'})
    assert status == 200
    token = json.loads(text)['access_token']
    gcpfake.deny('vm@ephemera-test.iam.gserviceaccount.com', 'compute.instances.setLabels')
    try:
        status, text = guest_call(gcpfake, 'POST', 'instances/%s/setLabels' % other, token,
                                  {'labels': {'keep': 'true'},
                                   'labelFingerprint': gcpfake.instances[other]['labelFingerprint']})
        assert status == 403 and 'compute.instances.setLabels' in text
    finally:
        gcpfake.denied.clear()
    gcpfake.delete('someone-elses', None)
    p.wait(p.delete(p.find(other)), 10)


def test_compute_engine_deletes_the_instance_at_its_deadline_with_no_controller(gcpfake):
    p, name, ends_at = make(gcpfake, 'past-deadline', ends_in=120, grace=0)
    at = int(math.ceil(ends_at))
    gcpfake.tick(now=at - 1)
    assert name in gcpfake.instances
    gcpfake.tick(now=at + 1)
    assert name not in gcpfake.instances
    assert (name, 'DELETE') in [(n, action) for n, action, when in gcpfake.terminated]
    assert p.find(name) is None


def test_a_retain_takes_the_deadline_off(gcpfake):
    p, name, ends_at = make(gcpfake, 'retained-one', ends_in=120, grace=0)
    # Compute Engine changes scheduling only on a stopped instance.
    status, text = guest_call(gcpfake, 'POST', 'instances/%s/setScheduling' % name, 'ya29.made-up', {})
    assert status == 401
    status, answer = gcpfake.set_scheduling(name, {}, None)
    assert status == 400 and 'TERMINATED' in answer['error']['message']
    said = p.lift_deadline(p.find(name))
    assert 'taken off' in said and 'started again' in said
    assert p.deadline_of(name) == (None, None)
    assert gcpfake.instances[name]['status'] == 'RUNNING'
    gcpfake.tick(now=ends_at + 3600)
    assert name in gcpfake.instances
    assert p.lift_deadline(p.find(name)) is None
    p.wait(p.delete(p.find(name)), 10)


def test_a_lease_that_ended_before_the_insert_is_refused(gcpfake):
    p = provider(gcpfake, deadline_grace=0)
    a = allocation(p, 'ended-lease')
    a.options = {'lease': {'ends_at': time.time() - 10}}
    before = gcpfake.inserts
    with pytest.raises(base.InvalidRequest, match='Request a new workspace'):
        p.allocate(a)
    assert gcpfake.inserts == before


@pytest.mark.parametrize('grace', [-1, True, 'soon', gcp.MAX_DEADLINE_GRACE + 1])
def test_a_bad_grace_is_refused_before_an_insert(gcpfake, grace):
    p = provider(gcpfake, deadline_grace=grace)
    with pytest.raises(base.InvalidRequest, match='gcp_deadline_grace'):
        p.check_source('debian-12', None, 'scope-a')


def test_a_retain_that_stopped_before_the_deadline_was_lifted_is_finished_by_the_next(gcpfake, tmp_path):
    """The destroy flow's retain on a Compute Engine workspace: a run that recorded the retain and died before the
    termination time was taken off leaves it on; the retain run again (\"retained already\") takes it off."""
    from ansible_collections.ephemera.workspaces.plugins.module_utils.core.journal import Journal
    from ansible_collections.ephemera.workspaces.plugins.module_utils.flows.destroy import DestroyFlow
    from ansible_collections.ephemera.workspaces.plugins.modules import workspace_destroy
    from tests.integration.gcp.test_gcp_provider import SECRET
    p, name, ends_at = make(gcpfake, 'retain-rerun')
    now = time.time()
    lease = leasing.new_lease(now, ttl=3600)
    params = {k: v.get('default') for k, v in workspace_destroy.argument_spec().items()}
    params.update(name='retain-rerun', provider='gcp', lock_timeout=2, task_timeout=30, shutdown_timeout=5)
    with Journal.open(str(tmp_path / 'journal.db')) as journal:
        journal.create_workspace('retain-rerun', status='ready', desired_state='present', provider='gcp',
                                 location=gcpfake.zone, candidate_id=name, resource_id=name, lease=lease,
                                 lease_expires_at=lease['expires_at'], repo='file:///x', ref='main', purpose='p',
                                 params={'pool': 'scope-a'})
        ws = journal.get_workspace('retain-rerun')
        # The first run recorded the retain, then died.
        journal.update_workspace('retain-rerun', ws['generation'], cleanup={'retained': True, 'retained_at': now})
        assert p.deadline_of(name)[0] is not None
        result = DestroyFlow(journal, p, params, SECRET).run('retain')
        assert result.changed and 'retained already' in result.msg and 'taken off' in result.msg, result.msg
        assert p.deadline_of(name) == (None, None)
        actions = [e['action'] for e in journal.events('retain-rerun')]
        assert actions[-2:] == ['lift_deadline', 'deadline_lifted']
        again = DestroyFlow(journal, p, params, SECRET).run('retain')
        assert not again.changed and again.msg == 'retain: retain-rerun is retained already'
    p.wait(p.delete(p.find(name)), 10)
