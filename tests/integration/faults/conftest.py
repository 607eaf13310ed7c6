"""One crash-safety site (try-out cluster, git server with a token, journal) for the harness's own tests."""

import pytest

from tests.faults.site import FaultSite


def started(site_class, directory):
    """A site of ``site_class`` in ``directory`` for the fixture that yields from this, stopped after it."""
    site = site_class.start(directory)
    try:
        yield site
    finally:
        site.stop()


@pytest.fixture(scope='package')
def site(tmp_path_factory):
    yield from started(FaultSite, str(tmp_path_factory.mktemp('faults')))
