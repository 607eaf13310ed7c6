"""Startup figures of the local try-out cluster (tests/localpve): `up`, and one guest's sshd.

    .venv/bin/python bench/cluster_startup.py [--runs N]

Prints the median (and range) over N runs of:
- `python -m tests.localpve up` until it returns, for a new state directory (keys and certificates are
  made) and for an existing one (a restart), each followed by `down`;
- one guest's sshd: from spawning it to listening (the harness's own figure), and from the API's start
  request to a logged-in SSH session (start task, address from /interfaces, paramiko login).
"""

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# The repository root first on sys.path, so that bench.* and tests.* import as packages.
sys.path[0] = ROOT

from tests.localpve import LocalCluster, guest_address, proxmox, ssh, wait_task  # noqa: E402 pylint: disable=wrong-import-position
from tests.localpve.cluster import pick_host  # noqa: E402 pylint: disable=wrong-import-position


def cli(state, *args):
    subprocess.run([sys.executable, '-m', 'tests.localpve'] + list(args) + ['--state-dir', state], cwd=ROOT,
                   check=True, stdout=subprocess.DEVNULL)


def timed_up(state, host):
    started = time.monotonic()
    cli(state, 'up', '--host', host, '--api-port', '0', '--proxy-port', '0', '--time-scale', '0')
    elapsed = time.monotonic() - started
    cli(state, 'down')
    return elapsed


def bench_up(runs):
    fresh, again = [], []
    for dummy in range(runs):
        state = tempfile.mkdtemp(prefix='bench-localpve-')
        host = pick_host()
        try:
            fresh.append(timed_up(state, host))
            again.append(timed_up(state, host))
        finally:
            shutil.rmtree(state, ignore_errors=True)
    return fresh, again


def bench_guest(runs):
    state = tempfile.mkdtemp(prefix='bench-localpve-')
    cluster = LocalCluster.start(state)
    spawn, login = [], []
    try:
        info = cluster.info
        api = proxmox(info)
        node = info['template_node']
        vmid = int(api.cluster.nextid.get())
        upid = api.nodes(node).lxc(info['template_vmid']).clone.post(newid=vmid, hostname='bench', full=0)
        wait_task(api, upid)
        for dummy in range(runs):
            started = time.monotonic()
            wait_task(api, api.nodes(node).lxc(vmid).status.start.post())
            client = ssh(info, guest_address(api, node, vmid))
            login.append(time.monotonic() - started)
            client.close()
            spawn.append([g for g in cluster.status()['guests'] if g['vmid'] == vmid][0]['startup_secs'])
            wait_task(api, api.nodes(node).lxc(vmid).status.stop.post())
    finally:
        cluster.stop()
        shutil.rmtree(state, ignore_errors=True)
    return spawn, login


def line(what, values):
    return '{0:<48} median {1:7.3f}s   min {2:7.3f}s   max {3:7.3f}s   (n={4})'.format(
        what, statistics.median(values), min(values), max(values), len(values))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--runs', type=int, default=5)
    args = parser.parse_args()
    fresh, again = bench_up(args.runs)
    spawn, login = bench_guest(args.runs * 2)
    print(line('up, new state directory (until it returns)', fresh))
    print(line('up, existing state directory (a restart)', again))
    print(line('guest sshd: spawn -> listening', spawn))
    print(line('guest: start request -> SSH session logged in', login))


if __name__ == '__main__':
    main()
