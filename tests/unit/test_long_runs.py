"""make test leaves the long runs to make test-long, and CI runs both: no integration test and no part of the fault
matrix is left out of CI (.ci/run runs both: tests/unit/test_supported_cores.py), and every file named long exists
and has tests."""

import os
import re

from tests.faults.__main__ import GROUPS, PARTS
from tests.integration.conftest import LONG

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def read(name):
    with open(os.path.join(ROOT, name), encoding='utf-8') as f:
        return f.read()


def recipe(target):
    """The lines of a Makefile target's recipe, joined (continuation lines included)."""
    found = re.search(r'^%s:.*\n((?:\t.*\n)+)' % re.escape(target), read('Makefile'), re.M)
    assert found, 'the Makefile has no target %s' % target
    return found.group(1).replace('\\\n', ' ')


def test_make_test_and_test_long_split_the_integration_tests_by_the_marker():
    assert "-m 'not long' tests/integration" in recipe('integration')
    assert '-m long tests/integration' in recipe('integration-long')
    assert re.search(r'\bintegration faults .*FAULTS_PART=test\b', recipe('test'))
    assert re.search(r'\bintegration-long faults .*FAULTS_PART=long\b', recipe('test-long'))
    assert 'long:' in read('pytest.ini')


def test_the_two_fault_groups_cover_every_part_of_the_matrix_once():
    test, long_ = set(GROUPS['test']), set(GROUPS['long'])
    assert not test & long_
    assert test | long_ == set(PARTS) | {'main'}
    assert test | long_ == set(GROUPS['all']) | set(GROUPS['clouds'])


def test_every_long_file_exists_and_has_tests():
    for path in LONG:
        full = os.path.join(ROOT, 'tests', 'integration', path)
        assert os.path.isfile(full), '%s is named long but does not exist' % path
        with open(full, encoding='utf-8') as f:
            # Its own tests, or a shared scenario's it imports (tests/integration/poolrun.py).
            assert re.search(r'^(?:(?:async )?def |    )test_\w+', f.read(), re.M), '%s has no test' % path
