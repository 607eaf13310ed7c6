# -*- coding: utf-8 -*-
"""The options of the folder provider (tests/providerkit): where its machines are written. Nothing is imported."""

from ansible.module_utils.basic import env_fallback

# How messages name a resource of this provider: (what, where) (base.resource_label, Provider.label).
RESOURCE_LABEL = ('machine {id}', ' in {location}')
PATH_ENV = 'EPHEMERA_FOLDER_PATH'


def argument_spec():
    """The folder provider's options: the folder (EPHEMERA_FOLDER_PATH) and the public key its machines let in."""
    return dict(
        folder_path=dict(type='path', fallback=(env_fallback, [PATH_ENV])),
        folder_ssh_public_key=dict(type='str', no_log=False),
    )
