# -*- coding: utf-8 -*-
# Copyright: ephemera.workspaces contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Workspace leases: when a workspace expires, what may extend it, and how its cleanup is judged.

Pure rules, the same for every provider. Nothing here reads the clock, the journal or a provider:
every function that depends on time takes ``now`` (unix seconds), and every record goes in and
comes out as a plain dict. The journal stores what these functions return; the create flow, the
heartbeat, expiry and cleanup modules and the label sweep decide with them. docs/leases.md gives
each rule with its reason.

A lease is a dict::

    {'created_at': 1764756000.0, 'last_touched_at': 1764757200.0, 'idle_timeout': 1800,
     'ttl': 5400, 'keep': False, 'expires_at': 1764759000.0}

where ``expires_at = min(created_at + ttl, last_touched_at + idle_timeout)``: activity pushes the
idle expiry forward, never past the lifetime (TTL) cap.
"""

import calendar
import collections
import datetime
import math
import re

from ansible_collections.ephemera.workspaces.plugins.module_utils.core.errors import EphemeraError

DEFAULT_IDLE_TIMEOUT = 1800
DEFAULT_TTL = 5400
MAX_TTL = 86400
CLEANUP_RETRY_DELAY = 300
# How long a retained workspace (released without delete, or kept past its lease) stays before the expiry sweep
# deletes it: a week by default (a workspace kept on a Friday is still there after the weekend), a month at most.
DEFAULT_RETAIN_TTL = 7 * 86400
MAX_RETAIN_TTL = 30 * 86400
# How long past its expiry a resource labelled running/provisioning must be before the label sweep counts it stale.
STALE_AFTER = 12 * 3600

LEASE_FIELDS = ('created_at', 'last_touched_at', 'idle_timeout', 'ttl', 'keep', 'expires_at')
CLEANUP_FIELDS = ('cleanup_attempts', 'cleanup_error', 'cleanup_failed_at', 'cleanup_retry_at', 'cleanup_completed_at')

# Activities the agent reports; only evidence of work touches the lease.
TOUCHING_ACTIVITIES = ('active', 'blocked')

# Workspace statuses (the journal's names) and what they mean for cleanup.
CREATING_STATUSES = ('requested', 'provisioning', 'booting', 'bootstrapping', 'registering')
STATUSES = CREATING_STATUSES + ('ready', 'failed', 'destroying', 'destroyed', 'template')
DESIRED_STATES = ('present', 'destroyed')

# cleanup_status() values; None means nobody asked for a cleanup (shown as NO_CLEANUP).
PENDING = 'pending'
COMPLETE = 'complete'
FAILED = 'failed'
RETAINED = 'retained'
NO_CLEANUP = 'none'

# Labels on the resource, so that a sweep can decide without the journal.
LABEL_STATE = 'state'
LABEL_EXPIRES_AT = 'expires_at'
LABEL_KEEP = 'keep'
LABEL_CREATED_AT = 'created_at'
LEASE_LABELS = (LABEL_STATE, LABEL_EXPIRES_AT, LABEL_KEEP, LABEL_CREATED_AT)
LABEL_MAX_LENGTH = 63
LABEL_UNKNOWN = 'unknown'
_LABEL_BAD = re.compile(r'[^A-Za-z0-9_.-]')

# The label sweep's decisions and its state rows.
DELETE = 'delete'
SKIP = 'skip'
REPORT = 'report'
STARTING_STATES = ('running', 'provisioning')
LIVE_STATES = ('leased', 'ready', 'active')
FINISHED_STATES = ('failed', 'released', 'expired')

Decision = collections.namedtuple('Decision', ['decision', 'reason'])
Decision.__doc__ = """What the label sweep does with one resource: ``decision`` (DELETE, SKIP or REPORT) and why."""

_UNIX = re.compile(r'^[0-9]+(\.[0-9]+)?$')
_RFC3339 = re.compile(r'^(?P<year>[0-9]{4})-(?P<month>[0-9]{2})-(?P<day>[0-9]{2})[Tt ]'
                      r'(?P<hour>[0-9]{2}):(?P<minute>[0-9]{2}):(?P<second>[0-9]{2})(?P<fraction>\.[0-9]+)?'
                      r'(?P<offset>[Zz]|[+-][0-9]{2}:[0-9]{2})$')


class LeaseError(EphemeraError):
    """A lease request that is bad input, a heartbeat that comes too late, or a time that does not parse.

    The message says what was wrong and what to give instead.
    """


# ------------------------------------------------------------------ request validation

def _whole_seconds(name, value, default, upper):
    """``value`` as a whole number of seconds, ``default`` when None; LeaseError for anything that is not an int.

    Booleans are ints to Python, so ``ttl: true`` would quietly mean one second: it is refused. Floats and strings
    are refused too: the module's argument spec converts what a playbook writes, so a non-int here is a caller's
    mistake, and a fraction of a second in a lease is never meant.
    """
    if value is None:
        return default
    if isinstance(value, bool):
        raise LeaseError('%s %r is a boolean, not a number of seconds: give a whole number of seconds (default %d).'
                         % (name, value, default), field=name)
    if not isinstance(value, int):
        raise LeaseError('%s %r is not a whole number of seconds (it is a %s): give an integer such as %d.'
                         % (name, value, type(value).__name__, default), field=name)
    if value <= 0:
        raise LeaseError('%s %d is not a positive number of seconds: it would expire the workspace at once. Give a '
                         'whole number of seconds from 1 to %s (default %d).' % (name, value, upper, default), field=name)
    return value


def validate_request(ttl=None, idle_timeout=None, keep=None):
    """The lease terms of a request, checked at request time: ``{'ttl': int, 'idle_timeout': int, 'keep': bool}``.

    Refused (LeaseError), so that a bad request never makes a workspace: a ttl above MAX_TTL (a workspace must not
    outlive a day unnoticed), a zero or negative ttl or idle_timeout, an idle_timeout longer than the ttl (it could
    never take effect, which is surely not what was meant), and anything that is not a whole number (booleans too).
    An idle_timeout that is not given is DEFAULT_IDLE_TIMEOUT, or the ttl when that is shorter, so that a short ttl
    alone is a valid request.
    """
    ttl = _whole_seconds('ttl', ttl, DEFAULT_TTL, MAX_TTL)
    if ttl > MAX_TTL:
        raise LeaseError('ttl %d s is above the cap of %d s (24 hours): give a ttl of at most %d seconds.'
                         % (ttl, MAX_TTL, MAX_TTL), field='ttl')
    if idle_timeout is None:
        idle_timeout = min(DEFAULT_IDLE_TIMEOUT, ttl)
    idle_timeout = _whole_seconds('idle_timeout', idle_timeout, DEFAULT_IDLE_TIMEOUT, 'the ttl (%d)' % ttl)
    if idle_timeout > ttl:
        raise LeaseError('idle_timeout %d s is longer than the ttl %d s, so it could never take effect: give an '
                         'idle_timeout of at most %d seconds, or a longer ttl (at most %d).'
                         % (idle_timeout, ttl, ttl, MAX_TTL), field='idle_timeout')
    if keep is None:
        keep = False
    if not isinstance(keep, bool):
        raise LeaseError('keep %r is not a boolean: give true or false (default false).' % (keep,), field='keep')
    return {'ttl': ttl, 'idle_timeout': idle_timeout, 'keep': keep}


# ------------------------------------------------------------------ the lease

def _number(name, value):
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise LeaseError('%s %r is not a time in unix seconds.' % (name, value), field=name)
    return float(value)


def _terms(lease):
    """The lease's four numbers, checked: a lease record that lost a field must not decide anything."""
    if not isinstance(lease, dict):
        raise LeaseError('A lease is a dict of %s, not %r.' % (', '.join(LEASE_FIELDS), lease))
    missing = [f for f in ('created_at', 'last_touched_at', 'ttl', 'idle_timeout') if lease.get(f) is None]
    if missing:
        raise LeaseError('The lease misses %s: a lease needs %s.' % (', '.join(missing), ', '.join(LEASE_FIELDS)),
                         missing=missing)
    return (_number('created_at', lease['created_at']), _number('last_touched_at', lease['last_touched_at']),
            _number('ttl', lease['ttl']), _number('idle_timeout', lease['idle_timeout']))


def compute_expires_at(lease):
    """``min(created_at + ttl, last_touched_at + idle_timeout)``: idle expiry, capped by the lifetime."""
    created_at, last_touched_at, ttl, idle_timeout = _terms(lease)
    return min(created_at + ttl, last_touched_at + idle_timeout)


def new_lease(now, ttl=None, idle_timeout=None, keep=None):
    """The lease of a workspace requested at ``now``, its terms checked by :func:`validate_request`."""
    now = _number('now', now)
    lease = validate_request(ttl, idle_timeout, keep)
    lease.update(created_at=now, last_touched_at=now)
    lease['expires_at'] = compute_expires_at(lease)
    return lease


def is_expired(lease, now):
    """Whether expiry owns the workspace: ``now >= expires_at``.

    ``keep`` plays no part: a kept workspace still expires when idle or at its TTL. ``expires_at`` is the first
    instant of expiry, so a heartbeat that arrives exactly then is already too late. It is computed from the lease's
    terms, not read from its stored ``expires_at`` (a copy for indexes and labels, which a bad write could skew).
    """
    return _number('now', now) >= compute_expires_at(lease)


def _who(lease):
    name = lease.get('name') if isinstance(lease, dict) else None
    return 'workspace %s' % name if name else 'the workspace'


def heartbeat(lease, now, cleanup_started=False):
    """The lease after a heartbeat at ``now``: ``last_touched_at`` = now, ``expires_at`` recomputed.

    Refused (LeaseError, the lease unchanged) at or after ``expires_at`` or once cleanup has started: a heartbeat can
    never revive a lease that expiry owns, or the expiry sweep and a late heartbeat would race over one workspace.
    A heartbeat whose ``now`` is earlier than the last touch (clocks of two controllers) keeps the later touch: a
    heartbeat never shortens a lease. The other keys of ``lease`` are kept as they are; the result is a new dict.
    """
    now = _number('now', now)
    expires_at = compute_expires_at(lease)
    if cleanup_started:
        raise LeaseError('Heartbeat refused: the cleanup of %s has started, and a heartbeat cannot stop it. '
                         'Request a new workspace.' % _who(lease), expires_at=expires_at)
    if now >= expires_at:
        raise LeaseError('Heartbeat refused: the lease of %s expired at %s (%d s ago), and a heartbeat never revives '
                         'an expired lease. Request a new workspace.'
                         % (_who(lease), format_time(expires_at), int(now - expires_at)), expires_at=expires_at)
    touched = dict(lease)
    touched['last_touched_at'] = max(now, float(lease['last_touched_at']))
    touched['expires_at'] = compute_expires_at(touched)
    return touched


def touch_from_activity(lease, activity, now, cleanup_started=False, at=None):
    """The lease after the agent reported ``activity`` at ``now``: touched for ``active`` or ``blocked``, as of
    ``at`` (the last time the agent was seen making progress; ``now`` when not given).

    An agent that works, or waits for a person, is in use; ``idle``, ``unknown`` and any other value are no evidence
    of use and leave the lease as it is. A report at or after expiry, or once cleanup has started, leaves it as it is
    too: activity never revives a lease (the sweep that reads activity must not fail on a late report, so this does
    not raise where :func:`heartbeat` does).
    """
    if activity not in TOUCHING_ACTIVITIES or cleanup_started or is_expired(lease, now):
        return lease
    return heartbeat(lease, now if at is None else min(float(at), now))


def auto_release(lease):
    """Whether the expiry sweep deletes the workspace when its lease ends: unless ``keep`` is true.

    This is the only thing ``keep`` changes: ``keep: true`` makes the expiry sweep retain the workspace when its lease
    ends (released without delete, for its retention time) instead of deleting it then. A kept workspace still
    expires when idle or at its TTL (:func:`is_expired` ignores keep), and its retention ends too: keep lets a person
    look at a workspace after its job, it never makes one that lives forever.
    """
    return lease.get('keep') is not True


def validate_retain_ttl(retain_ttl=None):
    """How long a retention lasts, in whole seconds: DEFAULT_RETAIN_TTL when None, at most MAX_RETAIN_TTL."""
    value = _whole_seconds('retain_ttl', retain_ttl, DEFAULT_RETAIN_TTL, MAX_RETAIN_TTL)
    if value > MAX_RETAIN_TTL:
        raise LeaseError('retain_ttl %d is more than %d s (30 days): no workspace is retained longer unnoticed. Give '
                         'at most %d, or destroy it and keep its archive instead.'
                         % (value, MAX_RETAIN_TTL, MAX_RETAIN_TTL), field='retain_ttl')
    return value


def retained(record, now, retain_ttl=None):
    """The cleanup record of a workspace retained at ``now`` for ``retain_ttl`` seconds: ``retained``,
    ``retained_at`` and ``retained_until``."""
    now = _number('now', now)
    updated = dict(record)
    updated.update(retained=True, retained_at=now, retained_until=now + validate_retain_ttl(retain_ttl))
    return updated


def retained_until(record):
    """Until when a retained workspace stays (unix seconds), or None when it is not retained. A retention recorded
    before retentions had an end lasts DEFAULT_RETAIN_TTL from when it began; one that says neither (no release of
    this collection writes such a record) has no end anyone can tell, and is None too: never deleted by a guess."""
    if not record.get('retained'):
        return None
    if record.get('retained_until') is not None:
        return _number('retained_until', record['retained_until'])
    if record.get('retained_at') is not None:
        return _number('retained_at', record['retained_at']) + DEFAULT_RETAIN_TTL
    return None


def retention_ended(record, now):
    """Whether a retained workspace's retention is over at ``now`` (``now >= retained_until``): the expiry sweep
    deletes it then."""
    until = retained_until(record)
    return until is not None and _number('now', now) >= until


# ------------------------------------------------------------------ cleanup bookkeeping

def cleanup_failed(record, error, now):
    """The record after a failed cleanup attempt at ``now``: attempts + 1, the error, and a retry in 5 minutes.

    An empty error still records a failure (with a message that says none was given), so that cleanup_status never
    reads a failed attempt as a clean one. The latest attempt decides: an earlier completion is cleared.
    """
    now = _number('now', now)
    message = str(error) if error is not None else ''
    updated = dict(record)
    updated.update(cleanup_attempts=int(record.get('cleanup_attempts') or 0) + 1,
                   cleanup_error=message or 'the cleanup failed without an error message',
                   cleanup_failed_at=now,
                   cleanup_retry_at=now + CLEANUP_RETRY_DELAY,
                   cleanup_completed_at=None)
    return updated


def cleanup_succeeded(record, now):
    """The record after a confirmed cleanup at ``now``: error, failure time and retry cleared, completed_at set.

    ``cleanup_attempts`` stays: how many attempts failed before this one is history worth keeping.
    """
    now = _number('now', now)
    updated = dict(record)
    updated.update(cleanup_error=None, cleanup_failed_at=None, cleanup_retry_at=None, cleanup_completed_at=now)
    updated.setdefault('cleanup_attempts', 0)
    return updated


def retry_due(record, now):
    """Whether a failed cleanup should be tried again at ``now``: its retry time has come (``now >= retry_at``).

    False for a record without a failed attempt or with a completed cleanup: there is nothing to retry.
    """
    now = _number('now', now)
    retry_at = record.get('cleanup_retry_at')
    if retry_at is None or record.get('cleanup_completed_at') is not None:
        return False
    return now >= _number('cleanup_retry_at', retry_at)


def cleanup_started(record):
    """Whether cleanup of the workspace has begun: someone asked for it to be destroyed, or its destroy runs or ran.

    A heartbeat is refused from then on (``heartbeat(lease, now, cleanup_started=cleanup_started(record))``).
    """
    return record.get('desired_state') == 'destroyed' or record.get('status') in ('destroying', 'destroyed')


def cleanup_status(record):
    """One of PENDING, COMPLETE, FAILED, RETAINED, or None when nobody asked for a cleanup (shown as ``none``).

    Decided in this order, so that an error is never hidden behind a state that looks calm:

    1. an error or remaining debt (``cleanup_error``, a non-empty ``cleanup_debt``): FAILED, even when the record
       says destroyed, because something is still left to clean (an identity conflict is recorded as such an error:
       the destroy refuses a resource whose marker does not verify);
    2. ``status`` destroyed: COMPLETE, deletion confirmed (the destroy marks it only once the resource was observed
       absent);
    3. ``desired_state`` destroyed or status destroying: PENDING, a cleanup queued or running;
    4. ``retained``: RETAINED, released without delete or held by a person;
    5. ``cleanup_completed_at`` set, not retained and not destroyed: FAILED, a cleanup that ended without proof of
       deletion;
    6. a status of creation (requested ... registering): PENDING, creation still under way;
    7. ready, or failed with nobody asking for a cleanup: None.

    A caller keeps its own credentials for the workspace until COMPLETE. An unknown status or desired_state is
    refused (LeaseError): a status shown by guessing could show a live workspace as cleaned up.
    """
    status = record.get('status')
    desired = record.get('desired_state') or 'present'
    if status not in STATUSES:
        raise LeaseError('Unknown workspace status %r: expected one of %s.' % (status, ', '.join(STATUSES)),
                         field='status')
    if desired not in DESIRED_STATES:
        raise LeaseError('Unknown desired_state %r: expected one of %s.' % (desired, ', '.join(DESIRED_STATES)),
                         field='desired_state')
    if record.get('cleanup_error') or record.get('cleanup_debt'):
        return FAILED
    if status == 'destroyed':
        return COMPLETE
    if desired == 'destroyed' or status == 'destroying':
        return PENDING
    if record.get('retained'):
        return RETAINED
    if record.get('cleanup_completed_at') is not None:
        return FAILED
    if status in CREATING_STATUSES:
        return PENDING
    return None


def cleanup_status_shown(record):
    """:func:`cleanup_status` as it is shown to people and in inventories: ``none`` for None."""
    status = cleanup_status(record)
    return NO_CLEANUP if status is None else status


# ------------------------------------------------------------------ times

def format_time(seconds):
    """Unix seconds as RFC 3339 in UTC, to the second (``2026-12-03T10:00:00Z``), for messages."""
    moment = datetime.datetime(1970, 1, 1) + datetime.timedelta(seconds=int(math.floor(seconds)))
    return moment.strftime('%Y-%m-%dT%H:%M:%SZ')


def parse_time(text):
    """Unix seconds (float) from a label or field: unix seconds (a number, or a decimal string) or RFC 3339.

    RFC 3339 needs its offset (``Z`` or ``+02:00``): a time without one is ambiguous, and guessing the zone of an
    expiry may delete a workspace hours early. Fractional seconds are kept; a leap second (``:60``) is counted as
    the second after ``:59``. Anything else raises LeaseError.
    """
    if isinstance(text, (int, float)) and not isinstance(text, bool):
        if not math.isfinite(text):
            raise LeaseError('The time %r is not finite: give unix seconds or an RFC 3339 time.' % (text,))
        return float(text)
    if not isinstance(text, str):
        raise LeaseError('The time %r parses as neither unix seconds nor RFC 3339: give unix seconds (1796292000) or '
                         'an RFC 3339 time (2026-12-03T10:00:00Z).' % (text,))
    value = text.strip()
    if _UNIX.match(value):
        return float(value)
    found = _RFC3339.match(value)
    if found:
        parts = {k: int(v) for k, v in found.groupdict().items() if k not in ('fraction', 'offset')}
        offset = found.group('offset')
        try:
            # datetime checks the calendar (no February 30th); a leap second is checked as :59.
            datetime.datetime(parts['year'], parts['month'], parts['day'], parts['hour'], parts['minute'],
                              min(parts['second'], 59))
            if parts['second'] > 60:
                raise ValueError('second must be in 0..60')
            offset_seconds = 0
            if offset not in ('Z', 'z'):
                hours, minutes = int(offset[1:3]), int(offset[4:6])
                if hours > 23 or minutes > 59:
                    raise ValueError('offset must be within -23:59..+23:59')
                offset_seconds = (hours * 3600 + minutes * 60) * (-1 if offset[0] == '-' else 1)
        except ValueError as exc:
            raise LeaseError('The time %r is not a valid RFC 3339 time (%s): give unix seconds (1796292000) or an '
                             'RFC 3339 time (2026-12-03T10:00:00Z).' % (text, exc))
        seconds = calendar.timegm((parts['year'], parts['month'], parts['day'], parts['hour'], parts['minute'],
                                   parts['second'], 0, 0, 0))
        return seconds + float(found.group('fraction') or 0) - offset_seconds
    raise LeaseError('The time %r parses as neither unix seconds nor RFC 3339: give unix seconds (1796292000) or an '
                     'RFC 3339 time with its offset (2026-12-03T10:00:00Z, 2026-12-03T12:00:00+02:00).' % (text,))


# ------------------------------------------------------------------ labels

def label_value(value):
    """``value`` as a label value every provider accepts: ``[A-Za-z0-9_.-]``, at most 63 characters.

    Surrounding whitespace is dropped, every other character outside the set becomes ``-`` (so the length and the
    shape stay recognisable), and the result is cut to 63 characters. None and empty values are ``unknown``: a
    label that is present but empty reads as "not set" on some providers and as an error on others. Booleans are
    ``true``/``false``, as the sweep reads them.
    """
    if value is None:
        return LABEL_UNKNOWN
    if isinstance(value, bool):
        return 'true' if value else 'false'
    text = str(value).strip()
    if not text:
        return LABEL_UNKNOWN
    return _LABEL_BAD.sub('-', text)[:LABEL_MAX_LENGTH]


def retained_labels(lease, until):
    """The lease labels of a retained resource: state ``retained``, ``expires_at`` the end of its retention, keep
    false: a sweep by labels deletes it once its retention is over, as the expiry sweep does."""
    labels = lease_labels(dict(lease, keep=False), RETAINED)
    labels[LABEL_EXPIRES_AT] = label_value(int(math.ceil(until)))
    return labels


def lease_labels(lease, state):
    """The lease labels of a resource in ``state``: state, expires_at, keep, created_at.

    Times are whole unix seconds: ``expires_at`` rounded up, so that the label never says a workspace expires
    before its lease does, and ``created_at`` rounded down. The ownership marker goes beside these labels but its
    HMAC covers only the workspace's identity, never these fields, which change with every heartbeat.
    """
    return {
        LABEL_STATE: label_value(state),
        LABEL_EXPIRES_AT: label_value(int(math.ceil(compute_expires_at(lease)))),
        LABEL_KEEP: label_value(lease.get('keep') is True),
        LABEL_CREATED_AT: label_value(int(math.floor(_number('created_at', lease.get('created_at'))))),
    }


# ------------------------------------------------------------------ the label sweep

def _label(labels, key):
    """A label's value as text, or None when it is absent, empty or ``unknown`` (what label_value writes for None)."""
    value = labels.get(key)
    if value is None:
        return None
    if isinstance(value, bool):
        value = 'true' if value else 'false'
    text = str(value).strip()
    if not text or text.lower() == LABEL_UNKNOWN:
        return None
    return text


def _by_labels(labels, now):
    """The sweep's decision from the labels alone, before the ownership marker is considered."""
    if not labels or not any(_label(labels, key) is not None for key in LEASE_LABELS):
        return Decision(SKIP, 'no lease labels: not a workspace the label sweep manages')
    # Absent or empty is the default, false; any other value but true/false (``unknown`` too) is read as kept.
    keep = labels.get(LABEL_KEEP)
    keep = ('true' if keep else 'false') if isinstance(keep, bool) else str('' if keep is None else keep).strip()
    kept = None
    if keep.lower() == 'true':
        kept = 'keep=true'
    elif keep and keep.lower() != 'false':
        kept = 'keep=%s is neither true nor false, read as kept' % keep
    raw_expiry = _label(labels, LABEL_EXPIRES_AT)
    expires_at = None
    if raw_expiry is not None:
        try:
            expires_at = parse_time(raw_expiry)
        except LeaseError:
            if kept:
                return Decision(SKIP, '%s: left alone (its expires_at=%s does not parse)' % (kept, raw_expiry))
            return Decision(REPORT, 'expires_at=%s parses as neither unix seconds nor RFC 3339' % raw_expiry)
    if kept:
        # A kept workspace is retained when its lease ends, for a retention the labels do not carry: it is deleted
        # only once the longest retention after its expiry is over, never sooner than the expiry sweep would.
        if expires_at is None:
            return Decision(SKIP, '%s and no expires_at: nothing says it expired' % kept)
        until = expires_at + MAX_RETAIN_TTL
        if now > until:
            return Decision(DELETE, '%s: expires_at %s plus the longest retention (%d days) has passed'
                            % (kept, format_time(expires_at), MAX_RETAIN_TTL // 86400))
        return Decision(SKIP, '%s: held until expires_at plus the longest retention, %s' % (kept, format_time(until)))
    state = (_label(labels, LABEL_STATE) or '').lower()
    shown = state or 'missing'
    if state in FINISHED_STATES:
        return Decision(DELETE, 'state %s: finished' % state)
    if expires_at is None:
        return Decision(SKIP, 'state %s and no expires_at: nothing says it expired' % shown)
    when = '%s (%s)' % (format_time(expires_at), raw_expiry)
    if state in STARTING_STATES:
        if now > expires_at + STALE_AFTER:
            return Decision(DELETE, 'state %s and stale: expires_at %s is more than %d hours past'
                            % (state, when, STALE_AFTER // 3600))
        return Decision(SKIP, 'state %s: not stale until %d hours past expires_at %s'
                        % (state, STALE_AFTER // 3600, when))
    if now > expires_at:
        return Decision(DELETE, 'state %s: expires_at %s has passed' % (shown, when))
    return Decision(SKIP, 'state %s: expires_at %s has not passed' % (shown, when))


def cleanup_decision(labels, now, marker_verified):
    """What the direct label sweep does with a resource: a Decision of DELETE, SKIP or REPORT, with its reason.

    Decided from the resource's labels (the journal may be lost), by the table in docs/leases.md. "Past" means
    ``now > expires_at``. A resource the labels would delete is deleted only when its ownership marker verifies
    (``marker_verified`` is True, or the verdict ``'verified'``; anything else, a verdict such as ``'forged'``
    included, counts as not verified): otherwise it is reported, never deleted, because labels are hints that anyone
    can copy. A resource the labels skip is skipped either way; it is reported when it falls due.
    """
    now = _number('now', now)
    decided = _by_labels(labels or {}, now)
    if decided.decision == DELETE and not (marker_verified is True or marker_verified == 'verified'):
        return Decision(REPORT, '%s; but its ownership marker does not verify: not ours to delete' % decided.reason)
    return decided


# ------------------------------------------------------------------ journal records

def journal_record(ws, debt=None):
    """The flat record core.lease reads (status, desired_state, the cleanup fields, retained, cleanup_debt)."""
    record = dict(ws.get('cleanup') or {})
    record.update(status=ws['status'], desired_state=ws['desired_state'],
                  cleanup_debt=list(debt if debt is not None else ws.get('cleanup_debt') or []))
    return record


def view(ws, now, debt=None):
    """What a reader shows of the lease at ``now``: ``lease`` (times as RFC 3339, ``expires_in`` seconds from now)
    and ``cleanup_status`` (pending, complete, failed, retained or none)."""
    terms = ws.get('lease')
    shown = None
    if terms:
        shown = dict(terms)
        for key in ('created_at', 'last_touched_at', 'expires_at'):
            shown[key] = format_time(terms[key]) if terms.get(key) is not None else None
        shown['expires_in'] = int(compute_expires_at(terms) - _number('now', now))
    return {'lease': shown, 'cleanup_status': cleanup_status_shown(journal_record(ws, debt))}
