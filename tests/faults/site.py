"""One controller against one try-out cluster, for the crash-safety runs: start runs, kill them at a point, read
what they left.

    site = FaultSite.start(workdir)
    outcome = site.run([site.create_op('w1')], kill=Kill('w1', 'create.clone pve POST /nodes/*/lxc/*/clone'))
    outcome.killed, outcome.trace, site.requests()
    site.stop()

Every run is a tests/faults/driver.py process (the playbooks' task sequences, one module process per
task) with ``EPHEMERA_FAILPOINT_TRACE`` set, so its trace lists every point it passed; with a Kill it
dies (SIGKILL, the whole run) the n-th time the workspace passes that point. Every API request of
our controller goes through the cluster's fault proxy, whose rules log it (method, path, time).
"""

import json
import os
import secrets
import shutil
import subprocess
import sys
import threading
import time
import urllib.parse

from ansible_collections.ephemera.workspaces.plugins.module_utils.core import failpoint
from ansible_collections.ephemera.workspaces.plugins.module_utils.core.journal import Journal
from ansible_collections.ephemera.workspaces.plugins.module_utils.providers.proxmox.client import PveClient
from tests import ansible_run
from tests.integration.create.gitserver import GitHttpServer, Repo
from tests.localpve import system
from tests.localpve.cluster import LocalCluster
from tests.localpve.guests import end_guest_processes, stop_leftovers

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
GIT_USER = 'fault-bot'
# The agent is briefed, says so and ends: nothing of it keeps running.
AGENTS = {'fake': ['sh', '-c', 'echo "working on: {purpose}"']}
RUN_TIMEOUT = 180


class Kill:
    """Kill the run the ``nth`` time ``workspace`` passes ``point`` (``<where> <what>`` as a trace names it)."""

    def __init__(self, workspace, point, nth=1):
        self.workspace, self.point, self.nth = workspace, point, int(nth)

    def env(self):
        return json.dumps({'workspace': self.workspace, 'point': self.point, 'nth': self.nth})

    def __repr__(self):
        return '%s: %s #%d' % (self.workspace, self.point, self.nth)


class Outcome:
    def __init__(self, result, trace, killed, seconds, log):
        self.result = result
        self.trace = trace
        self.killed = killed
        self.seconds = seconds
        self.log = log

    @property
    def ops(self):
        return (self.result or {}).get('ops') or []

    @property
    def ok(self):
        return self.result is not None and all(op['ok'] for op in self.ops)

    def explain(self):
        if self.result is None:
            return 'killed' if self.killed else 'no result: %s' % self.log[-2000:]
        return '; '.join('%s %s: %s' % (op['op'], op.get('workspace') or '', op['msg']) for op in self.ops
                         if not op['ok']) or 'ok'


class FaultSite:
    """A try-out cluster (in this process), a git server with a token, a journal and the controller secret."""

    def __init__(self, workdir, cluster):
        self.workdir = workdir
        self.cluster = cluster
        self.info = cluster.info
        self.guests_dir = os.path.join(self.info['state_dir'], 'guests')
        self.journal_path = os.path.join(workdir, 'controller', 'journal.sqlite')
        os.makedirs(os.path.dirname(self.journal_path), exist_ok=True)
        self.repo = Repo(os.path.join(workdir, 'repo'))
        self.git_token = 'gtok-' + secrets.token_hex(16)
        self.agent_key = 'akey-' + secrets.token_hex(16)
        self.git = GitHttpServer(os.path.dirname(self.repo.bare), GIT_USER, self.git_token)
        self.repo_url = self.git.url_of(self.repo.bare)
        self.runs = 0
        self._lock = threading.Lock()
        self.runs_at_clear = 0
        self.logging_rule = None
        self.api = PveClient(self.info['api_url'], api_token_id=self.info['token_id'],
                             api_token_secret=self.info['token_secret'], ca_file=self.info['ca_file'])
        self.clear_faults()

    @classmethod
    def start(cls, workdir, **options):
        cluster = LocalCluster.start(os.path.join(workdir, 'cluster'), **options)
        cluster.run(lambda: setattr(cluster.pve, 'max_requests', 10 ** 6))
        try:
            return cls(workdir, cluster)
        except BaseException:
            cluster.stop()
            raise

    def stop(self):
        self.git.httpd.shutdown()
        self.cluster.stop()
        stop_leftovers(self.info['state_dir'])

    # ------------------------------------------------------------- faults

    def clear_faults(self):
        """Every fault off; a proxy rule that lets every request through and logs it."""
        self.cluster.clear()
        self.logging_rule = None
        self.since = time.time()
        self.runs_at_clear = self.runs
        self._clone_mark = self.cluster.run(lambda: len(self.cluster.pve.requests))

    def log_requests(self):
        """Added after the fault rules of a run: the proxy acts on a request by its first matching rule only."""
        self.logging_rule = self.cluster.proxy_add('delay', '*', '/*', seconds=0, times=None)['id']

    def clones(self):
        """Hostnames of the clones the cluster was asked for (by anyone) since the faults were last cleared."""
        def read():
            return list(self.cluster.pve.requests[self._clone_mark:])
        names = []
        for method, path, body in self.cluster.run(read):
            if method == 'POST' and path.endswith('/clone'):
                form = urllib.parse.parse_qs(body.decode('utf-8', 'replace'))
                names.extend(form.get('hostname') or ['?'])
        return names

    def requests(self):
        """(time, method, api path) of every request our controller sent since the faults were last cleared."""
        seen = []
        for rule in self.cluster.proxy_rules():
            for hit in rule['hits']:
                path = hit['path']
                for prefix in ('/api2/json', '/api2/extjs'):
                    if path.startswith(prefix):
                        path = path[len(prefix):]
                seen.append((hit['time'], hit['method'], path))
        return sorted(seen)

    # ------------------------------------------------------------- runs

    def request_args(self, name):
        info = self.info
        return {
            'template': info['template_vmid'], 'node': info['template_node'], 'pool': info['pool'],
            'repo': self.repo_url, 'ref': 'main', 'purpose': 'work on %s' % name, 'agent': 'fake', 'agents': AGENTS,
            'guest_root': info['guest_root'], 'ssh_user': info['ssh_user'], 'ssh_port': info['ssh_port'],
            'ssh_private_key': info['ssh_private_key'], 'agent_user': info['ssh_user'],
        }

    def op_secrets(self):
        return {'git_token': self.git_token, 'git_username': GIT_USER,
                'agent_credentials': {'AGENT_API_KEY': self.agent_key}}

    def create_op(self, name):
        return {'op': 'create', 'workspace': name, 'request': self.request_args(name), 'secrets': self.op_secrets()}

    def destroy_op(self, name):
        return {'op': 'destroy', 'workspace': name, 'secrets': self.op_secrets()}

    def reconcile_op(self):
        return {'op': 'reconcile', 'secrets': self.op_secrets()}

    def plan(self, ops):
        info = self.info
        defaults = self.request_args('-')
        for key in ('repo', 'purpose'):
            defaults.pop(key)
        return {
            'connection': {'api_host': info['proxy_url'], 'api_token_id': info['token_id'],
                           'api_token_secret': info['token_secret'], 'ca_file': info['ca_file'],
                           'validate_certs': True},
            'common': {'journal_path': self.journal_path, 'pool': info['pool'], 'ssh_private_key': info['ssh_private_key'],
                       'create_defaults': defaults,
                       'create_timeouts': {'task_timeout': 60, 'lock_timeout': 30, 'address_timeout': 30,
                                           'ssh_timeout': 30, 'runner_timeout': 20}},
            'ops': ops,
        }

    def start_run(self, ops, kill=None):
        """Start a run; returns a handle for :meth:`finish`."""
        with self._lock:
            self.runs += 1
            number = self.runs
        base = os.path.join(self.workdir, 'runs', '%05d' % number)
        os.makedirs(base)
        paths = dict((k, os.path.join(base, k)) for k in ('plan.json', 'result.json', 'trace', 'log'))
        with open(paths['plan.json'], 'w') as out:
            json.dump(self.plan(ops), out)
        env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get('PYTHONPATH', ''))
        env[failpoint.TRACE_ENV] = paths['trace']
        env.pop(failpoint.KILL_ENV, None)
        if kill is not None:
            env[failpoint.KILL_ENV] = kill.env()
        mark = env[ansible_run.RUN_MARK] = ansible_run.new_mark()
        with open(paths['log'], 'w') as log:
            subprocess.run([sys.executable, '-m', 'tests.faults.driver', paths['plan.json'], paths['result.json']],
                           cwd=ROOT, env=env, stdout=log, stderr=log, stdin=subprocess.DEVNULL, check=True, timeout=60)
        return {'paths': paths, 'kill': kill, 'started': time.monotonic(), 'pid': _read_pid(paths['result.json']),
                'mark': mark}

    def finish(self, handle, timeout=RUN_TIMEOUT):
        """Wait for a run to end (its result written, or its process gone); an overdue run is killed."""
        paths, pid = handle['paths'], handle['pid']
        deadline = time.monotonic() + timeout
        while not os.path.exists(paths['result.json']) and system.alive(pid):
            if time.monotonic() > deadline:
                system.stop_then_kill(lambda: ansible_run.marked(handle['mark']))
                break
            time.sleep(0.02)
        result = None
        if os.path.exists(paths['result.json']):
            with open(paths['result.json']) as src:
                result = json.load(src)
        trace = read_trace(paths['trace'])
        kill = handle['kill']
        killed = result is None and kill is not None and any(
            line == (kill.workspace, kill.point) for line in trace[-4:])
        with open(paths['log']) as src:
            log = src.read()
        return Outcome(result, trace, killed, time.monotonic() - handle['started'], log)

    def run(self, ops, kill=None, timeout=RUN_TIMEOUT):
        return self.finish(self.start_run(ops, kill), timeout)

    # ------------------------------------------------------------- reading

    def journal(self):
        return Journal.open(self.journal_path, create=False)

    def secret(self):
        from ansible_collections.ephemera.workspaces.plugins.module_utils.core import ownership
        return ownership.load_secret(self.journal_path)

    def guest_root(self, vmid):
        return self.info['guest_root'].replace('{vmid}', str(vmid))

    def containers(self):
        """vmid -> (node, config) of every container in the cluster but the template."""
        out = {}
        for guest in self.api.get('/cluster/resources', type='vm') or []:
            vmid = int(guest['vmid'])
            if vmid == self.info['template_vmid'] or guest.get('type') != 'lxc':
                continue
            try:
                config = self.api.get('/nodes/%s/lxc/%d/config' % (guest['node'], vmid))
            except Exception:  # pylint: disable=broad-except
                config = None  # gone between the two reads
            if config is not None:
                out[vmid] = (guest['node'], config, guest)
        return out

    def stop_guest_leftovers(self, keep):
        """Stop what SSH sessions started in guests that are gone (runners, agents): this test started them."""
        for entry in os.listdir(self.guests_dir) if os.path.isdir(self.guests_dir) else []:
            if entry.isdigit() and int(entry) not in keep:
                end_guest_processes(os.path.join(self.guests_dir, entry) + os.sep)

    def remove(self):
        shutil.rmtree(self.workdir, ignore_errors=True)


def read_trace(path):
    try:
        with open(path) as src:
            return [tuple(line.rstrip('\n').split('\t', 1)) for line in src if '\t' in line]
    except FileNotFoundError:
        return []


def _read_pid(result_path, timeout=30):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with open(result_path + '.pid') as src:
                text = src.read().strip()
            if text:
                return int(text)
        except (FileNotFoundError, ValueError):
            pass
        time.sleep(0.01)
    raise RuntimeError('the driver did not start (no %s.pid)' % result_path)
