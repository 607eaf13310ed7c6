# -*- coding: utf-8 -*-
# Copyright: ephemera.workspaces contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function
__metaclass__ = type


class ModuleDocFragment(object):
    """The option of the modules that act on what earlier runs recorded (destroy, reconcile, expire, archive, the
    readers of the status playbook)."""

    DOCUMENTATION = r'''
options:
  new_journal:
    description:
      - This module acts on what earlier runs recorded, so by default a journal that does not exist at the configured
        place is refused (a wrong path, a fresh container in AWX) instead of being started empty or read as empty.
      - Set it (the variable C(ephemera_new_journal), or E(EPHEMERA_NEW_JOURNAL)) to say that this is the first run of
        a controller that has recorded nothing yet; then the module behaves as if the empty journal were there.
    type: bool
    default: false
'''
