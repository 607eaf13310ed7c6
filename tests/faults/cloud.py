"""The cloud parts of the crash-safety matrix (AWS, Hetzner Cloud, Compute Engine): one shape, and a small adapter per
provider for what differs between them.

Each part runs on a try-out cloud of its own (tests/localcloud, docs/localcloud.md: real SSH guests on the cloud's
machines), with the shipped playbooks and ``ephemera_provider`` set to the part's provider:

- **kill points**: a clean create and a clean destroy run first with the failpoint trace on, and every point they
  passed is a row (``<label> kill create: ...``, ``<label> kill destroy: ...``): step starts, journal commits, the
  answer of every call that acts (the provider's failpoints) and guest commands;
- **lost answers**: every call that acts in those traces, once: the cloud acts and the connection is cut before the
  answer (``<label> lost answer: <call> (create|destroy)``), each fault matched to its own workspace's request where
  the cloud can tell them apart; the adapter may add faults of its own (an operation DONE with an error);
- **what follows**: the same playbook again (rerun), or reconcile first (reconcile, the full size), until the
  workspace converged (ready, destroyed) within two runs (cells.MAX_RERUNS);
- **sizes**: ``full`` kills every point in a run of its own, then loses every answer, one after the other; ``ci`` runs
  two chains at once (cells.chain), through the create's and the destroy's decisive points (the adapter's), with the
  lost answers beside them; a lost answer the cloud cannot match to one workspace runs after them, alone.

Then, over the cloud's machines as it holds them (no fault in between):

    ready        every workspace the journal calls ready has exactly one live machine carrying its marker (it
                 verifies for this controller, bound to what the adapter says the marker binds), the one its record
                 names, running, reachable over SSH with its pinned host key, its runner answering
    destroyed    no live machine carries the marker of a workspace the journal calls destroyed
    foreign      every machine that is not ours (made by another principal, or carrying a copy of our labels whose
                 marker does not verify) is as it was (the adapter's fields), and no request of ours but a read named
                 one
    credentials  the git token and the agent's key are where tests/faults/invariants.py says (the same check)
    events       every creating request our controller sent named what a journal record holds as its candidate

A leak is a live machine whose marker verifies for this controller and that the journal does not account for (no
record, a destroyed one, or one naming another machine).

An adapter (:class:`Adapter`) says what to list and how to read a machine (its state, labels, marker and what the
marker binds), the provider's playbook variables, how to read the requests our controller sent, which points are
decisive, which trace points are calls that act, how to copy a workspace's labels onto a foreign machine, and which
fault to arm on the cloud for a lost answer. tests/faults/aws.py, hetzner.py and gcp.py are the adapters; Azure's
(tests/faults/azure.py), whose workspace is a set of four resources, also says what a ready set is, which of its
resources a record accounts for, and which kill points are rows of their own.
"""

import concurrent.futures
import contextlib
import os
import time

from ansible_collections.ephemera.workspaces.plugins.module_utils.core import ownership
from tests.faults import invariants
from tests.faults.cells import Cell, converge, operation, status_of
from tests.faults.matrix import Matrix, points_of
from tests.faults.site import AGENTS, FaultSite
from tests.localcloud.fixtures import cloud_process
from tests.localpve.cluster import pick_host
from tests.localpve.guests import end_guest_processes

NAMES = ('ready', 'destroyed', 'foreign', 'credentials', 'events')
# The cloud's state timings in the matrix (seconds pending, stopping, shutting-down): the clouds' on the way, quickly.
CLOUD = {'boot_secs': 0.2, 'stop_secs': 0.2, 'shutdown_secs': 0.2}
# ci: chains through the decisive points, the same playbook again; full: every point, each killed in a run of its
# own, then the same playbook again or reconcile first.
SIZES = {'ci': {'chains': True, 'variants': ('rerun',), 'jobs': 2},
         'full': {'chains': False, 'variants': ('rerun', 'reconcile'), 'jobs': 2}}
# The commits of a creation's and a deletion's dispatch: (point without its step, nth). A kill there leaves an outcome
# the next run must look up: nothing was sent.
DISPATCHES = (('journal clone', 1), ('journal delete', 1))
# What every part's runs are given besides the provider's own settings.
TIMEOUTS = {'ephemera_task_timeout': 60, 'ephemera_lock_timeout': 30, 'ephemera_address_timeout': 30,
            'ephemera_ssh_timeout': 30, 'ephemera_runner_timeout': 20}


def what_of(point):
    """A point without its step: ``create.clone aws RunInstances`` -> ``aws RunInstances``."""
    return point.split(' ', 1)[-1]


def decisive(points, label, extra=()):
    """The ci size's points: the answer of every call that acts (the points ``<label> ...``: the cloud acted, the
    journal never heard) and the journal commits that record a creation's or a deletion's dispatch before it is sent
    (DISPATCHES), and ``extra`` (points without their step, with their nth). The other points (step starts, the
    queue's, the guest's commands, the commits between) are the create and destroy flows the Proxmox rows cover; the
    full size kills them too."""
    return [(point, nth) for point, nth in points
            if what_of(point).startswith(label + ' ') or (what_of(point), nth) in DISPATCHES + tuple(extra)]


def lost_calls(create_points, destroy_points, call_of):
    """(op, call) of every call that acts in the traces, in trace order, each once per op; ``call_of(what)`` gives the
    call of a point without its step, or None for a point that is not a call that acts."""
    out = []
    for op, points in (('create', create_points), ('destroy', destroy_points)):
        for point, dummy in points:
            call = call_of(what_of(point))
            if call is not None and (op, call) not in out:
                out.append((op, call))
    return out


class Adapter:
    """What a cloud part says of its provider (subclassed by tests/faults/aws.py, hetzner.py, gcp.py).

    A machine, as :meth:`items` gives it, is a dict: ``id`` (the resource id a journal record holds), ``state`` (the
    cloud's word), ``running`` (ready for SSH), ``live`` (not gone for good), ``tags`` (its labels or tags),
    ``workspace`` (the workspace its labels name, or None), ``marker`` (its ownership marker's text) and ``bound``
    (the number the marker must bind for it to be ours)."""

    #: The rows' prefix; the calls that act are the points ``<label> ...``.
    label = None
    #: Its name in messages.
    title = None
    #: A machine's guest directory under the cloud's guests/ is ``guest_prefix`` + what guest_dir() adds.
    guest_prefix = ''
    #: The fields of a foreign machine that must not change.
    foreign_fields = ('state', 'tags')
    #: The operation of a request that creates a machine (events), and what its identity is called.
    clone_op = None
    clone_identity = 'identity'

    def cloud_options(self):
        """Options of the try-out cloud's process (cloud_process)."""
        return dict(CLOUD)

    def started(self, site):
        """Called once the site is made (the cloud is up)."""

    def provider_vars(self, info):
        """The playbook variables of the provider (the cloud's cloud.json is ``info``)."""
        raise NotImplementedError

    def items(self, site):
        """resource id -> a machine (see the class)."""
        raise NotImplementedError

    def guest_dir(self, resource_id):
        return self.guest_prefix + resource_id

    def mark(self, site):
        """The faults were cleared: requests() reads from here on."""

    def log_requests(self, site):
        """Start logging requests, if the cloud does not log them itself."""

    def requests(self, site):
        """(time, operation, resource ids named, identity) of every request since the faults were cleared."""
        raise NotImplementedError

    def is_read(self, op):
        """True for an operation that only reads (what a request of ours may do to a foreign machine)."""
        raise NotImplementedError

    def candidate_identity(self, candidate):
        """What a creating request carries (``clone_identity``) for a record whose candidate is ``candidate``."""
        return candidate

    def decisive(self, points):
        return decisive(points, self.label)

    def call_of(self, what):
        """The call that acts of a point without its step (``aws RunInstances`` -> ``RunInstances``), or None."""
        if what.startswith(self.label + ' '):
            return what[len(self.label) + 1:]
        return None

    def extra_faults(self, lost):
        """(op, call) rows of faults other than a lost answer, after the lost answers ``lost``."""
        return []

    def row_of(self, op, call):
        return '%s lost answer: %s (%s)' % (self.label, call, op)

    def copy_foreign(self, site, item, workspace):
        """Another principal copies ``workspace``'s labels (its machine ``item``) onto a machine of its own."""
        raise NotImplementedError

    def creates(self, op):
        """True for an operation that creates what a record's candidate names (the events invariant)."""
        return op == self.clone_op

    def accounts_for(self, ws, resource_id, item):
        """True when the record ``ws`` (not destroyed) accounts for our live ``item`` (its id ``resource_id``)."""
        return ws.get('resource_id') in (None, resource_id)

    def ready_machine(self, view, ws):
        """(what is wrong with the ready workspace ``ws`` in ``view``, the id of the guest to reach over SSH)."""
        owned = sorted(i for i, name in view.ours.items() if name == ws['name'])
        if owned != [ws['resource_id']]:
            return ['%s is ready with %s, but its live instances are %s' % (ws['name'], ws['resource_id'], owned)], None
        item = view.instances[ws['resource_id']]
        if not item['running']:
            return ['%s is ready, but %s is %s' % (ws['name'], ws['resource_id'], item['state'])], None
        return [], ws['resource_id']

    def foreign_names(self, before, view):
        """What a request of ours may not name but to read: the foreign machines as requests name them."""
        return set(before) | set(view.foreign)

    def lost_calls(self, create_points, destroy_points, created, destroyed, workspace):
        """(op, call) rows of the lost answers: every call that acts in the traces (``created``, ``destroyed``: the
        requests each traced run of ``workspace`` sent)."""
        return lost_calls(create_points, destroy_points, self.call_of)

    def in_ci(self, call):
        """True when the ci size loses the answer of ``call`` too (the full size loses every one)."""
        return True

    def own_rows(self, op, points):
        """The points of ``op`` that are killed in rows of their own in the ci size too, never in a chain (a chain's
        next run could not go on from them)."""
        return []

    def stop_guest_leftovers(self, site, keep):
        """Stop what SSH sessions started in guests of machines that are not running (``keep``: the running ones)."""
        keep = set(self.guest_dir(k) for k in keep)
        for entry in os.listdir(site.guests_dir) if os.path.isdir(site.guests_dir) else []:
            if entry.startswith(self.guest_prefix) and entry not in keep:
                end_guest_processes(os.path.join(site.guests_dir, entry) + os.sep)

    def exclusive(self, call):
        """True when the fault for ``call`` cannot be matched to one workspace's request: its row runs alone."""
        return False

    def lost_rule(self, site, op, call, name, resource_id):
        """Arm the fault of the row (op, call) for workspace ``name``, before its run: a rule (for rule_hits), or
        None when no request of that call can be told to be this workspace's (the row is then not reached). A
        destroy's calls name the machine its record holds (``resource_id``); a create's must name the workspace: a
        rule armed once the machine showed came too late for a call that follows the launch closely."""
        raise NotImplementedError

    def rule_hits(self, site, rule):
        """How many requests the rule acted on."""
        raise NotImplementedError


def address_ranges():
    """A loopback /24 for the cloud and its instances' private addresses, another for their public ones.

    The full size keeps the ready workspaces of every create row for the destroy rows: more than a shared /24's
    120 addresses a side."""
    host = pick_host()
    private = host.rsplit('.', 1)[0]
    public = pick_host().rsplit('.', 1)[0]
    while public == private:
        public = pick_host().rsplit('.', 1)[0]
    return {'host': host, 'guest_range': '{0}.10-{0}.250'.format(private),
            'public_range': '{0}.10-{0}.250'.format(public)}


class CloudSite(FaultSite):
    """A try-out cloud (its own process), a git server with a token, a journal and the controller secret; ``adapter``
    (a class attribute) says which provider's machines the runs make."""

    adapter = None
    # How long a run may take before it is killed as overdue: a cloud create does more than a container's (the
    # provider's SDK imported in every step's worker), and on a loaded machine a GCP create took
    # more than the three minutes of the Proxmox rows.
    run_timeout = 420

    def __init__(self, workdir, cloud, stack):  # pylint: disable=super-init-not-called
        self.cloud = cloud
        self._stack = stack
        # The matrix's code calls the fault API `cluster`.
        self.controller(workdir, cloud)
        self.api = None
        if self.adapter is not None:
            self.adapter.started(self)
        self.clear_faults()

    @classmethod
    def start(cls, workdir, **options):
        stack = contextlib.ExitStack()
        base = cls.adapter.cloud_options() if cls.adapter is not None else dict(CLOUD)
        base.update(address_ranges())
        cloud = stack.enter_context(cloud_process(os.path.join(workdir, 'cloud'), **dict(base, **options)))
        try:
            return cls(workdir, cloud, stack)
        except BaseException:
            stack.close()
            raise

    def stop(self):
        self.git.httpd.shutdown()
        self._stack.close()

    # ------------------------------------------------------------- faults

    def clear_faults(self):
        self.cloud.clear()
        self.logging_rule = None
        self.since = time.time()
        self.runs_at_clear = self.runs
        if self.adapter is not None:
            self.adapter.mark(self)

    def log_requests(self):
        self.adapter.log_requests(self)

    def requests(self):
        """(time, operation, resource ids named, identity) of every request since the faults were cleared."""
        return self.adapter.requests(self)

    def clones(self):
        return [identity for dummy, op, dummy2, identity in self.requests() if op == self.adapter.clone_op]

    # ------------------------------------------------------------- runs

    def finish(self, handle, timeout=None):
        return super().finish(handle, self.run_timeout if timeout is None else timeout)

    def run(self, ops, kill=None, timeout=None):
        return self.finish(self.start_run(ops, kill), timeout)

    def request_args(self, name):
        return {'repo': self.repo_url, 'ref': 'main', 'purpose': 'work on %s' % name, 'agent': 'fake'}

    def playbook_vars(self, op):
        info = self.info
        values = {'ephemera_journal_path': self.journal_path, 'ephemera_agents': AGENTS,
                  'ephemera_ssh_user': info['ssh_user'], 'ephemera_ssh_port': info['ssh_port'],
                  'ephemera_ssh_private_key': info['ssh_private_key'], 'ephemera_agent_user': info['agent_user'],
                  'ephemera_agent_user_is_ssh_user': info['agent_user'] == info['ssh_user']}
        values.update(TIMEOUTS)
        values.update(self.adapter.provider_vars(info))
        values.update(op.get('secrets') or {})
        if op['op'] == 'create':
            values.update(self.request_args(op['workspace']))
            values.update(op.get('lease') or {})
        if op['op'] == 'fork':
            values['children'] = [{'name': name} for name in op['children']]
        values.update(self.pool_vars(op))
        return values

    # ------------------------------------------------------------- reading

    def items(self):
        """resource id -> the machine as the adapter reads it (Adapter)."""
        return self.adapter.items(self)

    def instances(self):
        return self.items()

    def containers(self):
        return self.instances()

    def stop_guest_leftovers(self, keep):
        """Stop what SSH sessions started in guests of machines that are not running (runners, agents)."""
        self.adapter.stop_guest_leftovers(self, keep)


class CloudView:
    """The cloud as our controller sees it: which live machines are ours (and whose), which are foreign."""

    def __init__(self, site, secret):
        self.instances = site.items()
        fields = site.adapter.foreign_fields
        controller = ownership.controller_id(secret)
        self.ours = {}
        self.foreign = {}
        for resource_id, item in self.instances.items():
            name = item['workspace']
            if name and ownership.verdict(item['marker'], secret, controller, name, item['bound']) \
                    == ownership.VERIFIED:
                if item['live']:
                    self.ours[resource_id] = name
            else:
                self.foreign[resource_id] = {k: item[k] for k in fields}


def leaks(adapter, view, records):
    out = {}
    for resource_id, name in view.ours.items():
        ws = records.get(name)
        if ws is None:
            out[resource_id] = '%s: no journal record' % name
        elif ws['status'] == 'destroyed':
            out[resource_id] = '%s: the journal says destroyed' % name
        elif not adapter.accounts_for(ws, resource_id, view.instances[resource_id]):
            out[resource_id] = '%s: the journal names %s' % (name, ws['resource_id'])
    return out


def check_ready(adapter, view, ws):
    problems, guest = adapter.ready_machine(view, ws)
    return problems or invariants.check_guest(ws, guest)


def check_foreign(adapter, before, view, requests):
    out = []
    for resource_id, was in sorted(before.items()):
        now = view.foreign.get(resource_id)
        if now is None:
            out.append('foreign %s is gone' % resource_id)
        elif now != was:
            changed = sorted(k for k in was if now.get(k) != was[k])
            out.append('foreign %s changed: %s' % (resource_id, ', '.join(changed)))
    foreign = adapter.foreign_names(before, view)
    for dummy, op, named, dummy2 in requests:
        if adapter.is_read(op):
            continue
        for resource_id in named:
            if resource_id in foreign:
                out.append('our controller sent %s to foreign %s' % (op, resource_id))
    return out


def check_events(adapter, records, requests):
    """Every creating request sent carried what some record's recorded candidate gives."""
    held = set(adapter.candidate_identity(ws['candidate_id']) for ws in records.values()
               if ws.get('candidate_id') is not None)
    return ['%s was sent with %s %s, which no journal record holds' % (op, adapter.clone_identity, identity)
            for dummy, op, dummy2, identity in requests if adapter.creates(op) and identity not in held]


def check(site, names, foreign_before, requests, secret):
    """(what each invariant found, the leaks, the view) for the workspaces ``names``."""
    view = CloudView(site, secret)
    with site.journal() as journal:
        records = {ws['name']: ws for ws in journal.list_workspaces()}
    found = {k: [] for k in NAMES}
    for name in names:
        ws = records.get(name)
        if ws is None:
            continue
        if ws['status'] == 'ready':
            found['ready'].extend(check_ready(site.adapter, view, ws))
        elif ws['status'] == 'destroyed':
            owned = sorted(i for i, owner in view.ours.items() if owner == name)
            if owned:
                found['destroyed'].append('%s is destroyed, yet %s carries its marker' % (name, owned))
    found['foreign'] = check_foreign(site.adapter, foreign_before, view, requests)
    found['credentials'] = invariants.check_credentials(site)
    found['events'] = check_events(site.adapter, records, requests)
    return found, leaks(site.adapter, view, records), view


def log_line(cell):
    return '%-4s %-70s %s' % ('ok' if cell.ok else 'FAIL', cell.row[:70], '' if cell.ok else cell.notes)


class CloudMatrix(Matrix):
    """Kill chains (or single kills) through a cloud create's and destroy's points, and every lost answer of a call
    that acts, against one CloudSite (its adapter says what differs)."""

    def __init__(self, site, size='ci', log=print):
        super().__init__(site, size='ci', log=log)
        self.size = SIZES[size]
        self.size_name = size
        self.adapter = site.adapter
        self.lost_operations = []

    # -------------------------------------------------------------- setup

    def prepare(self):
        """The traces of a clean create and destroy, a foreign copy of the traced workspace's labels (made between
        them), and the calls that act in the traces."""
        site, adapter = self.site, self.adapter
        site.clear_faults()
        site.log_requests()
        first = self.name('a')
        cell = Cell('%s: no fault (the traced create and destroy)' % adapter.label, 'clean', [first])
        with site.working_on(cell):
            traced = site.run([site.create_op(first)])
        if not traced.ok:
            raise RuntimeError('the clean create on %s failed: %s' % (adapter.title, traced.explain()))
        self.create_points = points_of(traced.trace, first)
        self.secret = site.secret()
        created = site.requests()
        ours = [item for item in site.items().values() if item['workspace'] == first]
        adapter.copy_foreign(site, ours[0], first)
        with site.working_on(cell):
            traced = site.run([site.destroy_op(first)])
        if not traced.ok:
            raise RuntimeError('the clean destroy on %s failed: %s' % (adapter.title, traced.explain()))
        self.destroy_points = points_of(traced.trace, first)
        destroyed = [r for r in site.requests() if r not in created]
        self.lost_operations = adapter.lost_calls(self.create_points, self.destroy_points, created, destroyed, first)
        self.lost_operations += adapter.extra_faults(self.lost_operations)
        self.snapshot()
        cell.converged = status_of(site, first) == 'destroyed'
        self.judge([cell])
        self.cells.append(cell)

    def snapshot(self):
        self.foreign_before = CloudView(self.site, self.secret).foreign

    def judge(self, cells):
        requests = self.site.requests()
        # Faults still armed would hit the checks' own reads and SSH sessions.
        self.site.cloud.clear()
        for cell in cells:
            found, leaked, dummy = check(self.site, cell.names, self.foreign_before, requests, self.secret)
            cell.foreign = found.pop('foreign')
            cell.violations = {k: v for k, v in found.items() if v}
            cell.leaks = ['%s %s' % (i, why) for i, why in sorted(leaked.items())
                          if any(why.startswith(name + ':') for name in cell.names)]
        running = set(i for i, item in self.site.items().items() if item['running'])
        self.site.stop_guest_leftovers(running)

    # -------------------------------------------------------------- kills

    def kill_cells(self, op, points):
        work = super().kill_cells(op, points)
        for cell, dummy in work:
            cell.row = '%s %s' % (self.adapter.label, cell.row)
        return work

    def run_kills(self):
        if not self.size['chains']:
            for op, points in (('create', self.create_points), ('destroy', self.destroy_points)):
                work = self.kill_cells(op, points)
                plain = [w for w in work if w[0].variant != 'reconcile']
                for start in range(0, len(plain), 4):
                    self.wave(plain[start:start + 4])
                # Reconcile resumes every unfinished create it finds: those cells run one at a time.
                for item in [w for w in work if w[0].variant == 'reconcile']:
                    self.wave([item])
            return
        adapter = self.adapter
        label = adapter.label
        points = {op: adapter.decisive(found) for op, found in (
            ('create', self.create_points), ('destroy', self.destroy_points))}
        passed = len(self.create_points) + len(self.destroy_points) - sum(len(p) for p in points.values())
        own = {op: adapter.own_rows(op, points[op]) for op in points}
        for op in points:
            points[op] = [p for p in points[op] if p not in own[op]]
        self.log('%s ci: %d points (steps, journal commits and guest commands between the calls that act) are killed '
                 'in the full size only; %d in rows of their own' % (label, passed, sum(len(p) for p in own.values())))
        rows = {}
        for op in ('create', 'destroy'):
            rows[op] = {point: Cell('%s kill %s: %s #%d' % (label, op, point[0], point[1]), 'kill', [], 'rerun')
                        for point in points[op]}
        work = [self._chain(rows[op], op, points[op], 'rerun') for op in ('create', 'destroy')]
        singles = [item for op in ('create', 'destroy') for item in self.kill_cells(op, own[op])]
        if singles:
            work.append(lambda: [self._as(cell, fn) for cell, fn in singles])
        calls = [item for item in self.lost_operations if adapter.in_ci(item[1])]
        beside = [item for item in calls if not adapter.exclusive(item[1])]
        alone = [item for item in calls if adapter.exclusive(item[1])]
        lost = []
        # The lost answers run beside the chains: each fault cuts only the answer to its own workspace's request.
        work.append(lambda: self.lost_rows(lost, beside))
        self.site.clear_faults()
        self.site.log_requests()
        with concurrent.futures.ThreadPoolExecutor(max_workers=len(work)) as pool:
            for future in [pool.submit(fn) for fn in work]:
                future.result()
        # A fault the cloud cannot match to one workspace: with nothing else running.
        self.lost_rows(lost, alone)
        cells = [c for op in ('create', 'destroy') for c in rows[op].values()] + [c for c, dummy in singles] + lost
        self.judge(cells)
        self.cells.extend(cells)
        for cell in cells:
            self.log(log_line(cell))

    # -------------------------------------------------------------- lost answers

    def run_lost(self):
        """The full size: the lost answers after the kills, one after the other."""
        lost = []
        self.site.clear_faults()
        self.site.log_requests()
        self.lost_rows(lost)
        self.judge(lost)
        self.cells.extend(lost)
        for cell in lost:
            self.log(log_line(cell))

    def lost_rows(self, cells, calls=None):
        """One row per (op, call), one after the other. The creates go first: the workspaces they leave ready are
        the ones the destroys' rows destroy."""
        calls = self.lost_operations if calls is None else calls
        ready = []
        for wanted in ('create', 'destroy'):
            for op, call in [item for item in calls if item[0] == wanted]:
                cell = Cell(self.adapter.row_of(op, call), 'lost', [self.name('l')])
                cells.append(cell)
                with self.site.working_on(cell):
                    self._lost_answer(cell, op, call, ready)
                if op == 'create' and status_of(self.site, cell.names[0]) == 'ready':
                    ready.append(cell.names[0])

    def _lost_answer(self, cell, op, call, ready):
        site, adapter = self.site, self.adapter
        started = time.monotonic()
        if op == 'destroy':
            if ready:
                cell.names[0] = ready.pop(0)
            elif not self._take_ready(cell):
                return
        name = cell.names[0]
        wanted, make_op = operation(site, op)
        resource_id = None
        if op == 'destroy':
            with site.journal() as journal:
                resource_id = journal.get_workspace(name)['resource_id']
        rule = adapter.lost_rule(site, op, call, name, resource_id)
        handle = site.start_run([make_op(name)])
        first = site.finish(handle)
        if not rule or not adapter.rule_hits(site, rule):
            cell.reached = False
            cell.notes.append('no %s of %s was sent' % (call, name))
        if not first.ok:
            cell.notes.append('the run that met the fault: %s' % first.explain()[:200])
        if status_of(site, name) == wanted:
            cell.converged = True
        else:
            converge(site, cell, name, wanted, make_op)
        cell.seconds = time.monotonic() - started

    # -------------------------------------------------------------- all

    def run(self, seeds=None):
        self.prepare()
        self.run_kills()
        if not self.size['chains']:
            # The ci size ran them beside its chains.
            self.run_lost()
        return self.cells


def run_part(site_class, matrix_class, size, keep, log=print, label=None):
    """One cloud part on a try-out cloud of its own: (cells, uncovered). Logs ``<label>: P points, R runs in S s``
    (``label``: the adapter's unless given)."""
    import shutil
    import tempfile
    started = time.monotonic()
    label = label or site_class.adapter.label
    workdir = tempfile.mkdtemp(prefix='ephemera-faults-%s-' % label)
    site = site_class.start(workdir)
    try:
        runner = matrix_class(site, size=size, log=log)
        cells = runner.run()
    finally:
        site.stop()
        if not keep:
            shutil.rmtree(workdir, ignore_errors=True)
        else:
            log('kept: %s' % workdir)
    log('%s: %d points, %d runs in %.0f s' % (label, len(runner.create_points) + len(runner.destroy_points),
                                              len(cells), time.monotonic() - started))
    return cells, []
