"""The ``site`` fixture of the flows' tests (flowsite.py)."""

import pytest

from flowsite import Site


@pytest.fixture
def site(fakepve, fakepve_cafile, tmp_path):
    made = Site(fakepve, fakepve_cafile, tmp_path)
    yield made
    made.close()
