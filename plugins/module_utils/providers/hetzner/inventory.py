# -*- coding: utf-8 -*-
# Copyright: ephemera.workspaces contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What the inventory plugin needs of Hetzner Cloud (base.InventoryHook): one listing of the servers that carry our
label, read per location, and which options an error is about. Neither hcloud nor the provider's code is imported
before it connects."""

from ansible_collections.ephemera.workspaces.plugins.module_utils.providers import base


class HetznerInventory(base.InventoryHook):

    name = 'hetzner'
    scope_option = 'hetzner_locations'
    sdk = 'hcloud on the controller (pip install hcloud)'

    def provider_class(self):
        # pylint: disable=import-outside-toplevel
        from ansible_collections.ephemera.workspaces.plugins.module_utils.providers.hetzner.provider import (
            HetznerProvider,
        )
        return HetznerProvider

    def params(self, option, scope):
        return dict(hetzner_location=scope, hetzner_token=option('hetzner_token'),
                    hetzner_endpoint=option('hetzner_endpoint'))

    def where(self, option, scope):
        return 'option hetzner_token (or HCLOUD_TOKEN) (location %s)' % scope


HOOK = HetznerInventory()
