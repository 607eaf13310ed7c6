"""Workspaces on Compute Engine through the shipped playbooks, on the try-out cloud's Compute Engine fake
(google-cloud-compute making the requests, real sshd guests on the instances' external addresses, every answer
checked against the Compute v1 discovery document): create to ready and a confirmed destroy; a lost insert answer
gives one instance; a deletion operation DONE with an error fails the destroy with its message; a lost delete answer
is finished by the next run; a service account that may not delete its instance refuses the create, and the guard
in that machine logs its refused self-delete loudly, then deletes the machine once it may; bad zone, image and labels
refused before an instance is made (the other bad input is tested on the provider: test_gcp_provider.py); the
inventory. One cloud and one controller for the file: the three workspaces are made in one create run (an inventory
host per workspace, each fault aimed at its own workspace) and destroyed in two or three runs."""

import json
import os
import shlex
import subprocess

import pytest

from ansible_collections.ephemera.workspaces.plugins.module_utils.providers.gcp import guard

from tests.integration.playbooks import make_repo

from .gcprun import GcpSite

HAPPY, FAULTS, GUARD = 'gce-happy', 'gce-faults', 'gce-guard'
# The service account of the guard's machine, denied compute.instances.delete until its test grants it.
GUARD_ACCOUNT = 'guard-test@ephemera-localcloud.iam.gserviceaccount.com'


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


def run_service(root, service):
    """The guard's service command, as its timer runs it (the script at its place in the guest's root)."""
    line = [l for l in service.splitlines() if l.startswith('ExecStart=')][0][len('ExecStart='):]
    argv = [os.path.join(root, a.lstrip('/')) if a == guard.INSTALL_PATH else a for a in shlex.split(line)]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)
    return done.returncode, done.stdout + done.stderr


def said(run, host):
    """Everything the run's tasks answered for ``host`` (one workspace), as text."""
    return json.dumps(run.results(host))


def insert_calls(site, since=0):
    return [q for m, p, q in site.cloud.gcp('calls')[since:] if m == 'POST' and p.endswith('/instances')]


@pytest.fixture(scope='module')
def created(site):
    """One create run for three workspaces: a clean one, one whose insert answer is lost, and one whose service
    account may not delete its instance (gcp_guard refuse)."""
    site.cloud.clear()
    before, calls = site.cloud.gcp('inserts'), len(site.cloud.gcp('calls'))
    site.fault('drop', 'POST', r'/instances$', times=1, match=FAULTS)
    site.cloud.gcp('deny', service_account=GUARD_ACCOUNT)
    run = site.create_many({HAPPY: {}, FAULTS: {}, GUARD: {'ephemera_gcp_service_account_email': GUARD_ACCOUNT}},
                           site.repo)
    return {'run': run, 'inserts': site.cloud.gcp('inserts') - before, 'insert_calls': insert_calls(site, calls)}


def test_create_to_ready(site, created):  # pylint: disable=redefined-outer-name
    for name in (HAPPY, FAULTS):
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
    # The expiry guard is installed (script, service, timer) in the guest; run as its service would run it, it logs
    # its decision (a live lease: skip) to its output and the serial console.
    root = instance['root']
    assert os.path.exists(os.path.join(root, guard.INSTALL_PATH.lstrip('/')))
    service = open(os.path.join(root, 'etc/systemd/system/%s.service' % guard.UNIT_NAME)).read()
    assert '--metadata' in service and '--serial' in service
    code, out = run_service(root, service)
    assert code == 0 and 'skip (state ready' in out, out
    assert 'skip (state ready' in site.provider().compute.call(
        'serial', site.provider().compute.instances.get_serial_port_output, project=info['project'],
        zone=ws['location'], instance=ws['resource_id']).contents


def test_lost_insert_gives_one_instance(site, created):  # pylint: disable=redefined-outer-name
    assert site.workspace(FAULTS)['status'] == 'ready', said(created['run'], FAULTS)
    # One instance per workspace of the run (three inserts carried out), the lost one's retry the same request.
    assert [len(site.instances(n)) for n in (HAPPY, FAULTS, GUARD)] == [1, 1, 1]
    assert created['inserts'] == 3
    ids = [q['requestId'] for q in created['insert_calls']]
    assert len(ids) >= 4 and len(set(ids)) == 3
    assert any(ids.count(i) >= 2 for i in ids)


@pytest.fixture(scope='module')
def guard_ticks(site, created):  # pylint: disable=redefined-outer-name
    """The guard of the machine whose create was refused, run as its timer would: a live lease, then a stale one
    while its service account is still denied, then once granted. Each tick's (exit code, output)."""
    [instance] = site.instances(GUARD)
    ws = site.workspace(GUARD)
    service = open(os.path.join(instance['root'], 'etc/systemd/system/%s.service' % guard.UNIT_NAME)).read()
    ticks = {'live': run_service(instance['root'], service)}
    # Time passes (its expiry written 12 hours and more into the past): stale, so the guard would delete it.
    provider = site.provider()
    provider.write_labels(provider.find(ws['resource_id']), {'expires_at': '1000'})
    ticks['denied'] = run_service(instance['root'], service)
    ticks['left'] = len(site.instances(GUARD))
    site.cloud.clear()
    ticks['granted'] = run_service(instance['root'], service)
    ticks['after'] = site.instances(GUARD)
    return ticks


def test_guard_refused_at_create_then_deletes_the_failed_machine(site, created, guard_ticks):  # pylint: disable=redefined-outer-name
    """A service account that may not delete its instance: the create refuses (gcp_guard refuse) and says what to
    grant. Once granted, the guard in that machine deletes it (its labels say failed), logging its decision; the
    next destroy finds it gone."""
    text = said(created['run'], GUARD)
    assert not created['run'].ok
    assert 'cannot delete it when it expires' in text and guard.PERMISSION in text, text
    ws = site.workspace(GUARD)
    assert ws['status'] == 'failed'
    # Its labels say provisioning with a live lease: the guard leaves it.
    code, out = guard_ticks['live']
    assert code == 0 and 'skip (state provisioning' in out, out
    # Stale and still denied: the self-delete is refused and said loudly; the machine stays for the next tick.
    code, out = guard_ticks['denied']
    assert code == 1 and 'GUARD FAILED: the self-delete of instance %s was refused' % ws['resource_id'] in out, out
    assert guard_ticks['left'] == 1
    code, out = guard_ticks['granted']
    assert code == 0 and 'delete (state provisioning and stale' in out, out
    assert guard_ticks['after'] == []


@pytest.fixture(scope='module')
def first_destroy(site, created):  # pylint: disable=redefined-outer-name
    """One destroy run: the clean workspace, and the faults' one whose deletion operation ends DONE with an error."""
    name = site.workspace(FAULTS)['resource_id']
    site.fault('fail_delete', 'DELETE', r'/instances/%s$' % name, times=1, message='Disk detach failed on the host.')
    run = site.destroy_many(dict.fromkeys([HAPPY, FAULTS]))
    return {'run': run, 'left': len(site.instances(FAULTS)), 'status': site.workspace(FAULTS)['status']}


@pytest.fixture(scope='module')
def second_destroy(site, first_destroy, guard_ticks):  # pylint: disable=redefined-outer-name
    """The next destroy run (and one more when it asks for it): the faults' workspace with its delete answer lost,
    and the guard's, whose machine the guard deleted."""
    name = site.workspace(FAULTS)['resource_id']
    deletes = len([c for c in site.cloud.gcp('calls') if c[0] == 'DELETE'])
    site.fault('drop', 'DELETE', r'/instances/%s$' % name, times=1)
    runs = [site.destroy_many(dict.fromkeys([FAULTS, GUARD]))]
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
    # The guard's machine was gone already: its destroy completes without it.
    destroyed(site, GUARD)


BAD_INPUT = {
    'gce-bad-zone': ({'ephemera_gcp_zone': 'europe-west9-z'}, 'Zone europe-west9-z does not exist'),
    'gce-bad-image': ({'ephemera_template': 'no-such-image'}, 'no-such-image does not exist'),
    'gce-bad-label': ({'ephemera_gcp_labels': {'Team': 'x'}}, "Label key 'Team' breaks"),
}


def test_bad_input_refused_before_an_instance(site, cloud):
    before = cloud.gcp('inserts')
    run = site.create_many(dict((name, own) for name, (own, words) in BAD_INPUT.items()), site.repo)
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
    found = dict((f['vmid'], (f['kind'], f['workspace'], f['detail']))
                 for f in run.task('Compare the journal with the cluster')['findings'])
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
    entries = dict((e['id'], e) for e in run.task('Sweep the pool by labels')['entries'])
    assert [i for i, e in entries.items() if e['action'] == 'deleted'] == [expired]
    assert entries[foreign]['action'] != 'deleted'
    assert expired not in names() and {lost, foreign} <= names()
    for owner, name in ((provider, lost), (other, foreign)):
        owner.wait(owner.delete(owner.find(name)), 30)
