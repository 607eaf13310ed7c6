# -*- coding: utf-8 -*-
# Copyright: ephemera.workspaces contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The module base: the journal option, a journal that check mode never makes, the controller secret, and one way
to turn collection errors into a failure."""

import os

from ansible.module_utils.basic import env_fallback

from ansible_collections.ephemera.workspaces.plugins.module_utils.core import ownership
from ansible_collections.ephemera.workspaces.plugins.module_utils.core.errors import EphemeraError, JournalMissing
from ansible_collections.ephemera.workspaces.plugins.module_utils.core.journal import ENV_VAR, URL_ENV_VAR, Journal, resolve_path

NEW_JOURNAL_ENV = 'EPHEMERA_NEW_JOURNAL'
# The journal's meta key that holds the controller id (ownership.controller_id) of the secret that signs its markers.
MARKER_CONTROLLER = 'marker_controller'


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


def history_argument_spec():
    """The ``new_journal`` option, as documented in the ``ephemera.workspaces.history`` doc fragment: the modules of a
    run that expects history (destroy, reconcile, expire, archive, status) refuse a journal that does not exist."""
    return dict(new_journal=dict(type='bool', default=False, fallback=(env_fallback, [NEW_JOURNAL_ENV])))


def no_history(path):
    """The refusal of a run that expects history and finds no journal at ``path``."""
    return ('No journal at %s, and this run expects one: it acts on what earlier runs recorded. Nothing was made. If '
            'the journal lives elsewhere, point journal_path / %s at it (in AWX: the credential that injects it); if '
            'this controller really has never recorded anything, run again with -e ephemera_new_journal=true (the '
            'new_journal option, or %s=true).' % (path, ENV_VAR, NEW_JOURNAL_ENV))


def no_journal_in_database(location):
    """The refusal of a run that would start the journal in a PostgreSQL database without being told to."""
    return ('No journal in %s, and a run does not start one in a database on its own: a wrong journal_url (%s) or an '
            'empty database would hide every workspace recorded in the right one. Nothing was made. If the URL is '
            'wrong, correct it (in AWX: the credential that injects it); if this database is new and meant for the '
            'journal, run once with -e ephemera_new_journal=true (the new_journal option, or %s=true).'
            % (location, URL_ENV_VAR, NEW_JOURNAL_ENV))


def open_history(module, create=True):
    """:func:`open_journal` for a module that expects history: a journal that does not exist is refused unless the
    module's ``new_journal`` says this is a first run (then it behaves as :func:`open_journal`)."""
    if module.params.get('new_journal'):
        return open_journal(module, create=create)
    try:
        return Journal.open(module.params.get('journal_path'), create=False, url=module.params.get('journal_url'))
    except JournalMissing as err:
        module.fail_json(msg=no_history(err.details.get('path') or resolve_path(module.params.get('journal_path'))),
                         **err.details)
    except EphemeraError as err:
        module.fail_json(msg=str(err), **err.details)


def open_journal(module, create=True):
    """Open the journal named by the module's ``journal_path`` (or its fallbacks), failing the module cleanly.

    Check mode makes nothing: there a journal that does not exist yet is ``None`` (nothing was ever recorded), for
    the caller to report what it would do. A journal in a PostgreSQL database (``journal_url``) is started only with
    the module's ``new_journal``: a file is made where the controller was told, but a database that lacks the journal
    is as likely the wrong one.
    """
    url = module.params.get('journal_url')
    start = create and not module.check_mode and (not url or bool(module.params.get('new_journal')))
    try:
        return Journal.open(module.params.get('journal_path'), create=start, url=url)
    except JournalMissing as err:
        if module.check_mode and create:
            return None
        if create and url:
            module.fail_json(msg=no_journal_in_database(err.details.get('path') or 'the database of journal_url'),
                             **err.details)
        module.fail_json(msg=str(err), **err.details)
    except EphemeraError as err:
        module.fail_json(msg=str(err), **err.details)


def controller_secret(journal_path, given, check_mode, journal=None, warn=None):
    """The controller secret; in check mode, where none was made yet, a throwaway one instead of making the file
    (no marker made with it can exist).

    With ``journal`` (the open journal) the secret is an identity, never silently replaced: the journal records the
    controller id of the secret that signs its markers on first use, a secret that does not match it is refused, and
    so is making a new secret for a journal that already records workspaces (or a controller id). A secret made here
    is announced through ``warn`` (where it is, and that it must be kept). A journal that is no file (a URL) never
    gets a secret file: its secret is given (controller_secret, EPHEMERA_CONTROLLER_SECRET).
    """
    recorded = journal.meta_value(MARKER_CONTROLLER) if journal is not None else None
    path = ownership.secret_path(journal_path)
    if not given and not os.environ.get(ownership.SECRET_ENV) and not os.path.exists(path):
        # (Looked at again last: a fork of the same first run may have made the secret, and its record, meanwhile.)
        if journal is not None and (recorded or journal.list_workspaces()) and not os.path.exists(path):
            raise ownership.MarkerError(
                'The journal %s records workspaces%s, but there is no controller secret (controller_secret, %s or %s). '
                'A new secret would verify none of their markers, so none was made and nothing was changed. Restore '
                'the secret from its backup (the vault, the AWX credential) and run again.'
                % (journal_path, ' of controller %s' % recorded if recorded else '', ownership.SECRET_ENV, path),
                path=path)
        if check_mode and not os.path.exists(path):
            return os.urandom(ownership.SECRET_BYTES)
        if '://' in journal_path:
            raise ownership.MarkerError(
                'The journal %s is a database, so no controller secret is made beside it: give one with '
                'controller_secret or %s (make it with "openssl rand -hex 32", keep it in a vault or an AWX '
                'credential; every controller that shares this journal needs the same one).'
                % (journal_path, ownership.SECRET_ENV))
        existed = os.path.exists(path)
        secret = ownership.load_secret(journal_path, given)
        if warn is not None and not existed:
            warn('Made a new controller secret at %s (mode 0600): it signs the ownership markers of every workspace '
                 'this journal records. Keep it and back it up with the journal (or move it into a vault and give '
                 'it as controller_secret / %s); without it no workspace made from now on can be destroyed or '
                 'adopted.' % (path, ownership.SECRET_ENV))
    else:
        secret = ownership.load_secret(journal_path, given)
    if journal is not None:
        mine = ownership.controller_id(secret)
        if recorded is None and not check_mode and not journal.readonly:
            recorded = journal.claim_meta_value(MARKER_CONTROLLER, mine)
        if recorded is not None and recorded != mine:
            raise ownership.MarkerError(
                'The controller secret (from %s) is not the one of the journal %s: the journal records controller %s, '
                'this secret is controller %s. Its markers would not verify, so nothing was changed. Give the '
                'secret this journal was used with (controller_secret, %s), or the journal that belongs to this '
                'secret.' % (_secret_source(given, path), journal_path, recorded, mine, ownership.SECRET_ENV),
                path=path)
    return secret


def _secret_source(given, path):
    if given:
        return 'controller_secret'
    if os.environ.get(ownership.SECRET_ENV):
        return ownership.SECRET_ENV
    return path


def fail_from(module, err, **result):
    """End the module with the error's message and details (details never hold secrets)."""
    result.update(err.details)
    module.fail_json(msg=str(err), **result)
