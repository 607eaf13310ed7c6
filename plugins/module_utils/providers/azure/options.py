# -*- coding: utf-8 -*-
# Copyright: ephemera.workspaces contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The options of doc fragment ephemera.workspaces.azure: how a module reaches Azure Resource Manager and what a
workspace's four resources are made of. No SDK is imported here.

Credentials are Azure's own: AZURE_CLIENT_ID, AZURE_TENANT_ID, AZURE_CLIENT_SECRET and AZURE_SUBSCRIPTION_ID, or
whatever DefaultAzureCredential finds when no client secret is given."""

from ansible.module_utils.basic import env_fallback

# How messages name a resource of this provider: (what, where) (base.resource_label, Provider.label).
RESOURCE_LABEL = ('Azure set {id}', ' in {location}')
DEFAULT_GRACE = 900


def azure_argument_spec():
    """The Azure options (the ``provider`` option itself is the shared one)."""
    return dict(
        azure_subscription_id=dict(type='str', fallback=(env_fallback, ['AZURE_SUBSCRIPTION_ID'])),
        azure_tenant_id=dict(type='str', fallback=(env_fallback, ['AZURE_TENANT_ID', 'AZURE_TENANT'])),
        azure_client_id=dict(type='str', fallback=(env_fallback, ['AZURE_CLIENT_ID'])),
        azure_client_secret=dict(type='str', no_log=True, fallback=(env_fallback, ['AZURE_CLIENT_SECRET', 'AZURE_SECRET'])),
        azure_authority_host=dict(type='str', fallback=(env_fallback, ['AZURE_AUTHORITY_HOST'])),
        azure_endpoint_url=dict(type='str', fallback=(env_fallback, ['EPHEMERA_AZURE_ENDPOINT_URL'])),
        azure_ca_file=dict(type='path', fallback=(env_fallback, ['EPHEMERA_AZURE_CA_FILE'])),
        azure_resource_group=dict(type='str', fallback=(env_fallback, ['EPHEMERA_AZURE_RESOURCE_GROUP'])),
        azure_location=dict(type='str', fallback=(env_fallback, ['EPHEMERA_AZURE_LOCATION'])),
        azure_vm_size=dict(type='str', default='Standard_B1s'),
        azure_subnet_id=dict(type='str'),
        azure_admin_username=dict(type='str', default='ephemera'),
        azure_ssh_public_key=dict(type='str', no_log=False),
        azure_tags=dict(type='dict', default={}),
        azure_lost_answer_window=dict(type='int', default=120),
        azure_operation_timeout=dict(type='int', default=900),
        azure_orphan_grace=dict(type='int', default=DEFAULT_GRACE),
    )


# The options this provider adds to a module (registry.provider_argument_spec).
argument_spec = azure_argument_spec
