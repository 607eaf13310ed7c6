"""A site for the flows' unit tests: an in-process fakepve with a template and the pool, a journal, a provider.

The steps that talk to the provider run for real against the fake over HTTPS; the guest steps (SSH, bootstrap,
checkout, runner, brief) need real guests and are run by tests/integration.
"""

import os
import subprocess

from ansible_collections.ephemera.workspaces.plugins.module_utils.core.journal import Journal
from ansible_collections.ephemera.workspaces.plugins.module_utils.providers.proxmox.client import PveClient
from ansible_collections.ephemera.workspaces.plugins.module_utils.providers.proxmox.provider import ProxmoxProvider
from ansible_collections.ephemera.workspaces.plugins.modules import workspace_create, workspace_destroy

TEMPLATE = 9000
POOL = 'disposable-workspaces'
SECRET = b'flow-test-controller-secret-of-40-chars!'
TEMPLATE_NIC = 'name=eth0,bridge=vmbr0,hwaddr=BC:24:11:00:23:28,ip=dhcp,type=veth'


def defaults(spec):
    return {k: v.get('default') for k, v in spec.items()}


class Site:
    """The fake, a journal, a provider signing with SECRET, and the options the modules would pass the flows."""

    def __init__(self, fakepve, cafile, directory):
        self.pve = fakepve
        self.cafile = cafile
        self.journal_path = os.path.join(str(directory), 'journal.sqlite')
        # The request step refuses a key file that cannot log in: a real one (the guest steps are not run here).
        self.key_path = os.path.join(str(directory), 'id_ed25519')
        subprocess.run(['ssh-keygen', '-q', '-t', 'ed25519', '-N', '', '-f', self.key_path], check=True)
        self.clients = []
        self.provider = self.make_provider(SECRET)
        fakepve.add_ct(TEMPLATE, 'tpl', template=True, config={
            'rootfs': 'local-lvm:base-%d-disk-0,size=8G' % TEMPLATE, 'net0': TEMPLATE_NIC})
        self.provider.client.post('/pools', poolid=POOL)
        self.journal = Journal.open(self.journal_path)
        self.setup_requests = len(fakepve.requests)

    def make_provider(self, secret):
        client = PveClient(self.pve.url, api_user='root@pam', api_password='secret', ca_file=self.cafile,
                           get_retries=0)
        self.clients.append(client)
        return ProxmoxProvider(client, secret)

    def connection(self):
        return dict(api_host=self.pve.url, api_user='root@pam', api_password='secret', ca_file=self.cafile,
                    journal_path=self.journal_path, controller_secret=SECRET.decode())

    def create_params(self, name, **changes):
        params = defaults(workspace_create.argument_spec())
        # A path: the request step asks only a URL the controller could reach whether it answers.
        params.update(name=name, template=TEMPLATE, repo='/srv/git/app.git', purpose='fix it', ssh_private_key=self.key_path,
                      agents={'claude-code': ['claude', '{purpose}']}, address_mode='static',
                      address_range='127.0.77.10-127.0.77.20', address_prefix=8, task_timeout=30, lock_timeout=5,
                      address_timeout=2)
        params.update(self.connection())
        params.update(changes)
        return params

    def destroy_params(self, name, **changes):
        params = defaults(workspace_destroy.argument_spec())
        params.update(name=name, shutdown_timeout=5, task_timeout=30, lock_timeout=2)
        params.update(self.connection())
        params.update(changes)
        return params

    def changes_sent(self):
        """The requests since the set-up that could change the cluster (logins aside)."""
        return [r for r in self.pve.requests[self.setup_requests:]
                if r[0] in ('POST', 'PUT', 'DELETE') and not r[1].endswith('/ticket')]

    def close(self):
        self.journal.close()
        for client in self.clients:
            client.close()
