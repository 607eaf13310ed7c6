"""The crash-safety matrix's create and destroy on a journal in PostgreSQL (tests/faults/pgsite.py).

    python -m tests.faults.pgmatrix [--size ci|full] [--json PATH] [--keep]

The same try-out cluster with foreign containers, the same shipped playbooks, kill points and invariants as the
SQLite matrix (tests/faults/matrix.py); only the journal is a database of a PostgreSQL server started for the run.
Its rows: a clean create and destroy traced for their points; kills, each followed by the same playbook again;
and the lost answers of the clone and the delete. The full size kills at every point of create and destroy, each on
a workspace of its own, rerun and reconcile first. The ci size (about two minutes, inside make test) kills, as two
chains at once, at the points where a create or destroy records what it holds or gives up (CI_POINTS: the queue
claim, the record, the candidate VMID, the clone's intent, answer and confirmation; the destroy's mark, its delete's
intent, answer and confirmation, and its end). The takeover rows run the same operations on two controllers that
take turns, each run after a kill on the other one: at the last decisive point of each step (ci), or at every
decisive point (full). Every decisive point of create and destroy, chained the same way on
PostgreSQL, took 1017 s on two loaded cores (69 points, 70 runs, all converged, 0 leaks, 0 foreign touched): too
long for make test. What stays with the SQLite matrix only: the expiry sweep, the other lost answers, the races,
the random schedules (they exercise the flows, which are the same on both journals).
"""

import argparse
import shutil
import sys
import tempfile
import time

from tests.faults import report
from tests.faults.cells import Cell, status_of
from tests.faults.matrix import LOST, Matrix, decisive, points_of
from tests.faults.pgsite import PgFaultSite
from tests.pgserver import PgServer

PG_LOST = ('clone', 'delete')
# The takeover rows: two controllers (run identities of different hosts) on the one journal, each run after a kill on
# the other one, which must wait for the killed run's claim lease (this short, for time) before it takes over.
CONTROLLERS = ('controller-a', 'controller-b')
TAKEOVER_LEASE = 3.0
# The ci size's kill points (see the module's doc), as a trace names them.
CI_POINTS = (
    'queue.claimed journal queue poll', 'create.request journal create_workspace', 'create.vmid journal candidate_vmid',
    'create.clone journal clone', 'create.clone pve POST /nodes/*/lxc/*/clone', 'create.wait_clone journal clone_confirmed',
    'destroy.mark journal destroy', 'destroy.delete journal delete', 'destroy.delete pve DELETE /nodes/*/lxc/*',
    'destroy.finish journal destroyed',
)


def step_points(points):
    """The last decisive point of each step (a point's ``where``: ``queue.claimed``, ``create.clone``, ...): where the
    step has done its work and not yet handed on (for the queue's claim, the claim itself), in order."""
    last = {}
    for point, nth in decisive(points):
        last[point.split(' ', 1)[0]] = (point, nth)
    return sorted(last.values(), key=decisive(points).index)


def taken_over_by_the_other(site, name):
    """(what is wrong with the takeovers of ``name``'s queue entries, how many there were): each runner that was lost
    (killed) must have been followed by a run of the other controller resuming that entry."""
    with site.journal() as journal:
        events = journal.events(name)
    broken, taken = [], 0
    for index, lost in enumerate(events):
        if lost['action'] != 'runner_lost':
            continue
        dead = lost['detail'].get('runner', {}).get('host')
        after = [e for e in events[index + 1:] if e['action'] == 'resumed'
                 and e['detail'].get('entry') == lost['detail'].get('entry')]
        if not after or after[0]['detail'].get('runner', {}).get('host') in (None, dead):
            broken.append('entry #%s of %s, lost by %s at step %s, was not resumed by the other controller'
                          % (lost['detail'].get('entry'), name, dead, lost['detail'].get('step')))
        else:
            taken += 1
    return broken, taken


class PgMatrix(Matrix):
    """:class:`Matrix` rows of create and destroy on a :class:`PgFaultSite`."""

    def prepare(self):
        """Foreign containers (one in our pool, one running elsewhere, one with a copied marker), the traces of a
        clean create and destroy."""
        control = self.site.cluster
        self.site.clear_faults()
        self.site.log_requests()
        control.foreign_create(pool=self.site.info['pool'], hostname='theirs-in-pool')
        control.foreign_create(hostname='theirs-running', start=True)
        first = self.name('t')
        cell = Cell('postgresql: no fault (the traced create and destroy)', 'clean', [first])
        with self.site.working_on(cell):
            traced = self.site.run([self.site.create_op(first)])
        if not traced.ok:
            raise RuntimeError('the clean create failed: %s' % traced.explain())
        self.create_points = points_of(traced.trace, first)
        self.secret = self.site.secret()
        ours = self.site.containers()
        vmid = next(v for v, (node, config, res) in ours.items() if 'agent-' + first == config.get('hostname'))
        control.foreign_create(pool=self.site.info['pool'], hostname='copied-marker',
                               description=ours[vmid][1].get('description'))
        with self.site.working_on(cell):
            traced = self.site.run([self.site.destroy_op(first)])
        if not traced.ok:
            raise RuntimeError('the clean destroy failed: %s' % traced.explain())
        self.destroy_points = points_of(traced.trace, first)
        self.snapshot()
        cell.converged = status_of(self.site, first) == 'destroyed'
        self.judge([cell])
        self.cells.append(cell)

    def run_kill_chains(self):
        points = {op: [(point, nth) for point, nth in decisive(found) if point in CI_POINTS]
                  for op, found in (('create', self.create_points), ('destroy', self.destroy_points))}
        self.log('postgresql, ci: %d of %d points (CI_POINTS); the full size kills at every one'
                 % (sum(len(found) for found in points.values()), len(self.create_points) + len(self.destroy_points)))
        rows = {}
        for op in ('create', 'destroy'):
            rows[op] = {point: Cell('postgresql: kill %s: %s #%d' % (op, point[0], point[1]), 'kill', [],
                                    'rerun') for point in points[op]}
        work = [(None, self._chain(rows[op], op, points[op], 'rerun')) for op in ('create', 'destroy')]
        self.chain_wave(work, [cell for op in ('create', 'destroy') for cell in rows[op].values()])

    def run_takeovers(self):
        """A controller SIGKILLed in every step of a create and of a destroy, the other controller finishing the
        work: chains whose runs take turns on two controllers. The ci size kills at the last decisive point of each
        step (step_points), the full size at every decisive point."""
        points = {}
        for op, found in (('create', self.create_points), ('destroy', self.destroy_points)):
            points[op] = decisive(found) if not self.size['chains'] else step_points(found)
        self.log('postgresql, takeover by the other controller: %d points (%s)'
                 % (sum(len(found) for found in points.values()),
                    'every decisive one' if not self.size['chains'] else 'one in each step'))
        rows = {}
        for op in ('create', 'destroy'):
            rows[op] = {point: Cell('postgresql: kill %s, the other controller takes over: %s #%d'
                                    % (op, point[0], point[1]), 'kill', [], 'takeover') for point in points[op]}
        work = [(None, self._chain(rows[op], op, points[op], 'rerun', hosts=CONTROLLERS, lease=TAKEOVER_LEASE))
                for op in ('create', 'destroy')]
        self.chain_wave(work, [cell for op in ('create', 'destroy') for cell in rows[op].values()])

    def judge(self, cells):
        super().judge(cells)
        takeovers = [cell for cell in cells if cell.variant == 'takeover']
        total = 0
        for name in set(cell.names[0] for cell in takeovers if cell.names):
            broken, taken = taken_over_by_the_other(self.site, name)
            total += taken
            for cell in takeovers:
                if cell.names and cell.names[0] == name and broken:
                    cell.violations['takeover'] = broken
        if takeovers:
            # Kills after the claim and before the outcome leave a running entry: each of those is a takeover.
            self.log('postgresql: %d claims of killed runs taken over by the other controller' % total)

    def run_kills(self):
        if self.size['chains']:
            return self.run_kill_chains()
        for op, points in (('create', self.create_points), ('destroy', self.destroy_points)):
            work = self.kill_cells(op, points)
            for cell, dummy in work:
                cell.row = 'postgresql: ' + cell.row
            plain = [w for w in work if w[0].variant != 'reconcile']
            for start in range(0, len(plain), 8):
                self.wave(plain[start:start + 8])
            for item in [w for w in work if w[0].variant == 'reconcile']:
                self.wave([item])
        return None

    def run_lost(self):
        for op, label, method, path in LOST:
            if op not in ('create', 'destroy') or label not in PG_LOST:
                continue
            cell = Cell('postgresql: lost response: %s (%s %s)' % (label, method, path), 'lost', [self.name('l')])
            self.wave([(cell, self._lost(cell, op, label, method, path))], log_now=False)

    def run(self, seeds=None):
        self.prepare()
        self.run_kills()
        self.run_takeovers()
        self.run_lost()
        return self.cells


def run_pg(size, keep=False, log=print):
    """The PostgreSQL rows: (cells, uncovered)."""
    started = time.monotonic()
    workdir = tempfile.mkdtemp(prefix='ephemera-faults-pg-')
    with PgServer(durable=False) as pg:
        site = PgFaultSite.start(workdir, url=pg.url)
        try:
            runner = PgMatrix(site, size=size, log=log)
            cells = runner.run()
        finally:
            site.stop()
            if not keep:
                shutil.rmtree(workdir, ignore_errors=True)
            else:
                log('kept: %s' % workdir)
    log('postgresql: %d points, %d runs in %.0f s' % (len(runner.create_points) + len(runner.destroy_points),
                                                      len(cells), time.monotonic() - started))
    return cells, []


def main(argv=None):
    parser = argparse.ArgumentParser(prog='python -m tests.faults.pgmatrix', description=__doc__.split('\n', 1)[0])
    parser.add_argument('--size', choices=('ci', 'full'), default='ci')
    parser.add_argument('--json', help='write the report as JSON here too')
    parser.add_argument('--keep', action='store_true', help='keep the working directory')
    args = parser.parse_args(argv)
    started = time.monotonic()
    cells, uncovered = run_pg(args.size, args.keep, log=lambda line: print(line, flush=True))
    print('\n'.join(report.table(cells, uncovered)))
    total = report.totals(cells, uncovered)
    print('took %.0f s' % (time.monotonic() - started))
    if args.json:
        report.write_json(args.json, cells, uncovered, {'command': 'pgmatrix', 'seconds': time.monotonic() - started})
    ok = total['converged'] == total['runs'] and not total['leaks'] and not total['foreign'] and not total['failed']
    return 0 if ok else 1


if __name__ == '__main__':
    sys.exit(main())
