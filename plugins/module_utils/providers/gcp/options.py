# -*- coding: utf-8 -*-
# Copyright: ephemera.workspaces contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The options of doc fragment ephemera.workspaces.gcp: how a module reaches Compute Engine and launches instances
there. No SDK is imported here."""

from ansible.module_utils.basic import env_fallback

# How messages name a resource of this provider: (what, where) (base.resource_label, Provider.label).
RESOURCE_LABEL = ('instance {id}', ' in {location}')
# A Compute Engine connection serves one zone (Provider.location_option).
LOCATION_OPTION = 'gcp_zone'
DEPRECATED = dict(removed_in_version='1.0.0', removed_from_collection='ephemera.workspaces')


def gcp_argument_spec():
    """The GCP options (credentials the Google way: a service-account file, GOOGLE_APPLICATION_CREDENTIALS, or
    application default credentials)."""
    return dict(
        gcp_project=dict(type='str', fallback=(env_fallback, ['GOOGLE_CLOUD_PROJECT', 'CLOUDSDK_CORE_PROJECT',
                                                              'GCP_PROJECT', 'GCE_PROJECT'])),
        gcp_zone=dict(type='str', fallback=(env_fallback, ['EPHEMERA_GCP_ZONE', 'CLOUDSDK_COMPUTE_ZONE'])),
        gcp_auth_kind=dict(type='str', default='application', choices=['application', 'serviceaccount', 'anonymous']),
        gcp_service_account_file=dict(type='path', fallback=(env_fallback, [
            'GOOGLE_APPLICATION_CREDENTIALS', 'GCP_SERVICE_ACCOUNT_FILE', 'GCE_CREDENTIALS_FILE_PATH'])),
        gcp_endpoint_url=dict(type='str', fallback=(env_fallback, ['EPHEMERA_GCP_ENDPOINT_URL'])),
        gcp_retry_timeout=dict(type='int', default=60),
        gcp_machine_type=dict(type='str', default='e2-small'),
        gcp_network=dict(type='str', default='default'),
        gcp_ssh_public_key=dict(type='str', no_log=False),
        gcp_ssh_user=dict(type='str', default='root'),
        gcp_address=dict(type='str', default='public', choices=['public', 'private']),
        gcp_labels=dict(type='dict', default={}),
        gcp_deadline_grace=dict(type='int', default=3600),
        # No longer used: instances run with no service account and no guard inside (docs/gcp.md). Still accepted,
        # with a deprecation warning, so that inventories that set them keep working.
        gcp_service_account_email=dict(type='str', **DEPRECATED),
        gcp_guard=dict(type='str', choices=['refuse', 'warn'], **DEPRECATED),
        gcp_guard_metadata_url=dict(type='str', **DEPRECATED),
        gcp_guard_api_url=dict(type='str', **DEPRECATED),
        gcp_guard_serial=dict(type='str', **DEPRECATED),
    )


# The options this provider adds to a module (registry.provider_argument_spec).
argument_spec = gcp_argument_spec
