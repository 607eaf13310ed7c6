"""Run the shipped playbooks against the try-out cloud's Hetzner Cloud fake (inventories/localcloud-hetzner)."""

import os

from tests.integration.aws.awsrun import AwsSite

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
INVENTORY = os.path.join(ROOT, 'inventories', 'localcloud-hetzner')


class HetznerSite(AwsSite):
    """One controller (a journal) working on the try-out cloud's Hetzner fake."""

    def playbook(self, playbook, env=None, check=False, timeout=300, **extra_vars):
        import tests.integration.aws.awsrun as awsrun
        saved = awsrun.INVENTORY
        awsrun.INVENTORY = INVENTORY
        try:
            return super().playbook(playbook, env=env, check=check, timeout=timeout, **extra_vars)
        finally:
            awsrun.INVENTORY = saved

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
