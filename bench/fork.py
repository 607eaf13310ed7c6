"""What does a fork cost next to cold creates? One ready workspace forked into 4 children, against 4 workspaces
created from the template, on the try-out cluster (tests/localpve, a process of its own, as `make cluster-up`).

    .venv/bin/python bench/fork.py [--children 4] [--time-scale 0.1]

The fork is playbooks/fork.yml (queue, quiesce, snapshot, the children cloned from it side by side, each
reset and briefed, the snapshot removed); the cold creates are playbooks/create.yml in one run with one host per
workspace (--forks N, in parallel). Printed: each phase of the fork (from the parent's journal events), then one
line:

    fork: 1 ready workspace into 4 children A s (each briefed), 4 cold creates B s, ratio R

R is A / B. No figure is asserted.
"""

import argparse
import os
import shutil
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[0] = ROOT

from tests.integration.playbooks import Cluster, Site, make_repo  # noqa: E402 pylint: disable=wrong-import-position
from ansible_collections.ephemera.workspaces.plugins.module_utils.core.journal import epoch  # noqa: E402 pylint: disable=wrong-import-position

PHASES = (('fork_started', 'record and quiesce'), ('fork_snapshot', 'snapshot'), ('fork_copied', 'clone and reset'),
          ('fork_adopted', 'adopt'), ('fork_done', 'brief, ready, remove the snapshot'))


def phases(site, parent, since):
    """(label, seconds) of each phase of the parent's last fork, from its journal events."""
    with site.journal() as journal:
        events = journal.events(parent)
    stamps = {}
    for event in events:
        at = event['at'] if isinstance(event['at'], (int, float)) else epoch(event['at'])
        if at >= since and event['action'] in dict(PHASES):
            stamps.setdefault(event['action'], at)
    out, last = [], since
    for action, label in PHASES:
        if action in stamps:
            out.append((label, stamps[action] - last))
            last = stamps[action]
    return out


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n', 1)[0])
    parser.add_argument('--children', type=int, default=4)
    parser.add_argument('--time-scale', type=float, default=0.1,
                        help='PVE seconds per second, as the try-out cluster (make cluster-up) runs by default')
    args = parser.parse_args(argv)
    workdir = tempfile.mkdtemp(prefix='ephemera-bench-fork-')
    cluster = Cluster.start(os.path.join(workdir, 'cluster'), time_scale=args.time_scale)
    try:
        site = Site(cluster, os.path.join(workdir, 'journal.sqlite'))
        repo = make_repo(os.path.join(workdir, 'repo'))
        made = site.create('bench-parent', repo)
        if not made.ok:
            raise SystemExit('the parent could not be made: %s' % made.output[-2000:])
        started = time.time()
        began = time.monotonic()
        forked = site.playbook('fork.yml', workspace='bench-parent', count=args.children)
        fork_seconds = time.monotonic() - began
        if not forked.ok:
            raise SystemExit('the fork failed: %s' % forked.output[-2000:])
        for label, seconds in phases(site, 'bench-parent', started):
            print('  fork %-34s %6.1f s' % (label, seconds))
        names = ['bench-cold-%d' % i for i in range(1, args.children + 1)]
        began = time.monotonic()
        cold = site.create_many(names, repo, forks=args.children)
        cold_seconds = time.monotonic() - began
        if not cold.ok:
            raise SystemExit('the cold creates failed: %s' % cold.output[-2000:])
        print('fork: 1 ready workspace into %d children %.1f s (each briefed), %d cold creates %.1f s, ratio %.2f'
              % (args.children, fork_seconds, args.children, cold_seconds, fork_seconds / cold_seconds))
    finally:
        cluster.stop()
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == '__main__':
    main()
