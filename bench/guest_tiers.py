"""The try-out cluster's two guest tiers side by side: host (the default) and debian (a Debian userland each).

    .venv/bin/python bench/guest_tiers.py [--runs N] [--debootstrap]

For each tier, in a cluster in this process at time scale 0 (so a task takes as long as the harness's own work),
the median (and range) over N runs of:
- the cluster's start (the debian base root already built);
- a linked clone of the template (the clone request until its task reads OK: the guest's files are made);
- a full clone of the template (the same, with full=1);
- a start: the start request until an SSH session is logged in, and the harness's own figures for it
  (namespaces up, sshd spawned until listening).
--debootstrap also builds a base root from scratch in a temporary cache (one run) and times it: that is what the
first debian-tier test on a new machine pays once.
The debian tier needs root.
"""

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# The repository root first on sys.path, so that bench.* and tests.* import as packages.
sys.path[0] = ROOT

from tests.localpve import LocalCluster, guest_address, proxmox, ssh, wait_task  # noqa: E402 pylint: disable=wrong-import-position
from tests.localpve import debian  # noqa: E402 pylint: disable=wrong-import-position


def timed(fn):
    started = time.monotonic()
    result = fn()
    return time.monotonic() - started, result


def bench_tier(tier, runs):
    figures = {key: [] for key in ('up', 'linked', 'full', 'login', 'boot', 'sshd')}
    for dummy in range(runs):
        state = tempfile.mkdtemp(prefix='bench-tiers-')
        try:
            seconds, cluster = timed(lambda: LocalCluster.start(state, guests=tier))
            figures['up'].append(seconds)
            try:
                info = cluster.info
                api = proxmox(info, timeout=300)
                node, template = info['template_node'], info['template_vmid']
                for kind, full in (('linked', 0), ('full', 1)):
                    vmid = int(api.cluster.nextid.get())
                    seconds, status = timed(lambda: wait_task(api, api.nodes(node).lxc(template).clone.post(
                        newid=vmid, hostname='bench-' + kind, full=full), timeout=300))
                    assert status['exitstatus'] == 'OK', status
                    figures[kind].append(seconds)
                started = time.monotonic()
                wait_task(api, api.nodes(node).lxc(vmid).status.start.post())
                client = ssh(info, guest_address(api, node, vmid), timeout=5)
                figures['login'].append(time.monotonic() - started)
                client.close()
                guest = [g for g in cluster.status()['guests'] if g['vmid'] == vmid][0]
                figures['sshd'].append(guest['startup_secs'] - (guest.get('boot_secs') or 0))
                if guest.get('boot_secs') is not None:
                    figures['boot'].append(guest['boot_secs'])
            finally:
                cluster.stop()
        finally:
            shutil.rmtree(state, ignore_errors=True)
    return figures


def bench_debootstrap():
    cache = tempfile.mkdtemp(prefix='bench-debootstrap-')
    previous = os.environ.get(debian.CACHE_ENV)
    os.environ[debian.CACHE_ENV] = cache
    try:
        return timed(debian.ensure_base)[0]
    finally:
        if previous is None:
            os.environ.pop(debian.CACHE_ENV)
        else:
            os.environ[debian.CACHE_ENV] = previous
        shutil.rmtree(cache, ignore_errors=True)


def line(what, values):
    if not values:
        return '{0:<52} -'.format(what)
    return '{0:<52} median {1:7.3f}s   min {2:7.3f}s   max {3:7.3f}s   (n={4})'.format(
        what, statistics.median(values), min(values), max(values), len(values))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--runs', type=int, default=5)
    parser.add_argument('--debootstrap', action='store_true', help='also time a base root built from scratch')
    args = parser.parse_args()
    if args.debootstrap:
        print(line('debian base root: debootstrap and trim (once)', [bench_debootstrap()]))
    debian.ensure_base(announce=print)
    for tier in ('host', 'debian'):
        figures = bench_tier(tier, args.runs)
        print(line('{0}: cluster start'.format(tier), figures['up']))
        print(line('{0}: linked clone, request -> task OK'.format(tier), figures['linked']))
        print(line('{0}: full clone, request -> task OK'.format(tier), figures['full']))
        print(line('{0}: start request -> SSH session logged in'.format(tier), figures['login']))
        print(line('{0}:   of which namespaces up'.format(tier), figures['boot']))
        print(line('{0}:   of which sshd spawn -> listening'.format(tier), figures['sshd']))


if __name__ == '__main__':
    main()
