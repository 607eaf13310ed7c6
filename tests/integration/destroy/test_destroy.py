"""Destroy against the try-out cluster: idempotent, marker-checked, force stop, lost answers, locks, protection."""

import json
import os
import subprocess
import sys

import pytest

from ansible_collections.ephemera.workspaces.plugins.module_utils.core import ownership
from ansible_collections.ephemera.workspaces.plugins.module_utils.providers.proxmox.client import PveNotFound
from tests.integration.playbooks import site_with_workspaces

NAMES = ['d-twice', 'd-absent', 'd-nomark', 'd-forged', 'd-copied', 'd-src', 'd-stubborn', 'd-lost', 'd-locked',
         'd-protected', 'd-work']


@pytest.fixture(scope='module')
def site(tmp_path_factory):
    with site_with_workspaces(str(tmp_path_factory.mktemp('destroy')), NAMES) as site:
        yield site


def ct(site, name):
    ws = site.workspace(name)
    return ws['vmid'], ws['node']


def config(site, vmid, node):
    try:
        return site.cluster.api().get('/nodes/%s/lxc/%d/config' % (node, vmid))
    except PveNotFound:
        return None


def status(site, vmid, node):
    return site.cluster.api().get('/nodes/%s/lxc/%d/status/current' % (node, vmid))['status']


def destroy(site, name, **extra):
    return site.playbook('destroy.yml', workspace=name, **extra)


def test_destroy_twice_the_second_run_changes_nothing(site):
    vmid, node = ct(site, 'd-twice')
    first = destroy(site, 'd-twice')
    assert first.ok, first.output[-3000:]
    assert first.changed >= 3
    assert config(site, vmid, node) is None
    ws = site.workspace('d-twice')
    assert (ws['status'], ws['desired_state']) == ('destroyed', 'destroyed')
    assert not os.path.exists(site.cluster.guest_root(vmid))
    actions = [e['action'] for e in site.journal().events('d-twice')]
    assert actions.index('destroy') < actions.index('delete') < actions.index('destroyed')
    second = destroy(site, 'd-twice')
    assert second.ok and second.changed == 0, second.output[-3000:]


def test_destroy_of_a_never_created_workspace_fails_naming_the_known_ones(site):
    result = destroy(site, 'never-made')
    assert not result.ok and result.changed == 0, result.output[-3000:]
    [message] = result.failed_messages()
    assert message.startswith('No workspace never-made in this journal (%s); known: ' % site.journal_path), message
    assert site.workspace('never-made') is None


def test_destroy_of_an_already_absent_container_succeeds(site):
    vmid, node = ct(site, 'd-absent')
    api = site.cluster.api()
    api.wait_task(api.post('/nodes/%s/lxc/%d/status/stop' % (node, vmid)))
    api.wait_task(api.delete('/nodes/%s/lxc/%d' % (node, vmid), purge=1))
    result = destroy(site, 'd-absent')
    assert result.ok, result.output[-3000:]
    assert 'already absent' in result.task('5/6 verify ownership and delete')['msg']
    assert site.workspace('d-absent')['status'] == 'destroyed'


def _forged(site, vmid):
    return ownership.render(b'not the controller secret', ownership.controller_id(site.secret()), 'd-forged', vmid)


# Each container's description, rewritten by another user, and what the marker check makes of it.
REWRITTEN = {
    'd-nomark': (lambda site, vmid: 'somebody replaced this container', ownership.ABSENT),
    'd-forged': (_forged, ownership.FORGED),
    'd-copied': (lambda site, vmid: config(site, *ct(site, 'd-src'))['description'], ownership.MISMATCH),
}


@pytest.fixture(scope='module')
def rewritten(site):
    """The three rewritten containers, destroyed in one run (a host each), then one reconcile; what they left."""
    names = sorted(REWRITTEN)
    before = {}
    for name in names:
        vmid, node = ct(site, name)
        site.cluster.control.foreign_edit(vmid, REWRITTEN[name][0](site, vmid))
        before[name] = config(site, vmid, node)
    inventory = os.path.join(site.directory, 'rewritten.json')
    with open(inventory, 'w') as out:
        json.dump({'rewritten': {'hosts': {name: {'workspace': name} for name in names}, 'vars': {
            'ansible_connection': 'local', 'ansible_python_interpreter': sys.executable}}}, out)
    result = site.playbook('destroy.yml', inventories=[inventory], target='rewritten')
    # Reconcile continues decided destructions, but also only with proof of ownership.
    rec = site.playbook('reconcile.yml')
    return before, result, rec


@pytest.mark.parametrize('name', sorted(REWRITTEN))
def test_containers_whose_marker_does_not_verify_are_never_touched(site, rewritten, name):
    verdict = REWRITTEN[name][1]
    before, result, rec = rewritten
    vmid, node = ct(site, name)
    assert not result.ok and result.stats(name)['failures'] == 1, result.output[-3000:]
    refusal = result.failed_messages(name)[0]
    assert 'is not workspace %s\'s' % name in refusal and 'It was not touched' in refusal, refusal
    assert status(site, vmid, node) == 'running'
    assert config(site, vmid, node) == before[name]
    ws = site.workspace(name)
    assert ws['status'] == 'destroying' and ws['failure']['step'] == 'shutdown'
    assert any(e['action'] == 'ownership_refused' and e['detail']['verdict'] == verdict
               for e in site.journal().events(name))
    assert rec.ok, rec.output[-3000:]
    findings = [f for f in rec.task('Compare the journal with the cluster')['findings'] if f['workspace'] == name]
    assert [f['kind'] for f in findings] == ['destroy_blocked']
    assert status(site, vmid, node) == 'running' and config(site, vmid, node) == before[name]


def test_a_container_that_ignores_shutdown_is_stopped_by_force(site):
    vmid, node = ct(site, 'd-stubborn')
    site.cluster.control.pve_ct(vmid, shutdown_secs=3600)
    result = destroy(site, 'd-stubborn', workspace_destroy_shutdown_timeout=1)
    assert result.ok, result.output[-3000:]
    assert 'ignored the shutdown' in result.task('3/6 shut down')['msg']
    assert 'stopped' in result.task('4/6 stop by force if still running')['msg']
    actions = [e['action'] for e in site.journal().events('d-stubborn')]
    assert 'shutdown_incomplete' in actions and 'stop' in actions
    assert config(site, vmid, node) is None


def test_a_lost_delete_answer_converges(site):
    vmid, node = ct(site, 'd-lost')
    rule = site.cluster.control.proxy_add('drop-response', 'DELETE', '/api2/json/nodes/*/lxc/%d' % vmid, times=1)
    result = destroy(site, 'd-lost')
    if not result.ok:
        result = destroy(site, 'd-lost')
    assert result.ok, result.output[-3000:]
    hits = [r for r in site.cluster.control.proxy_rules() if r['id'] == rule['id']][0]
    assert len(hits['hits']) == 1
    assert config(site, vmid, node) is None
    assert site.workspace('d-lost')['status'] == 'destroyed'
    assert 'delete_outcome_unknown' in [e['action'] for e in site.journal().events('d-lost')]


def test_a_locked_container_is_retried_then_reported_then_finished_by_reconcile(site):
    vmid, node = ct(site, 'd-locked')
    api = site.cluster.api()
    api.wait_task(api.post('/nodes/%s/lxc/%d/status/stop' % (node, vmid)))
    site.cluster.control.pve_lock(vmid, 'backup')
    # Stopped, its work cannot be inspected: the destruction is refused at once, and the workspace stays as it was...
    refused = destroy(site, 'd-locked')
    assert not refused.ok and 'is stopped, so whether it holds unsaved work cannot be checked' in refused.output
    assert site.workspace('d-locked')['desired_state'] == 'present' and config(site, vmid, node) is not None
    # ...and goes ahead only with the explicit override.
    result = destroy(site, 'd-locked', workspace_destroy_lock_timeout=2, discard_unsaved_work=True)
    assert not result.ok
    assert 'stayed locked' in result.output
    assert len([e for e in site.journal().events('d-locked') if e['action'] == 'delete_locked']) >= 2
    info = site.playbook('destroy.yml', check=True, workspace='d-locked')  # decided already: no archive guard
    assert info.ok, info.output[-3000:]
    [debt] = site.journal().cleanup_debts('d-locked')
    assert debt['resource'] == 'lxc/%d@%s' % (vmid, node) and 'locked' in debt['last_error']
    assert config(site, vmid, node) is not None
    site.cluster.control.pve_unlock(vmid)
    rec = site.playbook('reconcile.yml')
    assert rec.ok, rec.output[-3000:]
    assert config(site, vmid, node) is None
    assert site.workspace('d-locked')['status'] == 'destroyed'
    assert site.journal().cleanup_debts('d-locked') == []


def test_protection_is_reported_with_what_to_do_and_not_retried(site):
    vmid, node = ct(site, 'd-protected')
    site.cluster.api().put('/nodes/%s/lxc/%d/config' % (node, vmid), protection=1)
    result = destroy(site, 'd-protected')
    assert not result.ok
    assert 'protection set' in result.output and 'pct set %d --protection 0' % vmid in result.output
    assert config(site, vmid, node) is not None
    [debt] = site.journal().cleanup_debts('d-protected')
    assert 'protection' in debt['last_error']
    assert site.workspace('d-protected')['failure']['needs_operator'] is True


def test_check_mode_changes_nothing(site):
    vmid, node = ct(site, 'd-src')
    before = journal_dump(site)
    result = site.playbook('destroy.yml', check=True, workspace='d-src')
    assert result.ok, result.output[-3000:]
    assert result.changed >= 3  # it says what it would do
    assert status(site, vmid, node) == 'running'
    assert site.workspace('d-src')['status'] == 'ready'
    # SQLite may fold its write-ahead log into the file when a reader closes, so the records are compared.
    assert journal_dump(site) == before


def journal_dump(site):
    import sqlite3
    conn = sqlite3.connect(site.journal_path)
    try:
        return {table: conn.execute('SELECT * FROM %s ORDER BY 1' % table).fetchall()
                for (table,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    finally:
        conn.close()


def git(path, *args):
    env = dict(os.environ, GIT_AUTHOR_NAME='agent', GIT_AUTHOR_EMAIL='a@example.invalid', GIT_COMMITTER_NAME='agent',
               GIT_COMMITTER_EMAIL='a@example.invalid')
    return subprocess.run(['git', '-C', path] + list(args), check=True, capture_output=True, text=True,
                          env=env).stdout.strip()


def test_unsaved_work_is_refused_without_archive_and_archived_by_default(site):
    vmid, node = ct(site, 'd-work')
    checkout = os.path.join(site.cluster.guest_root(vmid), 'workspace', 'repo')
    with open(os.path.join(checkout, 'feature.py'), 'w') as out:
        out.write('def feature():\n    return 42\n')
    git(checkout, 'add', 'feature.py')
    git(checkout, 'commit', '-q', '-m', 'agent: a feature nobody pushed')
    with open(os.path.join(checkout, 'app.py'), 'a') as out:
        out.write('print("edited, not committed")\n')
    head = git(checkout, 'rev-parse', 'HEAD')

    refused = destroy(site, 'd-work', workspace_destroy_archive=False)
    assert not refused.ok
    assert 'holds work that was never pushed or archived' in refused.output
    assert status(site, vmid, node) == 'running'
    assert site.workspace('d-work')['status'] == 'ready'  # the refusal leaves the workspace usable

    result = destroy(site, 'd-work')
    assert result.ok, result.output[-3000:]
    assert config(site, vmid, node) is None
    origin = site.repo[len('file://'):]
    pushed = git(origin, 'rev-parse', 'refs/heads/ephemera/d-work')
    assert git(origin, 'rev-parse', pushed + '^') == head
    assert 'edited, not committed' in git(origin, 'show', pushed + ':app.py')
    assert git(origin, 'show', pushed + ':feature.py').startswith('def feature')
