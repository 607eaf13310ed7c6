"""The GCP expiry guard's decision table agrees with the label cleanup sweep's (core.lease.cleanup_decision) on the
same cases, and its systemd timer runs every 2 minutes, with a randomized delay, persistently."""

import configparser

import pytest

from ansible_collections.ephemera.workspaces.plugins.module_utils.core import lease as leasing
from ansible_collections.ephemera.workspaces.plugins.module_utils.providers.gcp import guard

NOW = 1796300000
PAST = NOW - 60
LONG_PAST = NOW - 13 * 3600
FUTURE = NOW + 600

CASES = [
    {'state': 'ready', 'expires_at': str(PAST), 'keep': 'false'},
    {'state': 'ready', 'expires_at': str(FUTURE), 'keep': 'false'},
    {'state': 'active', 'expires_at': str(PAST)},
    {'expires_at': str(PAST)},
    {'state': 'unknown', 'expires_at': str(PAST)},
    {'state': 'failed', 'expires_at': str(FUTURE)},
    {'state': 'released'},
    {'state': 'expired', 'keep': 'false'},
    {'state': 'running', 'expires_at': str(PAST)},
    {'state': 'running', 'expires_at': str(LONG_PAST)},
    {'state': 'provisioning', 'expires_at': str(LONG_PAST)},
    {'state': 'provisioning', 'expires_at': str(PAST)},
    {'state': 'ready', 'expires_at': str(PAST), 'keep': 'true'},
    {'state': 'failed', 'keep': 'TRUE'},
    {'state': 'failed', 'keep': 'maybe'},
    {'state': 'ready', 'expires_at': 'soon'},
    {'state': 'ready'},
    {'state': 'ready', 'expires_at': '2026-12-03T10:00:00Z'},
    {'state': 'ready', 'expires_at': '2030-12-03T10:00:00+02:00'},
    {'state': 'ready', 'expires_at': str(NOW)},
    {'keep': 'false'},
    {'created_at': str(PAST)},
    {},
]


@pytest.mark.parametrize('labels', CASES)
def test_guard_agrees_with_the_label_sweep(labels):
    """The guard deletes exactly what the sweep would delete for a verified marker; what the sweep would only report
    (an expiry that does not parse) the guard leaves alone."""
    swept = leasing.cleanup_decision(labels, NOW, True)
    decided, reason = guard.decide(dict(labels, ephemera='workspace'), NOW)
    assert decided == ('delete' if swept.decision == leasing.DELETE else 'skip'), (labels, swept, reason)


def test_guard_leaves_what_is_not_ours():
    assert guard.decide({'state': 'failed'}, NOW)[0] == 'skip'


def test_guard_reads_rfc3339_as_the_lease_does():
    for text in ('2026-12-03T10:00:00Z', '2026-12-03T12:00:00+02:00', '2026-12-03 10:00:00.5z', '1796292000'):
        assert guard.parse_time(text) == leasing.parse_time(text)
    assert guard.parse_time('2026-12-03T10:00:00') is None


def test_timer_every_two_minutes_randomized_persistent():
    timer = configparser.ConfigParser()
    timer.read_string(guard.TIMER_UNIT)
    assert timer['Timer']['OnUnitActiveSec'] == '2min'
    assert timer['Timer']['OnBootSec'] == '2min'
    assert timer['Timer']['RandomizedDelaySec'] == '30s'
    assert timer['Timer']['Persistent'] == 'true'
    assert timer['Timer']['Unit'] == guard.UNIT_NAME + '.service'
    assert timer['Install']['WantedBy'] == 'timers.target'
    service = configparser.ConfigParser()
    service.read_string(guard.SERVICE_UNIT)
    assert service['Service']['Type'] == 'oneshot'
    assert service['Service']['ExecStart'] == '/usr/bin/python3 %s run' % guard.INSTALL_PATH
    # Every line reaches the journal and the console.
    assert service['Service']['StandardOutput'] == 'journal+console'
