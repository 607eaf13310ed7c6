# -*- coding: utf-8 -*-
# Copyright: ephemera.workspaces contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)


class ModuleDocFragment:

    DOCUMENTATION = r'''
options:
  hetzner_token:
    description:
      - The Hetzner Cloud API token of the project (read & write). With O(provider=hetzner) required, here or in
        E(HCLOUD_TOKEN). Never recorded in the journal or shown.
    type: str
  hetzner_endpoint:
    description:
      - The API endpoint to talk to instead of C(https://api.hetzner.cloud/v1) (the try-out cloud of the tests).
      - If not set, E(HCLOUD_ENDPOINT) is used.
    type: str
  hetzner_location:
    description:
      - The location of new servers (V(fsn1), V(nbg1), V(hel1), ...) when the request names none. Checked before
        anything is created.
    type: str
    default: fsn1
  hetzner_server_type:
    description:
      - The server type of new workspaces. Checked before anything is created.
    type: str
    default: cx22
  hetzner_ssh_key:
    description:
      - The name of an SSH key of the project that new servers get (a shared key, never removed by the collection).
      - One of O(hetzner_ssh_key) and O(hetzner_ssh_public_key) is needed to create a workspace.
    type: str
  hetzner_ssh_public_key:
    description:
      - A public key the collection adds to the project for each workspace (named after its server) and removes once
        the server's deletion is confirmed.
    type: str
  hetzner_networks:
    description:
      - Names of private networks new servers are attached to. Checked before anything is created.
    type: list
    elements: str
    default: []
  hetzner_labels:
    description:
      - More labels for new servers. Keys starting with C(ephemera-) are refused; values take at most 63 letters,
        digits and C(-_.), starting and ending with a letter or digit.
    type: dict
    default: {}
  hetzner_request_timeout:
    description:
      - Seconds one API request may take.
    type: int
    default: 10
  hetzner_action_timeout:
    description:
      - Seconds an action (a creation, a deletion) is watched per attempt before the run leaves it to the next one.
    type: int
    default: 60
requirements:
  - hcloud >= 2.27
notes:
  - hcloud is imported only with O(provider=hetzner).
  - The token is never recorded in the journal, the events or the task results.
'''

    # The options, notes and requirements of the workspaces inventory plugin for this provider.
    INVENTORY = r'''
requirements:
  - hcloud >= 2.27 (only when the journal holds Hetzner workspaces or O(hetzner_locations) is set)
notes:
  - Hetzner Cloud workspaces (O(ephemera.workspaces.workspace_create#module:provider=hetzner)) are hosts the same
    way, in the groups C(provider_hetzner) and C(region_<location>), read from one paginated listing of the servers
    that carry the C(ephemera-marker) label, per location.
options:
  hetzner_locations:
    description:
      - Hetzner Cloud locations to read besides those the journal's Hetzner workspaces are in (V(fsn1), ...).
      - Without Hetzner workspaces in the journal and without this option, Hetzner Cloud is not asked at all.
    type: list
    elements: str
    default: []
  hetzner_token:
    description: The Hetzner Cloud API token of the project (read permission is enough).
    type: str
    env:
      - name: HCLOUD_TOKEN
  hetzner_endpoint:
    description: The Hetzner Cloud API endpoint to read instead of Hetzner's own (the try-out cloud).
    type: str
    env:
      - name: HCLOUD_ENDPOINT
'''
