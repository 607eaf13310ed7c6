"""Run the collection's playbooks for real against a try-out cluster, and read what they did.

    cluster = Cluster.start(directory)                 # a cluster process, like `make cluster-up`
    site = Site(cluster, journal_path)                  # one controller: its journal and environment
    result = site.playbook('create.yml', workspace='w1', repo=..., purpose=...)
    result.ok, result.changed, result.task('13/13 mark ready')    (a tests.ansible_run.Run)
    site.create_many(['w1', 'w2'], repo=...)            # several workspaces in one run, in parallel

Runs go through tests/ansible_run.py: output read from the ansible.posix.json callback, the text kept for messages.
"""

import contextlib
import json
import os
import subprocess
import sys

from tests.ansible_run import run_ansible
from tests.localpve.cluster import pick_host
from tests.localpve.config import Options
from tests.localpve.control import ControlClient
from tests.localpve.process import down, up

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PLAYBOOKS = os.path.join(ROOT, 'playbooks')
INVENTORY = os.path.join(ROOT, 'inventories', 'localpve')
# An agent that stands in for a real one: it works for a while, then finishes.
FAKE_AGENTS = {'fake': ['sh', '-c', 'echo "working on: {purpose}"; sleep 120']}


class Cluster:
    """A try-out cluster process and its control client."""

    def __init__(self, state_dir, control):
        self.state_dir = state_dir
        self.control = control
        self.info = control.info

    @classmethod
    def start(cls, state_dir, **options):
        options.setdefault('time_scale', 0)
        opts = Options(state_dir=state_dir, host=pick_host(), api_port=0, proxy_port=0, **options).check()
        return cls(opts.state_dir, ControlClient(up(opts)))

    def stop(self):
        down(self.state_dir)

    def api(self):
        """A PveClient straight to the API (not through the fault proxy), with the cluster's token."""
        from ansible_collections.ephemera.workspaces.plugins.module_utils.providers.proxmox.client import PveClient
        return PveClient(self.info['api_url'], api_token_id=self.info['token_id'],
                         api_token_secret=self.info['token_secret'], ca_file=self.info['ca_file'])

    def guest_root(self, vmid):
        return self.info['guest_root'].replace('{vmid}', str(vmid))


@contextlib.contextmanager
def running_cluster(state_dir, **options):
    """A try-out cluster process in ``state_dir`` (time scale 0 unless given) for the block; its ControlClient."""
    options.setdefault('time_scale', 0)
    opts = Options(state_dir=str(state_dir), host=pick_host(), api_port=0, proxy_port=0, **options).check()
    client = ControlClient(up(opts))
    try:
        yield client
    finally:
        down(opts.state_dir)


class Site:
    """One controller: a journal and the environment that points the playbooks at the cluster."""

    def __init__(self, cluster, journal_path, directory=None):
        self.cluster = cluster
        self.journal_path = journal_path
        self.directory = directory or os.path.dirname(journal_path)

    def env(self, **extra):
        """What a run of this controller adds to the environment: the cluster and the journal."""
        return dict(LOCALPVE_STATE_DIR=self.cluster.state_dir, EPHEMERA_JOURNAL=self.journal_path, **extra)

    def command(self, playbook, extra_vars, check=False, inventories=(), forks=None):
        cmd = ['ansible-playbook', '-i', INVENTORY]
        for inventory in inventories:
            cmd += ['-i', inventory]
        cmd += [os.path.join(PLAYBOOKS, playbook) if not os.path.isabs(playbook) else playbook,
                '-e', json.dumps(extra_vars)]
        if check:
            cmd.append('--check')
        if forks:
            cmd += ['--forks', str(forks)]
        return cmd

    def playbook(self, playbook, check=False, inventories=(), forks=None, env=None, timeout=600, **extra_vars):
        """Run a playbook to its end: the finished tests.ansible_run.Run."""
        return run_ansible(self.command(playbook, extra_vars, check, inventories, forks), timeout=timeout,
                           env=self.env(**(env or {})))

    def create_vars(self, workspace, repo, **extra):
        values = dict(workspace=workspace, repo=repo, purpose='work on %s' % workspace, agent='fake',
                      ephemera_agents=FAKE_AGENTS)
        values.update(extra)
        return values

    def create(self, workspace, repo, **extra):
        return self.playbook('create.yml', **self.create_vars(workspace, repo, **extra))

    def create_many(self, names, repo, forks=10, **extra):
        """Create several workspaces in one ansible-playbook run: one inventory host per workspace."""
        hosts = {name: {'ansible_connection': 'local', 'ansible_python_interpreter': sys.executable,
                        'workspace': name} for name in names}
        inventory = os.path.join(self.directory, 'workspaces-%s.json' % names[0])
        with open(inventory, 'w') as out:
            json.dump({'workspaces': {'hosts': hosts}}, out)
        values = self.create_vars(names[0], repo, **extra)
        values.pop('workspace')
        values['target'] = 'workspaces'
        return self.playbook('create.yml', inventories=[inventory], forks=forks, **values)

    def journal(self):
        from ansible_collections.ephemera.workspaces.plugins.module_utils.core.journal import Journal
        return Journal.open(self.journal_path, create=False)

    def workspace(self, name):
        with self.journal() as journal:
            return journal.get_workspace(name)

    def secret(self):
        from ansible_collections.ephemera.workspaces.plugins.module_utils.core import ownership
        return ownership.load_secret(self.journal_path)


@contextlib.contextmanager
def site_with_workspaces(base, names, forks=5):
    """A cluster, a controller (journal under ``base``) and a repository, with ``names`` created and ready."""
    cluster = Cluster.start(os.path.join(base, 'cluster'))
    try:
        site = Site(cluster, os.path.join(base, 'journal.sqlite'))
        site.repo = make_repo(os.path.join(base, 'repo'))
        result = site.create_many(names, site.repo, forks=forks)
        assert result.ok, result.output[-4000:]
        yield site
    finally:
        cluster.stop()


def make_repo(path):
    """A small git repository with one commit on main; returns its file:// URL."""
    env = dict(os.environ, GIT_AUTHOR_NAME='t', GIT_AUTHOR_EMAIL='t@example.invalid', GIT_COMMITTER_NAME='t',
               GIT_COMMITTER_EMAIL='t@example.invalid')
    subprocess.run(['git', 'init', '--quiet', '--initial-branch=main', path], check=True, env=env)
    with open(os.path.join(path, 'app.py'), 'w') as out:
        out.write('print("hello")\n')
    subprocess.run(['git', '-C', path, 'add', 'app.py'], check=True, env=env)
    subprocess.run(['git', '-C', path, 'commit', '--quiet', '-m', 'first'], check=True, env=env)
    return 'file://' + path
