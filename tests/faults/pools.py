"""The warm pools' rows of the crash-safety matrix, on a host-tier site of their own (docs/internals/faults.md,
docs/pools.md).

Two operations: the **fill** (the shipped pool_fill playbook, a pool of one member) and the **claim** (a create,
through the shipped create playbook, that takes a warm member of a matching pool). A clean fill and a clean claim
run first with the trace on, and their points are the rows: a kill row kills the fill (at a point of its member,
whose name is drawn at random, so the kill names the pool's members: ``<pool>-*``) or the claim (at a point of the
create's candidate step, where the claim is) and then runs the same playbook again, at most twice (the claim's
reconcile variant runs reconcile first, which resumes the create). A lost-answer row loses the answer of one
mutating call of the fill (the member's clone) or of the claim (the re-signing of the member's container).

Every row declares pools of its own (as an inventory's ``ephemera_pools`` would, for every playbook of the row): a
fill row a pool of one member, the claim rows one pool filled before them with a member per row and one to spare,
so that a rerun that took another member than the one its killed run claimed would show.

After the last run of a row: every member of its pool is in exactly one state, and that state agrees with the
cluster (warm: its record is live, its container is its alone, runs and its runner answers; claimed: the workspace
that holds it took its container and the member's record is closed; none left filling or released: the fill
finishes or deletes those); the workspace that claimed is ready with its container alone; no container is named
by two live records or given to two workspaces; no queue entry is left running; none of our containers is
unaccounted for (no leak), nothing foreign is touched; and the main matrix's invariants (events announced before
they were sent, credentials, reconcile reporting what it does not know) over the row's names.
"""

import time

from ansible_collections.ephemera.workspaces.plugins.module_utils.core import pools as pooling
from ansible_collections.ephemera.workspaces.plugins.module_utils.core.queue import Queue
from tests.faults import invariants
from tests.faults.cells import MAX_RERUNS, Cell
from tests.faults.matrix import decisive, points_of
from tests.faults.site import Kill

# The pool whose clean fill and claim are traced for the points, and the claim rows' pool.
TRACED, CLAIMS = 'pt', 'pc'
LEASE = 3600
# ci: the decisive points. The fill's: its member recorded filling (nothing allocated), its place in the pool taken
# (core/pools.py take_slot), its workspace record made, the clone's and the start's answers (the cluster acted, the
# journal does not know), the warm labels written and not yet recorded, the member recorded warm with its queue
# entry not finished. The claim's: the member's
# compare-and-set to claimed, the workspace's record of the claim (the nonce of its new marker), the re-signing's
# answer (the container carries the workspace's marker, the journal does not know), the container taken over by the
# workspace's record with the member's record not yet closed.
CI_FILL = (
    ('pool.begin journal pool_member', 1),
    ('pool.begin journal pool_slot', 1),
    ('pool.record journal create_workspace', 1),
    ('create.clone pve POST /nodes/*/lxc/*/clone', 1),
    ('create.start pve POST /nodes/*/lxc/*/status/start', 1),
    ('create.runner pve PUT /nodes/*/lxc/*/config', 1),
    ('create.runner journal pool_warm', 1),
)
CI_CLAIM = (
    ('create.vmid journal pool_claim', 1),
    ('create.vmid journal pool_claim', 2),
    ('create.vmid pve PUT /nodes/*/lxc/*/config', 1),
    ('create.vmid journal pool_member_taken', 1),
)
# (row label, operation, method, path): the answer of the call is lost once.
LOST = (
    ('fill clone', 'fill', 'POST', '/nodes/*/lxc/*/clone'),
    ('claim re-signing', 'claim', 'PUT', '/nodes/*/lxc/*/config'),
    ('fill start', 'fill', 'POST', '/nodes/*/lxc/*/status/start'),
    ('fill config update', 'fill', 'PUT', '/nodes/*/lxc/*/config'),
)


def sizes(lost, ci=2):
    """ci: the decisive points with the same playbook again, the first ``ci`` lost answers; full: every point but a
    step's bookkeeping, with the same playbook again and with reconcile first, every lost answer."""
    return {'ci': {'kills': 'ci', 'variants': ('rerun',), 'lost': lost[:ci]},
            'full': {'kills': 'all', 'variants': ('rerun', 'reconcile'), 'lost': lost}}


SIZES = sizes(LOST)


def member_points(trace, pool):
    """(point, nth) of a clean fill's trace of a pool of one member (its name drawn at random)."""
    names = sorted(set(workspace for workspace, dummy in trace if workspace.startswith(pool + '-')))
    return points_of(trace, names[0]) if names else []


class PoolMatrix:
    """The pools' rows on a host-tier cluster (run by tests/faults/cloud.py's run_part, as the fork's are);
    AwsPoolMatrix (tests/faults/awspools.py) is the same on the try-out cloud."""

    # The rows' prefix, the ci size's kill points, the lost answers and the sizes: the site's own.
    prefix = 'pools'
    ci_fill = CI_FILL
    ci_claim = CI_CLAIM
    sizes = SIZES

    def __init__(self, site, size='ci', log=print):
        self.site = site
        self.size = self.sizes[size]
        self.log = log
        self.cells = []
        # What run_part counts: the traced points of the fill and of the claim.
        self.create_points = []
        self.destroy_points = []
        self.secret = None
        self.foreign_before = {}
        self._names = iter(range(1, 10 ** 6))

    @property
    def fill_points(self):
        return self.create_points

    @property
    def claim_points(self):
        return self.destroy_points

    def name(self, prefix):
        return '%s%d' % (prefix, next(self._names))

    def declared(self, name, size):
        location, template = self.place()
        return {'name': name, 'location': location, 'template': template, 'size': size, 'lease': LEASE}

    # ---------------------------------------------------------------- what differs on another site (AwsPoolMatrix)

    def place(self):
        """(location, template) a create of the site names: its pools' members are made there from that."""
        info = self.site.info
        return info['template_node'], info['template_vmid']

    def make_foreign(self):
        """Containers of other users beside the pools: one in the pool our containers go in, one running."""
        control = self.site.cluster
        control.foreign_create(pool=self.site.info['pool'], hostname='theirs-in-pool')
        control.foreign_create(hostname='theirs-running', start=True)

    def copy_marker(self, member):
        """Another user copies the warm ``member``'s marker onto a machine of their own: a claim must never take
        it."""
        ours = self.site.containers()
        vmid = [v for v, (dummy, config, dummy2) in ours.items()
                if (config.get('hostname') or '').startswith('agent-%s' % member)][0]
        self.site.cluster.foreign_create(pool=self.site.info['pool'], hostname='copied-marker',
                                         description=ours[vmid][1].get('description'))

    def view(self):
        return invariants.ClusterView(self.site, self.secret)

    def check(self, names, requests, clones):
        """(what the main matrix's invariants found over ``names``, the leaks, the view), given the ``requests`` and
        ``clones`` since the faults were cleared."""
        return invariants.check(self.site, names, self.foreign_before, requests, self.secret, clones,
                                self.site.since)

    @staticmethod
    def machine(resource):
        """A machine of the site in a sentence."""
        return 'CT %s' % resource

    @staticmethod
    def resource_of(ws):
        """The machine a workspace record names."""
        return ws['vmid']

    @staticmethod
    def machines_of(view, name):
        """The machines carrying ``name``'s marker, each of which its record must name: all of them here."""
        return sorted(v for v, o in view.ours.items() if o == name)

    def guest_problems(self, view, ws):
        """What is wrong with the guest of the warm member ``ws`` (its machine its alone)."""
        return invariants.check_guest(ws, ws['vmid'])

    def running(self):
        """The machines whose guests may keep what SSH sessions started in them."""
        return set(self.site.containers())

    def lose(self, method, path):
        """Arm a fault that loses the answer of the next request ``method path``; its rule."""
        return self.site.cluster.proxy_add('drop-response', method, path, times=1)

    def lost_hits(self, rule):
        return [r['hits'] for r in self.site.cluster.proxy_rules() if r['id'] == rule['id']]

    def claim_op(self, name, pool):
        op = self.site.create_op(name)
        op['pools'] = [pool]
        return op

    def reconcile_op(self, pool):
        op = self.site.reconcile_op()
        op['pools'] = [pool]
        return op

    # ---------------------------------------------------------------- setup

    def prepare(self):
        site = self.site
        site.clear_faults()
        site.log_requests()
        self.make_foreign()
        traced = self.declared(TRACED, 1)
        cell = Cell('%s: no fault (the traced fill and claim)' % self.prefix, 'clean', ['ct'])
        with site.working_on(cell):
            fill = site.run([site.fill_op([traced])])
        if not fill.ok:
            raise RuntimeError('a clean fill failed: %s' % fill.explain())
        self.create_points[:] = member_points(fill.trace, TRACED)
        self.secret = site.secret()
        with site.journal() as journal:
            self.copy_marker(pooling.members(journal, TRACED)[0]['member'])
        self.foreign_before = self.view().foreign
        # The fill judged on its own (the claim closes the member's record, which then names no container).
        self.judge(cell, traced, [], size=1)
        filled = (cell.violations, cell.leaks, cell.foreign)
        site.clear_faults()
        site.log_requests()
        with site.working_on(cell):
            claim = site.run([self.claim_op('ct', traced)])
        if not claim.ok:
            raise RuntimeError('a clean claim failed: %s' % claim.explain())
        self.destroy_points[:] = [(p, n) for p, n in points_of(claim.trace, 'ct') if p.startswith('create.vmid ')]
        self.judge(cell, traced, ['ct'])
        for kind, found in filled[0].items():
            cell.violations.setdefault(kind, []).extend(found)
        cell.leaks += filled[1]
        cell.foreign += filled[2]
        cell.converged = not any(cell.violations.values())
        self.cells.append(cell)
        self.log('%s %s' % ('ok ' if cell.ok else 'BAD', cell.row))
        # The claim rows' pool: a member per row and one to spare.
        rows = len(self.claims()) * len(self.size['variants'])
        rows += sum(1 for lost in self.size['lost'] if lost[1] == 'claim')
        self.claim_pool = self.declared(CLAIMS, rows + 1)
        made = site.run([site.fill_op([self.claim_pool])], timeout=60 + 30 * rows)
        if not made.ok:
            raise RuntimeError('the claim rows\' pool could not be filled: %s' % made.explain())

    # ---------------------------------------------------------------- judging

    def judge(self, cell, pool, workspaces, size=None):
        """Every invariant over the row's pool and workspaces, after its last run."""
        site = self.site
        requests, clones = site.requests(), site.clones()
        # Faults still armed would hit the checks' own reads and SSH sessions.
        site.cluster.clear()
        with site.journal() as journal:
            members = pooling.members(journal, pool['name'])
        names = list(workspaces) + [m['member'] for m in members] + list(cell.names)
        names = list(dict.fromkeys(names))
        found, leaks, view = self.check(names, requests, clones)
        cell.foreign = found.pop('foreign')
        cell.violations = {k: v for k, v in found.items() if v}
        prefix = pool['name'] + '-'
        cell.leaks = ['%s: %s' % (self.machine(resource), why) for resource, why in sorted(leaks.items())
                      if why.startswith(prefix) or any(why.startswith(w + ':') for w in workspaces)]
        problems = self.pool_problems(view, pool, workspaces, size)
        if problems:
            cell.violations.setdefault('pool', []).extend(problems)
        site.stop_guest_leftovers(self.running())

    def pool_problems(self, view, pool, workspaces, size):
        """What breaks the pools' invariants over ``pool`` (a declaration) and the ``workspaces`` that claimed from
        it, as sentences."""
        name = pool['name']
        with self.site.journal() as journal:
            problems = list(pooling.violations(journal))
            members = pooling.members(journal, name)
            records = {ws['name']: ws for ws in journal.list_workspaces()}
            queue = Queue(journal)
            # A run killed in its last step leaves its entry running until the next run on the same target settles
            # it (a warm member's, until a run works on that member again): only a live runner's is work left.
            busy = ['%s: queue entry #%s (%s) is %s' % (target, e['id'], e['kind'], e['state'])
                    for target in list(workspaces) + [m['member'] for m in members]
                    for e in queue.entries(target=target, recent=20)
                    if e['state'] == 'queued' or e['state'] == 'running' and e.get('runner_alive')]
        problems += busy
        by_member = {m['member']: m for m in members}
        for resource, owner in sorted(view.ours.items()):
            if owner.startswith(name + '-'):
                record = by_member.get(owner)
                if record is None or record['state'] not in ('warm', 'filling'):
                    problems.append('%s carries the marker of member %s, which is %s' % (
                        self.machine(resource), owner, record['state'] if record else 'forgotten'))
        for record in members:
            member, state = record['member'], record['state']
            ws = records.get(member)
            if state == 'warm':
                owned = self.machines_of(view, member)
                if ws is None or ws['status'] == 'destroyed':
                    problems.append('warm member %s has no live record' % member)
                elif owned != [self.resource_of(ws)]:
                    problems.append('warm member %s records %s, but its machines are %s'
                                    % (member, self.machine(self.resource_of(ws)), owned))
                else:
                    problems += self.guest_problems(view, ws)
            elif state == 'claimed':
                holder = records.get(record['workspace']) or {}
                if (holder.get('facts') or {}).get('pool_member') != member:
                    problems.append('member %s is claimed by %s, which does not hold it'
                                    % (member, record['workspace']))
                if ws is not None and (ws['status'] != 'destroyed' or self.resource_of(ws)
                                       or (ws['facts'] or {}).get('claimed_by') != record['workspace']):
                    problems.append('claimed member %s: its record is %s with %s, claimed_by %s' % (
                        member, ws['status'], self.machine(self.resource_of(ws)),
                        (ws['facts'] or {}).get('claimed_by')))
            else:
                problems.append('member %s was left %s' % (member, state))
        if size is not None:
            warm = sum(1 for m in members if m['state'] == 'warm')
            if warm != size:
                problems.append('pool %s has %d warm members, not %d' % (name, warm, size))
        # The row's own names: its workspaces and every member its pool had (closed ones too).
        own = set(workspaces) | set(n for n in records if n.startswith(name + '-'))
        holders = {}
        for ws in records.values():
            if ws['status'] != 'destroyed' and self.resource_of(ws):
                holders.setdefault(self.resource_of(ws), []).append(ws['name'])
        problems += ['%s is held by %s' % (self.machine(resource), ', '.join(sorted(held)))
                     for resource, held in sorted(holders.items()) if len(held) > 1 and own & set(held)]
        taken = {}
        for ws in records.values():
            member = (ws.get('facts') or {}).get('pool_member')
            if member in own and ws['status'] != 'destroyed':
                taken.setdefault(member, []).append(ws['name'])
        problems += ['member %s was given to %s' % (member, ', '.join(sorted(held)))
                     for member, held in sorted(taken.items()) if len(held) > 1]
        for workspace in workspaces:
            ws = records.get(workspace) or {}
            facts = ws.get('facts') or {}
            mine = [m['member'] for m in members if m['state'] == 'claimed' and m['workspace'] == workspace]
            if ws.get('status') != 'ready':
                problems.append('%s is %s, not ready' % (workspace, ws.get('status')))
            elif facts.get('from_pool') == name and mine != [facts.get('pool_member')]:
                problems.append('%s took member %s from pool %s, which records %s as claimed by it'
                                % (workspace, facts.get('pool_member'), name, mine))
            elif facts.get('from_pool') != name and mine:
                problems.append('%s is cold, yet holds members %s' % (workspace, mine))
        return problems

    # ---------------------------------------------------------------- rows

    def fills(self):
        if self.size['kills'] == 'ci':
            return list(self.ci_fill)
        return decisive(self.fill_points)

    def claims(self):
        if self.size['kills'] == 'ci':
            return list(self.ci_claim)
        return [p for p in decisive(self.claim_points) if not p[0].endswith(' journal status')]

    def missing(self):
        """ci points a clean fill or claim no longer passes (the code moved): each a failed row."""
        cells = []
        for op, points, traced in (('fill', self.ci_fill, self.fill_points),
                                   ('claim', self.ci_claim, self.claim_points)):
            for point in points:
                if point not in traced:
                    cell = Cell('%s kill %s: %s #%d' % ((self.prefix, op) + point), 'kill', [])
                    cell.reached = False
                    cell.notes.append('a clean %s does not pass this point' % op)
                    cells.append(cell)
        return cells

    def converge_fill(self, cell, pool, least=1):
        """The fill again (at least ``least`` times, at most MAX_RERUNS) until its pool is full of warm members and
        nothing of it is left filling or released."""
        for attempt in range(1, MAX_RERUNS + 1):
            if attempt > least and self.pool_full(pool):
                break
            with self.site.working_on(cell):
                outcome = self.site.run([self.site.fill_op([pool])])
            cell.reruns = attempt
            if not outcome.ok:
                cell.notes.append('run %d after the fault: %s' % (attempt, outcome.explain()[:300]))
        cell.converged = self.pool_full(pool)
        if not cell.converged:
            with self.site.journal() as journal:
                counts = pooling.state_counts(journal, pool['name'])
            cell.notes.append('pool %s is %s after %d runs' % (pool['name'], counts, cell.reruns))

    def pool_full(self, pool):
        with self.site.journal() as journal:
            counts = pooling.state_counts(journal, pool['name'])
        return counts['warm'] == pool['size'] and not counts['filling'] and not counts['released']

    def converge_claim(self, cell, name, first_reconcile=False):
        """The create again (reconcile first for that variant), at most MAX_RERUNS, until the workspace is ready."""
        for attempt in range(1, MAX_RERUNS + 1):
            if self.status(name) == 'ready':
                break
            op = self.reconcile_op(self.claim_pool) if first_reconcile and attempt == 1 else \
                self.claim_op(name, self.claim_pool)
            with self.site.working_on(cell):
                outcome = self.site.run([op])
            cell.reruns = attempt
            if not outcome.ok:
                cell.notes.append('run %d after the fault: %s' % (attempt, outcome.explain()[:300]))
        cell.converged = self.status(name) == 'ready'
        if not cell.converged:
            cell.notes.append('%s is %s after %d runs' % (name, self.status(name), cell.reruns))

    def status(self, name):
        with self.site.journal() as journal:
            ws = journal.get_workspace(name)
        return ws['status'] if ws else None

    def fill_kill(self, point):
        pool = self.declared(self.name('f'), 1)
        cell = Cell('%s kill fill: %s #%d' % ((self.prefix,) + point), 'kill', [])
        started = time.monotonic()
        self.site.clear_faults()
        self.site.log_requests()
        with self.site.working_on(cell):
            outcome = self.site.run([self.site.fill_op([pool])], kill=Kill(pool['name'] + '-*', *point))
        if not outcome.killed:
            cell.reached = False
            cell.notes.append('the run did not die at %s #%d (%s)' % (point + (outcome.explain()[:200],)))
        self.converge_fill(cell, pool)
        self.judge(cell, pool, [], size=pool['size'])
        cell.seconds = time.monotonic() - started
        return cell

    def claim_kill(self, point, variant):
        name = self.name('c')
        cell = Cell('%s kill claim: %s #%d' % ((self.prefix,) + point), 'kill', [name], variant)
        started = time.monotonic()
        self.site.clear_faults()
        self.site.log_requests()
        with self.site.working_on(cell):
            outcome = self.site.run([self.claim_op(name, self.claim_pool)], kill=Kill(name, *point))
        if not outcome.killed:
            cell.reached = False
            cell.notes.append('the run did not die at %s #%d (%s)' % (point + (outcome.explain()[:200],)))
        self.converge_claim(cell, name, first_reconcile=variant == 'reconcile')
        self.judge(cell, self.claim_pool, [name])
        self.must_be_from_pool(cell, name)
        cell.seconds = time.monotonic() - started
        return cell

    def must_be_from_pool(self, cell, name):
        """A claim row's workspace took a member (the pool had warm ones to spare): a cold one means the row tested
        nothing of the claim."""
        with self.site.journal() as journal:
            ws = journal.get_workspace(name) or {}
        if (ws.get('facts') or {}).get('from_pool') != CLAIMS:
            cell.violations.setdefault('pool', []).append('%s did not take a member of pool %s' % (name, CLAIMS))

    def lost_cell(self, label, op, method, path):
        cell = Cell('%s lost response: %s (%s)' % (self.prefix, label, ' '.join(filter(None, (method, path)))),
                    'lost', [])
        started = time.monotonic()
        site = self.site
        site.clear_faults()
        rule = self.lose(method, path)
        site.log_requests()
        if op == 'fill':
            pool = self.declared(self.name('l'), 1)
            with site.working_on(cell):
                outcome = site.run([site.fill_op([pool])])
        else:
            pool = self.claim_pool
            cell.names.append(self.name('c'))
            with site.working_on(cell):
                outcome = site.run([self.claim_op(cell.names[0], pool)])
        hits = self.lost_hits(rule)
        if not hits or not hits[0]:
            cell.reached = False
            cell.notes.append('the answer of %s was never lost' % ' '.join(filter(None, (method, path))))
        if not outcome.ok:
            cell.notes.append('the run with the lost answer: %s' % outcome.explain()[:300])
        if op == 'fill':
            self.converge_fill(cell, pool, least=0 if outcome.ok else 1)
            self.judge(cell, pool, [], size=pool['size'])
        else:
            self.converge_claim(cell, cell.names[0])
            self.judge(cell, pool, cell.names)
            self.must_be_from_pool(cell, cell.names[0])
        cell.seconds = time.monotonic() - started
        return cell

    def _log(self, cell):
        self.log('%s %s (%.0f s)%s' % ('ok ' if cell.ok else 'BAD', cell.row, cell.seconds,
                                       '' if cell.ok else ' %s %s' % (cell.violations, cell.notes)))
        self.cells.append(cell)

    def run(self):
        self.prepare()
        for cell in self.missing():
            self.log('BAD %s (not in the trace)' % cell.row)
            self.cells.append(cell)
        for point in [p for p in self.fills() if p in self.fill_points]:
            self._log(self.fill_kill(point))
        for variant in self.size['variants']:
            for point in [p for p in self.claims() if p in self.claim_points]:
                self._log(self.claim_kill(point, variant))
        for label, op, method, path in self.size['lost']:
            self._log(self.lost_cell(label, op, method, path))
        return self.cells


def run_pools_part(size, keep, log=print):
    """The pools' rows on a host-tier site of their own: (cells, uncovered)."""
    from tests.faults.cloud import run_part
    from tests.faults.site import FaultSite
    return run_part(FaultSite, PoolMatrix, size, keep, log=log, label='pools')
