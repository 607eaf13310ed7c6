# -*- coding: utf-8 -*-
# Copyright: ephemera.workspaces contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What the inventory plugin needs of Azure (base.InventoryHook): one connection that reads each resource group once
(its VMs, NICs, public IPs and managed disks, as whole sets), the resource group a workspace was made in, and which
options an error is about. Neither the Azure SDK nor the provider's code is imported before it connects."""

from ansible_collections.ephemera.workspaces.plugins.module_utils.providers import base

# The options of the Azure connection, as the modules' azure options are named.
OPTIONS = ('azure_subscription_id', 'azure_tenant_id', 'azure_client_id', 'azure_client_secret',
           'azure_authority_host', 'azure_endpoint_url', 'azure_ca_file')


class AzureInventory(base.InventoryHook):

    name = 'azure'
    listing = 'sets'
    scope_option = 'azure_resource_groups'
    scope_word = 'resource group'
    scope_key = 'resource_group'
    sdk = ('azure-identity, azure-mgmt-compute and azure-mgmt-network on the controller (pip install azure-identity '
           'azure-mgmt-compute azure-mgmt-network)')
    needs = ' The inventory needs to read the resource group (Reader).'

    def record_scope(self, record):
        """The resource group an Azure workspace's record was made in (its request's launch settings), or None."""
        launch = (record.get('params') or {}).get('launch') or {}
        return launch.get('resource_group') or None

    def provider_class(self):
        # pylint: disable=import-outside-toplevel
        from ansible_collections.ephemera.workspaces.plugins.module_utils.providers.azure.provider import AzureProvider
        return AzureProvider

    def params(self, option, scope):
        return {key: option(key) for key in OPTIONS}

    def where(self, option, scope):
        return 'options azure_subscription_id, azure_tenant_id, azure_client_id, azure_client_secret%s' % (
            '' if scope is None else ' (resource group %s)' % scope)

    def read_sets(self, provider, scope):
        # pylint: disable=import-outside-toplevel
        from ansible_collections.ephemera.workspaces.plugins.module_utils.providers.azure import members
        return members.listed_sets(members.inventory(provider.arm, provider.arm.subscription, scope))


HOOK = AzureInventory()
