# -*- coding: utf-8 -*-
# Copyright: ephemera.workspaces contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)


class ModuleDocFragment:

    # The provider option of the modules that serve every provider (providers/registry.py adds it to their
    # argument_spec, with the registered providers as its choices).
    DOCUMENTATION = r'''
options:
  provider:
    description:
      - Where workspaces live. V(proxmox) (LXC containers, the O(api_host) options) or V(aws) (EC2 instances, the
        C(aws_*) options) or V(hetzner) (Hetzner Cloud servers, the C(hetzner_*) options).
      - With V(gcp) a workspace is a Compute Engine instance (the C(gcp_*) options).
      - With V(azure) a workspace is a set of VM, NIC, public IP and OS disk (the C(azure_*) options).
      - If not set, the environment variable E(EPHEMERA_PROVIDER) is used.
      - A workspace stays with the provider it was created on; a run with another provider refuses to touch it.
    type: str
    choices: [proxmox, aws, hetzner, gcp, azure]
    default: proxmox
'''
