# -*- coding: utf-8 -*-
# Copyright: ephemera.workspaces contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The options of doc fragment ephemera.workspaces.hetzner: how a module reaches the Hetzner Cloud API and what a
server is created with. No SDK is imported here."""

from ansible.module_utils.basic import env_fallback

# How messages name a resource of this provider: (what, where) (base.resource_label, Provider.label).
RESOURCE_LABEL = ('server {id}', ' in {location}')


def hetzner_argument_spec():
    """The Hetzner Cloud options (the token: HCLOUD_TOKEN, the endpoint: HCLOUD_ENDPOINT)."""
    return dict(
        hetzner_token=dict(type='str', no_log=True, fallback=(env_fallback, ['HCLOUD_TOKEN'])),
        hetzner_endpoint=dict(type='str', fallback=(env_fallback, ['HCLOUD_ENDPOINT'])),
        hetzner_location=dict(type='str', default='fsn1'),
        hetzner_server_type=dict(type='str', default='cx22'),
        hetzner_ssh_key=dict(type='str', no_log=False),
        hetzner_ssh_public_key=dict(type='str', no_log=False),
        hetzner_networks=dict(type='list', elements='str', default=[]),
        hetzner_labels=dict(type='dict', default={}),
        hetzner_request_timeout=dict(type='int', default=10),
        hetzner_action_timeout=dict(type='int', default=60),
    )


# The options this provider adds to a module (registry.provider_argument_spec).
argument_spec = hetzner_argument_spec
