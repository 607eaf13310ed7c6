"""Fixtures of the module_utils tests: a journal file in the test's own directory."""

import pytest

from ansible_collections.ephemera.workspaces.plugins.module_utils.core.journal import Journal


@pytest.fixture
def path(tmp_path):
    return str(tmp_path / 'journal.sqlite')


@pytest.fixture
def journal(path):
    with Journal.open(path) as j:
        yield j
