"""One controller against one try-out cluster, for the crash-safety runs: start runs, kill them at a point, read
what they left.

    site = FaultSite.start(workdir)
    outcome = site.run([site.create_op('w1')], kill=Kill('w1', 'create.clone pve POST /nodes/*/lxc/*/clone'))
    outcome.killed, outcome.trace, site.requests()
    site.stop()

Every run is ``ansible-playbook`` with a shipped playbook (ephemera.workspaces.create, destroy or reconcile,
the roles as they ship) and ``EPHEMERA_FAILPOINT_TRACE`` set, so its trace lists every point it passed; with
a Kill it dies (SIGKILL, the whole run) the n-th time the workspace passes that point. Every API request of
our controller goes through the cluster's fault proxy, whose rules log it (method, path, time). The command
of every run is recorded on the cell that runs it (:meth:`FaultSite.working_on`), for the report.
"""

import contextlib
import json
import os
import secrets
import signal
import shutil
import sys
import threading
import time
import urllib.parse

from ansible_collections.ephemera.workspaces.plugins.module_utils.core import failpoint
from ansible_collections.ephemera.workspaces.plugins.module_utils.core.journal import Journal
from ansible_collections.ephemera.workspaces.plugins.module_utils.providers.proxmox.client import PveClient
from tests.ansible_run import Run
from tests.integration.create.gitserver import GitHttpServer, Repo
from tests.localpve.cluster import LocalCluster
from tests.localpve.guests import end_guest_processes, stop_leftovers

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
GIT_USER = 'fault-bot'
# The agent is briefed, says so and ends: nothing of it keeps running.
AGENTS = {'fake': ['sh', '-c', 'echo "working on: {purpose}"']}
RUN_TIMEOUT = 180
PLAYBOOKS = {'create': 'ephemera.workspaces.create', 'destroy': 'ephemera.workspaces.destroy',
             'reconcile': 'ephemera.workspaces.reconcile', 'expire': 'ephemera.workspaces.expire',
             'build': 'ephemera.workspaces.template_build', 'fork': 'ephemera.workspaces.fork',
             'fill': 'ephemera.workspaces.pool_fill'}
# The lease of a workspace made for the expiry sweep's rows: idle for a second, so expired once it is ready.
EXPIRING = {'ttl': 600, 'idle_timeout': 1}
# What a build installs in the matrix: nothing (the steps around provisioning, quickly), and two tools that the
# debian tier's guests have.
BUILD_LISTS = {'ephemera_packages': [], 'ephemera_npm_packages': [], 'ephemera_agent_commands': [],
               'ephemera_tools': ['git', 'python3']}


class Kill:
    """Kill the run the ``nth`` time ``workspace`` passes ``point`` (``<where> <what>`` as a trace names it)."""

    def __init__(self, workspace, point, nth=1):
        self.workspace, self.point, self.nth = workspace, point, int(nth)

    def env(self):
        return json.dumps({'workspace': self.workspace, 'point': self.point, 'nth': self.nth})

    def names(self, workspace):
        """True when this kill names ``workspace`` (its name, or a prefix ending in ``*``: a pool's members)."""
        return failpoint.names(self.workspace, workspace)

    def count(self, trace):
        """The most passages of the point by one workspace it names in ``trace``."""
        counts = {}
        for workspace, point in trace:
            if point == self.point and self.names(workspace):
                counts[workspace] = counts.get(workspace, 0) + 1
        return max(counts.values()) if counts else 0

    def __repr__(self):
        return '%s: %s #%d' % (self.workspace, self.point, self.nth)


class Outcome:
    """What one run did: its Run (exit code, JSON output), its trace, whether the Kill got it."""

    def __init__(self, run, command, trace, killed):
        self.run = run
        self.command = command
        self.trace = trace
        self.killed = killed
        self.seconds = run.seconds

    @property
    def ok(self):
        return not self.killed and not self.run.timed_out and self.run.returncode == 0

    def explain(self):
        if self.killed:
            return 'killed'
        if self.run.timed_out:
            return 'timed out: %s' % self.run.output[-2000:]
        hosts = sorted(((self.run.data or {}).get('stats') or {}).keys()) or ['localhost']
        said = ['%s: %s' % (title, result.get('msg')) for host in hosts for title, result in self.run.failures(host)]
        return '; '.join(said) or ('ok' if self.ok else 'rc %s: %s' % (self.run.returncode, self.run.output[-2000:]))


class FaultSite:
    """A try-out cluster (in this process), a git server with a token, a journal and the controller secret."""

    def __init__(self, workdir, cluster):
        self.controller(workdir, cluster)
        self.api = PveClient(self.info['api_url'], api_token_id=self.info['token_id'],
                             api_token_secret=self.info['token_secret'], ca_file=self.info['ca_file'])
        self.clear_faults()

    def controller(self, workdir, place):
        """The controller's side of a site on ``place`` (a try-out cluster or cloud, the matrix's fault API): its
        journal, a git server with a token, the agent key, the local inventory and the run counters."""
        self.workdir = workdir
        self.cluster = place
        self.info = place.info
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
        self._current = threading.local()
        self.inventory = os.path.join(workdir, 'inventory.json')
        with open(self.inventory, 'w') as out:
            json.dump({'all': {'hosts': {'localhost': {'ansible_connection': 'local',
                                                       'ansible_python_interpreter': sys.executable}}}}, out)
        self.runs_at_clear = 0
        self.logging_rule = None

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
            # The host tier: every guest is this machine's SSH user.
            'agent_user_is_ssh_user': True,
        }

    def op_secrets(self):
        return {'git_token': self.git_token, 'git_username': GIT_USER,
                'agent_credentials': {'AGENT_API_KEY': self.agent_key}}

    def create_op(self, name, lease=None):
        op = {'op': 'create', 'workspace': name, 'request': self.request_args(name), 'secrets': self.op_secrets()}
        if lease:
            op['lease'] = lease
        return op

    def expire_op(self, name=None):
        """The expiry sweep: it takes every workspace that is due; ``name`` only says whose row it is."""
        return {'op': 'expire', 'secrets': self.op_secrets()}

    def destroy_op(self, name):
        return {'op': 'destroy', 'workspace': name, 'secrets': self.op_secrets()}

    def fork_op(self, parent, children):
        """A fork of ``parent`` into ``children`` (names), with the children's own agent credentials."""
        return {'op': 'fork', 'workspace': parent, 'children': list(children),
                'secrets': {'agent_credentials': {'AGENT_API_KEY': self.agent_key}}}

    def reconcile_op(self):
        return {'op': 'reconcile', 'secrets': self.op_secrets()}

    def fill_op(self, pools):
        """A fill of the warm pools ``pools`` (declarations, as ephemera_pools holds them)."""
        return {'op': 'fill', 'pools': list(pools)}

    def build_op(self, template, source=None):
        """A build of ``template`` (the template_build playbook) from ``source``, the seed template by default."""
        return {'op': 'build', 'template': template,
                'source': self.info['template_vmid'] if source is None else source}

    def playbook_vars(self, op):
        """The extra vars of ``op``'s run: the try-out cluster's connection and settings, the request, the secrets."""
        info = self.info
        values = {
            'ephemera_api_host': info['proxy_url'], 'ephemera_api_token_id': info['token_id'],
            'ephemera_api_token_secret': info['token_secret'], 'ephemera_ca_file': info['ca_file'],
            'ephemera_validate_certs': True, 'ephemera_journal_path': self.journal_path,
            'ephemera_template_vmid': info['template_vmid'], 'ephemera_node': info['template_node'],
            'ephemera_pool': info['pool'], 'ephemera_agents': AGENTS, 'ephemera_guest_root': info['guest_root'],
            'ephemera_ssh_user': info['ssh_user'], 'ephemera_ssh_port': info['ssh_port'],
            'ephemera_ssh_private_key': info['ssh_private_key'], 'ephemera_agent_user': info['ssh_user'],
            'ephemera_agent_user_is_ssh_user': True,
            'ephemera_task_timeout': 60, 'ephemera_lock_timeout': 30, 'ephemera_address_timeout': 30,
            'ephemera_ssh_timeout': 30, 'ephemera_runner_timeout': 20,
        }
        values.update(op.get('secrets') or {})
        if op['op'] == 'create':
            request = self.request_args(op['workspace'])
            values.update(repo=request['repo'], ref=request['ref'], purpose=request['purpose'], agent=request['agent'])
            values.update(op.get('lease') or {})
        if op['op'] == 'fork':
            values['children'] = [{'name': name} for name in op['children']]
        values.update(self.pool_vars(op))
        if op['op'] == 'build':
            # The debian tier: root logs in, the agent user is the guests' own; the guests' files are their own root.
            # The build's own steps: its smoke create (on by default) is a create, which the create rows cover.
            values.update(BUILD_LISTS, template=op['template'], source=op['source'], template_build_smoke={},
                          ephemera_agent_user=info.get('agent_user') or info['ssh_user'],
                          ephemera_agent_user_is_ssh_user=info.get('agent_user',
                                                                   info['ssh_user']) == info['ssh_user'],
                          ephemera_guest_root=info.get('guest_prefix') or info['guest_root'])
        return values

    @staticmethod
    def pool_vars(op):
        """The pools the inventory declares for ``op`` (a fill fills them, a create takes a warm member of a matching
        one): its extra vars, {} for an op that declares none."""
        if op.get('pools') is None:
            return {}
        return {'ephemera_pools': op['pools'], 'ephemera_agent': 'fake'}

    @contextlib.contextmanager
    def working_on(self, cell):
        """The runs this thread starts meanwhile are ``cell``'s: their commands go into its report row."""
        previous = getattr(self._current, 'cell', None)
        self._current.cell = cell
        try:
            yield cell
        finally:
            self._current.cell = previous

    def start_run(self, ops, kill=None):
        """Start the run of one operation (``ops`` is ``[op]``): ansible-playbook with the shipped playbook."""
        (op,) = ops
        with self._lock:
            self.runs += 1
            number = self.runs
        base = os.path.join(self.workdir, 'runs', '%05d' % number)
        os.makedirs(base)
        paths = {k: os.path.join(base, k) for k in ('vars.json', 'trace', 'log')}
        # The run's secrets, as an extra-vars file from a vault would hold them: removed when the run has ended.
        fd = os.open(paths['vars.json'], os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, 'w') as out:
            json.dump(self.playbook_vars(op), out)
        argv = ['ansible-playbook', '-i', self.inventory, PLAYBOOKS[op['op']]]
        if op.get('workspace'):
            argv += ['-e', 'workspace=%s' % op['workspace']]
        argv += ['-e', '@' + paths['vars.json']]
        env = {failpoint.TRACE_ENV: paths['trace']}
        env.update(self.run_env(op))
        if kill is not None:
            env[failpoint.KILL_ENV] = kill.env()
        command = ' '.join(['ansible-playbook'] + argv[1:])
        cell = getattr(self._current, 'cell', None)
        if cell is not None:
            cell.commands.append(command)
        run = Run.start(argv, env=env, unset=(failpoint.KILL_ENV,))
        return {'run': run, 'paths': paths, 'kill': kill, 'command': command}

    def run_env(self, op):
        """What the run of ``op`` adds to the environment (nothing here; a site of its own may add)."""
        return {}

    def finish(self, handle, timeout=RUN_TIMEOUT):
        """Wait for a run to end; an overdue run is killed whole."""
        paths, kill = handle['paths'], handle['kill']
        run = handle['run'].wait(timeout, fail=False)
        os.unlink(paths['vars.json'])
        with open(paths['log'], 'w') as out:
            out.write(run.output)
        trace = read_trace(paths['trace'])
        # Killed at its point: the trace ends there, or (threads of one step, a fork's children, go on writing for
        # the moment the kill takes) the point is in it as often as the kill waited for and no timeout killed it.
        killed = run.returncode == -signal.SIGKILL and kill is not None and (
            any(point == kill.point and kill.names(workspace) for workspace, point in trace[-4:])
            or (not run.timed_out and kill.count(trace) >= kill.nth))
        return Outcome(run, handle['command'], trace, killed)

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
