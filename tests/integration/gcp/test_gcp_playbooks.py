"""Workspaces on Compute Engine through the shipped playbooks, on the try-out cloud's Compute Engine fake
(google-cloud-compute making the requests, real sshd guests on the instances' external addresses, every answer
checked against the Compute v1 discovery document): create to ready and a confirmed destroy; a lost insert answer
gives one instance; a deletion operation DONE with an error fails the destroy with its message; a lost delete answer
is finished by the next run; an instance runs with no service account and a termination time at its lease's end
plus the grace, and from inside it (over SSH) no token can be had and another workspace can be neither relabelled
nor deleted; a retain takes the termination time off; the cloud deletes an instance at its termination time with no
controller running; bad zone, image and labels refused before an instance is made (the other bad input is tested on
the provider: test_gcp_provider.py); the inventory. One cloud and one controller for the file: the three workspaces
are made in one create run (an inventory host per workspace, each fault aimed at its own workspace) and destroyed in
two or three runs."""

import json
import math
import shlex
import time

import pytest

from ansible_collections.ephemera.workspaces.plugins.module_utils.core import lease as leasing

from tests.integration.playbooks import make_repo
from tests.localpve import ssh, ssh_run

from .gcprun import GcpSite

HAPPY, FAULTS, KEEP = 'gce-happy', 'gce-faults', 'gce-keep'
# What a process in an instance tries, over SSH as the agent would: a token from its metadata server, then
# relabelling and deleting another workspace's instance with the only token it has, one it made up.
IN_THE_GUEST = r"""
import json, sys, urllib.error, urllib.request
meta, api, other, fingerprint = sys.argv[1:5]  # other: unused
def status(request):
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            return answer.status
    except urllib.error.HTTPError as err:
        return err.code
out = {'token': status(urllib.request.Request(meta + '/computeMetadata/v1/instance/service-accounts/default/token',
                                              headers={'Metadata-Flavor': 'Google'}))}
auth = {'Authorization': 'Bearer ya29.made-up', 'Content-Type': 'application/json'}
body = json.dumps({'labels': {'ephemera': 'workspace', 'state': 'failed'}, 'labelFingerprint': fingerprint}).encode()
out['relabel'] = status(urllib.request.Request(api + '/setLabels', data=body, method='POST', headers=auth))
out['delete'] = status(urllib.request.Request(api, method='DELETE', headers=auth))
print(json.dumps(out))
"""


@pytest.fixture(scope='module')
def site(localcloud, tmp_path_factory):  # pylint: disable=redefined-outer-name
    directory = tmp_path_factory.mktemp('gcp')
    site = GcpSite(localcloud, directory)
    site.repo = make_repo(str(directory / 'repo'))
    yield site
    print('playbook runs (playbook, workspace, seconds): %s' % site.timings)
    assert localcloud.gcp('violations') == []


@pytest.fixture()
def cloud(site):
    site.cloud.clear()
    yield site.cloud
    site.cloud.clear()


def said(run, host):
    """Everything the run's tasks answered for ``host`` (one workspace), as text."""
    return json.dumps(run.results(host))


def insert_calls(site, since=0):
    return [q for m, p, q in site.cloud.gcp('calls')[since:] if m == 'POST' and p.endswith('/instances')]


@pytest.fixture(scope='module')
def created(site):
    """One create run for three workspaces: a clean one, one whose insert answer is lost, and one to be retained
    (set, as an inventory may still, with the deprecated guard options, which are ignored)."""
    site.cloud.clear()
    before, calls = site.cloud.gcp('inserts'), len(site.cloud.gcp('calls'))
    site.fault('drop', 'POST', r'/instances$', times=1, match=FAULTS)
    deprecated = {'ephemera_gcp_guard': 'refuse', 'ephemera_gcp_service_account_email': 'default'}
    run = site.create_many({HAPPY: {}, FAULTS: {}, KEEP: deprecated}, site.repo)
    return {'run': run, 'inserts': site.cloud.gcp('inserts') - before, 'insert_calls': insert_calls(site, calls)}


def test_create_to_ready(site, created):  # pylint: disable=redefined-outer-name
    for name in (HAPPY, FAULTS, KEEP):
        ws = site.workspace(name)
        assert ws['status'] == 'ready' and ws['provider'] == 'gcp', said(created['run'], name)
    ws = site.workspace(HAPPY)
    info = site.cloud.info['gcp']
    assert ws['resource_id'] == ws['candidate_id'] and ws['resource_id'].startswith('eph-gce-happy-')
    assert ws['location'] == info['zone']
    [instance] = site.instances(HAPPY)
    assert instance['status'] == 'RUNNING' and instance['sshd'] == 'up'
    assert instance['labels']['ephemera'] == 'workspace' and instance['labels']['state'] == 'ready'
    assert site.provider().verify(site.provider().find(ws['resource_id']), HAPPY) == 'verified'
    # No credential in the instance; Compute Engine itself deletes it at the lease's end plus the grace.
    assert instance['service_accounts'] == []
    lease = ws['lease']
    deadline = int(math.ceil(float(lease['created_at']) + float(lease['ttl']))) + 3600
    assert instance['scheduling'] == {'terminationTime': leasing.format_time(deadline),
                                      'instanceTerminationAction': 'DELETE'}
    assert 'ephemera-gcp-guard' not in json.dumps(instance)


def test_inside_an_instance_no_token_and_no_reach_to_others(site, created):  # pylint: disable=redefined-outer-name
    info = site.cloud.info
    ws, other = site.workspace(HAPPY), site.workspace(FAULTS)
    [theirs] = site.instances(FAULTS)
    fingerprint = site.provider().native(other['resource_id']).label_fingerprint
    api = '%s/compute/v1/projects/%s/zones/%s/instances/%s' % (info['gcp']['endpoint'], info['gcp']['project'],
                                                               other['location'], other['resource_id'])
    meta = 'http://%s:%d' % (ws['address'], info['gcp']['metadata_port'])
    client = ssh(info, ws['address'], timeout=5)
    try:
        argv = ('python3', '-c', IN_THE_GUEST, meta, api, '-', fingerprint)
        status, out, err = ssh_run(client, ' '.join(shlex.quote(a) for a in argv))
    finally:
        client.close()
    assert status == 0, err
    assert json.loads(out.decode()) == {'token': 404, 'relabel': 401, 'delete': 401}
    [after] = site.instances(FAULTS)
    assert after['labels'] == theirs['labels'] and after['status'] == 'RUNNING'


def test_lost_insert_gives_one_instance(site, created):  # pylint: disable=redefined-outer-name
    assert site.workspace(FAULTS)['status'] == 'ready', said(created['run'], FAULTS)
    # One instance per workspace of the run (three inserts carried out), the lost one's retry the same request.
    assert [len(site.instances(n)) for n in (HAPPY, FAULTS, KEEP)] == [1, 1, 1]
    assert created['inserts'] == 3
    ids = [q['requestId'] for q in created['insert_calls']]
    assert len(ids) >= 4 and len(set(ids)) == 3
    assert any(ids.count(i) >= 2 for i in ids)


@pytest.fixture(scope='module')
def retained(site, created):  # pylint: disable=redefined-outer-name
    """The third workspace released without delete (destroy.yml -e delete=false)."""
    run = site.destroy_many(dict.fromkeys([KEEP]), delete=False)
    return {'run': run, 'instances': site.instances(KEEP)}


def test_a_retained_workspace_loses_its_termination_time(site, retained):  # pylint: disable=redefined-outer-name
    """Kept past its lease, the instance must not be deleted by Compute Engine: the retain stops it, takes the
    termination time off (instances.setScheduling takes only a stopped instance) and starts it again."""
    assert retained['run'].ok, retained['run'].explain()
    ws = site.workspace(KEEP)
    assert (ws.get('cleanup') or {}).get('retained') is True
    [instance] = retained['instances']
    assert 'terminationTime' not in instance['scheduling'] and instance['status'] == 'RUNNING'
    # Its labels say retained until the retention ends (a week by default), for a sweep by labels.
    assert (instance['labels']['state'], instance['labels']['keep']) == ('retained', 'false')
    assert int(instance['labels']['expires_at']) == math.ceil(ws['cleanup']['retained_until'])
    assert 'termination time' in said(retained['run'], KEEP)


def test_the_cloud_deletes_an_instance_at_its_termination_time_with_no_controller(site, cloud):
    """No playbook runs: the try-out cloud's own ticks delete the instance at its termination time, as Compute
    Engine does, and its guest goes with it."""
    from ansible_collections.ephemera.workspaces.plugins.module_utils.providers import base
    provider = site.provider()
    name = provider.candidate_for('gce-deadline', 'deadline')
    options = {'lease': {'ends_at': time.time() + 20}, 'deadline_grace': 0}
    provider.wait(provider.allocate(base.Allocation(name, 'gce-deadline', cloud_image(site), provider.zone, 'x',
                                                    'disposable-workspaces', options=options)), 30)
    assert [i['name'] for i in cloud.gcp('instances') if i['name'] == name] == [name]
    for dummy in range(240):
        if name in [t[0] for t in cloud.gcp('terminated')]:
            break
        time.sleep(0.5)
    assert [t[1] for t in cloud.gcp('terminated') if t[0] == name] == ['DELETE']
    assert name not in [i['name'] for i in cloud.gcp('instances')]


@pytest.fixture(scope='module')
def first_destroy(site, created):  # pylint: disable=redefined-outer-name
    """One destroy run: the clean workspace, and the faults' one whose deletion operation ends DONE with an error."""
    name = site.workspace(FAULTS)['resource_id']
    site.fault('fail_delete', 'DELETE', r'/instances/%s$' % name, times=1, message='Disk detach failed on the host.')
    run = site.destroy_many(dict.fromkeys([HAPPY, FAULTS]))
    return {'run': run, 'left': len(site.instances(FAULTS)), 'status': site.workspace(FAULTS)['status']}


@pytest.fixture(scope='module')
def second_destroy(site, first_destroy, retained):  # pylint: disable=redefined-outer-name
    """The next destroy run (and one more when it asks for it): the faults' workspace with its delete answer lost,
    and the retained one (a destroy with delete resumes its cleanup)."""
    name = site.workspace(FAULTS)['resource_id']
    deletes = len([c for c in site.cloud.gcp('calls') if c[0] == 'DELETE'])
    site.fault('drop', 'DELETE', r'/instances/%s$' % name, times=1)
    runs = [site.destroy_many(dict.fromkeys([FAULTS, KEEP]))]
    if site.workspace(FAULTS)['status'] != 'destroyed':
        runs.append(site.destroy_many(dict.fromkeys([FAULTS])))
    return {'runs': runs, 'deletes': deletes}


def destroyed(site, name):
    ws = site.workspace(name)
    assert ws['status'] == 'destroyed' and site.debt(name) == []
    assert site.instances(name) == []


def test_destroy_confirmed(site, first_destroy):  # pylint: disable=redefined-outer-name
    destroyed(site, HAPPY)
    ws = site.workspace(HAPPY)
    calls = [(m, p) for m, p, q in site.cloud.gcp('calls') if ws['resource_id'] in p]
    assert ('DELETE', 'zones/%s/instances/%s' % (ws['location'], ws['resource_id'])) in calls
    assert calls[-1][0] == 'GET'


def test_failed_then_lost_deletes(site, first_destroy, second_destroy):  # pylint: disable=redefined-outer-name
    """A deletion operation DONE with an error fails the destroy with Compute Engine's message and leaves the
    instance; a lost delete answer is finished by the run that lost it or the next one."""
    assert not first_destroy['run'].ok
    assert 'Disk detach failed on the host.' in said(first_destroy['run'], FAULTS)
    assert first_destroy['left'] == 1 and first_destroy['status'] != 'destroyed'
    runs = second_destroy['runs']
    assert runs[-1].ok, runs[-1].explain()
    assert len([c for c in site.cloud.gcp('calls') if c[0] == 'DELETE']) > second_destroy['deletes']
    destroyed(site, FAULTS)
    destroyed(site, KEEP)


BAD_INPUT = {
    'gce-bad-zone': ({'ephemera_gcp_zone': 'europe-west9-z'}, 'Zone europe-west9-z does not exist'),
    'gce-bad-image': ({'ephemera_template': 'no-such-image'}, 'no-such-image does not exist'),
    'gce-bad-label': ({'ephemera_gcp_labels': {'Team': 'x'}}, "Label key 'Team' breaks"),
}


def test_bad_input_refused_before_an_instance(site, cloud):
    before = cloud.gcp('inserts')
    run = site.create_many({name: own for name, (own, words) in BAD_INPUT.items()}, site.repo)
    assert not run.ok
    for name, (own, words) in BAD_INPUT.items():
        assert words in said(run, name), said(run, name)
        assert site.instances(name) == []
    assert cloud.gcp('inserts') == before


def _instance(site, provider, workspace, lease):
    from ansible_collections.ephemera.workspaces.plugins.module_utils.core import ownership
    from ansible_collections.ephemera.workspaces.plugins.module_utils.providers import base
    nonce = ownership.new_nonce()
    name = provider.candidate_for(workspace, 'inventory')
    provider.wait(provider.allocate(base.Allocation(name, workspace, cloud_image(site), provider.zone, workspace,
                                                    'disposable-workspaces', labels=lease, nonce=nonce)), 30)
    return name, nonce


def cloud_image(site):
    return site.cloud.info['gcp']['image']


def test_the_inventory_lists_gcp_workspaces_and_orphans(site, cloud, tmp_path):
    from ansible_collections.ephemera.workspaces.plugins.module_utils.core.journal import Journal
    from tests.ansible_run import run_ansible
    with Journal.open(site.journal_path):
        pass
    provider = site.provider()
    lease = {'state': 'ready', 'expires_at': '4000000000', 'keep': 'false', 'created_at': '1700000000'}
    name, nonce = _instance(site, provider, 'gce-listed', lease)
    orphan = _instance(site, provider, 'gce-unrecorded', lease)[0]
    info = cloud.info['gcp']
    with Journal.open(site.journal_path) as journal:
        journal.create_workspace('gce-listed', status='ready', desired_state='present', provider='gcp',
                                 location=info['zone'], candidate_id=name, resource_id=name,
                                 facts={'marker_nonce': nonce}, repo='file://' + site.repo, ref='main',
                                 purpose='listed', params={'pool': 'disposable-workspaces'})
    path = str(tmp_path / 'gcp.workspaces.yml')
    with open(path, 'w') as out:
        out.write(json.dumps({'plugin': 'ephemera.workspaces.workspaces', 'journal_path': site.journal_path,
                              'gcp_endpoint_url': info['endpoint'], 'gcp_project': info['project'],
                              'gcp_auth_kind': 'anonymous'}))
    run = run_ansible(['ansible-inventory', '-i', path, '--list'], timeout=120, fail=False, callback=None,
                      env=dict(ANSIBLE_INVENTORY_UNPARSED_FAILED='1', XDG_CACHE_HOME=str(tmp_path / 'cache')),
                      unset=('PROXMOX_', 'EPHEMERA_', 'AWS_', 'HCLOUD_', 'GOOGLE_'))
    assert run.returncode == 0, run.output
    listed = run.data
    assert 'gce-listed' in listed['provider_gcp']['hosts']
    assert 'gce-listed' in listed['region_%s' % info['zone'].replace('-', '_')]['hosts']
    assert name in json.dumps(listed['_meta']['hostvars']['gce-listed'])
    assert orphan in run.output
    for each in (name, orphan):
        provider.wait(provider.delete(provider.find(each)), 30)


def test_orphan_and_label_sweeps_on_compute_engine_labels(site, cloud):
    """Reconcile reports what carries our labels without a live record and deletes (orphans=delete) only the instance
    an exact retained record binds; the label cleanup sweep deletes only the expired one; another controller's
    instance is foreign to both."""
    import time
    from ansible_collections.ephemera.workspaces.plugins.module_utils.core.journal import Journal
    from ansible_collections.ephemera.workspaces.plugins.module_utils.providers.gcp.provider import GcpProvider
    with Journal.open(site.journal_path):
        pass  # the journal and the controller secret exist, whichever test ran first
    provider = site.provider()
    zone = cloud.info['gcp']['zone']
    future = {'state': 'ready', 'expires_at': str(int(time.time()) + 3600), 'keep': 'false',
              'created_at': str(int(time.time()))}
    past = dict(future, expires_at=str(int(time.time()) - 7200))
    bound, nonce = _instance(site, provider, 'gce-gone', future)
    with Journal.open(site.journal_path) as journal:
        journal.create_workspace('gce-gone', status='destroyed', desired_state='destroyed', provider='gcp',
                                 location=zone, candidate_id=bound, resource_id=bound, facts={'marker_nonce': nonce},
                                 repo='file://' + site.repo, ref='main', purpose='left behind',
                                 params={'pool': 'disposable-workspaces'})
    lost = _instance(site, provider, 'gce-lost', future)[0]
    expired = _instance(site, provider, 'gce-expired', past)[0]
    # Another controller's workspace in the same project, with our labels: its marker is not ours.
    other = GcpProvider(provider.compute, b'another controller' * 2, provider.launch)
    foreign = _instance(site, other, 'gce-theirs', future)[0]

    def names():
        return set(i['name'] for i in cloud.gcp('instances'))

    run = site.playbook('reconcile.yml', reconcile_resume_creates=False)
    assert run.ok, run.explain()
    found = {f['vmid']: (f['kind'], f['workspace'], f['detail'])
             for f in run.task('Compare the journal with the cluster')['findings']}
    assert found[bound][:2] == ('destroyed_present', 'gce-gone')
    assert found[lost][:2] == ('orphan', 'gce-lost') and 'remove instance %s' % lost in found[lost][2]
    assert found[expired][:2] == ('orphan', 'gce-expired')
    assert found[foreign][0] == 'foreign'
    assert not [d for dummy, dummy2, d in found.values() if 'container' in d or 'VMID' in d], found
    assert {bound, lost, expired, foreign} <= names()  # report mode touches nothing

    run = site.playbook('reconcile.yml', reconcile_resume_creates=False, ephemera_orphans='delete')
    assert run.ok, run.explain()
    # Only the instance an exact retained record binds is deleted.
    assert bound not in names() and {lost, expired, foreign} <= names()

    run = site.playbook('cleanup.yml', apply=True)
    assert run.ok, run.explain()
    entries = {e['id']: e for e in run.task('Sweep the pool by labels')['entries']}
    assert [i for i, e in entries.items() if e['action'] == 'deleted'] == [expired]
    assert entries[foreign]['action'] != 'deleted'
    assert expired not in names() and {lost, foreign} <= names()
    for owner, name in ((provider, lost), (other, foreign)):
        owner.wait(owner.delete(owner.find(name)), 30)
