# -*- coding: utf-8 -*-
# Copyright: ephemera.workspaces contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)


class ModuleDocFragment:

    DOCUMENTATION = r'''
options:
  api_host:
    description:
      - The Proxmox VE API to talk to, as a host name or address (V(pve1.example.com)), V(host:port), or an
        https URL (V(https://pve1.example.com:8006)). A port given here wins over O(api_port).
      - If not set, the environment variable E(PROXMOX_HOST) is used. One of the two is required.
      - Any node of the cluster will do; PVE forwards requests for other nodes itself.
    type: str
  api_port:
    description:
      - Port of the API, used when O(api_host) names none.
    type: int
    default: 8006
  api_user:
    description:
      - User to log in as, with its realm (V(root@pam), V(automation@pve)).
      - With O(api_token_id) given as a bare token name, the user the token belongs to.
      - If not set, the environment variable E(PROXMOX_USER) is used.
    type: str
  api_password:
    description:
      - Password of O(api_user). The login ticket it gets is renewed once if PVE rejects it later.
      - If not set, the environment variable E(PROXMOX_PASSWORD) is used.
      - Users with two-factor authentication cannot log in with a password; give them an API token.
    type: str
  api_token_id:
    description:
      - Id of an API token, either in full (V(automation@pve!workspaces)) or just its name (V(workspaces)) with
        O(api_user).
      - If not set, the environment variable E(PROXMOX_TOKEN_ID) is used.
      - When both a token and a password are given, the token is used.
    type: str
  api_token_secret:
    description:
      - Secret of the API token O(api_token_id).
      - If not set, the environment variable E(PROXMOX_TOKEN_SECRET) is used.
    type: str
  validate_certs:
    description:
      - Verify the API's TLS certificate. Turn this off only for a test cluster; prefer O(ca_file).
      - If not set, the environment variable E(PROXMOX_VALIDATE_CERTS) is used.
    type: bool
    default: true
  ca_file:
    description:
      - PEM file with the CA certificate to verify the API's certificate against, instead of the system's CA
        certificates. For a cluster with PVE's own certificates that is C(/etc/pve/pve-root-ca.pem) from any node.
      - If not set, the environment variable E(PROXMOX_CA_FILE) is used.
    type: path
  request_timeout:
    description:
      - Seconds to wait for the answer to each API request (and at most 10 of them for the connection).
      - A request that got no answer in time may still have been carried out; the modules then look at the
        cluster before doing anything else.
    type: int
    default: 30
requirements:
  - proxmoxer >= 2.0.1
  - requests >= 2.28
notes:
  - Every module that talks to the API is in the action group C(ephemera.workspaces.proxmox), so one
    C(module_defaults) entry for C(group/ephemera.workspaces.proxmox) sets these options for all of them.
'''
