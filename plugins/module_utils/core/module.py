# -*- coding: utf-8 -*-
# Copyright: ephemera.workspaces contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Pieces every module shares: the journal option, and one way to turn collection errors into a failure."""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

from ansible.module_utils.basic import env_fallback

from ansible_collections.ephemera.workspaces.plugins.module_utils.core.errors import EphemeraError
from ansible_collections.ephemera.workspaces.plugins.module_utils.core.journal import ENV_VAR, Journal


def journal_argument_spec():
    """The ``journal_path`` option, as documented in the ``ephemera.workspaces.journal`` doc fragment."""
    return dict(journal_path=dict(type='path', fallback=(env_fallback, [ENV_VAR])))


def open_journal(module, create=True):
    """Open the journal named by the module's ``journal_path`` (or its fallbacks), failing the module cleanly."""
    try:
        return Journal.open(module.params.get('journal_path'), create=create)
    except EphemeraError as err:
        module.fail_json(msg=str(err), **err.details)


def fail_from(module, err, **result):
    """End the module with the error's message and details (details never hold secrets)."""
    result.update(err.details)
    module.fail_json(msg=str(err), **result)
