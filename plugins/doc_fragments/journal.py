# -*- coding: utf-8 -*-
# Copyright: ephemera.workspaces contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function
__metaclass__ = type


class ModuleDocFragment(object):

    DOCUMENTATION = r'''
options:
  journal_path:
    description:
      - Path of the journal, the SQLite file in which the collection records every workspace, its event log,
        operation intents, cleanup debt and idempotency records.
      - If not set, the environment variable E(EPHEMERA_JOURNAL) is used; if that is not set either,
        C($XDG_STATE_HOME/ephemera/journal.sqlite), or C(~/.local/state/ephemera/journal.sqlite) without
        E(XDG_STATE_HOME).
      - Every play that manages the same workspaces must use the same journal.
    type: path
'''
