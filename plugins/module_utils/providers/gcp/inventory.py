# -*- coding: utf-8 -*-
# Copyright: ephemera.workspaces contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What the inventory plugin needs of Compute Engine (base.InventoryHook): one listing of the labelled instances per
zone, and which options an error is about. Neither google-cloud-compute nor the provider's code is imported before
it connects."""

from ansible_collections.ephemera.workspaces.plugins.module_utils.providers import base


class GcpInventory(base.InventoryHook):

    name = 'gcp'
    scope_option = 'gcp_zones'
    sdk = 'google-cloud-compute on the controller (pip install google-cloud-compute)'
    needs = ' The inventory needs compute.instances.list.'

    def provider_class(self):
        # pylint: disable=import-outside-toplevel
        from ansible_collections.ephemera.workspaces.plugins.module_utils.providers.gcp.provider import GcpProvider
        return GcpProvider

    def params(self, option, scope):
        params = {key: option(key) for key in ('gcp_project', 'gcp_auth_kind', 'gcp_service_account_file',
                                               'gcp_endpoint_url')}
        params['gcp_zone'] = scope
        return params

    def where(self, option, scope):
        return 'options gcp_project, gcp_auth_kind, gcp_service_account_file (zone %s)' % scope


HOOK = GcpInventory()
