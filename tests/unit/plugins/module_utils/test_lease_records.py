"""Leases where they are kept: the journal record (schema 3), the heartbeat on it, the labels in a container's
description beside the marker, and what readers show."""

import pytest

from ansible_collections.ephemera.workspaces.plugins.module_utils.core import lease as leasing
from ansible_collections.ephemera.workspaces.plugins.module_utils.core import ownership
from ansible_collections.ephemera.workspaces.plugins.module_utils.core.journal import Journal
from ansible_collections.ephemera.workspaces.plugins.module_utils.flows import lease as lease_flow
from ansible_collections.ephemera.workspaces.plugins.module_utils.providers.proxmox.provider import (
    lease_labels_of,
    lease_line,
    with_lease,
)

NOW = 1796290000.0
SECRET = b'lease-records-test-secret'


@pytest.fixture
def journal(tmp_path):
    with Journal.open(str(tmp_path / 'journal.sqlite')) as opened:
        yield opened


def record(journal, name, status='ready', terms=None, **fields):
    terms = terms if terms is not None else leasing.new_lease(NOW, ttl=600, idle_timeout=60)
    extra = dict(lease=terms, lease_expires_at=terms['expires_at']) if terms else {}
    extra.update(fields)
    return journal.create_workspace(name, status=status, **extra)


def test_the_journal_keeps_the_lease_and_its_expiry(journal):
    ws = record(journal, 'a')
    assert ws['lease'] == leasing.new_lease(NOW, ttl=600, idle_timeout=60)
    assert ws['lease_expires_at'].startswith(leasing.format_time(NOW + 60)[:19])
    assert ws['cleanup'] == {}


def test_a_heartbeat_extends_the_idle_expiry_up_to_the_ttl(journal):
    record(journal, 'a')
    ws, note = lease_flow.heartbeat(journal, None, 'a', now=NOW + 50)
    assert note is None and ws['lease']['last_touched_at'] == NOW + 50 and ws['lease']['expires_at'] == NOW + 110
    for minute in range(2, 12):
        ws, dummy = lease_flow.heartbeat(journal, None, 'a', now=NOW + 50 * minute)
    # Busy all along, it still expires at its ttl.
    assert ws['lease']['expires_at'] == NOW + 600
    assert [e['action'] for e in journal.events('a')].count('heartbeat') == 11


@pytest.mark.parametrize('fields, status, expected', [
    ({}, 'destroyed', 'workspace a was destroyed'),
    ({'desired_state': 'destroyed'}, 'destroying', 'the cleanup of workspace a has started'),
    ({'desired_state': 'destroyed'}, 'ready', 'the cleanup of workspace a has started'),
])
def test_a_heartbeat_once_cleanup_started_is_refused_and_writes_nothing(journal, fields, status, expected):
    ws = record(journal, 'a', status=status, **fields)
    with pytest.raises(leasing.LeaseError, match=expected):
        lease_flow.heartbeat(journal, None, 'a', now=NOW + 10)
    assert journal.get_workspace('a')['generation'] == ws['generation']


def test_a_heartbeat_at_expiry_or_without_a_lease_is_refused(journal):
    record(journal, 'a')
    with pytest.raises(leasing.LeaseError, match='expired at'):
        lease_flow.heartbeat(journal, None, 'a', now=NOW + 60)
    journal.create_workspace('old', status='ready')
    with pytest.raises(leasing.LeaseError, match='made before leases'):
        lease_flow.heartbeat(journal, None, 'old', now=NOW)
    with pytest.raises(leasing.LeaseError, match="Workspace 'none' is not recorded"):
        lease_flow.heartbeat(journal, None, 'none', now=NOW)


def test_check_mode_predicts_the_heartbeat_and_writes_nothing(journal):
    ws = record(journal, 'a')
    predicted, dummy = lease_flow.heartbeat(journal, None, 'a', now=NOW + 30, check_mode=True)
    assert predicted['lease']['expires_at'] == NOW + 90
    assert journal.get_workspace('a')['generation'] == ws['generation']


@pytest.mark.parametrize('status, fields, shown', [
    ('ready', {}, 'none'),
    ('bootstrapping', {}, 'pending'),
    ('destroying', {'desired_state': 'destroyed'}, 'pending'),
    ('destroyed', {'desired_state': 'destroyed'}, 'complete'),
    ('ready', {'cleanup': {'retained': True}}, 'retained'),
    ('destroying', {'desired_state': 'destroyed', 'cleanup': {'cleanup_attempts': 1, 'cleanup_error': 'locked'}},
     'failed'),
])
def test_readers_show_the_cleanup_status_of_a_record(journal, status, fields, shown):
    ws = record(journal, 'a', status=status, **fields)
    assert leasing.view(ws, NOW + 10)['cleanup_status'] == shown


def test_readers_show_remaining_debt_as_a_failed_cleanup_and_times_as_rfc_3339(journal):
    ws = record(journal, 'a', status='destroyed', desired_state='destroyed')
    shown = leasing.view(ws, NOW + 10, debt=[{'resource': 'lxc/100@pve1'}])
    assert shown['cleanup_status'] == 'failed'
    assert shown['lease']['expires_at'] == leasing.format_time(NOW + 60) and shown['lease']['expires_in'] == 50
    assert leasing.view(journal.create_workspace('old', status='ready'), NOW)['lease'] is None


def test_the_lease_line_sits_beside_the_marker_and_an_operators_notes():
    marker = ownership.render(SECRET, ownership.controller_id(SECRET), 'a', 105)
    labels = leasing.lease_labels(leasing.new_lease(NOW, ttl=600, idle_timeout=60), 'provisioning')
    described = with_lease(marker, labels)
    assert described == marker + '\n' + lease_line(labels)
    assert lease_labels_of(described) == labels
    # A note an operator added stays; a new lease line replaces the old one, the marker untouched.
    noted = described + '\nowner: team-a'
    later = dict(labels, state='ready', expires_at='1796290700')
    relabelled = with_lease(noted, later)
    assert lease_labels_of(relabelled) == later and relabelled.count('ephemera-lease:') == 1
    assert 'owner: team-a' in relabelled and marker in relabelled
    assert ownership.verify(relabelled, SECRET, ownership.controller_id(SECRET), 'a', 105) == ownership.VERIFIED
    assert lease_labels_of('no lease here') == {} and lease_labels_of(None) == {}
