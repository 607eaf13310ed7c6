"""The ARM fake's part of a try-out cloud: its HTTPS server (tests/localcloud/azure.py), its guests
(azure_guests.py), its credentials and what cloud.json says of it (the `azure` key), and its control operations
(CloudSite.op_azure dispatches to the op_* methods here)."""

import os
import secrets
import uuid

from tests.localpve import pki

from .azure import SCOPE, AzureFake
from .azure_guests import AzureGuests
from .machines import CloudPart

SECRETS_FILE = 'azure-secrets.json'


class AzurePart(CloudPart):
    """Started and stopped by CloudSite; ticked with the fleet."""

    title = 'Azure'
    bad_arguments = (TypeError,)
    secrets_file = SECRETS_FILE

    def __init__(self, site):
        super().__init__(site)
        self.secrets = None

    def _secrets(self):
        return self.stored_secrets({'azure_client_id': str(uuid.uuid4()), 'azure_client_secret': secrets.token_urlsafe(30),
                                    'azure_foreign_client_id': str(uuid.uuid4()),
                                    'azure_foreign_client_secret': secrets.token_urlsafe(30)})

    async def start(self, public_key):
        opts = self.site.options
        paths = pki.ensure_pki(os.path.join(opts.state_dir, 'pki'), [opts.host])
        self.secrets = self._secrets()
        fleet = self.site.fleet
        self.fake = AzureFake(self.site, opts.host, 0, paths, fleet.pool, fleet.public_pool)
        seed = self.fake.seed(self.secrets, public_key)
        await self.fake.start()
        self.guests = AzureGuests(self.site, self.fake)
        self.info = {
            'url': self.fake.url, 'resource_manager_url': self.fake.url, 'authority_host': self.fake.url,
            'credential_scope': SCOPE, 'ca_file': paths['ca_file'],
            'tenant_id': seed['tenant_id'], 'subscription_id': seed['subscription_id'],
            'client_id': self.secrets['azure_client_id'], 'client_secret': self.secrets['azure_client_secret'],
            'foreign': {'client_id': self.secrets['azure_foreign_client_id'],
                        'client_secret': self.secrets['azure_foreign_client_secret']},
            'ssh_known_hosts': self.guests.known_hosts,
            'guest_prefix': os.path.join(opts.state_dir, 'guests', 'azure{vmid}', 'root'), 'pending_secs': self.fake.pending_secs,
            'poll_secs': self.fake.poll_secs, 'seed': seed}
        return self.info

    # ------------------------------------------------------------ operations (control API: op azure)

    def op_resources(self):
        guests = self.guests.view() if self.guests is not None else {}
        out = []
        for item in self.fake.view():
            if item['kind'] == 'vm':
                item.update(guests.get(item['id'].lower(), {'sshd': 'stopped', 'sshd_pid': None}))
            out.append(item)
        return out

    def op_operations(self):
        return self.fake.view_operations()

    def op_rule(self, action, operation, times=1, skip=0, match=None, seconds=None, code=None, message=None,
                status=None, style=None, outcome=None, poll=None, size=None, fail_at=None):
        return self.fake.add_rule(action, operation, times=times, skip=skip, match=match, seconds=seconds, code=code,
                                  message=message, status=status, style=style, outcome=outcome, poll=poll, size=size,
                                  fail_at=fail_at)

    def op_rules(self):
        return self.fake.view_rules()

    def op_remove_rule(self, rule_id):
        self.fake.remove_rule(rule_id)
        return self.fake.view_rules()

    def op_clear(self):
        self.fake.clear_rules()
        self.fake.clear_boot_faults()
        return []

    def op_boot_log_fault(self, kind, vm=None, times=1):
        return self.fake.boot_log_fault(kind, vm=vm, times=times)

    def op_boot(self):
        return self.fake.view_boot()

    def op_change(self, resource, tags=None, remove_tags=None, properties=None, location=None):
        return self.fake.change(resource, tags=tags, remove_tags=remove_tags, properties=properties,
                                location=location)

    def op_detach(self, resource):
        return self.fake.detach(resource)

    def op_replace(self, resource):
        return self.fake.replace(resource)

    def op_remove(self, resource):
        return self.fake.remove(resource)

    def op_foreign_create(self, kind, name, tags=None, group='workspaces', location=None, attach_to=None):
        return self.fake.create_foreign(kind, name, tags=tags, group=group, location=location, attach_to=attach_to)

    def op_settings(self, pending_secs=None, poll_secs=None):
        if pending_secs is not None:
            self.fake.pending_secs = float(pending_secs)
        if poll_secs is not None:
            self.fake.poll_secs = int(poll_secs)
        return {'pending_secs': self.fake.pending_secs, 'poll_secs': self.fake.poll_secs}
