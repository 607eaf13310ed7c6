"""Run the shipped playbooks against the try-out cloud's Hetzner Cloud fake (inventories/localcloud-hetzner)."""

import json
import os
import time

from tests.ansible_run import run_ansible
from tests.integration.aws.awsrun import PLAYBOOKS, AwsSite

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
INVENTORY = os.path.join(ROOT, 'inventories', 'localcloud-hetzner')


class HetznerSite(AwsSite):
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
