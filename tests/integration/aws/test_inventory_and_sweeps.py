"""The inventory, the orphan sweep (reconcile) and the label sweep on AWS, against the try-out cloud (tests/localcloud).

One cloud for the module. One workspace is made by the real create playbook (ready, its guest a real sshd). The
others are what runs leave behind, made through the AWS provider with this controller's secret and recorded in the
journal the way the create and destroy flows record them:

- ``aws-token``: a create whose RunInstances answer was lost and that was destroyed before its instance showed: the
  record is destroyed and holds only the client token (candidate id) and the marker nonce; the instance runs;
- ``aws-byid``: a destroyed record that holds the instance id of an instance still running;
- ``aws-lost``: an instance with a genuine marker and no record at all (a lost journal);
- ``aws-expired``: an instance with a genuine marker, no record, and lease tags that ended long ago.

Besides these, the cloud's seed has the foreign client's instances (untagged, otherwise tagged, and a copy of our
tag keys with a marker no controller made), and a test makes the foreign client copy every tag of our ready
workspace. Everything runs as a real ansible-playbook, ansible-inventory or ansible process.
"""

import json
import os
import subprocess
import time

import pytest

from ansible_collections.ephemera.workspaces.plugins.module_utils.core import ownership
from ansible_collections.ephemera.workspaces.plugins.module_utils.core.journal import Journal
from ansible_collections.ephemera.workspaces.plugins.module_utils.providers.aws.provider import AwsProvider
from ansible_collections.ephemera.workspaces.plugins.module_utils.providers.base import Allocation
from tests.ansible_run import ROOT, run_ansible
from tests.localcloud.fixtures import cloud_process

INVENTORY = os.path.join(ROOT, 'inventories', 'localcloud')
CREATE_TIMEOUT = 240


def _make_repo(path):
    git = ['git', '-c', 'user.email=tests@example.com', '-c', 'user.name=tests', '-C', path]
    subprocess.run(['git', 'init', '-q', '-b', 'main', path], check=True)
    with open(os.path.join(path, 'README'), 'w') as f:
        f.write('aws sweeps\n')
    subprocess.run(git + ['add', 'README'], check=True)
    subprocess.run(git + ['commit', '-q', '-m', 'start'], check=True)


class Site:
    def __init__(self, cloud, base, journal_path):
        self.cloud = cloud
        self.info = cloud.info
        self.base = base
        self.journal_path = journal_path
        self.ids = {}

    def env(self, **more):
        env = dict(LOCALCLOUD_STATE_DIR=self.info['state_dir'], EPHEMERA_JOURNAL=self.journal_path)
        env.update(more)
        return env

    def playbook(self, name, *extra, **options):
        argv = ['ansible-playbook', '-i', INVENTORY, 'ephemera.workspaces.' + name]
        for each in extra:
            argv += ['-e', each if isinstance(each, str) else json.dumps(each)]
        return run_ansible(argv, env=self.env(), timeout=options.get('timeout', 180), fail=False,
                           unset=('PROXMOX_', 'EPHEMERA_', 'AWS_'))

    def states(self):
        """instance id -> the state the cloud shows."""
        return {i['instance_id']: i['state'] for i in self.cloud.instances()}

    def provider(self):
        secret = ownership.load_secret(self.journal_path)
        return AwsProvider.from_params({'aws_region': self.info['region'], 'aws_endpoint_url': self.info['endpoint_url'],
                                        'aws_access_key_id': self.info['access_key_id'],
                                        'aws_secret_access_key': self.info['secret_access_key'],
                                        'aws_key_name': self.info['seed']['key_name']}, secret)


def _launch(provider, seed, name, nonce, labels):
    """An instance of ``name`` launched as the create flow launches it: (client token, instance id)."""
    token = provider.candidate_for(name, 1)
    allocation = Allocation(token, name, seed['image_id'], provider.region, 'agent-' + name, seed['scope'],
                            labels=labels, nonce=nonce)
    handle = provider.allocate(allocation)
    return token, handle.split('/')[3]


@pytest.fixture(scope='module')
def site(tmp_path_factory):
    base = str(tmp_path_factory.mktemp('aws-sweeps'))
    with cloud_process(os.path.join(base, 'cloud')) as cloud:
        yield _site(cloud, base)


def _site(cloud, base):
    journal_path = os.path.join(base, 'journal.sqlite')
    repo = os.path.join(base, 'repo')
    _make_repo(repo)
    s = Site(cloud, base, journal_path)
    run = s.playbook('create', dict(workspace='aws-ready', repo='file://' + repo, ref='main', purpose='sweeps',
                                    agent='tool', ephemera_agents={'tool': ['true']}), timeout=CREATE_TIMEOUT)
    assert run.ok, run.explain()
    provider = s.provider()
    seed = s.info['seed']
    future = {'state': 'ready', 'expires_at': str(int(time.time()) + 3600), 'keep': 'false',
              'created_at': str(int(time.time()))}
    past = dict(future, expires_at=str(int(time.time()) - 7200))
    with Journal.open(journal_path, create=False) as journal:
        s.ids['aws-ready'] = journal.get_workspace('aws-ready')['resource_id']
        region = s.info['region']
        for name, by_id in (('aws-token', False), ('aws-byid', True)):
            nonce = ownership.new_nonce()
            token, instance = _launch(provider, seed, name, nonce, future)
            fields = dict(status='destroyed', desired_state='destroyed', provider='aws', location=region,
                          candidate_id=token, facts={'marker_nonce': nonce}, repo='file://' + repo, ref='main',
                          purpose='left behind', params={'pool': seed['scope']})
            if by_id:
                fields['resource_id'] = instance
            journal.create_workspace(name, **fields)
            s.ids[name] = instance
    s.ids['aws-lost'] = _launch(provider, seed, 'aws-lost', ownership.new_nonce(), future)[1]
    s.ids['aws-expired'] = _launch(provider, seed, 'aws-expired', ownership.new_nonce(), past)[1]
    s.foreign = dict(seed['foreign_instances'])
    return s


def _findings(run):
    result = run.task('Compare the journal with the cluster')
    return {f['vmid']: (f['kind'], f['workspace'], f['detail']) for f in result['findings']}


@pytest.fixture
def inventory(site, tmp_path):  # pylint: disable=redefined-outer-name
    def run(command='ansible-inventory', args=('--list',), **options):
        config = dict(plugin='ephemera.workspaces.workspaces', journal_path=site.journal_path,
                      aws_endpoint_url=site.info['endpoint_url'])
        config.update(options)
        path = str(tmp_path / 'aws.workspaces.yml')
        with open(path, 'w') as f:
            f.write(json.dumps(config))
        env = dict(ANSIBLE_INVENTORY_UNPARSED_FAILED='1', XDG_CACHE_HOME=str(tmp_path / 'cache'),
                   AWS_ACCESS_KEY_ID=site.info['access_key_id'], AWS_SECRET_ACCESS_KEY=site.info['secret_access_key'])
        return run_ansible([command, '-i', path] + list(args), env=env, timeout=120, fail=False, callback=None,
                           unset=('PROXMOX_', 'EPHEMERA_', 'AWS_'))
    return run


def test_the_inventory_shows_aws_hosts_with_their_vars_groups_and_orphans(site, inventory):
    # The listing comes in pages of one instance: the inventory follows every page.
    site.cloud.proxy_add('log', '*', times=None)
    site.cloud.pages(size=1)
    run = inventory()
    assert run.returncode == 0, run.output
    rules = {r['action']: r for r in site.cloud.proxy_rules()}
    site.cloud.clear()
    # One listing of the region, and no read of one instance (each marker came with the listing). The log sees the
    # listing's first request; the pages after it, one instance each, come from the proxy's cut of that listing,
    # which the pages rule took: every host and orphan below is there, so every page was followed.
    hits = rules['log']['hits']
    assert [h['operation'] for h in hits] == ['DescribeInstances'] and not hits[0]['instances'], hits
    assert len(rules['pages']['hits']) == 1
    data = run.data

    def groups(name):
        return sorted(data.get(name, {}).get('hosts', []))
    assert groups('workspaces') == groups('provider_aws') == groups('region_' + site.info['region'].replace('-', '_'))
    assert groups('workspaces') == ['aws-ready'] and groups('status_ready') == ['aws-ready']
    with Journal.open(site.journal_path, create=False, readonly=True) as journal:
        record = journal.get_workspace('aws-ready')
    ready = data['_meta']['hostvars']['aws-ready']
    assert (ready['ephemera_provider'], ready['ephemera_region'], ready['ephemera_instance_id']) == (
        'aws', site.info['region'], site.ids['aws-ready'])
    assert (ready['ephemera_live_status'], ready['ephemera_marker']) == ('running', 'verified')
    assert ready['ephemera_vmid'] is None and ready['ephemera_node'] is None
    assert ready['ansible_host'] == record['address'] and ready['ephemera_address_source'] == 'journal'
    assert 'UserKnownHostsFile=' in ready['ansible_ssh_common_args']
    orphans = {h: data['_meta']['hostvars'][h] for h in groups('orphans')}
    why = {v['ephemera_instance_id']: (v['ephemera_orphan_reason'], v['ephemera_marker'],
                                       v['ephemera_marker_workspace']) for v in orphans.values()}
    assert why == {
        site.ids['aws-token']: ('not_in_journal', 'verified', 'aws-token'),
        site.ids['aws-byid']: ('destroyed_in_journal', 'verified', 'aws-byid'),
        site.ids['aws-lost']: ('not_in_journal', 'verified', 'aws-lost'),
        site.ids['aws-expired']: ('not_in_journal', 'verified', 'aws-expired'),
        # The seed's copy of our tag keys: its marker names a controller that is not this one.
        site.foreign['tag_copy']: ('not_in_journal', 'foreign', 'tag-copy'),
    }
    # Instances without a tag of ours are no hosts at all: the listing is filtered by tag.
    assert all('orphan-' + site.foreign[k] not in data['_meta']['hostvars'] for k in ('untagged', 'other_tags'))
    assert all('ansible_host' not in v for v in orphans.values())
    # Ad hoc over real SSH, host key checked against the key the create flow recorded.
    run = inventory('ansible', ['provider_aws', '-m', 'ansible.builtin.raw', '-a', 'echo $LOCALPVE_VMID'])
    assert run.returncode == 0 and site.ids['aws-ready'] in run.output, run.output


def test_an_incomplete_listing_leaves_the_journals_view_and_strict_makes_it_an_error(site, inventory):
    site.cloud.pages(size=1, repeat_at=2, times=None)
    try:
        run = inventory()
        assert run.returncode == 0, run.output
        assert 'incomplete' in run.output and 'come from the journal alone' in run.output
        data = run.data
        ready = data['_meta']['hostvars']['aws-ready']
        assert ready['ephemera_live_status'] == 'unknown' and ready['ansible_host']
        assert not data.get('orphans', {}).get('hosts')
        run = inventory(strict=True)
        assert run.returncode != 0 and 'incomplete' in run.output
    finally:
        site.cloud.clear()


def test_the_orphan_sweep_reports_everything_and_deletes_only_instances_bound_to_a_destroyed_record(site):
    copy_id = site.cloud.foreign_create(copy_tags_of=site.ids['aws-ready'])['instance_ids'][0]
    before = site.states()
    run = site.playbook('reconcile', {'reconcile_resume_creates': False})
    assert run.ok, run.explain()
    found = _findings(run)
    assert found[site.ids['aws-ready']][0] == 'ok'
    for name in ('aws-token', 'aws-byid'):
        kind, workspace, detail = found[site.ids[name]]
        assert (kind, workspace) == ('destroyed_present', name) and 'orphans=delete' in detail
    assert found[site.ids['aws-lost']][:2] == ('orphan', 'aws-lost')
    assert 'remove instance %s' % site.ids['aws-lost'] in found[site.ids['aws-lost']][2]
    # The report speaks of instances and ids, never of a Proxmox container or VMID.
    assert not [d for dummy, dummy2, d in found.values() if 'container' in d or 'VMID' in d], found
    for foreign in (site.foreign['tag_copy'], copy_id):
        kind, workspace, detail = found[foreign]
        assert (kind, workspace) == ('foreign', None) and 'never touched' in detail, detail
    assert site.foreign['untagged'] not in found and site.foreign['other_tags'] not in found
    after = site.states()  # report mode touches nothing
    assert sorted(after) == sorted(before) and set(after.values()) == {'running'}, after

    # Delete mode on a listing whose pagination token repeats: the pass fails and deletes nothing.
    site.cloud.pages(size=1, repeat_at=2, times=None)
    try:
        run = site.playbook('reconcile', {'reconcile_resume_creates': False, 'ephemera_orphans': 'delete'})
    finally:
        site.cloud.clear()
    assert not run.ok and 'incomplete' in run.output, run.explain()
    assert set(site.states().values()) == {'running'}

    # Delete mode, while EC2 throttles every TerminateInstances: nothing is deleted, and each keeps cleanup debt.
    site.cloud.throttle('TerminateInstances', times=None)
    try:
        run = site.playbook('reconcile', {'reconcile_resume_creates': False, 'ephemera_orphans': 'delete',
                                          'ephemera_aws_retry_timeout': 1})
    finally:
        site.cloud.clear()
    assert run.ok, run.explain()
    found = _findings(run)
    assert [found[site.ids[n]][0] for n in ('aws-token', 'aws-byid')] == ['destroy_blocked', 'destroy_blocked']
    with Journal.open(site.journal_path, create=False, readonly=True) as journal:
        debts = sorted(d['workspace'] for d in journal.cleanup_debts())
    assert debts == ['aws-byid', 'aws-token']
    assert all(site.states()[site.ids[n]] == 'running' for n in ('aws-token', 'aws-byid'))

    run = site.playbook('reconcile', {'reconcile_resume_creates': False, 'ephemera_orphans': 'delete'})
    assert run.ok, run.explain()
    found = _findings(run)
    assert [found[site.ids[n]][0] for n in ('aws-token', 'aws-byid')] == ['orphan_deleted', 'orphan_deleted']
    states = site.states()
    assert [states.get(site.ids[n]) for n in ('aws-token', 'aws-byid')] == ['terminated', 'terminated']
    # Everything else is as it was: ours without a record, the tag copies, the foreign client's, the workspace.
    for kept in (site.ids['aws-ready'], site.ids['aws-lost'], site.ids['aws-expired'], copy_id,
                 site.foreign['tag_copy'], site.foreign['untagged'], site.foreign['other_tags']):
        assert states[kept] == 'running', kept
    with Journal.open(site.journal_path, create=False, readonly=True) as journal:
        assert journal.cleanup_debts() == []
        actions = [e['action'] for e in journal.events('aws-token')]
    # The throttled attempt and the one that worked, each recorded under the workspace.
    assert actions.count('orphan_delete') == 2 and 'orphan_delete_failed' in actions
    assert 'orphan_deleted' in actions[actions.index('orphan_delete_failed'):]


def test_the_label_sweep_works_on_aws_tags(site):
    run = site.playbook('cleanup')
    assert run.ok, run.explain()
    result = run.task('Sweep the pool by labels')
    entries = {e['id']: e for e in result['entries']}
    assert entries[site.ids['aws-expired']]['action'] == 'would delete'
    assert entries[site.ids['aws-ready']]['action'] == 'skipped'  # its lease runs
    assert entries[site.ids['aws-lost']]['action'] == 'skipped'
    assert entries[site.foreign['tag_copy']]['verdict'] == 'foreign'
    assert entries[site.foreign['tag_copy']]['action'] in ('reported', 'skipped')
    assert site.states()[site.ids['aws-expired']] == 'running'

    # A listing that cannot be read whole: the sweep fails and deletes nothing.
    site.cloud.pages(size=1, fail_at=2, times=None)
    try:
        run = site.playbook('cleanup', {'apply': True, 'ephemera_aws_retry_timeout': 1})
    finally:
        site.cloud.clear()
    assert not run.ok and 'incomplete' in run.output, run.explain()
    assert site.states()[site.ids['aws-expired']] == 'running'

    run = site.playbook('cleanup', {'apply': True})
    assert run.ok, run.explain()
    entries = {e['id']: e for e in run.task('Sweep the pool by labels')['entries']}
    assert entries[site.ids['aws-expired']]['action'] == 'deleted'
    assert [e for e in entries.values() if e['action'] == 'deleted'] == [entries[site.ids['aws-expired']]]
    states = site.states()
    assert states[site.ids['aws-expired']] == 'terminated'
    assert states[site.ids['aws-ready']] == states[site.ids['aws-lost']] == states[site.foreign['tag_copy']] == (
        'running')
