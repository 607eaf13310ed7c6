"""Run the shipped playbooks against the try-out cloud's Compute Engine fake (inventories/localcloud-gcp)."""

import os

from tests.integration.aws import awsrun
from tests.integration.hetzner.hzrun import ManyHosts

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
INVENTORY = os.path.join(ROOT, 'inventories', 'localcloud-gcp')
# google-cloud-compute imported once in ansible-playbook's process, not in every task's worker, as a user asks for
# it (EPHEMERA_PRELOAD, plugin_utils/in_process.py).
PRELOAD = {'EPHEMERA_PRELOAD': 'gcp'}


class GcpSite(ManyHosts, awsrun.AwsSite):
    """One controller (a journal) working on the try-out cloud's Compute Engine fake."""
    inventory = INVENTORY
    extra_env = PRELOAD

    def playbook(self, playbook, env=None, check=False, timeout=300, **extra_vars):
        saved = awsrun.INVENTORY
        awsrun.INVENTORY = INVENTORY
        try:
            return super().playbook(playbook, env=dict(PRELOAD, **(env or {})), check=check, timeout=timeout,
                                    **extra_vars)
        finally:
            awsrun.INVENTORY = saved

    def instances(self, workspace, live=True):
        """The fake's instances labelled for ``workspace``."""
        return [i for i in self.cloud.gcp('instances') if (i.get('labels') or {}).get('ephemera-workspace') == workspace]

    def fault(self, kind, method, pattern, **arguments):
        return self.cloud.gcp('fault', kind=kind, method=method, pattern=pattern, **arguments)

    def host_keys_fault(self, silent=False, times=1):
        """The next instances publish a host key no sshd serves in their guest attributes (silent: none)."""
        return self.cloud.gcp_host_keys(times=times, silent=silent)

    def provider(self):
        """A GCP provider straight at the fake, signing with this controller's secret."""
        from ansible_collections.ephemera.workspaces.plugins.module_utils.providers.gcp.client import (
            Compute,
            credentials,
        )
        from ansible_collections.ephemera.workspaces.plugins.module_utils.providers.gcp.provider import GcpProvider
        info = self.cloud.info['gcp']
        compute = Compute(info['project'], info['zone'], credentials('anonymous'), endpoint=info['endpoint'])
        return GcpProvider(compute, self.secret(), {'ssh_public_key': info['ssh_public_key']})
