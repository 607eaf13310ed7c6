"""The inventory, the orphan sweep (reconcile) and the cleanup sweep on Azure, against the try-out cloud's ARM fake.
One cloud for the file.

One workspace is made by the real create playbook (ready, its guest a real sshd). The others are what runs leave
behind, made through the Azure provider with this controller's secret and recorded in the journal the way the create
and destroy flows record them:

- ``az-bound`` and ``az-shifty``: sets whose workspaces the journal holds as destroyed (their records name the set
  and its VM), still standing, their leases over: left behind;
- ``az-lost``: a set with a genuine marker and no record at all (a lost journal);

and the foreign principal's groups, with tags of ours that prove nothing: ``their-set`` (a public IP and a NIC
that say they are a set, without a marker) and a copy of az-lost's tags, marker included, on resources named as
another set. Everything runs as a real ansible-playbook, ansible-inventory or ansible process.
"""

import json
import os
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from ansible_collections.ephemera.workspaces.plugins.module_utils.core import ownership
from ansible_collections.ephemera.workspaces.plugins.module_utils.core.journal import Journal
from ansible_collections.ephemera.workspaces.plugins.module_utils.providers.azure import members as azset
from ansible_collections.ephemera.workspaces.plugins.module_utils.providers.base import Allocation
from tests.ansible_run import ROOT, Run, run_ansible

INVENTORY = os.path.join(ROOT, 'inventories', 'localcloud-azure')
AGENTS = {'fake': ['sh', '-c', 'echo "working on: {purpose}"; sleep 120']}
GRACE = 4
UNSET = ('PROXMOX_', 'EPHEMERA_', 'AZURE_', 'AWS_')

pytestmark = pytest.mark.usefixtures('clean_cloud')


def _make_repo(path):
    git = ['git', '-c', 'user.email=tests@example.com', '-c', 'user.name=tests', '-C', path]
    subprocess.run(['git', 'init', '-q', '-b', 'main', path], check=True)
    with open(os.path.join(path, 'README'), 'w') as f:
        f.write('azure sweeps\n')
    subprocess.run(git + ['add', 'README'], check=True)
    subprocess.run(git + ['commit', '-q', '-m', 'start'], check=True)
    return 'file://' + path


class Site:
    def __init__(self, cloud, directory):
        self.cloud = cloud
        self.az = cloud.info['azure']
        self.seed = self.az['seed']
        self.directory = str(directory)
        self.journal_path = os.path.join(self.directory, 'journal.sqlite')
        self.bases = {}
        self.vm_ids = {}
        self.foreign = []

    def env(self):
        return dict(LOCALCLOUD_STATE_DIR=self.cloud.info['state_dir'], EPHEMERA_JOURNAL=self.journal_path)

    def playbook(self, name, start=False, **extra):
        argv = ['ansible-playbook', '-i', INVENTORY, 'ephemera.workspaces.' + name, '-e', json.dumps(extra)]
        if start:
            return Run.start(argv, env=self.env(), unset=UNSET)
        return run_ansible(argv, env=self.env(), timeout=300, fail=False, unset=UNSET)

    def provider(self):
        from ansible_collections.ephemera.workspaces.plugins.module_utils.providers.azure.provider import AzureProvider
        return AzureProvider.from_params({
            'azure_subscription_id': self.az['subscription_id'], 'azure_tenant_id': self.az['tenant_id'],
            'azure_client_id': self.az['client_id'], 'azure_client_secret': self.az['client_secret'],
            'azure_authority_host': self.az['authority_host'], 'azure_endpoint_url': self.az['resource_manager_url'],
            'azure_ca_file': self.az['ca_file'], 'azure_resource_group': self.seed['resource_group'],
            'azure_location': self.seed['location'], 'azure_subnet_id': self.seed['subnet_id'],
            'azure_vm_size': self.seed['vm_size'], 'azure_ssh_public_key': self.cloud.info['ssh_public_key'],
            'journal_path': self.journal_path, 'azure_lost_answer_window': 5}, ownership.load_secret(self.journal_path))

    def resources(self):
        """(kind, name, id, identity, sorted tags) of everything the fake holds."""
        return sorted((r['kind'], r['name'], r['id'], r.get('identity'), sorted(r['tags'].items()))
                      for r in self.cloud.azure('resources'))

    def names(self):
        return set(r['name'] for r in self.cloud.azure('resources'))

    def members(self, name):
        return set(self.bases[name] + suffix for suffix in ('-vm', '-nic', '-pip', '-osdisk'))

    def quarantine(self):
        with Journal.open(self.journal_path, create=False, readonly=True) as journal:
            return {key.rsplit('/', 1)[1]: value
                    for key, value, generation in journal.provider_states(azset.QUARANTINE_PREFIX)}


def _leave_set(site, provider, name, labels, record):
    """A set of workspace ``name`` made as the create flow makes one; with ``record`` the journal holds the workspace
    as destroyed, naming the set (candidate id) and its VM (resource id)."""
    nonce = ownership.new_nonce()
    base = provider.candidate_for(name, '%s-%s' % (name, time.time()))
    allocation = Allocation(base, name, provider.resolve_source(site.seed['image_urn']), site.seed['location'],
                            'agent-' + name, 'disposable-workspaces', labels=labels, nonce=nonce)
    assert provider.wait(provider.allocate(allocation), 120).succeeded
    site.bases[name] = base
    site.vm_ids[name] = provider.resource_of(base, None)
    if record:
        with Journal.open(site.journal_path, create=False) as journal:
            journal.create_workspace(
                name, status='destroyed', desired_state='destroyed', provider='azure', location=site.seed['location'],
                candidate_id=base, resource_id=site.vm_ids[name], facts={'marker_nonce': nonce}, repo='file:///nowhere',
                ref='main', purpose='left behind', params={'pool': 'disposable-workspaces', 'launch': {
                    'resource_group': site.seed['resource_group'], 'location': site.seed['location']}})


@pytest.fixture(scope='module')
def site(localcloud, tmp_path_factory):
    s = Site(localcloud, tmp_path_factory.mktemp('azure-sweeps'))
    repo = _make_repo(os.path.join(s.directory, 'repo'))
    # The journal and its secret first, then the real create beside the sets left behind, made at the same time.
    with Journal.open(s.journal_path):
        ownership.load_secret(s.journal_path)
    create = s.playbook('create', workspace='az-ready', repo=repo, ref='main', purpose='sweeps', agent='fake',
                        ephemera_agents=AGENTS, start=True)
    now = int(time.time())
    over = {'state': 'ready', 'expires_at': str(now - 7200), 'keep': 'false', 'created_at': str(now - 9000)}
    with ThreadPoolExecutor(max_workers=3) as pool:
        for done in [pool.submit(_leave_set, s, s.provider(), name, over, record)
                     for name, record in (('az-bound', True), ('az-shifty', True), ('az-lost', False))]:
            done.result()
    create.wait(300, fail=False)
    assert create.ok, create.explain()
    with Journal.open(s.journal_path, create=False) as journal:
        ready = journal.get_workspace('az-ready')
    s.bases['az-ready'], s.vm_ids['az-ready'] = ready['candidate_id'], ready['resource_id']
    # The foreign principal's: a public IP and a NIC that say they are a set, with no marker; and a copy of az-lost's
    # tags, its genuine marker included, on resources named as another set.
    tags = {'ephemera:set': 'their-set-0a1b2c3d', 'ephemera:workspace': 'theirs', 'ephemera:marker': 'no marker'}
    pip = localcloud.azure('foreign_create', kind='pip', name='their-set-0a1b2c3d-pip',
                           tags=dict(tags, **{'ephemera:member': 'pip'}))
    nic = localcloud.azure('foreign_create', kind='nic', name='their-set-0a1b2c3d-nic', attach_to=pip['id'],
                           tags=dict(tags, **{'ephemera:member': 'nic'}))
    lost = {r['kind']: r for r in localcloud.azure('resources') if r['name'].startswith(s.bases['az-lost'])}
    copies = []
    for kind in ('pip', 'disk'):
        copied = dict(lost[kind]['tags'], **{'ephemera:set': 'copy-5e5e5e5e'})
        copies.append(localcloud.azure('foreign_create', kind=kind, name='copy-5e5e5e5e-' + kind, tags=copied))
    s.foreign = [pip['id'], nic['id']] + [c['id'] for c in copies]
    return s


@pytest.fixture
def inventory(site, tmp_path):  # pylint: disable=redefined-outer-name
    def run(command='ansible-inventory', args=('--list',), **options):
        config = dict(plugin='ephemera.workspaces.workspaces', journal_path=site.journal_path)
        config.update(options)
        path = str(tmp_path / 'azure.workspaces.yml')
        with open(path, 'w') as f:
            f.write(json.dumps(config))
        az = site.az
        env = dict(ANSIBLE_INVENTORY_UNPARSED_FAILED='1', XDG_CACHE_HOME=str(tmp_path / 'cache'),
                   AZURE_SUBSCRIPTION_ID=az['subscription_id'], AZURE_TENANT_ID=az['tenant_id'],
                   AZURE_CLIENT_ID=az['client_id'], AZURE_CLIENT_SECRET=az['client_secret'],
                   AZURE_AUTHORITY_HOST=az['authority_host'], EPHEMERA_AZURE_ENDPOINT_URL=az['resource_manager_url'],
                   EPHEMERA_AZURE_CA_FILE=az['ca_file'])
        return run_ansible([command, '-i', path] + list(args), env=env, timeout=120, fail=False, callback=None,
                           unset=UNSET)
    return run


def _findings(run):
    result = run.task('Compare the journal with the cluster')
    return {f['vmid']: (f['kind'], f['workspace'], f['detail']) for f in result['findings']}


def test_the_inventory_lists_azure_workspaces_and_orphan_sets_with_why(site, inventory):
    site.cloud.azure('rule', action='log', operation='*', times=None)
    run = inventory()
    logged = [h['operation'] for r in site.cloud.azure('rules') if r['action'] == 'log' for h in r['hits']
              if h['operation'] != 'Token']
    site.cloud.azure('clear')
    assert run.returncode == 0, run.output
    # One listing of each of the four member types of the resource group; no read of one set.
    assert sorted(logged) == ['Disks_List', 'NetworkInterfaces_List', 'PublicIPAddresses_List',
                              'VirtualMachines_List'], logged
    data = run.data

    def hosts(group):
        return sorted(data.get(group, {}).get('hosts', []))
    assert hosts('workspaces') == hosts('provider_azure') == hosts('region_westeurope') == ['az-ready']
    with Journal.open(site.journal_path, create=False, readonly=True) as journal:
        record = journal.get_workspace('az-ready')
    ready = data['_meta']['hostvars']['az-ready']
    assert (ready['ephemera_provider'], ready['ephemera_location'], ready['ephemera_resource_group'],
            ready['ephemera_instance_id']) == ('azure', 'westeurope', 'workspaces', site.vm_ids['az-ready'])
    assert (ready['ephemera_live_status'], ready['ephemera_marker']) == ('complete', 'verified')
    assert ready['ansible_host'] == record['address'] and 'UserKnownHostsFile=' in ready['ansible_ssh_common_args']
    orphans = {h: data['_meta']['hostvars'][h] for h in hosts('orphans')}
    why = {v['ephemera_set']: (v['ephemera_orphan_reason'], v['ephemera_marker'], v['ephemera_set_status'])
           for v in orphans.values()}
    assert why == {
        site.bases['az-bound']: ('destroyed_in_journal', 'verified', 'complete'),
        site.bases['az-shifty']: ('destroyed_in_journal', 'verified', 'complete'),
        site.bases['az-lost']: ('not_in_journal', 'verified', 'complete'),
        'their-set-0a1b2c3d': ('not_in_journal', 'absent', 'incomplete'),
        # A genuine marker, of another set: the copy proves nothing.
        'copy-5e5e5e5e': ('not_in_journal', 'mismatch', 'incomplete'),
    }, why
    assert orphans['orphan-workspaces-their-set-0a1b2c3d']['ephemera_members'] == ['nic', 'pip']
    assert 'incomplete' in orphans['orphan-workspaces-copy-5e5e5e5e']['ephemera_set_problem']
    assert all('ansible_host' not in v for v in orphans.values())
    # Ad hoc over real SSH, the host key checked against the one the create flow recorded.
    run = inventory('ansible', ['provider_azure', '-m', 'ansible.builtin.raw', '-a', 'echo reached'])
    assert run.returncode == 0 and 'reached' in run.output, run.output


def test_an_incomplete_listing_leaves_the_journals_view_and_strict_makes_it_an_error(site, inventory):
    site.cloud.azure('rule', action='pages', operation='Disks_List', size=1, fail_at=2, times=None)
    try:
        run = inventory()
        assert run.returncode == 0, run.output
        assert 'incomplete' in run.output and 'come from the journal alone' in run.output
        data = run.data
        ready = data['_meta']['hostvars']['az-ready']
        assert ready['ephemera_live_status'] == 'unknown' and ready['ansible_host']
        assert not data.get('orphans', {}).get('hosts')
        run = inventory(strict=True)
        assert run.returncode != 0 and 'incomplete' in run.output
    finally:
        site.cloud.azure('clear')


def test_report_mode_lists_every_group_with_its_verdict_and_touches_nothing(site):
    before = site.resources()
    run = site.playbook('reconcile', reconcile_resume_creates=False)
    assert run.ok, run.explain()
    found = _findings(run)
    assert found[site.vm_ids['az-ready']][0] == 'ok'
    for name in ('az-bound', 'az-shifty'):
        kind, workspace, detail = found[site.vm_ids[name]]
        assert (kind, workspace) == ('destroyed_present', name)
        assert 'orphan sweep: quarantined' in detail and 'counted no inventory' in detail, detail
    kind, workspace, detail = found[site.vm_ids['az-lost']]
    assert (kind, workspace) == ('orphan', 'az-lost')
    assert 'report-only' in detail and 'bound to no retained record' in detail, detail
    for base, words in (('their-set-0a1b2c3d', 'incomplete'), ('copy-5e5e5e5e', 'incomplete')):
        kind, workspace, detail = found[base]
        assert (kind, workspace) == ('foreign', None) and 'report-only' in detail and words in detail, detail
    assert 'absent' in found['their-set-0a1b2c3d'][2] and 'mismatch' in found['copy-5e5e5e5e'][2]
    assert site.resources() == before
    assert site.quarantine() == {}


def test_delete_mode_quarantines_then_deletes_only_the_bound_group_that_stayed_the_same(site):
    run = site.playbook('reconcile', reconcile_resume_creates=False, ephemera_orphans='delete',
                        ephemera_azure_orphan_grace=GRACE)
    assert run.ok, run.explain()
    found = _findings(run)
    for name in ('az-bound', 'az-shifty'):
        assert found[site.vm_ids[name]][0] == 'destroyed_present'
        assert '1 of 2 inventories' in found[site.vm_ids[name]][2]
    held = site.quarantine()
    assert sorted(held) == sorted([site.bases['az-bound'], site.bases['az-shifty']])
    assert all(v['inventories'] == 1 for v in held.values())
    assert site.members('az-bound') | site.members('az-shifty') <= site.names()  # nothing deleted yet

    # Behind our back, a tag on az-shifty's NIC changes during its quarantine.
    shifty_nic = [r for r in site.cloud.azure('resources') if r['name'] == site.bases['az-shifty'] + '-nic'][0]
    site.cloud.azure('change', resource=shifty_nic['id'], tags={'note': 'moved by someone'})
    time.sleep(max(0.0, max(v['since'] for v in held.values()) + GRACE - time.time()) + 0.5)
    others = [r for r in site.resources() if not r[1].startswith(site.bases['az-bound'])]
    site.cloud.azure('rule', action='log', operation='*', times=None)
    run = site.playbook('reconcile', reconcile_resume_creates=False, ephemera_orphans='delete',
                        ephemera_azure_orphan_grace=GRACE)
    hits = [h for r in site.cloud.azure('rules') if r['action'] == 'log' for h in r['hits']]
    site.cloud.azure('clear')
    assert run.ok, run.explain()
    found = _findings(run)
    assert found[site.vm_ids['az-bound']][0] == 'orphan_deleted', found[site.vm_ids['az-bound']]
    kind, workspace, detail = found[site.vm_ids['az-shifty']]
    assert kind == 'destroyed_present' and 'started again' in detail and '1 of 2 inventories' in detail, detail
    # az-bound's four members are gone, one at a time in the release's order; nothing else changed at all.
    assert not site.members('az-bound') & site.names()
    assert [r for r in site.resources() if not r[1].startswith(site.bases['az-bound'])] == others
    acting = [(h['operation'], h['names'][0]) for h in hits
              if not h['operation'].endswith(('_Get', '_List', '_InstanceView')) and 'Operation' not in h['operation']
              and h['operation'] != 'Token']
    deletes = [op for op, name in acting if op.endswith('_Delete')]
    # Each member once, or again after an in-use answer: the order is the release's.
    assert [op for i, op in enumerate(deletes) if i == 0 or deletes[i - 1] != op] == [
        'VirtualMachines_Delete', 'NetworkInterfaces_Delete', 'PublicIPAddresses_Delete', 'Disks_Delete'], acting
    assert all(name.startswith(site.bases['az-bound']) for op, name in acting), acting
    held = site.quarantine()
    assert list(held) == [site.bases['az-shifty']] and held[site.bases['az-shifty']]['inventories'] == 1
    with Journal.open(site.journal_path, create=False, readonly=True) as journal:
        actions = [e['action'] for e in journal.events('az-bound')]
        assert journal.cleanup_debts() == []
    assert 'orphan_delete' in actions and 'orphan_deleted' in actions

    # A listing that breaks off counts as no inventory: the pass fails, nothing is deleted, nothing counted.
    site.cloud.azure('rule', action='pages', operation='NetworkInterfaces_List', size=1, fail_at=2, times=None)
    try:
        run = site.playbook('reconcile', reconcile_resume_creates=False, ephemera_orphans='delete',
                            ephemera_azure_orphan_grace=0)
    finally:
        site.cloud.azure('clear')
    assert not run.ok and 'incomplete' in run.output, run.explain()
    assert site.quarantine() == held and site.members('az-shifty') <= site.names()


def test_the_cleanup_sweep_deletes_an_expired_set_only_once_its_quarantine_passed(site):
    before = site.resources()
    run = site.playbook('cleanup')
    assert run.ok, run.explain()
    entries = {e['id']: e for e in run.task('Sweep the pool by labels')['entries']}
    shifty = entries[site.vm_ids['az-shifty']]
    assert shifty['action'] == 'reported' and 'orphan sweep: quarantined' in shifty['reason'], shifty
    assert entries[site.vm_ids['az-lost']]['action'] == 'reported'
    assert 'bound to no retained record' in entries[site.vm_ids['az-lost']]['reason']
    assert entries[site.vm_ids['az-ready']]['action'] == 'skipped'  # its lease runs
    assert site.resources() == before

    held = site.quarantine()[site.bases['az-shifty']]
    time.sleep(max(0.0, held['since'] + GRACE - time.time()) + 0.5)
    run = site.playbook('cleanup', apply=True, ephemera_azure_orphan_grace=GRACE)
    assert run.ok, run.explain()
    entries = {e['id']: e for e in run.task('Sweep the pool by labels')['entries']}
    assert entries[site.vm_ids['az-shifty']]['action'] == 'deleted', entries[site.vm_ids['az-shifty']]
    assert [e['id'] for e in entries.values() if e['action'] == 'deleted'] == [site.vm_ids['az-shifty']]
    assert not site.members('az-shifty') & site.names()
    assert site.members('az-lost') | site.members('az-ready') <= site.names()
    assert set(site.foreign) <= set(r[2] for r in site.resources())
    assert site.quarantine() == {}
