"""Time and API requests of one reconciliation: 1,000 journal records against a cluster of 2,000 containers.

One fakepve, served in this process over HTTPS, holds the cluster: containers spread over 8 nodes, half of
them ours (in the pool, with verifying markers) and half somebody else's (outside the pool). The journal knows
most of ours as ready; a few are unfinished creates whose clone exists (adoptable), a few are decided
destructions (which reconcile finishes), and a few pool members are unknown to the journal (orphans). The
Reconciler runs in this process against the real API; requests are counted at the server.

    .venv/bin/python bench/reconcile.py [--records 1000] [--containers 2000]

Prints one line per run: a healthy site (every record ready) and a site with pending work, side by side.
"""

import argparse
import os
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# The repository root first on sys.path, so that bench.* imports as a package.
sys.path[0] = ROOT

from fakepve.certs import make_cert
from fakepve.server import FakePve

from bench.fakepve_site import Server
from ansible_collections.ephemera.workspaces.plugins.module_utils.core import ownership
from ansible_collections.ephemera.workspaces.plugins.module_utils.core.journal import Journal
from ansible_collections.ephemera.workspaces.plugins.module_utils.providers.proxmox.client import PveClient
from ansible_collections.ephemera.workspaces.plugins.module_utils.flows.reconcile import Reconciler

POOL = 'disposable-workspaces'
NODES = 8
USER, PASSWORD = 'root@pam', 'secret'


def build(workdir, records, containers, pending):
    """A started fake and a journal: ``pending`` records of each unusual kind, the rest ready."""
    cert, key = make_cert(workdir, hosts=('127.0.0.1',))[:2]
    pve = FakePve(user=USER, password=PASSWORD, host='127.0.0.1', port=0)
    pve.max_requests = 10 ** 8
    pve.time_scale = 0
    # No lookup index here (see bench/inventory.py): destructions must really remove containers from the fake.
    by_id = {}
    journal_path = os.path.join(workdir, 'journal.sqlite')
    secret = ownership.load_secret(journal_path)
    controller = ownership.controller_id(secret)
    ours = list(range(1000, 1000 + containers // 2))
    others = list(range(100000, 100000 + containers - len(ours)))
    orphans = ours[records:]
    plan = {}
    for i, vmid in enumerate(ours[:records]):
        kind = 'ready'
        if i < pending:
            kind = 'unfinished'
        elif i < 2 * pending:
            kind = 'destroying'
        plan['ws-%05d' % i] = (kind, vmid)
    with Journal.open(journal_path) as journal:
        for name, (kind, vmid) in sorted(plan.items()):
            node = 'pve%d' % (1 + vmid % NODES)
            fields = dict(node=node, repo='https://git.example.com/app.git', ref='main', purpose='bench',
                          params={'pool': POOL, 'node': node, 'template': 9000})
            if kind == 'unfinished':
                journal.create_workspace(name, status='provisioning', candidate_vmid=vmid,
                                         progress={'request': 1, 'vmid': 1, 'clone': 1}, **fields)
            elif kind == 'destroying':
                journal.create_workspace(name, status='destroying', desired_state='destroyed', vmid=vmid,
                                         candidate_vmid=vmid, **fields)
            else:
                journal.create_workspace(name, status='ready', activity='idle', vmid=vmid, candidate_vmid=vmid,
                                         **fields)
    named = {vmid: name for name, (kind, vmid) in plan.items()}
    for vmid in ours:
        name = named.get(vmid, 'lost-%d' % vmid)
        ct = pve.add_ct(vmid, 'agent-' + name, node='pve%d' % (1 + vmid % NODES), status='running',
                        config={'description': ownership.render(secret, controller, name, vmid), 'tags': 'ephemera'})
        by_id[vmid] = ct
    for vmid in others:
        by_id[vmid] = pve.add_ct(vmid, 'other-%d' % vmid, node='pve%d' % (1 + vmid % NODES), status='running')
    pve.pools[POOL] = set(ours)
    for vmid in ours:
        by_id[vmid].pool = POOL
    return Server(pve, cert, key), cert, journal_path, secret, len(orphans)


def measure(label, records, containers, pending):
    workdir = tempfile.mkdtemp(prefix='bench-reconcile-')
    server, cert, journal_path, secret, orphans = build(workdir, records, containers, pending)
    try:
        client = PveClient('127.0.0.1:%d' % server.pve.port, api_user=USER, api_password=PASSWORD, ca_file=cert)
        before = len(server.pve.requests)
        start = time.monotonic()
        with Journal.open(journal_path) as journal:
            report = Reconciler(journal, client, secret, {'task_timeout': 60, 'lock_timeout': 10}).run()
        seconds = time.monotonic() - start
        requests = len(server.pve.requests) - before
    finally:
        server.stop()
    counts = ', '.join('%d %s' % (n, k) for k, n in report['counts'].items() if n)
    print('%-18s %6d records %6d containers %8.2f s %7d requests   (%s)' % (
        label, records, containers, seconds, requests, counts), flush=True)
    return seconds, requests


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--records', type=int, default=1000)
    parser.add_argument('--containers', type=int, default=2000)
    parser.add_argument('--pending', type=int, default=20, help='unfinished creates and decided destructions, each')
    args = parser.parse_args()
    healthy = measure('healthy site', args.records, args.containers, 0)
    busy = measure('with pending work', args.records, args.containers, args.pending)
    print('reconcile %d records / %d containers: healthy %.2f s %d requests; with %d pending each %.2f s %d requests'
          % (args.records, args.containers, healthy[0], healthy[1], args.pending, busy[0], busy[1]))


if __name__ == '__main__':
    main()
