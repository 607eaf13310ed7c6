"""Run the shipped playbooks against the try-out cloud's Hetzner Cloud fake (inventories/localcloud-hetzner)."""

import json
import os
import sys
import time

from tests.ansible_run import run_ansible
from tests.integration.aws.awsrun import FAKE_AGENTS, PLAYBOOKS, AwsSite

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
INVENTORY = os.path.join(ROOT, 'inventories', 'localcloud-hetzner')


class ManyHosts:
    """Runs of the shipped playbooks for several workspaces at once, on the inventory ``inventory`` (a mixin of an
    AwsSite); ``extra_env``: what each run adds to the site's environment."""
    inventory = INVENTORY
    extra_env = {}

    def many(self, playbook, workspaces, timeout=600, **extra_vars):
        """One ansible-playbook run of ``playbook`` for several workspaces at once: an inventory host per workspace
        (``workspaces``: name -> that host's own variables, such as a bad option or a shorter action timeout)."""
        hosts = {}
        for name, own in workspaces.items():
            hosts[name] = dict({'ansible_connection': 'local', 'ansible_python_interpreter': sys.executable,
                                'workspace': name, 'purpose': 'work on %s' % name}, **(own or {}))
        inventory = os.path.join(self.directory, 'hosts-%d.json' % len(self.timings))
        with open(inventory, 'w', encoding='utf-8') as out:
            json.dump({'workspaces': {'hosts': hosts}}, out)
        cmd = ['ansible-playbook', '-i', self.inventory, '-i', inventory, os.path.join(PLAYBOOKS, playbook),
               '-e', json.dumps(dict(extra_vars, target='workspaces')), '--forks', str(len(hosts))]
        started = time.monotonic()
        run = run_ansible(cmd, timeout=timeout, env=self.env(**self.extra_env))
        self.timings.append((playbook, sorted(workspaces), round(time.monotonic() - started, 1)))
        return run

    def create_many(self, workspaces, repo, **extra):
        return self.many('create.yml', workspaces, repo=repo, agent='fake', ephemera_agents=FAKE_AGENTS, **extra)

    def destroy_many(self, workspaces, **extra):
        return self.many('destroy.yml', workspaces, **extra)


class HetznerSite(ManyHosts, AwsSite):
    """One controller (a journal) working on the try-out cloud's Hetzner fake."""

    def playbook(self, playbook, env=None, check=False, timeout=300, **extra_vars):
        cmd = ['ansible-playbook', '-i', INVENTORY, os.path.join(PLAYBOOKS, playbook), '-e', json.dumps(extra_vars)]
        if check:
            cmd.append('--check')
        started = time.monotonic()
        run = run_ansible(cmd, timeout=timeout, env=self.env(**(env or {})))
        self.timings.append((playbook, extra_vars.get('workspace'), round(time.monotonic() - started, 1)))
        return run

    def servers(self, workspace):
        """The fake's servers labelled for ``workspace``."""
        return [s for s in self.cloud.hetzner('servers') if (s.get('labels') or {}).get('ephemera-workspace') == workspace]

    def rule(self, kind, **arguments):
        return self.cloud.hetzner('rule', kind=kind, **arguments)

    def provider(self):
        """A Hetzner provider straight at the fake, signing with this controller's secret."""
        from ansible_collections.ephemera.workspaces.plugins.module_utils.providers.hetzner.client import HCloud
        from ansible_collections.ephemera.workspaces.plugins.module_utils.providers.hetzner.provider import (
            HetznerProvider,
        )
        info = self.cloud.info['hetzner']
        return HetznerProvider(HCloud(info['token'], info['endpoint']), self.secret(), info['location'],
                               {'server_type': info['server_type'], 'ssh_key': info['ssh_key']})
