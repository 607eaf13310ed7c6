# -*- coding: utf-8 -*-
# Copyright: ephemera.workspaces contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Archiving a workspace's work before it goes away, and telling whether it holds work nobody saved.

Inspection never touches the checkout's working tree, index or refs. It copies the index into a
temporary index file and builds three trees from it: the index as it is, the tracked files as
they are on disk (``git add -u``), and everything on disk that is not ignored (``git add -A``).
Those trees, HEAD and the local branches make the *state digest*: two inspections of an unchanged
checkout give the same digest, and any edit, commit, staged change or new file changes it.

An archive then either pushes a commit of the whole tree, with HEAD as its parent, to the
workspace's own branch on the remote, or (no push, or the remote refused it) captures a git
bundle of the commits no remote has, binary patches of the tracked changes (``worktree.patch``)
and of the index (``index.patch``), and, when asked, a tar of untracked files chosen by pattern.
Patches are diffs between trees recorded at inspection, so they match the digest exactly even
while the agent keeps working. ``metadata.json`` (the journal's record, the runner's status, what
was captured, how to restore it) is written last: an archive directory without it is incomplete.

The journal keeps the last archive (path, digest, pushed commit) in ``facts.archive``; a check
compares the checkout's digest with it to tell saved work from unsaved work.
"""

import datetime
import errno
import hashlib
import json
import os
import posixpath
import re
import shutil
import tempfile
import time

from ansible.module_utils.basic import env_fallback

from ansible_collections.ephemera.workspaces.plugins.module_utils.guest import operations as guest_ops
from ansible_collections.ephemera.workspaces.plugins.module_utils.core import gitlogin
from ansible_collections.ephemera.workspaces.plugins.module_utils.core.durable import durable_writer, fsync_dir, write_durable
from ansible_collections.ephemera.workspaces.plugins.module_utils.core.errors import EphemeraError
# The checkout's git scripts and parsers (guest/gitwork.py); valid_branch is imported from here by callers too.
from ansible_collections.ephemera.workspaces.plugins.module_utils.guest.gitwork import (  # noqa: F401 pylint: disable=unused-import
    ArchiveError,
    BUNDLE,
    CheckoutState,
    EXTRACT_PROGRAM,
    GIT_ENV,
    INDEX_PATCH,
    InspectionRefused,
    LIST_LIMIT,
    OBJECT_ID,
    RESTORE_UNTRACKED,
    TAR_PROGRAM,
    UNMERGED,
    UNTRACKED_TAR,
    WORKTREE_PATCH,
    bundle_ref,
    inspect_script,
    parse_lines,
    restore_commands,
    valid_branch,
    valid_ref,
)
from ansible_collections.ephemera.workspaces.plugins.module_utils.guest.operations import agent_command, as_agent, q
from ansible_collections.ephemera.workspaces.plugins.module_utils.core.queue import Queue
from ansible_collections.ephemera.workspaces.plugins.module_utils.guest.ssh import Guest, SshCommandFailed, SshError, tail
from ansible_collections.ephemera.workspaces.plugins.module_utils.guest.ssh import wait_for_guest

ENV_VAR = 'EPHEMERA_ARCHIVE_DIR'
DEFAULT_PUSH_PREFIX = 'ephemera/'
FORMAT = 1
METADATA = 'metadata.json'

# Verdicts of a check.
NOTHING = 'nothing'     # nothing that could be lost: no checkout, destroyed, or everything is on a remote
SAVED = 'saved'         # the current state was archived or pushed, and that archive is still there
UNSAVED = 'unsaved'     # work that exists only in the workspace
UNKNOWN = 'unknown'     # the workspace holds a checkout that cannot be inspected

# Exit status of a capture that found the refs moved since the inspection.
CHANGED_DURING_CAPTURE = 75
# Pinned so that the user's diff configuration (colour, prefixes, order files, external tools) never
# reaches a patch.
DIFF = 'git diff --binary --no-color --no-ext-diff --no-textconv --src-prefix=a/ --dst-prefix=b/ -O/dev/null'
# Caps on what the agent's checkout may hand over: one captured file, the objects of a push, an inspection's output.
MAX_CAPTURE = 1024 * 1024 * 1024
MAX_PUSH_PACK = 2 * 1024 * 1024 * 1024
MAX_INSPECTION = 16 * 1024 * 1024
# Exit status of a capture whose file passed its cap.
CAPTURE_TOO_LARGE = 77
AUTHOR_ENV = ('GIT_AUTHOR_NAME="ephemera archive" GIT_AUTHOR_EMAIL=archive@ephemera.invalid '
              'GIT_COMMITTER_NAME="ephemera archive" GIT_COMMITTER_EMAIL=archive@ephemera.invalid')


def argument_spec():
    """The options of an archive (the ``ephemera.workspaces.archive`` doc fragment), for every module that makes one."""
    return dict(
        archive_dir=dict(type='path', fallback=(env_fallback, [ENV_VAR])),
        push=dict(type='bool', default=True),
        push_remote=dict(type='str', default='origin'),
        push_prefix=dict(type='str', default=DEFAULT_PUSH_PREFIX),
        include_untracked=dict(type='list', elements='str', default=[]),
        git_token=dict(type='str', no_log=True),
        git_username=dict(type='str', default='git'),
        ssh_private_key=dict(type='path'),
        ssh_timeout=dict(type='int', default=30),
        command_timeout=dict(type='int', default=600),
        push_timeout=dict(type='int', default=300),
    )


# ------------------------------------------------------------------ the archive directory

def resolve_archive_dir(option, journal_path):
    """The archive directory: the option, else ``EPHEMERA_ARCHIVE_DIR``, else ``archives`` next to the journal (for a
    journal in a database, which has no directory: the per-user state directory's ``ephemera/archives``)."""
    path = option or os.environ.get(ENV_VAR)
    if not path and '://' in (journal_path or ''):
        base = os.environ.get('XDG_STATE_HOME') or os.path.join(os.path.expanduser('~'), '.local', 'state')
        path = os.path.join(base, 'ephemera', 'archives')
    if not path:
        path = os.path.join(os.path.dirname(journal_path), 'archives')
    return os.path.abspath(os.path.expanduser(path))


def _nearest_existing(path):
    while not os.path.exists(path):
        parent = os.path.dirname(path)
        if parent == path:
            break
        path = parent
    return path


def check_archive_dir(path, create=True):
    """Make sure archives can be written under ``path`` (made when missing, unless ``create`` is False).

    A file is written and removed to find out, because permission bits do not tell (root ignores
    them; a read-only file system does not show in them). Raises ArchiveError naming the directory.
    """
    hint = 'Give a writable directory as archive_dir (or %s).' % ENV_VAR
    if os.path.exists(path) and not os.path.isdir(path):
        raise ArchiveError('The archive directory %s is not a directory. %s' % (path, hint), archive_dir=path)
    probe_in = path
    if not os.path.isdir(path):
        if not create:
            probe_in = _nearest_existing(path)
            if not os.path.isdir(probe_in):
                raise ArchiveError('The archive directory %s cannot be made: %s is not a directory. %s'
                                   % (path, probe_in, hint), archive_dir=path)
        else:
            try:
                # Another host of the same play may make it between the check above and here.
                os.makedirs(path, 0o700, exist_ok=True)
            except OSError as exc:
                raise ArchiveError('Cannot make the archive directory %s: %s. %s' % (path, exc.strerror, hint),
                                   archive_dir=path)
    try:
        fd, probe = tempfile.mkstemp(prefix='.write-test.', suffix='.tmp', dir=probe_in)
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        raise ArchiveError('Cannot write to the archive directory %s: %s. Nothing was archived. %s'
                           % (path, exc.strerror, hint), archive_dir=path)
    return path


def _make_dir(path):
    """Make ``path`` (0700) and its missing parents durably: each new entry is fsynced into its parent."""
    missing = []
    while not os.path.isdir(path):
        missing.append(path)
        path = os.path.dirname(path)
    for directory in reversed(missing):
        try:
            os.mkdir(directory, 0o700)
        except OSError as exc:
            if exc.errno != errno.EEXIST:
                raise
        fsync_dir(os.path.dirname(directory))


def new_archive_path(archive_dir, name, now):
    """``<archive_dir>/<name>/<UTC timestamp>``, made here; a second archive in the same second gets a suffix."""
    stamp = datetime.datetime.fromtimestamp(now, tz=datetime.timezone.utc).strftime('%Y%m%dT%H%M%SZ')
    parent = os.path.join(archive_dir, name)
    _make_dir(parent)
    for attempt in range(100):
        path = os.path.join(parent, stamp if attempt == 0 else '%s-%d' % (stamp, attempt))
        try:
            os.mkdir(path, 0o700)
        except OSError as exc:
            if exc.errno == errno.EEXIST:
                continue
            raise
        fsync_dir(parent)
        return path
    raise ArchiveError('Too many archives of %s in one second under %s.' % (name, parent))


class _HashingWriter:
    """Counts and hashes what passes into a local file; a local write error becomes an ArchiveError."""

    def __init__(self, out, path):
        self.out = out
        self.path = path
        self.sha256 = hashlib.sha256()
        self.size = 0

    def write(self, data):
        try:
            self.out.write(data)
        except (IOError, OSError) as exc:
            raise ArchiveError('Cannot write %s: %s. The archive is incomplete; nothing was recorded as archived.'
                               % (self.path, exc.strerror or exc), path=self.path)
        self.sha256.update(data)
        self.size += len(data)


# ----------------------------------------------------------------------- small helpers

_URL_USERINFO = re.compile(r'^([a-zA-Z][a-zA-Z0-9+.-]*://)([^/@]*)@')


def redact_url(url):
    """``url`` without a password or token in its user part (``https://user:token@host`` -> ``https://****@host``).

    A bare user name over SSH (``ssh://git@host``) stays; over HTTP(S) the user part may itself be a
    token, so it goes.
    """
    match = _URL_USERINFO.match(url or '')
    if not match:
        return url
    scheme, userinfo = match.group(1), match.group(2)
    if ':' in userinfo or scheme.lower().startswith('http'):
        return '%s****@%s' % (scheme, url[match.end():])
    return url


def iso(ts):
    return datetime.datetime.fromtimestamp(ts, tz=datetime.timezone.utc).strftime('%Y-%m-%dT%H:%M:%SZ')


def push_refusal(output):
    """The reason in ``git push --porcelain`` output: the remote's own words and the refused ref's status."""
    said = []
    for line in output.splitlines():
        if line.startswith('remote:') and line[7:].strip():
            said.append(line[7:].strip())
        elif line.startswith('!'):
            said.append(line.rsplit('\t', 1)[-1].strip())
    return '; '.join(said) or tail(output, 6)


def layout_of(ws):
    req = ws['params']
    return guest_ops.Layout(req.get('guest_root') or '/', ws['vmid'], req.get('checkout_path') or '/workspace/repo',
                            req.get('agent_user') or 'agent')


def guest_of(ws, key_file=None):
    """A Guest for the workspace's record: its address, SSH settings and pinned host key."""
    req = ws['params']
    return Guest(ws['address'], port=req.get('ssh_port') or 22, user=req.get('ssh_user') or 'root',
                 key_file=key_file or req.get('ssh_key_path'),
                 host_key=[(ws.get('facts') or {}).get('host_key'), (ws.get('facts') or {}).get('host_key_next')])


# --------------------------------------------------------------------------- the flow

class ArchiveFlow:
    """Check or archive one workspace. ``params`` are the module's options."""

    def __init__(self, journal, params, claim=None, check_mode=False):
        self.journal = journal
        self.params = params
        self.claim = claim
        self.check_mode = check_mode
        self.name = params['name']
        self.ws = journal.get_workspace(self.name)
        self.archive_dir = resolve_archive_dir(params.get('archive_dir'), journal.path)
        self.notes = []
        self.untracked_included = 0

    # -- helpers --------------------------------------------------------------

    @property
    def recorded(self):
        return ((self.ws or {}).get('facts') or {}).get('archive')

    def _save(self, action, kind='observed', detail=None, **fields):
        extra = {'claim': self.claim} if self.claim is not None else {}
        self.ws = self.journal.update_workspace(self.name, self.ws['generation'],
                                                event={'kind': kind, 'action': action, 'detail': detail or fields},
                                                **dict(fields, **extra))
        return self.ws

    def _set_fact(self, action, key, value, kind='observed', detail=None):
        facts = dict(self.ws['facts'] or {})
        facts[key] = value
        return self._save(action, kind=kind, detail=detail, facts=facts)

    def _run(self, guest, script, what, check=True, timeout=None, max_output=MAX_INSPECTION):
        """``script`` run as the agent, in the agent's checkout: what it prints is the agent's to choose."""
        layout = layout_of(self.ws)
        return guest.run(as_agent(layout, self.ws['params'].get('ssh_user') or 'root', 'sh -s'), stdin=script,
                         check=check, timeout=timeout or self.params.get('command_timeout') or 600, what=what,
                         max_output=max_output)

    def _run_as_root(self, guest, script, what, check=True, timeout=None, stdin_prefix=None):
        """``script`` run as the SSH user (root), never in the agent's checkout or with its configuration.
        ``stdin_prefix`` (a secret line) comes first on standard input; the script reads it with ``read``."""
        stdin = (stdin_prefix or '') + script
        command = 'sh -c %s' % q('IFS= read -r EPHEMERA_GIT_TOKEN; export EPHEMERA_GIT_TOKEN; exec sh -s') \
            if stdin_prefix else 'sh -s'
        return guest.run(command, stdin=stdin, check=check, what=what,
                         timeout=timeout or self.params.get('command_timeout') or 600, max_output=MAX_INSPECTION)

    def _connect(self):
        key_file = self.params.get('ssh_private_key')
        return wait_for_guest(lambda: guest_of(self.ws, key_file), self.params.get('ssh_timeout') or 30)

    def _archive_present(self, record):
        """True when the recorded archive still holds the work: its files are on disk, or a push holds it all."""
        if not record:
            return False
        needed = record.get('work_files') or []
        if not needed:
            return bool(record.get('pushed_commit')) or os.path.isfile(os.path.join(record.get('path') or '', METADATA))
        return all(os.path.isfile(os.path.join(record.get('path') or '', name)) for name in needed + [METADATA])

    def _refuse_destroying(self):
        """An archive of a workspace being destroyed runs only as part of that destruction."""
        if not (self.ws['desired_state'] == 'destroyed' or self.ws['status'] == 'destroying'):
            return
        if self.claim is not None:
            entry = Queue(self.journal).get(self.claim.get('entry_id'))
            if entry and entry['kind'] == 'destroy' and entry['target'] == self.name:
                return
        raise ArchiveError('Workspace %r is being destroyed; it takes no new archive. The destruction archives it '
                           'first unless it was told not to.' % self.name, workspace=self.name)

    # -- the verdict ----------------------------------------------------------

    def assess(self):
        """(verdict, reason, state, guest). ``guest`` is connected when the checkout was inspected."""
        if self.ws is None:
            raise ArchiveError('Workspace %r is not recorded in the journal %s. Check the name and the journal path.'
                               % (self.name, self.journal.path), workspace=self.name)
        if self.ws['status'] == 'destroyed':
            return NOTHING, 'workspace %s is destroyed; its checkout is gone' % self.name, None, None
        if 'checkout' not in (self.ws['progress'] or {}):
            return NOTHING, 'workspace %s never got a checkout, so it holds no work' % self.name, None, None
        layout = layout_of(self.ws)
        try:
            guest = self._connect()
        except SshError as err:
            return (UNKNOWN, 'workspace %s has a checkout but its guest cannot be reached (%s); whether it holds unsaved '
                    'work is unknown' % (self.name, err), None, None)
        try:
            result = self._run(guest, inspect_script(layout.checkout, self.params.get('push_remote') or 'origin'),
                               'inspect the checkout')
        except SshError as err:
            guest.close()
            said = err.details.get('stderr_tail') or err
            return UNKNOWN, 'the checkout of %s cannot be inspected (%s)' % (self.name, said), None, None
        try:
            state = CheckoutState.parse(result.stdout)
        except InspectionRefused as err:
            guest.close()
            return (UNKNOWN, 'the inspection of the checkout of %s printed something else than the inspection script '
                    'prints (%s): the checkout is not in a state this collection can read, so whether it holds unsaved '
                    'work is unknown' % (self.name, err), None, None)
        if state.missing:
            guest.close()
            return NOTHING, 'the checkout %s of %s is gone' % (layout.checkout, self.name), None, None
        if state.clean:
            return (NOTHING, 'everything in %s is on a remote (HEAD %s%s)' % (
                self.name, (state.head or '-')[:12], ' on %s' % state.branch if state.branch else ''), state, guest)
        record = self.recorded
        if record and record.get('digest') == state.digest:
            if self._archive_present(record):
                if record.get('pushed_ref') and not record.get('work_files'):
                    where = 'pushed to %s' % record['pushed_ref']
                elif record.get('pushed_ref'):
                    where = 'pushed to %s and archived in %s' % (record['pushed_ref'], record['path'])
                else:
                    where = 'archived in %s' % record['path']
                return SAVED, 'the current state of %s was %s at %s' % (self.name, where, record.get('at')), state, guest
            self.notes.append('the archive recorded at %s is missing or incomplete on this controller' % record.get('path'))
        return UNSAVED, 'workspace %s holds work that was never pushed or archived: %s' % (
            self.name, state.summary()), state, guest

    def check(self):
        verdict, reason, state, guest = self.assess()
        if guest is not None:
            guest.close()
        return self._result(False, verdict, reason, state, self.recorded)

    # -- before a destruction -------------------------------------------------

    def guard(self, present, running, archive=True, discard=False, noun='container'):
        """The step before a destruction: archive (or, with ``archive`` false, check) the workspace's unsaved work,
        or refuse the destruction that would lose it. ``present``/``running`` say what the provider shows of the
        workspace's ``noun`` (its container, instance, set).

        With ``discard`` the work may be lost: a stopped machine, an archive that cannot be made and unsaved work
        no longer stop the destruction. Returns (changed, msg, result).
        """
        if self.ws is None or self.ws['desired_state'] == 'destroyed':
            return False, 'guard: the destruction was decided earlier; the work was dealt with then', {}
        if not present:
            return False, 'guard: the %s is gone, and its work with it' % noun, {}
        if 'checkout' not in (self.ws['progress'] or {}):
            # Stopped or running, it holds no work of the agent's: a create that failed before its checkout.
            return False, 'guard: %s never got a checkout, so it holds no work' % self.name, {}
        if not running:
            if discard:
                return False, 'guard: the %s is stopped; its work is discarded as asked' % noun, {}
            raise ArchiveError("%s's %s is stopped, so whether it holds unsaved work cannot be checked. Start "
                               "it and destroy again (its work is archived first), or destroy with "
                               "discard_unsaved_work=true to lose it." % (self.name, noun), workspace=self.name)
        if not archive:
            result = self.check()
            if result['unsaved'] and not discard:
                raise ArchiveError('%s holds work that was never pushed or archived (%s). Archive it '
                                   '(ephemera.workspaces.archive), or destroy with discard_unsaved_work=true to lose '
                                   'it.' % (self.name, result['msg']), workspace=self.name)
            return False, 'guard: %s' % result['msg'], result
        try:
            result = self.archive()
        except EphemeraError as err:
            if not discard:
                raise
            return False, 'guard: no archive (%s); the work is discarded as asked' % err, {}
        return result['changed'], 'guard: %s' % result['msg'], result

    # -- archive --------------------------------------------------------------

    def archive(self):
        if self.ws is not None and not self.check_mode:
            check_archive_dir(self.archive_dir)
        elif self.ws is not None:
            check_archive_dir(self.archive_dir, create=False)
        if self.ws is not None and self.ws['status'] != 'destroyed':
            self._refuse_destroying()
        verdict, reason, state, guest = self.assess()
        if verdict == UNKNOWN:
            raise ArchiveError('Cannot archive: %s. Nothing was archived. Start the workspace (or fix SSH to it) and run '
                               'the archive again.' % reason, workspace=self.name)
        if state is None:
            return self._result(False, verdict, reason, None, self.recorded)
        try:
            record = self.recorded
            if verdict == SAVED or (record and record.get('digest') == state.digest and self._archive_present(record)):
                return self._result(False, SAVED, reason, state, record)
            if self.check_mode:
                return self._result(True, verdict, 'would archive: %s' % state.summary(), state, record)
            return self._archive(guest, state)
        finally:
            guest.close()

    def _archive(self, guest, state):
        now = time.time()
        path = new_archive_path(self.archive_dir, self.name, now)
        try:
            return self._archive_into(guest, state, path, now)
        except BaseException:
            # An archive that did not finish is not left to look like one; the work is still in the workspace.
            shutil.rmtree(path, ignore_errors=True)
            raise

    def _archive_into(self, guest, state, path, now):
        if self.params.get('push', True):
            push = self._push(guest, state)
        else:
            push = {'attempted': False, 'ok': False, 'skipped': 'push is off'}
            if not state.clean:
                self.notes.append('push is off: captured a bundle and patches instead')
        files, bundle_refs = self._capture(guest, state, path, pushed=push.get('ok'))
        try:
            runner = guest_ops.runner_call(guest, layout_of(self.ws), self.ws['params'].get('ssh_user') or 'root',
                                           {'op': 'status'})
        except SshError as err:
            # What the agent was doing is a note in the metadata; the work is captured already.
            runner = {'ok': False, 'alive': None, 'error': 'the runner could not be asked: %s' % err}
        if UNTRACKED_TAR in files:
            # The checked extractor the restore commands run on untracked.tar, from the controller, not the guest.
            write_durable(os.path.join(path, RESTORE_UNTRACKED), EXTRACT_PROGRAM)
            files[RESTORE_UNTRACKED] = {'bytes': len(EXTRACT_PROGRAM.encode('utf-8')),
                                        'sha256': hashlib.sha256(EXTRACT_PROGRAM.encode('utf-8')).hexdigest()}
        metadata = self._metadata(state, path, now, push, files, bundle_refs, runner)
        write_durable(os.path.join(path, METADATA), json.dumps(metadata, indent=2, sort_keys=True, default=str) + '\n')
        record = {
            'path': path, 'at': iso(now), 'head': state.head, 'branch': state.branch, 'digest': state.digest,
            'pushed_ref': push.get('ref') if push.get('ok') else None,
            'pushed_commit': push.get('commit') if push.get('ok') else None,
            'remote': redact_url(self.ws['params'].get('repo') or self.ws.get('repo')),
            'files': sorted(list(files) + [METADATA]),
            'work_files': sorted(name for name in files if name not in (UNTRACKED_TAR, RESTORE_UNTRACKED)),
        }
        self._set_fact('archived', 'archive', record, detail=dict(record, notes=self.notes))
        return self._result(True, NOTHING if state.clean else SAVED, 'archived %s: %s' % (self.name, self._what(record, push)),
                            state, record, push=push)

    @staticmethod
    def _what(record, push):
        parts = []
        if push.get('ok'):
            parts.append('pushed %s to %s' % ((push.get('commit') or '')[:12], push['ref']))
        data = [name for name in record['files'] if name != METADATA]
        parts.append('%s in %s' % (', '.join(data + [METADATA]), record['path']))
        return '; '.join(parts)

    # -- push -----------------------------------------------------------------

    def _push(self, guest, state):
        """Push a commit of everything to the workspace's own branch; a dict saying what happened.

        The agent owns the checkout, its configuration and its remotes, so none of them takes part: the
        agent's process only hands over the commit's objects as a pack on a pipe, and root, in a fresh
        repository of its own (a root-only directory, no system or global configuration, no credential
        helper, no hooks), pushes the commit to the repository URL the journal holds. A token travels on
        the standard input of root's command into its environment, for a helper that answers only for that
        repository's origin; the agent never sees it.
        """
        url = self.ws['params'].get('repo') or self.ws.get('repo')
        remote = redact_url(url)
        ref = 'refs/heads/%s%s' % (self.params.get('push_prefix', DEFAULT_PUSH_PREFIX), self.name)
        outcome = {'attempted': False, 'ok': False, 'remote': remote, 'ref': ref, 'commit': None, 'error': None,
                   'skipped': None}
        if state.tree == state.head_tree and state.head not in [c['commit'] for c in state.unpushed]:
            outcome['skipped'] = 'HEAD and the working tree are on a remote already'
            return outcome
        refusal = self._push_refusal(url, ref, state)
        if refusal:
            outcome['skipped'] = refusal
            self.notes.append('no push: %s; captured a bundle and patches instead' % refusal)
            return outcome
        outcome['attempted'] = True
        token = self.params.get('git_token')
        work = None
        try:
            commit = state.head if state.tree == state.head_tree else self._commit_everything(guest, state)
            outcome['commit'] = commit
            work, error = self._push_repository(guest, commit)
            if error:
                return self._push_failed(outcome, error)
            current, error = self._remote_value(guest, work, url, ref)
            if error:
                return self._push_failed(outcome, error)
            if current == commit:
                outcome['ok'] = True
                return outcome
            # Ours: the commit last confirmed on that branch, or one dispatched by a run that died before it heard back.
            last = (self.ws['facts'] or {}).get('archive_push') or {}
            ours = [last.get('confirmed'), last.get('dispatched')] if last.get('ref') == ref else []
            if current and current not in ours:
                return self._push_failed(outcome, '%s on %s holds commit %s, which this workspace did not push; it was '
                                                  'left as it is' % (ref, remote, current[:12]))
            pushing = {'remote': remote, 'ref': ref, 'dispatched': commit, 'confirmed': current or None,
                       'at': iso(time.time())}
            self._set_fact('archive_push', 'archive_push', pushing, kind='dispatched')
            script = '\n'.join(['set -eu', GIT_ENV] + self._git_login_lines(url, work) + [
                'cd %s' % q(work + '/repo'),
                'git %s push --porcelain --no-verify --force-with-lease=%s:%s %s %s:%s 2>&1' % (
                    self._git_options(), q(ref), current, q(url), commit, q(ref))])
            result = self._run_as_root(guest, script, 'push the archive', check=False,
                                       timeout=self.params.get('push_timeout') or 300,
                                       stdin_prefix=(token + '\n') if token else None)
            if result.rc != 0:
                return self._push_failed(outcome, 'the remote refused the push: %s' % push_refusal(result.stdout))
            outcome['ok'] = True
            self._set_fact('archive_pushed', 'archive_push', dict(pushing, confirmed=commit))
            return outcome
        finally:
            if work:
                guest.run(['rm', '-rf', work], check=False, what='remove the push repository')

    def _push_refusal(self, url, ref, state):
        """Why no push is tried (text), or None."""
        if state.head is None:
            return 'the checkout has no commit yet'
        if not url:
            return 'the journal holds no repository URL for the workspace'
        if not valid_ref(ref):
            return 'the branch %r is not a name git accepts (check push_prefix)' % ref
        try:
            gitlogin.check_token_transport(url, self.params.get('git_token'))
        except gitlogin.GitLoginError as err:
            return str(err)
        return None

    def _git_options(self):
        options = gitlogin.NO_HELPERS + ['-c', 'core.hooksPath=/dev/null']
        if self.params.get('git_token'):
            options += gitlogin.NO_REDIRECTS
        return ' '.join(q(option) for option in options)

    def _git_login_lines(self, url, work):
        """Shell lines for root's git that reaches ``url``: its own HOME, and with a token the helper's environment
        (the token itself, EPHEMERA_GIT_TOKEN, was read from standard input before the script)."""
        lines = ['export HOME=%s GIT_SSH_COMMAND="ssh -o BatchMode=yes"' % q(work)]
        token = self.params.get('git_token')
        if token:
            env = gitlogin.askpass_env(url, self.params.get('git_username') or 'git', token)
            del env['EPHEMERA_GIT_TOKEN']
            lines.append('export GIT_ASKPASS=%s %s' % (q(work + '/askpass'), ' '.join(
                '%s=%s' % (k, q(v)) for k, v in sorted(env.items()))))
        return lines

    def _push_repository(self, guest, commit):
        """(root's directory with a fresh bare repository holding ``commit`` and its history, None) or (None, error).

        The agent's git writes a pack of the commit's objects to a pipe; root's git indexes it (checking every
        object) in a repository under the root-only private directory. At most MAX_PUSH_PACK bytes are taken.
        """
        layout = layout_of(self.ws)
        ssh_user = self.ws['params'].get('ssh_user') or 'root'
        pack = '\n'.join(['set -eu', GIT_ENV, 'cd %s' % q(layout.checkout),
                          'echo %s | git pack-objects --revs --stdout -q' % commit])
        script = '\n'.join([
            'set -eu',
            GIT_ENV,
            'mkdir -p %s && chmod 0700 %s' % (q(layout.private), q(layout.private)),
            # What a run killed part way left (one archive of a workspace runs at a time: its queue sees to it).
            'rm -rf %s/push.* %s/archive.*' % (q(layout.private), q(layout.private)),
            'w=$(mktemp -d %s)' % q(posixpath.join(layout.private, 'push.XXXXXX')),
            'echo "work $w"',
            'cat >"$w/askpass" <<\'EPHEMERA_ASKPASS\'',
            gitlogin.ASKPASS.rstrip('\n'),
            'EPHEMERA_ASKPASS',
            'chmod 0700 "$w/askpass"',
            'git init -q --bare --template= "$w/repo"',
            '{ %s </dev/null; } | head -c %d | git -C "$w/repo" index-pack --stdin >/dev/null' % (
                agent_command(layout, ssh_user, pack), MAX_PUSH_PACK + 1),
            'git -C "$w/repo" cat-file -e %s^{commit}' % commit,
            'echo "ready 1"',
        ])
        result = self._run_as_root(guest, script, 'hand the archive commit to root', check=False)
        values = parse_lines(result.stdout)
        work = values.get('work') or None
        if result.rc != 0 or values.get('ready') != '1':
            return work, 'the commit could not be handed over for the push: %s' % tail(result.stderr or result.stdout, 4)
        if not work or not work.startswith(layout.private + '/'):
            return None, 'the push repository could not be made'
        return work, None

    def _commit_everything(self, guest, state):
        """A commit of the inspected tree (everything not ignored) with HEAD as parent; no ref, index or file changes."""
        message = ('ephemera: archive of workspace %s' % self.name,
                   'Everything in the checkout at %s: HEAD %s%s with its uncommitted changes and untracked files.'
                   % (iso(time.time()), state.head, ' (branch %s)' % state.branch if state.branch else ''))
        script = '\n'.join(['set -eu', GIT_ENV, 'cd %s' % q(layout_of(self.ws).checkout),
                            '%s git commit-tree --no-gpg-sign %s -p %s -m %s -m %s' % (
                                AUTHOR_ENV, state.tree, state.head, q(message[0]), q(message[1]))])
        commit = self._run(guest, script, 'commit the archive').stdout.strip()
        if not OBJECT_ID.match(commit):
            raise ArchiveError('Making the archive commit of %s printed %r, not a commit id.' % (self.name, commit[:80]),
                               workspace=self.name)
        return commit

    def _remote_value(self, guest, work, url, ref):
        """(commit ``ref`` holds on the remote, '' when absent; error text when the remote cannot be read)."""
        token = self.params.get('git_token')
        script = '\n'.join(['set -eu', GIT_ENV] + self._git_login_lines(url, work) + [
            'cd %s' % q(work + '/repo'),
            'git %s ls-remote --refs %s %s 2>&1' % (self._git_options(), q(url), q(ref))])
        result = self._run_as_root(guest, script, 'read the remote', check=False,
                                   timeout=self.params.get('push_timeout') or 300,
                                   stdin_prefix=(token + '\n') if token else None)
        if result.rc != 0:
            return None, 'cannot read %s: %s' % (redact_url(url), tail(result.stdout, 6))
        for line in result.stdout.splitlines():
            parts = line.split()
            if len(parts) == 2 and parts[1] == ref and OBJECT_ID.match(parts[0]):
                return parts[0], None
        return '', None

    def _push_failed(self, outcome, error):
        # The remote's words may be long: what reaches the journal and the notes is bounded.
        error = error if len(error) <= 2000 else error[:2000] + '...'
        outcome['error'] = error
        self.notes.append('push to %s %s failed (%s); captured a bundle and patches instead'
                          % (outcome['remote'], outcome['ref'], error))
        self._save('archive_push_failed', detail={'remote': outcome['remote'], 'ref': outcome['ref'], 'error': error})
        return outcome

    # -- capture --------------------------------------------------------------

    def _capture(self, guest, state, path, pushed):
        """Make the archive's files on the guest, copy them into ``path``; returns ({name: {bytes, sha256}}, bundle refs).

        Root makes a directory of its own (0700, under the root-only private directory) and runs each of the
        agent's git commands with its standard output redirected into a file there: the agent's process writes
        to a pipe, never to a path, so no link or FIFO it planted is followed, and each file is cut off at
        MAX_CAPTURE bytes. The files are then fetched as regular files only, within their cap and time.
        """
        layout = layout_of(self.ws)
        script, wanted = self._capture_script(state, layout, pushed)
        work = None
        try:
            try:
                result = self._run_as_root(guest, script, 'capture the work')
            except SshCommandFailed as err:
                if err.details.get('rc') == CHANGED_DURING_CAPTURE:
                    raise ArchiveError('The commits of %s changed while it was archived (the agent is still working). '
                                       'Nothing was recorded as archived; run the archive again, best after the agent '
                                       'stopped.' % self.name, workspace=self.name)
                if err.details.get('rc') == CAPTURE_TOO_LARGE:
                    raise ArchiveError('A file of the archive of %s would be larger than %d bytes; nothing was recorded '
                                       'as archived. Push the work from the workspace, or archive with fewer '
                                       'include_untracked patterns.' % (self.name, MAX_CAPTURE), workspace=self.name)
                raise ArchiveError('Capturing the work of %s failed: %s' % (
                    self.name, err.details.get('stderr_tail') or err), workspace=self.name)
            captured = parse_lines(result.stdout, ('bundle_ref',))
            work = captured.get('work')
            if not work or not work.startswith(layout.private + '/'):
                raise ArchiveError('Capturing the work of %s gave no directory to read.' % self.name, workspace=self.name)
            bundle_refs = [line for line in captured['bundle_ref'] if bundle_ref(line)]
            if captured.get('bundle') == '0' and BUNDLE in wanted:
                wanted.remove(BUNDLE)
            if UNTRACKED_TAR in wanted:
                count = captured.get('untracked_included') or '0'
                count = int(count) if count.isdigit() else 0
                self.untracked_included = count
                refused = captured.get('untracked_refused') or '0'
                if refused.isdigit() and int(refused):
                    self.notes.append('%s untracked name(s) left out of %s: absolute, with "..", or in a .git '
                                      'directory' % (refused, UNTRACKED_TAR))
                if not count:
                    wanted.remove(UNTRACKED_TAR)
                    self.notes.append('no untracked file matched %s' % ', '.join(self.params['include_untracked']))
            files = {}
            for name in wanted:
                files[name] = self._fetch(guest, posixpath.join(work, name), os.path.join(path, name))
            return files, bundle_refs
        finally:
            if work and work.startswith(layout.private + '/'):
                guest.run(['rm', '-rf', work], check=False, what='remove the scratch directory')

    def _capture_script(self, state, layout, pushed):
        """The capture, run as root: each agent command's output goes into a file of root's directory."""
        ssh_user = self.ws['params'].get('ssh_user') or 'root'

        def capture(name, command, stdin='/dev/null'):
            """Run ``command``, its output into ``$w/name`` (cut at the cap)."""
            # Standard output into the file, standard error (64 KiB at most) into .err, the exit status into .rc.
            run = ('( { rc=0; %s <%s 2>&4 4>&- || rc=$?; echo "$rc" >"$w/.rc"; } 4>&1 >&3 3>&- '
                   '| head -c 65536 >"$w/.err" ) 3>&1 | head -c %d >"$w/%s"' % (command, stdin, MAX_CAPTURE + 1, name))
            return [run,
                    '[ "$(wc -c <"$w/%s")" -le %d ] || exit %d' % (name, MAX_CAPTURE, CAPTURE_TOO_LARGE),
                    'rc=$(cat "$w/.rc"); [ "$rc" = 0 ] || { tail -n 5 "$w/.err" >&2; exit "$rc"; }']

        def agent(name, lines):
            """Run ``lines`` as the agent in its checkout, its output into ``$w/name`` (cut at the cap)."""
            body = '\n'.join(['set -eu', GIT_ENV, 'cd %s' % q(layout.checkout)] + lines)
            return capture(name, agent_command(layout, ssh_user, body))

        lines = ['set -eu', GIT_ENV,
                 'mkdir -p %s && chmod 0700 %s' % (q(layout.private), q(layout.private)),
                 'rm -rf %s/archive.*' % q(layout.private),
                 'w=$(mktemp -d %s)' % q(posixpath.join(layout.private, 'archive.XXXXXX')),
                 'echo "work $w"']
        wanted = []
        if state.unpushed_count or pushed:
            # After a push the remote-tracking refs moved: count again, and bundle whatever no remote has yet.
            lines += agent(BUNDLE, [
                'if [ "$(git rev-list --count %s --not --remotes)" != 0 ]; then' % state.refs_args,
                '  git bundle create - %s --not --remotes 2>/dev/null' % state.refs_args,
                'fi'])
            lines += ['if [ -s "$w/%s" ]; then echo "bundle 1"; '
                      '(cd "$w" && git bundle list-heads %s | sed "s/^/bundle_ref /"); '
                      'else echo "bundle 0"; fi' % (BUNDLE, BUNDLE)]
            wanted.append(BUNDLE)
        # Refs that moved since the inspection would make the bundle disagree with the digest.
        lines += agent('.refs', [
            'git for-each-ref --format="%(objectname) %(refname)" refs/heads refs/stash; '
            'git rev-parse -q --verify HEAD || true'])
        fingerprint = q(self._refs_fingerprint(state))
        lines.append('[ "$(cat "$w/.refs")" = %s ] || exit %d' % (fingerprint, CHANGED_DURING_CAPTURE))
        if not pushed:
            if state.tracked_changes:
                lines += agent(WORKTREE_PATCH, ['%s %s %s' % (DIFF, state.head, state.tracked_tree)])
                wanted.append(WORKTREE_PATCH)
            if state.staged_changes and state.index_tree != UNMERGED:
                lines += agent(INDEX_PATCH, ['%s %s %s' % (DIFF, state.head, state.index_tree)])
                wanted.append(INDEX_PATCH)
            elif state.index_tree == UNMERGED:
                self.notes.append('the index holds unresolved merge conflicts; index.patch was not made')
        patterns = self.params.get('include_untracked') or []
        if patterns:
            # The names come from the agent's git; the tar is made by the guest's own python3, started by root in
            # isolated mode with an empty environment (none of the agent's start-up code, modules or variables),
            # which drops to the agent's user before it opens anything: it reads only what the agent may read.
            lines += agent('.untracked', ['git ls-files -o -z -- %s' % ' '.join(q(p) for p in patterns)])
            lines += capture(UNTRACKED_TAR, 'sh -c %s' % q(
                'cd %s && exec env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin python3 -I -S -c %s "$(id -u %s)" '
                '"$(id -g %s)" %s' % (q(layout.checkout), q(TAR_PROGRAM), q(layout.agent_user), q(layout.agent_user),
                                      q(self._excluded(layout)))), stdin='"$w/.untracked"')
            lines.append('echo "untracked_included $(tail -n 1 "$w/.err" | tr -cd 0-9)"')
            lines.append('echo "untracked_refused $(tail -n 2 "$w/.err" | head -n 1 | tr -cd 0-9)"')
            wanted.append(UNTRACKED_TAR)
        return '\n'.join(lines), wanted

    @staticmethod
    def _refs_fingerprint(state):
        """What the capture script prints for the refs: the inspection's for-each-ref lines, then HEAD."""
        return '\n'.join(state.refs + ([state.head] if state.head else []))

    def _excluded(self, layout):
        """The credentials file's path relative to the checkout, when it lies inside it (never archived)."""
        rel = posixpath.relpath(layout.credentials, layout.checkout)
        return '' if rel.startswith('..') else rel

    def _fetch(self, guest, remote_path, local_path):
        """Copy one captured file (a regular file in root's directory) into the archive, within its cap and time."""
        with durable_writer(local_path) as out:
            writer = _HashingWriter(out, local_path)
            guest.fetch(remote_path, writer, max_bytes=MAX_CAPTURE, timeout=self.params.get('command_timeout') or 600)
        return {'bytes': writer.size, 'sha256': writer.sha256.hexdigest()}

    # -- metadata and results --------------------------------------------------

    def _metadata(self, state, path, now, push, files, bundle_refs, runner):
        url = self.ws['params'].get('repo') or self.ws.get('repo')
        restore = restore_commands(state, push, files, bundle_refs, redact_url(url))
        return {
            'format': FORMAT,
            'workspace': self.name,
            'archived_at': iso(now),
            'path': path,
            'controller': self.journal.controller_id,
            'journal': self.journal.path,
            'checkout': dict(state.to_metadata(), path=self.ws['params'].get('checkout_path'), remote_url=redact_url(url)),
            'digest': state.digest,
            'push': push,
            'files': files,
            'bundle_refs': bundle_refs,
            'untracked_patterns': self.params.get('include_untracked') or [],
            'untracked_included': self.untracked_included,
            'notes': self.notes,
            'restore': restore,
            'record': self.ws,
            'events': self.journal.events(self.name, limit=LIST_LIMIT),
            'runner': runner,
        }

    def _result(self, changed, verdict, reason, state, record, push=None):
        archive = None
        if record:
            archive = {k: record.get(k) for k in ('path', 'files', 'head', 'branch', 'pushed_ref', 'pushed_commit',
                                                  'at', 'digest')}
        return {
            'changed': changed,
            'msg': reason,
            'verdict': verdict,
            'unsaved': verdict in (UNSAVED, UNKNOWN),
            'state': state.to_result() if state is not None else None,
            'archive': archive,
            'push': push,
            'archive_dir': self.archive_dir,
            'notes': list(self.notes),
        }
