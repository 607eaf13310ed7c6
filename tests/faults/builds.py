"""The template build's rows of the crash-safety matrix, on a site of their own: the debian guest tier.

A build provisions its candidate over SSH as root, which the collection does only in a guest that is a
container of its own (its host name is ``agent-tb-...``), so builds run on the try-out cluster's debian tier.

Kill points are traced as the other rows' are: a clean build (the template_build playbook, nothing to install,
two tools to verify) runs first with the trace on, and every point it passed is a row. A build's points belong to
three names: the module's ``template:<name>``, the queue's ``<name>`` and the candidate's record
``tb-<name>-v<N>``, whose version number is the next one each build takes; a row names the role
(``template``, ``queue``, ``candidate``) and the point, and each run's kill is aimed at the candidate of the
version that run records (the highest recorded, plus one).

After a kill, the next build (or reconcile first, the reconcile variant) must converge within two runs: the
newest version built, the pointer at it, its record a template, no version left building. The pointer is checked
after every run, killed ones included: it never names a version that is not built.
"""

import os
import time

from ansible_collections.ephemera.workspaces.plugins.module_utils.flows.template import candidate_name
from tests.faults import invariants
from tests.faults.cells import MAX_RERUNS, Cell
from tests.faults.site import Kill

TEMPLATE = 'fb'
# The build's mutating API calls, each answer lost once (the cluster acts, the controller never hears it).
# (label, method, path, how the loss is arranged)
LOST = (
    ('clone', 'POST', '/nodes/*/lxc/*/clone', None),
    ('config update', 'PUT', '/nodes/*/lxc/*/config', None),
    ('start', 'POST', '/nodes/*/lxc/*/status/start', None),
    ('shutdown', 'POST', '/nodes/*/lxc/*/status/shutdown', None),
    # The candidate ignores its shutdown, so the forced stop is sent.
    ('stop', 'POST', '/nodes/*/lxc/*/status/stop', 'shutdown refused'),
    ('convert to a template', 'POST', '/nodes/*/lxc/*/template', None),
    # A build that fails (its candidate does not start, twice) aborts in the same run and removes its candidate.
    ('delete on abort (a failed step)', 'DELETE', '/nodes/*/lxc/*', 'start fails twice'),
    # A build killed while its candidate runs; the next build's prepare step aborts it and removes the candidate.
    ('delete on abort (the next build)', 'DELETE', '/nodes/*/lxc/*', 'killed before'),
)
# ci: one chain through the decisive points (below), the build run again; full: every point, each killed in a build
# of its own, then the build again or reconcile first.
# full also kills the abort: in the build after one killed while its candidate ran (ABORT_SETUP), at every point of
# the abort of that candidate.
SIZES = {'ci': {'chains': True, 'variants': ('rerun',), 'points': 'decisive', 'abort': False},
         'full': {'chains': False, 'variants': ('rerun', 'reconcile'), 'points': 'all', 'abort': True}}
ABORT_SETUP = ('candidate', 'template.provision begin', 1)
# Points after which nothing changed since the point before but bookkeeping: the start of a step, the queue's note
# of which step runs, and the candidate's record of its progress (its status, a step done). A build that died is
# never resumed: the next build's prepare step aborts it, and the abort goes by the candidate's container and the
# ids its record holds, not by its progress. A kill at one of these leaves, for the next build, what a kill at the
# point before it leaves.
BOOKKEEPING = ('begin', 'journal queue step', 'journal status', 'journal step_done')


def roles(template):
    return {'template:%s' % template: 'template', template: 'queue'}


def build_points(trace, template, version, role='candidate'):
    """(role, point, nth) for every line of a build's trace that belongs to ``template``'s build of ``version``
    (with role ``aborted``: the lines of that version's candidate only, as the next build aborts it)."""
    names = {candidate_name(template, version): role}
    if role == 'candidate':
        names.update(roles(template))
    seen, out = {}, []
    for workspace, point in trace:
        role = names.get(workspace)
        if role is None:
            continue
        key = (role, point)
        seen[key] = seen.get(key, 0) + 1
        out.append((role, point, seen[key]))
    return out


def changes_state(point):
    """True unless the point only follows bookkeeping (BOOKKEEPING): a journal commit, an API call's answer or a
    command on the guest."""
    role, where, nth = point
    return where.split(' ', 1)[1] not in BOOKKEEPING


# ci kills only where a build records a decision of its own or hears an API answer (each mutating call's answer,
# the version and the candidate's record, the candidate id, the clone's dispatch, the pointer switch and the record
# that finishes it): the points between them, on the guest and in the journal, are killed in the full size only.
DECISIVE = ('journal template_version', 'journal create_workspace', 'journal candidate_vmid', 'journal template_switch',
            'journal template')


def decisive(point):
    role, where, nth = point
    what = where.split(' ', 1)[1]
    return what.startswith('pve ') or what in DECISIVE or (what == 'journal clone' and nth == 1)


def row_of(point):
    role, where, nth = point
    return 'kill build: %s %s #%d' % (role, where, nth)


class BuildMatrix:
    """The build rows against one debian-tier FaultSite; ``cells`` collects them as the main matrix does."""

    def __init__(self, site, size='ci', log=print, template=TEMPLATE):
        self.site = site
        self.size = SIZES[size]
        self.log = log
        self.template = template
        self.cells = []
        self.points = []
        self.abort_points = []
        self.secret = None
        self.foreign_before = {}

    # -------------------------------------------------------------- reading

    def versions(self):
        if not os.path.exists(self.site.journal_path):
            return []
        with self.site.journal() as journal:
            return journal.template_versions(self.template)

    def latest(self):
        versions = self.versions()
        return versions[-1]['version'] if versions else 0

    def kill_of(self, point):
        """The Kill of ``point`` for the next run: the candidate it names is the next version's."""
        role, where, nth = point
        latest = self.latest()
        workspace = {'template': 'template:%s' % self.template, 'queue': self.template,
                     'candidate': candidate_name(self.template, latest + 1),
                     'aborted': candidate_name(self.template, latest)}[role]
        return Kill(workspace, where, nth)

    def converged(self, floor):
        """The newest version (newer than ``floor``) built, the pointer at it, its record a template, none building."""
        with self.site.journal() as journal:
            versions = journal.template_versions(self.template)
            pointer = journal.template(self.template) or {}
            newest = versions[-1] if versions else None
            if newest is None or newest['version'] <= floor or newest['state'] != 'built':
                return False
            if any(v['state'] == 'building' for v in versions) or pointer.get('current') != newest['version']:
                return False
            ws = journal.get_workspace(newest['workspace'])
        return bool(ws) and ws['status'] == 'template'

    def state(self):
        with self.site.journal() as journal:
            pointer = journal.template(self.template) or {}
            versions = journal.template_versions(self.template)
        return 'pointer v%s; versions %s' % (pointer.get('current'), ', '.join(
            'v%d %s' % (v['version'], v['state']) for v in versions[-3:]))

    # -------------------------------------------------------------- runs

    def run(self, cell, op, kill=None):
        """One run for ``cell``; the pointer is checked right after it (killed runs too)."""
        with self.site.working_on(cell):
            outcome = self.site.run([op], kill=kill)
        if not os.path.exists(self.site.journal_path):
            return outcome
        with self.site.journal() as journal:
            broken = invariants.check_pointer(journal, self.template)
        if broken:
            cell.pointer_violations = getattr(cell, 'pointer_violations', []) + broken
        return outcome

    def build_op(self):
        return self.site.build_op(self.template)

    def recover(self, cell, floor, variant, following=None):
        """Runs after a fault until the build converged (at most MAX_RERUNS). With ``following`` (chains), the
        build run is killed there; returns True when it was (the chain moves on)."""
        for attempt in range(1, MAX_RERUNS + 1):
            if variant == 'reconcile' and attempt == 1:
                outcome = self.run(cell, self.site.reconcile_op())
                cell.reruns = attempt
                if not outcome.ok:
                    cell.notes.append('reconcile after the fault: %s' % outcome.explain()[:200])
                if self.converged(floor):
                    break
                continue
            kill = self.kill_of(following) if following else None
            outcome = self.run(cell, self.build_op(), kill=kill)
            cell.reruns = attempt
            if following and outcome.killed:
                cell.converged = True
                return True
            if self.converged(floor):
                break
            if not outcome.ok:
                cell.notes.append('run %d after the fault: %s' % (attempt, outcome.explain()[:300]))
        cell.converged = self.converged(floor)
        if not cell.converged:
            cell.notes.append('template %s did not converge after %d runs: %s' % (self.template, cell.reruns,
                                                                                  self.state()))
        return False

    def names_since(self, floor):
        return [v['workspace'] for v in self.versions() if v['version'] > floor]

    # -------------------------------------------------------------- setup

    def prepare(self):
        """Foreign containers (in our pool, running outside it, one with a copied marker) and the traced build."""
        site, control = self.site, self.site.cluster
        site.clear_faults()
        site.log_requests()
        control.foreign_create(pool=site.info['pool'], hostname='theirs-in-pool')
        control.foreign_create(hostname='theirs-running', start=True)
        cell = Cell('no fault (the traced build)', 'clean', [])
        floor = self.latest()
        traced = self.run(cell, self.build_op())
        if not traced.ok:
            raise RuntimeError('the clean build failed: %s' % traced.explain())
        self.points = build_points(traced.trace, self.template, floor + 1)
        self.secret = site.secret()
        built = self.versions()[-1]
        # Another user copied the marker of our new template onto their container: it stays untouched too.
        description = site.containers()[built['resource_id']][1].get('description')
        control.foreign_create(pool=site.info['pool'], hostname='copied-marker', description=description)
        from tests.faults.invariants import ClusterView
        self.foreign_before = ClusterView(site, self.secret).foreign
        if self.size['abort']:
            self.trace_abort(cell)
        cell.names = self.names_since(floor)
        cell.converged = self.converged(floor)
        self.judge([cell])

    def trace_abort(self, cell):
        """The abort's points: a build killed while its candidate runs, then the build that aborts it, traced."""
        killed = self.run(cell, self.build_op(), kill=self.kill_of(ABORT_SETUP))
        if not killed.killed:
            raise RuntimeError('the build to abort did not die at %s: %s' % (row_of(ABORT_SETUP), killed.explain()))
        dead = self.latest()
        traced = self.run(cell, self.build_op())
        if not traced.ok:
            raise RuntimeError('the build after a killed one failed: %s' % traced.explain())
        self.abort_points = build_points(traced.trace, self.template, dead, role='aborted')

    def judge(self, cells):
        site = self.site
        requests, clones = site.requests(), site.clones()
        site.cluster.clear()
        judged = {}
        for cell in cells:
            same = judged.get(tuple(cell.names))
            if same is not None:
                cell.foreign, cell.violations, cell.leaks = same.foreign, same.violations, same.leaks
                cell.violations = dict(cell.violations)
            else:
                found, leaks, view = invariants.check(site, cell.names, self.foreign_before, requests, self.secret,
                                                      clones, site.since)
                built, build_leaks = invariants.check_build(site, view, self.template)
                leaks.update(build_leaks)
                cell.foreign = found.pop('foreign')
                found.update(built)
                cell.violations = {k: v for k, v in found.items() if v}
                # Every leak counts here: a build site holds nothing but this matrix's builds.
                cell.leaks = ['CT %d: %s' % (vmid, why) for vmid, why in sorted(leaks.items())]
                judged[tuple(cell.names)] = cell
            pointer = getattr(cell, 'pointer_violations', [])
            if pointer:
                cell.violations['pointer'] = list(dict.fromkeys(cell.violations.get('pointer', []) + pointer))
        site.stop_guest_leftovers(set(site.containers()))
        self.cells.extend(c for c in cells if c not in self.cells)
        for cell in cells:
            self.log('%-4s %-70s %s' % ('ok' if cell.ok else 'FAIL', cell.row[:70], '' if cell.ok else cell.notes))

    # -------------------------------------------------------------- kills

    def kill_points(self):
        """The points this size kills at."""
        if self.size['points'] == 'decisive':
            return [point for point in self.points if decisive(point)]
        if self.size['points'] == 'changing':
            return [point for point in self.points if changes_state(point)]
        return list(self.points)

    def run_kills(self):
        if self.size['chains']:
            for variant in self.size['variants']:
                self.chain(variant)
            return
        for variant in self.size['variants']:
            for point in self.kill_points():
                self.kill_cell(point, variant)
            for point in self.abort_points:
                self.kill_cell(point, variant, setup=ABORT_SETUP)

    def kill_cell(self, point, variant, setup=None):
        """Kill a build at ``point`` (after a build killed at ``setup``, for the abort's points), then recover."""
        cell = Cell(row_of(point), 'kill', [], variant)
        self.site.clear_faults()
        self.site.log_requests()
        started = time.monotonic()
        floor = self.latest()
        if setup is not None:
            first = self.run(cell, self.build_op(), kill=self.kill_of(setup))
            if not first.killed:
                cell.notes.append('the build to abort did not die at %s (%s)' % (row_of(setup),
                                                                                 first.explain()[:200]))
        outcome = self.run(cell, self.build_op(), kill=self.kill_of(point))
        if not outcome.killed:
            cell.reached = False
            cell.notes.append('the build did not die at %s (%s)' % (row_of(point), outcome.explain()[:200]))
        self.recover(cell, floor, variant)
        cell.names = self.names_since(floor)
        cell.seconds = time.monotonic() - started
        self.judge([cell])

    def chain(self, variant):
        """Every point once, as chains (cells.chain): the run that recovers from the kill at point i is killed at
        point i+1. A build recovers by aborting the build that died and building a new version, so every run
        starts again from the prepare step; one that ends without reaching i+1 ends the chain (the abort's own
        commits stand where a clean build's first ones do), and i+1 starts the next."""
        points = self.kill_points()
        cells = {point: Cell(row_of(point), 'kill', [], variant) for point in points}
        self.site.clear_faults()
        self.site.log_requests()
        remaining = list(points)
        all_cells = []
        while remaining:
            started = time.monotonic()
            floor = self.latest()
            current = remaining.pop(0)
            members = [cells[current]]
            outcome = self.run(cells[current], self.build_op(), kill=self.kill_of(current))
            if not outcome.killed:
                cells[current].reached = False
                cells[current].notes.append('the build did not die at %s (%s)' % (row_of(current),
                                                                                  outcome.explain()[:200]))
            while True:
                following = remaining[0] if remaining else None
                if not self.recover(cells[current], floor, variant, following):
                    break
                current = remaining.pop(0)
                # The run that recovered the previous point is the one that was killed at this one.
                cells[current].commands.append(members[-1].commands[-1])
                members.append(cells[current])
            if not self.converged(floor):
                # Stopped short: one more build, so that the next chain starts from a converged template.
                self.run(members[-1], self.build_op())
            names = self.names_since(floor)
            seconds = time.monotonic() - started
            for member in members:
                member.names = list(names)
                member.seconds = seconds / len(members)
            all_cells.extend(members)
        self.judge(all_cells)

    # -------------------------------------------------------------- lost answers

    def run_lost(self):
        for label, method, path, how in LOST:
            self.lost_cell(label, method, path, how)

    def lost_cell(self, label, method, path, how):
        site = self.site
        cell = Cell('lost response: build %s (%s %s)' % (label, method, path), 'lost', [])
        site.clear_faults()
        started = time.monotonic()
        floor = self.latest()
        if how == 'killed before':
            killed = self.run(cell, self.build_op(),
                              kill=self.kill_of(ABORT_SETUP))
            if not killed.killed:
                cell.notes.append('the build to abort did not die with its candidate running: %s'
                                  % killed.explain()[:200])
        if how == 'shutdown refused':
            site.cluster.proxy_add('error', 'POST', '/nodes/*/lxc/*/status/shutdown', status=500,
                                   message='command timed out', times=1)
        if how == 'start fails twice':
            site.cluster.proxy_add('error', 'POST', '/nodes/*/lxc/*/status/start', status=500,
                                   message='startup for container failed', times=2)
        rule = site.cluster.proxy_add('drop-response', method, path, times=1)
        site.log_requests()
        first = self.run(cell, self.build_op())
        hits = [r for r in site.cluster.proxy_rules() if r['id'] == rule['id']][0]['hits']
        if not hits:
            cell.reached = False
            cell.notes.append('no %s %s was sent' % (method, path))
        if not first.ok:
            cell.notes.append('the run that lost the answer: %s' % first.explain()[:200])
        if self.converged(floor):
            cell.converged = True
        else:
            self.recover(cell, floor, 'rerun')
        cell.names = self.names_since(floor)
        cell.seconds = time.monotonic() - started
        self.judge([cell])

    # -------------------------------------------------------------- all

    def run_all(self):
        self.prepare()
        self.run_kills()
        self.run_lost()
        return self.cells
