"""Time and API requests of `ansible-inventory --list`: ephemera.workspaces.workspaces against community.proxmox.proxmox.

One fakepve, served in this process over HTTPS, holds the cluster: N containers spread over 8 nodes, half of
them in the pool disposable-workspaces, and a journal with one record per pool member (a few of them without a
container, a few pool members without a record, so that every path of the plugin runs). Both plugins list the
pool's guests: ours from the journal plus one /cluster/resources read; community.proxmox by walking every node,
guest and pool, with and without want_facts (per-guest status, config, snapshots and interfaces). Requests are
counted at the server. Each run gets --timeout seconds (default 600); a run still going then is stopped and
reported with how far it got.

    .venv/bin/python bench/inventory.py [--sizes 100,1000,10000] [--timeout 600]

The last line is the 10,000-guest (largest size) summary that `make bench-inventory` ends with.
"""

import argparse
import os
import re
import shutil
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
# The repository root first on sys.path, so that bench.* and tests.* import as packages; the collection
# itself is importable through the venv's link.
sys.path[0] = os.path.dirname(HERE)

from fakepve.certs import make_cert
from fakepve.server import FakePve

from bench.fakepve_site import Server, index_guests
from tests import ansible_run

from ansible_collections.ephemera.workspaces.plugins.module_utils.core import ownership
from ansible_collections.ephemera.workspaces.plugins.module_utils.flows.create import STEPS
from ansible_collections.ephemera.workspaces.plugins.module_utils.core.journal import Journal

POOL = 'disposable-workspaces'
NODES = 8
# Pool members get ids from POOL_BASE up, the other guests from OTHER_BASE up: community.proxmox selects the
# pool's guests with a filter on that range, because it has no way to ask for one pool's guests.
POOL_BASE = 100000
OTHER_BASE = 200000
USER, PASSWORD = 'root@pam', 'secret'
GUEST_PATH = re.compile(r'/nodes/[^/]+/(?:lxc|qemu)/(\d+)/')


def layout(size):
    """(pool member ids, other ids, journal plan): plan maps a workspace name to (status, vmid or None)."""
    members = [POOL_BASE + i for i in range(size // 2)]
    others = [OTHER_BASE + i for i in range(size - len(members))]
    strays = max(1, len(members) // 500)  # pool members the journal does not know
    plan = {}
    for i, vmid in enumerate(members[:len(members) - strays]):
        cycle = i % 100
        status = 'ready' if cycle < 90 else 'failed' if cycle < 94 else 'booting' if cycle < 97 else 'destroying'
        plan['ws-%05d' % i] = (status, vmid)
    for i in range(strays):
        plan['ws-lost-%03d' % i] = ('failed', None)  # failed at the clone step: no container
    return members, others, plan


def address_of(vmid):
    n = vmid % 65536
    return '127.%d.%d.%d' % (1 + vmid // 65536 % 200, n // 256, n % 256 or 1)


def build(size, workdir):
    """A started fake with `size` containers, and the journal (path) that knows the pool's."""
    cert, key = make_cert(workdir, hosts=('127.0.0.1',))[:2]
    pve = FakePve(user=USER, password=PASSWORD, host='127.0.0.1', port=0)
    pve.max_requests = 10 ** 8
    by_id = index_guests(pve)
    members, others, plan = layout(size)
    journal_path = os.path.join(workdir, 'journal.sqlite')
    secret = ownership.load_secret(journal_path)
    status_of = {vmid: (name, status) for name, (status, vmid) in plan.items() if vmid is not None}
    with Journal.open(journal_path) as journal:
        controller = ownership.controller_id(secret)
        for name, (status, vmid) in sorted(plan.items()):
            failed = status == 'failed'
            progress = {step: '2026-01-01T00:00:00Z' for step in STEPS[:{'ready': 13, 'booting': 6,
                                                                         'destroying': 13}.get(status, 2)]}
            journal.create_workspace(
                name, status=status, activity='idle' if status == 'ready' else 'unknown', vmid=vmid,
                node='pve%d' % (1 + (vmid or 0) % NODES), address=address_of(vmid) if status == 'ready' else None,
                repo='https://git.example.com/team/app.git', ref='main', purpose='bench workspace %s' % name,
                failure={'step': 'clone' if vmid is None else 'ssh', 'message': 'bench failure'} if failed else None,
                params={'pool': POOL, 'agent_user': 'agent', 'ssh_port': 22, 'tags': []}, progress=progress)
    for vmid in members + others:
        name, status = status_of.get(vmid, ('agent-stray-%d' % vmid if vmid < OTHER_BASE else 'other-%d' % vmid, None))
        running = status in ('ready', 'booting') or (status is None and vmid % 3 == 0)
        config = {'net0': 'name=eth0,bridge=vmbr0,hwaddr=BC:24:11:00:%02X:%02X,ip=%s/8' % (
            vmid // 256 % 256, vmid % 256, address_of(vmid)), 'tags': 'ephemera' if vmid < OTHER_BASE else 'other'}
        if status is not None:
            config['description'] = ownership.render(secret, controller, name, vmid)
            name = 'agent-' + name
        ct = pve.add_ct(vmid, name, node='pve%d' % (1 + vmid % NODES), status='running' if running else 'stopped',
                        config=config)
        by_id[vmid] = ct
    # Joining one by one re-syncs every guest's pool each time; set the membership once instead.
    pve.pools[POOL] = set(members)
    for vmid in members:
        by_id[vmid].pool = POOL
    return Server(pve, cert, key), cert, journal_path


def configs(workdir, pve, cert, journal_path, pool_size):
    ours = os.path.join(workdir, 'bench.workspaces.yml')
    with open(ours, 'w') as f:
        f.write('plugin: ephemera.workspaces.workspaces\njournal_path: %s\napi_host: %s\napi_user: %s\n'
                'api_password: %s\nca_file: %s\npools: [%s]\n' % (journal_path, pve.url, USER, PASSWORD, cert, POOL))
    theirs = {}
    for facts in (False, True):
        path = os.path.join(workdir, 'bench-%s.proxmox.yml' % ('facts' if facts else 'plain'))
        with open(path, 'w') as f:
            f.write('plugin: community.proxmox.proxmox\nurl: %s\nuser: %s\npassword: %s\nvalidate_certs: true\n'
                    'want_facts: %s\nexclude_nodes: true\nfilters:\n  - "proxmox_vmid < %d"\n'
                    % (pve.url, USER, PASSWORD, 'true' if facts else 'false', POOL_BASE + pool_size))
        theirs[facts] = path
    return ours, theirs


class Run:
    def __init__(self, label, seconds, requests, finished, hosts=None, guests=None, touched=0, error=None):
        self.label, self.seconds, self.requests, self.finished = label, seconds, requests, finished
        self.hosts, self.guests, self.touched, self.error = hosts, guests, touched, error


def measure(label, source, pve, cert, timeout, workdir):
    """Run ansible-inventory --list on one source; the Run with time, requests and what it listed."""
    env = dict(ANSIBLE_INVENTORY_UNPARSED_FAILED='1', REQUESTS_CA_BUNDLE=cert,
               ANSIBLE_LOCAL_TEMP=os.path.join(workdir, 'tmp'), ANSIBLE_HOME=os.path.join(workdir, 'home'))
    before = len(pve.requests)
    run = ansible_run.run_ansible(['ansible-inventory', '-i', source, '--list'], timeout=timeout, fail=False, env=env,
                                  callback=None)
    seconds = run.seconds
    seen = pve.requests[before:]
    touched = len(set(m.group(1) for m in (GUEST_PATH.search(path) for _method, path, _body in seen) if m))
    if run.timed_out:
        return Run(label, seconds, len(seen), False, touched=touched)
    if not run.ok:
        return Run(label, seconds, len(seen), False, touched=touched, error=run.output[-2000:])
    hostvars = run.data['_meta']['hostvars']
    guests = set()
    for hv in hostvars.values():
        vmid = hv.get('ephemera_vmid', hv.get('proxmox_vmid'))
        live = hv.get('ephemera_live_status', 'proxmox')
        if isinstance(live, dict):
            live = live.get('__ansible_unsafe')
        if vmid is not None and live not in ('absent', 'mismatch'):
            guests.add(int(vmid))
    return Run(label, seconds, len(seen), True, hosts=len(hostvars), guests=guests, touched=touched)


def bench_size(size, timeout, warm_up=False):
    workdir = tempfile.mkdtemp(prefix='ephemera-bench-inv-', dir='/dev/shm' if os.path.isdir('/dev/shm') else None)
    try:
        began = time.monotonic()
        server, cert, journal_path = build(size, workdir)
        print('  %d guests: cluster and journal ready in %.1f s' % (size, time.monotonic() - began), flush=True)
        try:
            ours, theirs = configs(workdir, server.pve, cert, journal_path, size // 2)
            if warm_up:
                # Python's and the OS's caches are cold on the very first run; no plugin should pay for that.
                for source in (ours, theirs[False]):
                    measure('warm-up', source, server.pve, cert, timeout, workdir)
            runs = []
            for label, source in (('ephemera.workspaces', ours), ('community.proxmox', theirs[False]),
                                  ('community.proxmox want_facts', theirs[True])):
                run = measure(label, source, server.pve, cert, timeout, workdir)
                print('  %d guests: %-30s %s' % (size, label, describe(run, size)), flush=True)
                runs.append(run)
            return runs
        finally:
            server.stop()
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def describe(run, size):
    if run.finished:
        return '%.2f s, %d requests, %d hosts' % (run.seconds, run.requests, run.hosts)
    if run.error:
        return 'FAILED after %.1f s (%d requests): %s' % (run.seconds, run.requests, run.error.strip().splitlines()[-1])
    return 'STOPPED after %.0f s: %d requests so far, reached %d of %d guests' % (run.seconds, run.requests,
                                                                                  run.touched, size)


def seconds_text(run):
    return '%.2f' % run.seconds if run.finished else '>%.0f' % run.seconds


def table(results):
    lines = ['', '%8s  %-30s %10s %10s %7s %13s %13s' % ('guests', 'plugin', 'seconds', 'requests', 'hosts',
                                                         'time ratio', 'req. ratio')]
    for size, runs in results:
        ours = runs[0]
        for run in runs:
            ratio_t = ratio_r = ''
            if run is not ours:
                ratio_t = '%.1fx' % (run.seconds / ours.seconds) + ('' if run.finished else '+')
                ratio_r = '%.1fx' % (float(run.requests) / ours.requests) + ('' if run.finished else '+')
            lines.append(('%8d  %-30s %10s %10d %7s %13s %13s' % (
                size, run.label, seconds_text(run), run.requests, run.hosts if run.finished else '-', ratio_t,
                ratio_r)).rstrip())
        same = [r for r in runs if r.finished]
        if len(same) > 1:
            agree = all(r.guests == same[0].guests for r in same)
            lines.append('%8s  same guests listed by every finished run: %s (%d)' % (
                '', 'yes' if agree else 'NO', len(same[0].guests)))
    lines.append('(ratios: community.proxmox / ephemera; a + marks a run stopped at the time limit)')
    return '\n'.join(lines)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n', maxsplit=1)[0])
    parser.add_argument('--sizes', default='100,1000,10000', help='numbers of guests, comma-separated')
    parser.add_argument('--timeout', type=float, default=600.0, help='seconds before a run is stopped')
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(',')]
    print('bench/inventory: ansible-inventory --list on fakepve, %d nodes, half the guests in pool %s, one journal '
          'record per pool member; limit %.0f s per run' % (NODES, POOL, args.timeout), flush=True)
    results = [(size, bench_size(size, args.timeout, warm_up=i == 0)) for i, size in enumerate(sizes)]
    print(table(results))
    size, runs = results[-1]
    ours, theirs = runs[0], runs[2]
    print('inventory %d guests: ephemera %.1f s %d requests; community.proxmox %s s %d requests; speedup %s' % (
        size, ours.seconds, ours.requests, '%.1f' % theirs.seconds if theirs.finished else '>%.0f' % theirs.seconds,
        theirs.requests, ('%.1f' if theirs.finished else '>%.1f') % (theirs.seconds / ours.seconds)))
    return 0 if ours.finished else 1


if __name__ == '__main__':
    sys.exit(main())
