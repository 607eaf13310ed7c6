# -*- coding: utf-8 -*-
# Copyright: ephemera.workspaces contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The journal's records as callers see them: the fields a record has, how a row becomes a dict (JSON columns
parsed, times in ISO 8601), the redaction of secrets, and the claim a queued run holds. Shared by the store
(``journal.py``, ``journal_pg.py``) and the records (``journal_workspaces.py``, ``journal_records.py``)."""

import datetime
import hashlib
import json
import re

from ansible_collections.ephemera.workspaces.plugins.module_utils.core.errors import JournalError
from ansible_collections.ephemera.workspaces.plugins.module_utils.core.run_identity import Owner

IDEMPOTENCY_TTL = 24 * 3600

WORKSPACE_STATUSES = ('requested', 'provisioning', 'booting', 'bootstrapping', 'registering',
                      'ready', 'failed', 'destroying', 'destroyed', 'template')
WORKSPACE_ACTIVITIES = ('active', 'idle', 'blocked', 'unknown')
DESIRED_STATES = ('present', 'destroyed')

# Workspace columns a caller may set, and how they are stored (JSON columns hold dicts/lists). The resource is named
# provider-neutrally: which provider, its id there, the id recorded before the allocation, where it lives, and the
# provider's task handles by step.
WORKSPACE_FIELDS = ('status', 'activity', 'desired_state', 'provider', 'location', 'resource_id', 'candidate_id',
                    'provider_tasks', 'address', 'repo', 'ref', 'purpose', 'failure', 'params', 'progress', 'facts',
                    'lease', 'lease_expires_at', 'cleanup')
# The names these fields had in schema 1 (Proxmox's words). Records carry them as read-only copies, and writes may
# still use them, so that what users and older callers read keeps its meaning.
LEGACY_FIELDS = (('node', 'location'), ('vmid', 'resource_id'), ('candidate_vmid', 'candidate_id'),
                 ('upids', 'provider_tasks'))
JSON_FIELDS = ('provider_tasks', 'failure', 'params', 'detail', 'resources', 'result', 'owner', 'progress', 'facts',
               'steps', 'lease', 'cleanup', 'source', 'tools', 'errors')
TIME_FIELDS = ('created_at', 'updated_at', 'at', 'started_at', 'ended_at', 'next_retry', 'expires_at', 'leased_at',
               'step_at', 'lease_expires', 'seen_at', 'lease_expires_at', 'finished_at')

# Keys whose values never reach the journal, whatever a caller passes in an event or a result.
SECRET_KEY = re.compile(r'pass(word)?|secret|token|private|credential|api_key|apikey', re.I)
REDACTED = '********'

TEMPLATE_STATES = ('building', 'built', 'failed')
# switch_template without a compare-and-set on the current version.
ANY = object()


def redact(value):
    """A copy of ``value`` with every secret-looking key's value replaced by ``********``."""
    if isinstance(value, dict):
        return {k: REDACTED if SECRET_KEY.search(str(k)) and v not in (None, '') else redact(v)
                for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [redact(v) for v in value]
    return value


def fingerprint(request):
    """SHA-256 of the request in canonical JSON: the same request always gives the same print."""
    return hashlib.sha256(json.dumps(request, sort_keys=True, separators=(',', ':'), default=str).encode()).hexdigest()


def iso(ts):
    if ts is None:
        return None
    return datetime.datetime.fromtimestamp(ts, tz=datetime.timezone.utc).strftime('%Y-%m-%dT%H:%M:%S.%fZ')


def epoch(stamp):
    """The seconds since the epoch of a time as :func:`iso` writes it (None for None)."""
    if not stamp:
        return None
    return (datetime.datetime.strptime(stamp, '%Y-%m-%dT%H:%M:%S.%fZ').replace(tzinfo=datetime.timezone.utc)
            - datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc)).total_seconds()


def runner_alive(row, now):
    """Whether the runner of a queue entry (a row of ``queue``) lives: on this host its process (pid and start time),
    on another host the claim's lease, which every write under the claim renews (see ``queue.py``)."""
    owner = Owner.from_record(row['owner'], row['lease_expires'])
    return owner is not None and owner.is_alive(now)


def dumps(value):
    return json.dumps(value, sort_keys=True, default=str)


def row_dict(row):
    out = {}
    for key in row.keys():
        value = row[key]
        if key in JSON_FIELDS and value is not None:
            value = json.loads(value)
        elif key in TIME_FIELDS:
            value = iso(value)
        out[key] = value
    return out


def claim_parts(claim):
    """``(entry_id, fence)`` of a claim: the dict ``{'entry_id': ..., 'fence': ...}`` that a queued run holds."""
    try:
        entry_id, fence = int(claim['entry_id']), str(claim['fence'])
    except (KeyError, TypeError, ValueError):
        raise JournalError('A claim is the dict {entry_id, fence} that ephemera.workspaces.operation returned as '
                           '"claim" when it gave this run its turn; got %r.' % (claim,))
    if not fence:
        raise JournalError('The claim of operation #%d has an empty fence; pass the claim unchanged.' % entry_id)
    return entry_id, fence
