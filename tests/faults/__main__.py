"""Crash-safety runs against a try-out cluster of their own (docs/faults.md).

    python -m tests.faults matrix [--size ci|full] [--json PATH]   kill and lost-response matrix, races, seeds
    python -m tests.faults soak [--schedules 500] [--first-seed 1001] [--json PATH]   random schedules only
    python -m tests.faults replay --seed N                          one random schedule again, exactly

Prints one line per run as it ends, then the table; exits 1 unless every run converged with no
leak, no foreign container touched and no invariant broken.
"""

import argparse
import json
import os
import shutil
import sys
import tempfile
import time

from tests.faults import report, schedules
from tests.faults.matrix import SIZES, Matrix
from tests.faults.site import FaultSite


def main(argv=None):
    parser = argparse.ArgumentParser(prog='python -m tests.faults', description=__doc__.split('\n', 1)[0])
    sub = parser.add_subparsers(dest='command', required=True)
    matrix = sub.add_parser('matrix', help='the kill and lost-response matrix, races and a fixed set of seeds')
    matrix.add_argument('--size', choices=sorted(SIZES), default='ci')
    soak = sub.add_parser('soak', help='many random schedules')
    soak.add_argument('--schedules', type=int, default=500)
    soak.add_argument('--first-seed', type=int, default=1001)
    replay = sub.add_parser('replay', help='one random schedule, by its seed')
    replay.add_argument('--seed', type=int, required=True)
    for each in (matrix, soak, replay):
        each.add_argument('--json', help='write the report as JSON here too')
        each.add_argument('--keep', action='store_true', help='keep the working directory (journal, traces, logs)')
    args = parser.parse_args(argv)

    workdir = tempfile.mkdtemp(prefix='ephemera-faults-')
    started = time.monotonic()
    site = FaultSite.start(workdir)
    try:
        runner = Matrix(site, size=getattr(args, 'size', 'ci'), log=lambda line: print(line, flush=True))
        if args.command == 'matrix':
            cells = runner.run()
        else:
            runner.prepare()
            seeds = range(args.first_seed, args.first_seed + args.schedules) if args.command == 'soak' else [args.seed]
            if args.command == 'replay':
                print('schedule: %s' % json.dumps(schedules.generate(args.seed, runner.create_points,
                                                                     runner.destroy_points)))
            runner.run_seeds(seeds)
            cells = runner.cells
    finally:
        site.stop()
        if not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)
        else:
            print('kept: %s' % workdir)
    uncovered = runner.uncovered if args.command == 'matrix' else []
    lines = report.table(cells, uncovered)
    print('\n'.join(lines))
    failing = [c.seed for c in cells if c.seed is not None and not c.ok]
    if failing:
        print('failing seeds: %s (python -m tests.faults replay --seed N)' % ', '.join(map(str, failing)))
    total = report.totals(cells, uncovered)
    print('took %.0f s' % (time.monotonic() - started))
    if args.json:
        report.write_json(args.json, cells, uncovered, {'command': args.command, 'seconds': time.monotonic() - started,
                                                       'failing_seeds': failing})
    ok = total['converged'] == total['runs'] and not total['leaks'] and not total['foreign'] and not total['failed']
    return 0 if ok else 1


if __name__ == '__main__':
    sys.exit(main())
