"""The Hetzner rows of the crash-safety matrix, on a try-out cloud of their own (the cloud's Hetzner Cloud fake,
tests/localcloud/hetzner.py; docs/hetzner.md).

As the AWS rows (tests/faults/aws.py): a clean create and a clean destroy of a workspace on the fake (provider
hetzner, the shipped playbooks) run first with the failpoint trace on, and every point they passed is a row: step
starts, journal commits, the answer of every call that acts (``hetzner POST /servers``, ``hetzner POST /ssh_keys``,
``hetzner PUT /servers``, ``hetzner DELETE /servers``, ...) and guest commands. The calls that act in those traces are
also the lost-answer rows: the fake acts and closes the connection before it answers.

After a kill the same playbook runs again until the workspace converged (ready, destroyed) within two runs. Then,
over the fake's servers (no fault in between):

    ready        every workspace the journal calls ready has exactly one server carrying its marker (it verifies for
                 this controller, bound to the server's name), the one its record names, running, reachable over SSH
                 with its pinned host key, its runner answering
    destroyed    no server carries the marker of a workspace the journal calls destroyed
    foreign      a server someone else made with a copy of a workspace's labels is as it was, and no request of ours
                 other than a read named it
    credentials  the git token and the agent's key are where tests/faults/invariants.py says
    events       every POST /servers our controller sent named a server a journal record holds as its candidate

A leak is a server whose marker verifies for this controller and that the journal does not account for.
"""

import concurrent.futures
import time

from ansible_collections.ephemera.workspaces.plugins.module_utils.core import ownership
from tests.faults import aws as awsrows
from tests.faults import invariants
from tests.faults.cells import Cell, converge, operation, status_of
from tests.faults.matrix import points_of

NAMES = awsrows.NAMES
LABEL_WORKSPACE = 'ephemera-workspace'
CLOUD = dict(awsrows.CLOUD)
SIZES = awsrows.SIZES
# The commits of a creation's and a deletion's dispatch: (point without its step, nth).
DISPATCHES = (('journal clone', 1), ('journal delete', 1))


def hetzner_decisive(points):
    """The ci size's points: the answer of every call that acts (the fake acted, the journal never heard), and the
    journal commits that record a creation's or a deletion's dispatch before it is sent."""
    return [(point, nth) for point, nth in points
            if point.split(' ', 1)[-1].startswith('hetzner ') or (point.split(' ', 1)[-1], nth) in DISPATCHES]


def _provider_module():
    from ansible_collections.ephemera.workspaces.plugins.module_utils.providers.hetzner import provider
    return provider


class HetznerSite(awsrows.AwsSite):
    """A try-out cloud (its own process) whose Hetzner fake the rows work on, a git server, a journal."""

    def log_requests(self):
        """The fake logs every request itself; the rows read the log since the faults were cleared."""

    def requests(self):
        """(time, operation, server ids named, server name sent) of every request since the faults were cleared."""
        out = []
        for r in self.cloud.hetzner('requests'):
            if r['time'] < self.since:
                continue
            parts = [p for p in r['path'].split('/') if p]
            named = tuple(p for p in parts[1:2] if p.isdigit()) if parts[:1] == ['servers'] else ()
            op = '%s /%s' % (r['method'], '/'.join(p for p in parts if not p.isdigit()))
            out.append((r['time'], op, named, r.get('name')))
        return sorted(out)

    def clones(self):
        return [name for dummy, op, dummy2, name in self.requests() if op == 'POST /servers']

    def playbook_vars(self, op):
        info = self.info
        hz = info['hetzner']
        values = {
            'ephemera_provider': 'hetzner', 'ephemera_hetzner_endpoint': hz['endpoint'],
            'ephemera_hetzner_token': hz['token'], 'ephemera_hetzner_location': hz['location'],
            'ephemera_hetzner_server_type': hz['server_type'], 'ephemera_hetzner_ssh_key': hz['ssh_key'],
            'ephemera_hetzner_action_timeout': 20, 'ephemera_template': hz['image'],
            'ephemera_pool': 'disposable-workspaces',
            'ephemera_journal_path': self.journal_path, 'ephemera_agents': awsrows.AGENTS,
            'ephemera_guest_root': hz['guest_prefix'], 'ephemera_ssh_user': info['ssh_user'],
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

    def instances(self):
        """server id -> {state, moto_state (the same), tags (its labels), name}: the shape the AWS rows read."""
        out = {}
        for s in self.cloud.hetzner('servers'):
            out[str(s['id'])] = {'state': s['status'], 'moto_state': s['status'], 'tags': dict(s.get('labels') or {}),
                                 'name': s.get('name')}
        return out

    def drop_response(self, method, path, match):
        return self.cloud.hetzner('rule', kind='drop', method=method, path=path, match=match)

    def rule_hits(self, rule):
        return [r for r in self.cloud.hetzner('rules') if r['id'] == rule['id']][0]['hits']

    def stop_guest_leftovers(self, keep):
        import os
        from tests.localpve.guests import end_guest_processes
        for entry in os.listdir(self.guests_dir) if os.path.isdir(self.guests_dir) else []:
            if entry.startswith('hz-') and entry[3:] not in keep:
                end_guest_processes(os.path.join(self.guests_dir, entry) + os.sep)


class CloudView:
    """The fake's servers as our controller sees them: which are ours (and whose), which are foreign."""

    def __init__(self, site, secret):
        hp = _provider_module()
        self.instances = site.instances()
        controller = ownership.controller_id(secret)
        self.ours = {}
        self.foreign = {}
        for server_id, item in self.instances.items():
            labels = item['tags']
            name = labels.get(LABEL_WORKSPACE)
            bound = hp.name_number(item['name']) if item.get('name') else -1
            if name and ownership.verdict(hp.marker_text(labels), secret, controller, name, bound) == \
                    ownership.VERIFIED:
                self.ours[server_id] = name
            else:
                self.foreign[server_id] = {'state': item['state'], 'tags': labels}


def check_events(records, requests):
    names = set(ws.get('candidate_id') for ws in records.values()) - set([None])
    return ['POST /servers was sent for the name %s, which no journal record holds' % name
            for dummy, op, dummy2, name in requests if op == 'POST /servers' and name not in names]


def check_foreign(before, view, requests):
    out = []
    for server_id, was in sorted(before.items()):
        now = view.foreign.get(server_id)
        if now is None:
            out.append('foreign %s is gone' % server_id)
        elif now['tags'] != was['tags']:
            out.append('foreign %s changed its labels' % server_id)
    foreign = set(before) | set(view.foreign)
    for dummy, op, named, dummy2 in requests:
        if op.startswith('GET'):
            continue
        for server_id in named:
            if server_id in foreign:
                out.append('our controller sent %s to foreign %s' % (op, server_id))
    return out


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
            found['ready'].extend(awsrows.check_ready(site, view, ws))
        elif ws['status'] == 'destroyed':
            owned = sorted(i for i, owner in view.ours.items() if owner == name)
            if owned:
                found['destroyed'].append('%s is destroyed, yet server %s carries its marker' % (name, owned))
    found['foreign'] = check_foreign(foreign_before, view, requests)
    found['credentials'] = invariants.check_credentials(site)
    found['events'] = check_events(records, requests)
    return found, awsrows.leaks(view, records), view


class HetznerMatrix(awsrows.AwsMatrix):
    """Kill chains (or single kills) through the Hetzner create's and destroy's points, and every lost answer of a
    call that acts, against one HetznerSite."""

    def prepare(self):
        self.site.clear_faults()
        first = self.name('a')
        cell = Cell('hetzner: no fault (the traced create and destroy)', 'clean', [first])
        with self.site.working_on(cell):
            traced = self.site.run([self.site.create_op(first)])
        if not traced.ok:
            raise RuntimeError('the clean create on Hetzner failed: %s' % traced.explain())
        self.create_points = points_of(traced.trace, first)
        self.secret = self.site.secret()
        ours = [i for i, item in self.site.instances().items() if item['tags'].get(LABEL_WORKSPACE) == first]
        labels = self.site.instances()[ours[0]]['tags']
        # Someone else copies a workspace's labels onto a server of theirs (the marker binds another name).
        self.site.cloud.hetzner('foreign_create', name='copy-of-' + first, labels=labels)
        with self.site.working_on(cell):
            traced = self.site.run([self.site.destroy_op(first)])
        if not traced.ok:
            raise RuntimeError('the clean destroy on Hetzner failed: %s' % traced.explain())
        self.destroy_points = points_of(traced.trace, first)
        self.lost_operations = []
        for op, points in (('create', self.create_points), ('destroy', self.destroy_points)):
            for point, nth in points:
                what = point.split(' ', 1)[-1]
                if what.startswith('hetzner ') and (op, what[8:]) not in self.lost_operations:
                    self.lost_operations.append((op, what[8:]))
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
        work = super(awsrows.AwsMatrix, self).kill_cells(op, points)  # pylint: disable=bad-super-call
        for cell, dummy in work:
            cell.row = 'hetzner ' + cell.row
        return work

    def run_kills(self):
        if not self.size['chains']:
            for op, points in (('create', self.create_points), ('destroy', self.destroy_points)):
                work = self.kill_cells(op, points)
                plain = [w for w in work if w[0].variant != 'reconcile']
                for start in range(0, len(plain), 4):
                    self.wave(plain[start:start + 4])
                for item in [w for w in work if w[0].variant == 'reconcile']:
                    self.wave([item])
            return
        points = dict((op, hetzner_decisive(found)) for op, found in (
            ('create', self.create_points), ('destroy', self.destroy_points)))
        passed = len(self.create_points) + len(self.destroy_points) - sum(len(p) for p in points.values())
        self.log('hetzner ci: %d points (steps, journal commits and guest commands between the API calls) are killed '
                 'in the full size only' % passed)
        rows = {}
        for op in ('create', 'destroy'):
            rows[op] = dict((point, Cell('hetzner kill %s: %s #%d' % (op, point[0], point[1]), 'kill', [], 'rerun'))
                            for point in points[op])
        work = [self._chain(rows[op], op, points[op], 'rerun') for op in ('create', 'destroy')]
        lost = []
        work.append(lambda: self.lost_rows(lost))
        self.site.clear_faults()
        with concurrent.futures.ThreadPoolExecutor(max_workers=len(work)) as pool:
            for future in [pool.submit(fn) for fn in work]:
                future.result()
        cells = [c for op in ('create', 'destroy') for c in rows[op].values()] + lost
        self.judge(cells)
        self.cells.extend(cells)
        for cell in cells:
            self.log('%-4s %-70s %s' % ('ok' if cell.ok else 'FAIL', cell.row[:70], '' if cell.ok else cell.notes))

    def run_lost(self):
        lost = []
        self.site.clear_faults()
        self.lost_rows(lost)
        self.judge(lost)
        self.cells.extend(lost)
        for cell in lost:
            self.log('%-4s %-70s %s' % ('ok' if cell.ok else 'FAIL', cell.row[:70], '' if cell.ok else cell.notes))

    def lost_rows(self, cells):
        ready = []
        for wanted in ('create', 'destroy'):
            for op, call in [item for item in self.lost_operations if item[0] == wanted]:
                cell = Cell('hetzner lost answer: %s (%s)' % (call, op), 'lost', [self.name('l')])
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
        method, path = call.split(' ', 1)
        wanted, make_op = operation(site, op)
        if op == 'destroy' or path.startswith('/servers/'):
            if op == 'destroy':
                with site.journal() as journal:
                    server_id = journal.get_workspace(name)['resource_id']
                rule = site.drop_response(method, '/servers/' + server_id, None)
                handle = site.start_run([make_op(name)])
            else:
                handle = site.start_run([make_op(name)])
                server_id = self._launched(name)
                rule = site.drop_response(method, '/servers/' + server_id, None) if server_id else None
        elif path == '/servers':
            # The creation request carries the workspace's name as its ephemera-workspace label.
            rule = site.drop_response(method, path, name)
            handle = site.start_run([make_op(name)])
        else:
            # POST /ssh_keys (an owned key) and other calls without a server id: the next one of its kind.
            rule = site.drop_response(method, path, None)
            handle = site.start_run([make_op(name)])
        first = site.finish(handle)
        hits = site.rule_hits(rule) if rule else 0
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
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for server_id, item in self.site.instances().items():
                if item['tags'].get(LABEL_WORKSPACE) == name:
                    return server_id
            time.sleep(0.2)
        return None
