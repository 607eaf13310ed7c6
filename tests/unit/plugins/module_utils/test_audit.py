"""The lease audit: the advice for each case (pure, the time given), and which workspaces of a real journal file it
lists, in which category, with which attempts, errors and retries."""

import os
import time

import pytest

from ansible_collections.ephemera.workspaces.plugins.module_utils.core import lease as leasing
from ansible_collections.ephemera.workspaces.plugins.module_utils.core.errors import EphemeraError
from ansible_collections.ephemera.workspaces.plugins.module_utils.core.journal import Journal
from ansible_collections.ephemera.workspaces.plugins.module_utils.flows import audit
from ansible_collections.ephemera.workspaces.plugins.module_utils.flows import destroy
from ansible_collections.ephemera.workspaces.plugins.plugin_utils.in_process import run_in_process

T0 = 1796292000.0          # 2026-12-03T10:00:00Z
DESTROY = 'ephemera.workspaces.destroy -e workspace=ws'
PROTECTED = ('CT 101 has protection set; PVE refuses to delete it. Remove the protection (pct set 101 --protection '
             '0) if it really should go, then destroy again.')
HA_HELD = ('CT 101 is still running after a forced stop: it is HA-managed and the HA manager keeps it up; remove it '
           'from HA (ha-manager remove ct:101) and destroy again.')
STUCK = 'CT 101 is stuck in lock "create" with no task running: run "pct unlock 101" on node pve1, then destroy again.'


def found(category, status='ready', desired_state='present', **fields):
    """An audit entry as entry() makes one, with what advice() reads."""
    out = dict(name='ws', category=category, status=status, desired_state=desired_state, expires_at=None,
               next_retry=None, last_error=None, needs_operator=False)
    out.update(fields)
    return out


# ------------------------------------------------------------------ advice, one case each

ADVICE_CASES = [
    ('creating', found('pending', status='provisioning'),
     'creation is under way; nothing to do'),
    ('destroying', found('pending', status='destroying', desired_state='destroyed'),
     'a destroy is queued or running; run ephemera.workspaces.status to see it, or ephemera.workspaces.reconcile if '
     'its run died'),
    ('destroy asked, not started', found('pending', status='ready', desired_state='destroyed'),
     'a destroy is queued or running; run ephemera.workspaces.status to see it, or ephemera.workspaces.reconcile if '
     'its run died'),
    ('retry later', found('failed', status='destroying', desired_state='destroyed', last_error='CT 101 is locked',
                          next_retry='2026-12-03T10:05:00Z'),
     'retried at 2026-12-03T10:05:00Z by the expiry sweep or reconcile; to retry now run ' + DESTROY),
    ('retry due now', found('failed', last_error='timeout', next_retry='2026-12-03T10:00:00Z'),
     'its retry was due at 2026-12-03T10:00:00Z and has not run yet; run ephemera.workspaces.expire or '
     'ephemera.workspaces.reconcile, or ' + DESTROY + ' to retry it now'),
    ('protection', found('failed', last_error=PROTECTED, needs_operator=True, next_retry='2026-12-03T16:00:00Z'),
     'no retry cures this: remove its protection, as the last error says, then run ' + DESTROY),
    ('HA', found('failed', last_error=HA_HELD, needs_operator=True),
     'no retry cures this: remove it from HA, as the last error says, then run ' + DESTROY),
    ('stale lock', found('failed', last_error=STUCK, needs_operator=True),
     'no retry cures this: clear its stale lock, as the last error says, then run ' + DESTROY),
    ('other operator error', found('failed', last_error='the node is fenced', needs_operator=True),
     'no retry cures this: act on it, as the last error says, then run ' + DESTROY),
    ('no retry', found('failed', last_error='refused: the marker does not verify'),
     'the cleanup failed and no retry is scheduled; read the last error, then run ' + DESTROY),
    ('unproven', found('failed'),
     'the cleanup ended without proof of deletion; run ephemera.workspaces.reconcile to compare the journal with '
     'the cluster, then ' + DESTROY + ' if the resource is still there'),
    ('retained', found('retained', retained_until='2026-12-10T10:00:00Z', retained_in=7 * 86400),
     'released without delete until 2026-12-10T10:00:00Z, when the expiry sweep deletes it; destroy it sooner with '
     + DESTROY + ' once its work is no longer needed'),
    ('retained, no end known', found('retained'),
     'released without delete; destroy it with ' + DESTROY + ' when its work is no longer needed'),
    ('retention over', found('retained', retained_until='2026-12-03T09:00:00Z', retained_in=-3600),
     'released without delete until 2026-12-03T09:00:00Z, which has passed; the next expiry sweep '
     '(ephemera.workspaces.expire) deletes it'),
    ('expired', found('expired', expires_at='2026-12-03T09:30:00Z'),
     'expired at 2026-12-03T09:30:00Z; the next expiry sweep (ephemera.workspaces.expire) releases it'),
    ('complete', found('complete', status='destroyed', desired_state='destroyed'),
     'deletion confirmed; nothing to do'),
    ('leased', found('none', expires_at='2026-12-03T11:00:00Z'),
     'no cleanup asked for; its lease runs until 2026-12-03T11:00:00Z, then the expiry sweep releases it'),
    ('kept', found('none', expires_at='2026-12-03T11:00:00Z', keep=True),
     'no cleanup asked for; its lease runs until 2026-12-03T11:00:00Z, then the expiry sweep retains it (keep=true) '
     'and deletes it when the retention ends'),
    ('unleased', found('none'),
     'made before leases, it never expires by itself; destroy it with ' + DESTROY + ' when its work is no longer '
     'needed'),
]


@pytest.mark.parametrize('entry, expected', [case[1:] for case in ADVICE_CASES], ids=[c[0] for c in ADVICE_CASES])
def test_advice_for_each_case(entry, expected):
    before = dict(entry)
    assert audit.advice(entry, T0) == expected
    assert entry == before


def test_every_row_of_the_table_is_reached_and_is_one_sentence():
    assert set(audit.case(entry, T0) for dummy, entry, dummy in ADVICE_CASES) == set(audit.ADVICE)
    for row in audit.ADVICE.values():
        assert '. ' not in row and not row.endswith('.') and '\n' not in row


def test_a_retry_is_due_from_its_instant_on():
    entry = found('failed', last_error='timeout', next_retry='2026-12-03T10:05:00Z')
    assert audit.case(entry, T0 + 299) == 'retry_later'
    assert audit.case(entry, T0 + 300) == 'retry_due'


def test_the_operator_window_is_the_destroy_flows():
    assert audit.OPERATOR_RETRY == destroy.OPERATOR_RETRY


# ------------------------------------------------------------------ report lines

def test_a_failure_line_names_attempt_error_and_retry_on_one_line():
    entry = found('failed', attempts=2, last_error='CT 101 stayed locked\nfor 120 s.', next_retry='2026-12-03T10:45:00Z')
    entry['advice'] = audit.advice(entry, T0)
    assert audit.report_line(entry) == (
        'ws: failed (attempt 2, last error: CT 101 stayed locked for 120 s, next retry 2026-12-03T10:45:00Z): '
        'retried at 2026-12-03T10:45:00Z by the expiry sweep or reconcile; to retry now run ' + DESTROY)
    unproven = found('failed', attempts=0)
    unproven['advice'] = 'x'
    assert audit.report_line(unproven) == 'ws: failed (no error recorded): x'
    expired = found('expired', status='failed', advice='y')
    assert audit.report_line(expired) == 'ws: expired (status failed): y'


# ------------------------------------------------------------------ the selection, from a journal file

def lease_until(expires_at, keep=False):
    """A lease (idle 1800 s, ttl 5400 s) whose expiry is ``expires_at``."""
    terms = leasing.new_lease(expires_at - 1800, ttl=5400, idle_timeout=1800, keep=keep)
    assert terms['expires_at'] == expires_at
    return terms


def make(journal, name, expires_at=None, status='ready', desired_state='present', cleanup=None, **fields):
    if expires_at is not None:
        terms = lease_until(expires_at)
        fields.update(lease=terms, lease_expires_at=terms['expires_at'])
    return journal.create_workspace(name, status=status, desired_state=desired_state, cleanup=cleanup or {},
                                    provider='proxmox', location='pve1', **fields)


@pytest.fixture
def now():
    return float(int(time.time()))


@pytest.fixture
def seeded(path, now):
    """A journal with a workspace of every case; yields it opened read-only, as the module opens it."""
    with Journal.open(path) as journal:
        make(journal, 'creating', now + 3000, status='provisioning', candidate_id=101)
        make(journal, 'destroying', now - 60, status='destroying', desired_state='destroyed', resource_id=102)
        make(journal, 'failed-retry', now - 600, status='destroying', desired_state='destroyed', resource_id=103,
             cleanup=leasing.cleanup_failed(leasing.cleanup_failed({}, 'CT 103 is locked (backup)', now - 900),
                                            'CT 103 is locked (backup)', now - 100))
        make(journal, 'protected', now - 7200, status='destroying', desired_state='destroyed', resource_id=104)
        journal.record_cleanup_debt('protected', 'lxc/104@pve1', PROTECTED, retry_in=destroy.OPERATOR_RETRY)
        make(journal, 'gone-with-debt', now - 7200, status='destroyed', desired_state='destroyed')
        journal.record_cleanup_debt('gone-with-debt', 'volume/vm-105-disk-0', 'storage busy', retry_in=300)
        journal.record_cleanup_debt('gone-with-debt', 'volume/vm-105-disk-0', 'storage still busy', retry_in=300)
        make(journal, 'kept-for-review', now - 60, resource_id=106, cleanup=leasing.retained({}, now - 3600, 86400))
        make(journal, 'expired', now - 60, resource_id=107)
        make(journal, 'expired-now', now, resource_id=108)
        make(journal, 'failed-create-expired', now - 10, status='failed', candidate_id=109)
        make(journal, 'live', now + 1, resource_id=110)
        make(journal, 'done', now - 9000, status='destroyed', desired_state='destroyed',
             cleanup=leasing.cleanup_succeeded({}, now - 8000))
        journal.create_workspace('before-leases', status='ready', resource_id=111)
    with Journal.open(path, readonly=True) as journal:
        yield journal


def categories(result):
    return {e['name']: e['category'] for e in result['entries']}


def test_the_audit_lists_pending_failed_retained_and_expired(seeded, now):
    result = audit.audit(seeded, now)
    assert categories(result) == {
        'creating': 'pending', 'destroying': 'pending', 'failed-retry': 'failed', 'protected': 'failed',
        'gone-with-debt': 'failed', 'kept-for-review': 'retained', 'expired': 'expired', 'expired-now': 'expired',
        'failed-create-expired': 'expired'}
    assert [e['name'] for e in result['entries']] == sorted(categories(result))
    assert result['counts'] == {'pending': 2, 'failed': 3, 'retained': 1, 'expired': 3, 'complete': 1, 'none': 2}
    assert result['report'][0] == 'lease audit: 2 pending, 3 failed, 1 retained, 3 expired'
    assert len(result['report']) == 1 + len(result['entries'])


def test_an_entry_carries_the_record_the_retry_and_the_advice(seeded, now):
    entries = {e['name']: e for e in audit.audit(seeded, now)['entries']}
    assert entries['failed-retry'] == {
        'name': 'failed-retry', 'category': 'failed', 'cleanup_status': 'failed', 'status': 'destroying',
        'desired_state': 'destroyed', 'resource': {'provider': 'proxmox', 'resource_id': 103, 'location': 'pve1'},
        'place': 'proxmox', 'expires_at': leasing.format_time(now - 600), 'expires_in': -600, 'keep': False, 'attempts': 2,
        'last_error': 'CT 103 is locked (backup)', 'failed_at': leasing.format_time(now - 100),
        'next_retry': leasing.format_time(now + 200), 'needs_operator': False, 'cleanup_debt': [],
        'retained_until': None, 'retained_in': None, 'warm_pool': None,
        'advice': 'retried at %s by the expiry sweep or reconcile; to retry now run ephemera.workspaces.destroy -e '
                  'workspace=failed-retry' % leasing.format_time(now + 200)}
    line = [line for line in audit.audit(seeded, now)['report'] if line.startswith('failed-retry:')]
    assert line == ['failed-retry: failed (attempt 2, last error: CT 103 is locked (backup), next retry %s): %s'
                    % (leasing.format_time(now + 200), entries['failed-retry']['advice'])]
    assert entries['creating']['resource'] == {'provider': 'proxmox', 'resource_id': None, 'location': 'pve1'}
    assert entries['creating']['advice'] == 'creation is under way; nothing to do'
    assert entries['destroying']['advice'].startswith('a destroy is queued or running')
    kept = entries['kept-for-review']
    assert (kept['retained_until'], kept['retained_in']) == (leasing.format_time(now + 86400 - 3600), 86400 - 3600)
    assert kept['advice'].startswith('released without delete until %s' % kept['retained_until'])
    [line] = [line for line in audit.audit(seeded, now)['report'] if line.startswith('kept-for-review:')]
    assert line.startswith('kept-for-review: retained (status ready, retained until %s): ' % kept['retained_until'])
    assert entries['expired']['advice'] == ('expired at %s; the next expiry sweep (ephemera.workspaces.expire) '
                                            'releases it' % leasing.format_time(now - 60))
    assert (entries['expired']['cleanup_status'], entries['expired']['expires_in']) == ('none', -60)


def test_a_debt_gives_the_attempts_error_and_retry_and_an_operator_window_says_so(seeded, now):
    entries = {e['name']: e for e in audit.audit(seeded, now)['entries']}
    gone = entries['gone-with-debt']
    debt = seeded.cleanup_debts('gone-with-debt')[0]
    assert (gone['cleanup_status'], gone['attempts'], gone['last_error'], gone['needs_operator']) == (
        'failed', 2, 'storage still busy', False)
    assert gone['next_retry'] == leasing.format_time(leasing.parse_time(debt['next_retry']))
    assert gone['failed_at'] == leasing.format_time(leasing.parse_time(debt['updated_at']))
    assert gone['cleanup_debt'] == [{'resource': 'volume/vm-105-disk-0', 'attempts': 2,
                                     'last_error': 'storage still busy', 'next_retry': gone['next_retry']}]
    assert leasing.parse_time(gone['next_retry']) > now
    assert gone['advice'].startswith('retried at %s ' % gone['next_retry'])
    protected = entries['protected']
    assert (protected['needs_operator'], protected['attempts'], protected['last_error']) == (True, 1, PROTECTED)
    assert protected['advice'] == ('no retry cures this: remove its protection, as the last error says, then run '
                                   'ephemera.workspaces.destroy -e workspace=protected')


def test_a_long_retry_window_alone_needs_an_operator(path, now):
    with Journal.open(path) as journal:
        make(journal, 'stuck', now - 60, status='destroying', desired_state='destroyed')
        journal.record_cleanup_debt('stuck', 'lxc/101@pve1', STUCK, retry_in=destroy.OPERATOR_RETRY)
        make(journal, 'soon', now - 60, status='destroying', desired_state='destroyed')
        journal.record_cleanup_debt('soon', 'lxc/102@pve1', 'CT 102 is locked (backup)', retry_in=destroy.SOON_RETRY)
        entries = {e['name']: e for e in audit.audit(journal, now)['entries']}
    assert entries['stuck']['needs_operator'] and 'clear its stale lock' in entries['stuck']['advice']
    assert not entries['soon']['needs_operator'] and entries['soon']['advice'].startswith('retried at ')


def test_the_records_error_comes_before_the_debts(path, now):
    with Journal.open(path) as journal:
        make(journal, 'both', now - 60, status='destroying', desired_state='destroyed',
             cleanup=leasing.cleanup_failed({}, PROTECTED, now - 30))
        journal.record_cleanup_debt('both', 'lxc/101@pve1', 'storage busy')
        [entry] = audit.audit(journal, now)['entries']
    assert (entry['last_error'], entry['attempts'], entry['needs_operator']) == (PROTECTED, 1, True)
    assert entry['next_retry'] == leasing.format_time(now + 270)


def test_statuses_select_and_all_lists_every_workspace(seeded, now):
    only_failed = audit.audit(seeded, now, categories=['failed'])
    assert sorted(categories(only_failed)) == ['failed-retry', 'gone-with-debt', 'protected']
    # The counts and the summary are the journal's, whatever is listed.
    assert only_failed['counts'] == audit.audit(seeded, now)['counts']
    assert only_failed['report'][0] == 'lease audit: 2 pending, 3 failed, 1 retained, 3 expired'
    every = audit.audit(seeded, now, categories=['failed'], every=True)
    assert categories(every)['live'] == 'none' and categories(every)['done'] == 'complete'
    assert categories(every)['before-leases'] == 'none'
    assert len(every['entries']) == 12
    assert every['report'][0] == 'lease audit: 2 pending, 3 failed, 1 retained, 3 expired, 1 complete, 2 none'
    entries = {e['name']: e for e in every['entries']}
    assert entries['live']['advice'] == ('no cleanup asked for; its lease runs until %s, then the expiry sweep '
                                         'releases it' % leasing.format_time(now + 1))
    assert (entries['before-leases']['expires_at'], entries['before-leases']['expires_in']) == (None, None)
    assert entries['before-leases']['advice'].startswith('made before leases, it never expires by itself')
    assert entries['done']['advice'] == 'deletion confirmed; nothing to do'


def test_expired_is_from_the_instant_of_expiry_and_never_without_a_lease(seeded, now):
    later = audit.audit(seeded, now + 10 ** 9, every=True)
    assert categories(later)['before-leases'] == 'none'
    assert categories(later)['live'] == 'expired'
    assert categories(audit.audit(seeded, now - 1, every=True))['expired-now'] == 'none'
    # Expiry never hides a cleanup: creating, retained and failed workspaces keep their category once expired.
    assert categories(later)['creating'] == 'pending' and categories(later)['kept-for-review'] == 'retained'


def test_the_audit_writes_nothing(path, now):
    with Journal.open(path) as journal:
        make(journal, 'expired', now - 60)
        journal.record_cleanup_debt('expired', 'lxc/1@pve1', PROTECTED)
    with open(path, 'rb') as before:
        content = before.read()
    with Journal.open(path, readonly=True) as journal:
        assert audit.audit(journal, now, every=True)['counts']['failed'] == 1
    with open(path, 'rb') as after:
        assert after.read() == content
    assert not [f for f in os.listdir(os.path.dirname(path)) if f.endswith(('-wal', '-journal'))
                and os.path.getsize(os.path.join(os.path.dirname(path), f))]


def test_an_empty_journal_and_a_damaged_lease(path, now):
    assert audit.audit_records([], now) == {
        'entries': [], 'counts': {c: 0 for c in audit.CATEGORIES}, 'places': {},
        'report': ['lease audit: 0 pending, 0 failed, 0 retained, 0 expired']}
    with Journal.open(path) as journal:
        journal.create_workspace('broken', status='ready', lease={'ttl': 60})
        with pytest.raises(EphemeraError, match='Workspace broken: The lease misses created_at'):
            audit.audit(journal, now)


def test_fleet_adds_a_line_per_place_and_every_entry_names_its_place(path, now):
    """The module with fleet=true: the places of the listed workspaces (a provider, and its region or zone where its
    connections serve one), counted by category, a line each after the summary; without it, the same entries."""
    with Journal.open(path) as journal:
        make(journal, 'pve-expired', now - 60, resource_id=101)
        for name, provider, location in (('ec2-expired', 'aws', 'eu-west-1'), ('ec2-other', 'aws', 'us-east-1'),
                                         ('hz-expired', 'hetzner', 'fsn1'), ('hz-live', 'hetzner', 'nbg1')):
            terms = lease_until(now + 60 if name.endswith('live') else now - 60)
            journal.create_workspace(name, status='ready', resource_id='r-' + name, provider=provider,
                                     location=location, lease=terms, lease_expires_at=terms['expires_at'])
        journal.create_workspace('hz-failed', status='destroying', desired_state='destroyed', resource_id='r-hz',
                                 provider='hetzner', location='fsn1',
                                 cleanup=leasing.cleanup_failed({}, 'server locked', now - 10))
    result = run_in_process('workspace_lease_audit', dict(journal_path=path, fleet=True))
    assert not result.get('failed') and not result['changed'], result
    assert {e['name']: e['place'] for e in result['entries']} == {
        'pve-expired': 'proxmox', 'ec2-expired': 'aws eu-west-1', 'ec2-other': 'aws us-east-1',
        'hz-expired': 'hetzner', 'hz-failed': 'hetzner'}
    assert result['places'] == {'proxmox': {'expired': 1}, 'aws eu-west-1': {'expired': 1},
                                'aws us-east-1': {'expired': 1}, 'hetzner': {'expired': 1, 'failed': 1}}
    assert result['report'][:5] == ['lease audit: 0 pending, 1 failed, 0 retained, 4 expired',
                                    'aws eu-west-1: 1 expired', 'aws us-east-1: 1 expired',
                                    'hetzner: 1 expired, 1 failed', 'proxmox: 1 expired']
    alone = run_in_process('workspace_lease_audit', dict(journal_path=path))
    assert 'places' not in alone
    assert [(e['name'], e['place']) for e in alone['entries']] == [(e['name'], e['place']) for e in result['entries']]
    assert alone['report'] == result['report'][:1] + result['report'][5:]


def test_the_places_name_a_location_exactly_where_a_providers_connection_is_bound_to_one():
    """The audit names a place's location where the provider declares its connections bound to one (its
    location_option), and for no other provider, nor for a provider name it does not know."""
    from ansible_collections.ephemera.workspaces.plugins.module_utils.flows import placing
    from ansible_collections.ephemera.workspaces.plugins.module_utils.providers import registry
    bound = {name: registry.provider_class(name).location_option for name in registry.PROVIDERS
             if registry.provider_class(name).location_option}
    assert bound == {'aws': 'aws_region', 'gcp': 'gcp_zone'}
    for name in registry.PROVIDERS:
        assert placing.place_label(name, 'here-1') == ('%s here-1' % name if name in bound else name)
    assert placing.place_label('nope', 'here-1') == 'nope'
    assert placing.place_of({'location': 'pve2'}) == 'proxmox'


def test_a_warm_pool_member_is_named_as_one_and_a_workspace_that_took_one_is_not(path, now):
    with Journal.open(path) as journal:
        make(journal, 'debian-0a1b2c3d', now - 60, status='registering', resource_id=110,
             params={'pool_member': {'pool': 'debian'}})
        make(journal, 'debian-9f8e7d6c', now - 60, status='destroyed', desired_state='destroyed',
             params={'pool_member': {'pool': 'debian'}}, facts={'claimed_by': 'fix-login'})
        result = audit.audit(journal, now, every=True)
    entries = {e['name']: e for e in result['entries']}
    assert entries['debian-0a1b2c3d']['warm_pool'] == 'debian'
    assert entries['debian-9f8e7d6c']['warm_pool'] is None
    line = [line for line in result['report'] if line.startswith('debian-0a1b2c3d:')]
    assert line == ['debian-0a1b2c3d: expired (member of warm pool debian, status registering): %s'
                    % entries['debian-0a1b2c3d']['advice']]
