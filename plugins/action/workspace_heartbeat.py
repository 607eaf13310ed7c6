# -*- coding: utf-8 -*-
# Copyright: ephemera.workspaces contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Runs ephemera.workspaces.workspace_heartbeat in the worker process (see plugin_utils/in_process.py)."""

from ansible_collections.ephemera.workspaces.plugins.plugin_utils.in_process import InProcessAction


class ActionModule(InProcessAction):
    MODULE = 'workspace_heartbeat'
