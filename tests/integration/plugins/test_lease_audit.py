"""The lease_audit playbook, run by a real ansible-playbook against a real journal file: its report lines, counts and
entries for a workspace of every category, and the journal left exactly as it was."""

import hashlib
import os
import sqlite3
import time

from ansible_collections.ephemera.workspaces.plugins.module_utils.core import lease as leasing
from ansible_collections.ephemera.workspaces.plugins.module_utils.core.journal import Journal
from tests.ansible_run import run_ansible

AUDIT = 'Audit the leases and cleanups in the journal'
PRINT = 'Print the lease audit'
PROTECTED = ('CT 104 has protection set; PVE refuses to delete it. Remove the protection (pct set 104 --protection '
             '0) if it really should go, then destroy again.')
LOCKED = 'CT 103 stayed locked for 120 s (CT is locked (backup)).\nIt is retried by the next reconcile.'


def lease_until(expires_at):
    terms = leasing.new_lease(expires_at - 1800, ttl=5400, idle_timeout=1800)
    assert terms['expires_at'] == expires_at
    return terms


def make(journal, name, expires_at=None, cleanup=None, **fields):
    if expires_at is not None:
        fields.update(lease=lease_until(expires_at), lease_expires_at=expires_at)
    fields.setdefault('desired_state', 'present')
    return journal.create_workspace(name, provider='proxmox', location='pve1', cleanup=cleanup or {}, **fields)


def seed(path):
    """One workspace of each category, a ready live one, a destroyed complete one and one made before leases.
    Returns the times the report must show, and the debt's next retry as the journal keeps it."""
    base = float(int(time.time()))
    times = dict(creating=base + 3600, destroying=base - 600, failed=base - 1200, failed_at=base - 100,
                 retry=base + 3500, protected=base - 7200, retained=base + 600, expired=base - 3600,
                 live=base + 7200, done=base - 9000)
    with Journal.open(path) as journal:
        make(journal, 'ws-creating', times['creating'], status='provisioning', candidate_id=101)
        make(journal, 'ws-destroying', times['destroying'], status='destroying', desired_state='destroyed',
             resource_id=102)
        make(journal, 'ws-failed', times['failed'], status='destroying', desired_state='destroyed', resource_id=103,
             cleanup=dict(leasing.cleanup_failed(leasing.cleanup_failed({}, 'CT 103 is locked', base - 400), LOCKED,
                                                 times['failed_at']), cleanup_retry_at=times['retry']))
        make(journal, 'ws-protected', times['protected'], status='destroying', desired_state='destroyed',
             resource_id=104)
        debt = journal.record_cleanup_debt('ws-protected', 'lxc/104@pve1', PROTECTED, retry_in=6 * 3600)
        make(journal, 'ws-retained', times['retained'], status='ready', resource_id=105, cleanup={'retained': True})
        make(journal, 'ws-expired', times['expired'], status='ready', resource_id=106, address='10.0.0.6')
        make(journal, 'ws-live', times['live'], status='ready', resource_id=107)
        make(journal, 'ws-done', times['done'], status='destroyed', desired_state='destroyed', resource_id=108,
             cleanup=leasing.cleanup_succeeded({}, base - 8000))
        journal.create_workspace('ws-old', status='ready', resource_id=109)
    shown = {key: leasing.format_time(value) for key, value in times.items()}
    shown.update(debt_retry=leasing.format_time(leasing.parse_time(debt['next_retry'])),
                 debt_at=leasing.format_time(leasing.parse_time(debt['updated_at'])))
    return base, shown


def snapshot(path):
    """The journal file's SHA-256 and a dump of its tables. A reader of a journal in WAL mode may leave an -shm file
    and an empty -wal file beside it (SQLite makes them to read); the -wal must stay empty: nothing was written."""
    wal = path + '-wal'
    assert not os.path.exists(wal) or os.path.getsize(wal) == 0, 'the journal\'s write-ahead log has content'
    with open(path, 'rb') as handle:
        digest = hashlib.sha256(handle.read()).hexdigest()
    connection = sqlite3.connect('file:%s?mode=ro' % path, uri=True)
    try:
        dump = list(connection.iterdump())
    finally:
        connection.close()
    return digest, dump


def audit(path, *extra, check=False):
    argv = ['ansible-playbook', 'ephemera.workspaces.lease_audit'] + list(extra) + (['--check'] if check else [])
    run = run_ansible(argv, timeout=240, env={'EPHEMERA_JOURNAL': path})
    assert run.ok, run.explain()
    return run


def expected_report(path, t):
    destroy = 'ephemera.workspaces.destroy -e workspace=%s'
    return [
        'Journal %s:' % path,
        'lease audit: 2 pending, 2 failed, 1 retained, 1 expired',
        # The playbook audits the fleet: a line per place, counting what it lists.
        'proxmox: 1 expired, 2 failed, 2 pending, 1 retained',
        'ws-creating: pending (status provisioning): creation is under way; nothing to do',
        'ws-destroying: pending (status destroying): a destroy is queued or running; run ephemera.workspaces.status '
        'to see it, or ephemera.workspaces.reconcile if its run died',
        'ws-expired: expired (status ready): expired at %s; the next expiry sweep (ephemera.workspaces.expire) '
        'releases it' % t['expired'],
        'ws-failed: failed (attempt 2, last error: CT 103 stayed locked for 120 s (CT is locked (backup)). It is '
        'retried by the next reconcile, next retry %s): retried at %s by the expiry sweep or reconcile; to retry now '
        'run %s' % (t['retry'], t['retry'], destroy % 'ws-failed'),
        'ws-protected: failed (attempt 1, last error: %s, next retry %s): no retry cures this: remove its protection, '
        'as the last error says, then run %s' % (PROTECTED.rstrip('.'), t['debt_retry'], destroy % 'ws-protected'),
        'ws-retained: retained (status ready): released without delete; destroy it with %s when its work is no '
        'longer needed' % (destroy % 'ws-retained'),
    ]


def test_the_playbook_reports_every_category_and_writes_nothing(tmp_path):
    path = str(tmp_path / 'journal.sqlite')
    base, t = seed(path)
    before = snapshot(path)
    started = time.time()
    run = audit(path)
    finished = time.time()
    assert snapshot(path) == before
    assert run.changed == 0
    assert run.task(PRINT)['msg'] == expected_report(path, t)
    result = run.task(AUDIT)
    assert result['changed'] is False and result['journal_path'] == path
    assert result['counts'] == {'pending': 2, 'failed': 2, 'retained': 1, 'expired': 1, 'complete': 1, 'none': 2}
    assert result['report'] == expected_report(path, t)[1:]
    entries = result['entries']
    # expires_in counts from the module's clock: between the run's start and end.
    for entry in entries:
        expires_at = leasing.parse_time(entry.pop('expires_at'))
        assert expires_at - finished - 1 <= entry.pop('expires_in') <= expires_at - started + 1
    destroy = 'ephemera.workspaces.destroy -e workspace=%s'

    def resource(rid):
        return {'provider': 'proxmox', 'resource_id': rid, 'location': 'pve1'}

    common = dict(keep=False, attempts=0, last_error=None, failed_at=None, next_retry=None, needs_operator=False,
                  cleanup_debt=[], retained_until=None, retained_in=None, place='proxmox', warm_pool=None)
    assert entries == [
        dict(common, name='ws-creating', category='pending', cleanup_status='pending', status='provisioning',
             desired_state='present', resource=resource(None), advice='creation is under way; nothing to do'),
        dict(common, name='ws-destroying', category='pending', cleanup_status='pending', status='destroying',
             desired_state='destroyed', resource=resource(102),
             advice='a destroy is queued or running; run ephemera.workspaces.status to see it, or '
                    'ephemera.workspaces.reconcile if its run died'),
        dict(common, name='ws-expired', category='expired', cleanup_status='none', status='ready',
             desired_state='present', resource=resource(106),
             advice='expired at %s; the next expiry sweep (ephemera.workspaces.expire) releases it' % t['expired']),
        dict(common, name='ws-failed', category='failed', cleanup_status='failed', status='destroying',
             desired_state='destroyed', resource=resource(103), attempts=2, last_error=LOCKED,
             failed_at=t['failed_at'], next_retry=t['retry'],
             advice='retried at %s by the expiry sweep or reconcile; to retry now run %s'
                    % (t['retry'], destroy % 'ws-failed')),
        dict(common, name='ws-protected', category='failed', cleanup_status='failed', status='destroying',
             desired_state='destroyed', resource=resource(104), attempts=1, last_error=PROTECTED,
             failed_at=t['debt_at'], next_retry=t['debt_retry'], needs_operator=True,
             cleanup_debt=[{'resource': 'lxc/104@pve1', 'attempts': 1, 'last_error': PROTECTED,
                            'next_retry': t['debt_retry']}],
             advice='no retry cures this: remove its protection, as the last error says, then run %s'
                    % (destroy % 'ws-protected')),
        dict(common, name='ws-retained', category='retained', cleanup_status='retained', status='ready',
             desired_state='present', resource=resource(105),
             advice='released without delete; destroy it with %s when its work is no longer needed'
                    % (destroy % 'ws-retained')),
    ]


def test_all_lists_every_workspace_statuses_select_and_check_mode_reads_the_same(tmp_path):
    path = str(tmp_path / 'journal.sqlite')
    base, t = seed(path)
    before = snapshot(path)
    every = audit(path, '-e', 'audit_all=true', check=True).task(AUDIT)
    assert [e['name'] for e in every['entries']] == ['ws-creating', 'ws-destroying', 'ws-done', 'ws-expired',
                                                     'ws-failed', 'ws-live', 'ws-old', 'ws-protected', 'ws-retained']
    assert every['report'][0] == 'lease audit: 2 pending, 2 failed, 1 retained, 1 expired, 1 complete, 2 none'
    lines = {line.split(':', 1)[0]: line for line in every['report'][1:]}
    assert lines['ws-live'] == ('ws-live: none (status ready): no cleanup asked for; its lease runs until %s, then '
                                'the expiry sweep releases it' % t['live'])
    assert lines['ws-done'] == 'ws-done: complete (status destroyed): deletion confirmed; nothing to do'
    assert lines['ws-old'] == ('ws-old: none (status ready): made before leases, it never expires by itself; destroy '
                               'it with ephemera.workspaces.destroy -e workspace=ws-old when its work is no longer '
                               'needed')
    failed = audit(path, '-e', '{"audit_statuses": ["failed", "expired"]}').task(AUDIT)
    assert [e['name'] for e in failed['entries']] == ['ws-expired', 'ws-failed', 'ws-protected']
    listed = ('ws-expired:', 'ws-failed:', 'ws-protected:')
    assert failed['report'][1:] == ['proxmox: 1 expired, 2 failed'] + [
        line for line in expected_report(path, t)[2:] if line.startswith(listed)]
    assert failed['counts'] == every['counts']
    assert snapshot(path) == before


def test_a_missing_journal_is_an_empty_audit_with_a_warning_and_is_not_made(tmp_path):
    path = str(tmp_path / 'never-made.sqlite')
    run = audit(path)
    result = run.task(AUDIT)
    assert result['entries'] == [] and result['counts']['failed'] == 0
    assert 'No journal at %s' % path in ' '.join(result['warnings'])
    assert run.task(PRINT)['msg'] == ['Journal %s:' % path, 'lease audit: 0 pending, 0 failed, 0 retained, 0 expired']
    assert os.listdir(str(tmp_path)) == []
