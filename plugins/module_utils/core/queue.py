# -*- coding: utf-8 -*-
# Copyright: ephemera.workspaces contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The operation queue: one FIFO queue per target, one runner at a time, duplicates folded.

Long operations (create, destroy, archive, reconcile a workspace; build a template) are queue
*entries* in the journal. A run enqueues its operation and waits until the entry is the oldest
active one of its target; then it *claims* it and holds a fenced claim ``{entry_id, fence}``
while it works. Every journal write made for the operation carries that claim
(``Journal.transaction(claim)``), so a run that lost it (taken over, cancelled) cannot write.

Who stands behind an entry is recorded as *requests*: the run that enqueued it, and every run
that asked for the same operation while it was still queued ("also requested by"). Any of them
may run it when its turn comes (the earliest live one does); the others wait for its outcome.

Liveness: a request or a runner belongs to an ``ansible-playbook`` run (see ``owner.run_pid``).
When the run at the head of a target's queue has died, the next live run on that target takes
over: the same operation is resumed from the journal; another operation closes the dead one as
``failed`` (interrupted) and goes on. Entries whose every requester has died before they started
are cancelled as abandoned. Nothing stays ``running`` without a live owner once another run
comes along, and the reads (``entries``) show such an entry as stale meanwhile.

Clocks: the times of the queue (leases, heartbeats, steps) are taken from ``Journal.clock``: on PostgreSQL the
database server's clock, read inside the transaction that writes or judges them, so controllers that share the
journal agree on whose lease ran out whatever their own clocks say; on SQLite this host's clock (one host).
"""

import getpass
import json
import re
import time
import uuid

from ansible_collections.ephemera.workspaces.plugins.module_utils.core.errors import QueueError, QueueTimeout
from ansible_collections.ephemera.workspaces.plugins.module_utils.core.journal_rows import (
    claim_parts,
    epoch,
    fingerprint,
    iso,
    redact,
    runner_alive,
)
from ansible_collections.ephemera.workspaces.plugins.module_utils.core.run_identity import DEFAULT_LEASE, Owner, hostname
from ansible_collections.ephemera.workspaces.plugins.module_utils.core.waiter import Backoff, done, pending, wait_for

# Kind -> the target types it acts on (the first is the default). A new kind is one more line.
KINDS = {
    'create': ('workspace',),
    'destroy': ('workspace', 'group'),
    'archive': ('workspace', 'group'),
    'reconcile': ('workspace', 'group'),
    'template_build': ('template',),
    'brief': ('workspace',),
    'fork': ('workspace',),
}
TARGET_TYPES = ('workspace', 'template', 'group')
SOURCES = ('manual', 'schedule', 'approval', 'cascade')
STATES = ('queued', 'running', 'done', 'failed', 'cancelled')
ACTIVE = ('queued', 'running')
FINISHED = ('done', 'failed', 'cancelled')

# Turn outcomes.
CLAIMED = 'claimed'      # this run holds the entry now and must run it
FINISHED_TURN = 'finished'   # the entry ended (run by another run, or cancelled)
WAITING = 'waiting'      # not yet

DEFAULT_TIMEOUT = 3600.0
# A waiting run marks its request at most this often; a request unmarked for HEARTBEAT_STALE
# seconds no longer counts as waiting, even if its playbook still runs (its waiting task was
# killed, for example by a task timeout), so it cannot hold its entry forever.
HEARTBEAT = 5.0
HEARTBEAT_STALE = 60.0
STEPS_KEPT = 50
# ':' is reserved: events of non-workspace targets are logged under "<type>:<name>".
TARGET_NAME = re.compile(r'^[A-Za-z0-9][A-Za-z0-9_.@+/=-]{0,127}$')


def default_requester(job_id=None):
    """Who asks, when the caller does not say: the AWX job, else user@host."""
    if job_id:
        return 'AWX job %s' % job_id
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = 'unknown'
    return '%s@%s' % (user, hostname())


def source_from_launch_type(launch_type):
    """The queue source for AWX's ``awx_job_launch_type`` (``scheduled`` -> ``schedule``, the rest ``manual``)."""
    return 'schedule' if launch_type == 'scheduled' else 'manual'


def event_key(target_type, target):
    """The event-log key of a target: the workspace's own log, or ``template:<name>`` / ``group:<name>``."""
    return target if target_type == 'workspace' else '%s:%s' % (target_type, target)


def describe(entry):
    """``#12 create of workspace ws1`` for messages."""
    return '#%d %s of %s %s' % (entry['id'], entry['kind'], entry['target_type'], entry['target'])


def duration(seconds):
    seconds = int(max(seconds, 0))
    if seconds < 60:
        return '%ds' % seconds
    if seconds < 3600:
        return '%dm%02ds' % (seconds // 60, seconds % 60)
    return '%dh%02dm' % (seconds // 3600, (seconds % 3600) // 60)


def _owner_text(owner):
    return '%s pid %s' % (owner.get('host'), owner.get('pid')) if owner else 'nobody'


class Enqueued:
    """What :meth:`Queue.enqueue` did: the entry, this run's request, and whether it joined an existing entry."""

    __slots__ = ('entry', 'request_id', 'folded')

    def __init__(self, entry, request_id, folded):
        self.entry = entry
        self.request_id = request_id
        self.folded = folded


class Turn:
    """What a look at the queue found for one request.

    ``outcome``: CLAIMED (``claim`` is set; ``resumed`` when a dead runner's work is taken over,
    ``previous_step`` is where it stopped), FINISHED (the entry ended; ``folded`` when this run did
    not run it) or WAITING (``ahead`` lists the active entries before it; ``held_by_own_run`` is the
    running entry it waits for if this very run holds that one).
    """

    __slots__ = ('outcome', 'entry', 'claim', 'resumed', 'previous_step', 'folded', 'ahead', 'request_id',
                 'held_by_own_run')

    def __init__(self, outcome, entry, request_id, claim=None, resumed=False, previous_step=None, folded=False,
                 ahead=None, held_by_own_run=None):
        self.outcome = outcome
        self.entry = entry
        self.request_id = request_id
        self.claim = claim
        self.resumed = resumed
        self.previous_step = previous_step
        self.folded = folded
        self.ahead = ahead or []
        self.held_by_own_run = held_by_own_run


class Queue:
    """The queue of one journal, seen by one run (``owner``: whose requests and claims these are)."""

    def __init__(self, journal, owner=None, lease=DEFAULT_LEASE):
        self.journal = journal
        self.owner = owner or Owner.current()
        self.lease = float(lease)
        if self.lease <= 0:
            raise QueueError('The claim lease must be a positive number of seconds, not %r.' % lease)

    # ------------------------------------------------------------- validation

    @staticmethod
    def check_request(kind, target, target_type=None, source=None):
        """The request's (kind, target_type, source) after checking them; QueueError names what is wrong."""
        if kind not in KINDS:
            raise QueueError('Unknown operation kind %r; expected one of %s. Nothing was queued.'
                             % (kind, ', '.join(sorted(KINDS))), kind=kind)
        target_type = target_type or KINDS[kind][0]
        if target_type not in KINDS[kind]:
            raise QueueError('A %s operation acts on a %s, not a %r. Nothing was queued.'
                             % (kind, ' or '.join(KINDS[kind]), target_type), kind=kind, target_type=target_type)
        if not isinstance(target, str) or not TARGET_NAME.match(target):
            raise QueueError('Invalid %s name %r: use 1-128 letters, digits and . _ - @ + / = (starting with a letter '
                             'or digit). Nothing was queued.' % (target_type, target), target=target)
        if source is not None and source not in SOURCES:
            raise QueueError('Unknown request source %r; expected one of %s. Nothing was queued.'
                             % (source, ', '.join(SOURCES)), source=source)
        return kind, target_type

    @staticmethod
    def _check_known(conn, kind, target, path):
        # Only a create may name a workspace the journal does not know yet; anything else on an
        # unknown name is a typo or a lost journal, and must not wait in a queue for nothing.
        if conn.execute('SELECT 1 FROM workspaces WHERE name = ?', (target,)).fetchone():
            return
        if conn.execute("SELECT 1 FROM queue WHERE kind = 'create' AND target_type = 'workspace' AND target = ? "
                        "AND state IN ('queued', 'running')", (target,)).fetchone():
            return
        raise QueueError('Unknown target: no workspace named %r is recorded in the journal %s, and no create of it is '
                         'queued, so there is nothing to %s. Nothing was queued. Check the name (workspace_info lists '
                         'the recorded workspaces) and the journal path.' % (target, path, kind), target=target)

    @staticmethod
    def _check_parent(conn, parent_id):
        row = conn.execute('SELECT * FROM queue WHERE id = ?', (parent_id,)).fetchone()
        if row is None:
            raise QueueError('Parent operation #%d does not exist. Nothing was queued.' % parent_id, parent_id=parent_id)
        if row['state'] == 'cancelled':
            reason = (json.loads(row['result']) if row['result'] else {}).get('reason', 'no reason given')
            raise QueueError('Parent operation %s was cancelled (%s). Nothing was queued under it.'
                             % (describe(row), reason), parent_id=parent_id)
        if row['state'] in FINISHED:
            raise QueueError('Parent operation %s has already finished (%s). Nothing was queued under it; enqueue '
                             'without parent_id, or under a running parent.' % (describe(row), row['state']),
                             parent_id=parent_id)

    # ---------------------------------------------------------------- enqueue

    def enqueue(self, kind, target, target_type=None, params=None, source=None, requested_by=None, job_id=None,
                parent_id=None, waits=True, claim=None, now=None):
        """Queue ``kind`` on ``target``, or join the identical entry that is still queued.

        ``waits``: this run will wait for the entry (and may run it); False for a parent that
        queues children for other runs. ``claim``: a parent's claim, so that a parent that lost
        it cannot queue children. Returns :class:`Enqueued`.
        """
        kind, target_type = self.check_request(kind, target, target_type, source)
        if params is not None and not isinstance(params, dict):
            raise QueueError('params must be a dict of the request parameters, not %r.' % (params,))
        params = redact(params or {})
        source = source or ('cascade' if parent_id is not None else 'manual')
        requested_by = requested_by or default_requester(job_id)
        print_ = fingerprint(params)
        with self.journal.transaction(claim, point='queue enqueue') as conn:
            now = self.journal.clock(conn) if now is None else now
            # A running entry is never joined: a request made after a run started is a new request. A queued child
            # of a cascade is joined even once its parent finished (the parent queued it for runs to come).
            row = conn.execute("SELECT id FROM queue WHERE kind = ? AND target_type = ? AND target = ? "
                               "AND fingerprint = ? AND parent_id IS ? AND state = 'queued' ORDER BY id LIMIT 1",
                               (kind, target_type, target, print_, parent_id)).fetchone()
            folded = row is not None
            if parent_id is not None and not folded:
                self._check_parent(conn, parent_id)
            if target_type == 'workspace' and kind != 'create':
                self._check_known(conn, kind, target, self.journal.path)
            if folded:
                entry_id = row['id']
            else:
                entry_id = conn.execute(
                    'INSERT INTO queue (kind, target_type, target, params, fingerprint, source, parent_id, created_at, '
                    'updated_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)',
                    (kind, target_type, target, json.dumps(params, sort_keys=True), print_, source, parent_id, now,
                     now)).lastrowid
            request_id = conn.execute(
                'INSERT INTO queue_requests (entry_id, requested_by, source, job_id, owner, waits, at, seen_at, '
                'lease_expires) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)',
                (entry_id, requested_by, source, job_id, self._owner_json(), 1 if waits else 0, now, now,
                 now + self.lease)).lastrowid
            detail = {'entry': entry_id, 'kind': kind, 'requested_by': requested_by, 'source': source, 'job_id': job_id,
                      'request': request_id}
            if parent_id is not None:
                detail['parent'] = parent_id
            self.journal.record_event(conn, event_key(target_type, target), 'queue',
                                      'also_requested' if folded else 'enqueued', detail, now)
        return Enqueued(self.get(entry_id), request_id, folded)

    def preview(self, kind, target, target_type=None, params=None, source=None, parent_id=None):
        """What :meth:`enqueue` would do, without writing: ``{action: run|wait|join, entry_id, ahead}``."""
        kind, target_type = self.check_request(kind, target, target_type, source)
        conn = self.journal.connection
        same = conn.execute("SELECT id FROM queue WHERE kind = ? AND target_type = ? AND target = ? AND fingerprint = ? "
                            "AND parent_id IS ? AND state = 'queued' ORDER BY id LIMIT 1",
                            (kind, target_type, target, fingerprint(redact(params or {})), parent_id)).fetchone()
        if parent_id is not None and same is None:
            self._check_parent(conn, parent_id)
        if target_type == 'workspace' and kind != 'create':
            self._check_known(conn, kind, target, self.journal.path)
        active = [row['id'] for row in conn.execute("SELECT id FROM queue WHERE target_type = ? AND target = ? AND "
                                                    "state IN ('queued', 'running') ORDER BY id", (target_type, target))]
        if same is not None:
            return {'action': 'join', 'entry_id': same['id'], 'ahead': [i for i in active if i < same['id']]}
        return {'action': 'wait' if active else 'run', 'entry_id': None, 'ahead': active}

    def _owner_json(self):
        data = self.owner.to_dict()
        data.pop('lease_expires', None)  # kept in its own column, renewed without rewriting the owner
        return json.dumps(data, sort_keys=True)

    # ------------------------------------------------------------------- wait

    def poll(self, request_id, now=None):
        """One look at the queue for ``request_id``, settling dead entries ahead of it; returns a :class:`Turn`."""
        with self.journal.transaction(point='queue poll') as conn:
            now = self.journal.clock(conn) if now is None else now
            req = self._request(conn, request_id)
            # A waiting request on another host lives by its lease: it is marked well before that runs out.
            if req['state'] == 'waiting' and now - req['seen_at'] >= min(HEARTBEAT, self.lease / 3.0):
                conn.execute('UPDATE queue_requests SET seen_at = ?, lease_expires = ? WHERE id = ?',
                             (now, now + self.lease, request_id))
            entry = self._entry(conn, req['entry_id'])
            if entry['state'] in FINISHED:
                return self._finished(conn, req, entry)
            rows = conn.execute("SELECT * FROM queue WHERE target_type = ? AND target = ? AND state IN "
                                "('queued', 'running') ORDER BY id", (entry['target_type'], entry['target'])).fetchall()
            dead, acting = [], None
            for row in rows:
                if row['state'] == 'running' and self._runner_alive(row, now):
                    return self._waiting(conn, req, row if self._same_run(row['owner'], req['owner']) else None)
                if self._live_requests(conn, row['id'], now):
                    acting = row
                    break
                dead.append(row)
            for row in dead:
                if row['state'] == 'queued':
                    self._close(conn, row, 'cancelled', {'reason': 'abandoned: every run that asked for it ended '
                                                                   'before its turn came'}, now, 'abandoned')
                elif acting is not None and self._same_operation(row, acting):
                    self._fold_into(conn, acting, row, now)
                    acting = self._entry(conn, row['id'])
                else:
                    self._runner_lost(conn, row, now)
                    self._close(conn, row, 'failed', {
                        'reason': 'interrupted: its runner (%s) died at step %s; the next run on %s is a different '
                                  'operation, so this one was closed. Run it again to resume it from the journal.'
                                  % (_owner_text(json.loads(row['owner'] or '{}')), row['step'] or '(none)',
                                     row['target']),
                        'interrupted': True, 'step': row['step']}, now, 'interrupted')
            req = self._request(conn, request_id)
            entry = self._entry(conn, req['entry_id'])
            if entry['state'] in FINISHED:
                return self._finished(conn, req, entry)
            if acting is None or acting['id'] != entry['id']:
                return self._waiting(conn, req)
            waiters = [r for r in self._live_requests(conn, entry['id'], now) if r['waits']]
            if not waiters or waiters[0]['id'] != request_id:
                return self._waiting(conn, req)
            return self._claim(conn, req, entry, now)

    def wait(self, request_id, timeout=DEFAULT_TIMEOUT, backoff=None, wait_for_own_run=False):
        """Poll until this run may run its entry (CLAIMED) or the entry ended (FINISHED).

        On timeout the request is withdrawn (and an entry nobody else waits for is cancelled),
        then :class:`QueueTimeout` says what the run waited behind.

        If the entry it waits for is held by this very run (another host or loop item of the same
        play, or an earlier task that never recorded its outcome), the wait is given up at once
        with :class:`QueueError`: under Ansible's linear strategy that holder cannot go on while
        this task waits. ``wait_for_own_run`` waits anyway (the ``free`` strategy).
        """
        def probe(_remaining):
            turn = self.poll(request_id)
            if turn.outcome == WAITING and (turn.held_by_own_run is None or wait_for_own_run):
                return pending(turn)
            return done(turn)

        def what(turn):
            if turn is None:
                return 'its turn in the queue'
            ahead = '; '.join(self._ahead_text(row) for row in turn.ahead) or 'no runner has claimed it yet'
            return 'its turn: behind %s' % ahead

        result = wait_for(probe, timeout, backoff=backoff or Backoff(start=0.1, maximum=0.5, factor=1.5, jitter=0.2),
                          what=what)
        if result.ok and result.value.outcome != WAITING:
            return result.value
        turn = result.value
        if result.ok:
            held = turn.held_by_own_run
            self.withdraw(request_id, 'its run holds #%d on the same target itself' % held['id'])
            raise QueueError('%s waits for %s, which this same ansible-playbook run holds (step %s): another host or '
                             'loop item of this play, or an earlier task that did not record its outcome. Waiting here '
                             'would block that holder too, so this request was withdrawn and nothing was changed. Run '
                             'operations on one target from separate runs or with serial: 1, record the outcome of '
                             'the earlier operation (state=finished or failed), or set wait_for_own_run=true under '
                             'the free strategy.' % (describe(turn.entry), describe(held), held['step'] or '(none)'),
                             entry_id=turn.entry['id'], held_by=held['id'])
        self.withdraw(request_id, 'gave up waiting after %s' % duration(timeout))
        ahead = '; '.join(self._ahead_text(row) for row in turn.ahead) or 'no runner has claimed it yet'
        raise QueueTimeout('Timed out after %s waiting for the turn of %s (%d operation(s) ahead: %s). This run changed '
                           'nothing and withdrew its request. Check who holds the entry with "ansible-playbook '
                           'ephemera.workspaces.status" (its runner\'s host and pid, and its step: a runner that died is '
                           'taken over once its lease ends), then try again later or raise the timeout.'
                           % (duration(timeout), describe(turn.entry), len(turn.ahead), ahead),
                           entry_id=turn.entry['id'], ahead=[row['id'] for row in turn.ahead])

    def withdraw(self, request_id, reason, now=None):
        """This run no longer waits: drop its request; cancel its entry if nobody else stands behind it."""
        with self.journal.transaction(point='queue withdraw') as conn:
            now = self.journal.clock(conn) if now is None else now
            req = self._request(conn, request_id)
            if req['state'] != 'waiting':
                return
            conn.execute("UPDATE queue_requests SET state = 'withdrawn' WHERE id = ?", (request_id,))
            entry = self._entry(conn, req['entry_id'])
            self.journal.record_event(conn, event_key(entry['target_type'], entry['target']), 'queue', 'withdrawn',
                                      {'entry': entry['id'], 'request': request_id, 'reason': reason}, now)
            if entry['state'] == 'queued' and not self._live_requests(conn, entry['id'], now):
                self._close(conn, entry, 'cancelled', {'reason': 'withdrawn: %s, and no other run waits for it' % reason},
                            now, 'cancelled')

    # ------------------------------------------------------------ the claimed run

    def step(self, claim, label, detail=None, now=None):
        """Record the step the claimed run is at now (and renew its lease); returns the entry."""
        if not label or not isinstance(label, str):
            raise QueueError('A step label is a non-empty string, not %r.' % (label,))
        entry_id = claim_parts(claim)[0]
        with self.journal.transaction(claim, point='queue step') as conn:
            now = self.journal.clock(conn) if now is None else now
            entry = self._entry(conn, entry_id)
            steps = (json.loads(entry['steps']) + [{'step': label, 'at': iso(now)}])[-STEPS_KEPT:]
            conn.execute('UPDATE queue SET step = ?, step_at = ?, steps = ? WHERE id = ?',
                         (label, now, json.dumps(steps), entry_id))
            self.journal.record_event(conn, event_key(entry['target_type'], entry['target']), 'queue', 'step',
                                      {'entry': entry_id, 'step': label, 'detail': detail or {}}, now)
        return self.get(entry_id)

    def renew(self, claim):
        """Renew the claim's lease, with nothing else written (a step that works long without writing: see
        renewal.py); returns the lease in seconds. ClaimLostError if the claim is no longer held. No failpoint: when
        it happens depends on timing."""
        entry_id = claim_parts(claim)[0]
        with self.journal.transaction(claim, point=None) as conn:
            return self._entry(conn, entry_id)['lease_seconds'] or self.lease

    def finish(self, claim, state='done', result=None, now=None):
        """Close the claimed entry as ``done`` or ``failed`` with ``result``; every run that joined it reports it."""
        if state not in ('done', 'failed'):
            raise QueueError('A claimed operation finishes as done or failed, not %r.' % (state,))
        if result is not None and not isinstance(result, dict):
            raise QueueError('The result of an operation is a dict, not %r.' % (result,))
        entry_id = claim_parts(claim)[0]
        with self.journal.transaction(claim, point='queue finish') as conn:
            now = self.journal.clock(conn) if now is None else now
            self._close(conn, self._entry(conn, entry_id), state, result or {}, now, 'finished')
        return self.get(entry_id)

    # ------------------------------------------------------------------ cancel

    def cancel(self, entry_id, reason=None, requested_by=None, force=False, now=None):
        """Cancel an entry and its queued descendants; returns (entry, changed).

        A running entry whose runner lives is cancelled only with ``force``: its runner's next
        journal write is then refused (:class:`ClaimLostError`) and it stops there.
        """
        by = requested_by or default_requester()
        with self.journal.transaction(point='queue cancel') as conn:
            now = self.journal.clock(conn) if now is None else now
            row = conn.execute('SELECT * FROM queue WHERE id = ?', (entry_id,)).fetchone()
            if row is None:
                raise QueueError('Operation #%d does not exist; nothing was cancelled.' % entry_id, entry_id=entry_id)
            if row['state'] == 'cancelled':
                return self._entry_dict(conn, row, now), False
            if row['state'] in FINISHED:
                raise QueueError('Operation %s already finished (%s) at %s; there is nothing to cancel.'
                                 % (describe(row), row['state'], iso(row['ended_at'])), entry_id=entry_id)
            if row['state'] == 'running' and self._runner_alive(row, now) and not force:
                raise QueueError('Operation %s is running (step %s, runner %s is alive). Nothing was cancelled. Pass '
                                 'force=true to cancel it anyway: its runner is refused at its next journal write and '
                                 'stops there, and the next run on %s resumes or undoes its work from the journal.'
                                 % (describe(row), row['step'] or '(none)', _owner_text(json.loads(row['owner'])),
                                    row['target']), entry_id=entry_id)
            self._close(conn, row, 'cancelled', {'reason': reason or 'cancelled', 'cancelled_by': by}, now, 'cancelled')
            entry = self._entry_dict(conn, self._entry(conn, entry_id), now)
        return entry, True

    # ------------------------------------------------------------------- reads

    def get(self, entry_id, now=None):
        """One entry as a dict (with its requesters and children), or None."""
        conn = self.journal.connection
        row = conn.execute('SELECT * FROM queue WHERE id = ?', (entry_id,)).fetchone()
        return None if row is None else self._entry_dict(conn, row, self.journal.clock(conn) if now is None else now)

    def entries(self, target=None, target_type=None, kinds=None, states=None, entry_id=None, recent=20, now=None):
        """Every active entry, and the ``recent`` most recently finished ones, that match; by id.

        The ancestors of each match come along, so that a cascade always shows from its root.
        """
        conn = self.journal.connection
        now = self.journal.clock(conn) if now is None else now
        where, args = [], []
        for column, wanted in (('target', target), ('target_type', target_type), ('kind', kinds), ('state', states),
                               ('id', entry_id)):
            if wanted is not None and wanted != []:
                wanted = list(wanted) if isinstance(wanted, (list, tuple)) else [wanted]
                where.append('%s IN (%s)' % (column, ', '.join('?' * len(wanted))))
                args.extend(wanted)
        base = ' AND '.join(where) or 'TRUE'
        rows = conn.execute("SELECT * FROM queue WHERE %s AND state IN ('queued', 'running') ORDER BY id" % base,
                            args).fetchall()
        if recent:
            rows += conn.execute("SELECT * FROM queue WHERE %s AND state IN ('done', 'failed', 'cancelled') "
                                 "ORDER BY COALESCE(ended_at, updated_at) DESC, id DESC LIMIT ?" % base,
                                 args + [int(recent)]).fetchall()
        found = {row['id']: row for row in rows}
        for row in list(found.values()):
            parent = row['parent_id']
            while parent is not None and parent not in found:
                found[parent] = conn.execute('SELECT * FROM queue WHERE id = ?', (parent,)).fetchone()
                parent = found[parent]['parent_id']
        return [self._entry_dict(conn, found[key], now) for key in sorted(found)]

    # ---------------------------------------------------------------- internals

    @staticmethod
    def _request(conn, request_id):
        req = conn.execute('SELECT * FROM queue_requests WHERE id = ?', (request_id,)).fetchone()
        if req is None:
            raise QueueError('Queue request %r does not exist in this journal.' % (request_id,))
        return req

    @staticmethod
    def _entry(conn, entry_id):
        return conn.execute('SELECT * FROM queue WHERE id = ?', (entry_id,)).fetchone()

    _runner_alive = staticmethod(runner_alive)

    @staticmethod
    def _takeover(row, now, alive):
        """How the runner of a running entry is judged and when another run may take the entry over:
        ``runner_judged_by`` (``process`` on this host, ``lease`` on another), ``takeover_at`` (None while a runner
        on this host lives, or one on another host without a lease) and ``takeover_in`` (seconds from ``now``, 0 once
        it may)."""
        if row['state'] != 'running':
            return dict(runner_judged_by=None, takeover_at=None, takeover_in=None)
        owner = Owner.from_record(row['owner'], row['lease_expires'])
        here = owner is None or owner.host == hostname()
        if alive and (here or row['lease_expires'] is None):
            at = None
        else:
            at = now if not alive else row['lease_expires']
        return dict(runner_judged_by='process' if here else 'lease', takeover_at=iso(at),
                    takeover_in=None if at is None else int(max(0, at - now) + 0.999))

    @staticmethod
    def _live_requests(conn, entry_id, now):
        """Requests of the entry whose run lives (and, for a waiting one, still looks)."""
        live = []
        for req in conn.execute("SELECT * FROM queue_requests WHERE entry_id = ? AND state IN ('waiting', 'running') "
                                "ORDER BY id", (entry_id,)).fetchall():
            if req['state'] == 'running':
                continue  # a runner's liveness is its entry's owner, judged by the caller
            if req['waits'] and now - req['seen_at'] > HEARTBEAT_STALE:
                continue
            if Owner.from_record(req['owner'], req['lease_expires']).is_alive(now):
                live.append(req)
        return live

    @staticmethod
    def _same_run(owner_json, other_json):
        one, other = json.loads(owner_json or '{}'), json.loads(other_json or '{}')
        return all(one.get(key) == other.get(key) for key in ('host', 'pid', 'start_time'))

    @staticmethod
    def _same_operation(one, other):
        return all(one[key] == other[key] for key in ('kind', 'target_type', 'target', 'fingerprint', 'parent_id'))

    def _fold_into(self, conn, newer, dead, now):
        """The next run asked for the very operation whose runner died: it resumes that entry instead of its own."""
        conn.execute('UPDATE queue_requests SET entry_id = ? WHERE entry_id = ?', (dead['id'], newer['id']))
        self._close(conn, newer, 'cancelled', {'reason': 'folded into #%d, the same operation, whose runner died; it '
                                                         'is resumed there' % dead['id'], 'folded_into': dead['id']},
                    now, 'folded')

    def _runner_lost(self, conn, row, now):
        conn.execute("UPDATE queue_requests SET state = 'lost' WHERE entry_id = ? AND state = 'running'", (row['id'],))
        self.journal.record_event(conn, event_key(row['target_type'], row['target']), 'queue', 'runner_lost',
                                  {'entry': row['id'], 'runner': json.loads(row['owner'] or '{}'), 'step': row['step'],
                                   'claims': row['claims']}, now)

    def _claim(self, conn, req, entry, now):
        resumed = entry['state'] == 'running'
        if resumed:
            self._runner_lost(conn, entry, now)
        fence = uuid.uuid4().hex
        conn.execute("UPDATE queue SET state = 'running', owner = ?, lease_seconds = ?, lease_expires = ?, fence = ?, "
                     "claims = claims + 1, started_at = COALESCE(started_at, ?), updated_at = ? WHERE id = ?",
                     (req['owner'], self.lease, now + self.lease, fence, now, now, entry['id']))
        conn.execute("UPDATE queue_requests SET state = 'running' WHERE id = ?", (req['id'],))
        self.journal.record_event(conn, event_key(entry['target_type'], entry['target']), 'queue',
                                  'resumed' if resumed else 'started',
                                  {'entry': entry['id'], 'kind': entry['kind'], 'request': req['id'],
                                   'runner': json.loads(req['owner']), 'claims': entry['claims'] + 1,
                                   'from_step': entry['step']}, now)
        row = self._entry(conn, entry['id'])
        return Turn(CLAIMED, self._entry_dict(conn, row, now), req['id'], claim={'entry_id': row['id'], 'fence': fence},
                    resumed=resumed, previous_step=entry['step'] if resumed else None)

    def _close(self, conn, row, state, result, now, action):
        """End an entry; a cancelled one takes its queued descendants along."""
        conn.execute('UPDATE queue SET state = ?, result = ?, ended_at = ?, updated_at = ? WHERE id = ?',
                     (state, json.dumps(redact(result), sort_keys=True, default=str), now, now, row['id']))
        conn.execute("UPDATE queue_requests SET state = CASE state WHEN 'running' THEN 'ran' ELSE 'served' END "
                     "WHERE entry_id = ? AND state IN ('waiting', 'running')", (row['id'],))
        self.journal.record_event(conn, event_key(row['target_type'], row['target']), 'queue', action,
                                  {'entry': row['id'], 'kind': row['kind'], 'state': state, 'result': result}, now)
        if state == 'cancelled':
            for child in conn.execute("SELECT * FROM queue WHERE parent_id = ? AND state = 'queued'",
                                      (row['id'],)).fetchall():
                self._close(conn, child, 'cancelled', {'reason': 'its parent #%d was cancelled' % row['id']}, now,
                            'cancelled')

    def _finished(self, conn, req, entry):
        # 'ran': this request's run executed the entry; anything else means another run did.
        return Turn(FINISHED_TURN, self._entry_dict(conn, entry, self.journal.clock(conn)), req['id'],
                    folded=req['state'] != 'ran')

    def _waiting(self, conn, req, held_by_own_run=None):
        entry = self._entry(conn, req['entry_id'])
        ahead = conn.execute("SELECT * FROM queue WHERE target_type = ? AND target = ? AND state IN ('queued', 'running') "
                             "AND id < ? ORDER BY id", (entry['target_type'], entry['target'], entry['id'])).fetchall()
        if entry['state'] == 'running':
            ahead.append(entry)  # joined an entry that another run is running now
        return Turn(WAITING, self._entry_dict(conn, entry, self.journal.clock(conn)), req['id'], ahead=ahead,
                    held_by_own_run=held_by_own_run)

    @staticmethod
    def _ahead_text(row):
        if row['state'] == 'running':
            return '%s running, step %s, runner %s' % (describe(row), row['step'] or '(none)',
                                                       _owner_text(json.loads(row['owner'] or '{}')))
        return '%s queued' % describe(row)

    def _entry_dict(self, conn, row, now):
        entry = {}
        for key in row.keys():
            if key in ('fence', 'fingerprint', 'lease_seconds'):
                continue
            value = row[key]
            if key in ('params', 'steps', 'owner', 'result') and value is not None:
                value = json.loads(value)
            elif key in ('created_at', 'started_at', 'updated_at', 'ended_at', 'step_at', 'lease_expires'):
                value = iso(value)
            entry[key] = value
        entry['runner_alive'] = self._runner_alive(row, now) if row['state'] == 'running' else None
        entry.update(self._takeover(row, now, entry['runner_alive']))
        entry['requested_by'] = [dict(id=req['id'], requested_by=req['requested_by'], source=req['source'],
                                      job_id=req['job_id'], waits=bool(req['waits']), state=req['state'], at=iso(req['at']),
                                      run=json.loads(req['owner']))
                                 for req in conn.execute('SELECT * FROM queue_requests WHERE entry_id = ? ORDER BY id',
                                                         (row['id'],)).fetchall()]
        entry['children'] = [child[0] for child in conn.execute('SELECT id FROM queue WHERE parent_id = ? ORDER BY id',
                                                                (row['id'],)).fetchall()]
        return entry


# ---------------------------------------------------------------------- the tree

def _requesters_text(requests):
    parts = []
    for req in requests:
        how = [req['source']]
        if req.get('job_id'):
            how.insert(0, 'AWX job %s' % req['job_id'])
        parts.append('%s (%s)' % (req['requested_by'], ', '.join(how)))
    if not parts:
        return ''
    text = 'requested by ' + parts[0]
    if len(parts) > 1:
        shown = parts[1:5]
        text += ', also by ' + ', '.join(shown)
        if len(parts) > 5:
            text += ' and %d more' % (len(parts) - 5)
    return text


def _outcome_text(entry):
    result = entry.get('result') or {}
    message = result.get('msg') or result.get('reason')
    if message:
        return str(message)
    if entry['state'] == 'done' and result:
        text = json.dumps(result, sort_keys=True, default=str)
        return text if len(text) <= 100 else text[:97] + '...'
    return ''


def entry_line(entry, entries_by_id, now):
    """One line about one entry: what, state and for how long, which step, who asked."""
    head = '#%d %s %s %s: ' % (entry['id'], entry['kind'], entry['target_type'], entry['target'])
    created, started, ended = (epoch(entry.get(k)) for k in ('created_at', 'started_at', 'ended_at'))
    if entry['state'] == 'queued':
        ahead = [other['id'] for other in entries_by_id.values()
                 if other['target_type'] == entry['target_type'] and other['target'] == entry['target']
                 and other['state'] in ACTIVE and other['id'] < entry['id']]
        state = 'queued for %s' % duration(now - created)
        if ahead:
            state += ', behind %s' % ', '.join('#%d' % i for i in ahead)
    elif entry['state'] == 'running':
        state = 'running for %s' % duration(now - (started or created))
        if entry.get('step'):
            state += ', step "%s" for %s' % (entry['step'], duration(now - (epoch(entry.get('step_at')) or now)))
        runner = _owner_text(entry.get('owner'))
        by_lease = entry.get('runner_judged_by') == 'lease'
        last = epoch(entry.get('updated_at'))
        heard = ', last heard from %s ago' % duration(now - last) if by_lease and last else ''
        if entry.get('runner_alive') and entry.get('takeover_at') and by_lease:
            state += (' (runner %s on another host%s: alive while its lease holds, until %s, in %s; if its job was '
                      'killed, the next run on this %s takes it over then)'
                      % (runner, heard, entry['takeover_at'][:19].replace('T', ' ') + ' UTC',
                         duration(entry.get('takeover_in') or 0), entry['target_type']))
        elif entry.get('runner_alive'):
            state += ' (runner %s)' % runner
        elif by_lease:
            state += (' (runner %s on another host is presumed dead%s: its lease ran out; the next run on this %s '
                      'takes it over)' % (runner, heard, entry['target_type']))
        else:
            state += ' (runner %s is gone: the next run on this %s takes it over)' % (runner, entry['target_type'])
        if entry.get('claims', 0) > 1:
            state += ', claim %d' % entry['claims']
    else:
        state = '%s in %s' % (entry['state'], duration((ended or now) - (started or created)))
        if entry.get('step') and entry['state'] == 'failed':
            state += ' at step "%s"' % entry['step']
        outcome = _outcome_text(entry)
        if outcome:
            state += ': %s' % outcome
    who = _requesters_text(entry.get('requested_by') or [])
    return head + state + ('; ' + who if who else '')


def render_tree(entries, now=None):
    """Lines of text: each root entry, then its cascade below it, oldest first."""
    now = time.time() if now is None else now
    by_id = {entry['id']: entry for entry in entries}
    lines = []

    def walk(entry, prefix, tail):
        lines.append(prefix + tail + entry_line(entry, by_id, now))
        children = [by_id[c] for c in entry.get('children') or [] if c in by_id]
        deeper = prefix + ('  ' if not tail else ('   ' if tail == '`- ' else '|  '))
        for index, child in enumerate(children):
            walk(child, deeper, '`- ' if index == len(children) - 1 else '|- ')

    for entry in entries:
        if entry.get('parent_id') not in by_id:
            walk(entry, '', '')
    return lines
