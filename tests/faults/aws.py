"""The AWS rows of the crash-safety matrix, on a try-out cloud of their own (tests/localcloud, docs/localcloud.md).

Kill points are found as the Proxmox rows' are: a clean create and a clean destroy of a workspace on EC2 (provider
aws, the shipped playbooks) run first with the failpoint trace on, and every point they passed is a row: step
starts, journal commits, the answer of every EC2 call that acts (``aws RunInstances``, ``aws CreateTags``,
``aws TerminateInstances``, ...) and guest commands. The EC2 calls that act in those traces are also the lost-answer
rows: the cloud's proxy lets moto act and cuts the connection before the answer.

After a kill the same playbook runs again (rerun), or reconcile first (reconcile), until the workspace converged
(ready, destroyed) within two runs. Then, over the cloud as moto holds it (no fault, no rewriting in between):

    ready        every workspace the journal calls ready has exactly one live instance carrying its marker (the
                 marker verifies for this controller, bound to the instance's ClientToken), the one its record
                 names, running, reachable over SSH with its pinned host key, its runner answering
    destroyed    no live instance carries the marker of a workspace the journal calls destroyed
    foreign      the foreign principal's instances (untagged, otherwise tagged, one copying our tags without a marker
                 that verifies, one copying a workspace's tags) are as they were: state and tags; no request of ours
                 other than a read named one
    credentials  the git token and the agent's key are where tests/faults/invariants.py says (the same check)
    events       every RunInstances our controller sent carried a ClientToken a journal record holds as the
                 candidate it recorded before dispatching

A leak is a live instance whose marker verifies for this controller and that the journal does not account for
(no record, a destroyed one, or one naming another instance). A live instance is one moto does not hold as
terminated.
"""

import concurrent.futures
import contextlib
import json
import os
import sys
import threading
import time

from ansible_collections.ephemera.workspaces.plugins.module_utils.core import ownership
from ansible_collections.ephemera.workspaces.plugins.module_utils.guest import operations as guest_ops
from ansible_collections.ephemera.workspaces.plugins.module_utils.guest.ssh import Guest, SshError
from tests.faults import invariants
from tests.faults.cells import Cell, converge, operation, status_of
from tests.faults.matrix import Matrix, points_of
from tests.faults.site import AGENTS, GIT_USER, FaultSite
from tests.integration.create.gitserver import GitHttpServer, Repo
from tests.localcloud.fixtures import cloud_process
from tests.localpve.guests import end_guest_processes

NAMES = ('ready', 'destroyed', 'foreign', 'credentials', 'events')
TAG_MARKER = 'ephemera:marker'
TAG_WORKSPACE = 'ephemera:workspace'
TAG_TOKEN = 'ephemera:token'
# EC2 calls that only read: what a request of ours may do to a foreign instance.
READS = ('Describe', 'Get', 'List')
# The cloud's state timings in the matrix (seconds pending, stopping, shutting-down): EC2's on the way, quickly.
CLOUD = {'boot_secs': 0.2, 'stop_secs': 0.2, 'shutdown_secs': 0.2}
# ci: chains through the decisive points (below), the same playbook again; full: every point, each killed in a run of
# its own, then the same playbook again or reconcile first.
SIZES = {'ci': {'chains': True, 'variants': ('rerun',), 'jobs': 2},
         'full': {'chains': False, 'variants': ('rerun', 'reconcile'), 'jobs': 2}}


def token_number(token):
    """The number the collection binds an instance's marker to: its provider's own function."""
    from ansible_collections.ephemera.workspaces.plugins.module_utils.providers.aws.provider import (
        token_number as bound)
    return bound(token)


def aws_decisive(points):
    """The ci size's points: the answer of every EC2 call that acts (``aws RunInstances``, ``aws CreateTags``,
    ``aws StopInstances``, ``aws TerminateInstances``: the cloud acted, the journal never heard), and the journal
    commits that record a launch's or a termination's dispatch before it is sent (a kill there leaves an outcome
    the next run must look up: nothing was sent). The other points (step starts, the queue's, the guest's commands,
    the commits between) are the create and destroy flows the Proxmox rows cover; the full size kills them too."""
    return [(point, nth) for point, nth in points
            if point.split(' ', 1)[-1].startswith('aws ') or (point.split(' ', 1)[-1], nth) in DISPATCHES]


# The commits of a launch's and a termination's dispatch: (point without its step, nth).
DISPATCHES = (('journal clone', 1), ('journal delete', 1))


class AwsSite(FaultSite):
    """A try-out cloud (its own process), a git server with a token, a journal and the controller secret."""

    def __init__(self, workdir, cloud, stack):  # pylint: disable=super-init-not-called
        self.workdir = workdir
        self.cloud = cloud
        # The matrix's code calls the fault API `cluster`.
        self.cluster = cloud
        self.info = cloud.info
        self._stack = stack
        self.guests_dir = os.path.join(self.info['state_dir'], 'guests')
        self.journal_path = os.path.join(workdir, 'controller', 'journal.sqlite')
        os.makedirs(os.path.dirname(self.journal_path), exist_ok=True)
        self.repo = Repo(os.path.join(workdir, 'repo'))
        self.git_token = 'gtok-' + os.urandom(16).hex()
        self.agent_key = 'akey-' + os.urandom(16).hex()
        self.git = GitHttpServer(os.path.dirname(self.repo.bare), GIT_USER, self.git_token)
        self.repo_url = self.git.url_of(self.repo.bare)
        self.runs = 0
        self._lock = threading.Lock()
        self._current = threading.local()
        self.inventory = os.path.join(workdir, 'inventory.json')
        with open(self.inventory, 'w') as out:
            json.dump({'all': {'hosts': {'localhost': {'ansible_connection': 'local',
                                                       'ansible_python_interpreter': sys.executable}}}}, out)
        self.runs_at_clear = 0
        self.logging_rule = None
        self.api = None
        self.clear_faults()

    @classmethod
    def start(cls, workdir, **options):
        stack = contextlib.ExitStack()
        cloud = stack.enter_context(cloud_process(os.path.join(workdir, 'cloud'), **dict(CLOUD, **options)))
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

    def log_requests(self):
        """A rule that records every request and lets the fault rules act on it (added before or after them)."""
        if self.logging_rule is None:
            self.logging_rule = self.cloud.proxy_add('log', '*', times=None)['id']

    def requests(self):
        """(time, operation, instance ids named, client token) of every request since the faults were cleared."""
        return sorted((hit['time'], hit['operation'], tuple(hit.get('instances') or ()), hit.get('client_token'))
                      for rule in self.cloud.proxy_rules() if rule['action'] == 'log' for hit in rule['hits'])

    def clones(self):
        return [token for dummy, op, dummy2, token in self.requests() if op == 'RunInstances']

    # ------------------------------------------------------------- runs

    def request_args(self, name):
        return {'repo': self.repo_url, 'ref': 'main', 'purpose': 'work on %s' % name, 'agent': 'fake'}

    def playbook_vars(self, op):
        info, seed = self.info, self.info['seed']
        values = {
            'ephemera_provider': 'aws', 'ephemera_aws_region': info['region'],
            'ephemera_aws_endpoint_url': info['endpoint_url'], 'ephemera_aws_access_key_id': info['access_key_id'],
            'ephemera_aws_secret_access_key': info['secret_access_key'], 'ephemera_template': seed['image_id'],
            'ephemera_aws_instance_type': seed['instance_type'], 'ephemera_aws_subnet_id': seed['subnet_id'],
            'ephemera_aws_security_group_ids': [seed['security_group_id']], 'ephemera_aws_key_name': seed['key_name'],
            'ephemera_pool': seed['scope'], 'ephemera_aws_visibility_window': 30, 'ephemera_aws_absence_window': 5,
            'ephemera_aws_retry_timeout': 20,
            'ephemera_journal_path': self.journal_path, 'ephemera_agents': AGENTS,
            'ephemera_guest_root': info['guest_prefix'], 'ephemera_ssh_user': info['ssh_user'],
            'ephemera_ssh_port': info['ssh_port'], 'ephemera_ssh_private_key': info['ssh_private_key'],
            'ephemera_agent_user': info['agent_user'],
            'ephemera_task_timeout': 60, 'ephemera_lock_timeout': 30, 'ephemera_address_timeout': 30,
            'ephemera_ssh_timeout': 30, 'ephemera_runner_timeout': 20,
        }
        values.update(op.get('secrets') or {})
        if op['op'] == 'create':
            values.update(self.request_args(op['workspace']))
            values.update(op.get('lease') or {})
        return values

    # ------------------------------------------------------------- reading

    def instances(self):
        """instance id -> the cloud's view of it (state, moto_state, tags, client_token, ...)."""
        return dict((i['instance_id'], i) for i in self.cloud.instances())

    def containers(self):
        return self.instances()

    def stop_guest_leftovers(self, keep):
        """Stop what SSH sessions started in guests of instances that are not running (runners, agents)."""
        for entry in os.listdir(self.guests_dir) if os.path.isdir(self.guests_dir) else []:
            if entry.startswith('i-') and entry not in keep:
                end_guest_processes(os.path.join(self.guests_dir, entry) + os.sep)


def live(instance):
    return instance['moto_state'] != 'terminated'


class CloudView:
    """The cloud as our controller sees it: which live instances are ours (and whose), which are foreign."""

    def __init__(self, site, secret):
        self.instances = site.instances()
        controller = ownership.controller_id(secret)
        self.ours = {}
        self.foreign = {}
        for instance_id, item in self.instances.items():
            tags = item['tags']
            name = tags.get(TAG_WORKSPACE)
            token = item.get('client_token') or tags.get(TAG_TOKEN)
            bound = token_number(token) if token else -1
            if name and ownership.verdict(tags.get(TAG_MARKER), secret, controller, name, bound) == ownership.VERIFIED:
                if live(item):
                    self.ours[instance_id] = name
            else:
                self.foreign[instance_id] = {'state': item['moto_state'], 'tags': tags}


def leaks(view, records):
    out = {}
    for instance_id, name in view.ours.items():
        ws = records.get(name)
        if ws is None:
            out[instance_id] = '%s: no journal record' % name
        elif ws['status'] == 'destroyed':
            out[instance_id] = '%s: the journal says destroyed' % name
        elif ws.get('resource_id') not in (None, instance_id):
            out[instance_id] = '%s: the journal names %s' % (name, ws['resource_id'])
    return out


def check_ready(site, view, ws):
    owned = sorted(i for i, name in view.ours.items() if name == ws['name'])
    if owned != [ws['resource_id']]:
        return ['%s is ready with %s, but its live instances are %s' % (ws['name'], ws['resource_id'], owned)]
    state = view.instances[ws['resource_id']]['state']
    if state != 'running':
        return ['%s is ready, but %s is %s' % (ws['name'], ws['resource_id'], state)]
    req = ws['params']
    layout = guest_ops.Layout(req['guest_root'], ws['resource_id'], req['checkout_path'], req['agent_user'])
    try:
        with Guest(ws['address'], port=req['ssh_port'], user=req['ssh_user'], key_file=req['ssh_key_path'],
                   host_key=ws['facts'].get('host_key')).connect() as connected:
            answer = guest_ops.runner_call(connected, layout, req['ssh_user'], {'op': 'ping'})
    except SshError as err:
        return ['%s is ready but SSH to %s fails: %s' % (ws['name'], ws['address'], err)]
    if not answer.get('alive'):
        return ['%s is ready but its runner does not answer: %s' % (ws['name'], answer.get('error'))]
    return []


def check_foreign(before, view, requests):
    out = []
    for instance_id, was in sorted(before.items()):
        now = view.foreign.get(instance_id)
        if now is None:
            out.append('foreign %s is gone' % instance_id)
        elif now != was:
            changed = sorted(k for k in ('state', 'tags') if now[k] != was[k])
            out.append('foreign %s changed: %s' % (instance_id, ', '.join(changed)))
    foreign = set(before) | set(view.foreign)
    for dummy, op, named, dummy2 in requests:
        if op.startswith(READS):
            continue
        for instance_id in named:
            if instance_id in foreign:
                out.append('our controller sent %s to foreign %s' % (op, instance_id))
    return out


def check_events(records, requests):
    """Every RunInstances sent carried a ClientToken some record holds as its recorded candidate."""
    tokens = set(ws.get('candidate_id') for ws in records.values()) - set([None])
    return ['RunInstances was sent with ClientToken %s, which no journal record holds' % token
            for dummy, op, dummy2, token in requests if op == 'RunInstances' and token not in tokens]


def check(site, names, foreign_before, requests, secret):
    view = CloudView(site, secret)
    with site.journal() as journal:
        records = dict((ws['name'], ws) for ws in journal.list_workspaces())
    found = dict((k, []) for k in NAMES)
    for name in names:
        ws = records.get(name)
        if ws is None:
            continue
        if ws['status'] == 'ready':
            found['ready'].extend(check_ready(site, view, ws))
        elif ws['status'] == 'destroyed':
            owned = sorted(i for i, owner in view.ours.items() if owner == name)
            if owned:
                found['destroyed'].append('%s is destroyed, yet %s carries its marker' % (name, owned))
    found['foreign'] = check_foreign(foreign_before, view, requests)
    found['credentials'] = invariants.check_credentials(site)
    found['events'] = check_events(records, requests)
    return found, leaks(view, records), view


class AwsMatrix(Matrix):
    """Kill chains (or single kills) through the AWS create's and destroy's points, and every lost answer of an EC2
    call that acts, against one AwsSite."""

    def __init__(self, site, size='ci', log=print):
        super().__init__(site, size='ci', log=log)
        self.size = SIZES[size]
        self.lost_operations = []

    def prepare(self):
        """The foreign instances (seeded; and one copying a workspace's tags), the traces of a clean create and
        destroy."""
        self.site.clear_faults()
        self.site.log_requests()
        first = self.name('a')
        cell = Cell('aws: no fault (the traced create and destroy)', 'clean', [first])
        with self.site.working_on(cell):
            traced = self.site.run([self.site.create_op(first)])
        if not traced.ok:
            raise RuntimeError('the clean create on AWS failed: %s' % traced.explain())
        self.create_points = points_of(traced.trace, first)
        self.secret = self.site.secret()
        ours = [i for i, item in self.site.instances().items() if item['tags'].get(TAG_WORKSPACE) == first]
        # Another principal copies a workspace's tags onto an instance of its own (the marker is not ours to make).
        self.site.cloud.foreign_create(copy_tags_of=ours[0])
        with self.site.working_on(cell):
            traced = self.site.run([self.site.destroy_op(first)])
        if not traced.ok:
            raise RuntimeError('the clean destroy on AWS failed: %s' % traced.explain())
        self.destroy_points = points_of(traced.trace, first)
        self.lost_operations = []
        for op, points in (('create', self.create_points), ('destroy', self.destroy_points)):
            for point, nth in points:
                what = point.split(' ', 1)[-1]
                if what.startswith('aws ') and (op, what[4:]) not in self.lost_operations:
                    self.lost_operations.append((op, what[4:]))
        self.snapshot()
        cell.converged = status_of(self.site, first) == 'destroyed'
        self.judge([cell])
        self.cells.append(cell)

    def snapshot(self):
        self.foreign_before = CloudView(self.site, self.secret).foreign

    def judge(self, cells):
        requests = self.site.requests()
        self.site.cloud.clear()
        for cell in cells:
            found, leaked, dummy = check(self.site, cell.names, self.foreign_before, requests, self.secret)
            cell.foreign = found.pop('foreign')
            cell.violations = dict((k, v) for k, v in found.items() if v)
            cell.leaks = ['%s %s' % (i, why) for i, why in sorted(leaked.items())
                          if any(why.startswith(name + ':') for name in cell.names)]
        running = set(i for i, item in self.site.instances().items() if item['state'] == 'running')
        self.site.stop_guest_leftovers(running)

    def kill_cells(self, op, points):
        work = super().kill_cells(op, points)
        for cell, dummy in work:
            cell.row = 'aws ' + cell.row
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
        points = dict((op, aws_decisive(found)) for op, found in (
            ('create', self.create_points), ('destroy', self.destroy_points)))
        passed = len(self.create_points) + len(self.destroy_points) - sum(len(p) for p in points.values())
        self.log('aws ci: %d points (steps, journal commits and guest commands between the EC2 calls) are killed in '
                 'the full size only' % passed)
        rows = {}
        for op in ('create', 'destroy'):
            rows[op] = dict((point, Cell('aws kill %s: %s #%d' % (op, point[0], point[1]), 'kill', [], 'rerun'))
                            for point in points[op])
        work = [(None, self._chain(rows[op], op, points[op], 'rerun')) for op in ('create', 'destroy')]
        lost = []
        # The lost answers run beside the chains: each rule cuts only the answer to its own workspace's request.
        work.append((None, lambda: self.lost_rows(lost)))
        self.site.clear_faults()
        self.site.log_requests()
        with concurrent.futures.ThreadPoolExecutor(max_workers=len(work)) as pool:
            for future in [pool.submit(fn) for dummy, fn in work]:
                future.result()
        cells = [c for op in ('create', 'destroy') for c in rows[op].values()] + lost
        self.judge(cells)
        self.cells.extend(cells)
        for cell in cells:
            self.log('%-4s %-70s %s' % ('ok' if cell.ok else 'FAIL', cell.row[:70], '' if cell.ok else cell.notes))

    def run_lost(self):
        """The full size: the lost answers after the kills, alone."""
        lost = []
        self.site.clear_faults()
        self.site.log_requests()
        self.lost_rows(lost)
        self.judge(lost)
        self.cells.extend(lost)
        for cell in lost:
            self.log('%-4s %-70s %s' % ('ok' if cell.ok else 'FAIL', cell.row[:70], '' if cell.ok else cell.notes))

    def lost_rows(self, cells):
        """One row per EC2 call that acts, one after the other. The creates go first: the workspaces they leave ready
        are the ones the destroys' rows destroy."""
        ready = []
        for wanted in ('create', 'destroy'):
            for op, call in [item for item in self.lost_operations if item[0] == wanted]:
                cell = Cell('aws lost answer: %s (%s)' % (call, op), 'lost', [self.name('l')])
                cells.append(cell)
                with self.site.working_on(cell):
                    self._lost_answer(cell, op, call, ready)
                if op == 'create' and status_of(self.site, cell.names[0]) == 'ready':
                    ready.append(cell.names[0])

    def _lost_answer(self, cell, op, call, ready):
        site = self.site
        started = time.monotonic()
        if op == 'destroy':
            if ready:
                cell.names[0] = ready.pop(0)
            elif not self._take_ready(cell):
                return
        name = cell.names[0]
        wanted, make_op = operation(site, op)
        if op == 'destroy':
            with site.journal() as journal:
                instance_id = journal.get_workspace(name)['resource_id']
            rule = site.cloud.drop_response(call, match=instance_id)
            handle = site.start_run([make_op(name)])
        elif call == 'RunInstances':
            # The launch request carries the workspace's name as its ephemera:workspace tag.
            rule = site.cloud.drop_response(call, match=name)
            handle = site.start_run([make_op(name)])
        else:
            # A later call of the create names the instance: armed once the launch made it.
            handle = site.start_run([make_op(name)])
            instance_id = self._launched(name)
            rule = site.cloud.drop_response(call, match=instance_id) if instance_id else None
        first = site.finish(handle)
        hits = [r for r in site.cloud.proxy_rules() if r['id'] == rule['id']][0]['hits'] if rule else []
        if not hits:
            cell.reached = False
            cell.notes.append('no %s of %s was sent' % (call, name))
        if not first.ok:
            cell.notes.append('the run that lost the answer: %s' % first.explain()[:200])
        if status_of(site, name) == wanted:
            cell.converged = True
        else:
            converge(site, cell, name, wanted, make_op)
        cell.seconds = time.monotonic() - started

    def _launched(self, name, timeout=60):
        """The id of the instance launched for workspace ``name`` (by its tag), once there is one."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for instance_id, item in self.site.instances().items():
                if item['tags'].get(TAG_WORKSPACE) == name:
                    return instance_id
            time.sleep(0.2)
        return None

    def run(self, seeds=None):
        self.prepare()
        self.run_kills()
        if not self.size['chains']:
            # The ci size ran them beside its chains.
            self.run_lost()
        return self.cells
