# -*- coding: utf-8 -*-
# Copyright: ephemera.workspaces contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)


class ModuleDocFragment:

    DOCUMENTATION = r'''
options:
  azure_subscription_id:
    description:
      - The Azure subscription (a GUID). With O(provider=azure) required, here or in E(AZURE_SUBSCRIPTION_ID).
      - An unknown subscription is refused before anything is made.
    type: str
  azure_tenant_id:
    description:
      - The Microsoft Entra tenant of the service principal. If not set, E(AZURE_TENANT_ID), then E(AZURE_TENANT)
        (what AWX's Azure Resource Manager credential and azure.azcollection use) is used.
    type: str
  azure_client_id:
    description:
      - The service principal's client (application) id. If not set, E(AZURE_CLIENT_ID) is used.
    type: str
  azure_client_secret:
    description:
      - The service principal's secret. If not set, E(AZURE_CLIENT_SECRET), then E(AZURE_SECRET) (AWX's and
        azure.azcollection's name) is used. Never recorded in the journal
        or shown.
      - Without a secret, DefaultAzureCredential looks where it always does (environment, workload identity,
        managed identity, the Azure CLI).
    type: str
  azure_authority_host:
    description:
      - Another Microsoft Entra authority (a sovereign cloud, or the try-out cloud's token endpoint). If not set,
        E(AZURE_AUTHORITY_HOST) is used.
    type: str
  azure_endpoint_url:
    description:
      - Another Azure Resource Manager endpoint (the try-out cloud's ARM fake). If not set,
        E(EPHEMERA_AZURE_ENDPOINT_URL) is used.
    type: str
  azure_ca_file:
    description:
      - A certificate authority file to verify the Resource Manager and authority with. If not set,
        E(EPHEMERA_AZURE_CA_FILE) is used.
    type: path
  azure_resource_group:
    description:
      - The resource group the workspaces' resources go into. It is never created, changed or deleted. If not
        set, E(EPHEMERA_AZURE_RESOURCE_GROUP) is used.
    type: str
  azure_location:
    description:
      - The Azure location (V(westeurope)). If not set, E(EPHEMERA_AZURE_LOCATION) is used.
    type: str
  azure_vm_size:
    description:
      - The VM size; refused before anything is made unless the location offers it.
    type: str
    default: Standard_B1s
  azure_subnet_id:
    description:
      - The id of the subnet the NIC goes into (a shared subnet, never deleted).
    type: str
  azure_admin_username:
    description:
      - The VM's administrator user (Azure gives it sudo), whose authorized key is O(azure_ssh_public_key). The
        controller logs in as root (C(ssh_user)), so this user is not used by the collection; the agent is never it
        (C(agent_user) is refused when it names this user).
    type: str
    default: ephemera
  azure_ssh_public_key:
    description:
      - The public key the VM's administrator user accepts, and root too. The VM's C(osProfile.customData) is a
        cloud-init cloud-config that authorizes it for root (C(disable_root) V(false)), since the controller logs in
        as root and the agent is an unprivileged user the bootstrap makes.
    type: str
  azure_tags:
    description:
      - More tags for every member of a workspace's set (Azure's tag rules; keys starting with V(ephemera:) are the
        collection's own).
    type: dict
    default: {}
  azure_lost_answer_window:
    description:
      - Seconds a resource whose creating PUT lost its answer is looked for again before it is left as cleanup
        debt. It is never created a second time.
    type: int
    default: 120
  azure_operation_timeout:
    description:
      - Seconds to wait for a long-running operation.
    type: int
    default: 900
  azure_orphan_grace:
    description:
      - Seconds an orphaned set must keep the same fingerprint, through at least two successful inventories,
        before the orphan sweep deletes it.
    type: int
    default: 900
'''

    # The options, notes and requirements of the workspaces inventory plugin for this provider.
    INVENTORY = r'''
requirements:
  - azure-identity, azure-mgmt-compute and azure-mgmt-network (only when the journal holds Azure workspaces or
    O(azure_resource_groups) is set)
notes:
  - Azure workspaces (O(ephemera.workspaces.workspace_create#module:provider=azure)), each a set of a VM, its NIC,
    public IP and OS disk, are hosts in the groups C(provider_azure) and C(region_<location>), with
    C(ephemera_location), C(ephemera_resource_group) and the VM's ARM id (C(ephemera_instance_id)). Each resource
    group (those the journal's Azure workspaces were made in, and O(azure_resource_groups)) is read once, one listing
    (all pages) of its VMs, NICs, public IPs and managed disks, whose tags carry the ownership markers. A set that
    carries our tags and no live workspace accounts for is an orphan, with why and whether the set is complete. A
    resource group that cannot be read completely leaves its workspaces with the journal's view and a warning (an
    error with O(strict)); refused credentials are an error.
options:
  azure_resource_groups:
    description:
      - Azure resource groups to read besides those the journal's Azure workspaces were made in. Each is one listing
        of its VMs, NICs, public IPs and managed disks; shared virtual networks, subnets and security groups are
        never read.
      - Without Azure workspaces in the journal and without this option, Azure is not asked at all.
    type: list
    elements: str
    default: []
  azure_subscription_id:
    description: The Azure subscription (a GUID).
    type: str
    env:
      - name: AZURE_SUBSCRIPTION_ID
  azure_tenant_id:
    description: The tenant of the service principal.
    type: str
    env:
      - name: AZURE_TENANT_ID
  azure_client_id:
    description: The service principal's client id (the Reader role on the resource groups is enough).
    type: str
    env:
      - name: AZURE_CLIENT_ID
  azure_client_secret:
    description:
      - The service principal's client secret; never shown. Without it, C(DefaultAzureCredential) looks for
        credentials (environment, workload identity, managed identity, the Azure CLI).
    type: str
    env:
      - name: AZURE_CLIENT_SECRET
  azure_authority_host:
    description: Another token authority than Microsoft's (the try-out cloud's).
    type: str
    env:
      - name: AZURE_AUTHORITY_HOST
  azure_endpoint_url:
    description: Another Resource Manager than Microsoft's (the try-out cloud's ARM fake).
    type: str
    env:
      - name: EPHEMERA_AZURE_ENDPOINT_URL
  azure_ca_file:
    description: A CA file to verify the Resource Manager and the token authority with, instead of the system's.
    type: path
    env:
      - name: EPHEMERA_AZURE_CA_FILE

'''
