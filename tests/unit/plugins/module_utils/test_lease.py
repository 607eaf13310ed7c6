"""Workspace leases: expiry, heartbeats, keep, cleanup bookkeeping and status, labels, times, the label sweep.

Every function takes the time as ``now``; these tests give it, so no test depends on the clock.
"""

import ast
import math
import os
import re

import pytest

from ansible_collections.ephemera.workspaces.plugins.module_utils.core import journal as journal_module
from ansible_collections.ephemera.workspaces.plugins.module_utils.core import lease
from ansible_collections.ephemera.workspaces.plugins.module_utils.core.errors import EphemeraError
from ansible_collections.ephemera.workspaces.plugins.module_utils.core.lease import (
    COMPLETE, DELETE, FAILED, PENDING, REPORT, RETAINED, SKIP, LeaseError,
)

T0 = 1796292000.0          # 2026-12-03T10:00:00Z
LABEL_CHARS = re.compile(r'^[A-Za-z0-9_.-]{1,63}$')


def make(now=T0, **terms):
    return lease.new_lease(now, **terms)


# ------------------------------------------------------------------ request validation

def test_defaults():
    assert lease.validate_request() == {'ttl': 5400, 'idle_timeout': 1800, 'keep': False}
    assert (lease.DEFAULT_TTL, lease.DEFAULT_IDLE_TIMEOUT, lease.MAX_TTL) == (5400, 1800, 86400)


def test_ttl_cap_allowed_and_one_above_refused():
    assert lease.validate_request(ttl=86400)['ttl'] == 86400
    with pytest.raises(LeaseError) as err:
        lease.validate_request(ttl=86401)
    assert 'ttl 86401' in str(err.value) and 'at most 86400' in str(err.value)
    assert err.value.details == {'field': 'ttl'}


def test_lease_error_is_an_ephemera_error():
    assert issubclass(LeaseError, EphemeraError)


@pytest.mark.parametrize('terms, field', [
    ({'ttl': 0}, 'ttl'),
    ({'ttl': -1}, 'ttl'),
    ({'ttl': -86400}, 'ttl'),
    ({'idle_timeout': 0}, 'idle_timeout'),
    ({'idle_timeout': -30}, 'idle_timeout'),
    ({'ttl': 600, 'idle_timeout': 0}, 'idle_timeout'),
])
def test_zero_and_negative_timeouts_refused(terms, field):
    with pytest.raises(LeaseError) as err:
        lease.validate_request(**terms)
    assert 'not a positive number of seconds' in str(err.value)
    assert str(err.value).startswith(field + ' ')
    assert 'Give a whole number of seconds from 1 to ' in str(err.value)
    assert err.value.details['field'] == field


def test_zero_timeout_messages_name_the_range():
    with pytest.raises(LeaseError) as err:
        lease.validate_request(ttl=0)
    assert 'from 1 to 86400 (default 5400)' in str(err.value)
    with pytest.raises(LeaseError) as err:
        lease.validate_request(ttl=600, idle_timeout=-1)
    assert 'from 1 to the ttl (600) (default 1800)' in str(err.value)


def test_idle_timeout_greater_than_ttl_refused():
    with pytest.raises(LeaseError) as err:
        lease.validate_request(ttl=1800, idle_timeout=1801)
    assert 'idle_timeout 1801 s is longer than the ttl 1800 s' in str(err.value)
    assert 'at most 1800 seconds' in str(err.value)
    assert err.value.details == {'field': 'idle_timeout'}
    with pytest.raises(LeaseError):
        lease.validate_request(idle_timeout=5401)      # the default ttl


def test_idle_timeout_equal_to_ttl_allowed():
    assert lease.validate_request(ttl=1800, idle_timeout=1800) == {'ttl': 1800, 'idle_timeout': 1800, 'keep': False}
    assert lease.validate_request(ttl=86400, idle_timeout=86400)['idle_timeout'] == 86400


def test_short_ttl_alone_shortens_the_default_idle_timeout():
    assert lease.validate_request(ttl=600) == {'ttl': 600, 'idle_timeout': 600, 'keep': False}
    assert lease.validate_request(ttl=1801)['idle_timeout'] == 1800


@pytest.mark.parametrize('terms, words', [
    ({'ttl': True}, 'ttl True is a boolean'),
    ({'ttl': False}, 'ttl False is a boolean'),
    ({'idle_timeout': True}, 'idle_timeout True is a boolean'),
    ({'ttl': 5400.0}, 'not a whole number of seconds (it is a float)'),
    ({'ttl': 5400.5}, 'not a whole number of seconds (it is a float)'),
    ({'ttl': '5400'}, "ttl '5400' is not a whole number of seconds (it is a str)"),
    ({'idle_timeout': '30m'}, "idle_timeout '30m' is not a whole number"),
    ({'idle_timeout': 1800.0}, 'not a whole number'),
    ({'ttl': [5400]}, 'not a whole number'),
    ({'keep': 'yes'}, "keep 'yes' is not a boolean"),
    ({'keep': 1}, 'keep 1 is not a boolean'),
])
def test_non_integers_and_booleans_refused(terms, words):
    with pytest.raises(LeaseError) as err:
        lease.validate_request(**terms)
    assert words in str(err.value)
    assert 'give' in str(err.value)


def test_keep_given():
    assert lease.validate_request(keep=True)['keep'] is True
    assert lease.validate_request(keep=False)['keep'] is False


# ------------------------------------------------------------------ the lease and its expiry

def test_new_lease_fields():
    made = make(ttl=7200, idle_timeout=900, keep=True)
    assert made == {'created_at': T0, 'last_touched_at': T0, 'ttl': 7200, 'idle_timeout': 900, 'keep': True,
                    'expires_at': T0 + 900}
    assert set(made) == set(lease.LEASE_FIELDS)


def test_new_lease_refuses_bad_terms_and_bad_time():
    with pytest.raises(LeaseError):
        make(ttl=86401)
    with pytest.raises(LeaseError):
        lease.new_lease('now')
    with pytest.raises(LeaseError):
        lease.new_lease(True)


def test_expires_at_is_the_earlier_of_idle_and_lifetime():
    terms = {'created_at': 1000.0, 'ttl': 5400, 'idle_timeout': 1800}
    assert lease.compute_expires_at(dict(terms, last_touched_at=1000.0)) == 2800.0
    assert lease.compute_expires_at(dict(terms, last_touched_at=4000.0)) == 5800.0
    assert lease.compute_expires_at(dict(terms, last_touched_at=3600.0)) == 5400.0
    assert lease.compute_expires_at(dict(terms, last_touched_at=6000.0)) == 6400.0


def test_expiry_is_computed_from_the_terms_not_the_stored_copy():
    skewed = dict(make(), expires_at=T0 + 10 ** 6)
    assert lease.is_expired(skewed, T0 + 1800)


@pytest.mark.parametrize('broken', [
    {},
    {'created_at': T0, 'ttl': 5400, 'idle_timeout': 1800},
    {'created_at': T0, 'last_touched_at': None, 'ttl': 5400, 'idle_timeout': 1800},
    {'created_at': 'yesterday', 'last_touched_at': T0, 'ttl': 5400, 'idle_timeout': 1800},
    {'created_at': True, 'last_touched_at': T0, 'ttl': 5400, 'idle_timeout': 1800},
    {'created_at': float('nan'), 'last_touched_at': T0, 'ttl': 5400, 'idle_timeout': 1800},
    None,
])
def test_a_broken_lease_decides_nothing(broken):
    with pytest.raises(LeaseError):
        lease.is_expired(broken, T0)


def test_is_expired_boundaries():
    made = make()
    assert not lease.is_expired(made, T0)
    assert not lease.is_expired(made, T0 + 1799)
    assert not lease.is_expired(made, T0 + 1799.999)
    assert lease.is_expired(made, T0 + 1800)
    assert lease.is_expired(made, T0 + 1801)


def test_keep_never_exempts_from_expiry():
    kept = make(keep=True)
    assert lease.is_expired(kept, T0 + 1800)
    touched = lease.heartbeat(kept, T0 + 1700)
    assert lease.is_expired(touched, T0 + 5400)


# ------------------------------------------------------------------ heartbeat and activity

def test_heartbeat_pushes_idle_expiry():
    made = make()
    beaten = lease.heartbeat(made, T0 + 600)
    assert beaten['last_touched_at'] == T0 + 600
    assert beaten['expires_at'] == T0 + 2400
    assert made['last_touched_at'] == T0 and made['expires_at'] == T0 + 1800      # the input is left alone
    assert beaten is not made


def test_heartbeat_just_before_expiry_is_accepted():
    beaten = lease.heartbeat(make(), T0 + 1799)
    assert beaten['expires_at'] == T0 + 1799 + 1800


@pytest.mark.parametrize('late', [0, 1, 3600])
def test_heartbeat_at_or_after_expiry_refused(late):
    made = make()
    before = dict(made)
    with pytest.raises(LeaseError) as err:
        lease.heartbeat(made, T0 + 1800 + late)
    assert 'Heartbeat refused' in str(err.value) and 'never revives' in str(err.value)
    assert '2026-12-03T10:30:00Z' in str(err.value)
    assert '(%d s ago)' % late in str(err.value)
    assert made == before


def test_heartbeat_refused_once_cleanup_started():
    made = make()
    with pytest.raises(LeaseError) as err:
        lease.heartbeat(made, T0 + 60, cleanup_started=True)
    assert 'cleanup' in str(err.value) and 'has started' in str(err.value)
    assert made == make()


def test_heartbeat_message_names_the_workspace():
    with pytest.raises(LeaseError) as err:
        lease.heartbeat(dict(make(), name='fix-login'), T0 + 5000)
    assert 'workspace fix-login' in str(err.value)


def test_heartbeat_keeps_other_keys():
    beaten = lease.heartbeat(dict(make(), name='fix-login'), T0 + 60)
    assert beaten['name'] == 'fix-login'
    assert beaten['ttl'] == 5400 and beaten['keep'] is False and beaten['created_at'] == T0


def test_heartbeat_from_a_clock_behind_never_shortens_the_lease():
    beaten = lease.heartbeat(make(), T0 + 900)
    again = lease.heartbeat(beaten, T0 + 300)
    assert again['last_touched_at'] == T0 + 900
    assert again['expires_at'] == T0 + 2700


def test_busy_workspace_still_expires_at_its_ttl():
    """Heartbeats every 10 minutes for 2 hours: accepted until the TTL, never past created_at + ttl."""
    current = make()
    cap = T0 + 5400
    accepted, refused = [], []
    for minute in range(10, 121, 10):
        now = T0 + minute * 60
        try:
            current = lease.heartbeat(current, now)
            accepted.append(minute)
        except LeaseError:
            refused.append(minute)
        assert current['expires_at'] <= cap
    assert accepted == [10, 20, 30, 40, 50, 60, 70, 80]
    assert refused == [90, 100, 110, 120]
    assert current['expires_at'] == cap
    assert not lease.is_expired(current, cap - 1)
    assert lease.is_expired(current, cap)


@pytest.mark.parametrize('activity', ['active', 'blocked'])
def test_working_or_blocked_agent_touches_the_lease(activity):
    touched = lease.touch_from_activity(make(), activity, T0 + 600)
    assert touched['last_touched_at'] == T0 + 600
    assert touched['expires_at'] == T0 + 2400


@pytest.mark.parametrize('activity', ['idle', 'unknown', None, '', 'ACTIVE', 'sleeping'])
def test_other_activity_does_not_touch(activity):
    made = make()
    assert lease.touch_from_activity(made, activity, T0 + 600) is made
    assert made['expires_at'] == T0 + 1800


@pytest.mark.parametrize('late', [0, 1, 7200])
def test_activity_at_or_after_expiry_does_not_revive(late):
    made = make()
    unchanged = lease.touch_from_activity(made, 'active', T0 + 1800 + late)
    assert unchanged is made
    assert unchanged == make()
    assert lease.is_expired(unchanged, T0 + 1800 + late)


def test_activity_after_cleanup_started_does_not_touch():
    made = make()
    assert lease.touch_from_activity(made, 'active', T0 + 60, cleanup_started=True) is made


def test_activity_never_pushes_past_the_ttl():
    current = make()
    for minute in range(5, 200, 5):
        current = lease.touch_from_activity(current, 'active', T0 + minute * 60)
        assert current['expires_at'] <= T0 + 5400
    assert current['expires_at'] == T0 + 5400


# ------------------------------------------------------------------ keep

def test_keep_only_turns_the_delete_at_expiry_into_a_retention():
    assert lease.auto_release(make()) is True
    assert lease.auto_release(make(keep=True)) is False
    assert lease.auto_release({'keep': None}) is True
    assert lease.auto_release({}) is True
    kept = make(keep=True)
    assert lease.is_expired(kept, T0 + 1800) is True and lease.is_expired(make(), T0 + 1800) is True


# ------------------------------------------------------------------ retention

def test_a_retention_lasts_retain_ttl_a_week_by_default():
    held = lease.retained({'cleanup_attempts': 0}, T0)
    assert held == {'cleanup_attempts': 0, 'retained': True, 'retained_at': T0, 'retained_until': T0 + 7 * 86400}
    assert lease.retained_until(held) == T0 + 7 * 86400
    short = lease.retained({}, T0, retain_ttl=60)
    assert not lease.retention_ended(short, T0 + 59) and lease.retention_ended(short, T0 + 60)
    assert lease.cleanup_status(dict(short, status='ready', desired_state='present')) == 'retained'


def test_a_retention_recorded_without_an_end_ends_a_week_after_it_began_and_one_without_a_time_never_by_guess():
    assert lease.retained_until({'retained': True, 'retained_at': T0}) == T0 + lease.DEFAULT_RETAIN_TTL
    assert lease.retained_until({'retained': True}) is None and not lease.retention_ended({'retained': True}, T0 * 2)
    assert lease.retained_until({}) is None and lease.retained_until({'retained': False, 'retained_until': T0}) is None


@pytest.mark.parametrize('value, message', [
    (0, 'retain_ttl 0 is not a positive number of seconds'),
    (-5, 'retain_ttl -5 is not a positive number of seconds'),
    (30 * 86400 + 1, 'retain_ttl 2592001 is more than 2592000 s (30 days)'),
    (True, 'retain_ttl True is a boolean'),
    ('604800', "retain_ttl '604800' is not a whole number of seconds"),
])
def test_bad_retain_ttl_is_refused(value, message):
    with pytest.raises(lease.LeaseError, match=re.escape(message)):
        lease.validate_retain_ttl(value)


def test_retained_labels_say_retained_until_the_end_of_the_retention_and_keep_false():
    kept = make(keep=True)
    labels = lease.retained_labels(kept, T0 + 86400.5)
    assert labels == {'state': 'retained', 'expires_at': str(int(T0 + 86401)), 'keep': 'false',
                      'created_at': str(int(T0))}
    assert lease.cleanup_decision(labels, T0 + 86401, True).decision == SKIP
    assert lease.cleanup_decision(labels, T0 + 86402, True).decision == DELETE


# ------------------------------------------------------------------ cleanup bookkeeping

def test_failed_cleanup_counts_and_schedules_a_retry():
    record = {'status': 'destroying', 'desired_state': 'destroyed'}
    failed = lease.cleanup_failed(record, RuntimeError('CT 105 is locked (backup)'), T0)
    assert failed['cleanup_attempts'] == 1
    assert failed['cleanup_error'] == 'CT 105 is locked (backup)'
    assert failed['cleanup_failed_at'] == T0
    assert failed['cleanup_retry_at'] == T0 + 300
    assert failed['cleanup_completed_at'] is None
    assert failed['status'] == 'destroying'
    assert record == {'status': 'destroying', 'desired_state': 'destroyed'}

    again = lease.cleanup_failed(failed, 'still locked', T0 + 310)
    assert again['cleanup_attempts'] == 2
    assert again['cleanup_error'] == 'still locked'
    assert again['cleanup_failed_at'] == T0 + 310
    assert again['cleanup_retry_at'] == T0 + 610


@pytest.mark.parametrize('error', ['', None])
def test_failed_cleanup_without_a_message_still_reads_as_failed(error):
    failed = lease.cleanup_failed({'status': 'destroying', 'desired_state': 'destroyed'}, error, T0)
    assert failed['cleanup_error'] == 'the cleanup failed without an error message'
    assert lease.cleanup_status(failed) == FAILED


def test_retry_timing():
    failed = lease.cleanup_failed({}, 'boom', T0)
    assert not lease.retry_due(failed, T0)
    assert not lease.retry_due(failed, T0 + 299)
    assert not lease.retry_due(failed, T0 + 299.9)
    assert lease.retry_due(failed, T0 + 300)
    assert lease.retry_due(failed, T0 + 3600)


def test_no_retry_without_a_failure_or_after_success():
    assert not lease.retry_due({}, T0)
    assert not lease.retry_due({'cleanup_retry_at': None}, T0)
    done = lease.cleanup_succeeded(lease.cleanup_failed({}, 'boom', T0), T0 + 400)
    assert not lease.retry_due(done, T0 + 10 ** 6)
    assert not lease.retry_due({'cleanup_retry_at': T0, 'cleanup_completed_at': T0 + 1}, T0 + 10)


def test_successful_cleanup_clears_the_transient_fields():
    failed = lease.cleanup_failed(lease.cleanup_failed({'status': 'destroying'}, 'a', T0), 'b', T0 + 300)
    done = lease.cleanup_succeeded(failed, T0 + 700)
    assert done == {'status': 'destroying', 'cleanup_attempts': 2, 'cleanup_error': None, 'cleanup_failed_at': None,
                    'cleanup_retry_at': None, 'cleanup_completed_at': T0 + 700}
    assert failed['cleanup_error'] == 'b'
    assert set(lease.CLEANUP_FIELDS) <= set(done)


def test_successful_first_attempt():
    assert lease.cleanup_succeeded({}, T0)['cleanup_attempts'] == 0


def test_a_failure_after_a_completion_reopens_it():
    reopened = lease.cleanup_failed(lease.cleanup_succeeded({}, T0), 'debt found', T0 + 10)
    assert reopened['cleanup_completed_at'] is None
    assert lease.retry_due(reopened, T0 + 310)


def test_bookkeeping_refuses_a_bad_time():
    with pytest.raises(LeaseError):
        lease.cleanup_failed({}, 'boom', 'now')
    with pytest.raises(LeaseError):
        lease.cleanup_succeeded({}, None)
    with pytest.raises(LeaseError):
        lease.retry_due({'cleanup_retry_at': 'soon'}, T0)


@pytest.mark.parametrize('record, started', [
    ({'status': 'ready', 'desired_state': 'present'}, False),
    ({'status': 'provisioning', 'desired_state': 'present'}, False),
    ({'status': 'ready', 'desired_state': 'destroyed'}, True),
    ({'status': 'destroying', 'desired_state': 'destroyed'}, True),
    ({'status': 'destroyed', 'desired_state': 'destroyed'}, True),
])
def test_cleanup_started(record, started):
    assert lease.cleanup_started(record) is started


# ------------------------------------------------------------------ cleanup status

def rec(status, desired_state='present', **fields):
    return dict({'status': status, 'desired_state': desired_state, 'retained': False, 'cleanup_attempts': 0,
                 'cleanup_error': None, 'cleanup_completed_at': None, 'cleanup_debt': []}, **fields)


@pytest.mark.parametrize('record, expected', [
    # creation under way
    (rec('requested'), PENDING),
    (rec('provisioning'), PENDING),
    (rec('booting'), PENDING),
    (rec('bootstrapping'), PENDING),
    (rec('registering'), PENDING),
    # live, nobody asked for a cleanup
    (rec('ready'), None),
    (rec('failed'), None),
    (rec('ready', cleanup_debt=None), None),
    # queued or running cleanup
    (rec('ready', 'destroyed'), PENDING),
    (rec('failed', 'destroyed'), PENDING),
    (rec('provisioning', 'destroyed'), PENDING),
    (rec('destroying', 'destroyed'), PENDING),
    (rec('destroying'), PENDING),
    (rec('destroying', 'destroyed', cleanup_attempts=2), PENDING),
    (rec('destroying', 'destroyed', cleanup_completed_at=T0), PENDING),
    (rec('ready', 'destroyed', retained=True), PENDING),
    # deletion confirmed
    (rec('destroyed', 'destroyed'), COMPLETE),
    (rec('destroyed', 'destroyed', cleanup_completed_at=T0, cleanup_attempts=3), COMPLETE),
    (rec('destroyed', 'destroyed', retained=True), COMPLETE),
    # observed error, identity conflict, debt, missing proof of deletion
    (rec('destroying', 'destroyed', cleanup_error='CT 105 is locked (backup)', cleanup_attempts=1), FAILED),
    (rec('destroying', 'destroyed', cleanup_error='marker mismatch: VMID 105 is not ours'), FAILED),
    (rec('destroyed', 'destroyed', cleanup_debt=[{'resource': 'volume vm-105-disk-1'}]), FAILED),
    (rec('destroyed', 'destroyed', cleanup_error='left a volume'), FAILED),
    (rec('ready', cleanup_debt=['disk']), FAILED),
    (rec('ready', retained=True, cleanup_error='release failed'), FAILED),
    (rec('ready', cleanup_completed_at=T0), FAILED),
    (rec('failed', cleanup_completed_at=T0), FAILED),
    # released without delete, or held by a person
    (rec('ready', retained=True), RETAINED),
    (rec('ready', retained=True, cleanup_completed_at=T0), RETAINED),
    (rec('failed', retained=True), RETAINED),
])
def test_cleanup_status(record, expected):
    assert lease.cleanup_status(record) == expected
    assert lease.cleanup_status_shown(record) == (expected or 'none')


def test_cleanup_status_of_a_sparse_record():
    assert lease.cleanup_status({'status': 'ready'}) is None
    assert lease.cleanup_status({'status': 'destroyed'}) == COMPLETE
    assert lease.cleanup_status_shown({'status': 'ready'}) == 'none'


def test_cleanup_status_through_the_bookkeeping():
    record = rec('destroying', 'destroyed')
    assert lease.cleanup_status(record) == PENDING
    failed = lease.cleanup_failed(record, 'lock timeout', T0)
    assert lease.cleanup_status(failed) == FAILED
    done = lease.cleanup_succeeded(failed, T0 + 300)
    assert lease.cleanup_status(done) == PENDING                     # not yet observed absent: keep credentials
    assert lease.cleanup_status(dict(done, status='destroyed')) == COMPLETE


@pytest.mark.parametrize('record, field', [
    ({'status': 'gone'}, 'status'),
    ({}, 'status'),
    ({'status': 'ready', 'desired_state': 'absent'}, 'desired_state'),
])
def test_cleanup_status_refuses_unknown_states(record, field):
    with pytest.raises(LeaseError) as err:
        lease.cleanup_status(record)
    assert err.value.details == {'field': field}
    assert 'expected one of' in str(err.value)


def test_statuses_are_the_journals():
    assert lease.STATUSES == journal_module.WORKSPACE_STATUSES
    assert lease.DESIRED_STATES == journal_module.DESIRED_STATES
    assert set(lease.TOUCHING_ACTIVITIES) <= set(journal_module.WORKSPACE_ACTIVITIES)


# ------------------------------------------------------------------ times

@pytest.mark.parametrize('text, expected', [
    (1796292000, 1796292000.0),
    (1796292000.25, 1796292000.25),
    ('1796292000', 1796292000.0),
    ('1796292000.5', 1796292000.5),
    (' 1796292000 ', 1796292000.0),
    ('0', 0.0),
    ('2026-12-03T10:00:00Z', 1796292000.0),
    ('2026-12-03t10:00:00z', 1796292000.0),
    ('2026-12-03 10:00:00Z', 1796292000.0),
    ('2026-12-03T12:00:00+02:00', 1796292000.0),
    ('2026-12-03T04:30:00-05:30', 1796292000.0),
    ('2026-12-03T10:00:00-00:00', 1796292000.0),
    ('2026-12-03T10:00:00.5Z', 1796292000.5),
    ('2026-12-03T10:00:00.123456+00:00', 1796292000.123456),
    ('2026-12-03T09:59:60Z', 1796292000.0),                  # a leap second
    ('1970-01-01T00:00:00Z', 0.0),
    ('2024-02-29T00:00:00Z', 1709164800.0),
])
def test_parse_time(text, expected):
    assert lease.parse_time(text) == pytest.approx(expected, abs=1e-6)


@pytest.mark.parametrize('text', [
    'tomorrow', '', '   ', 'unknown', '2026-12-03', '2026-12-03T10:00:00', '2026-12-03T10:00Z', '2026-12-03T10-00-00Z',
    '1e9', '-5', '+5', '1796292000.', '.5', '0x10', '2026-12-03T10:00:00+0200', '2026-12-03T10:00:00 Z', None, True,
    [1796292000],
])
def test_parse_time_refuses_anything_else(text):
    with pytest.raises(LeaseError) as err:
        lease.parse_time(text)
    assert 'parses as neither unix seconds nor RFC 3339' in str(err.value)
    assert '2026-12-03T10:00:00Z' in str(err.value)


@pytest.mark.parametrize('text', [
    '2026-13-03T10:00:00Z', '2026-02-30T10:00:00Z', '2026-12-03T25:00:00Z', '2026-12-03T10:61:00Z',
    '2026-12-03T10:00:61Z', '2026-12-03T10:00:00+24:00', '2026-12-03T10:00:00+02:60', '0000-01-01T00:00:00Z',
])
def test_parse_time_refuses_impossible_rfc3339(text):
    with pytest.raises(LeaseError) as err:
        lease.parse_time(text)
    assert 'not a valid RFC 3339 time' in str(err.value)


@pytest.mark.parametrize('value', [float('nan'), float('inf')])
def test_parse_time_refuses_non_finite_numbers(value):
    with pytest.raises(LeaseError):
        lease.parse_time(value)


def test_format_time():
    assert lease.format_time(T0) == '2026-12-03T10:00:00Z'
    assert lease.format_time(T0 + 0.9) == '2026-12-03T10:00:00Z'
    assert lease.parse_time(lease.format_time(T0 + 1234)) == T0 + 1234


# ------------------------------------------------------------------ labels

@pytest.mark.parametrize('value, expected', [
    (None, 'unknown'),
    ('', 'unknown'),
    ('   ', 'unknown'),
    ('ready', 'ready'),
    (' ready ', 'ready'),
    ('fix-login_2.x', 'fix-login_2.x'),
    ('a b/c:d', 'a-b-c-d'),
    ('2026-12-03T10:00:00+02:00', '2026-12-03T10-00-00-02-00'),
    (u'caf\u00e9', 'caf-'),
    ('tab\there', 'tab-here'),
    (True, 'true'),
    (False, 'false'),
    (1796292000, '1796292000'),
    (0, '0'),
    ('x' * 63, 'x' * 63),
    ('x' * 64, 'x' * 63),
    ('y' * 500, 'y' * 63),
    ('!' * 100, '-' * 63),
])
def test_label_value(value, expected):
    assert lease.label_value(value) == expected
    assert LABEL_CHARS.match(lease.label_value(value))


def test_lease_labels():
    labels = lease.lease_labels(make(keep=True), 'ready')
    assert labels == {'state': 'ready', 'expires_at': '1796293800', 'keep': 'true', 'created_at': '1796292000'}
    assert all(LABEL_CHARS.match(v) for v in labels.values())
    assert set(labels) == set(lease.LEASE_LABELS)
    assert lease.lease_labels(make(), None)['keep'] == 'false'
    assert lease.lease_labels(make(), None)['state'] == 'unknown'
    assert lease.lease_labels(make(), 'being created!')['state'] == 'being-created-'


def test_lease_labels_round_times_so_the_label_never_expires_early():
    made = make(now=T0 + 0.4)
    labels = lease.lease_labels(made, 'ready')
    assert labels['created_at'] == '1796292000'                # down
    assert labels['expires_at'] == '1796293801'                # up: the lease expires at ...800.4
    assert lease.parse_time(labels['expires_at']) >= made['expires_at']


def test_lease_labels_follow_a_heartbeat():
    beaten = lease.heartbeat(make(), T0 + 600)
    assert lease.lease_labels(beaten, 'ready')['expires_at'] == str(int(T0 + 2400))


@pytest.mark.parametrize('offset', [0.0, 0.1, 0.5, 0.999])
def test_label_sweep_never_deletes_before_the_lease_expires(offset):
    made = make(now=T0 + offset)
    labels = lease.lease_labels(made, 'ready')
    for now in (made['expires_at'] - 1, made['expires_at'], made['expires_at'] + 0.5):
        if lease.cleanup_decision(labels, now, True).decision == DELETE:
            assert lease.is_expired(made, now)
    assert lease.cleanup_decision(labels, math.ceil(made['expires_at']) + 1, True).decision == DELETE


# ------------------------------------------------------------------ the label sweep

NOW = T0
PAST = str(int(NOW - 1))                        # expired one second ago
AT = str(int(NOW))                              # expires exactly now: not past
FUTURE = str(int(NOW + 3600))
LONG_PAST = str(int(NOW - 3 * 86400))


def labels_of(state=None, expires_at=None, keep='false', **more):
    labels = dict(more)
    for key, value in (('state', state), ('expires_at', expires_at), ('keep', keep)):
        if value is not None:
            labels[key] = value
    return labels


ROWS = [
    # none, or keep=true: skip
    ({}, SKIP),
    (None, SKIP),
    ({'team': 'platform', 'owner': 'ci'}, SKIP),
    ({'state': 'unknown', 'expires_at': 'unknown'}, SKIP),
    (labels_of('failed', PAST, keep='true'), SKIP),
    (labels_of('expired', LONG_PAST, keep='TRUE'), SKIP),
    (labels_of('ready', LONG_PAST, keep='True'), SKIP),
    (labels_of('ready', LONG_PAST, keep=True), SKIP),
    (labels_of('released', LONG_PAST, keep='yes'), SKIP),
    (labels_of('released', LONG_PAST, keep='1'), SKIP),
    (labels_of('released', LONG_PAST, keep='unknown'), SKIP),
    (labels_of(keep='true'), SKIP),
    (labels_of('ready', 'tomorrow', keep='true'), SKIP),
    # ... but a kept one is not a pet: deleted once its expiry plus the longest retention (30 days) has passed
    (labels_of('ready', str(int(NOW - 30 * 86400)), keep='true'), SKIP),
    (labels_of('ready', str(int(NOW - 30 * 86400 - 1)), keep='true'), DELETE),
    (labels_of('running', str(int(NOW - 31 * 86400)), keep='TRUE'), DELETE),
    (labels_of('released', str(int(NOW - 31 * 86400)), keep='yes'), DELETE),
    # retained (released without delete): delete once its retention (its expires_at) has passed
    (labels_of('retained', FUTURE), SKIP),
    (labels_of('retained', AT), SKIP),
    (labels_of('retained', PAST), DELETE),
    # running / provisioning: delete only when stale (past expires_at + 12 hours)
    (labels_of('running', FUTURE), SKIP),
    (labels_of('running', AT), SKIP),
    (labels_of('running', PAST), SKIP),
    (labels_of('running', str(int(NOW - 12 * 3600))), SKIP),
    (labels_of('running', str(int(NOW - 12 * 3600 - 1))), DELETE),
    (labels_of('running', LONG_PAST), DELETE),
    (labels_of('running'), SKIP),
    (labels_of('provisioning', PAST), SKIP),
    (labels_of('provisioning', str(int(NOW - 12 * 3600))), SKIP),
    (labels_of('provisioning', str(int(NOW - 12 * 3600 - 1))), DELETE),
    (labels_of('Provisioning', LONG_PAST), DELETE),
    (labels_of('provisioning'), SKIP),
    # leased / ready / active: delete once past expires_at
    (labels_of('leased', FUTURE), SKIP),
    (labels_of('leased', AT), SKIP),
    (labels_of('leased', PAST), DELETE),
    (labels_of('ready', AT), SKIP),
    (labels_of('ready', PAST), DELETE),
    (labels_of('READY', PAST), DELETE),
    (labels_of('ready', FUTURE), SKIP),
    (labels_of('ready'), SKIP),
    (labels_of('active', AT), SKIP),
    (labels_of('active', PAST), DELETE),
    (labels_of('active', FUTURE), SKIP),
    (labels_of('ready', PAST, keep=None), DELETE),              # keep absent: false, the default
    (labels_of('ready', PAST, keep=''), DELETE),
    (labels_of('ready', PAST, keep='FALSE'), DELETE),
    (labels_of('ready', PAST, keep=False), DELETE),
    # failed / released / expired: delete
    (labels_of('failed'), DELETE),
    (labels_of('failed', FUTURE), DELETE),
    (labels_of('released', FUTURE), DELETE),
    (labels_of('expired', AT), DELETE),
    (labels_of('Expired', LONG_PAST), DELETE),
    # anything else: delete once past expires_at; skip when it is missing or in the future
    (labels_of('destroying', PAST), DELETE),
    (labels_of('destroying', AT), SKIP),
    (labels_of('destroying', FUTURE), SKIP),
    (labels_of('destroying'), SKIP),
    (labels_of('weird-state', PAST), DELETE),
    (labels_of(None, PAST), DELETE),
    (labels_of('unknown', PAST), DELETE),
    (labels_of(None, FUTURE), SKIP),
    (labels_of(None, None, created_at=LONG_PAST), SKIP),
    # an expires_at that parses as neither format: report, whatever the state
    (labels_of('ready', 'tomorrow'), REPORT),
    (labels_of('failed', 'tomorrow'), REPORT),
    (labels_of('running', '2026-12-03T10-00-00Z'), REPORT),
    (labels_of(None, '12/03/2026'), REPORT),
]


@pytest.mark.parametrize('labels, expected', ROWS)
def test_sweep_table_with_verified_marker(labels, expected):
    decided = lease.cleanup_decision(labels, NOW, True)
    assert decided.decision == expected
    assert decided.reason


@pytest.mark.parametrize('labels, expected', ROWS)
def test_sweep_table_without_verified_marker(labels, expected):
    decided = lease.cleanup_decision(labels, NOW, False)
    assert decided.decision == (REPORT if expected == DELETE else expected)
    if expected == DELETE:
        assert 'ownership marker does not verify' in decided.reason


@pytest.mark.parametrize('verdict, expected', [
    (True, DELETE),
    ('verified', DELETE),
    (False, REPORT),
    (None, REPORT),
    ('forged', REPORT),
    ('unverified', REPORT),
    ('mismatch', REPORT),
    ('absent', REPORT),
    (1, REPORT),
])
def test_only_a_verified_marker_allows_a_delete(verdict, expected):
    assert lease.cleanup_decision(labels_of('failed'), NOW, verdict).decision == expected


def test_both_time_formats_decide_alike():
    for unix, rfc in ((PAST, '2026-12-03T09:59:59Z'), (AT, '2026-12-03T10:00:00Z'),
                      (PAST, '2026-12-03T11:59:59+02:00'), (AT, '2026-12-03T10:00:00.000Z')):
        assert lease.parse_time(unix) == lease.parse_time(rfc)
        for state in ('ready', 'destroying', 'running'):
            assert (lease.cleanup_decision(labels_of(state, unix), NOW, True)
                    == lease.cleanup_decision(labels_of(state, rfc), NOW, True)._replace(
                        reason=lease.cleanup_decision(labels_of(state, unix), NOW, True).reason))
    assert lease.cleanup_decision(labels_of('ready', '2026-12-03T09:59:59Z'), NOW, True).decision == DELETE
    assert lease.cleanup_decision(labels_of('ready', '2026-12-03T10:00:00Z'), NOW, True).decision == SKIP
    assert lease.cleanup_decision(labels_of('ready', '2026-12-03T10:00:00Z'), NOW + 1, True).decision == DELETE


def test_sweep_boundary_exactly_at_and_one_second_after():
    labels = labels_of('ready', AT)
    assert lease.cleanup_decision(labels, NOW, True).decision == SKIP
    assert lease.cleanup_decision(labels, NOW + 0.5, True).decision == DELETE
    assert lease.cleanup_decision(labels, NOW + 1, True).decision == DELETE
    stale_at = NOW + 12 * 3600
    assert lease.cleanup_decision(labels_of('running', AT), stale_at, True).decision == SKIP
    assert lease.cleanup_decision(labels_of('running', AT), stale_at + 1, True).decision == DELETE


def test_sweep_reasons_say_why():
    assert 'keep=true' in lease.cleanup_decision(labels_of('failed', keep='true'), NOW, True).reason
    assert 'neither true nor false' in lease.cleanup_decision(labels_of('failed', keep='maybe'), NOW, True).reason
    assert 'no lease labels' in lease.cleanup_decision({}, NOW, True).reason
    reported = lease.cleanup_decision(labels_of('ready', 'tomorrow'), NOW, True)
    assert 'expires_at=tomorrow' in reported.reason and 'parses as neither' in reported.reason
    stale = lease.cleanup_decision(labels_of('running', LONG_PAST), NOW, True)
    assert 'stale' in stale.reason and '12 hours' in stale.reason
    assert '2026-12-03T09:59:59Z' in lease.cleanup_decision(labels_of('ready', PAST), NOW, True).reason
    assert 'has not passed' in lease.cleanup_decision(labels_of('ready', FUTURE), NOW, True).reason


def test_sweep_decision_is_a_small_named_result():
    decided = lease.cleanup_decision(labels_of('failed'), NOW, True)
    assert decided == (DELETE, decided.reason)
    assert decided.decision == 'delete' and SKIP == 'skip' and REPORT == 'report'


def test_sweep_refuses_a_bad_now():
    with pytest.raises(LeaseError):
        lease.cleanup_decision(labels_of('failed'), 'now', True)


def test_sweep_reads_labels_a_lease_wrote():
    made = make()
    labels = lease.lease_labels(made, 'ready')
    assert lease.cleanup_decision(labels, made['expires_at'], True).decision == SKIP
    assert lease.cleanup_decision(labels, made['expires_at'] + 1, True).decision == DELETE
    assert lease.cleanup_decision(labels, made['expires_at'] + 1, False).decision == REPORT
    kept = lease.lease_labels(make(keep=True), 'ready')
    assert lease.cleanup_decision(kept, made['expires_at'] + 86400, True).decision == SKIP


# ------------------------------------------------------------------ purity

def test_lease_module_is_pure_core():
    """Standard library and core only, and no clock: every time comes in as ``now``."""
    source = open(os.path.splitext(lease.__file__)[0] + '.py').read()
    tree = ast.parse(source)
    imported = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imported.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            imported.add(node.module)
    core = 'ansible_collections.ephemera.workspaces.plugins.module_utils.core.'
    assert all(name.startswith(core) or name in ('calendar', 'collections', 'datetime', 'math', 're')
               for name in imported), imported
    called = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute):
            called.add(node.attr)
    assert not called & {'time', 'now', 'utcnow', 'today', 'monotonic'}
