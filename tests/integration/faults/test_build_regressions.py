"""Bugs the template build's rows of the crash-safety matrix found, each made to happen on purpose on the debian
guest tier (builds provision only containers of their own).

A build killed right after its pointer switch (finalize's first commit) left the version's record short of
``template`` for good (and, with a static address, the address held): the version was built and current, so no
later build looked at it again. The next build's prepare step now finishes it.
"""

import os

import pytest

from tests.faults import invariants
from tests.faults.builds import BuildMatrix
from tests.faults.cells import Cell
from tests.faults.site import FaultSite

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason='the debian guest tier needs root (mounts, namespaces)')


@pytest.fixture(scope='module')
def builds(tmp_path_factory):
    site = FaultSite.start(str(tmp_path_factory.mktemp('faults-builds')), guests='debian')
    try:
        matrix = BuildMatrix(site, template='rg')
        site.clear_faults()
        site.log_requests()
        yield matrix
    finally:
        site.stop()


def test_a_build_killed_after_its_pointer_switch_is_finished_by_the_next(builds):
    cell = Cell('kill build: candidate template.finalize journal template_switch #1', 'kill', [])
    first = builds.run(cell, builds.build_op())
    assert first.ok, first.explain()
    killed = builds.run(cell, builds.build_op(),
                        kill=builds.kill_of(('candidate', 'template.finalize journal template_switch', 1)))
    assert killed.killed
    with builds.site.journal() as journal:
        pointer = journal.template('rg')
        version = journal.template_version('rg', 2)
        assert (pointer['current'], version['state']) == (2, 'built')
        assert journal.get_workspace('tb-rg-v2')['status'] != 'template'
    again = builds.run(cell, builds.build_op())
    assert again.ok, again.explain()
    assert builds.converged(2)
    with builds.site.journal() as journal:
        assert journal.get_workspace('tb-rg-v2')['status'] == 'template'
        assert 'tb-rg-v2' not in [lease['workspace'] for lease in journal.address_leases()]
        assert [e['action'] for e in journal.events('tb-rg-v2')][-1] == 'template'
    view = invariants.ClusterView(builds.site, builds.site.secret())
    found, leaks = invariants.check_build(builds.site, view, 'rg')
    assert found == {'pointer': [], 'versions': []} and leaks == {}
    assert getattr(cell, 'pointer_violations', []) == []
