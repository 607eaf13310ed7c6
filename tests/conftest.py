"""Shared pytest set-up: make this checkout importable as ansible_collections.ephemera.workspaces, and end the
session by checking that nothing it started still runs (tests/leftovers.py)."""

import os
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _make_collection_importable():
    try:
        import ansible_collections.ephemera.workspaces  # noqa: F401  (already linked, e.g. by make venv)
        return
    except ImportError:
        pass
    base = tempfile.mkdtemp(prefix='ephemera-collections-')
    os.makedirs(os.path.join(base, 'ansible_collections', 'ephemera'))
    os.symlink(ROOT, os.path.join(base, 'ansible_collections', 'ephemera', 'workspaces'))
    sys.path.insert(0, base)
    for name in [m for m in sys.modules if m == 'ansible_collections' or m.startswith('ansible_collections.')]:
        del sys.modules[name]


_make_collection_importable()


# Every playbook a test runs polls its workers every 10 ms, not every 1 ms (tests/ansible_run.py, POLL_INTERVAL).
from tests.ansible_run import harness_config  # noqa: E402 pylint: disable=wrong-import-position
harness_config()

# The hook is a plugin of its own, so that a pytest run outside tests/ can load it too (-p tests.leftovers).
from tests.leftovers import pytest_sessionfinish  # noqa: E402,F401 pylint: disable=wrong-import-position,unused-import
