"""The GCP paths run against the Compute Engine fake: on its own (gcpfake) or in the try-out cloud (localcloud), one per
test module."""

import pytest

from tests.localcloud import gcpschema
from tests.localcloud.fixtures import localcloud  # noqa: F401 pylint: disable=unused-import
from tests.localcloud.gcp import GcpFake


@pytest.fixture(scope='module')
def gcpfake():
    """A running fake whose every answer is checked against the Compute v1 discovery document."""
    fake = GcpFake(schema=gcpschema.load()).start()
    yield fake
    fake.stop()
    assert fake.violations == [], fake.violations
