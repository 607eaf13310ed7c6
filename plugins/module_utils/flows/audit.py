# -*- coding: utf-8 -*-
# Copyright: ephemera.workspaces contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The lease audit: every workspace whose cleanup is pending, failed or retained, or whose lease expired before its
cleanup started, with its attempts, last error, next retry and what to do.

It reads the journal and nothing else, and writes nothing. Each workspace falls into one category: its
cleanup_status (core/lease.py's rules), except that a workspace with no cleanup asked for (``none``) whose lease has
expired is ``expired``: the next expiry sweep takes it. A workspace made before leases never expires by itself.

What to do in each case is one table, ADVICE; :func:`advice` picks its row from an entry and the time, and nothing
else: it is pure, like :func:`entry` and :func:`report_line`.
"""

import re

from ansible_collections.ephemera.workspaces.plugins.module_utils.core import lease as leasing
from ansible_collections.ephemera.workspaces.plugins.module_utils.core.errors import EphemeraError
from ansible_collections.ephemera.workspaces.plugins.module_utils.flows import placing

EXPIRED = 'expired'
# The audit's categories: core/lease.py's cleanup statuses, and expired.
CATEGORIES = (leasing.PENDING, leasing.FAILED, leasing.RETAINED, EXPIRED, leasing.COMPLETE, leasing.NO_CLEANUP)
# What the audit lists unless told otherwise, and what its summary line always counts.
DEFAULT_CATEGORIES = (leasing.PENDING, leasing.FAILED, leasing.RETAINED, EXPIRED)

# A debt whose retry lies this far after its failure was recorded as needing an operator (flows/destroy.py retries
# those after OPERATOR_RETRY, 6 hours, and the others after 5 minutes).
OPERATOR_RETRY = 6 * 3600
# What an error that no retry cures asks a person to do, by the words it uses (the provider's delete blockers and the
# HA manager keeping a container up); the error itself gives the exact command.
PROTECTION = re.compile(r'\bprotection\b', re.I)
HA = re.compile(r'\bHA\b|ha-manager', re.I)
OPERATOR_ACTIONS = (
    (PROTECTION, 'remove its protection'),
    (HA, 'remove it from HA'),
    (re.compile(r'\block\b', re.I), 'clear its stale lock'),
)
OPERATOR_DEFAULT_ACTION = 'act on it'

DESTROY = 'ephemera.workspaces.destroy -e workspace={name}'

# What to do, by case. Every row is one sentence; {name}, {expires_at}, {next_retry} and {action} are filled in.
ADVICE = {
    'creating': 'creation is under way; nothing to do',
    'destroying': 'a destroy is queued or running; run ephemera.workspaces.status to see it, or '
                  'ephemera.workspaces.reconcile if its run died',
    'retry_later': 'retried at {next_retry} by the expiry sweep or reconcile; to retry now run ' + DESTROY,
    'retry_due': 'its retry was due at {next_retry} and has not run yet; run ephemera.workspaces.expire or '
                 'ephemera.workspaces.reconcile, or ' + DESTROY + ' to retry it now',
    'needs_operator': 'no retry cures this: {action}, as the last error says, then run ' + DESTROY,
    'no_retry': 'the cleanup failed and no retry is scheduled; read the last error, then run ' + DESTROY,
    'unproven': 'the cleanup ended without proof of deletion; run ephemera.workspaces.reconcile to compare the '
                'journal with the cluster, then ' + DESTROY + ' if the resource is still there',
    'retained': 'released without delete until {retained_until}, when the expiry sweep deletes it; destroy it '
                'sooner with ' + DESTROY + ' once its work is no longer needed',
    'retained_no_end': 'released without delete; destroy it with ' + DESTROY + ' when its work is no longer needed',
    'retention_over': 'released without delete until {retained_until}, which has passed; the next expiry sweep '
                      '(ephemera.workspaces.expire) deletes it',
    'expired': 'expired at {expires_at}; the next expiry sweep (ephemera.workspaces.expire) releases it',
    'complete': 'deletion confirmed; nothing to do',
    'leased': 'no cleanup asked for; its lease runs until {expires_at}, then the expiry sweep releases it',
    'kept': 'no cleanup asked for; its lease runs until {expires_at}, then the expiry sweep retains it (keep=true) '
            'and deletes it when the retention ends',
    'unleased': 'made before leases, it never expires by itself; destroy it with ' + DESTROY
                + ' when its work is no longer needed',
}


def _time(value):
    """A time of the journal (unix seconds, or the journal's ISO text) as RFC 3339 to the second; None for None."""
    if value is None or value == '':
        return None
    return leasing.format_time(leasing.parse_time(value))


def _last_debt(debts):
    """The debt that changed last (the journal lists them by resource)."""
    return max(debts, key=lambda debt: debt.get('updated_at') or '') if debts else None


def _needs_operator(errors, debts):
    """Whether a person must act before a retry can succeed: an error in the words of protection or HA, or a debt the
    destroy flow recorded with an operator's retry window."""
    if any(error and (PROTECTION.search(error) or HA.search(error)) for error in errors):
        return True
    for debt in debts:
        try:
            window = leasing.parse_time(debt['next_retry']) - leasing.parse_time(debt['updated_at'])
        except (KeyError, leasing.LeaseError):
            continue
        if window >= OPERATOR_RETRY:
            return True
    return False


def entry(ws, debts, now):
    """What the audit says of one workspace record (``ws``, as the journal gives it) with its cleanup debt rows at
    ``now``: a dict of plain values, with its ``advice``."""
    try:
        record = leasing.journal_record(ws, debts)
        shown = leasing.cleanup_status_shown(record)
        terms = ws.get('lease')
        expires_at = leasing.compute_expires_at(terms) if terms else None
    except leasing.LeaseError as err:
        raise EphemeraError('Workspace %s: %s' % (ws.get('name'), err), workspace=ws.get('name'))
    cleanup = ws.get('cleanup') or {}
    last = _last_debt(debts)
    member = None if (ws.get('facts') or {}).get('claimed_by') else \
        ((ws.get('params') or {}).get('pool_member') or {}).get('pool')
    if member and shown == leasing.PENDING and ws['desired_state'] == 'present':
        # A warm pool member waits in the status its last create step left: no cleanup is under way, its lease runs.
        shown = leasing.NO_CLEANUP
    category = shown
    if shown == leasing.NO_CLEANUP and expires_at is not None and now >= expires_at:
        category = EXPIRED
    attempts = max([int(cleanup.get('cleanup_attempts') or 0)] + [int(d.get('attempts') or 0) for d in debts])
    last_error = cleanup.get('cleanup_error') or (last or {}).get('last_error')
    found = {
        'name': ws['name'],
        # A warm pool member's pool (docs/pools.md); None for a workspace.
        'warm_pool': member,
        'category': category,
        'cleanup_status': shown,
        'status': ws['status'],
        'desired_state': ws['desired_state'],
        'resource': {'provider': ws.get('provider'), 'resource_id': ws.get('resource_id'),
                     'location': ws.get('location')},
        'place': placing.place_of(ws),
        'expires_at': leasing.format_time(expires_at) if expires_at is not None else None,
        'expires_in': int(expires_at - now) if expires_at is not None else None,
        'keep': bool(terms.get('keep')) if terms else False,
        'retained_until': None,
        'retained_in': None,
        'attempts': attempts,
        'last_error': last_error,
        'failed_at': _time(cleanup.get('cleanup_failed_at')) or (_time(last['updated_at']) if last else None),
        'next_retry': _time(cleanup.get('cleanup_retry_at')) or (_time(last['next_retry']) if last else None),
        'needs_operator': category == leasing.FAILED and _needs_operator(
            [cleanup.get('cleanup_error')] + [d.get('last_error') for d in debts], debts),
        'cleanup_debt': [{'resource': d['resource'], 'attempts': d['attempts'], 'last_error': d['last_error'],
                          'next_retry': _time(d['next_retry'])} for d in debts],
    }
    until = leasing.retained_until(cleanup)
    if until is not None and category == leasing.RETAINED:
        found.update(retained_until=leasing.format_time(until), retained_in=int(until - now))
    found['advice'] = advice(found, now)
    return found


def case(found, now):
    """The row of ADVICE for an entry at ``now``."""
    category = found['category']
    if category == leasing.PENDING:
        started = leasing.cleanup_started({'status': found['status'], 'desired_state': found['desired_state']})
        return 'destroying' if started else 'creating'
    if category == leasing.FAILED:
        if found.get('needs_operator'):
            return 'needs_operator'
        if found.get('next_retry'):
            return 'retry_due' if now >= leasing.parse_time(found['next_retry']) else 'retry_later'
        return 'no_retry' if found.get('last_error') else 'unproven'
    if category == leasing.NO_CLEANUP:
        if not found.get('expires_at'):
            return 'unleased'
        return 'kept' if found.get('keep') else 'leased'
    if category == leasing.RETAINED and found.get('retained_in') is not None and found['retained_in'] <= 0:
        return 'retention_over'
    if category == leasing.RETAINED and found.get('retained_until') is None:
        # A retention whose end nobody can tell (it says neither when it began nor when it ends): never deleted.
        return 'retained_no_end'
    return category


def operator_action(error):
    """What an error that no retry cures asks a person to do, in a few words."""
    for pattern, action in OPERATOR_ACTIONS:
        if error and pattern.search(error):
            return action
    return OPERATOR_DEFAULT_ACTION


def advice(found, now):
    """One sentence saying what to do about an entry at ``now``: its row of ADVICE, filled in."""
    return ADVICE[case(found, now)].format(name=found['name'], expires_at=found.get('expires_at'),
                                           next_retry=found.get('next_retry'),
                                           retained_until=found.get('retained_until'),
                                           action=operator_action(found.get('last_error')))


def _one_line(text):
    """``text`` on one line, without a closing full stop (the line goes on after it)."""
    return ' '.join(str(text).split()).rstrip('.')


def report_line(found):
    """``NAME: CATEGORY (details): advice``; a failure's details are its attempts, last error and next retry."""
    if found['category'] == leasing.FAILED:
        details = []
        if found['attempts']:
            details.append('attempt %d' % found['attempts'])
        if found['last_error']:
            details.append('last error: %s' % _one_line(found['last_error']))
        if found['next_retry']:
            details.append('next retry %s' % found['next_retry'])
    elif found['category'] == leasing.RETAINED:
        details = ['status %s' % found['status']] + (
            ['retained until %s' % found['retained_until']] if found.get('retained_until') else [])
    else:
        details = ['status %s' % found['status']]
    if found.get('warm_pool'):
        details.insert(0, 'member of warm pool %s' % found['warm_pool'])
    return '%s: %s (%s): %s' % (found['name'], found['category'], ', '.join(details) or 'no error recorded',
                                found['advice'])


def summary_line(counts, categories):
    """``lease audit: N pending, N failed, N retained, N expired``, and the other categories that were asked for."""
    shown = list(DEFAULT_CATEGORIES) + [c for c in CATEGORIES if c not in DEFAULT_CATEGORIES and c in categories]
    return 'lease audit: ' + ', '.join('%d %s' % (counts[c], c) for c in shown)


def audit_records(records, now, categories=DEFAULT_CATEGORIES, every=False):
    """The audit of ``records`` (pairs of a workspace record and its debt rows) at ``now``: ``entries`` of the
    selected categories (every workspace with ``every``), ``counts``, the number of workspaces in each category
    (listed or not), and ``report``, a summary line and a line per entry."""
    categories = CATEGORIES if every else tuple(categories or DEFAULT_CATEGORIES)
    everything = [entry(ws, debts, now) for ws, debts in records]
    counts = {c: 0 for c in CATEGORIES}
    for found in everything:
        counts[found['category']] += 1
    entries = [found for found in everything if found['category'] in categories]
    return {'entries': entries, 'counts': counts, 'places': placing.by_place(entries, 'category'),
            'report': [summary_line(counts, categories)] + [report_line(found) for found in entries]}


def audit(journal, now, categories=DEFAULT_CATEGORIES, every=False):
    """:func:`audit_records` of every workspace the journal holds, by name; reads only."""
    return audit_records([(ws, journal.cleanup_debts(ws['name'])) for ws in journal.list_workspaces()], now,
                         categories, every)
