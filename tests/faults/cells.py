"""One fault run and what follows it: the fault, the runs until the workspace converged, the invariants.

A cell is a row's unit: a kill at one point (then the same playbook again, or reconcile first), a
lost response on one call, a race, or one seeded random schedule. ``Cell.execute`` leaves its
outcome on the cell: converged (within MAX_RERUNS runs after the fault), reruns needed, leaks,
foreign containers touched, and every invariant that failed.
"""

import itertools
import time

from tests.faults import invariants
from tests.faults.site import Kill

MAX_RERUNS = 2
SHIPPED = ('ephemera.workspaces.create', 'ephemera.workspaces.destroy', 'ephemera.workspaces.reconcile',
           'ephemera.workspaces.expire', 'ephemera.workspaces.template_build', 'ephemera.workspaces.fork',
           'ephemera.workspaces.pool_fill')


def shipped(command):
    """True for an ansible-playbook run of one of the collection's shipped playbooks."""
    words = command.split()
    return bool(words) and words[0] == 'ansible-playbook' and any(book in words for book in SHIPPED)


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
        # Every run of the cell: ansible-playbook with a shipped playbook (site.start_run records them).
        self.commands = []

    def as_dict(self):
        return {'row': self.row, 'kind': self.kind, 'workspaces': self.names, 'variant': self.variant,
                'converged': self.converged, 'reached': self.reached, 'reruns': self.reruns, 'leaks': self.leaks,
                'foreign': self.foreign, 'violations': self.violations, 'notes': self.notes,
                'seconds': round(self.seconds, 2), 'seed': self.seed, 'commands': self.commands}

    @property
    def ran_shipped_playbooks(self):
        return bool(self.commands) and all(shipped(command) for command in self.commands)

    @property
    def ok(self):
        return self.converged and self.reached and self.ran_shipped_playbooks and not self.leaks \
            and not self.foreign and not any(self.violations.values())

    def judge(self, site, foreign_before, requests, secret, clones):
        """Check every invariant over this cell's workspaces (after its runs ended)."""
        found, leaks, dummy = invariants.check(site, self.names, foreign_before, requests, secret, clones, site.since)
        self.foreign = found.pop('foreign')
        self.violations = {k: v for k, v in found.items() if v}
        self.leaks = ['CT %d: %s' % (vmid, why) for vmid, why in sorted(leaks.items())
                      if any(why.startswith(name + ':') for name in self.names)]


def _record(site, name):
    with site.journal() as journal:
        return journal.get_workspace(name)


def status_of(site, name):
    ws = _record(site, name)
    return ws['status'] if ws else None


def failure_of(site, name):
    """The message of ``name``'s recorded failure ('' when it has none)."""
    return str(((_record(site, name) or {}).get('failure') or {}).get('message') or '')


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


def operation(site, op):
    """(the status its runs converge to, the op of one run) of ``op``: create, destroy or the expiry sweep."""
    return {'create': ('ready', site.create_op), 'destroy': ('destroyed', site.destroy_op),
            'expire': ('destroyed', site.expire_op)}[op]


def kill_cell(site, cell, op, point, nth):
    """Kill the ``op`` run of the cell's workspace at ``point`` (its nth passage), then converge."""
    name = cell.names[0]
    started = time.monotonic()
    wanted, make_op = operation(site, op)
    outcome = site.run([make_op(name)], kill=Kill(name, point, nth))
    if not outcome.killed:
        cell.reached = False
        cell.notes.append('the run did not die at %s #%d (%s)' % (point, nth, outcome.explain()[:200]))
    converge(site, cell, name, wanted, make_op, first_reconcile=cell.variant == 'reconcile')
    cell.seconds = time.monotonic() - started


def on_hosts(make_op, hosts, lease=None):
    """``make_op`` whose runs take turns on the controllers ``hosts`` (their run identities' host names), each with
    the claim lease ``lease``: the run after a kill is on another controller than the killed one."""
    turn = itertools.cycle(hosts)

    def made(name):
        op = make_op(name)
        op['host'] = next(turn)
        if lease:
            op['lease_seconds'] = lease
        return op
    return made


def chain(site, cells, op, points, variant, new_workspace, hosts=None, lease=None):
    """Kill at every point of ``points`` in turn, one workspace carrying the chain as far as it goes.

    The run after the kill at point i is the recovery of point i, and is itself killed at point i+1:
    reaching point i+1 proves that it got past what the kill at point i left. A recovery that ends
    without reaching point i+1 (its path changed, e.g. it adopted a clone instead of recording one)
    ends the chain: point i+1 starts a new one with a fresh workspace. ``cells`` maps each (point, nth)
    to its Cell; ``new_workspace()`` gives the name of a workspace to start from (ready, for destroy).
    With ``hosts`` the runs take turns on those controllers (:func:`on_hosts`): each kill is recovered by another one.
    """
    wanted, make_op = operation(site, op)
    if hosts:
        make_op = on_hosts(make_op, hosts, lease)
    remaining = list(points)
    chains = []
    while remaining:
        name = new_workspace()
        if name is None:
            for point in remaining:
                cells[point].notes.append('no workspace to start a chain from')
            return chains
        started = time.monotonic()
        members = []
        current = remaining.pop(0)
        cell = cells[current]
        cell.names = [name]
        members.append(cell)
        with site.working_on(cell):
            outcome = site.run([make_op(name)], kill=Kill(name, *current))
        if not outcome.killed:
            cell.reached = False
            cell.notes.append('the run did not die at %s #%d (%s)' % (current + (outcome.explain()[:200],)))
        while current is not None:
            following = remaining[0] if remaining else None
            cell = cells[current]
            moved = False
            for attempt in range(1, MAX_RERUNS + 1):
                first = variant == 'reconcile' and attempt == 1
                kill = Kill(name, *following) if following else None
                with site.working_on(cell):
                    outcome = site.run([site.reconcile_op() if first else make_op(name)], kill=kill)
                cell.reruns = attempt
                if following and outcome.killed:
                    cell.converged = True
                    moved = True
                    break
                if status_of(site, name) == wanted:
                    cell.converged = True
                    break
                if not outcome.ok:
                    cell.notes.append('run %d after the kill: %s' % (attempt, outcome.explain()[:200]))
            if not cell.converged:
                cell.notes.append('%s is %s, not %s, after %d runs'
                                  % (name, status_of(site, name), wanted, cell.reruns))
            if not moved:
                break
            current = remaining.pop(0)
            cells[current].names = [name]
            # The run that recovered the previous point is the one that was killed at this one.
            cells[current].commands.append(outcome.command)
            members.append(cells[current])
        if status_of(site, name) != wanted:
            # The chain stopped short of the end: finish the workspace so that the next chain starts clean.
            with site.working_on(members[-1]):
                site.run([make_op(name)])
        seconds = time.monotonic() - started
        for member in members:
            member.seconds = seconds / len(members)
        chains.append(members)
    return chains
