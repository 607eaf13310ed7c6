"""Fixtures of the security tests: the flows' site (an in-process fakepve, a journal, a provider; flowsite.py)."""

import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), 'plugins', 'module_utils',
                                'flows'))

from flowsite import Site  # noqa: E402  pylint: disable=wrong-import-position


@pytest.fixture
def site(fakepve, fakepve_cafile, tmp_path):
    made = Site(fakepve, fakepve_cafile, tmp_path)
    yield made
    made.close()
