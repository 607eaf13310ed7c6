"""Leases on the try-out cluster: the request records one, the container carries its labels beside the marker,
a heartbeat extends it in the journal and on the container, and nothing revives an expired lease.
"""

import json
import os
import time

import pytest

from ansible_collections.ephemera.workspaces.plugins.module_utils.core import lease as leasing
from ansible_collections.ephemera.workspaces.plugins.module_utils.core import ownership
from ansible_collections.ephemera.workspaces.plugins.module_utils.providers.proxmox.provider import lease_labels_of

from tests.ansible_run import run_ansible

from .createrun import DESTROY, Controller, request_vars

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
HEARTBEAT = os.path.join(ROOT, 'playbooks', 'heartbeat.yml')


@pytest.fixture(scope='module')
def leased(cluster, repo, tmp_path_factory):
    ctl = Controller(cluster, tmp_path_factory.mktemp('lease'))
    run = ctl.create(request_vars(repo.url, 'leased', ttl=600, idle_timeout=120))
    assert run.ok, run.explain()
    try:
        yield ctl
    finally:
        ctl.stop()


def test_the_request_records_the_lease_and_the_container_carries_it(leased):
    ws = leased.workspace('leased')
    terms = ws['lease']
    assert (terms['ttl'], terms['idle_timeout'], terms['keep']) == (600, 120, False)
    assert terms['created_at'] == terms['last_touched_at']
    assert terms['expires_at'] == terms['created_at'] + 120 == leasing.compute_expires_at(terms)
    assert ws['cleanup'] == {}
    description = leased.config(ws['vmid'])['description']
    assert lease_labels_of(description) == leasing.lease_labels(terms, 'ready')
    # The labels sit beside the marker, which still verifies: its HMAC covers the identity only.
    assert leased.marker_verdict(ws['vmid'], 'leased') == ownership.VERIFIED


def test_a_heartbeat_moves_the_idle_expiry_in_the_journal_and_on_the_container(leased):
    before = leased.workspace('leased')
    time.sleep(1.1)
    run = leased.create({'workspace': 'leased'}, playbook=HEARTBEAT)
    assert run.ok and run.stats()['changed'] == 1, run.explain()
    after = leased.workspace('leased')
    assert after['lease']['last_touched_at'] > before['lease']['last_touched_at']
    assert after['lease']['expires_at'] == after['lease']['last_touched_at'] + 120
    assert after['lease']['created_at'] == before['lease']['created_at']
    assert lease_labels_of(leased.config(after['vmid'])['description']) == leasing.lease_labels(after['lease'], 'ready')
    # Journal first: the heartbeat, then the label write announced, then its outcome.
    assert [(e['kind'], e['action']) for e in leased.events('leased')][-3:] == [
        ('recorded', 'heartbeat'), ('dispatched', 'configure'), ('observed', 'labels_written')]
    shown = run.task('Heartbeat leased')
    assert shown['lease']['expires_at'] == leasing.format_time(after['lease']['expires_at'])
    assert 0 < shown['lease']['expires_in'] <= 120


def test_workspace_info_shows_the_lease_and_the_cleanup_status(leased):
    result = run_ansible(['ansible', 'localhost', '-i', os.path.join(ROOT, 'inventories', 'localpve'), '-m',
                          'ephemera.workspaces.workspace_info', '-a', 'name=leased'],
                         env={'LOCALPVE_STATE_DIR': leased.info['state_dir'], 'EPHEMERA_JOURNAL': leased.journal_path})
    record = result.data['plays'][0]['tasks'][0]['hosts']['localhost']['workspaces'][0]
    assert record['cleanup_status'] == 'none' and record['lease']['ttl'] == 600
    assert record['lease']['expires_at'].endswith('Z') and record['lease']['expires_in'] > 0


def test_a_heartbeat_after_expiry_is_refused_and_changes_nothing(leased, repo):
    run = leased.create(request_vars(repo.url, 'short', ttl=600, idle_timeout=2))
    assert run.ok, run.explain()
    ws = leased.workspace('short')
    time.sleep(max(0.0, ws['lease']['expires_at'] - time.time()) + 0.5)
    description = leased.config(ws['vmid'])['description']
    late = leased.create({'workspace': 'short'}, playbook=HEARTBEAT)
    assert not late.ok
    message = late.failure()[1]['msg']
    assert 'Heartbeat refused: the lease of workspace short expired at' in message and 'never revives' in message
    assert leased.workspace('short')['generation'] == ws['generation']
    assert leased.config(ws['vmid'])['description'] == description


def test_a_heartbeat_for_an_unknown_or_destroyed_workspace_is_refused(leased):
    unknown = leased.create({'workspace': 'nobody'}, playbook=HEARTBEAT)
    assert not unknown.ok and "Workspace 'nobody' is not recorded" in unknown.failure()[1]['msg']
    gone = leased.create({'workspace': 'short'}, playbook=DESTROY)
    assert gone.ok, gone.explain()
    late = leased.create({'workspace': 'short'}, playbook=HEARTBEAT)
    assert not late.ok and 'workspace short was destroyed' in late.failure()[1]['msg']


BAD_LEASES = {
    'above-cap': ({'ttl': 86401}, 'ttl 86401 s is above the cap of 86400 s'),
    'zero-ttl': ({'ttl': 0}, 'ttl'),
    'negative-idle': ({'idle_timeout': -5}, 'idle_timeout'),
    'idle-longer': ({'ttl': 600, 'idle_timeout': 900}, 'idle_timeout 900 s is longer than the ttl 600 s'),
}


@pytest.mark.parametrize('case', sorted(BAD_LEASES))
def test_bad_lease_terms_are_refused_at_the_request(controller, repo, case):
    change, expected = BAD_LEASES[case]
    state = controller.cluster_state()
    run = controller.create(request_vars(repo.url, 'bad-lease', **change))
    assert not run.ok and run.failure()[0] == 'Check the request for bad-lease', run.explain()
    assert expected in run.failure()[1]['msg']
    assert controller.workspace('bad-lease') is None and controller.cluster_state() == state


def test_a_rerun_cannot_change_the_lease(leased, repo):
    before = leased.workspace('leased')
    run = leased.create(request_vars(repo.url, 'leased', ttl=3600, idle_timeout=120))
    assert not run.ok
    message = run.failure()[1]['msg']
    assert 'ttl: 600, not 3600' in message and 'a lease is extended by heartbeats' in message
    assert leased.workspace('leased')['generation'] == before['generation']
    assert json.dumps(leased.workspace('leased')['lease'], sort_keys=True) == json.dumps(before['lease'], sort_keys=True)


def test_status_shows_each_workspace_with_its_cleanup_status_and_expiry(leased):
    run = leased.create({}, playbook=os.path.join(ROOT, 'playbooks', 'status.yml'))
    assert run.ok, run.explain()
    lines = run.task('Print the workspaces with their lease and cleanup status')['msg']
    ws = leased.workspace('leased')
    assert 'leased: ready, cleanup none, expires %s' % leasing.format_time(ws['lease']['expires_at']) in lines
    assert 'short: destroyed, cleanup complete, expires %s' % leasing.format_time(
        leased.workspace('short')['lease']['expires_at']) in lines
