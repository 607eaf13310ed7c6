"""How many fenced transitions per second does the journal take, on SQLite and on PostgreSQL?

    .venv/bin/python bench/journal.py [--processes 8] [--transitions 200] [--contended]

The same load on both backends: N processes (standing for N concurrent runs), each holding the queue claim of
its own workspace, each making M fenced transitions: read the record, then a compare-and-set on its generation
with the run's claim checked and renewed and the transition's event appended, all in one transaction (what every
step of a create or destroy writes). The SQLite journal is a file in a temporary directory (WAL,
synchronous=FULL); the PostgreSQL journal is a database of a server started for the run (tests/pgserver.py), with
its default durability (fsync and synchronous commit on), on a loopback port. Both on the same machine.

Prints, per backend, the wall time, transitions per second and the compare-and-set retries, then checks that no
update was lost (every workspace at generation M + 1 with M events of its own). --contended adds the same load on
one shared workspace (every process against every other; most compare-and-sets lose and are retried), and that
load once more through ``Journal.amend_workspace`` (each read and write one transaction holding the record: no
retry). The last line is ``journal: sqlite A tx/s, postgresql B tx/s`` (the uncontended load). No assertion on
time.
"""

import argparse
import multiprocessing
import os
import shutil
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[0] = ROOT

from tests.conftest import _make_collection_importable  # noqa: E402 pylint: disable=wrong-import-position
from tests.pgserver import PgServer  # noqa: E402 pylint: disable=wrong-import-position

_make_collection_importable()  # this checkout as ansible_collections.ephemera.workspaces

from ansible_collections.ephemera.workspaces.plugins.module_utils.core.errors import StaleGenerationError  # noqa: E402
from ansible_collections.ephemera.workspaces.plugins.module_utils.core.journal import Journal  # noqa: E402
from ansible_collections.ephemera.workspaces.plugins.module_utils.core.queue import CLAIMED, Queue  # noqa: E402
from ansible_collections.ephemera.workspaces.plugins.module_utils.core.run_identity import Owner  # noqa: E402

FORK = multiprocessing.get_context('fork')


def _open(where):
    return Journal.open(url=where) if '://' in where else Journal.open(where)


def _worker(where, workspace, claim, transitions, ready, go, out, amend=False):
    retries = 0
    try:
        with _open(where) as journal:
            ready.release()
            go.wait()
            done = 0
            while amend and done < transitions:
                # Read and write as one transaction holding the record (Journal.amend_workspace): nothing to retry.
                journal.amend_workspace(workspace, lambda record: (
                    {'params': {'count': record['params']['count'] + 1}},
                    {'action': 'transition', 'detail': {'to': record['params']['count'] + 1}}), claim=claim)
                done += 1
            while done < transitions:
                record = journal.get_workspace(workspace)
                count = record['params']['count']
                try:
                    journal.update_workspace(workspace, record['generation'], claim=claim, params={'count': count + 1},
                                             event={'action': 'transition', 'detail': {'to': count + 1}})
                except StaleGenerationError:
                    retries += 1
                    continue
                done += 1
        out.put(('ok', retries))
    except Exception as exc:  # reported by the parent
        out.put(('error', '%s: %s' % (type(exc).__name__, exc)))


def run(where, processes, transitions, contended, amend=False):
    """(wall seconds, retries) of one load; checks the outcome."""
    with _open(where) as journal:
        queue = Queue(journal, owner=Owner.current(), lease=600)
        names = ['shared'] if contended else ['ws%d' % n for n in range(processes)]
        claims = {}
        for name in names:
            journal.create_workspace(name, params={'count': 0})
            turn = queue.poll(queue.enqueue('destroy', name).request_id)
            assert turn.outcome == CLAIMED
            claims[name] = turn.claim
    ready, go, out = FORK.Semaphore(0), FORK.Event(), FORK.Queue()
    procs = []
    for n in range(processes):
        name = names[0] if contended else names[n]
        procs.append(FORK.Process(target=_worker, args=(where, name, claims[name], transitions, ready, go, out,
                                                        amend)))
    for proc in procs:
        proc.start()
    for dummy in procs:
        if not ready.acquire(timeout=120):
            raise SystemExit('a worker did not open the journal within 120 s')
    started = time.perf_counter()
    go.set()
    results = [out.get(timeout=1800) for dummy in procs]
    wall = time.perf_counter() - started
    for proc in procs:
        proc.join(60)
    errors = [detail for state, detail in results if state == 'error']
    if errors:
        raise SystemExit('worker failed: %s' % errors[0])
    with _open(where) as journal:
        for name in names:
            record = journal.get_workspace(name)
            expected = transitions * (processes if contended else 1)
            events = [e for e in journal.events(name) if e['action'] == 'transition']
            if record['params']['count'] != expected or record['generation'] != expected + 1 or len(events) != expected:
                raise SystemExit('LOST UPDATE on %s: count %s, generation %s, %d events; expected %d'
                                 % (where, record['params']['count'], record['generation'], len(events), expected))
    return wall, sum(detail for state, detail in results if state == 'ok')


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--processes', type=int, default=8)
    parser.add_argument('--transitions', type=int, default=200)
    parser.add_argument('--contended', action='store_true', help='also the same load on one shared workspace')
    args = parser.parse_args()
    total = args.processes * args.transitions
    print('journal: %d processes x %d fenced transitions, each process on its own workspace and claim'
          % (args.processes, args.transitions))
    rates = {}
    base = tempfile.mkdtemp(prefix='bench-journal-')
    try:
        with PgServer(durable=True) as pg:
            loads = [(False, False, 'own workspace')]
            if args.contended:
                loads += [(True, False, 'one shared workspace'), (True, True, 'shared, amended')]
            for contended, amend, label in loads:
                for backend in ('sqlite', 'postgresql'):
                    kind = 'amend' if amend else 'shared' if contended else 'own'
                    if backend == 'sqlite':
                        where = os.path.join(base, 'journal-%s.sqlite' % kind)
                    else:
                        where = pg.new_database('bench_%s' % kind)
                    wall, retries = run(where, args.processes, args.transitions, contended, amend)
                    rate = total / wall
                    rates[(backend, kind)] = (rate, retries)
                    print('  %-10s %-20s %7.2f s  %7.0f tx/s  %5d compare-and-set retries  no lost update'
                          % (backend, label, wall, rate, retries), flush=True)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    print('  postgresql / sqlite: %.2f' % (rates[('postgresql', 'own')][0] / rates[('sqlite', 'own')][0]))
    if args.contended:
        print('  one shared workspace on postgresql: compare-and-set %.0f tx/s, %d retries (%.1f a transition); '
              'amended %.0f tx/s, %d retries; ratio %.1f' % (
                  rates[('postgresql', 'shared')][0], rates[('postgresql', 'shared')][1],
                  rates[('postgresql', 'shared')][1] / float(total), rates[('postgresql', 'amend')][0],
                  rates[('postgresql', 'amend')][1],
                  rates[('postgresql', 'amend')][0] / rates[('postgresql', 'shared')][0]))
    print('journal: sqlite %.0f tx/s, postgresql %.0f tx/s' % (rates[('sqlite', 'own')][0],
                                                               rates[('postgresql', 'own')][0]))


if __name__ == '__main__':
    main()
