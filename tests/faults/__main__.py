"""Crash-safety runs against a try-out cluster of their own (docs/internals/faults.md).

    python -m tests.faults matrix [--size ci|full] [--part PART] [--json PATH]
                                    kill and lost-response matrix, races, seeds (main); the template build's rows on
                                    a debian-tier site of their own (builds); the fork's rows (fork,
                                    tests/faults/fork.py and awsfork.py); the AWS rows on a try-out cloud of their
                                    own (aws); create and destroy with the journal on PostgreSQL (pg,
                                    tests/faults/pgmatrix.py); the warm pools' fill and claim (pools,
                                    tests/faults/pools.py); all: those side by side. The Hetzner, Compute Engine
                                    and Azure rows, each on the fake of a try-out cloud of its own (hetzner, gcp,
                                    azure: tests/faults/hetzner.py, gcp.py, azure.py), the AWS warm pools' fill
                                    and claim (aws-pools, tests/faults/awspools.py) and the same on the Hetzner,
                                    Compute Engine and Azure fakes (hetzner-pools, gcp-pools, azure-pools,
                                    tests/faults/cloudpools.py); clouds: those seven side by side
    python -m tests.faults soak [--schedules 500] [--first-seed 1001] [--jobs N] [--json PATH]   schedules only
    python -m tests.faults soak-fleet [--schedules 500] [--first-seed 1001 | --seeds N,M] [--jobs 2] [--json PATH]
                                    schedules on every provider, journal in SQLite and in PostgreSQL
                                    (tests/faults/fleet.py); seed N again: --schedules 1 --first-seed N
    python -m tests.faults replay --seed N                          one random schedule again, exactly

Prints one line per run as it ends, then the table; exits 1 unless every run converged with no
leak, no foreign container touched and no invariant broken.
"""

import argparse
import concurrent.futures
import functools
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

from tests.ansible_run import harness_config
from tests.faults import report, schedules
from tests.faults.builds import BuildMatrix
from tests.faults.fleet import REGRESSION_SEEDS as FLEET_REGRESSION_SEEDS
from tests.faults.matrix import SIZES, Matrix
from tests.faults.site import FaultSite


def main(argv=None):
    parser = argparse.ArgumentParser(prog='python -m tests.faults', description=__doc__.split('\n', 1)[0])
    sub = parser.add_subparsers(dest='command', required=True)
    matrix = sub.add_parser('matrix', help='the kill and lost-response matrix, races and a fixed set of seeds')
    matrix.add_argument('--size', choices=sorted(SIZES), default='ci')
    matrix.add_argument('--part', choices=sorted(set(GROUPS) | set(PARTS) | set(['main'])), default='all',
                        help='main: create, destroy, expiry, races and seeds; builds: the template build\'s rows, on '
                             'a debian-tier site of their own; aws: the AWS rows, on a try-out cloud of their own; '
                             'pg: create and destroy with the journal on PostgreSQL; fork: the fork\'s kill points and '
                             'lost answers, on Proxmox VE and on AWS; pools: the warm pools\' fill and claim; all '
                             '(the default): those, side '
                             'by side. hetzner, gcp, azure: the Hetzner, Compute Engine and Azure rows, each on the '
                             'fake of a try-out cloud of its own; aws-pools, hetzner-pools, gcp-pools, azure-pools: '
                             'the AWS, Hetzner, Compute Engine and Azure warm pools\' fill and claim; clouds: those '
                             'seven, side by side. test: all but builds and aws (make test); long: builds, aws and '
                             'clouds (make test-long)')
    soak = sub.add_parser('soak', help='many random schedules')
    soak.add_argument('--schedules', type=int, default=500)
    soak.add_argument('--first-seed', type=int, default=1001)
    soak.add_argument('--jobs', type=int, default=1,
                      help='schedules run by this many processes, each with its own cluster, seeds dealt out in turn')
    fleet = sub.add_parser('soak-fleet', help='random schedules on every provider and both journal backends '
                                              '(tests/faults/fleet.py)')
    fleet.add_argument('--schedules', type=int, default=500)
    fleet.add_argument('--first-seed', type=int, default=1001)
    fleet.add_argument('--jobs', type=int, default=2, help='places (a provider and a backend) run side by side')
    fleet.add_argument('--seeds', type=lambda text: [int(s) for s in text.split(',') if s],
                       help='these seeds (comma-separated) instead of --schedules from --first-seed, e.g. the '
                            'regression seeds: ' + ','.join(str(s) for s in FLEET_REGRESSION_SEEDS))
    replay = sub.add_parser('replay', help='one random schedule, by its seed')
    replay.add_argument('--seed', type=int, required=True)
    part = sub.add_parser('soak-part', help=argparse.SUPPRESS)
    part.add_argument('--seeds', type=lambda text: [int(s) for s in text.split(',') if s], required=True)
    for each in (matrix, soak, fleet, replay, part):
        each.add_argument('--json', help='write the report as JSON here too')
        each.add_argument('--keep', action='store_true', help='keep the working directory (journal, traces, logs)')
    args = parser.parse_args(argv)
    # The playbooks poll their workers every 10 ms (tests/ansible_run.py, POLL_INTERVAL), as in the test sessions.
    harness_config()

    if args.command == 'soak' and args.jobs > 1:
        return soak_in_parallel(args)
    started = time.monotonic()
    if args.command == 'soak-fleet':
        from tests.faults.fleet import soak_fleet, summary_line
        cells = soak_fleet(args.schedules, args.first_seed, args.jobs, args.keep,
                           log=lambda line: print(line, flush=True), seeds=args.seeds)
        code = finish(args, cells, [], started)
        print(summary_line(cells))
        return code
    part = getattr(args, 'part', 'main')
    cells, uncovered = [], []
    # Each part runs on a site of its own (a cluster, a try-out cloud, a database server), beside the others: much of
    # every part is waiting.
    others = []
    if args.command == 'matrix':
        for name in GROUPS.get(part, (part,)):
            if name in PARTS:
                pool = concurrent.futures.ThreadPoolExecutor(max_workers=1)
                others.append(pool.submit(PARTS[name], args))
                pool.shutdown(wait=False)
    if args.command != 'matrix' or 'main' in GROUPS.get(part, (part,)):
        cells, uncovered = run_main(args)
    for other in others:
        other_cells, other_uncovered = other.result()
        cells += other_cells
        uncovered += other_uncovered
    return finish(args, cells, uncovered, started)


def run_main(args):
    """The create, destroy and expiry rows, races and seeds (or the soak's and replay's seeds), on a host-tier site."""
    workdir = tempfile.mkdtemp(prefix='ephemera-faults-')
    site = FaultSite.start(workdir)
    try:
        runner = Matrix(site, size=getattr(args, 'size', 'ci'), log=lambda line: print(line, flush=True))
        if args.command == 'matrix':
            cells = runner.run()
        else:
            runner.prepare()
            if args.command == 'replay':
                print('schedule: %s' % json.dumps(schedules.generate(args.seed, runner.create_points,
                                                                     runner.destroy_points)))
                seeds = [args.seed]
            elif args.command == 'soak-part':
                seeds = args.seeds
            else:
                seeds = range(args.first_seed, args.first_seed + args.schedules)
            runner.run_seeds(seeds)
            cells = runner.cells
    finally:
        site.stop()
        if not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)
        else:
            print('kept: %s' % workdir)
    uncovered = runner.uncovered if args.command == 'matrix' else []
    return cells, uncovered


def run_builds(args):
    """The template build's rows on a debian-tier site of its own (tests/faults/builds.py)."""
    if os.geteuid() != 0:
        return [], [('kill build, lost response: build', 'the debian guest tier that builds need runs as root only')]
    started = time.monotonic()
    workdir = tempfile.mkdtemp(prefix='ephemera-faults-builds-')
    site = FaultSite.start(workdir, guests='debian')
    try:
        runner = BuildMatrix(site, size=args.size, log=lambda line: print(line, flush=True))
        cells = runner.run_all()
    finally:
        site.stop()
        if not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)
        else:
            print('kept: %s' % workdir)
    print('builds: %d points, %d runs in %.0f s' % (len(runner.points), len(cells), time.monotonic() - started),
          flush=True)
    return cells, []


def run_cloud(args, part):
    """A cloud part's rows on a try-out cloud of its own (tests/faults/cloud.py; the adapters aws.py, hetzner.py,
    gcp.py, azure.py)."""
    import importlib
    from tests.faults.cloud import run_part
    module = importlib.import_module('tests.faults.' + part)
    name = {'aws': 'Aws', 'hetzner': 'Hetzner', 'gcp': 'Gcp', 'azure': 'Azure'}[part]
    return run_part(getattr(module, name + 'Site'), getattr(module, name + 'Matrix'), args.size, args.keep,
                    log=lambda line: print(line, flush=True))


def run_fork(args):
    """The fork's kill points and lost answers on a cluster and a try-out cloud of their own (tests/faults/fork.py,
    awsfork.py)."""
    from tests.faults.fork import run_fork_part
    return run_fork_part(args.size, args.keep, log=lambda line: print(line, flush=True))


def run_pools(args):
    """The warm pools' fill and claim on a cluster of their own (tests/faults/pools.py)."""
    from tests.faults.pools import run_pools_part
    return run_pools_part(args.size, args.keep, log=lambda line: print(line, flush=True))


def run_aws_pools(args):
    """The AWS warm pools' fill and claim on a try-out cloud of their own (tests/faults/awspools.py)."""
    from tests.faults.awspools import run_aws_pools_part
    return run_aws_pools_part(args.size, args.keep, log=lambda line: print(line, flush=True))


def run_cloud_pools(args, part):
    """The Hetzner, Compute Engine or Azure warm pools' fill and claim on a try-out cloud of their own
    (tests/faults/cloudpools.py)."""
    from tests.faults.cloudpools import run_cloud_pools_part
    return run_cloud_pools_part(part, args.size, args.keep, log=lambda line: print(line, flush=True))


def run_pg(args):
    """Create and destroy with the journal on PostgreSQL (tests/faults/pgmatrix.py)."""
    from tests.faults.pgmatrix import run_pg as run_rows
    return run_rows(args.size, args.keep, log=lambda line: print(line, flush=True))


PARTS = {'builds': run_builds, 'pg': run_pg, 'fork': run_fork, 'pools': run_pools, 'aws-pools': run_aws_pools}
PARTS.update((name, functools.partial(run_cloud, part=name)) for name in ('aws', 'hetzner', 'gcp', 'azure'))
PARTS.update((name, functools.partial(run_cloud_pools, part=name))
             for name in ('hetzner-pools', 'gcp-pools', 'azure-pools'))
# all: the Proxmox VE and AWS rows (the main part in this process); clouds: the other providers' rows and the clouds'
# warm pools'. make test runs `test` at the ci size, and make test-long `long` (the template build's rows and every
# cloud's): make test keeps to its 30 minutes, and CI runs both.
CLOUDS = ('hetzner', 'gcp', 'azure', 'aws-pools', 'hetzner-pools', 'gcp-pools', 'azure-pools')
GROUPS = {'all': ('main', 'builds', 'aws', 'pg', 'fork', 'pools'), 'clouds': CLOUDS,
          'test': ('main', 'pg', 'fork', 'pools'), 'long': ('builds', 'aws') + CLOUDS}


def finish(args, cells, uncovered, started):
    lines = report.table(cells, uncovered)
    print('\n'.join(lines))
    failing = [c.seed for c in cells if c.seed is not None and not c.ok]
    for cell in [c for c in cells if c.seed is not None and not c.ok]:
        print('failing seed %d: %s' % (cell.seed, report.replay_command(cell)))
    total = report.totals(cells, uncovered)
    print('took %.0f s' % (time.monotonic() - started))
    if args.json:
        extra = {'command': args.command, 'seconds': time.monotonic() - started, 'failing_seeds': failing}
        report.write_json(args.json, cells, uncovered, extra)
    ok = total['converged'] == total['runs'] and not total['leaks'] and not total['foreign'] and not total['failed']
    return 0 if ok else 1


def soak_in_parallel(args):
    """``--jobs`` soak processes side by side, seeds dealt out in turn; one table over all of them."""
    started = time.monotonic()
    seeds = list(range(args.first_seed, args.first_seed + args.schedules))
    workdir = tempfile.mkdtemp(prefix='ephemera-soak-')
    procs = []
    for job in range(args.jobs):
        part = os.path.join(workdir, 'part-%d.json' % job)
        mine = ','.join(str(seed) for seed in seeds[job::args.jobs])
        cmd = [sys.executable, '-m', 'tests.faults', 'soak-part', '--seeds', mine, '--json', part]
        procs.append((part, subprocess.Popen(cmd, stdout=open(os.path.join(workdir, 'part-%d.log' % job), 'w'),
                                             stderr=subprocess.STDOUT)))
    cells = []
    for part, proc in procs:
        proc.wait()
        if os.path.exists(part):
            with open(part) as src:
                cells.extend(report.cell_from_dict(c) for c in json.load(src)['cells'] if c['kind'] == 'seed')
        else:
            print('a soak process ended with status %s and no report (logs in %s)' % (proc.returncode, workdir))
            args.keep = True
    if not args.keep:
        shutil.rmtree(workdir, ignore_errors=True)
    cells.sort(key=lambda c: c.seed)
    return finish(args, cells, [], started)


if __name__ == '__main__':
    sys.exit(main())
