"""How long does a workspace take from request to ready, where does the time go, and how many API requests?

    .venv/bin/python bench/create.py [--counts 1,20] [--time-scales 0,1] [--forks 10] [--latency S]

For each time scale and each number of workspaces, a fresh try-out cluster (tests/localpve, inside this
process so that fakepve's own request log can be read) and a fresh journal; one ansible-playbook run of
playbooks/create.yml with one host per workspace (connection local, --forks), as docs/create.md shows.

- time scale 0: Proxmox tasks finish at once: what remains is the collection, Ansible and SSH;
- time scale 1: PVE seconds are real seconds, with the try-out site's task durations (a linked clone
  4 s, a start 2 s, a DHCP lease 1 s after the start), as on a real node.

Printed, per scenario: the run's wall time; each workspace's create-to-ready time (from the start of the run
to its "ready" in the journal: median and slowest); the API requests fakepve received (in all, per workspace,
and how many were task-status polls); then, per step, the median time workspaces spent in it (from the
journal's step timestamps); and the cost of a step that has nothing to do: a rerun of the 1-workspace create,
in which every task only starts a module that finds its work done (Ansible's and the module's start-up).
No figure is asserted.
"""

import argparse
import datetime
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# The repository root first on sys.path, so that bench.* and tests.* import as packages.
sys.path[0] = ROOT

from tests.ansible_run import run_ansible  # noqa: E402 pylint: disable=wrong-import-position
from tests.localpve import LocalCluster  # noqa: E402 pylint: disable=wrong-import-position
from tests.localpve.guests import stop_leftovers  # noqa: E402 pylint: disable=wrong-import-position
from ansible_collections.ephemera.workspaces.plugins.module_utils.flows.create import STEPS  # noqa: E402 pylint: disable=wrong-import-position
from ansible_collections.ephemera.workspaces.plugins.module_utils.core.journal import Journal  # noqa: E402 pylint: disable=wrong-import-position

PLAYBOOK = os.path.join(ROOT, 'playbooks', 'create.yml')
INVENTORY = os.path.join(ROOT, 'inventories', 'localpve')
AGENT = ['sh', '-c', 'sleep 600']


def make_repo(workdir):
    repo = os.path.join(workdir, 'repo')
    env = dict(os.environ, GIT_AUTHOR_NAME='bench', GIT_AUTHOR_EMAIL='bench@example.invalid',
               GIT_COMMITTER_NAME='bench', GIT_COMMITTER_EMAIL='bench@example.invalid')
    subprocess.run(['git', 'init', '--quiet', '--initial-branch=main', repo], check=True, env=env)
    with open(os.path.join(repo, 'greet.py'), 'w') as out:
        out.write('def greet(name):\n    return "hello " + name\n')
    subprocess.run(['git', '-C', repo, 'add', 'greet.py'], check=True, env=env)
    subprocess.run(['git', '-C', repo, 'commit', '--quiet', '-m', 'a greeting'], check=True, env=env)
    return 'file://' + repo


def run_create(workdir, state_dir, journal, repo, names, forks):
    """One ansible-playbook run creating ``names``; (wall seconds, start epoch, json output)."""
    inventory = os.path.join(workdir, 'hosts-%d.json' % len(names))
    with open(inventory, 'w') as out:
        json.dump({'workspaces': {'hosts': dict((n, {'workspace': n}) for n in names), 'vars': {
            'ansible_connection': 'local', 'ansible_python_interpreter': sys.executable}}}, out)
    extra = os.path.join(workdir, 'vars.json')
    with open(extra, 'w') as out:
        json.dump({'target': 'workspaces', 'repo': repo, 'purpose': 'Benchmark the create', 'agent': 'bench',
                   'ephemera_agents': {'bench': AGENT}}, out)
    cmd = ['ansible-playbook', '-i', INVENTORY, '-i', inventory, PLAYBOOK, '-e', '@' + extra, '--forks', str(forks)]
    started = time.time()
    run = run_ansible(cmd, env={'LOCALPVE_STATE_DIR': state_dir, 'EPHEMERA_JOURNAL': journal}, timeout=3600)
    if not run.ok or run.data is None:
        sys.exit('ansible-playbook failed (rc %d):\n%s' % (run.returncode, run.output[-4000:]))
    return run.seconds, started, run.data


def task_seconds(data):
    """Wall seconds of every task of a json-callback run."""
    out = []
    for play in data['plays']:
        for task in play['tasks']:
            span = task['task']['duration']
            out.append((_stamp(span['end']) - _stamp(span['start'])).total_seconds())
    return out


def _stamp(text):
    return datetime.datetime.fromisoformat(text.rstrip('Z'))


def scenario(time_scale, count, forks, latency, with_rerun):
    workdir = tempfile.mkdtemp(prefix='ephemera-bench-create-')
    cluster = LocalCluster.start(os.path.join(workdir, 'cluster'), time_scale=time_scale, latency=latency)
    try:
        cluster.run(lambda: setattr(cluster.pve, 'max_requests', 10 ** 7))
        repo = make_repo(workdir)
        journal = os.path.join(workdir, 'journal.sqlite')
        names = ['bench-%02d' % n for n in range(1, count + 1)]
        before = cluster.run(lambda: len(cluster.pve.requests))
        wall, started, data = run_create(workdir, cluster.info['state_dir'], journal, repo, names, forks)
        requests = cluster.run(lambda: list(cluster.pve.requests))[before:]
        with Journal.open(journal, create=False) as jnl:
            records = [jnl.get_workspace(n) for n in names]
        if any(ws['status'] != 'ready' for ws in records):
            sys.exit('not every workspace is ready: %s' % [(ws['name'], ws['status']) for ws in records])
        ready = [ws['progress']['ready'] - started for ws in records]
        steps = {}
        for ws in records:
            previous = started
            for step in STEPS:
                steps.setdefault(step, []).append(ws['progress'][step] - previous)
                previous = ws['progress'][step]
        polls = sum(1 for r in requests if '/tasks/' in r[1] and r[1].endswith('/status'))
        result = {'time_scale': time_scale, 'count': count, 'wall': wall, 'ready': ready, 'requests': len(requests),
                  'polls': polls, 'steps': dict((k, statistics.median(v)) for k, v in steps.items()),
                  'tasks': len(task_seconds(data))}
        if with_rerun:
            rerun = run_create(workdir, cluster.info['state_dir'], journal, repo, names, forks)
            seconds = task_seconds(rerun[2])
            result['rerun'] = {'wall': rerun[0], 'tasks': len(seconds), 'per_task': statistics.median(seconds)}
        return result
    finally:
        cluster.stop()
        # The runners and agents started their own sessions in the guests: gone with the guests' files.
        stop_leftovers(cluster.info['state_dir'])
        shutil.rmtree(workdir, ignore_errors=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n', maxsplit=1)[0])
    parser.add_argument('--counts', default='1,20', help='numbers of workspaces, comma-separated')
    parser.add_argument('--time-scales', default='0,1', help='fakepve time scales, comma-separated')
    parser.add_argument('--forks', type=int, default=10)
    parser.add_argument('--latency', type=float, default=0.0, help='PVE seconds of latency per API request')
    args = parser.parse_args()
    counts = [int(c) for c in args.counts.split(',')]
    scales = [float(s) for s in args.time_scales.split(',')]
    load = os.getloadavg()[0]
    results = []
    for scale in scales:
        for count in counts:
            print('... time scale %g, %d workspace(s)' % (scale, count), file=sys.stderr, flush=True)
            results.append(scenario(scale, count, args.forks, args.latency, with_rerun=(count == min(counts)
                                                                                        and scale == scales[0])))
    print('create: request to ready, one ansible-playbook run, --forks %d, latency %g PVE s per request'
          % (args.forks, args.latency))
    print('  %-11s %5s %9s %15s %15s %9s %9s %8s' % ('time scale', 'ws', 'run wall', 'to ready median',
                                                     'to ready max', 'requests', 'per ws', 'polls'))
    for r in results:
        print('  %-11g %5d %8.1fs %14.1fs %14.1fs %9d %9.1f %8d' % (
            r['time_scale'], r['count'], r['wall'], statistics.median(r['ready']), max(r['ready']), r['requests'],
            r['requests'] / float(r['count']), r['polls']))
    print()
    print('  median seconds per step (from the previous step\'s end; step 1 from the start of the run):')
    print('  %-16s' % 'step' + ''.join('%10s' % ('ts %g/%d' % (r['time_scale'], r['count'])) for r in results))
    for step in STEPS:
        print('  %-16s' % step + ''.join('%10.2f' % r['steps'][step] for r in results))
    for r in results:
        if 'rerun' in r:
            rerun = r['rerun']
            print()
            print('  a rerun on the ready workspace(s) (time scale %g, %d): %.1f s for %d tasks, median %.2f s a task: '
                  'the start-up of Ansible\'s task and of a module that finds its work done'
                  % (r['time_scale'], r['count'], rerun['wall'], rerun['tasks'], rerun['per_task']))
    print('  cores: %d, load average at start: %.2f' % (os.cpu_count(), load))


if __name__ == '__main__':
    main()
