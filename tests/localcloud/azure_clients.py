"""Clients of the ARM fake with the Azure SDK (imported only when one is made): the credential, and
ComputeManagementClient / NetworkManagementClient of our principal or the foreign one, all verifying the fake's
certificate with the cloud's CA file.

    from tests.localcloud.azure_clients import compute_client, network_client, credential
    compute = compute_client(info)          # info: the dict of cloud.json
"""


def credential(info, foreign=False):
    """A ClientSecretCredential against the fake's token endpoint (authority host: the fake; instance discovery
    off, as for any authority that is not Microsoft's)."""
    from azure.identity import ClientSecretCredential  # pylint: disable=import-outside-toplevel
    azure = info['azure']
    who = azure['foreign'] if foreign else azure
    return ClientSecretCredential(azure['tenant_id'], who['client_id'], who['client_secret'],
                                  authority=azure['authority_host'], disable_instance_discovery=True,
                                  connection_verify=azure['ca_file'])


def _options(info, **options):
    azure = info['azure']
    out = {'base_url': azure['resource_manager_url'], 'credential_scopes': [azure['credential_scope']],
           'connection_verify': azure['ca_file']}
    out.update(options)
    return out


def compute_client(info, foreign=False, **options):
    from azure.mgmt.compute import ComputeManagementClient  # pylint: disable=import-outside-toplevel
    return ComputeManagementClient(credential(info, foreign), info['azure']['subscription_id'],
                                   **_options(info, **options))


def network_client(info, foreign=False, **options):
    from azure.mgmt.network import NetworkManagementClient  # pylint: disable=import-outside-toplevel
    return NetworkManagementClient(credential(info, foreign), info['azure']['subscription_id'],
                                   **_options(info, **options))
