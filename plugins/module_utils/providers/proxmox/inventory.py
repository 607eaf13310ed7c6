# -*- coding: utf-8 -*-
# Copyright: ephemera.workspaces contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What the inventory plugin needs of Proxmox VE (base.ClusterHook): the cluster's connection options with their
environment variables, and the advice for a cluster that refuses the inventory."""

from ansible_collections.ephemera.workspaces.plugins.module_utils.providers import base
from ansible_collections.ephemera.workspaces.plugins.module_utils.providers.proxmox.client import (
    ENV_VARS,
    PveAuthError,
    PveConfigError,
    PvePermissionDenied,
    PveTlsError,
    connection_options,
)
from ansible_collections.ephemera.workspaces.plugins.module_utils.providers.proxmox.provider import (
    ProxmoxProvider,
    interface_addresses,
)


class ProxmoxInventory(base.ClusterHook):

    name = 'proxmox'
    connection_options = ('api_host', 'api_port', 'api_user', 'api_password', 'api_token_id', 'api_token_secret',
                          'validate_certs', 'ca_file', 'request_timeout')
    env_vars = ENV_VARS
    endpoint_option = 'api_host'
    unconfigured = 'no api_host'

    def connect_cluster(self, params):
        try:
            options = connection_options(params)
            if not options['api_host']:
                return None
            return ProxmoxProvider.from_params(options)
        except PveConfigError as err:
            raise base.InventoryConfigError('connection options: %s.' % err)

    def misconfigured(self, err, provider, where):
        if isinstance(err, PveAuthError):
            token = provider.client.auth_mode == 'token'
            which = ('api_token_id', 'api_token_secret') if token else ('api_user', 'api_password')
            return '%s: %s' % (where(*which), err)
        if isinstance(err, PveTlsError):
            return '%s: %s' % (where('ca_file', 'validate_certs'), err)
        if isinstance(err, PvePermissionDenied):
            return '%s: %s The inventory needs VM.Audit on /vms (or on the pools).' % (where('api_user'), err)
        return None

    def addresses(self, answer):
        return interface_addresses(answer)


HOOK = ProxmoxInventory()
