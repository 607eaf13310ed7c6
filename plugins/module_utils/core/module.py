# -*- coding: utf-8 -*-
# Copyright: ephemera.workspaces contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The module base: the journal option, a journal that check mode never makes, the controller secret, and one way
to turn collection errors into a failure."""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import os

from ansible.module_utils.basic import env_fallback

from ansible_collections.ephemera.workspaces.plugins.module_utils.core import ownership
from ansible_collections.ephemera.workspaces.plugins.module_utils.core.errors import EphemeraError, JournalMissing
from ansible_collections.ephemera.workspaces.plugins.module_utils.core.journal import ENV_VAR, URL_ENV_VAR, Journal


def journal_argument_spec():
    """The ``journal_path`` and ``journal_url`` options, as documented in the ``ephemera.workspaces.journal`` doc
    fragment. The URL may carry a password: it is never shown (no_log)."""
    return dict(journal_path=dict(type='path', fallback=(env_fallback, [ENV_VAR])),
                journal_url=dict(type='str', no_log=True, fallback=(env_fallback, [URL_ENV_VAR])))


def controller_argument_spec(shutdown=False):
    """The options of the ``ephemera.workspaces.controller`` doc fragment (and its ``shutdown`` part)."""
    spec = dict(controller_secret=dict(type='str', no_log=True), task_timeout=dict(type='int', default=300),
                lock_timeout=dict(type='int', default=120))
    if shutdown:
        spec['shutdown_timeout'] = dict(type='int', default=60)
    return spec


def open_journal(module, create=True):
    """Open the journal named by the module's ``journal_path`` (or its fallbacks), failing the module cleanly.

    Check mode makes nothing: there a journal that does not exist yet is ``None`` (nothing was ever recorded), for
    the caller to report what it would do.
    """
    try:
        return Journal.open(module.params.get('journal_path'), create=create and not module.check_mode,
                            url=module.params.get('journal_url'))
    except JournalMissing as err:
        if module.check_mode and create:
            return None
        module.fail_json(msg=str(err), **err.details)
    except EphemeraError as err:
        module.fail_json(msg=str(err), **err.details)


def controller_secret(journal_path, given, check_mode):
    """The controller secret; in check mode, where none was made yet, a throwaway one instead of making the file
    (no marker made with it can exist)."""
    if check_mode and not given and not os.environ.get(ownership.SECRET_ENV) \
            and not os.path.exists(ownership.secret_path(journal_path)):
        return os.urandom(ownership.SECRET_BYTES)
    return ownership.load_secret(journal_path, given)


def fail_from(module, err, **result):
    """End the module with the error's message and details (details never hold secrets)."""
    result.update(err.details)
    module.fail_json(msg=str(err), **result)
