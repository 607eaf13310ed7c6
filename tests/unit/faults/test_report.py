"""The fault report's table and totals, the points of a trace, and schedules made from seeds alone."""

from tests.faults import report, schedules
from tests.faults.cells import Cell
from tests.faults.matrix import decisive, points_of


def cell(row, kind='kill', converged=True, leaks=(), foreign=(), reruns=1, violations=None):
    made = Cell(row, kind, ['w1'])
    made.converged, made.leaks, made.foreign, made.reruns = converged, list(leaks), list(foreign), reruns
    made.violations = violations or {}
    made.commands = ['ansible-playbook -i inventory.json ephemera.workspaces.create -e workspace=w1']
    return made


def test_the_last_line_counts_points_runs_convergence_leaks_and_foreign_containers():
    cells = [cell('kill create: a #1'), cell('kill create: a #1'), cell('kill create: b #1', converged=False),
             cell('lost response: clone', kind='lost', leaks=['CT 104: w1: no journal record']),
             cell('race: x', kind='race', foreign=['foreign CT 120 changed: memory']), cell('random', kind='seed')]
    lines = report.table(cells, uncovered=[('lost response: pool changes', 'no call of its own')])
    assert lines[-1] == 'faults: 4 points, 6 runs, 5 converged, 1 leaks, 1 foreign touched'
    assert any(line.startswith('lost response: pool changes') and 'not covered: no call of its own' in line
               for line in lines)
    row = [line for line in lines if line.startswith('kill create: a #1')][0].split()
    assert row[-6:] == ['2', '2', '0', '0', '1', '-']


def test_a_cell_with_a_broken_invariant_is_not_ok_even_when_it_converged():
    broken = cell('kill destroy: c #1', violations={'events': ['PUT ... was sent without a dispatched configure']})
    assert broken.converged and not broken.ok
    assert report.totals([broken])['failed'] == 1
    assert 'events: PUT ... was sent' in report.table([broken])[2]


def test_a_failing_seed_is_printed_with_its_replay_command():
    failing = cell('random schedules', kind='seed', converged=False)
    failing.seed = 4242
    failing.notes.append('s1 is booting after create and 2 runs')
    assert 'replay: python -m tests.faults replay --seed 4242' in report.table([failing])[2]


def test_points_are_counted_per_workspace_in_trace_order():
    trace = [('w1', 'create.request begin'), ('w2', 'create.request begin'), ('w1', 'queue.claimed begin'),
             ('w1', 'create.request begin')]
    assert points_of(trace, 'w1') == [('create.request begin', 1), ('queue.claimed begin', 1),
                                      ('create.request begin', 2)]


def test_a_schedule_is_made_from_its_seed_alone():
    create = [('c%d' % n, 1) for n in range(40)]
    destroy = [('d%d' % n, 1) for n in range(20)]
    assert schedules.generate(7, create, destroy) == schedules.generate(7, create, destroy)
    made = [schedules.generate(seed, create, destroy) for seed in range(1, 60)]
    assert len(set(repr(s) for s in made)) == len(made)
    kinds = set(f['kind'] for s in made for f in s['faults'])
    assert kinds == {'drop-response', 'delay', 'template-lock', 'ssh-refused', 'ssh-cut'}
    assert all(2 <= len(s['workspaces']) <= 3 for s in made)
    assert any(w['create_kill'] for s in made for w in s['workspaces'])
    assert any(w['reconcile_first'] for s in made for w in s['workspaces'])


def test_a_row_not_run_by_the_shipped_playbooks_fails():
    twin = cell('kill create: d #1')
    twin.commands = ['python -m tests.faults.driver plan.json result.json']
    nothing = cell('kill create: e #1')
    nothing.commands = []
    assert twin.converged and not twin.ok and not nothing.ok
    lines = report.table([twin, nothing])
    assert 'not run by the shipped playbooks' in lines[2] and 'no run' in lines[3]
    assert report.totals([twin, nothing])['failed'] == 2


def test_the_ci_chains_pass_over_a_steps_start_and_its_queue_record_only():
    points = [('create.vmid begin', 1), ('create.vmid journal queue step', 1), ('create.vmid journal status', 1),
              ('create.vmid journal candidate_vmid', 1), ('create.clone pve POST /nodes/*/lxc/*/clone', 1),
              ('create.clone ssh bootstrap', 1), ('queue.claimed journal queue enqueue', 1)]
    assert decisive(points) == [('create.vmid journal status', 1), ('create.vmid journal candidate_vmid', 1),
                                ('create.clone pve POST /nodes/*/lxc/*/clone', 1), ('create.clone ssh bootstrap', 1),
                                ('queue.claimed journal queue enqueue', 1)]
