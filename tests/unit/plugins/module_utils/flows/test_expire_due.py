"""Which workspaces one expiry sweep releases: expired leases, and failed cleanups once their retry is due; never a
workspace made before leases, a retained one, or one already destroyed."""

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
    (ws(retained=True), None),
    (ws(status='destroying', cleanup_retry_at=NOW + 60, cleanup_attempts=1), None),
    (ws(status='destroying', cleanup_retry_at=NOW, cleanup_attempts=1), 'retry'),
    (ws(status='failed'), 'expired'),
    (ws(status='provisioning'), 'expired'),
])
def test_what_a_sweep_releases(record, expected):
    assert due(record, NOW) == expected
