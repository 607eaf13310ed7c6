"""A provider added as one package (tests/providerkit/folder) and one line of the registry, run through the shipped
playbooks: create to ready, destroy, a create killed before its start that the reconcile finishes, and the expiry
sweep releasing an idle workspace. Its machines are directories of a folder that the try-out cloud gives SSH guests
(tests/localcloud/folder_site.py). The collection the playbooks find is this checkout with the provider added
(tests/providerkit.install): the test first checks that nothing else of it differs."""

import filecmp
import json
import os
import time

import pytest

from ansible_collections.ephemera.workspaces.plugins.module_utils.core import lease as leasing
from ansible_collections.ephemera.workspaces.plugins.module_utils.core import ownership
from ansible_collections.ephemera.workspaces.plugins.module_utils.core.journal import Journal
from tests import providerkit
from tests.ansible_run import run_ansible
from tests.integration.playbooks import FAKE_AGENTS, PLAYBOOKS, make_repo

DONE_AGENTS = {'fake': ['sh', '-c', 'echo done']}


class FolderSite:
    """One controller (a journal) running the shipped playbooks on the folder provider, through the collection with
    the provider installed."""

    def __init__(self, cloud, directory):
        self.cloud = cloud
        self.info = cloud.info['folder']
        self.directory = str(directory)
        self.journal_path = os.path.join(self.directory, 'journal.sqlite')
        self.collections = providerkit.install(os.path.join(self.directory, 'collections'))
        self.repo = make_repo(os.path.join(self.directory, 'repo'))
        info = cloud.info
        self.inventory = os.path.join(self.directory, 'hosts.json')
        variables = {
            'ansible_connection': 'local', 'ansible_python_interpreter': '{{ ansible_playbook_python }}',
            'ephemera_journal_path': self.journal_path, 'ephemera_provider': 'folder',
            'ephemera_folder_path': self.info['path'], 'ephemera_folder_ssh_public_key': self.info['ssh_public_key'],
            'ephemera_template': self.info['image'], 'ephemera_pool': 'disposable-workspaces',
            'ephemera_guest_root': self.info['guest_prefix'], 'ephemera_ssh_user': info['ssh_user'],
            'ephemera_ssh_port': info['ssh_port'], 'ephemera_ssh_private_key': info['ssh_private_key'],
            'ephemera_agent_user': info['agent_user'], 'ephemera_agent_user_is_ssh_user': True}
        with open(self.inventory, 'w', encoding='utf-8') as out:
            json.dump({'all': {'hosts': {'localhost': variables}}}, out)

    def playbook(self, playbook, env=None, timeout=300, **extra_vars):
        cmd = ['ansible-playbook', '-i', self.inventory, os.path.join(PLAYBOOKS, playbook),
               '-e', json.dumps(extra_vars)]
        return run_ansible(cmd, timeout=timeout, env=env, pin=self.collections)

    def create(self, workspace, env=None, **extra):
        values = dict(workspace=workspace, repo=self.repo, purpose='work on %s' % workspace, agent='fake',
                      ephemera_agents=FAKE_AGENTS)
        values.update(extra)
        return self.playbook('create.yml', env=env, **values)

    def workspace(self, name):
        with Journal.open(self.journal_path, create=False) as journal:
            return journal.get_workspace(name)

    def debt(self, name):
        with Journal.open(self.journal_path, create=False) as journal:
            return journal.cleanup_debts(name)

    def machines(self, workspace=None):
        """The folder's machines (those whose marker names ``workspace``)."""
        found = self.cloud.folder('machines')
        return [m for m in found if workspace is None or
                (ownership.parse(m.get('marker')) or {}).get('workspace') == workspace]

    def verdict(self, machine, workspace):
        record = self.workspace(workspace)
        secret = ownership.load_secret(self.journal_path)
        return ownership.verdict(machine['marker'], secret, ownership.controller_id(secret), workspace,
                                 machine['id'], ownership.record_nonce(record))


@pytest.fixture(scope='module')
def site(localcloud, tmp_path_factory):
    return FolderSite(localcloud, tmp_path_factory.mktemp('folder'))


def test_the_collection_differs_from_the_checkout_by_the_package_and_one_registry_line(site):
    top = os.path.join(site.collections, 'ansible_collections', 'ephemera', 'workspaces')
    changed, added = [], []
    for here, dirs, files in os.walk(top):
        for name in list(dirs) + files:
            path = os.path.join(here, name)
            relative = os.path.relpath(path, top)
            if os.path.islink(path):
                dirs[:] = [d for d in dirs if d != name]
                target = os.path.realpath(path)
                if target == os.path.realpath(providerkit.PACKAGE):
                    added.append(relative)
                else:
                    assert target == os.path.join(providerkit.ROOT, relative), relative
            elif os.path.isfile(path):
                if not filecmp.cmp(path, os.path.join(providerkit.ROOT, relative), shallow=False):
                    changed.append(relative)
    assert added == [os.path.join('plugins', 'module_utils', 'providers', 'folder')]
    assert changed == list(providerkit.CHANGED)
    with open(os.path.join(providerkit.ROOT, changed[0]), encoding='utf-8') as src:
        before = src.read().splitlines()
    with open(os.path.join(top, changed[0]), encoding='utf-8') as src:
        after = src.read().splitlines()
    assert [line for line in after if line not in before] == [providerkit.LINE.rstrip('\n')]
    assert len(after) == len(before) + 1


def test_create_to_ready_and_destroy(site):
    run = site.create('fd-one')
    assert run.ok, run.explain()
    ws = site.workspace('fd-one')
    assert ws['status'] == 'ready' and ws['provider'] == 'folder' and ws['location'] == 'local'
    [machine] = site.machines('fd-one')
    assert machine['id'] == ws['resource_id'] == ws['candidate_id'] and machine['id'].startswith('fd-')
    assert machine['running'] and machine['sshd'] == 'up' and ws['address'] == machine['address']
    assert site.verdict(machine, 'fd-one') == ownership.VERIFIED
    assert machine['labels'] == leasing.lease_labels(ws['lease'], 'ready')
    # The step names are the provider's own words.
    for name in ('2/13 ', '3/13 write the machine', '4/13 wait for the machine to be written',
                 '5/13 configure the machine', '6/13 start the machine', '13/13 mark ready'):
        assert [t for t, _r in run.results() if t.startswith(name)], (name, [t for t, _r in run.results()])
    checkout = os.path.join(site.info['guest_prefix'].replace('{vmid}', machine['id']), 'workspace')
    assert any(os.path.isdir(os.path.join(here, '.git')) for here, _d, _f in os.walk(checkout)), checkout

    run = site.playbook('destroy.yml', workspace='fd-one')
    assert run.ok, run.explain()
    assert site.workspace('fd-one')['status'] == 'destroyed' and site.debt('fd-one') == []
    assert site.machines('fd-one') == []
    assert not os.path.exists(os.path.join(site.info['path'], 'machines', machine['id']))


def test_a_create_killed_before_its_start_is_finished_by_the_reconcile(site, tmp_path):
    trace = tmp_path / 'trace'
    trace.write_text('')
    kill = {'workspace': 'fd-killed', 'point': 'create.start begin', 'nth': 1}
    killed = site.create('fd-killed', env={'EPHEMERA_FAILPOINT_TRACE': str(trace),
                                           'EPHEMERA_FAILPOINT_KILL': json.dumps(kill)})
    assert not killed.ok
    ws = site.workspace('fd-killed')
    assert ws['status'] != 'ready' and ws['resource_id']
    [machine] = site.machines('fd-killed')
    assert machine['id'] == ws['resource_id']

    run = site.playbook('reconcile.yml', agent='fake', ephemera_agents=FAKE_AGENTS)
    assert run.ok, run.explain()
    ws = site.workspace('fd-killed')
    assert ws['status'] == 'ready', run.explain()
    [machine] = site.machines('fd-killed')
    assert machine['id'] == ws['resource_id'] and machine['sshd'] == 'up'
    assert site.verdict(machine, 'fd-killed') == ownership.VERIFIED


def test_the_expiry_sweep_releases_an_idle_workspace_and_keeps_a_working_one(site):
    run = site.create('fd-idle', ttl=600, idle_timeout=8, ephemera_agents=DONE_AGENTS)
    assert run.ok, run.explain()
    working = site.create('fd-working', ttl=600, idle_timeout=600)
    assert working.ok, working.explain()
    ws = site.workspace('fd-idle')
    time.sleep(max(0.0, ws['lease']['expires_at'] - time.time()) + 0.3)

    run = site.playbook('expire.yml')
    assert run.ok, run.explain()
    actions = {e['workspace']: e['action'] for e in run.task('Release what expired')['entries'] if e['workspace']}
    assert actions.get('fd-idle') == 'released', run.task('Release what expired')['report']
    assert 'fd-working' not in actions or actions['fd-working'] != 'released'
    after = site.workspace('fd-idle')
    assert after['status'] == 'destroyed' and site.machines('fd-idle') == []
    assert leasing.view(after, time.time())['cleanup_status'] == 'complete'
    assert site.workspace('fd-working')['status'] == 'ready' and len(site.machines('fd-working')) == 1

    # The inventory lists it through the provider's hook, with no option of its own (the folder comes from the
    # provider's environment variable).
    path = os.path.join(site.directory, 'folder.workspaces.yml')
    with open(path, 'w', encoding='utf-8') as out:
        json.dump({'plugin': 'ephemera.workspaces.workspaces', 'journal_path': site.journal_path}, out)
    listed = run_ansible(['ansible-inventory', '-i', path, '--list'], timeout=120, fail=False, callback=None,
                         pin=site.collections, unset=('PROXMOX_', 'EPHEMERA_'),
                         env=dict(ANSIBLE_INVENTORY_UNPARSED_FAILED='1', EPHEMERA_FOLDER_PATH=site.info['path'],
                                  XDG_CACHE_HOME=os.path.join(site.directory, 'cache')))
    assert listed.returncode == 0, listed.output
    hosts = listed.data['provider_folder']['hosts']
    assert 'fd-working' in hosts and 'fd-idle' not in hosts and 'fd-one' not in hosts, listed.output
    [machine] = site.machines('fd-working')
    hostvars = listed.data['_meta']['hostvars']['fd-working']
    assert hostvars['ansible_host'] == machine['address'] and machine['id'] in json.dumps(hostvars)

    run = site.playbook('destroy.yml', workspace='fd-working')
    assert run.ok, run.explain()
    assert site.machines('fd-working') == []
