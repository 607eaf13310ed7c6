"""The fork's rows of the crash-safety matrix, on a host-tier site of their own (docs/faults.md, docs/fork.md).

A ready parent is made once; every row forks it into two children of fresh names through the shipped fork
playbook. A kill row kills the fork at one point (the parent's or a child's, as a clean fork's trace names it),
then runs the same fork again until it converged; a lost-answer row loses the answer of one of the fork's mutating
calls once. The invariant, checked after every run (killed ones too): no child of a fork is adopted (briefed or
ready) unless every child of that fork reached identity reset. After the last run: every child ready, its guest
answering with its pinned key, the parent ready with its fork done, no snapshot left, none of our containers
unaccounted for.
"""

import concurrent.futures
import time

from tests.faults import invariants
from tests.faults.cells import MAX_RERUNS, Cell
from tests.faults.cloud import run_part
from tests.faults.site import FaultSite, Kill

PARENT = 'fk'
# Roles of a clean fork's trace: the parent (and its queue), its first child and its second.
ROLES = ('parent', 'child1', 'child2')
# ci: the decisive points of a fork, a few rows. After the fork (the snapshot's name) is journaled, before the parent
# is quiesced; after the snapshot's answer, before the journal knows; after a
# child's clone answer; between the second child's identity reset and the adoption; right after the commit point.
CI_KILLS = (
    ('parent', 'fork.begin journal fork_started', 1),
    ('parent', 'fork.snapshot pve POST /nodes/*/lxc/*/snapshot', 1),
    ('child1', 'create.clone pve POST /nodes/*/lxc/*/clone', 1),
    ('child2', 'fork.reset journal identity_reset', 1),
    ('parent', 'fork.adopt journal fork_adopted', 1),
)
LOST = (
    ('snapshot', 'POST', '/nodes/*/lxc/*/snapshot'),
    ('snapshot delete', 'DELETE', '/nodes/*/lxc/*/snapshot/*'),
)
SIZES = {'ci': {'kills': 'ci', 'lost': LOST[:1]}, 'full': {'kills': 'all', 'lost': LOST}}
BOOKKEEPING = ('begin', 'journal queue step', 'journal status', 'journal step_done')


def fork_points(trace, names):
    """(role, point, nth) for each line of a clean fork's trace; ``names`` maps workspace names to roles. Points
    that name the fork's own snapshot (new in every fork) are left out."""
    seen, out = {}, []
    for workspace, point in trace:
        role = names.get(workspace)
        if role is None or 'ephemera-fork-' in point:
            continue
        seen[(role, point)] = seen.get((role, point), 0) + 1
        out.append((role, point, seen[(role, point)]))
    return out


def adoption_violations(journal, parent):
    """Children of the parent's fork that were adopted while a sibling had not reached identity reset."""
    fork = ((journal.get_workspace(parent) or {}).get('facts') or {}).get('fork') or {}
    children = [journal.get_workspace(c['name']) for c in fork.get('children') or []]
    reset = [bool(c and ((c.get('facts') or {}).get('fork') or {}).get('identity_reset_at')
                  and c['desired_state'] == 'present') for c in children]
    adopted = [c['name'] for c in children if c and ('brief' in (c.get('progress') or {}) or c['status'] == 'ready')
               and c['desired_state'] == 'present']
    if adopted and not all(reset):
        return ['%s adopted while not every child of fork %s reached identity reset'
                % (', '.join(adopted), fork.get('id'))]
    return []


class ForkMatrix:
    """The fork's rows on a host-tier cluster; AwsForkMatrix (tests/faults/awsfork.py) is the same on the try-out
    cloud."""

    sizes = SIZES
    ci_kills = CI_KILLS
    # The rows' prefix: the Proxmox rows have none.
    prefix = ''

    def __init__(self, site, size='ci', log=print):
        self.site = site
        self.size = self.sizes[size]
        self.log = log
        self.cells = []
        self.points = []
        # What the parts' common runner counts (tests/faults/cloud.py run_part): the traced points of a clean fork.
        self.create_points = self.points
        self.destroy_points = []
        self.secret = None
        self.parent_before = None
        self.foreign_before = {}
        self._names = iter(range(1, 10 ** 6))

    def children(self):
        n = next(self._names)
        return ['%s%d-a' % (PARENT, n), '%s%d-b' % (PARENT, n)]

    def prepare(self):
        outcome = self.site.run([self.site.create_op(PARENT)])
        if not outcome.ok:
            raise RuntimeError('the fork rows\' parent could not be made: %s' % outcome.explain())
        self.secret = self.site.secret()
        with self.site.journal() as journal:
            self.parent_before = journal.get_workspace(PARENT)
        self.foreign_before = self.foreign_now()
        names = self.children()
        clean = self.site.run([self.site.fork_op(PARENT, names)])
        if not clean.ok:
            raise RuntimeError('a clean fork failed: %s' % clean.explain())
        self.points[:] = fork_points(clean.trace, {PARENT: 'parent', names[0]: 'child1', names[1]: 'child2'})

    # ---------------------------------------------------------------- judging

    def judge(self, cell, parent, names):
        with self.site.journal() as journal:
            records = dict((ws['name'], ws) for ws in journal.list_workspaces())
            fork = (records[parent].get('facts') or {}).get('fork') or {}
        view = self.view()
        cell.leaks = self.leaks(view, records)
        cell.foreign = self.foreign(view)
        problems = []
        for name in names:
            ws = records.get(name)
            if ws is None or ws['status'] != 'ready':
                problems.append('%s is %s, not ready' % (name, ws and ws['status']))
            else:
                problems += self.check_ready(view, ws)
                point = ws['facts']['fork'].get('fork_point')
                if self.parent_before and point != self.parent_before['facts'].get('head'):
                    problems.append('%s forked at %s, not at the parent\'s commit %s'
                                    % (name, point, self.parent_before['facts'].get('head')))
        ws = records[parent]
        if ws['status'] != 'ready':
            problems.append('the parent is %s, not ready' % ws['status'])
        was = self.parent_before
        key = ws['facts'].get('host_key')
        if was and (ws['resource_id'], key) != (was['resource_id'], was['facts'].get('host_key')):
            problems.append('the parent is not as it was: %s with host key %s, not %s with %s'
                            % (ws['resource_id'], key, was['resource_id'], was['facts'].get('host_key')))
        if fork.get('state') != 'done':
            problems.append('the parent\'s fork is %s, not done' % fork.get('state'))
        left = self.copies_left(ws)
        if left:
            problems.append('%s left: %s' % (self.copies, ', '.join(left)))
        if problems:
            cell.violations.setdefault('fork', []).extend(problems)
        cell.converged = not problems

    # What differs on another provider (AwsForkMatrix): how the cloud is read, and what a copy of the parent is.
    copies = 'snapshots on the parent'

    def view(self):
        return invariants.ClusterView(self.site, self.secret)

    def foreign_now(self):
        return self.view().foreign

    def leaks(self, view, records):
        return ['CT %d: %s' % (vmid, why) for vmid, why in sorted(invariants.leaks(view, records).items())]

    def foreign(self, view):
        return invariants.check_foreign(self.foreign_before, view, [])

    def check_ready(self, view, ws):
        return invariants.check_ready(self.site, view, ws)

    def copies_left(self, parent):
        """The fork copies of the parent still there: its snapshots (but the current state)."""
        return [s['name'] for s in self.site.api.get('/nodes/%s/lxc/%d/snapshot' % (parent['node'], parent['vmid']))
                if s['name'] != 'current']

    def lose(self, method, path):
        """Arm a fault that loses the answer of the next request ``method path``; its rule."""
        return self.site.cluster.proxy_add('drop-response', method, path, times=1)

    def lost_hits(self, rule):
        return [r['hits'] for r in self.site.cluster.proxy_rules() if r['id'] == rule['id']]

    def after_run(self, cell):
        with self.site.journal() as journal:
            found = adoption_violations(journal, PARENT)
        if found:
            cell.violations.setdefault('adoption', []).extend(found)

    def converge(self, cell, names):
        for attempt in range(1, MAX_RERUNS + 1):
            with self.site.working_on(cell):
                outcome = self.site.run([self.site.fork_op(PARENT, names)])
            cell.reruns = attempt
            self.after_run(cell)
            if outcome.ok:
                break
            cell.notes.append('run %d after the fault: %s' % (attempt, outcome.explain()[:300]))
        self.judge(cell, PARENT, names)

    # ---------------------------------------------------------------- rows

    def kills(self):
        if self.size['kills'] == 'ci':
            return [p for p in self.ci_kills if p in self.points]
        return [p for p in self.points if p[1].split(' ', 1)[-1] not in BOOKKEEPING]

    def kill_cell(self, point):
        role, where, nth = point
        names = self.children()
        cell = Cell('%skill fork: %s %s #%d' % ((self.prefix,) + point), 'kill', [PARENT] + names)
        started = time.monotonic()
        workspace = {'parent': PARENT, 'child1': names[0], 'child2': names[1]}[role]
        with self.site.working_on(cell):
            outcome = self.site.run([self.site.fork_op(PARENT, names)], kill=Kill(workspace, where, nth))
        if not outcome.killed:
            cell.reached = False
            cell.notes.append('the run did not die at %s #%d (%s)' % (where, nth, outcome.explain()[:200]))
        self.after_run(cell)
        self.converge(cell, names)
        cell.seconds = time.monotonic() - started
        return cell

    def lost_cell(self, label, method, path):
        names = self.children()
        cell = Cell('%slost response: fork %s' % (self.prefix, label), 'lost', [PARENT] + names)
        started = time.monotonic()
        self.site.clear_faults()
        rule = self.lose(method, path)
        self.site.log_requests()
        with self.site.working_on(cell):
            outcome = self.site.run([self.site.fork_op(PARENT, names)])
        hit = self.lost_hits(rule)
        if not hit or not hit[0]:
            cell.reached = False
            cell.notes.append('the answer of %s %s was never lost' % (method, path))
        self.site.clear_faults()
        self.after_run(cell)
        if not outcome.ok:
            cell.notes.append('the run with the lost answer: %s' % outcome.explain()[:300])
            self.converge(cell, names)
        else:
            self.judge(cell, PARENT, names)
        cell.seconds = time.monotonic() - started
        return cell

    def missing(self):
        """Rows of the ci size's kills that a clean fork's trace does not pass (the code moved): each fails."""
        if self.size['kills'] != 'ci':
            return []
        cells = []
        for point in [p for p in self.ci_kills if p not in self.points]:
            cell = Cell('%skill fork: %s %s #%d' % ((self.prefix,) + point), 'kill', [])
            cell.reached = False
            cell.notes.append('a clean fork does not pass this point')
            cells.append(cell)
        return cells

    def run(self):
        self.prepare()
        for cell in self.missing():
            self.log('BAD %s (not in the trace)' % cell.row)
            self.cells.append(cell)
        for point in self.kills():
            cell = self.kill_cell(point)
            self.log('%s %s (%.0f s)' % ('ok ' if cell.ok else 'BAD', cell.row, cell.seconds))
            self.cells.append(cell)
        for label, method, path in self.size['lost']:
            cell = self.lost_cell(label, method, path)
            self.log('%s %s (%.0f s)' % ('ok ' if cell.ok else 'BAD', cell.row, cell.seconds))
            self.cells.append(cell)
        return self.cells


def run_fork_part(size, keep, log=print):
    """The fork rows: on a host-tier site of their own, and the AWS fork's on a try-out cloud of their own
    (tests/faults/awsfork.py), side by side: (cells, uncovered)."""
    from tests.faults.awsfork import run_aws_fork_part
    with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
        parts = [pool.submit(run_part, FaultSite, ForkMatrix, size, keep, log=log, label='fork'),
                 pool.submit(run_aws_fork_part, size, keep, log=log)]
        found = [part.result() for part in parts]
    return [c for cells, dummy in found for c in cells], [u for dummy, uncovered in found for u in uncovered]
