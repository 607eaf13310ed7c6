"""The shipped playbooks with provider azure on the try-out cloud's ARM fake (inventories/localcloud-azure): a
workspace created to ready on a VM with its NIC, public IP and OS disk, and destroyed with each of the four
confirmed gone; each set's progress in the journal (one of them on a real PostgreSQL server). One cloud for the
file."""

import json
import os
import secrets

import pytest

from tests import pgserver
from tests.ansible_run import run_ansible

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
INVENTORY = os.path.join(ROOT, 'inventories', 'localcloud-azure')
AGENTS = {'fake': ['sh', '-c', 'echo "working on: {purpose}"; sleep 120']}

pytestmark = pytest.mark.usefixtures('clean_cloud')
pg_server = pgserver.pg_server


class Site:
    def __init__(self, cloud, directory, url=None):
        self.cloud = cloud
        self.directory = str(directory)
        self.journal_path = os.path.join(self.directory, 'journal.sqlite')
        self.url = url
        self.controller_secret = secrets.token_hex(32)

    def playbook(self, name, fail=True, **extra):
        env = dict(LOCALCLOUD_STATE_DIR=self.cloud.info['state_dir'], EPHEMERA_JOURNAL=self.journal_path)
        if self.url:
            # The journal in PostgreSQL: no file beside it, the controller secret given.
            extra = dict(extra, ephemera_journal_url=self.url, ephemera_controller_secret=self.controller_secret)
        return run_ansible(['ansible-playbook', '-i', INVENTORY, os.path.join(ROOT, 'playbooks', name), '-e',
                            json.dumps(extra)], timeout=300, env=env, fail=fail)

    def journal(self):
        from ansible_collections.ephemera.workspaces.plugins.module_utils.core.journal import Journal
        if self.url:
            return Journal.open(url=self.url, create=False)
        return Journal.open(self.journal_path, create=False)

    def workspace(self, name):
        with self.journal() as journal:
            return journal.get_workspace(name)

    def set_record(self, name):
        """The set's record the journal holds for workspace ``name`` (its candidate's base)."""
        with self.journal() as journal:
            held = journal.provider_state('azure/set/' + journal.get_workspace(name)['candidate_id'])
        return held[0] if held else None

    def resources(self, workspace):
        return sorted(r['name'] for r in self.cloud.azure('resources')
                      if (r.get('tags') or {}).get('ephemera:workspace') == workspace)


@pytest.fixture(scope='module')
def site(localcloud, tmp_path_factory):
    return Site(localcloud, tmp_path_factory.mktemp('azure-site'))


def make_repo(directory):
    import subprocess
    repo = os.path.join(str(directory), 'repo')
    subprocess.run(['git', 'init', '-q', '-b', 'main', repo], check=True)
    with open(os.path.join(repo, 'a.txt'), 'w') as fh:
        fh.write('a\n')
    subprocess.run(['git', '-C', repo, 'add', 'a.txt'], check=True)
    subprocess.run(['git', '-C', repo, '-c', 'user.name=t', '-c', 'user.email=t@example.invalid', 'commit', '-qm',
                    'a'], check=True)
    return 'file://' + repo


@pytest.fixture(scope='module')
def pg_site(localcloud, pg_server, tmp_path_factory):
    url = pg_server.new_database('azure_playbooks')
    # The journal is started in the new database as a first run does it (a create does not, unless told).
    from ansible_collections.ephemera.workspaces.plugins.module_utils.core.journal import Journal
    Journal.open(url=url, create=True).close()
    return Site(localcloud, tmp_path_factory.mktemp('azure-pg-site'), url=url)


def test_create_to_ready_and_a_destroy_interrupted_between_two_deletions_on_postgresql(pg_site, tmp_path):
    site = pg_site
    foreign = site.cloud.azure('foreign_create', kind='pip', name='their-pip-1')
    repo = make_repo(tmp_path)
    site.playbook('create.yml', workspace='az1', repo=repo, purpose='work on az1', agent='fake', ephemera_agents=AGENTS)
    ws = site.workspace('az1')
    assert ws['status'] == 'ready' and ws['provider'] == 'azure'
    assert '/providers/microsoft.compute/virtualmachines/az1-' in ws['resource_id'].lower()
    assert len(site.resources('az1')) == 4
    # The set's progress is in the PostgreSQL journal: its ids, its binding; no file was made for a journal.
    record = site.set_record('az1')
    assert sorted(record['ids']) == ['disk', 'nic', 'pip', 'vm'] and record['ids']['vm'] == ws['resource_id']
    assert record['binding']['vm_id'] == ws['resource_id'] and not record['claims']
    assert not os.path.exists(site.journal_path)
    # A management lock on the VM: ARM answers 409 ScopeLocked, which no wait ends. The destroy stops at once and
    # says to remove the lock; nothing was deleted.
    site.cloud.azure('rule', action='error', operation='VirtualMachines_Delete', times=None, status=409,
                     code='ScopeLocked', message="The scope 'az1' cannot perform delete operation because "
                                                 "following scope(s) are locked: 'az1'.")
    locked = site.playbook('destroy.yml', workspace='az1', fail=False)
    assert locked.returncode != 0 and 'remove it (az lock list, az lock delete)' in locked.stdout, locked.stdout
    # Asked once, not again and again until a timeout.
    [rule] = site.cloud.azure('rules')
    assert len(rule['hits']) == 1 and len(site.resources('az1')) == 4, rule['hits']
    site.cloud.azure('clear')
    # The connection drops on the NIC's DELETE (after the VM's was confirmed): the run stops there.
    site.cloud.azure('rule', action='reset', operation='NetworkInterfaces_Delete', times=4)
    first = site.playbook('destroy.yml', workspace='az1', fail=False)
    assert first.returncode != 0
    assert [n.rsplit('-', 1)[1] for n in site.resources('az1')] == ['nic', 'osdisk', 'pip']
    # The VM's owned-delete claim is in the journal, the NIC's is not.
    assert sorted(site.set_record('az1')['claims']) == ['vm']
    site.cloud.azure('clear')
    site.playbook('destroy.yml', workspace='az1')
    assert site.resources('az1') == []
    assert site.workspace('az1')['status'] == 'destroyed'
    assert sorted(site.set_record('az1')['claims']) == ['disk', 'nic', 'pip', 'vm']
    assert [r for r in site.cloud.azure('resources') if r['id'] == foreign['id']]
    assert not os.path.exists(site.journal_path)


def test_a_create_interrupted_between_the_nic_and_the_vm_converges_with_nothing_leaked(site, tmp_path):
    repo = make_repo(tmp_path)
    # The VM's PUT never gets an answer (the fake cuts the connection): the set stops after its NIC.
    site.cloud.azure('rule', action='reset', operation='VirtualMachines_CreateOrUpdate', times=10)
    failed = site.playbook('create.yml', workspace='az2', repo=repo, purpose='work on az2', agent='fake',
                           ephemera_agents=AGENTS, ephemera_azure_lost_answer_window=3, fail=False)
    assert failed.returncode != 0
    site.cloud.azure('clear')
    # A create that failed before its checkout holds no work: the destroy needs no discard_unsaved_work. The VM's
    # PUT was recorded and never seen: the destroy reads it again through the same (short) lost-answer window.
    done = site.playbook('destroy.yml', workspace='az2', ephemera_azure_lost_answer_window=3)
    assert 'clone: adopted' in failed.stdout and 'delete: Azure set' in done.stdout
    assert 'az2 never got a checkout, so it holds no work' in done.stdout and 'container' not in done.stdout
    assert site.resources('az2') == []
    # The set's record in the SQLite journal: the prefix (public IP and NIC) adopted and each claimed.
    record = site.set_record('az2')
    assert sorted(record['claims']) == ['nic', 'pip'] and 'vm' in record['dispatched']


def test_a_workspace_from_a_managed_image_of_your_own_and_a_missing_one_refused_before_anything_is_made(
        site, tmp_path):
    import time
    from ansible_collections.ephemera.workspaces.plugins.module_utils.providers.azure import client as azclient
    az = site.cloud.info['azure']
    arm = azclient.Arm.connect(az['subscription_id'], az['tenant_id'], az['client_id'], az['client_secret'],
                               authority=az['authority_host'], endpoint=az['resource_manager_url'],
                               ca_file=az['ca_file'], retry_total=0)
    version = azclient.API_VERSIONS['compute']
    repo = make_repo(tmp_path)
    site.playbook('create.yml', workspace='az-seed', repo=repo, purpose='the seed', agent='fake',
                  ephemera_agents=AGENTS)
    seed = site.workspace('az-seed')['resource_id']
    # docs/quickstart-azure.md's capture: deallocate, generalize, az image create --source <the VM>.
    arm.send('POST', seed + '/deallocate', version, acts=True)
    arm.send('POST', seed + '/generalize', version, acts=True)
    image_id = seed.split('/providers/')[0] + '/providers/Microsoft.Compute/images/agents-1'
    arm.send('PUT', image_id, version, body={'location': az['seed']['location'],
                                             'properties': {'sourceVirtualMachine': {'id': seed}}}, acts=True)
    deadline = time.time() + 30
    while arm.get(image_id, version)['properties']['provisioningState'] != 'Succeeded' and time.time() < deadline:
        time.sleep(0.2)

    site.playbook('create.yml', workspace='az-img', repo=repo, purpose='from my image', agent='fake',
                  ephemera_agents=AGENTS, ephemera_template=image_id)
    ws = site.workspace('az-img')
    assert ws['status'] == 'ready' and len(site.resources('az-img')) == 4
    vm = arm.get(ws['resource_id'], version)
    assert vm['properties']['storageProfile']['imageReference'] == {'id': image_id}

    # An image that is not there: refused at the preflight, with the command that lists the images; nothing made.
    missing = image_id.rsplit('/', 1)[0] + '/nosuch'
    before = sorted(r['id'] for r in site.cloud.azure('resources'))
    refused = site.playbook('create.yml', workspace='az-noimg', repo=repo, purpose='x', agent='fake',
                            ephemera_agents=AGENTS, ephemera_template=missing, fail=False)
    assert refused.returncode != 0
    assert 'Managed image %s' % missing in refused.output and 'az image list' in refused.output, refused.output[-3000:]
    assert sorted(r['id'] for r in site.cloud.azure('resources')) == before
    # A gallery image's id is named as such, with what to give instead.
    gallery = image_id.rsplit('/images/', 1)[0] + '/galleries/g/images/d/versions/1.0.0'
    refused = site.playbook('create.yml', workspace='az-gallery', repo=repo, purpose='x', agent='fake',
                            ephemera_agents=AGENTS, ephemera_template=gallery, fail=False)
    assert refused.returncode != 0 and 'compute gallery are not taken yet' in refused.output, refused.output[-3000:]
    assert sorted(r['id'] for r in site.cloud.azure('resources')) == before

    site.playbook('destroy.yml', workspace='az-img')
    # The seed, deallocated for its capture, cannot be looked into for unsaved work: its destroy says so.
    done = site.playbook('destroy.yml', workspace='az-seed', discard_unsaved_work=True)
    for name in ('az-img', 'az-seed'):
        assert site.resources(name) == [], done.stdout[-4000:]
    # The image is the user's: a destroy never touches it.
    assert arm.get(image_id, version)['properties']['provisioningState'] == 'Succeeded'
    arm.send('DELETE', image_id, version, acts=True)
