# -*- coding: utf-8 -*-
# Copyright: ephemera.workspaces contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The journal's records of workspaces: the workspaces themselves and their event logs, the intents of what an
operation is about to do and the cleanup debt it leaves, and the addresses leased to them. Mixed into
:class:`journal.Journal`, whose store (``transaction``, ``_one``, ``_all``, ``clock``) they write and read through."""

import json
import sqlite3
import time

from ansible_collections.ephemera.workspaces.plugins.module_utils.core.errors import JournalError, StaleGenerationError
from ansible_collections.ephemera.workspaces.plugins.module_utils.core.journal_rows import (
    DESIRED_STATES,
    JSON_FIELDS,
    LEGACY_FIELDS,
    WORKSPACE_ACTIVITIES,
    WORKSPACE_FIELDS,
    WORKSPACE_STATUSES,
    dumps,
    redact,
    row_dict,
)
from ansible_collections.ephemera.workspaces.plugins.module_utils.core.run_identity import Owner


class Workspaces:
    """Workspace records (compare-and-set on their generation) and each one's event log."""

    # --------------------------------------------------------------- workspaces

    @staticmethod
    def _fields(fields):
        """``fields`` with the names of schema 1 (vmid, node, ...) given as today's."""
        fields = dict(fields)
        for old, new in LEGACY_FIELDS:
            if old in fields:
                if new in fields:
                    raise JournalError('Give %s or %s (its former name), not both.' % (new, old))
                fields[new] = fields.pop(old)
        return fields

    @staticmethod
    def _workspace(record):
        """A workspace record with the fields' former names as read-only copies."""
        if record is not None:
            for old, new in LEGACY_FIELDS:
                record[old] = record[new]
        return record

    @staticmethod
    def _check_fields(fields):
        unknown = set(fields) - set(WORKSPACE_FIELDS)
        if unknown:
            raise JournalError('Unknown workspace field(s): %s.' % ', '.join(sorted(unknown)))
        if 'status' in fields and fields['status'] not in WORKSPACE_STATUSES:
            raise JournalError('Unknown workspace status %r; expected one of %s.'
                               % (fields['status'], ', '.join(WORKSPACE_STATUSES)))
        if 'activity' in fields and fields['activity'] not in WORKSPACE_ACTIVITIES:
            raise JournalError('Unknown workspace activity %r; expected one of %s.'
                               % (fields['activity'], ', '.join(WORKSPACE_ACTIVITIES)))
        if 'desired_state' in fields and fields['desired_state'] not in DESIRED_STATES:
            raise JournalError('Unknown desired state %r; expected one of %s.'
                               % (fields['desired_state'], ', '.join(DESIRED_STATES)))

    def _column_value(self, key, value):
        if key in JSON_FIELDS:
            return dumps(redact(value))
        if key in ('resource_id', 'candidate_id') and self.backend == 'postgresql':
            # PostgreSQL's columns have one type; the id keeps its own (an integer VMID, a cloud's text id) as JSON.
            return None if value is None else json.dumps(value)
        return value

    def create_workspace(self, name, event=None, claim=None, **fields):
        """Record a new workspace (status ``requested`` unless given) at generation 1 and return it.

        Raises :class:`JournalError` when a record with that name exists already: the caller reads
        it and decides (resume, or refuse different parameters). ``claim``: see :meth:`transaction`.
        """
        fields = self._fields(fields)
        fields.setdefault('status', 'requested')
        self._check_fields(fields)
        now = time.time()
        cols = ['name', 'created_at', 'updated_at', 'generation'] + sorted(fields)
        values = [name, now, now, 1] + [self._column_value(k, fields[k]) for k in sorted(fields)]
        with self.transaction(claim, point='create_workspace') as conn:
            try:
                conn.execute('INSERT INTO workspaces (%s) VALUES (%s)' % (', '.join(cols), ', '.join('?' * len(cols))),
                             values)
            except sqlite3.IntegrityError:
                raise JournalError('A workspace named %r is already recorded in %s.' % (name, self.path),
                                   workspace=name)
            self.record_event(conn, name, 'recorded', 'create_workspace', dict(fields, **(event or {})), now)
        return self.get_workspace(name)

    def get_workspace(self, name):
        """The workspace record as a dict, or None."""
        return self._workspace(self._one('SELECT * FROM workspaces WHERE name = ?', (name,)))

    def list_workspaces(self, status=None, activity=None, names=None):
        """Workspace records, filtered by status, activity and names (each a value or a list), by name."""
        where, args = [], []
        for column, wanted in (('status', status), ('activity', activity), ('name', names)):
            if wanted:
                wanted = [wanted] if isinstance(wanted, str) else list(wanted)
                where.append('%s IN (%s)' % (column, ', '.join('?' * len(wanted))))
                args.extend(wanted)
        sql = 'SELECT * FROM workspaces' + (' WHERE ' + ' AND '.join(where) if where else '') + ' ORDER BY name'
        return [self._workspace(record) for record in self._all(sql, args)]

    def update_workspace(self, name, generation, event=None, claim=None, **fields):
        """Compare-and-set: apply ``fields`` only if the record is still at ``generation``.

        ``event`` (a dict with ``kind``, ``action`` and optional ``detail``) is appended to the
        event log in the same transaction, so the record and its history never disagree.
        Returns the new record; raises :class:`StaleGenerationError` and writes nothing if the
        record moved on (or vanished) since the caller read it, or (:class:`ClaimLostError`) if
        ``claim`` is given and no longer held.
        """
        fields = self._fields(fields)
        self._check_fields(fields)
        with self.transaction(claim, point=event['action'] if event else 'update_workspace', exclusive=False) as conn:
            self._compare_and_set(conn, name, generation, fields, event)
        return self.get_workspace(name)

    def amend_workspace(self, name, change, claim=None):
        """Read workspace ``name`` and write what ``change(record)`` decides, in one transaction that holds the record
        from the read to the write (PostgreSQL: ``SELECT ... FOR UPDATE``; SQLite: its write lock), so that no other
        run's update comes between and nothing is retried: for a record that many runs touch at once (heartbeats,
        a sweep's outcome beside a running step). ``change`` gets the record (None when it is not recorded) and
        returns None (nothing to write) or ``(fields, event)``; it runs while the record is held, so it must not wait
        on anything, and what it raises ends the transaction with nothing written. Returns the record as it is
        after."""
        lock = ' FOR UPDATE' if self.backend == 'postgresql' else ''
        with self.transaction(claim, point='amend_workspace', exclusive=False) as conn:
            row = conn.execute('SELECT * FROM workspaces WHERE name = ?' + lock, (name,)).fetchone()
            ws = self._workspace(row_dict(row) if row is not None else None)
            decided = change(ws)
            if decided is None:
                return ws
            fields, event = decided
            fields = self._fields(fields)
            self._check_fields(fields)
            self._compare_and_set(conn, name, ws['generation'], fields, event)
        return self.get_workspace(name)

    def _compare_and_set(self, conn, name, generation, fields, event):
        now = time.time()
        keys = sorted(fields)
        assignments = ', '.join('%s = ?' % k for k in keys + ['updated_at']) + ', generation = generation + 1'
        args = [self._column_value(k, fields[k]) for k in keys] + [now, name, generation]
        cur = conn.execute('UPDATE workspaces SET %s WHERE name = ? AND generation = ?' % assignments, args)
        if cur.rowcount != 1:
            row = conn.execute('SELECT generation FROM workspaces WHERE name = ?', (name,)).fetchone()
            if row is None:
                raise StaleGenerationError('Workspace %r is not recorded in the journal; nothing was written.'
                                           % name, workspace=name)
            raise StaleGenerationError(
                'Workspace %r changed while this run worked on it (expected generation %d, found %d): another run '
                'updated it first. Nothing was written; re-read the workspace and try again.'
                % (name, generation, row[0]), workspace=name, expected=generation, found=row[0])
        if event is not None:
            self.record_event(conn, name, event.get('kind', 'transition'), event['action'],
                              event.get('detail', fields), now)

    # ------------------------------------------------------------------- events

    def record_event(self, conn, workspace, kind, action, detail, now=None):
        """Append one entry to an event log inside the transaction ``conn`` a caller holds (the queue's writes)."""
        conn.execute('INSERT INTO events (workspace, at, actor, kind, action, detail) VALUES (?, ?, ?, ?, ?, ?)',
                     (workspace, now or time.time(), self.actor, kind, action, dumps(redact(detail or {}))))

    def append_event(self, workspace, kind, action, detail=None, claim=None):
        """Append one entry to a workspace's event log: ``kind`` is e.g. dispatched, observed, note."""
        with self.transaction(claim, point=action, exclusive=False) as conn:
            self.record_event(conn, workspace, kind, action, detail)

    def events(self, workspace, limit=None):
        """The workspace's event log, oldest first (the last ``limit`` entries if given)."""
        if limit:
            rows = self._all('SELECT * FROM events WHERE workspace = ? ORDER BY id DESC LIMIT ?', (workspace, int(limit)))
            return list(reversed(rows))
        return self._all('SELECT * FROM events WHERE workspace = ? ORDER BY id', (workspace,))


class Intents:
    """What an operation is about to do, recorded before it acts, and the cleanup it still owes."""

    # ------------------------------------------------------------------ intents

    def open_intent(self, op, target, resources=None, owner=None, claim=None):
        """Record that ``op`` on ``target`` is about to run, owned by this process; returns the intent."""
        owner = owner or Owner.current()
        with self.transaction(claim, point='open_intent') as conn:
            cur = conn.execute('INSERT INTO intents (op, target, owner, started_at, resources) VALUES (?, ?, ?, ?, ?)',
                               (op, target, dumps(owner.to_dict()), time.time(), dumps(resources or [])))
            intent_id = cur.lastrowid
        return self.get_intent(intent_id)

    def get_intent(self, intent_id):
        return self._one('SELECT * FROM intents WHERE id = ?', (intent_id,))

    def update_intent(self, intent_id, generation, resources=None, attempts=None, owner=None, state=None, result=None,
                      claim=None):
        """Compare-and-set on an intent: add resources it may have allocated, take it over, or close it."""
        sets, args = [], []
        if resources is not None:
            sets.append('resources = ?')
            args.append(dumps(resources))
        if attempts is not None:
            sets.append('attempts = ?')
            args.append(int(attempts))
        if owner is not None:
            sets.append('owner = ?')
            args.append(dumps(owner.to_dict()))
        if state is not None:
            if state not in ('open', 'done', 'failed', 'abandoned'):
                raise JournalError('Unknown intent state %r.' % state)
            sets.append('state = ?')
            args.append(state)
            if state != 'open':
                sets.append('ended_at = ?')
                args.append(time.time())
        if result is not None:
            sets.append('result = ?')
            args.append(dumps(redact(result)))
        sets.append('generation = generation + 1')
        with self.transaction(claim, point='update_intent') as conn:
            cur = conn.execute('UPDATE intents SET %s WHERE id = ? AND generation = ?' % ', '.join(sets),
                               args + [intent_id, generation])
            if cur.rowcount != 1:
                raise StaleGenerationError('Intent %d changed since generation %d; nothing was written.'
                                           % (intent_id, generation), intent=intent_id)
        return self.get_intent(intent_id)

    def open_intents(self, target=None):
        if target is None:
            return self._all("SELECT * FROM intents WHERE state = 'open' ORDER BY id")
        return self._all("SELECT * FROM intents WHERE state = 'open' AND target = ? ORDER BY id", (target,))

    @staticmethod
    def intent_owner(intent):
        return Owner.from_dict(intent['owner'])

    # ------------------------------------------------------------- cleanup debt

    def record_cleanup_debt(self, workspace, resource, error, retry_in=300.0, claim=None):
        """Remember a cleanup that could not finish; repeated failures count up ``attempts``."""
        now = time.time()
        with self.transaction(claim, point='cleanup_debt') as conn:
            conn.execute(
                'INSERT INTO cleanup_debt (workspace, resource, attempts, last_error, next_retry, created_at, updated_at) '
                'VALUES (?, ?, 1, ?, ?, ?, ?) ON CONFLICT (workspace, resource) DO UPDATE SET '
                'attempts = cleanup_debt.attempts + 1, last_error = excluded.last_error, next_retry = excluded.next_retry, '
                'updated_at = excluded.updated_at',
                (workspace, resource, str(error), now + retry_in, now, now))
            self.record_event(conn, workspace, 'observed', 'cleanup_debt',
                              {'resource': resource, 'error': str(error)}, now)
        return self._one('SELECT * FROM cleanup_debt WHERE workspace = ? AND resource = ?', (workspace, resource))

    def clear_cleanup_debt(self, workspace, resource, claim=None):
        """Settle a debt once the cleanup was confirmed; returns True if there was one."""
        with self.transaction(claim, point='cleanup_debt_cleared') as conn:
            cur = conn.execute('DELETE FROM cleanup_debt WHERE workspace = ? AND resource = ?', (workspace, resource))
            if cur.rowcount:
                self.record_event(conn, workspace, 'observed', 'cleanup_debt_settled', {'resource': resource})
            return cur.rowcount == 1

    def cleanup_debts(self, workspace=None, due_only=False):
        where, args = [], []
        if workspace is not None:
            where.append('workspace = ?')
            args.append(workspace)
        if due_only:
            where.append('next_retry <= ?')
            args.append(time.time())
        sql = 'SELECT * FROM cleanup_debt' + (' WHERE ' + ' AND '.join(where) if where else '')
        return self._all(sql + ' ORDER BY workspace, resource', args)


class AddressLeases:
    """Addresses of an address pool, leased to one workspace each."""

    # ----------------------------------------------------------- address leases

    def lease_address(self, pool, workspace, candidates, claim=None):
        """The address leased to ``workspace`` from ``pool``: its existing lease, else the first free candidate.

        A lease is held until :meth:`release_address`, so an address is never handed out twice,
        however many forks allocate at once. Raises JournalError when every candidate is taken.
        """
        now = time.time()
        with self.transaction(claim, point='address_lease') as conn:
            row = conn.execute('SELECT address FROM address_leases WHERE pool = ? AND workspace = ?',
                               (pool, workspace)).fetchone()
            if row is not None:
                return row[0]
            taken = set(r[0] for r in conn.execute('SELECT address FROM address_leases'))
            for address in candidates:
                if address not in taken:
                    conn.execute('INSERT INTO address_leases (address, pool, workspace, leased_at) VALUES (?, ?, ?, ?)',
                                 (address, pool, workspace, now))
                    self.record_event(conn, workspace, 'recorded', 'address_leased', {'address': address, 'pool': pool},
                                      now)
                    return address
        raise JournalError('Every address of the range %s is leased (%d in use). Release addresses by destroying '
                           'workspaces, or widen the range.' % (pool, len(taken)), pool=pool)

    def release_address(self, workspace, claim=None):
        """Give the workspace's leased addresses back; returns them."""
        with self.transaction(claim, point='address_release') as conn:
            rows = [r[0] for r in conn.execute('SELECT address FROM address_leases WHERE workspace = ?', (workspace,))]
            if rows:
                conn.execute('DELETE FROM address_leases WHERE workspace = ?', (workspace,))
                self.record_event(conn, workspace, 'recorded', 'address_released', {'addresses': rows})
        return rows

    def address_leases(self, pool=None):
        if pool is None:
            return self._all('SELECT * FROM address_leases ORDER BY address')
        return self._all('SELECT * FROM address_leases WHERE pool = ? ORDER BY address', (pool,))
