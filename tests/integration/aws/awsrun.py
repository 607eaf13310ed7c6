"""Run the shipped playbooks against the try-out cloud (inventories/localcloud), and look at what they did."""

import json
import os
import time

from tests.ansible_run import run_ansible

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
PLAYBOOKS = os.path.join(ROOT, 'playbooks')
INVENTORY = os.path.join(ROOT, 'inventories', 'localcloud')
FAKE_AGENTS = {'fake': ['sh', '-c', 'echo "working on: {purpose}"; sleep 120']}
DONE_AGENTS = {'fake': ['sh', '-c', 'echo done']}
WORKSPACE_TAG = 'ephemera:workspace'


class AwsSite:
    """One controller (a journal) working on the try-out cloud ``cloud`` (a tests.localcloud CloudClient)."""

    def __init__(self, cloud, directory):
        self.cloud = cloud
        self.directory = str(directory)
        self.journal_path = os.path.join(self.directory, 'journal.sqlite')
        self.timings = []

    def env(self, **extra):
        return dict(LOCALCLOUD_STATE_DIR=self.cloud.info['state_dir'], EPHEMERA_JOURNAL=self.journal_path, **extra)

    def playbook(self, playbook, env=None, check=False, timeout=300, **extra_vars):
        cmd = ['ansible-playbook', '-i', INVENTORY, os.path.join(PLAYBOOKS, playbook), '-e', json.dumps(extra_vars)]
        if check:
            cmd.append('--check')
        started = time.monotonic()
        run = run_ansible(cmd, timeout=timeout, env=self.env(**(env or {})))
        self.timings.append((playbook, extra_vars.get('workspace'), round(time.monotonic() - started, 1)))
        return run

    def create(self, workspace, repo, env=None, **extra):
        values = dict(workspace=workspace, repo=repo, purpose='work on %s' % workspace, agent='fake',
                      ephemera_agents=FAKE_AGENTS)
        values.update(extra)
        return self.playbook('create.yml', env=env, **values)

    def destroy(self, workspace, **extra):
        return self.playbook('destroy.yml', workspace=workspace, **extra)

    def journal(self):
        from ansible_collections.ephemera.workspaces.plugins.module_utils.core.journal import Journal
        return Journal.open(self.journal_path, create=False)

    def workspace(self, name):
        with self.journal() as journal:
            return journal.get_workspace(name)

    def events(self, name):
        with self.journal() as journal:
            return journal.events(name)

    def debt(self, name):
        with self.journal() as journal:
            return journal.cleanup_debts(name)

    def secret(self):
        from ansible_collections.ephemera.workspaces.plugins.module_utils.core import ownership
        return ownership.load_secret(self.journal_path)

    def instances(self, workspace, live=True):
        """The cloud's instances tagged for ``workspace`` (live: not terminated)."""
        return [i for i in self.cloud.instances() if (i.get('tags') or {}).get(WORKSPACE_TAG) == workspace
                and (not live or i['state'] != 'terminated')]

    def provider(self):
        """An AWS provider straight at moto (no faults), signing with this controller's secret."""
        from ansible_collections.ephemera.workspaces.plugins.module_utils.providers.aws.client import Ec2
        from ansible_collections.ephemera.workspaces.plugins.module_utils.providers.aws.provider import AwsProvider
        info = self.cloud.info
        ec2 = Ec2(info['region'], access_key=info['access_key_id'], secret_key=info['secret_access_key'],
                  endpoint_url=info['endpoint_url'])
        return AwsProvider(ec2, self.secret())
