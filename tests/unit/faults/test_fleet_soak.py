"""The fleet soak's dealing and report (tests/faults/fleet.py): every place gets its seeds, a seed always lands on
the same place, a cloud's schedule is the cluster's without the cluster's faults, and the last line is exact."""

from tests.faults import fleet, report, schedules
from tests.faults.cells import Cell

CREATE = [('create.clone journal clone', 1), ('create.start pve start', 1), ('create.ssh step', 1)]
DESTROY = [('destroy.delete journal delete', 1), ('destroy.delete pve delete', 1)]


def test_ten_consecutive_seeds_cover_every_provider_on_both_backends():
    places = {fleet.place_of(seed) for seed in range(1001, 1011)}
    assert places == {(p, b) for p in ('proxmox', 'aws', 'hetzner', 'gcp', 'azure') for b in ('sqlite', 'postgresql')}
    assert fleet.place_of(1003) == fleet.place_of(1013) == ('aws', 'postgresql')


def test_a_cloud_schedule_is_the_cluster_schedule_of_its_seed_without_the_cluster_faults():
    for seed in range(1, 60):
        full = schedules.generate(seed, CREATE, DESTROY)
        cloud = schedules.generate(seed, CREATE, DESTROY, cluster_faults=False)
        assert cloud['workspaces'] == full['workspaces'] and cloud['faults'] == []
    # The cluster's schedules are as they were dealt before (a seed that once found a bug finds it again).
    assert any(schedules.generate(seed, CREATE, DESTROY)['faults'] for seed in range(1, 20))


def test_the_last_line_and_the_replay_of_a_failing_seed():
    ok = Cell(fleet.row_of(('gcp', 'postgresql')), 'seed', ['s1'])
    ok.converged, ok.seed = True, 1007
    ok.commands = ['ansible-playbook -i x ephemera.workspaces.create']
    bad = Cell(fleet.row_of(('azure', 'sqlite')), 'seed', ['s2'])
    bad.seed, bad.leaks = 1008, ['vm-1 live with our marker: s2']
    assert fleet.summary_line([ok, bad]) == ('soak: 2 schedules across proxmox, aws, hetzner, gcp, azure '
                                             '(sqlite, postgresql): 1 converged, 1 leaks, 0 foreign touched')
    assert report.replay_command(bad) == 'python -m tests.faults soak-fleet --schedules 1 --first-seed 1008'
    lines = report.table([ok, bad])
    assert any(line.startswith('random schedules: azure (sqlite)') and 'soak-fleet --schedules 1 --first-seed 1008'
               in line for line in lines)
    main_seed = Cell('random schedules', 'seed', ['s3'])
    main_seed.seed = 4
    assert report.replay_command(main_seed) == 'python -m tests.faults replay --seed 4'


def test_the_regression_seeds_run_on_azure_on_both_backends_and_expect_what_the_matrix_expects():
    from tests.faults.azure import AzureMatrix
    assert {fleet.place_of(seed) for seed in fleet.REGRESSION_SEEDS} == {('azure', 'sqlite'), ('azure', 'postgresql')}
    azure = object.__new__(AzureMatrix)
    # A create killed right after a member's PUT was recorded ends failed (the PUT is never sent again); any other
    # kill, or none, converges to ready, and every destroy to destroyed.
    for member in ('pip', 'nic', 'vm'):
        assert azure.kill_ends('create', 'create.clone journal azure %s dispatched' % member) == 'failed'
        assert azure.kill_ends('destroy', 'destroy.delete journal azure %s deleting' % member) == 'destroyed'
    assert azure.kill_ends('create', 'create.clone journal azure pip id') == 'ready'
    assert azure.kill_ends('create', None) == 'ready'
