# -*- coding: utf-8 -*-
"""What the inventory plugin needs of the folder provider: one listing of the folder that EPHEMERA_FOLDER_PATH
names (the inventory declares no option of this provider's)."""

from ansible_collections.ephemera.workspaces.plugins.module_utils.providers import base


class FolderInventory(base.InventoryHook):

    name = 'folder'
    scope_word = 'folder'
    sdk = 'nothing more'

    def provider_class(self):
        # pylint: disable=import-outside-toplevel
        from ansible_collections.ephemera.workspaces.plugins.module_utils.providers.folder.provider import (
            FolderProvider,
        )
        return FolderProvider

    def params(self, option, scope):
        return {}

    def where(self, option, scope):
        return 'the folder EPHEMERA_FOLDER_PATH names'


HOOK = FolderInventory()
