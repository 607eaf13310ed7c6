"""What Ansible's internal_poll_interval costs a create: the same create at Ansible's default (1 ms) and at the 10 ms
the tests and the fault matrix use (tests/ansible_run.py, POLL_INTERVAL), side by side on one try-out cluster.

    .venv/bin/python bench/poll.py [--repeat 5] [--time-scale 0]

Each round creates one workspace at each interval, in turn (ansible.cfg files of the benchmark's own, given by
ANSIBLE_CONFIG). Printed: every create's CPU seconds (ansible-playbook and everything it started: its workers, the
modules they ran) and wall seconds, then the medians and their ratios. The create playbook runs with the free
strategy, which looks up each host's next task every time it polls its workers. No figure is asserted.
"""

import argparse
import os
import resource
import statistics
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# The repository root first on sys.path, so that tests.* imports as a package.
sys.path[0] = ROOT

from bench.create import make_repo, run_create, teardown  # noqa: E402 pylint: disable=wrong-import-position
from tests.ansible_run import POLL_INTERVAL  # noqa: E402 pylint: disable=wrong-import-position
from tests.localpve import LocalCluster  # noqa: E402 pylint: disable=wrong-import-position

DEFAULT = 0.001


def children_cpu():
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    return used.ru_utime + used.ru_stime


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n', maxsplit=1)[0])
    parser.add_argument('--repeat', type=int, default=5, help='creates at each interval')
    parser.add_argument('--time-scale', type=float, default=0, help="the try-out cluster's time scale")
    args = parser.parse_args()
    workdir = tempfile.mkdtemp(prefix='ephemera-bench-poll-')
    configs = {}
    for interval in (DEFAULT, POLL_INTERVAL):
        configs[interval] = os.path.join(workdir, 'poll-%s.cfg' % interval)
        with open(configs[interval], 'w') as out:
            out.write('[defaults]\ninternal_poll_interval = %s\n' % interval)
    cluster = LocalCluster.start(os.path.join(workdir, 'cluster'), time_scale=args.time_scale)
    figures = {interval: {'cpu': [], 'wall': []} for interval in configs}
    try:
        repo = make_repo(workdir)
        journal = os.path.join(workdir, 'journal.sqlite')
        number = 0
        for _round in range(args.repeat):
            for interval, config in configs.items():
                os.environ['ANSIBLE_CONFIG'] = config
                before = children_cpu()
                wall, _started, _data = run_create(workdir, cluster.info['state_dir'], journal, repo,
                                                   ['poll-%d' % number], 1)
                number += 1
                figures[interval]['cpu'].append(children_cpu() - before)
                figures[interval]['wall'].append(wall)
                print('internal_poll_interval %s: create %.2f CPU-s, %.2f s' % (
                    interval, figures[interval]['cpu'][-1], wall), flush=True)
    finally:
        os.environ.pop('ANSIBLE_CONFIG', None)
        teardown(cluster, workdir)
    cpu = {interval: statistics.median(f['cpu']) for interval, f in figures.items()}
    wall = {interval: statistics.median(f['wall']) for interval, f in figures.items()}
    print('poll: a create at %g s %.2f CPU-s (%.2f s), at %g s %.2f CPU-s (%.2f s); CPU ratio %.2f, wall ratio %.2f '
          '(medians of %d, time scale %g)' % (DEFAULT, cpu[DEFAULT], wall[DEFAULT], POLL_INTERVAL, cpu[POLL_INTERVAL],
                                              wall[POLL_INTERVAL], cpu[POLL_INTERVAL] / cpu[DEFAULT],
                                              wall[POLL_INTERVAL] / wall[DEFAULT], args.repeat, args.time_scale))


if __name__ == '__main__':
    main()
