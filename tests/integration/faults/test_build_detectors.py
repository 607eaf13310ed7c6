"""The template build's invariants see what they claim to count: a pointer at a version that is not built, a
container of a failed version, a built version whose container is no template.

The build rows of the matrix (tests/faults/builds.py) report zeros; these show the checks behind them fail on a
journal and a cluster view broken on purpose. They need no cluster: the checks read the journal and a view.
"""

import os

from ansible_collections.ephemera.workspaces.plugins.module_utils.core.journal import Journal
from tests.faults import invariants
from tests.faults.builds import BuildMatrix, build_points
from tests.faults.cells import Cell

TEMPLATE = 'fb'


class JournalOnly:
    """What the build checks read of a site: its journal."""

    def __init__(self, path):
        self.journal_path = path

    def journal(self):
        return Journal.open(self.journal_path, create=False)


class View:
    """A cluster view: ``ours`` vmid -> the workspace its marker names; ``templates`` the vmids that are templates."""

    def __init__(self, ours, templates):
        self.ours = dict(ours)
        self.containers = {vmid: ('pve1', {}, {'template': 1 if vmid in templates else 0}) for vmid in ours}


def built(journal, version, vmid):
    record = journal.begin_template_version(TEMPLATE, {'vmid': 9000, 'node': 'pve1'},
                                            lambda v: 'tb-%s-v%d' % (TEMPLATE, v))
    assert record['version'] == version
    journal.update_template_version(TEMPLATE, version, resource_id=vmid, location='pve1', provider='proxmox')
    journal.create_workspace(record['workspace'], status='bootstrapping', params={'build': {'version': version}})
    journal.switch_template(TEMPLATE, version, finish_build=True)
    ws = journal.get_workspace(record['workspace'])
    journal.update_workspace(ws['name'], ws['generation'], status='template')


def journal_with_two_versions(tmp_path, second_state):
    """v1 built (CT 100) and current; v2 (CT 101) in ``second_state``."""
    path = os.path.join(str(tmp_path), 'journal.sqlite')
    with Journal.open(path) as journal:
        built(journal, 1, 100)
        journal.begin_template_version(TEMPLATE, {'vmid': 9000, 'node': 'pve1'}, lambda v: 'tb-%s-v%d' % (TEMPLATE, v))
        if second_state != 'building':
            journal.update_template_version(TEMPLATE, 2, state=second_state, resource_id=101)
    return path


def point_at(path, version):
    """What a broken finalize or switch would leave: the pointer moved, whatever the version's state."""
    with Journal.open(path) as journal:
        with journal.transaction() as conn:
            conn.execute('UPDATE templates SET previous = current, current = ? WHERE name = ?', (version, TEMPLATE))


def test_a_sound_pointer_and_versions_pass(tmp_path):
    path = journal_with_two_versions(tmp_path, 'failed')
    with Journal.open(path) as journal:
        assert invariants.check_pointer(journal, TEMPLATE) == []
    found, leaks = invariants.check_build(JournalOnly(path), View({100: 'tb-fb-v1'}, {100}), TEMPLATE)
    assert found == {'pointer': [], 'versions': []} and leaks == {}


def test_the_pointer_invariant_catches_a_pointer_at_a_failed_version(tmp_path):
    path = journal_with_two_versions(tmp_path, 'failed')
    point_at(path, 2)
    with Journal.open(path) as journal:
        found = invariants.check_pointer(journal, TEMPLATE)
    assert found == ['template fb: current names v2, which is failed, not built']
    broken, dummy = invariants.check_build(JournalOnly(path), View({100: 'tb-fb-v1'}, {100}), TEMPLATE)
    assert broken['pointer'] == found


def test_the_pointer_invariant_catches_a_pointer_at_a_version_still_building(tmp_path):
    path = journal_with_two_versions(tmp_path, 'building')
    point_at(path, 2)
    with Journal.open(path) as journal:
        assert invariants.check_pointer(journal, TEMPLATE) == [
            'template fb: current names v2, which is building, not built']


def test_a_pointer_violation_after_any_run_fails_the_cell_even_if_it_converged_later(tmp_path):
    """The matrix checks the pointer after every run (killed ones too), and a cell that saw it wrong once is
    not ok, whatever the journal says when the cell is judged."""
    path = journal_with_two_versions(tmp_path, 'failed')
    point_at(path, 2)
    matrix = BuildMatrix(JournalOnly(path), template=TEMPLATE)
    cell = Cell('kill build: candidate template.finalize begin #1', 'kill', [])
    cell.converged = True
    cell.commands = ['ansible-playbook -i inventory.json ephemera.workspaces.template_build -e @vars.json']

    class Done:
        killed, ok = True, False

    class Site(JournalOnly):
        def working_on(self, cell):
            import contextlib
            return contextlib.nullcontext()

        def run(self, ops, kill=None):
            return Done()
    matrix.site = Site(path)
    matrix.run(cell, {'op': 'build'})
    assert cell.pointer_violations == ['template fb: current names v2, which is failed, not built']


def test_a_built_versions_record_that_is_not_a_templates_is_seen(tmp_path):
    """What a build killed after its pointer switch, and never finished, would leave: the record short of template,
    with the address it held while it was a candidate."""
    path = journal_with_two_versions(tmp_path, 'failed')
    with Journal.open(path) as journal:
        ws = journal.get_workspace('tb-fb-v1')
        journal.update_workspace('tb-fb-v1', ws['generation'], status='bootstrapping')
        assert journal.lease_address('disposable-workspaces', 'tb-fb-v1', ['127.0.9.10'])
    found, leaks = invariants.check_build(JournalOnly(path), View({100: 'tb-fb-v1'}, {100}), TEMPLATE)
    assert found['versions'] == ['fb v1 is built, but its record tb-fb-v1 is bootstrapping, not template',
                                 'fb v1 is built, but its record tb-fb-v1 still holds an address'] and leaks == {}


def test_a_failed_or_unfinished_versions_container_is_a_leak_and_a_built_one_must_be_a_template(tmp_path):
    path = journal_with_two_versions(tmp_path, 'failed')
    # CT 101 of the failed v2 is still there; CT 102 carries the marker of a version never recorded; the built
    # v1's CT 100 is a plain container.
    view = View({100: 'tb-fb-v1', 101: 'tb-fb-v2', 102: 'tb-fb-v7'}, set())
    found, leaks = invariants.check_build(JournalOnly(path), view, TEMPLATE)
    assert leaks == {101: 'tb-fb-v2: version 2 is failed, yet CT 101 is there',
                     102: 'tb-fb-v7: no version of template fb records it'}
    assert found['versions'] == ['fb v1: CT 100 is not a template']
    # The built version's container gone altogether.
    found, leaks = invariants.check_build(JournalOnly(path), View({}, set()), TEMPLATE)
    assert found['versions'] == ['fb v1: CT 100 is gone or not ours'] and leaks == {}


def test_a_builds_points_are_named_by_role_and_counted_per_role():
    trace = [('template:fb', 'template.provision begin'), ('fb', 'queue.claimed begin'),
             ('tb-fb-v3', 'template.provision begin'), ('tb-fb-v2', 'destroy.delete begin'),
             ('tb-fb-v3', 'template.provision begin'), ('other', 'create.clone begin')]
    assert build_points(trace, 'fb', 3) == [('template', 'template.provision begin', 1),
                                            ('queue', 'queue.claimed begin', 1),
                                            ('candidate', 'template.provision begin', 1),
                                            ('candidate', 'template.provision begin', 2)]
    # The next build's abort of v2: that candidate's lines only.
    assert build_points(trace, 'fb', 2, role='aborted') == [('aborted', 'destroy.delete begin', 1)]
