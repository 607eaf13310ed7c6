"""One fault run and what follows it: the fault, the runs until the workspace converged, the invariants.

A cell is a row's unit: a kill at one point (then the same playbook again, or reconcile first), a
lost response on one call, a race, or one seeded random schedule. ``Cell.execute`` leaves its
outcome on the cell: converged (within MAX_RERUNS runs after the fault), reruns needed, leaks,
foreign containers touched, and every invariant that failed.
"""

import time

from tests.faults import invariants
from tests.faults.site import Kill

MAX_RERUNS = 2


class Cell:
    """``row`` groups cells in the report; ``names`` are the workspaces it creates or destroys."""

    def __init__(self, row, kind, names, variant='rerun'):
        self.row = row
        self.kind = kind
        self.names = list(names)
        self.variant = variant
        self.converged = False
        self.reached = True
        self.reruns = 0
        self.leaks = []
        self.foreign = []
        self.violations = {}
        self.notes = []
        self.seconds = 0.0
        self.seed = None

    def as_dict(self):
        return {'row': self.row, 'kind': self.kind, 'workspaces': self.names, 'variant': self.variant,
                'converged': self.converged, 'reached': self.reached, 'reruns': self.reruns, 'leaks': self.leaks,
                'foreign': self.foreign, 'violations': self.violations, 'notes': self.notes,
                'seconds': round(self.seconds, 2), 'seed': self.seed}

    @property
    def ok(self):
        return self.converged and self.reached and not self.leaks and not self.foreign and not any(
            self.violations.values())

    def judge(self, site, foreign_before, requests, secret, clones):
        """Check every invariant over this cell's workspaces (after its runs ended)."""
        found, leaks, dummy = invariants.check(site, self.names, foreign_before, requests, secret, clones)
        self.foreign = found.pop('foreign')
        self.violations = dict((k, v) for k, v in found.items() if v)
        self.leaks = ['CT %d: %s' % (vmid, why) for vmid, why in sorted(leaks.items())
                      if any(why.startswith(name + ':') for name in self.names)]


def status_of(site, name):
    with site.journal() as journal:
        ws = journal.get_workspace(name)
    return ws['status'] if ws else None


def converge(site, cell, name, wanted, make_op, first_reconcile=False):
    """Runs after the fault until ``name`` is ``wanted`` (at most MAX_RERUNS); sets reruns and converged."""
    for attempt in range(1, MAX_RERUNS + 1):
        if status_of(site, name) == wanted:
            break
        op = site.reconcile_op() if first_reconcile and attempt == 1 else make_op(name)
        outcome = site.run([op])
        cell.reruns = attempt
        if not outcome.ok:
            cell.notes.append('run %d after the fault: %s' % (attempt, outcome.explain()[:300]))
    cell.converged = status_of(site, name) == wanted
    if not cell.converged:
        cell.notes.append('%s is %s, not %s, after %d runs' % (name, status_of(site, name), wanted, cell.reruns))


def kill_cell(site, cell, op, point, nth):
    """Kill the ``op`` run of the cell's workspace at ``point`` (its nth passage), then converge."""
    name = cell.names[0]
    started = time.monotonic()
    make_op = site.create_op if op == 'create' else site.destroy_op
    outcome = site.run([make_op(name)], kill=Kill(name, point, nth))
    if not outcome.killed:
        cell.reached = False
        cell.notes.append('the run did not die at %s #%d (%s)' % (point, nth, outcome.explain()[:200]))
    converge(site, cell, name, 'ready' if op == 'create' else 'destroyed', make_op,
             first_reconcile=cell.variant == 'reconcile')
    cell.seconds = time.monotonic() - started
