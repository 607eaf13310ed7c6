"""How long does one expiry sweep over 1,000 live leased workspaces take, and what does it ask of the provider?

    .venv/bin/python bench/expire.py [--provider proxmox] [--records 1000] [--expired 50] [--idle 150] [--hanging 0]
                                     [--refusing 0] [--parallel 8] [--batch 100]

One site, every workspace in it real unless asked otherwise, on the try-out place of --provider:

- proxmox: a try-out cluster (tests/localpve) inside this process, so that fakepve's own request log can be read;
  time scale 0, so Proxmox tasks finish at once; guests on loopback addresses of a range of their own.
- aws: the AWS try-out cloud (tests/localcloud: moto behind its fault proxy, an sshd per running instance), its
  private and public addresses on ranges of their own; the requests are counted by a logging rule at the proxy.
  Instances are pending and shutting down for 0.2 s.

On it:

- Two parents made by the create playbook: containers with an sshd of their own, a checkout and a runner. One's agent
  works (a line every 10 s: its runner says active and sees progress, so the sweep touches its lease and rewrites its
  labels), the other's has finished (idle: recorded, the lease left as it is).
- Their children, made by the fork playbook (``ephemera.workspaces.fork``, --batch children a run): full clones of
  the parent, each with its identity reset, a runner of its own and its own brief, lease and marker. Working and idle
  ones as their parent; --idle of them idle.
- --expired of the idle parent's children for each --parallel value get a file of unsaved work in their checkout,
  and their lease is replaced, through the Journal API, by one from core/lease.new_lease that started two hours ago
  (ttl 3600 s): expired an hour ago (the group for the first sweep a minute earlier than the next one's).
- Optionally (--hanging, --refusing) live records that no guest answers for, each a copy of a real record under its
  own name, resource id and address: at a listener of this process that accepts the connection and never says a word (a
  guest whose sshd hangs: the activity_timeout bound ends the wait), or at a loopback address where nothing listens
  (a guest that is down: refused at once).

Names are spread at random (seeded), so the kinds mix in the order the sweep asks them. Then, for each --parallel
value, one sweep as users run it: ``ansible-playbook ephemera.workspaces.expire -e limit=<expired>`` (the collection
pinned to this checkout) with ``-e parallel=N`` (the activity asks and the releases, each up to N at once), every
other option at its default (activity_timeout 10 s). A sweep releases the expired group that expired first and
defers the others (beyond its limit), so each sweep of the site has 50 to release.

Printed per sweep: the run's wall time and the sweep task's time, split from the journal's event times into the
activity look (the asks, each answer recorded by the thread that asked it while the other asks go on), the releases
(archive, then delete; up to parallel at once) and the rest; the API requests the provider received, by what they
were for; how long the hanging connections were held; the CPU seconds of this process and what it started (the
cluster, or the cloud's process, and the guests' sshd; not the runners and agents, which leave the sshd's tree). The
outcome is checked (every released workspace archived and destroyed, its container or instance gone; every live one
still ready; the answering ones' activity recorded; the others' records untouched) and a wrong outcome exits
non-zero. No time is asserted. The last line:

    expire: 1000 workspaces, 50 expired, A s, B requests; releases in parallel P: C s

A is the whole run of the expire playbook, B the API requests it made and C the time from the first release's start
to the last one's cleanup, for the first --parallel value; further values follow as ``parallel Q: A s, releases C s``.
"""

import argparse
import datetime
import json
import os
import random
import re
import resource
import selectors
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# The repository root first on sys.path, so that bench.* and tests.* import as packages.
sys.path[0] = ROOT

from bench.create import cpu_seconds, make_repo  # noqa: E402 pylint: disable=wrong-import-position
from tests.ansible_run import run_ansible  # noqa: E402 pylint: disable=wrong-import-position
from tests.localpve import LocalCluster  # noqa: E402 pylint: disable=wrong-import-position
from tests.localpve.cluster import pick_host  # noqa: E402 pylint: disable=wrong-import-position
from tests.localpve.guests import stop_leftovers  # noqa: E402 pylint: disable=wrong-import-position
from tests.localcloud.config import Options  # noqa: E402 pylint: disable=wrong-import-position
from tests.localcloud.control import CloudClient  # noqa: E402 pylint: disable=wrong-import-position
from tests.localcloud.process import down, up  # noqa: E402 pylint: disable=wrong-import-position
from ansible_collections.ephemera.workspaces.plugins.module_utils.core import lease as leasing  # noqa: E402 pylint: disable=wrong-import-position
from ansible_collections.ephemera.workspaces.plugins.module_utils.core.journal import Journal, epoch  # noqa: E402 pylint: disable=wrong-import-position

CREATE = os.path.join(ROOT, 'playbooks', 'create.yml')
FORK = os.path.join(ROOT, 'playbooks', 'fork.yml')
# A working agent writes a line every 10 s (what it wrote is progress: the sweep touches its lease only when it made
# some since the last look); a done one has finished.
AGENTS = {'working': ['sh', '-c', 'while :; do echo working; sleep 10; done'], 'done': ['sh', '-c', 'echo done']}
# The agent of each kind of real workspace (an expired one's agent has finished), and what it says when asked.
AGENT_OF = {'working': 'working', 'done': 'done', 'expired': 'done'}
EXPECTED_ACTIVITY = {'working': 'active', 'done': 'idle'}
REAL = tuple(AGENT_OF)
ACTIVITY_TIMEOUT = 10
SEED = 20240
ADDRESS = re.compile(r'([^ @]+@)?127(\.[0-9]+){3}(:[0-9]+)?')
# The guests' addresses: ranges of their own, out of the /24s that pick_host gives clusters (127.64-250.x.x): the
# try-out cluster's, and the try-out cloud's private and public ones.
GUEST_NET = '127.251'
PRIVATE_NET, PUBLIC_NET = '127.252', '127.253'
# Seconds the site has to stop: a thousand guests take minutes.
STOP_TIMEOUT = 900


class SilentListener:
    """A TCP listener that accepts every connection and never sends a byte: a guest whose sshd hangs. It notes
    how long each connection stayed open until the client gave up and closed it."""

    def __init__(self, host, port):
        self.server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.server.bind((host, port))
        self.server.listen(1024)
        self.server.setblocking(False)
        self.selector = selectors.DefaultSelector()
        self.selector.register(self.server, selectors.EVENT_READ)
        self.held = []
        self.opened = {}
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._serve, name='silent-listener', daemon=True)
        self.thread.start()

    def _serve(self):
        while not self.stopping.is_set():
            for key, dummy in self.selector.select(0.2):
                if key.fileobj is self.server:
                    try:
                        conn, dummy = self.server.accept()
                    except OSError:
                        continue
                    conn.setblocking(False)
                    self.opened[conn] = time.monotonic()
                    self.selector.register(conn, selectors.EVENT_READ)
                    continue
                conn = key.fileobj
                try:
                    data = conn.recv(65536)
                except OSError:
                    data = b''
                if not data:
                    # The client closed it (its banner wait ran out): how long it waited.
                    self.held.append(time.monotonic() - self.opened.pop(conn))
                    self.selector.unregister(conn)
                    conn.close()

    def stop(self):
        self.stopping.set()
        self.thread.join(10)
        for conn in list(self.opened):
            conn.close()
        self.selector.close()
        self.server.close()


def address_range(net, count):
    """A range of ``count`` addresses and some to spare in the /16 ``net``, from ``net``.0.10 on."""
    return '%s.0.10-%s.%d.250' % (net, net, (count + 20) // 240)


class ProxmoxSite:
    """A try-out cluster in this process (time scale 0); the requests are fakepve's own log."""

    name, noun = 'proxmox', 'container'
    inventory = os.path.join(ROOT, 'inventories', 'localpve')
    unset = ()

    def __init__(self, workdir, guests):
        self.cluster = LocalCluster.start(os.path.join(workdir, 'cluster'), time_scale=0,
                                          guest_range=address_range(GUEST_NET, guests))
        self.cluster.run(lambda: setattr(self.cluster.pve, 'max_requests', 10 ** 7))
        self.info = self.cluster.info
        self.env = {'LOCALPVE_STATE_DIR': self.info['state_dir']}

    def present(self):
        """The resource ids that exist now."""
        return set(self.cluster.run(lambda: [ct.vmid for ct in self.cluster.pve.cts]))

    def requests(self):
        """[(call, the resource id it is about, or None)] of every request so far."""
        return [('%s %s' % (method, re.sub(r'/api2/(json|extjs)', '', path)), vmid_of(path))
                for method, path, dummy in self.cluster.run(lambda: list(self.cluster.pve.requests))]

    def root_of(self, ws):
        """Where the files of the workspace's guest lie on this machine."""
        return self.info['guest_root'].replace('{vmid}', str(ws['resource_id']))

    @staticmethod
    def fake_id(number):
        return 200000 + number

    def stop(self):
        try:
            self.cluster.stop(timeout=STOP_TIMEOUT)
        finally:
            # The runners and agents started their own sessions in the guests: gone with the guests' files, and
            # stopped by their pid files even when the cluster's own stop ran out of time.
            stop_leftovers(self.info['state_dir'])


class AwsSite:
    """The AWS try-out cloud in a process of its own (instances pending and shutting down for 0.2 s); the requests are
    those a logging rule at its fault proxy saw, each with the instance it names."""

    name, noun = 'aws', 'instance'
    inventory = os.path.join(ROOT, 'inventories', 'localcloud')
    unset = ('AWS_', 'EPHEMERA_', 'PROXMOX_')

    def __init__(self, workdir, guests):
        opts = Options(state_dir=os.path.join(workdir, 'cloud'), host=pick_host(), port=0, boot_secs=0.2,
                       stop_secs=0.2, shutdown_secs=0.2, guest_range=address_range(PRIVATE_NET, guests),
                       public_range=address_range(PUBLIC_NET, guests)).check()
        self.state_dir = opts.state_dir
        self.cloud = CloudClient(up(opts))
        self.info = self.cloud.info
        self.env = {'LOCALCLOUD_STATE_DIR': self.info['state_dir']}
        self.log = self.cloud.proxy_add('log', '*', times=None)['id']
        self.roots = {}

    def _instances(self):
        return [i for i in self.cloud.instances() if i['state'] not in ('shutting-down', 'terminated')]

    def present(self):
        return set(i['instance_id'] for i in self._instances())

    def requests(self):
        hits = next(r for r in self.cloud.proxy_rules() if r['id'] == self.log)['hits']
        return [(hit['operation'], hit['instances'][0] if len(hit['instances']) == 1 else None) for hit in hits]

    def root_of(self, ws):
        if ws['resource_id'] not in self.roots:
            self.roots.update((i['instance_id'], i['root']) for i in self._instances())
        return self.roots[ws['resource_id']]

    @staticmethod
    def fake_id(number):
        return 'i-0bench%011x' % number

    def stop(self):
        # Everything the cloud started goes with it, the guests' leftovers included.
        down(self.state_dir, timeout=STOP_TIMEOUT)


SITES = {'proxmox': ProxmoxSite, 'aws': AwsSite}


def plan(records, expired, idle, hanging, refusing):
    """{name: kind} of the site: expired, done (idle), hanging, refusing, and working for the rest; names spread at
    random."""
    kinds = ['expired'] * expired + ['done'] * idle + ['hanging'] * hanging + ['refusing'] * refusing
    kinds += ['working'] * (records - len(kinds))
    random.Random(SEED).shuffle(kinds)
    return {'ws-%04d' % n: kind for n, kind in enumerate(kinds)}


def groups_of(kinds, size, count):
    """The expired names in ``count`` groups of ``size``: the one the first sweep releases first."""
    expired = sorted(n for n, k in kinds.items() if k == 'expired')
    return [expired[i * size:(i + 1) * size] for i in range(count)]


def parents_of(kinds):
    """{agent: name}: the first working and the first done workspace, made by the create playbook."""
    return {agent: min(n for n, k in kinds.items() if k == agent) for agent in ('working', 'done')}


def playbook(site, journal, argv, what):
    """One ansible-playbook run against the site (its run), or sys.exit with its output."""
    run = run_ansible(['ansible-playbook', '-i', site.inventory] + argv, env=dict(site.env, EPHEMERA_JOURNAL=journal),
                      unset=site.unset, timeout=7200)
    if not run.ok:
        # Every failed task's message first: the first failure is the cause, and a long run's tail no longer holds it.
        sys.exit('%s failed: %s' % (what, run.explain()))
    return run


def make_parents(workdir, site, journal, repo, parents):
    """The parents, {agent: name}, by the create playbook in one run; its wall seconds."""
    inventory = os.path.join(workdir, 'parents.json')
    with open(inventory, 'w') as out:
        json.dump({'workspaces': {'hosts': {name: {'workspace': name, 'agent': agent}
                                            for agent, name in parents.items()},
                                  'vars': {'ansible_connection': 'local',
                                           'ansible_python_interpreter': sys.executable}}}, out)
    extra = os.path.join(workdir, 'create-vars.json')
    with open(extra, 'w') as out:
        json.dump({'target': 'workspaces', 'repo': repo, 'purpose': 'Benchmark the expiry sweep',
                   'ephemera_agents': AGENTS}, out)
    run = playbook(site, journal, ['-i', inventory, CREATE, '-e', '@' + extra, '--forks', '2'],
                   'the create playbook')
    return run.seconds


def fork_children(workdir, site, journal, parent, children, batch):
    """``children`` of ``parent`` by the fork playbook, ``batch`` a run; (runs, wall seconds)."""
    seconds = 0.0
    runs = 0
    for first in range(0, len(children), batch):
        chunk = children[first:first + batch]
        extra = os.path.join(workdir, 'fork-vars.json')
        with open(extra, 'w') as out:
            json.dump({'workspace': parent, 'children': [{'name': name} for name in chunk],
                       'ephemera_max_children': len(chunk)}, out)
        print('... forking %s into %d children (%d of %d)' % (parent, len(chunk), first + len(chunk), len(children)),
              file=sys.stderr, flush=True)
        seconds += playbook(site, journal, [FORK, '-e', '@' + extra], 'the fork playbook').seconds
        runs += 1
    return runs, seconds


def available_memory():
    """MemAvailable of /proc/meminfo, in bytes."""
    with open('/proc/meminfo') as src:
        for line in src:
            if line.startswith('MemAvailable:'):
                return int(line.split()[1]) * 1024
    return 0


def prepare_journal(site, journal, kinds, groups, refusing_net, hanging_at):
    """Expire the expired ones (unsaved work in their checkout, a lease that ended an hour ago; group by group a
    minute apart), then record the simulated live ones. Returns {name: record} of every workspace."""
    now = time.time()
    with Journal.open(journal, create=False) as jnl:
        real = {ws['name']: ws for ws in jnl.list_workspaces()}
        wrong = [(n, ws['status']) for n, ws in real.items() if ws['status'] != 'ready']
        if wrong or len(real) != sum(1 for k in kinds.values() if k in REAL):
            sys.exit('the create and fork playbooks did not make every real workspace ready (%d of %d): %s'
                     % (len(real) - len(wrong), sum(1 for k in kinds.values() if k in REAL), wrong[:20]))
        for index, group in enumerate(groups):
            for name in group:
                ws = real[name]
                checkout = site.root_of(ws) + (ws['params'].get('checkout_path') or '/workspace/repo')
                with open(os.path.join(checkout, 'notes.txt'), 'w') as out:
                    out.write('unsaved work of %s\n' % name)
                ended = leasing.new_lease(now - 7200 - 60 * (len(groups) - index), ttl=3600, idle_timeout=1800)
                jnl.update_workspace(name, ws['generation'], lease=ended, lease_expires_at=ended['expires_at'])
        # The simulated ones copy a real record: one whose agent is done.
        model = real[min(n for n in real if kinds[n] == 'done')]
        refusing = 0
        fakes = 0
        for name, kind in sorted(kinds.items()):
            if kind not in ('hanging', 'refusing'):
                continue
            if kind == 'hanging':
                address, port = hanging_at
            else:
                address, port = '%s.%d' % (refusing_net, 10 + refusing % 240), model['params'].get('ssh_port') or 22
                refusing += 1
            fresh = leasing.new_lease(now)
            jnl.create_workspace(
                name, status='ready', activity='active', desired_state='present', provider=model['provider'],
                location=model['location'], resource_id=site.fake_id(fakes), candidate_id=site.fake_id(fakes),
                address=address,
                repo=model['repo'], ref=model['ref'], purpose=model['purpose'], progress=model['progress'],
                facts=model['facts'], params=dict(model['params'], ssh_port=port), lease=fresh,
                lease_expires_at=fresh['expires_at'])
            fakes += 1
        return {ws['name']: ws for ws in jnl.list_workspaces()}


def snapshot(journal):
    """({name: record}, {name: its activity events}) of every workspace now."""
    with Journal.open(journal, create=False) as jnl:
        records = {ws['name']: ws for ws in jnl.list_workspaces()}
        return records, {name: [e['action'] for e in jnl.events(name)].count('activity') for name in records}


def sweep(site, journal, expired, parallel):
    """One run of the expire playbook; (run, its sweep task's result, task start and end in epoch seconds, the
    requests the provider received meanwhile, CPU seconds)."""
    before = len(site.requests())
    cpu = cpu_seconds()
    reaped = controller_seconds()
    run = playbook(site, journal, ['ephemera.workspaces.expire', '-e', 'limit=%d' % expired,
                                   '-e', 'parallel=%d' % parallel], 'the expire playbook')
    cpu = (cpu_seconds() - cpu, controller_seconds() - reaped)
    requests = site.requests()[before:]
    for play in run.data['plays']:
        for task in play['tasks']:
            if task['task']['name'] == 'Release what expired':
                span = task['task']['duration']
                return run, task['hosts']['localhost'], _epoch(span['start']), _epoch(span['end']), requests, cpu
    sys.exit('no sweep task in the run:\n%s' % run.output[-4000:])


def controller_seconds():
    """CPU seconds of the child processes this one reaped: over a sweep, the ansible-playbook run and its workers
    (the controller); the guests' sshd run on."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _epoch(text):
    stamp = datetime.datetime.fromisoformat(text.rstrip('Z'))
    return stamp.replace(tzinfo=datetime.timezone.utc).timestamp()


def vmid_of(path):
    """The VMID a request is about: /nodes/N/lxc/VMID/..., or a task's UPID (UPID:node:...:type:VMID:user:)."""
    parts = path.split('/')
    if 'lxc' in parts and parts.index('lxc') + 1 < len(parts) and parts[parts.index('lxc') + 1].isdigit():
        return int(parts[parts.index('lxc') + 1])
    for part in parts:
        if part.startswith('UPID:'):
            fields = part.split(':')
            if len(fields) > 6 and fields[6].isdigit():
                return int(fields[6])
    return None


def roles(kinds, groups, index):
    """{name: what sweep ``index`` should do with it}: released (its group), deferred (a later group), gone (an
    earlier group's, destroyed), or the kind of a live one."""
    out = dict(kinds)
    for at, group in enumerate(groups):
        for name in group:
            out[name] = 'released' if at == index else 'deferred' if at > index else 'gone'
    return out


def check(site, journal, role, before, result, hanging_held, repo_dir):
    """The outcome of one sweep (``before``: snapshot() as the sweep began), or sys.exit naming what is wrong."""
    problems = []
    actions = {}
    for entry in result['entries']:
        actions.setdefault(entry['workspace'], []).append(entry)
    wanted = {'released': ['released'], 'deferred': ['deferred'], 'gone': [], 'working': ['activity'],
              'done': ['activity'], 'hanging': ['no_answer'], 'refusing': ['no_answer']}
    for name, what in sorted(role.items()):
        got = [e['action'] for e in actions.get(name, [])]
        if got != wanted[what]:
            problems.append('%s (%s): %s, not %s %s' % (name, what, got, wanted[what],
                                                        [e['detail'] for e in actions.get(name, [])]))
        elif what in EXPECTED_ACTIVITY and actions[name][0].get('activity') != EXPECTED_ACTIVITY[what]:
            problems.append('%s (%s): activity %s, not %s' % (name, what, actions[name][0].get('activity'),
                                                              EXPECTED_ACTIVITY[what]))
    present = site.present()
    branches = subprocess.run(['git', '-C', repo_dir, 'branch', '--list', 'ephemera/*', '--format=%(refname:short)'],
                              check=True, capture_output=True, text=True).stdout.split()
    with Journal.open(journal, create=False) as jnl:
        after = {ws['name']: ws for ws in jnl.list_workspaces()}
        events = {name: [e['action'] for e in jnl.events(name)] for name, what in role.items()
                  if what in ('released', 'working', 'done')}
    records, activities = before
    for name, what in sorted(role.items()):
        ws, old = after[name], records[name]
        if what == 'released':
            trail = events[name]
            if ws['status'] != 'destroyed' or not (ws.get('cleanup') or {}).get('cleanup_completed_at'):
                problems.append('%s: %s, cleanup %s after its release' % (name, ws['status'], ws.get('cleanup')))
            if ws['resource_id'] in present:
                problems.append('%s: its %s %s is still there' % (name, site.noun, ws['resource_id']))
            if not ('expired' in trail and 'archived' in trail and 'destroyed' in trail
                    and trail.index('expired') < trail.index('archived') < trail.index('destroyed')):
                problems.append('%s: not expired, archived, then destroyed: %s' % (name, trail))
            if 'ephemera/' + name not in branches:
                problems.append('%s: its unsaved work was not pushed to ephemera/%s' % (name, name))
        elif what == 'gone':
            if ws != old:
                problems.append('%s: destroyed by an earlier sweep, its record changed' % name)
        elif ws['status'] != 'ready' or ws['desired_state'] != 'present':
            problems.append('%s (%s): %s, desired %s' % (name, what, ws['status'], ws['desired_state']))
        elif what in ('hanging', 'refusing', 'deferred') and ws != old:
            problems.append('%s (%s): its record changed, generation %s to %s'
                            % (name, what, old['generation'], ws['generation']))
        elif what in EXPECTED_ACTIVITY:
            # The journal is written only when something changed: the activity, or the lease (working ones).
            changed = old['activity'] != EXPECTED_ACTIVITY[what] or what == 'working'
            recorded = events[name].count('activity') > activities.get(name, 0)
            if ws['activity'] != EXPECTED_ACTIVITY[what] or recorded != changed:
                problems.append('%s (%s): activity %s recorded, events %s'
                                % (name, what, ws['activity'], events[name][-3:]))
            if ws['resource_id'] not in present:
                problems.append('%s (%s): its %s %s is gone' % (name, what, site.noun, ws['resource_id']))
            touched = ws['lease']['last_touched_at'] > old['lease']['last_touched_at']
            if touched != (what == 'working'):
                problems.append('%s (%s): lease touched %s' % (name, what, touched))
    hanging = sum(1 for k in role.values() if k == 'hanging')
    if len(hanging_held) != hanging:
        problems.append('the silent listener saw %d connections closed, not %d' % (len(hanging_held), hanging))
    if problems:
        sys.exit('the sweep\'s outcome is wrong (%d problems):\n  %s' % (len(problems), '\n  '.join(problems[:40])))


def timing(role, journal, start, end):
    """The sweep task's time split at the journal's event times: the activity look runs from the task's start to the
    first release's start (each answer is recorded as its ask ends; an address that never answers holds the look
    until activity_timeout), the releases from the first expired event to the last completed cleanup."""
    with Journal.open(journal, create=False) as jnl:
        events = {name: [dict(e, at=epoch(e['at'])) for e in jnl.events(name)] for name, what in role.items()
                  if what in ('released', 'working', 'done')}
    recorded = [e['at'] for name, trail in events.items() for e in trail
                if role[name] != 'released' and e['action'] == 'activity' and start <= e['at'] <= end]
    began = {name: min(e['at'] for e in trail if e['action'] == 'expired' and e['at'] >= start)
             for name, trail in events.items() if role[name] == 'released'}
    completed = {name: max(e['at'] for e in trail if e['action'] == 'cleanup_completed')
                 for name, trail in events.items() if role[name] == 'released'}
    release_start = min(began.values())
    if recorded and max(recorded) > release_start:
        sys.exit('an answer was recorded after the first release had started: the look and the releases overlap')
    return {'look': release_start - start,
            'releases': max(completed.values()) - release_start,
            'per_release': statistics.median(completed[n] - began[n] for n in began)}


def split_requests(requests, records, role):
    """The requests the provider received during the sweep (``requests``: [(call, resource id)]): for the released
    resources (a container's VMID in the path or in a task's UPID; the one instance a request names), for the live
    ones (the labels of those whose lease the activity touched), and the rest."""
    owner = {}
    for name, what in role.items():
        owner[records[name]['resource_id']] = 'released' if what == 'released' else 'labels'
    out = {'released': 0, 'labels': 0, 'other': 0, 'others': {}}
    for call, resource_id in requests:
        what = owner.get(resource_id, 'other')
        out[what] += 1
        if what == 'other':
            out['others'][call] = out['others'].get(call, 0) + 1
    out['total'] = len(requests)
    return out


def build_site(args, workdir, site, journal, repo, kinds, groups):
    """The real workspaces (two parents by the create playbook, the rest their children by the fork playbook), then
    the expired leases and the simulated records; {what: figure} of the building."""
    parents = parents_of(kinds)
    memory = available_memory()
    load = os.getloadavg()
    began = time.monotonic()
    out = {'create': make_parents(workdir, site, journal, repo, parents), 'forks': 0, 'fork': 0.0}
    for agent, parent in sorted(parents.items()):
        children = sorted(n for n, k in kinds.items() if k in REAL and AGENT_OF[k] == agent and n != parent)
        runs, seconds = fork_children(workdir, site, journal, parent, children, args.batch)
        out['forks'] += runs
        out['fork'] += seconds
    out['seconds'] = time.monotonic() - began
    out['memory'] = memory - available_memory()
    out['guests'] = sum(1 for k in kinds.values() if k in REAL)
    out['load'] = load
    return out


def scenario(args, values):
    """One site (real workspaces, simulated ones, a silent listener), one sweep per ``values`` (parallel), the
    report."""
    kinds = plan(args.records, args.expired * len(values), args.idle, args.hanging, args.refusing)
    groups = groups_of(kinds, args.expired, len(values))
    workdir = tempfile.mkdtemp(prefix='ephemera-bench-expire-')
    site = SITES[args.provider](workdir, sum(1 for k in kinds.values() if k in REAL))
    listener = None
    try:
        net = pick_host().rsplit('.', 1)[0]
        listener = SilentListener(net + '.2', 22)
        repo = make_repo(workdir)
        journal = os.path.join(workdir, 'journal.sqlite')
        built = build_site(args, workdir, site, journal, repo, kinds, groups)
        every = prepare_journal(site, journal, kinds, groups, net, (net + '.2', 22))
        if len(every) != args.records:
            sys.exit('the journal holds %d workspaces, not %d' % (len(every), args.records))
        results = []
        for index, parallel in enumerate(values):
            print('... sweep %d of %d: parallel %d' % (index + 1, len(values), parallel), file=sys.stderr, flush=True)
            role = roles(kinds, groups, index)
            before = snapshot(journal)
            listener.held = []
            run, result, start, end, requests, cpu = sweep(site, journal, args.expired, parallel)
            hanging_held = list(listener.held)
            check(site, journal, role, before, result, hanging_held, os.path.join(workdir, 'repo'))
            out = timing(role, journal, start, end)
            out.update(parallel=parallel, wall=run.seconds, task=end - start, cpu=cpu,
                       requests=split_requests(requests, before[0], role), held=hanging_held,
                       reasons=reasons(result, kinds), live=sum(1 for w in role.values() if w in ('working', 'done')))
            results.append(out)
        # Printed before the site is taken down: a thousand guests take minutes to stop.
        report(args, values, built, results)
    except BaseException:
        # The site's own log goes with its directory: kept where the run can be looked into.
        kept = os.path.join(tempfile.gettempdir(), 'ephemera-bench-expire-%s.log' % args.provider)
        if site.info.get('log_file') and os.path.exists(site.info['log_file']):
            shutil.copyfile(site.info['log_file'], kept)
            print('... the %s log of this run: %s' % (args.provider, kept), file=sys.stderr, flush=True)
        raise
    finally:
        if listener is not None:
            listener.stop()
        print('... stopping %d guests' % len(kinds), file=sys.stderr, flush=True)
        site.stop()
        shutil.rmtree(workdir, ignore_errors=True)


def reasons(result, kinds):
    """{kind: {detail without its address: count}} of the workspaces that did not answer."""
    out = {}
    for entry in result['entries']:
        kind = kinds.get(entry['workspace'])
        if entry['action'] == 'no_answer':
            # Without the address and the user: one line per kind of failure.
            detail = ADDRESS.sub('ADDRESS', entry['detail'].replace('activity unknown: ', '', 1))
            out.setdefault(kind, {})
            out[kind][detail] = out[kind].get(detail, 0) + 1
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n', maxsplit=1)[0])
    parser.add_argument('--provider', choices=sorted(SITES), default='proxmox',
                        help='the try-out place: the cluster (proxmox) or the AWS cloud (aws)')
    parser.add_argument('--records', type=int, default=1000, help='leased workspaces in the journal')
    parser.add_argument('--expired', type=int, default=50,
                        help='expired ones a sweep releases (its limit); as many more for each further --parallel')
    parser.add_argument('--idle', type=int, default=150, help='live ones whose agent has finished (the rest work)')
    parser.add_argument('--hanging', type=int, default=0, help='live records whose address accepts, never answers')
    parser.add_argument('--refusing', type=int, default=0, help='live records whose address refuses')
    parser.add_argument('--parallel', default='8', help='the sweeps\' parallel values, comma-separated')
    parser.add_argument('--batch', type=int, default=100, help='children of one run of the fork playbook')
    args = parser.parse_args()
    values = [int(v) for v in args.parallel.split(',')]
    working = args.records - args.expired * len(values) - args.idle - args.hanging - args.refusing
    if working < 1 or args.idle < 1 or args.expired < 1:
        parser.error('--records leaves no working workspace, or --idle or --expired is below 1: the site needs '
                     'at least one of each (--expired once per --parallel value)')
    scenario(args, values)


def report(args, values, site, results):
    """Print what the sweeps measured."""
    working = args.records - args.expired * len(values) - args.idle - args.hanging - args.refusing
    print('expire: sweeps (ansible-playbook ephemera.workspaces.expire -e limit=%d) over %d leased workspaces on %s: '
          '%d expired (real guests with unsaved work; %d a sweep), %d live with a real guest (%d agents working, '
          '%d done), %d live whose address refuses, %d whose address accepts and never answers; activity_timeout %d s'
          % (args.expired, args.records, args.provider, args.expired * len(values), args.expired,
             args.records - args.expired * len(values) - args.hanging - args.refusing, working, args.idle,
             args.refusing, args.hanging, ACTIVITY_TIMEOUT))
    print('  site: %d real guests, 2 by the create playbook (%.0f s), the rest by %d runs of the fork playbook '
          '(%.0f s); %.0f s in all; they hold %.1f GiB of memory (MemAvailable before and after)'
          % (site['guests'], site['create'], site['forks'], site['fork'], site['seconds'], site['memory'] / 2 ** 30))
    print('  %-9s %5s %7s %7s %7s %9s %7s %6s %9s %9s %7s %6s %5s %5s' % (
        'parallel', 'live', 'run', 'task', 'look', 'releases', 'each', 'rest', 'requests', 'releases',
        'labels', 'other', 'cpu', 'ctl'))
    for r in results:
        rest = r['task'] - r['look'] - r['releases']
        print('  %-9d %5d %6.1fs %6.1fs %6.1fs %8.1fs %6.2fs %5.1fs %9d %9d %7d %6d %4.0fs %4.0fs' % (
            r['parallel'], r['live'], r['wall'], r['task'], r['look'], r['releases'], r['per_release'],
            rest, r['requests']['total'], r['requests']['released'], r['requests']['labels'], r['requests']['other'],
            r['cpu'][0], r['cpu'][1]))
    print('  live: the workspaces whose guest answered; run: the ansible-playbook run; task: the sweep task; look: '
          'from the task\'s start (module start-up included) to the first release\'s start (the asks, and each '
          'answer written as its ask ends: journal, labels of the working ones); releases: the first release\'s '
          'start to the last cleanup completed (each: the median one); rest: the candidates listed, the report. '
          'requests: the provider\'s during the run (fakepve\'s log, or the AWS proxy\'s): all, for the released '
          'ones, for the working ones\' labels, the rest (logins, version, listings); cpu: the CPU seconds of this '
          'process (the try-out cluster runs in it) and what it started during the run (the cloud\'s process, the '
          'guests\' sshd); ctl: of them, the controller\'s (the ansible-playbook run and its workers)')
    for r in results:
        held = r['held']
        if held:
            print('  parallel %d: %d hanging addresses alone keep the asks >= %d s (%d x %d s); their connections '
                  'were held %.1f-%.1f s (median %.1f) until the client gave up' % (
                      r['parallel'], len(held), -(-len(held) // r['parallel']) * ACTIVITY_TIMEOUT,
                      -(-len(held) // r['parallel']), ACTIVITY_TIMEOUT, min(held), max(held), statistics.median(held)))
        print('  parallel %d, requests besides the workspaces\': %s' % (r['parallel'], ', '.join(
            '%d x %s' % (n, what) for what, n in sorted(r['requests']['others'].items()))))
        for kind, found in sorted(r['reasons'].items()):
            for detail, n in sorted(found.items()):
                print('    no answer, %s: %d x %s' % (kind, n, detail))
    print('  cores: %d, load average before the site was built: %.2f %.2f %.2f, after the sweeps: %.2f %.2f %.2f'
          % ((os.cpu_count(),) + tuple(site['load']) + tuple(os.getloadavg())))
    base = results[0]
    line = 'expire: %d workspaces, %d expired, %.1f s, %d requests; releases in parallel %d: %.1f s' % (
        args.records, args.expired, base['wall'], base['requests']['total'], base['parallel'], base['releases'])
    line += ''.join('; parallel %d: %.1f s, releases %.1f s' % (r['parallel'], r['wall'], r['releases'])
                    for r in results[1:])
    print(line)


if __name__ == '__main__':
    main()
