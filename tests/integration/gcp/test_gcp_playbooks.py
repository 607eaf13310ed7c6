"""Workspaces on Compute Engine through the shipped playbooks, on the try-out cloud's Compute Engine fake
(google-cloud-compute making the requests, real sshd guests on the instances' external addresses, every answer
checked against the Compute v1 discovery document): create to ready and a confirmed destroy; a lost insert answer
gives one instance; a deletion operation DONE with an error fails the destroy with its message; a lost delete answer
is finished by the next run; bad zone, image and labels refused before an instance is made (the other bad input is
tested on the provider: test_gcp_provider.py). One cloud and one controller for the file."""

import os
import shlex
import subprocess

import pytest

from ansible_collections.ephemera.workspaces.plugins.module_utils.providers.gcp import guard

from tests.integration.playbooks import make_repo

from .gcprun import GcpSite


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


def ready(site, name, **extra):
    run = site.create(name, site.repo, **extra)
    assert run.ok, run.explain()
    ws = site.workspace(name)
    assert ws['status'] == 'ready' and ws['provider'] == 'gcp', ws
    return ws


def destroyed(site, name):
    run = site.destroy(name)
    assert run.ok, run.explain()
    ws = site.workspace(name)
    assert ws['status'] == 'destroyed' and site.debt(name) == []
    assert site.instances(name) == []
    return ws


def test_create_to_ready_then_destroy_confirmed(site, cloud):
    ws = ready(site, 'gce-happy')
    assert ws['resource_id'] == ws['candidate_id'] and ws['resource_id'].startswith('eph-gce-happy-')
    assert ws['location'] == cloud.info['gcp']['zone']
    [instance] = site.instances('gce-happy')
    assert instance['status'] == 'RUNNING' and instance['sshd'] == 'up'
    assert instance['labels']['ephemera'] == 'workspace' and instance['labels']['state'] == 'ready'
    assert site.provider().verify(site.provider().find(ws['resource_id']), 'gce-happy') == 'verified'
    # The expiry guard is installed (script, service, timer) in the guest; run as its service would run it, it logs
    # its decision (a live lease: skip) to its output and the serial console.
    root = instance['root']
    assert os.path.exists(os.path.join(root, guard.INSTALL_PATH.lstrip('/')))
    service = open(os.path.join(root, 'etc/systemd/system/%s.service' % guard.UNIT_NAME)).read()
    assert '--metadata' in service and '--serial' in service
    code, out = run_service(root, service)
    assert code == 0 and 'skip (state ready' in out, out
    assert 'skip (state ready' in site.provider().compute.call(
        'serial', site.provider().compute.instances.get_serial_port_output, project=cloud.info['gcp']['project'],
        zone=ws['location'], instance=ws['resource_id']).contents
    destroyed(site, 'gce-happy')
    calls = [(m, p) for m, p, q in cloud.gcp('calls') if ws['resource_id'] in p]
    assert ('DELETE', 'zones/%s/instances/%s' % (ws['location'], ws['resource_id'])) in calls
    assert calls[-1][0] == 'GET'


def test_lost_insert_then_failed_and_lost_deletes(site, cloud):
    """One workspace through the faults of both ends (one create and three destroys keep the file short): a lost
    insert answer gives one instance; a deletion operation DONE with an error fails the destroy with Compute Engine's
    message and leaves the instance; a lost delete answer is finished by the next run."""
    before = cloud.gcp('inserts')
    site.fault('drop', 'POST', r'/instances$', times=1)
    ready(site, 'gce-faults')
    assert len(site.instances('gce-faults')) == 1
    assert cloud.gcp('inserts') - before == 1
    inserts = [q for m, p, q in cloud.gcp('calls') if m == 'POST' and p.endswith('/instances')]
    assert len(inserts) >= 2 and len(set(q['requestId'] for q in inserts[-2:])) == 1

    site.fault('fail_delete', 'DELETE', r'/instances/', times=1, message='Disk detach failed on the host.')
    run = site.destroy('gce-faults')
    assert not run.ok
    assert 'Disk detach failed on the host.' in run.explain()
    assert len(site.instances('gce-faults')) == 1

    # The delete acts and its answer is lost: the run that lost it, or the next one, finishes the destroy.
    deletes = len([c for c in cloud.gcp('calls') if c[0] == 'DELETE'])
    site.fault('drop', 'DELETE', r'/instances/', times=1)
    runs = [site.destroy('gce-faults')]
    if not runs[0].ok:
        runs.append(site.destroy('gce-faults'))
    assert runs[-1].ok, runs[-1].explain()
    assert len([c for c in cloud.gcp('calls') if c[0] == 'DELETE']) > deletes
    ws = site.workspace('gce-faults')
    assert ws['status'] == 'destroyed' and site.debt('gce-faults') == [] and site.instances('gce-faults') == []


@pytest.mark.parametrize('extra, words', [
    ({'ephemera_gcp_zone': 'europe-west9-z'}, 'Zone europe-west9-z does not exist'),
    ({'ephemera_template': 'no-such-image'}, 'no-such-image does not exist'),
    ({'ephemera_gcp_labels': {'Team': 'x'}}, "Label key 'Team' breaks"),
])
def test_bad_input_refused_before_an_instance(site, cloud, extra, words):
    before = cloud.gcp('inserts')
    run = site.create('gce-bad', site.repo, **extra)
    assert not run.ok
    assert words in run.explain()
    assert cloud.gcp('inserts') == before and site.instances('gce-bad') == []


def test_guard_refused_at_create_then_deletes_the_failed_machine(site, cloud):
    """A service account that may not delete its instance: the create refuses (gcp_guard refuse) and says what to
    grant. Once granted, the guard in that machine deletes it (its labels say failed), logging its decision; the
    next destroy finds it gone."""
    cloud.gcp('deny', service_account='default')
    run = site.create('gce-guard', site.repo)
    assert not run.ok
    assert 'cannot delete it when it expires' in run.explain() and guard.PERMISSION in run.explain()
    ws = site.workspace('gce-guard')
    assert ws['status'] == 'failed'
    [instance] = site.instances('gce-guard')
    service = open(os.path.join(instance['root'], 'etc/systemd/system/%s.service' % guard.UNIT_NAME)).read()
    # Its labels say provisioning with a live lease: the guard leaves it.
    code, out = run_service(instance['root'], service)
    assert code == 0 and 'skip (state provisioning' in out, out
    # Time passes (its expiry written 12 hours and more into the past): stale, so the guard would delete it; still
    # denied, the self-delete is refused and said loudly; the machine stays for the next tick.
    provider = site.provider()
    provider.write_labels(provider.find(ws['resource_id']), {'expires_at': '1000'})
    code, out = run_service(instance['root'], service)
    assert code == 1 and 'GUARD FAILED: the self-delete of instance %s was refused' % ws['resource_id'] in out, out
    assert len(site.instances('gce-guard')) == 1
    cloud.clear()
    code, out = run_service(instance['root'], service)
    assert code == 0 and 'delete (state provisioning and stale' in out, out
    assert site.instances('gce-guard') == []
    destroyed(site, 'gce-guard')


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
    import json
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
