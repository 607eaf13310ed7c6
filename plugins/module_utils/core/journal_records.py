# -*- coding: utf-8 -*-
# Copyright: ephemera.workspaces contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The journal's other records: idempotency keys, the providers' own state, and templates with their versions.
Mixed into :class:`journal.Journal`, whose store (``transaction``, ``_one``, ``_all``, ``clock``) they write and
read through."""

import hashlib
import json
import re
import time

from ansible_collections.ephemera.workspaces.plugins.module_utils.core.errors import IdempotencyError, JournalError, StaleGenerationError
from ansible_collections.ephemera.workspaces.plugins.module_utils.core.journal_rows import (
    ANY,
    IDEMPOTENCY_TTL,
    TEMPLATE_STATES,
    claim_parts,
    dumps,
    fingerprint,
    redact,
    runner_alive,
)
from ansible_collections.ephemera.workspaces.plugins.module_utils.core.run_identity import DEFAULT_LEASE, Owner


class IdempotencyClaim:
    """What :meth:`Journal.begin_idempotent` hands back: a fresh claim, or the replay of a stored result."""

    def __init__(self, key_hash, replayed, result=None):
        self.key_hash = key_hash
        self.replayed = replayed
        self.result = result


class Idempotency:
    """Idempotency keys: the first request under a key runs, the same request again is answered from its record."""

    # -------------------------------------------------------------- idempotency

    def idempotency_hash(self, key, action, controller=None):
        controller = controller or self.controller_id
        return hashlib.sha256(('%s\0%s\0%s' % (controller, action, key)).encode('utf-8')).hexdigest()

    def begin_idempotent(self, key, action, request, controller=None, owner=None, now=None, claim=None,
                         lease=DEFAULT_LEASE):
        """Claim an idempotency key before doing ``action`` for ``request``.

        - first use: a fresh claim (``replayed`` False); the caller does the work, then calls
          :meth:`finish_idempotent` (or :meth:`abandon_idempotent` if it failed);
        - same key, same request, finished: the stored result (``replayed`` True); do nothing;
        - same key, different request: :class:`IdempotencyError`;
        - same key while its first use still runs: :class:`IdempotencyError` (refused). If that
          first owner died, this caller takes the claim over and resumes.

        Whether the first use still runs is judged as a queue claim is: a key claimed under a queued operation's
        ``claim`` lives while that operation runs with a live runner (on this host its process, on another host the
        claim's renewed lease), and a run that holds that operation's claim now (it took it over) goes on with the
        key. A key claimed outside the queue carries a lease of its own (``lease`` seconds from its claim), so that an
        owner on another host that died frees it then instead of after the record's 24 h.

        Keys are scoped by controller and action and stored only as a SHA-256 hash; records
        expire 24 h after they were made.
        """
        controller = controller or self.controller_id
        owner = owner or Owner.current()
        key_hash = self.idempotency_hash(key, action, controller)
        print_ = fingerprint(request)
        with self.transaction(point='idempotency_begin') as conn:
            now = self.clock(conn) if now is None else now
            mine = self._idempotency_owner(owner, claim, now, lease)
            conn.execute('DELETE FROM idempotency WHERE expires_at <= ?', (now,))
            row = conn.execute('SELECT * FROM idempotency WHERE key_hash = ?', (key_hash,)).fetchone()
            if row is None:
                conn.execute('INSERT INTO idempotency (key_hash, controller, action, fingerprint, state, owner, '
                             'created_at, expires_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)',
                             (key_hash, controller, action, print_, 'in_flight', dumps(mine), now,
                              now + IDEMPOTENCY_TTL))
                return IdempotencyClaim(key_hash, replayed=False)
            if row['fingerprint'] != print_:
                raise IdempotencyError('The idempotency key was already used for a different %s request. Use a new '
                                       'key for a new request, or repeat the original request unchanged.' % action,
                                       action=action)
            if row['state'] == 'done':
                return IdempotencyClaim(key_hash, replayed=True, result=json.loads(row['result']))
            first = json.loads(row['owner'])
            if Owner.from_dict(first) == owner or (claim is not None and first.get('entry_id') == mine['entry_id']):
                # The same run asks again (a later step of the operation it claimed the key for), or the run that
                # holds that operation's claim now (it took the operation over).
                if first != mine:
                    conn.execute('UPDATE idempotency SET owner = ? WHERE key_hash = ?', (dumps(mine), key_hash))
                return IdempotencyClaim(key_hash, replayed=False)
            if self._idempotency_owner_alive(conn, first, now):
                raise IdempotencyError('A %s with this idempotency key is still running (%s). Wait for it to finish, '
                                       'then repeat this request to get its result.'
                                       % (action, self._idempotency_owner_text(first)), action=action)
            conn.execute('UPDATE idempotency SET owner = ? WHERE key_hash = ?', (dumps(mine), key_hash))
            return IdempotencyClaim(key_hash, replayed=False)

    @staticmethod
    def _idempotency_owner(owner, claim, now, lease):
        """What an idempotency record keeps of its owner: the run, and the queued operation it works for (its
        liveness is then that operation's runner's), else a lease of its own."""
        mine = owner.to_dict()
        if claim is not None:
            mine.update(entry_id=claim_parts(claim)[0], lease_expires=None)
        else:
            mine.update(entry_id=None, lease_expires=now + float(lease))
        return mine

    @staticmethod
    def _idempotency_owner_alive(conn, first, now):
        if first.get('entry_id') is not None:
            row = conn.execute('SELECT state, owner, lease_expires FROM queue WHERE id = ?',
                               (first['entry_id'],)).fetchone()
            return row is not None and row['state'] == 'running' and runner_alive(row, now)
        return Owner.from_dict(first).is_alive(now)

    @staticmethod
    def _idempotency_owner_text(first):
        text = '%s pid %s' % (first.get('host'), first.get('pid'))
        if first.get('entry_id') is not None:
            text += ', queued operation #%s' % first['entry_id']
        return text

    def finish_idempotent(self, claim, result):
        """Store the result of a claimed request, so that a repeat replays it."""
        with self.transaction(point='idempotency_finish') as conn:
            conn.execute("UPDATE idempotency SET state = 'done', result = ? WHERE key_hash = ?",
                         (dumps(redact(result)), claim.key_hash))

    def abandon_idempotent(self, claim):
        """Forget a claim whose work failed, so that a retry with the same key runs again."""
        with self.transaction(point='idempotency_abandon') as conn:
            conn.execute("DELETE FROM idempotency WHERE key_hash = ? AND state = 'in_flight'", (claim.key_hash,))


class ProviderState:
    """The providers' own records (JSON under a key, compare-and-set on their generation)."""

    # ----------------------------------------------------------- provider state

    @staticmethod
    def _state_key(key):
        if not isinstance(key, str) or not key or len(key) > 400:
            raise JournalError('A provider state key is a non-empty string of at most 400 characters (azure/set/'
                               '<base>, say); got %r. Nothing was written.' % (key,))
        return key

    def provider_state(self, key):
        """``(value, generation)`` of the provider state recorded under ``key``, or None."""
        row = self._one('SELECT value, generation FROM provider_state WHERE key = ?', (self._state_key(key),))
        return None if row is None else (json.loads(row['value']), int(row['generation']))

    def provider_states(self, prefix=''):
        """``[(key, value, generation)]`` of every provider state whose key starts with ``prefix``, by key."""
        pattern = re.sub(r'([\\%_])', r'\\\1', prefix or '') + '%'
        rows = self._all("SELECT key, value, generation FROM provider_state WHERE key LIKE ? ESCAPE '\\' ORDER BY key",
                         (pattern,))
        # LIKE ignores the case of ASCII letters on SQLite: the prefix itself decides.
        return [(row['key'], json.loads(row['value']), int(row['generation'])) for row in rows
                if row['key'].startswith(prefix or '')]

    def put_provider_state(self, key, value, generation=None, claim=None, point=None):
        """Compare-and-set the provider state under ``key`` to ``value`` (a JSON object): ``generation`` None
        records it only if there is none yet, else only if it is still at ``generation``. Returns the new
        generation. A caller that was overtaken gets :class:`StaleGenerationError` and nothing is written; ``claim``
        fences it as every write of a queued operation (:meth:`transaction`); ``point`` names the commit for the
        crash-safety tests (``journal <point>``; ``provider_state`` unless given)."""
        key = self._state_key(key)
        if not isinstance(value, dict):
            raise JournalError('Provider state %s must be a JSON object (a dict), not %s. Nothing was written.'
                               % (key, type(value).__name__), key=key)
        try:
            text = json.dumps(redact(value), sort_keys=True)
        except (TypeError, ValueError) as err:
            raise JournalError('Provider state %s is not JSON (%s). Nothing was written.' % (key, err), key=key)
        now = time.time()
        with self.transaction(claim, point=point or 'provider_state', exclusive=False) as conn:
            if generation is None:
                cur = conn.execute('INSERT OR IGNORE INTO provider_state (key, value, generation, updated_at) '
                                   'VALUES (?, ?, 1, ?)', (key, text, now))
                if cur.rowcount != 1:
                    raise StaleGenerationError('Provider state %s is recorded already: another run recorded it first. '
                                               'Nothing was written; read it and go on from it.' % key, key=key,
                                               expected=None)
                return 1
            cur = conn.execute('UPDATE provider_state SET value = ?, generation = generation + 1, updated_at = ? '
                               'WHERE key = ? AND generation = ?', (text, now, key, int(generation)))
            if cur.rowcount != 1:
                raise self._state_moved(conn, key, generation)
        return int(generation) + 1

    def delete_provider_state(self, key, generation, claim=None, point=None):
        """Remove the provider state under ``key`` if it is still at ``generation`` (StaleGenerationError, nothing
        removed, if not); ``claim`` and ``point`` as for :meth:`put_provider_state`."""
        key = self._state_key(key)
        with self.transaction(claim, point=point or 'provider_state_deleted', exclusive=False) as conn:
            cur = conn.execute('DELETE FROM provider_state WHERE key = ? AND generation = ?', (key, int(generation)))
            if cur.rowcount != 1:
                raise self._state_moved(conn, key, generation)

    @staticmethod
    def _state_moved(conn, key, generation):
        row = conn.execute('SELECT generation FROM provider_state WHERE key = ?', (key,)).fetchone()
        if row is None:
            return StaleGenerationError('Provider state %s is not recorded (expected generation %s): another run '
                                        'removed it. Nothing was written.' % (key, generation), key=key,
                                        expected=generation, found=None)
        return StaleGenerationError('Provider state %s changed while this run worked on it (expected generation %s, '
                                    'found %s): another run wrote it first. Nothing was written; read it again.'
                                    % (key, generation, row[0]), key=key, expected=generation, found=int(row[0]))


class Templates:
    """Templates, their versions and which one is current."""

    # ---------------------------------------------------------------- templates

    @staticmethod
    def template_event_key(name):
        """The event-log key of template ``name`` (events of non-workspace targets are logged as "<type>:<name>")."""
        return 'template:%s' % name

    def template(self, name):
        """The pointer of template ``name`` ({name, current, previous, generation, ...}), or None."""
        return self._one('SELECT * FROM templates WHERE name = ?', (name,))

    def templates(self):
        return self._all('SELECT * FROM templates ORDER BY name')

    def template_version(self, name, version):
        return self._one('SELECT * FROM template_versions WHERE name = ? AND version = ?', (name, int(version)))

    def template_versions(self, name=None, state=None):
        """Versions of template ``name`` (every template's without one), oldest first."""
        where, args = [], []
        if name is not None:
            where.append('name = ?')
            args.append(name)
        if state is not None:
            where.append('state = ?')
            args.append(state)
        sql = 'SELECT * FROM template_versions' + (' WHERE ' + ' AND '.join(where) if where else '')
        return self._all(sql + ' ORDER BY name, version', args)

    def begin_template_version(self, name, source, workspace_of, entry=None, claim=None):
        """Record the next version of template ``name`` as ``building`` (from ``source``, a dict), before anything
        is cloned; ``workspace_of(version)`` names the workspace record that carries its candidate. Returns it."""
        now = time.time()
        with self.transaction(claim, point='template_version') as conn:
            row = conn.execute('SELECT MAX(version) FROM template_versions WHERE name = ?', (name,)).fetchone()
            version = (row[0] or 0) + 1
            conn.execute('INSERT INTO template_versions (name, version, state, source, workspace, created_at, entry) '
                         "VALUES (?, ?, 'building', ?, ?, ?, ?)",
                         (name, version, dumps(source), workspace_of(version), now, entry))
            self.record_event(conn, self.template_event_key(name), 'recorded', 'build_started',
                              {'version': version, 'source': source, 'workspace': workspace_of(version)}, now)
        return self.template_version(name, version)

    def update_template_version(self, name, version, state=None, claim=None, **fields):
        """Set ``state`` (building, built, failed) and ``fields`` (resource_id, location, provider, tools, errors)
        of a version, with an event."""
        sets, args = [], []
        if state is not None:
            if state not in TEMPLATE_STATES:
                raise JournalError('Unknown template version state %r; expected one of %s.'
                                   % (state, ', '.join(TEMPLATE_STATES)))
            sets += ['state = ?', 'finished_at = ?']
            args += [state, time.time() if state != 'building' else None]
        for key in sorted(fields):
            if key not in ('resource_id', 'location', 'provider', 'tools', 'errors'):
                raise JournalError('Unknown template version field %r.' % key)
            sets.append('%s = ?' % key)
            args.append(self._column_value(key, fields[key]))
        with self.transaction(claim, point='template_version_update') as conn:
            cur = conn.execute('UPDATE template_versions SET %s WHERE name = ? AND version = ?' % ', '.join(sets),
                               args + [name, int(version)])
            if cur.rowcount != 1:
                raise JournalError('Template %s has no version %s recorded; nothing was written.' % (name, version))
            self.record_event(conn, self.template_event_key(name), 'observed', 'version_' + (state or 'updated'),
                              dict(fields, version=version, state=state))
        return self.template_version(name, version)

    def switch_template(self, name, version, expected=ANY, claim=None, finish_build=False):
        """Point template ``name`` at ``version`` (a built one) in one transaction; ``expected`` is the version the
        caller read as current (compare-and-set: StaleGenerationError if it moved). With ``finish_build``, the
        version's own state goes from building to built in the same transaction. Returns the pointer."""
        now = time.time()
        with self.transaction(claim, point='template_switch') as conn:
            row = conn.execute('SELECT state FROM template_versions WHERE name = ? AND version = ?',
                               (name, int(version))).fetchone()
            wanted = 'building' if finish_build else 'built'
            if row is None or row[0] != wanted:
                raise JournalError('Template %s version %s is %s, not %s: the pointer was not switched.'
                                   % (name, version, row[0] if row else 'not recorded', wanted))
            if finish_build:
                conn.execute("UPDATE template_versions SET state = 'built', finished_at = ? WHERE name = ? AND version = ?",
                             (now, name, int(version)))
            pointer = conn.execute('SELECT current, generation FROM templates WHERE name = ?', (name,)).fetchone()
            current = pointer[0] if pointer else None
            if expected is not ANY and current != expected:
                raise StaleGenerationError('Template %s points at version %s now, not %s: another run switched it. '
                                           'Nothing was written; read it again.' % (name, current, expected))
            if pointer is None:
                conn.execute('INSERT INTO templates (name, current, previous, updated_at, generation) '
                             'VALUES (?, ?, NULL, ?, 1)', (name, int(version), now))
            else:
                conn.execute('UPDATE templates SET previous = current, current = ?, updated_at = ?, '
                             'generation = generation + 1 WHERE name = ?', (int(version), now, name))
            self.record_event(conn, self.template_event_key(name), 'recorded', 'switched',
                              {'from': current, 'to': int(version)}, now)
        return self.template(name)

    def template_events_of(self, name, limit=None):
        return self.events(self.template_event_key(name), limit)
