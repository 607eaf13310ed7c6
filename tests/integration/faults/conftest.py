"""One crash-safety site (try-out cluster, git server with a token, journal) for the harness's own tests."""

import pytest

from tests.faults.site import FaultSite


@pytest.fixture(scope='package')
def site(tmp_path_factory):
    site = FaultSite.start(str(tmp_path_factory.mktemp('faults')))
    try:
        yield site
    finally:
        site.stop()
