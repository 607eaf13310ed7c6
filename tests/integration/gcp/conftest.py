"""The GCP paths run against the Compute Engine fake of the try-out cloud, one fake per test module."""

import pytest

from tests.localcloud import gcpschema
from tests.localcloud.gcp import GcpFake


@pytest.fixture(scope='module')
def gcpfake():
    """A running fake whose every answer is checked against the Compute v1 discovery document."""
    fake = GcpFake(schema=gcpschema.load()).start()
    yield fake
    fake.stop()
    assert fake.violations == [], fake.violations
