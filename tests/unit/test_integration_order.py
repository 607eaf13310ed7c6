"""The integration tests' order (tests/integration/conftest.py) names files that exist: a renamed file would
otherwise silently lose its place at the front and run alone at the end of make integration."""

import os

from tests.integration import conftest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_every_file_put_first_exists_once():
    assert len(set(conftest.FIRST)) == len(conftest.FIRST)
    missing = [name for name in conftest.FIRST
               if not os.path.isfile(os.path.join(ROOT, 'tests', 'integration', name))]
    assert missing == []


def test_files_put_first_come_first_in_their_order_and_keep_their_tests_order():
    class Item:
        def __init__(self, nodeid):
            self.nodeid = nodeid
            self.markers = []

        def add_marker(self, marker):
            self.markers.append(marker.name)

    items = [Item('tests/integration/archive/test_archive.py::test_a'),
             Item('tests/integration/%s::test_b' % conftest.FIRST[1]),
             Item('tests/integration/%s::test_c' % conftest.FIRST[0]),
             Item('tests/integration/%s::test_a' % conftest.FIRST[1])]
    conftest.pytest_collection_modifyitems(None, None, items)
    assert [item.nodeid.rsplit('::', 1)[1] for item in items] == ['test_c', 'test_b', 'test_a', 'test_a']
    assert items[-1].nodeid.startswith('tests/integration/archive/')
    # The files of LONG get the marker (make test-long runs them), the others do not.
    assert conftest.FIRST[0] in conftest.LONG and conftest.FIRST[1] in conftest.LONG
    assert 'archive/test_archive.py' not in conftest.LONG
    assert [item.markers for item in items] == [['long'], ['long'], ['long'], []]
    short = [name for name in conftest.FIRST if name not in conftest.LONG][0]
    alone = [Item('tests/integration/%s::test_d' % short)]
    conftest.pytest_collection_modifyitems(None, None, alone)
    assert alone[0].markers == []
