# -*- coding: utf-8 -*-
# Copyright: ephemera.workspaces contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The heartbeat: a workspace's lease extended in the journal and on its resource.

The rules themselves (expiry arithmetic, refusals, the cleanup status, what readers show) are
core/lease.py's; this module applies them to journal records and resources: a heartbeat is a compare-and-set on the record (so a
heartbeat racing the expiry sweep's claim loses, and is refused on its retry), followed by the
lease labels on the resource, so that a sweep without the journal reads the new expiry.
"""

import time

from ansible_collections.ephemera.workspaces.plugins.module_utils.providers import registry
from ansible_collections.ephemera.workspaces.plugins.module_utils.core import lease as leasing
from ansible_collections.ephemera.workspaces.plugins.module_utils.providers import base
from ansible_collections.ephemera.workspaces.plugins.module_utils.providers.base import ProviderError

# The label ``state`` of a workspace in each status (core/lease.py's sweep table reads these words).
LABEL_STATES = {'requested': 'provisioning', 'provisioning': 'provisioning', 'booting': 'provisioning',
                'bootstrapping': 'provisioning', 'registering': 'provisioning', 'ready': 'ready', 'failed': 'failed',
                'destroying': 'released', 'destroyed': 'released'}


def heartbeat(journal, provider, name, now=None, check_mode=False):
    """Bump the lease of workspace ``name``: (the new record, a note on its labels or None). Refused with a
    LeaseError, changing nothing, for a workspace that is not recorded, has no lease, is being cleaned up or
    destroyed, or whose lease expired."""
    at = time.time() if now is None else now
    touched = {}

    def bump(ws):
        if ws is None:
            raise leasing.LeaseError('Workspace %r is not recorded in %s: there is no lease to extend. Check the name '
                                     '(ephemera.workspaces.status lists the workspaces).' % (name, journal.path))
        if ws['status'] == 'destroyed':
            raise leasing.LeaseError('Heartbeat refused: workspace %s was destroyed. Request a new workspace.' % name)
        if not ws.get('lease'):
            raise leasing.LeaseError('Workspace %s was made before leases: it has no lease to extend, and does not '
                                     'expire by itself.' % name)
        terms = dict(ws['lease'], name=name)
        started = leasing.cleanup_started(leasing.journal_record(ws, []))
        touched.update(leasing.heartbeat(terms, at, cleanup_started=started))
        touched.pop('name', None)
        if check_mode:
            return None
        return (dict(lease=touched, lease_expires_at=touched['expires_at']),
                {'kind': 'recorded', 'action': 'heartbeat',
                 'detail': {'expires_at': leasing.format_time(touched['expires_at'])}})

    if check_mode:
        ws = journal.get_workspace(name)
        bump(ws)
        return dict(ws, lease=touched), None
    # Read and written as one transaction holding the record: a heartbeat beside a running step (or another
    # heartbeat) waits for it instead of losing a compare-and-set and trying again.
    ws = journal.amend_workspace(name, bump)
    return ws, write_labels(journal, provider, ws)


def write_labels(journal, provider, ws, state=None, claim=None):
    """Put the record's lease labels (``state``: the label's state, else the one of the record's status) on its
    resource; None, or a note when they could not be written.

    Journal first: the write is recorded as dispatched (a ``configure`` of the resource) before it goes out, and
    its outcome after. A label that could not be written stays as it was, recorded: the sweep by labels never
    deletes a resource the journal knows, and one labelled provisioning only long after its lease ended.
    """
    if provider is None or not ws.get('lease') or ws.get('resource_id') is None:
        return None
    provider = registry.bind(provider, None)
    if (ws.get('provider') or provider.name) != provider.name:
        return 'the lease labels on its resource were not updated (it lives on %s, and this run talks to %s)' % (
            ws['provider'], provider.name)
    terms = ws['lease']
    cleanup = ws.get('cleanup') or {}
    until = leasing.retained_until(cleanup)
    if until is not None:
        # Retained: a sweep by labels leaves it until its retention ends, and deletes it then, as the expiry sweep does.
        labels = leasing.retained_labels(terms, until)
    elif cleanup.get('retained'):
        # Retained with no end on record: kept, as the sweep by labels reads keep.
        labels = leasing.lease_labels(dict(terms, keep=True), state or LABEL_STATES.get(ws['status'], ws['status']))
    else:
        labels = leasing.lease_labels(terms, state or LABEL_STATES.get(ws['status'], ws['status']))
    name, resource_id = ws['name'], ws['resource_id']
    try:
        resource = provider.find(resource_id, ws.get('location'))
        if resource is None or provider.labels(resource) == labels:
            return None
        journal.append_event(name, 'dispatched', 'configure', {'vmid': resource_id, 'labels': labels}, claim=claim)
        provider.write_labels(resource, labels)
    except ProviderError as err:
        journal.append_event(name, 'observed', 'labels_not_written', {'vmid': resource_id, 'error': str(err)},
                             claim=claim)
        return 'the lease labels on %s were not updated (%s)' % (provider.label(resource_id), err)
    journal.append_event(name, 'observed', 'labels_written', {'vmid': resource_id, 'labels': labels}, claim=claim)
    return None


def lift_deadline(journal, provider, ws, claim=None):
    """Take a cloud's own deletion time off a retained workspace's resource (Compute Engine's termination time), for
    providers that set one: None, a sentence of what was done, or a note when it could not be done. Journal first,
    as write_labels."""
    if provider is None or ws.get('resource_id') is None:
        return None
    provider = registry.bind(provider, None)
    if type(provider).lift_deadline is base.Provider.lift_deadline or \
            (ws.get('provider') or provider.name) != provider.name:
        return None  # the provider sets no deletion time of its own
    name, resource_id = ws['name'], ws['resource_id']
    try:
        resource = provider.find(resource_id, ws.get('location'))
        if resource is None:
            return None
        journal.append_event(name, 'dispatched', 'lift_deadline', {'vmid': resource_id}, claim=claim)
        done = provider.lift_deadline(resource)
    except ProviderError as err:
        journal.append_event(name, 'observed', 'deadline_not_lifted', {'vmid': resource_id, 'error': str(err)},
                             claim=claim)
        return ('the deletion time on %s was not taken off (%s): it is deleted then unless a retain is run again'
                % (provider.label(resource_id), err))
    journal.append_event(name, 'observed', 'deadline_lifted', {'vmid': resource_id, 'done': done}, claim=claim)
    return done
