# -*- coding: utf-8 -*-
# Copyright: ephemera.workspaces contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The options of doc fragment ephemera.workspaces.proxmox: how a module reaches the Proxmox VE API. The client
(client.py) reads the same declarations; nothing of it, nor proxmoxer or requests, is imported here."""

import collections

from ansible.module_utils.basic import env_fallback

# How messages name a resource of this provider: (what, where) (base.resource_label, Provider.label).
RESOURCE_LABEL = ('CT {id}', ' on {location}')
DEFAULT_PORT = 8006
DEFAULT_TIMEOUT = 30

# Connection options: the doc fragment ephemera.workspaces.proxmox documents them, these are their
# environment variables.
ENV_VARS = collections.OrderedDict([
    ('api_host', 'PROXMOX_HOST'),
    ('api_user', 'PROXMOX_USER'),
    ('api_password', 'PROXMOX_PASSWORD'),
    ('api_token_id', 'PROXMOX_TOKEN_ID'),
    ('api_token_secret', 'PROXMOX_TOKEN_SECRET'),
    ('validate_certs', 'PROXMOX_VALIDATE_CERTS'),
    ('ca_file', 'PROXMOX_CA_FILE'),
])


def connection_argument_spec():
    """The connection options of every module that talks to PVE (doc fragment ephemera.workspaces.proxmox)."""
    def env(name):
        return (env_fallback, [ENV_VARS[name]])
    return dict(
        api_host=dict(type='str', fallback=env('api_host')),
        api_port=dict(type='int', default=DEFAULT_PORT),
        api_user=dict(type='str', fallback=env('api_user')),
        api_password=dict(type='str', no_log=True, fallback=env('api_password')),
        api_token_id=dict(type='str', no_log=False, fallback=env('api_token_id')),
        api_token_secret=dict(type='str', no_log=True, fallback=env('api_token_secret')),
        validate_certs=dict(type='bool', default=True, fallback=env('validate_certs')),
        ca_file=dict(type='path', fallback=env('ca_file')),
        request_timeout=dict(type='int', default=DEFAULT_TIMEOUT),
    )


# The options this provider adds to a module (registry.provider_argument_spec).
argument_spec = connection_argument_spec
