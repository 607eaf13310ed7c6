"""The Azure rows of the crash-safety matrix, on a try-out cloud of their own (its ARM fake: tests/localcloud/azure.py,
docs/localcloud.md).

As the AWS rows (tests/faults/aws.py), on machinery of their own: a clean create and a clean destroy of a workspace
on Azure (provider azure, the shipped playbooks) run first with the failpoint trace on and with the fake logging
every request; every point the traces passed is a kill row, and every ARM call that acts in those runs (a PUT, PATCH
or DELETE of a public IP, NIC, VM or disk: the fake's operation ids) is a lost-answer row: the fake acts and cuts
the connection before the answer.

After a kill the same playbook runs again (rerun), or reconcile first (reconcile), until the workspace converged
(ready, destroyed) within two runs. Then, over the fake's resources as it holds them:

    ready        every workspace the journal calls ready has exactly one live set carrying its marker (a VM, NIC,
                 public IP and OS disk whose ephemera:marker verifies for this controller, bound to the set's base
                 name), the VM the record names, running, reachable over SSH with its pinned host key, its runner
                 answering
    destroyed    no resource carries the marker of a workspace the journal calls destroyed
    foreign      the foreign principal's resources (a public IP, a NIC bound to it, a public IP copying a
                 workspace's tags) are as they were (tags, bindings, identity), and no request of ours other than a
                 read named one
    credentials  the git token and the agent's key are where tests/faults/invariants.py says
    events       every creating PUT our controller sent named a set whose base a journal record holds as the
                 candidate it recorded before the first PUT

A leak is a resource whose marker verifies for this controller and that the journal does not account for (no record,
a destroyed one, or one naming another set).
"""

import concurrent.futures
import contextlib
import os
import re
import time

from ansible_collections.ephemera.workspaces.plugins.module_utils.core import ownership
from tests.faults import invariants
from tests.faults.cells import Cell, converge, operation, status_of
from tests.faults.matrix import Matrix, points_of
from tests.faults.site import AGENTS, FaultSite, Kill
from tests.localcloud.fixtures import cloud_process
from tests.localpve.guests import end_guest_processes

NAMES = ('ready', 'destroyed', 'foreign', 'credentials', 'events')
# The cloud's state timings in the matrix (seconds pending, stopping, shutting-down): quickly.
CLOUD = {'boot_secs': 0.2, 'stop_secs': 0.2, 'shutdown_secs': 0.2}
# ci: chains through every Azure point (below), the same playbook again, every lost answer beside them; full: every
# point, each killed in a run of its own, then the same playbook again or reconcile first, then every lost answer.
SIZES = {'ci': {'chains': True, 'variants': ('rerun',), 'jobs': 2},
         'full': {'chains': False, 'variants': ('rerun', 'reconcile'), 'jobs': 2}}
TAG_MARKER = 'ephemera:marker'
TAG_WORKSPACE = 'ephemera:workspace'
TAG_SET = 'ephemera:set'
# ARM operations that only read: what a request of ours may do to a foreign resource.
READS = ('_Get', '_List', '_ListAll', '_InstanceView')
ACTING = ('_CreateOrUpdate', '_Delete', '_Update', '_UpdateTags', '_Start', '_PowerOff', '_Deallocate', '_Restart')
SUFFIXES = ('-vm', '-nic', '-pip', '-osdisk')


def set_number(base):
    from ansible_collections.ephemera.workspaces.plugins.module_utils.providers.azure.provider import (
        set_number as bound)
    return bound(base)


def base_of_name(name):
    for suffix in SUFFIXES:
        if name.endswith(suffix):
            return name[:-len(suffix)]
    return name


def azure_decisive(points):
    """The ci size's points: every Azure point of the traces (the set's progress commits, ``journal azure ...``, one
    before and one after each member's PUT and DELETE, its acceptance, its claim; and the answer of every ARM call
    that acts, ``azure PUT publicIPAddresses``, ...: Azure acted, the record does not know yet), and the flows' commits
    around them (CI_POINTS: a create's clone intent and confirmation, a destroy's mark, its delete's intent, its
    end). The other points (step starts, the queue's, guest commands) are the flows the Proxmox rows cover; the full
    size kills every point."""
    return [(point, nth) for point, nth in points
            if point.split(' ', 1)[-1].startswith(('azure ', 'journal azure ')) or (point, nth) in CI_POINTS]


CI_POINTS = (('create.clone journal clone', 1), ('create.clone journal clone', 2),
             ('create.wait_clone journal clone_confirmed', 1), ('destroy.mark journal destroy', 1),
             ('destroy.delete journal delete', 1), ('destroy.delete journal delete', 2),
             ('destroy.finish journal destroyed', 1))
# A kill right after a member's PUT was recorded as dispatched, before it went out: its outcome is unknown to the
# next run, which by the provider's rule may not send it again (a 404 after a PUT of unknown outcome is no permission).
UNSENT = re.compile(r'(^| )journal azure (pip|nic|vm) dispatched$')
CREATING = {'pip': 'PublicIPAddresses_CreateOrUpdate', 'nic': 'NetworkInterfaces_CreateOrUpdate',
            'vm': 'VirtualMachines_CreateOrUpdate'}
# The ci size's lost answers: every PUT and DELETE of a member (the full size loses the answer of every ARM call that
# acts in the traces: the lease labels' tag updates and the power-off too).
CI_LOST = ('_CreateOrUpdate', '_Delete')


class AzureSite(FaultSite):
    """A try-out cloud (its own process; the ARM fake is the part used), a git server with a token, a journal and the
    controller secret (the Azure provider's set records are in the journal)."""

    def __init__(self, workdir, cloud, stack):  # pylint: disable=super-init-not-called
        self.cloud = cloud
        self._stack = stack
        # The matrix's code calls the fault API `cluster`.
        self.controller(workdir, cloud)
        self.api = None
        self.clear_faults()

    @classmethod
    def start(cls, workdir, **options):
        stack = contextlib.ExitStack()
        cloud = stack.enter_context(cloud_process(os.path.join(workdir, 'cloud'), **dict(CLOUD, **options)))
        try:
            cloud.azure('settings', pending_secs=0.2)
            return cls(workdir, cloud, stack)
        except BaseException:
            stack.close()
            raise

    def stop(self):
        self.git.httpd.shutdown()
        self._stack.close()

    def clear_faults(self):
        self.cloud.clear()
        self.logging_rule = None
        self.since = time.time()
        self.runs_at_clear = self.runs

    def request_args(self, name):
        return {'repo': self.repo_url, 'ref': 'main', 'purpose': 'work on %s' % name, 'agent': 'fake'}

    def log_requests(self):
        if self.logging_rule is None:
            self.logging_rule = self.cloud.azure('rule', action='log', operation='*', times=None)['id']

    def requests(self):
        """(time, operation, resource names, None) of every ARM request since the faults were cleared."""
        return sorted((hit['time'], hit['operation'], tuple(n for n in hit['names'] if not n.startswith('/')), None)
                      for rule in self.cloud.azure('rules') if rule['action'] == 'log' for hit in rule['hits'])

    def clones(self):
        return [names[0] for dummy, op, names, dummy2 in self.requests()
                if op == 'PublicIPAddresses_CreateOrUpdate' and names]

    def playbook_vars(self, op):
        info = self.info
        az = info['azure']
        seed = az['seed']
        values = {
            'ephemera_provider': 'azure', 'ephemera_azure_endpoint_url': az['resource_manager_url'],
            'ephemera_azure_authority_host': az['authority_host'], 'ephemera_azure_ca_file': az['ca_file'],
            'ephemera_azure_subscription_id': az['subscription_id'], 'ephemera_azure_tenant_id': az['tenant_id'],
            'ephemera_azure_client_id': az['client_id'], 'ephemera_azure_client_secret': az['client_secret'],
            'ephemera_azure_resource_group': seed['resource_group'], 'ephemera_azure_location': seed['location'],
            'ephemera_azure_subnet_id': seed['subnet_id'], 'ephemera_azure_vm_size': seed['vm_size'],
            'ephemera_azure_ssh_public_key': info['ssh_public_key'], 'ephemera_template': seed['image_urn'],
            'ephemera_azure_lost_answer_window': 10,
            'ephemera_azure_operation_timeout': 60,
            'ephemera_pool': 'disposable-workspaces',
            'ephemera_journal_path': self.journal_path, 'ephemera_agents': AGENTS,
            'ephemera_guest_root': az['guest_prefix'], 'ephemera_ssh_user': info['ssh_user'],
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

    def resources(self):
        """ARM id -> the fake's view of the resource (kind, name, tags, owner, identity, bindings, sshd)."""
        return dict((r['id'], r) for r in self.cloud.azure('resources'))

    def instances(self):
        return self.resources()

    def stop_guest_leftovers(self, keep):
        """Stop what SSH sessions started in guests of VMs that are not running (runners, agents)."""
        root = os.path.join(self.guests_dir, 'azure')
        for dirpath, dirnames, dummy in os.walk(root):
            if 'root' in dirnames:
                vm_id = dirpath[len(root):]
                if vm_id not in keep:
                    end_guest_processes(os.path.join(dirpath, 'root') + os.sep)
                dirnames[:] = []


class CloudView:
    """The fake's resources as our controller sees them: which are ours (and whose), which are foreign."""

    def __init__(self, site, secret):
        self.resources = site.resources()
        controller = ownership.controller_id(secret)
        self.ours = {}
        self.foreign = {}
        for rid, item in self.resources.items():
            tags = item['tags']
            name, base = tags.get(TAG_WORKSPACE), tags.get(TAG_SET)
            if name and base and ownership.verdict(tags.get(TAG_MARKER), secret, controller, name,
                                                   set_number(base)) == ownership.VERIFIED:
                self.ours[rid] = (name, base)
            else:
                self.foreign[rid] = {'tags': tags, 'identity': item.get('identity'),
                                     'bindings': dict((k, item.get(k)) for k in (
                                         'ip_configuration', 'public_ip', 'virtual_machine', 'managed_by'))}


def vm_of(view, name):
    return sorted(rid for rid, (owner, dummy) in view.ours.items() if owner == name and view.resources[rid]['kind'] == 'vm')


def leaks(view, records):
    out = {}
    for rid, (name, base) in view.ours.items():
        ws = records.get(name)
        if ws is None:
            out[rid] = '%s: no journal record' % name
        elif ws['status'] == 'destroyed':
            out[rid] = '%s: the journal says destroyed' % name
        elif ws.get('resource_id') and base_of_name(str(ws['resource_id']).rsplit('/', 1)[-1]) != base:
            out[rid] = '%s: the journal names %s' % (name, ws['resource_id'])
    return out


def check_ready(site, view, ws):
    vms = vm_of(view, ws['name'])
    if [v.lower() for v in vms] != [str(ws['resource_id']).lower()]:
        return ['%s is ready with %s, but its VMs carrying its marker are %s' % (ws['name'], ws['resource_id'], vms)]
    members = sorted(view.resources[rid]['kind'] for rid, (owner, dummy) in view.ours.items() if owner == ws['name'])
    if members != ['disk', 'nic', 'pip', 'vm']:
        return ['%s is ready, but the resources carrying its marker are %s' % (ws['name'], members)]
    vm = view.resources[vms[0]]
    if vm.get('power') != 'running' or vm.get('state') != 'Succeeded':
        return ['%s is ready, but its VM is %s, %s' % (ws['name'], vm.get('state'), vm.get('power'))]
    return invariants.check_guest(ws, vms[0])


def check_foreign(before, view, requests):
    out = []
    for rid, was in sorted(before.items()):
        now = view.foreign.get(rid)
        if now is None:
            out.append('foreign %s is gone' % rid)
        elif now != was:
            changed = sorted(k for k in ('tags', 'identity', 'bindings') if now[k] != was[k])
            out.append('foreign %s changed: %s' % (rid, ', '.join(changed)))
    foreign = set(view.resources[rid]['name'] for rid in set(before) | set(view.foreign) if rid in view.resources)
    foreign |= set(rid.rsplit('/', 1)[-1] for rid in before)
    for dummy, op, named, dummy2 in requests:
        if op.endswith(READS) or not op.endswith(ACTING):
            continue
        for name in named:
            if name in foreign:
                out.append('our controller sent %s to foreign %s' % (op, name))
    return out


def check_events(records, requests):
    """Every creating PUT named a set whose base some record holds as its recorded candidate."""
    bases = set(str(ws.get('candidate_id') or '').rsplit('/', 1)[-1] for ws in records.values()) - set([''])
    bases = set(base_of_name(b) for b in bases)
    return ['%s was sent for %s, whose set no journal record holds' % (op, name)
            for dummy, op, names, dummy2 in requests if op.endswith('_CreateOrUpdate')
            for name in names if base_of_name(name) not in bases]


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
            owned = sorted(rid for rid, (owner, dummy) in view.ours.items() if owner == name)
            if owned:
                found['destroyed'].append('%s is destroyed, yet %s carry its marker' % (name, owned))
    found['foreign'] = check_foreign(foreign_before, view, requests)
    found['credentials'] = invariants.check_credentials(site)
    found['events'] = check_events(records, requests)
    return found, leaks(view, records), view


class AzureMatrix(Matrix):
    """Kill chains (or single kills) through the Azure create's and destroy's points, and every lost answer of an ARM
    call that acts, against one AzureSite."""

    def __init__(self, site, size='ci', log=print):
        super().__init__(site, size='ci', log=log)
        self.size = SIZES[size]
        self.lost_operations = []

    def prepare(self):
        """The foreign resources (a public IP, a NIC bound to it, a public IP copying a workspace's tags), the traces
        of a clean create and destroy, and the ARM calls that act in them."""
        self.site.clear_faults()
        self.site.log_requests()
        cloud = self.site.cloud
        cloud.azure('foreign_create', kind='pip', name='their-pip', tags={'team': 'web'})
        cloud.azure('foreign_create', kind='nic', name='their-nic', attach_to='their-pip')
        first = self.name('a')
        cell = Cell('azure: no fault (the traced create and destroy)', 'clean', [first])
        with self.site.working_on(cell):
            traced = self.site.run([self.site.create_op(first)])
        if not traced.ok:
            raise RuntimeError('the clean create on Azure failed: %s' % traced.explain())
        self.create_points = points_of(traced.trace, first)
        self.secret = self.site.secret()
        created = self.site.requests()
        ours = [r for r in self.site.resources().values() if r['tags'].get(TAG_WORKSPACE) == first]
        copied = dict(ours[0]['tags'], **{TAG_MARKER: 'not-a-marker-of-ours'})
        # Another principal copies a workspace's tags (with a marker no controller made) onto a resource of its own.
        cloud.azure('foreign_create', kind='pip', name='copied-pip', tags=copied)
        with self.site.working_on(cell):
            traced = self.site.run([self.site.destroy_op(first)])
        if not traced.ok:
            raise RuntimeError('the clean destroy on Azure failed: %s' % traced.explain())
        self.destroy_points = points_of(traced.trace, first)
        destroyed = [r for r in self.site.requests() if r not in created]
        self.lost_operations = []
        for op, requests in (('create', created), ('destroy', destroyed)):
            for dummy, call, names, dummy2 in requests:
                if call.endswith(ACTING) and any(base_of_name(n).startswith(first) for n in names) \
                        and (op, call) not in self.lost_operations:
                    self.lost_operations.append((op, call))
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
        running = set(rid for rid, item in self.site.resources().items()
                      if item['kind'] == 'vm' and item.get('sshd') == 'up')
        self.site.stop_guest_leftovers(running)

    def kill_cells(self, op, points):
        work = super().kill_cells(op, points)
        for cell, dummy in work:
            cell.row = 'azure ' + cell.row
        return work

    def _kill(self, cell, op, point, nth):
        if op == 'create' and UNSENT.search(point):
            return lambda: self._unsent_put(cell, point, nth)
        return super()._kill(cell, op, point, nth)

    def _unsent_put(self, cell, point, nth):
        """A kill right after a member's PUT was recorded as dispatched, before it was sent. The run after it (the
        create again, or reconcile first) reads 404 for the member through the lost-answer window, and ends
        ``failed`` keeping the member as cleanup debt: it is never sent again. The destroy that follows waits the
        window out too and takes away what the set has. Converged: failed, then destroyed, in the two runs, and no
        PUT of the member ever sent."""
        site, name = self.site, cell.names[0]
        member = UNSENT.search(point).group(2)
        started = time.monotonic()
        outcome = site.run([site.create_op(name)], kill=Kill(name, point, nth))
        if not outcome.killed:
            cell.reached = False
            cell.notes.append('the run did not die at %s #%d (%s)' % (point, nth, outcome.explain()[:200]))
        first = site.run([site.reconcile_op() if cell.variant == 'reconcile' else site.create_op(name)])
        after_first = status_of(site, name)
        second = site.run([site.destroy_op(name)])
        cell.reruns = 2
        sent = [op for dummy, op, names, dummy2 in site.requests()
                if op == CREATING[member] and any(base_of_name(n).startswith(name + '-') for n in names)]
        cell.converged = after_first == 'failed' and status_of(site, name) == 'destroyed' and not sent
        if after_first != 'failed':
            cell.notes.append('after the run that followed the kill %s is %s, not failed (%s)'
                              % (name, after_first, first.explain()[:200]))
        if status_of(site, name) != 'destroyed':
            cell.notes.append('%s is %s after the destroy, not destroyed (%s)' % (name, status_of(site, name),
                                                                                  second.explain()[:300]))
        if sent:
            cell.notes.append('the %s PUT of %s was sent %d times' % (member, name, len(sent)))
        cell.seconds = time.monotonic() - started

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
            return None
        points = dict((op, azure_decisive(found)) for op, found in (
            ('create', self.create_points), ('destroy', self.destroy_points)))
        # The create can never go on past a PUT recorded and not sent: those points are rows of their own.
        unsent = [p for p in points['create'] if UNSENT.search(p[0])]
        points['create'] = [p for p in points['create'] if p not in unsent]
        passed = len(self.create_points) + len(self.destroy_points) - sum(len(p) for p in points.values()) \
            - len(unsent)
        self.log('azure ci: %d Azure points and the flows\' commits around them in chains, %d PUTs recorded and not '
                 'sent and %d lost answers beside them; %d points (step starts, the queue\'s, guest commands) are the '
                 'full size\'s only' % (sum(len(p) for p in points.values()), len(unsent),
                                        len([c for o, c in self.lost_operations if c.endswith(CI_LOST)]), passed))
        rows = {}
        for op in ('create', 'destroy'):
            rows[op] = dict((point, Cell('azure kill %s: %s #%d' % (op, point[0], point[1]), 'kill', [], 'rerun'))
                            for point in points[op])
        work = [self._chain(rows[op], op, points[op], 'rerun') for op in ('create', 'destroy')]
        unsent = self.kill_cells('create', unsent)
        work.append(lambda: [self._as(cell, fn) for cell, fn in unsent])
        lost = []
        # The lost answers run beside the chains: each rule cuts only the answer to its own workspace's request.
        work.append(lambda: self.lost_rows(lost))
        self.site.clear_faults()
        self.site.log_requests()
        with concurrent.futures.ThreadPoolExecutor(max_workers=len(work)) as pool:
            for future in [pool.submit(fn) for fn in work]:
                future.result()
        cells = [c for op in ('create', 'destroy') for c in rows[op].values()] + [c for c, dummy in unsent] + lost
        self.judge(cells)
        self.cells.extend(cells)
        for cell in cells:
            self.log('%-4s %-70s %s' % ('ok' if cell.ok else 'FAIL', cell.row[:70], '' if cell.ok else cell.notes))
        return None

    def lost_rows(self, cells):
        ready = []
        for wanted in ('create', 'destroy'):
            for op, call in [item for item in self.lost_operations if item[0] == wanted
                             and (not self.size['chains'] or item[1].endswith(CI_LOST))]:
                cell = Cell('azure lost answer: %s (%s)' % (call, op), 'lost', [self.name('l')])
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
        # The set's names begin with the workspace's name: the rule cuts only this workspace's answer.
        rule = site.cloud.azure('rule', action='drop-response', operation=call, match=name + '-*')
        first = site.finish(site.start_run([make_op(name)]))
        hits = [r for r in site.cloud.azure('rules') if r['id'] == rule['id']][0]['hits']
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

    def run(self, seeds=None):
        self.prepare()
        self.run_kills()
        if not self.size['chains']:
            # The ci size ran them beside its chains.
            self.run_lost()
        return self.cells
