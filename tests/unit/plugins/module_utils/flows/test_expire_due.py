"""Which workspaces one expiry sweep releases: expired leases, failed cleanups once their retry is due and retained
workspaces once their retention ended; a kept one (keep=true) whose lease expired is retained instead; never a
workspace made before leases, one retained until later, or one already destroyed."""

import pytest

from ansible_collections.ephemera.workspaces.plugins.module_utils.core import lease as leasing
from ansible_collections.ephemera.workspaces.plugins.module_utils.flows.expire import due

NOW = 1796290000.0
LEASE = leasing.new_lease(NOW - 100, ttl=600, idle_timeout=60)  # idle since NOW - 100: expired at NOW - 40


def ws(status='ready', lease='expired', **cleanup):
    return {'status': status, 'desired_state': 'present', 'lease': LEASE if lease == 'expired' else lease,
            'cleanup': cleanup}


@pytest.mark.parametrize('record, expected', [
    (ws(), 'expired'),
    (ws(lease=leasing.new_lease(NOW - 10, ttl=600, idle_timeout=60)), None),
    (ws(lease=None), None),
    (ws(status='destroyed'), None),
    (ws(**leasing.retained({}, NOW - 10)), None),
    (ws(**leasing.retained({}, NOW - 10, retain_ttl=10)), 'retention ended'),
    (ws(lease=None, **leasing.retained({}, NOW - 10, retain_ttl=5)), 'retention ended'),
    (ws(retained=True, retained_at=NOW - leasing.DEFAULT_RETAIN_TTL), 'retention ended'),
    (ws(retained=True), None),
    (ws(lease=dict(LEASE, keep=True)), 'kept'),
    (ws(lease=dict(leasing.new_lease(NOW - 10, ttl=600, idle_timeout=60), keep=True)), None),
    (ws(status='destroying', cleanup_retry_at=NOW + 60, cleanup_attempts=1), None),
    (ws(status='destroying', cleanup_retry_at=NOW, cleanup_attempts=1), 'retry'),
    (ws(status='failed'), 'expired'),
    (ws(status='provisioning'), 'expired'),
])
def test_what_a_sweep_releases(record, expected):
    assert due(record, NOW) == expected
