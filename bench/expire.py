"""How long does one expiry sweep over 1,000 leased workspaces take, and what does it ask of the cluster?

    .venv/bin/python bench/expire.py [--records 1000] [--expired 50] [--answering 30] [--hanging 32]
                                     [--parallel 8,32] [--forks 10]

For each --parallel value, a site of its own, built the same way, on a try-out cluster (tests/localpve, inside
this process so that fakepve's own request log can be read; time scale 0, so Proxmox tasks finish at once):

- --answering + --expired real workspaces, made by the create playbook in one ansible-playbook run: containers
  with an sshd of their own, a checkout and a runner. Half of the answering ones run an agent that works
  (``sleep``: its runner says active, so the sweep touches its lease and rewrites its labels), half one that has
  finished (idle: recorded, the lease left as it is). Each expired one gets a file of unsaved work in its
  checkout, and its lease is replaced, through the Journal API, by one from core/lease.new_lease that started two
  hours ago (ttl 3600 s): expired an hour ago.
- the other live records (--records - --expired - --answering), made through the Journal API with a fresh lease
  from new_lease, each a copy of a real record (its SSH settings, paths, host key) under its own name, VMID and
  address. Running that many sshd is not reasonable on two cores, so they point where a guest that cannot answer
  points: --hanging of them at a listener of this process that accepts the connection and never says a word (a
  guest whose sshd hangs: the SSH banner never comes and the activity_timeout bound ends the wait), the rest at
  loopback addresses where nothing listens (a guest that is down: connection refused at once). Their VMIDs name
  no container: a sweep asks the cluster about a live workspace only when its agent answers active or blocked
  (to rewrite its lease labels).

Names are spread at random (seeded), so the kinds mix in the order the sweep asks them. Then the sweep, as users
run it: ``ansible-playbook ephemera.workspaces.expire -e limit=<expired>`` (the collection pinned to this
checkout), with ``-e parallel=N`` (the activity asks and the releases, each up to N at once), every other option at
its default (activity_timeout 10 s). ``--parallel 1,8`` compares one at a time with the default.

Printed per sweep: the run's wall time and the sweep task's time, split from the journal's event times into the
activity look (the asks, then the recording of the answers), the releases (archive, then delete; up to parallel at
once) and the rest; the API requests fakepve received, by what they were for; how long the hanging
connections were held; the CPU seconds of every process. The outcome is checked (every expired workspace
archived and destroyed, its container gone; every live one still ready; the answering ones' activity recorded;
the others' records untouched) and a wrong outcome exits non-zero. No time is asserted. The last line:

    expire: 1000 workspaces, 50 expired, A s, B requests (parallel 8); parallel 32 C s, D requests, ratio A/C
"""

import argparse
import datetime
import json
import os
import random
import re
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
from ansible_collections.ephemera.workspaces.plugins.module_utils.core import lease as leasing  # noqa: E402 pylint: disable=wrong-import-position
from ansible_collections.ephemera.workspaces.plugins.module_utils.core.journal import Journal, epoch  # noqa: E402 pylint: disable=wrong-import-position

CREATE = os.path.join(ROOT, 'playbooks', 'create.yml')
INVENTORY = os.path.join(ROOT, 'inventories', 'localpve')
AGENTS = {'working': ['sh', '-c', 'sleep 3600'], 'done': ['sh', '-c', 'echo done']}
# What each kind's agent says when asked.
EXPECTED_ACTIVITY = {'working': 'active', 'done': 'idle'}
ACTIVITY_TIMEOUT = 10
SEED = 20240
ADDRESS = re.compile(r'([^ @]+@)?127(\.[0-9]+){3}(:[0-9]+)?')


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


def plan(records, expired, answering, hanging):
    """{name: kind} of the site: expired, working, done (answering), hanging, refusing; names spread at random."""
    kinds = (['expired'] * expired + ['working'] * (answering - answering // 2) + ['done'] * (answering // 2)
             + ['hanging'] * hanging)
    kinds += ['refusing'] * (records - len(kinds))
    random.Random(SEED).shuffle(kinds)
    return {'ws-%04d' % n: kind for n, kind in enumerate(kinds)}


def create_real(workdir, cluster, journal, repo, names, kinds, forks):
    """The real workspaces, by the create playbook in one ansible-playbook run; its wall seconds."""
    inventory = os.path.join(workdir, 'hosts.json')
    with open(inventory, 'w') as out:
        json.dump({'workspaces': {'hosts': {n: {'workspace': n, 'agent': 'done' if kinds[n] == 'expired'
                                                else kinds[n]} for n in names},
                                  'vars': {'ansible_connection': 'local',
                                           'ansible_python_interpreter': sys.executable}}}, out)
    extra = os.path.join(workdir, 'create-vars.json')
    with open(extra, 'w') as out:
        json.dump({'target': 'workspaces', 'repo': repo, 'purpose': 'Benchmark the expiry sweep',
                   'ephemera_agents': AGENTS}, out)
    run = run_ansible(['ansible-playbook', '-i', INVENTORY, '-i', inventory, CREATE, '-e', '@' + extra,
                       '--forks', str(forks)],
                      env={'LOCALPVE_STATE_DIR': cluster.info['state_dir'], 'EPHEMERA_JOURNAL': journal}, timeout=3600)
    if not run.ok:
        sys.exit('the create playbook failed (rc %d):\n%s' % (run.returncode, run.output[-4000:]))
    return run.seconds


def prepare_journal(cluster, journal, kinds, refusing_net, hanging_at):
    """Expire the expired ones (unsaved work in their checkout, a lease that ended an hour ago), then record the
    simulated live ones. Returns {name: record} of every workspace as the sweep will find it."""
    now = time.time()
    with Journal.open(journal, create=False) as jnl:
        real = {ws['name']: ws for ws in jnl.list_workspaces()}
        wrong = [(n, ws['status']) for n, ws in real.items() if ws['status'] != 'ready']
        if wrong or len(real) != sum(1 for k in kinds.values() if k in ('expired', 'working', 'done')):
            sys.exit('the create playbook did not make every real workspace ready: %s' % wrong)
        for name, ws in sorted(real.items()):
            if kinds[name] != 'expired':
                continue
            checkout = cluster.info['guest_root'].replace('{vmid}', str(ws['vmid'])) + \
                (ws['params'].get('checkout_path') or '/workspace/repo')
            with open(os.path.join(checkout, 'notes.txt'), 'w') as out:
                out.write('unsaved work of %s\n' % name)
            ended = leasing.new_lease(now - 7200, ttl=3600, idle_timeout=1800)
            jnl.update_workspace(name, ws['generation'], lease=ended, lease_expires_at=ended['expires_at'])
        # The simulated ones copy a real record: one whose agent is done, else any.
        model = real[min(real, key=lambda n: (kinds[n] != 'done', n))]
        refusing = 0
        next_vmid = 200000
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
                location=model['location'], resource_id=next_vmid, candidate_id=next_vmid, address=address,
                repo=model['repo'], ref=model['ref'], purpose=model['purpose'], progress=model['progress'],
                facts=model['facts'], params=dict(model['params'], ssh_port=port), lease=fresh,
                lease_expires_at=fresh['expires_at'])
            next_vmid += 1
        return {ws['name']: ws for ws in jnl.list_workspaces()}


def sweep(cluster, journal, expired, parallel):
    """One run of the expire playbook; (run, its sweep task's result, task start and end in epoch seconds)."""
    before = cluster.run(lambda: len(cluster.pve.requests))
    cpu = cpu_seconds()
    run = run_ansible(['ansible-playbook', '-i', INVENTORY, 'ephemera.workspaces.expire', '-e', 'limit=%d' % expired,
                       '-e', 'parallel=%d' % parallel],
                      env={'LOCALPVE_STATE_DIR': cluster.info['state_dir'], 'EPHEMERA_JOURNAL': journal}, timeout=3600)
    cpu = cpu_seconds() - cpu
    requests = cluster.run(lambda: list(cluster.pve.requests))[before:]
    if not run.ok:
        sys.exit('the expire playbook failed (rc %d):\n%s' % (run.returncode, run.output[-4000:]))
    for play in run.data['plays']:
        for task in play['tasks']:
            if task['task']['name'] == 'Release what expired':
                span = task['task']['duration']
                return run, task['hosts']['localhost'], _epoch(span['start']), _epoch(span['end']), requests, cpu
    sys.exit('no sweep task in the run:\n%s' % run.output[-4000:])


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


def check(cluster, journal, kinds, before, result, hanging_held, repo_dir):
    """The outcome, or sys.exit naming what is wrong."""
    problems = []
    actions = {}
    for entry in result['entries']:
        actions.setdefault(entry['workspace'], []).append(entry)
    wanted = {'expired': 'released', 'working': 'activity', 'done': 'activity', 'hanging': 'no_answer',
              'refusing': 'no_answer'}
    for name, kind in sorted(kinds.items()):
        got = [e['action'] for e in actions.get(name, [])]
        if got != [wanted[kind]]:
            problems.append('%s (%s): %s, not [%s] %s' % (name, kind, got, wanted[kind],
                                                          [e['detail'] for e in actions.get(name, [])]))
        elif kind in EXPECTED_ACTIVITY and actions[name][0].get('activity') != EXPECTED_ACTIVITY[kind]:
            problems.append('%s (%s): activity %s, not %s' % (name, kind, actions[name][0].get('activity'),
                                                              EXPECTED_ACTIVITY[kind]))
    present = set(cluster.run(lambda: [ct.vmid for ct in cluster.pve.cts]))
    branches = subprocess.run(['git', '-C', repo_dir, 'branch', '--list', 'ephemera/*', '--format=%(refname:short)'],
                              check=True, capture_output=True, text=True).stdout.split()
    with Journal.open(journal, create=False) as jnl:
        after = {ws['name']: ws for ws in jnl.list_workspaces()}
        events = {name: [e['action'] for e in jnl.events(name)] for name, kind in kinds.items()
                  if kind in ('expired', 'working', 'done')}
    for name, kind in sorted(kinds.items()):
        ws, old = after[name], before[name]
        if kind == 'expired':
            trail = events[name]
            if ws['status'] != 'destroyed' or not (ws.get('cleanup') or {}).get('cleanup_completed_at'):
                problems.append('%s: %s, cleanup %s after its release' % (name, ws['status'], ws.get('cleanup')))
            if ws['vmid'] in present:
                problems.append('%s: its container %s is still there' % (name, ws['vmid']))
            if not ('expired' in trail and 'archived' in trail and 'destroyed' in trail
                    and trail.index('expired') < trail.index('archived') < trail.index('destroyed')):
                problems.append('%s: not expired, archived, then destroyed: %s' % (name, trail))
            if 'ephemera/' + name not in branches:
                problems.append('%s: its unsaved work was not pushed to ephemera/%s' % (name, name))
        elif ws['status'] != 'ready' or ws['desired_state'] != 'present':
            problems.append('%s (%s): %s, desired %s' % (name, kind, ws['status'], ws['desired_state']))
        elif kind in ('hanging', 'refusing') and ws != old:
            problems.append('%s (%s): its record changed, generation %s to %s'
                            % (name, kind, old['generation'], ws['generation']))
        elif kind in EXPECTED_ACTIVITY:
            # The journal is written only when something changed: the activity, or the lease (working ones).
            changed = old['activity'] != EXPECTED_ACTIVITY[kind] or kind == 'working'
            if ws['activity'] != EXPECTED_ACTIVITY[kind] or ('activity' in events[name]) != changed:
                problems.append('%s (%s): activity %s recorded, events %s'
                                % (name, kind, ws['activity'], events[name][-3:]))
            if ws['vmid'] not in present:
                problems.append('%s (%s): its container %s is gone' % (name, kind, ws['vmid']))
            touched = ws['lease']['last_touched_at'] > old['lease']['last_touched_at']
            if touched != (kind == 'working'):
                problems.append('%s (%s): lease touched %s' % (name, kind, touched))
    hanging = sum(1 for k in kinds.values() if k == 'hanging')
    if len(hanging_held) != hanging:
        problems.append('the silent listener saw %d connections closed, not %d' % (len(hanging_held), hanging))
    if problems:
        sys.exit('the sweep\'s outcome is wrong (%d problems):\n  %s' % (len(problems), '\n  '.join(problems[:40])))


def scenario(args, parallel):
    """A site of its own (real workspaces, simulated ones, a silent listener) and one sweep at ``parallel``."""
    kinds = plan(args.records, args.expired, args.answering, args.hanging)
    workdir = tempfile.mkdtemp(prefix='ephemera-bench-expire-')
    cluster = LocalCluster.start(os.path.join(workdir, 'cluster'), time_scale=0)
    listener = None
    try:
        cluster.run(lambda: setattr(cluster.pve, 'max_requests', 10 ** 7))
        net = pick_host().rsplit('.', 1)[0]
        listener = SilentListener(net + '.2', 22)
        repo = make_repo(workdir)
        journal = os.path.join(workdir, 'journal.sqlite')
        real = sorted(n for n, k in kinds.items() if k in ('expired', 'working', 'done'))
        setup = create_real(workdir, cluster, journal, repo, real, kinds, args.forks)
        before = prepare_journal(cluster, journal, kinds, net, (net + '.2', 22))
        if len(before) != args.records:
            sys.exit('the journal holds %d workspaces, not %d' % (len(before), args.records))
        run, result, start, end, requests, cpu = sweep(cluster, journal, args.expired, parallel)
        hanging_held = list(listener.held)
        check(cluster, journal, kinds, before, result, hanging_held, os.path.join(workdir, 'repo'))
        out = timing(kinds, journal, start, end)
        out.update(parallel=parallel, setup=setup, wall=run.seconds, task=end - start, cpu=cpu,
                   requests=split_requests(requests, before, kinds), held=hanging_held,
                   reasons=reasons(result, kinds))
        return out
    finally:
        if listener is not None:
            listener.stop()
        cluster.stop()
        # The runners and agents started their own sessions in the guests: gone with the guests' files.
        stop_leftovers(cluster.info['state_dir'])
        shutil.rmtree(workdir, ignore_errors=True)


def timing(kinds, journal, start, end):
    """The sweep task's time split at the journal's event times: the asks end when the first answer is recorded
    (the answers are recorded once every ask is done), the releases run from the first expired event to the last
    completed cleanup."""
    with Journal.open(journal, create=False) as jnl:
        events = {name: [dict(e, at=epoch(e['at'])) for e in jnl.events(name)] for name, kind in kinds.items()
                  if kind in ('expired', 'working', 'done')}
    recorded = [e['at'] for name, trail in events.items() for e in trail
                if kinds[name] != 'expired' and e['action'] == 'activity' and start <= e['at'] <= end]
    began = {name: min(e['at'] for e in trail if e['action'] == 'expired')
             for name, trail in events.items() if kinds[name] == 'expired'}
    completed = {name: max(e['at'] for e in trail if e['action'] == 'cleanup_completed')
                 for name, trail in events.items() if kinds[name] == 'expired'}
    release_start = min(began.values())
    asks_end = min(recorded) if recorded else release_start
    return {'asks': asks_end - start, 'recording': (max(recorded) if recorded else asks_end) - asks_end,
            'releases': max(completed.values()) - release_start,
            'per_release': statistics.median(completed[n] - began[n] for n in began)}


def split_requests(requests, before, kinds):
    """The requests fakepve received during the sweep: for the released containers (their VMID in the path or in
    a task's UPID), for the live ones (the labels of those whose lease the activity touched), and the rest."""
    owner = {}
    for name, kind in kinds.items():
        owner[before[name]['vmid']] = 'released' if kind == 'expired' else 'labels'
    out = {'released': 0, 'labels': 0, 'other': 0, 'others': {}}
    for method, path, dummy in requests:
        kind = owner.get(vmid_of(path), 'other')
        out[kind] += 1
        if kind == 'other':
            what = '%s %s' % (method, re.sub(r'/api2/(json|extjs)', '', path))
            out['others'][what] = out['others'].get(what, 0) + 1
    out['total'] = len(requests)
    return out


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
    parser.add_argument('--records', type=int, default=1000, help='leased workspaces in the journal')
    parser.add_argument('--expired', type=int, default=50, help='of which expired (real containers); the limit')
    parser.add_argument('--answering', type=int, default=30, help='live ones with a real guest and runner')
    parser.add_argument('--hanging', type=int, default=32, help='live ones whose address accepts and never answers')
    parser.add_argument('--parallel', default='8,32', help='the sweeps\' parallel values, comma-separated')
    parser.add_argument('--forks', type=int, default=10, help='forks of the create run that makes the real ones')
    args = parser.parse_args()
    if args.expired + args.answering + args.hanging > args.records:
        parser.error('--expired, --answering and --hanging add up to more than --records')
    values = [int(v) for v in args.parallel.split(',')]
    load = os.getloadavg()
    results = []
    for parallel in values:
        print('... parallel %d: building the site' % parallel, file=sys.stderr, flush=True)
        results.append(scenario(args, parallel))
    refusing = args.records - args.expired - args.answering - args.hanging
    print('expire: one sweep (ansible-playbook ephemera.workspaces.expire -e limit=%d) over %d leased workspaces: '
          '%d expired (real containers, archived and deleted), %d live with a real guest (%d agents working, %d '
          'done), %d live whose address refuses, %d whose address accepts and never answers; activity_timeout %d s'
          % (args.expired, args.records, args.expired, args.answering, args.answering - args.answering // 2,
             args.answering // 2, refusing, args.hanging, ACTIVITY_TIMEOUT))
    print('  %-9s %7s %7s %7s %10s %9s %7s %6s %9s %9s %7s %6s %5s' % (
        'parallel', 'run', 'task', 'asks', 'recording', 'releases', 'each', 'rest', 'requests', 'releases', 'labels',
        'other', 'cpu'))
    for r in results:
        rest = r['task'] - r['asks'] - r['recording'] - r['releases']
        print('  %-9d %6.1fs %6.1fs %6.1fs %9.1fs %8.1fs %6.2fs %5.1fs %9d %9d %7d %6d %4.0fs' % (
            r['parallel'], r['wall'], r['task'], r['asks'], r['recording'], r['releases'], r['per_release'], rest,
            r['requests']['total'], r['requests']['released'], r['requests']['labels'], r['requests']['other'],
            r['cpu']))
    print('  run: the ansible-playbook run; task: the sweep task; asks: from the task\'s start (module start-up '
          'included) to the first answer recorded, every ask done; recording: the answers written (journal, labels of '
          'the working ones); releases: the first release\'s start to the last cleanup completed (each: the median '
          'one); rest: the candidates listed, the report. requests: fakepve\'s log during the run: all, for the '
          'released containers, for the working ones\' labels, the rest (logins, version); cpu: every process\'s '
          'CPU seconds during the run, this one\'s (the try-out cluster) and the guests\' included')
    for r in results:
        held = r['held']
        print('  parallel %d: %d hanging addresses alone keep the asks >= %d s (%d x %d s); their connections '
              'were held %.1f-%.1f s (median %.1f) until the client gave up; site built in %.0f s' % (
                  r['parallel'], len(held), -(-len(held) // r['parallel']) * ACTIVITY_TIMEOUT,
                  -(-len(held) // r['parallel']), ACTIVITY_TIMEOUT, min(held or [0]), max(held or [0]),
                  statistics.median(held or [0]), r['setup']))
        print('    requests besides the containers\': %s' % ', '.join(
            '%d x %s' % (n, what) for what, n in sorted(r['requests']['others'].items())))
        for kind, found in sorted(r['reasons'].items()):
            for detail, n in sorted(found.items()):
                print('    no answer, %s: %d x %s' % (kind, n, detail))
    print('  cores: %d, load average at start: %.2f %.2f %.2f, at the end: %.2f %.2f %.2f'
          % ((os.cpu_count(),) + tuple(load) + tuple(os.getloadavg())))
    base = results[0]
    line = 'expire: %d workspaces, %d expired, %.1f s, %d requests' % (
        args.records, args.expired, base['wall'], base['requests']['total'])
    if len(results) > 1:
        line += ' (parallel %d); ' % base['parallel'] + '; '.join(
            'parallel %d %.1f s, %d requests, ratio %.2f'
            % (r['parallel'], r['wall'], r['requests']['total'], base['wall'] / r['wall']) for r in results[1:])
    print(line)


if __name__ == '__main__':
    main()
