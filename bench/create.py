"""How long does a workspace take from request to ready, where does the time go, what does it cost in CPU?

    .venv/bin/python bench/create.py [--count 20] [--repeat 3] [--time-scales 0] [--forks 10] [--latency S]
    .venv/bin/python bench/create.py --provider aws        (bench/create_aws.py: on the try-out cloud for AWS)

For each time scale, one try-out cluster (tests/localpve, inside this process so that fakepve's own request log
can be read), and on it, one after the other:

- community.proxmox: a playbook of two tasks, community.proxmox.proxmox clone (linked, from the same template, into
  the same pool) and start: what a hand-written playbook does, without any of the collection's safety;
- one workspace: playbooks/create.yml from request to ready (journal, marker, address, SSH, checkout, runner,
  brief), --repeat times, a fresh workspace each time (median);
- --count workspaces in one ansible-playbook run, one host each (connection local, --forks), and the CPU seconds
  of every process it took: this one (the try-out cluster's API runs in it), ansible-playbook and its workers, the
  guests' sshd and what their sessions ran.

Time scale 0: Proxmox tasks finish at once and the DHCP lease comes at once, what remains is Ansible, the
collection and SSH. Time scale 1: PVE seconds are real seconds, with the try-out site's task durations (a linked
clone 4 s, a start 2 s) and a DHCP lease 1 s after the start.

Printed: each run's wall time; each workspace's create-to-ready time; the API requests fakepve received; per
step, the median time workspaces spent in it (from the journal's step timestamps); the cost of a task that finds
its work done (a rerun); and, last, one line that compares the three at time scale 0:

    create: 1 workspace A s, community.proxmox clone+start B s, ratio R; 20 workspaces C s, ratio to one P,
    cpu D s on N cores

No figure is asserted.
"""

import argparse
import datetime
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.parse

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# The repository root first on sys.path, so that bench.* and tests.* import as packages.
sys.path[0] = ROOT

from tests.ansible_run import run_ansible  # noqa: E402 pylint: disable=wrong-import-position
from tests.localpve import LocalCluster, system  # noqa: E402 pylint: disable=wrong-import-position
from tests.localpve.guests import stop_leftovers  # noqa: E402 pylint: disable=wrong-import-position
from ansible_collections.ephemera.workspaces.plugins.module_utils.flows.create import STEPS  # noqa: E402 pylint: disable=wrong-import-position
from ansible_collections.ephemera.workspaces.plugins.module_utils.core.journal import Journal  # noqa: E402 pylint: disable=wrong-import-position

PLAYBOOK = os.path.join(ROOT, 'playbooks', 'create.yml')
INVENTORY = os.path.join(ROOT, 'inventories', 'localpve')
AGENT = ['sh', '-c', 'sleep 600']
# Seconds from a container's start to its DHCP lease, at time scale 1.
DHCP_DELAY = 1.0
COMMUNITY = [
    {'name': 'Clone the template', 'community.proxmox.proxmox': {
        'clone': '{{ template }}', 'clone_type': 'linked', 'vmid': '{{ vmid }}', 'hostname': 'plain-{{ vmid }}',
        'node': '{{ node }}', 'pool': '{{ pool }}', 'timeout': 120}},
    {'name': 'Start it', 'community.proxmox.proxmox': {'vmid': '{{ vmid }}', 'node': '{{ node }}',
                                                       'state': 'started', 'timeout': 120}},
]


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


def run_create(workdir, state_dir, journal, repo, names, forks, extra_vars=None, playbook=PLAYBOOK):
    """One ansible-playbook run creating ``names`` (``extra_vars`` added, ``playbook`` another playbook of the same
    hosts); (wall seconds, start epoch, json output)."""
    inventory = os.path.join(workdir, 'hosts-%d.json' % len(names))
    with open(inventory, 'w') as out:
        json.dump({'workspaces': {'hosts': {n: {'workspace': n} for n in names}, 'vars': {
            'ansible_connection': 'local', 'ansible_python_interpreter': sys.executable}}}, out)
    extra = os.path.join(workdir, 'vars.json')
    with open(extra, 'w') as out:
        json.dump({'target': 'workspaces', 'repo': repo, 'purpose': 'Benchmark the create', 'agent': 'bench',
                   'ephemera_agents': {'bench': AGENT}, **(extra_vars or {})}, out)
    cmd = ['ansible-playbook', '-i', INVENTORY, '-i', inventory, playbook, '-e', '@' + extra, '--forks', str(forks)]
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


def cpu_seconds():
    """User and system CPU seconds of this process and every process below it, the reaped ones included."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    reaped = resource.getrusage(resource.RUSAGE_CHILDREN)
    total = own.ru_utime + own.ru_stime + reaped.ru_utime + reaped.ru_stime
    tick = float(os.sysconf('SC_CLK_TCK'))
    for pid in system.descendants(os.getpid()):
        try:
            with open('/proc/%d/stat' % pid) as src:
                fields = src.read().rsplit(')', 1)[1].split()
        except OSError:
            continue
        # utime, stime, cutime, cstime: the process and its children that it reaped.
        total += sum(int(v) for v in fields[11:15]) / tick
    return total


def run_community(workdir, cluster, vmid):
    """community.proxmox's clone and start of one container, in one ansible-playbook run; its wall seconds."""
    info = cluster.info
    url = urllib.parse.urlsplit(info['proxy_url'])
    book = os.path.join(workdir, 'community.yml')
    with open(book, 'w') as out:
        json.dump([{'name': 'Clone and start with community.proxmox', 'hosts': 'localhost', 'gather_facts': False,
                    'module_defaults': {'group/community.proxmox.proxmox': {
                        'api_host': url.hostname, 'api_port': url.port, 'api_user': info['user'],
                        'api_token_id': info['token_id'].split('!', 1)[1], 'api_token_secret': info['token_secret'],
                        'validate_certs': False}},
                    'vars': {'template': info['template_vmid'], 'node': info['template_node'], 'pool': info['pool'],
                             'vmid': vmid},
                    'tasks': COMMUNITY}], out)
    run = run_ansible(['ansible-playbook', '-i', 'localhost,', '-c', 'local', book], timeout=600)
    if not run.ok:
        sys.exit('community.proxmox failed (rc %d):\n%s' % (run.returncode, run.output[-4000:]))
    return run.seconds


def workspace_figures(cluster, journal, names, started, before):
    """Create-to-ready times, per-step medians and API requests of ``names``, all ready, from the journal."""
    requests = cluster.run(lambda: list(cluster.pve.requests))[before:]
    with Journal.open(journal, create=False) as jnl:
        records = [jnl.get_workspace(n) for n in names]
    if any(ws is None or ws['status'] != 'ready' for ws in records):
        sys.exit('not every workspace is ready: %s' % [(n, ws and ws['status']) for n, ws in zip(names, records)])
    steps = {}
    for ws in records:
        previous = started
        for step in STEPS:
            steps.setdefault(step, []).append(ws['progress'][step] - previous)
            previous = ws['progress'][step]
    return {'ready': [ws['progress']['ready'] - started for ws in records], 'requests': len(requests),
            'polls': sum(1 for r in requests if '/tasks/' in r[1] and r[1].endswith('/status')),
            'steps': {k: statistics.median(v) for k, v in steps.items()}}


def scenario(time_scale, count, repeat, forks, latency):
    """community.proxmox, then one workspace ``repeat`` times, then ``count`` at once, on one cluster."""
    workdir = tempfile.mkdtemp(prefix='ephemera-bench-create-')
    cluster = LocalCluster.start(os.path.join(workdir, 'cluster'), time_scale=time_scale, latency=latency,
                                 dhcp_delay=DHCP_DELAY * time_scale)
    out = {'time_scale': time_scale}
    try:
        cluster.run(lambda: setattr(cluster.pve, 'max_requests', 10 ** 7))
        repo = make_repo(workdir)
        journal = os.path.join(workdir, 'journal.sqlite')
        out['community'] = [run_community(workdir, cluster, 5000 + n) for n in range(repeat)]
        ones = []
        for n in range(repeat):
            before = cluster.run(lambda: len(cluster.pve.requests))
            wall, started, data = run_create(workdir, cluster.info['state_dir'], journal, repo, ['one-%d' % n], forks)
            ones.append(dict(workspace_figures(cluster, journal, ['one-%d' % n], started, before), wall=wall,
                             count=1, tasks=len(task_seconds(data))))
        out['one'] = ones
        rerun = run_create(workdir, cluster.info['state_dir'], journal, repo, ['one-0'], forks)
        seconds = task_seconds(rerun[2])
        out['rerun'] = {'wall': rerun[0], 'tasks': len(seconds), 'per_task': statistics.median(seconds)}
        names = ['bench-%02d' % n for n in range(1, count + 1)]
        before = cluster.run(lambda: len(cluster.pve.requests))
        cpu = cpu_seconds()
        wall, started, data = run_create(workdir, cluster.info['state_dir'], journal, repo, names, forks)
        cpu = cpu_seconds() - cpu
        out['many'] = dict(workspace_figures(cluster, journal, names, started, before), wall=wall, count=count,
                           cpu=cpu, tasks=len(task_seconds(data)))
        return out
    finally:
        teardown(cluster, workdir)


def teardown(cluster, workdir):
    """Stop a benchmark's cluster and remove its working directory."""
    cluster.stop()
    # The runners and agents started their own sessions in the guests: gone with the guests' files.
    stop_leftovers(cluster.info['state_dir'])
    shutil.rmtree(workdir, ignore_errors=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n', maxsplit=1)[0])
    parser.add_argument('--count', type=int, default=20, help='workspaces created in one run')
    parser.add_argument('--repeat', type=int, default=3, help='runs of one workspace and of community.proxmox')
    parser.add_argument('--time-scales', default='0', help='fakepve time scales, comma-separated (0 comes first)')
    parser.add_argument('--forks', type=int, default=10)
    parser.add_argument('--latency', type=float, default=0.0, help='PVE seconds of latency per API request')
    parser.add_argument('--provider', choices=('proxmox', 'aws'), default='proxmox',
                        help='aws: ours against amazon.aws.ec2_instance on the try-out cloud (bench/create_aws.py)')
    args = parser.parse_args()
    if args.provider == 'aws':
        from bench import create_aws  # pylint: disable=import-outside-toplevel
        create_aws.main()
        return
    scales = sorted(set([0.0] + [float(s) for s in args.time_scales.split(',')]))
    load = os.getloadavg()[0]
    results = []
    for scale in scales:
        print('... time scale %g' % scale, file=sys.stderr, flush=True)
        results.append(scenario(scale, args.count, args.repeat, args.forks, args.latency))
    print('create: request to ready, one ansible-playbook run each, --forks %d, latency %g PVE s per request'
          % (args.forks, args.latency))
    print('  %-11s %-18s %9s %15s %15s %9s %9s %8s' % ('time scale', 'run', 'run wall', 'to ready median',
                                                       'to ready max', 'requests', 'per ws', 'polls'))
    columns = []
    for r in results:
        print('  %-11g %-18s %8.1fs' % (r['time_scale'], 'community.proxmox', statistics.median(r['community'])))
        for label, run in [('1 workspace', one) for one in r['one']] + [('%d workspaces' % r['many']['count'],
                                                                         r['many'])]:
            print('  %-11g %-18s %8.1fs %14.1fs %14.1fs %9d %9.1f %8d' % (
                r['time_scale'], label, run['wall'], statistics.median(run['ready']), max(run['ready']),
                run['requests'], run['requests'] / float(run['count']), run['polls']))
        columns += [('ts %g/1' % r['time_scale'], r['one'][0]),
                    ('ts %g/%d' % (r['time_scale'], r['many']['count']), r['many'])]
    print()
    print('  median seconds per step (from the previous step\'s end; step 1 from the start of the run):')
    print('  %-16s' % 'step' + ''.join('%10s' % title for title, run in columns))
    for step in STEPS:
        print('  %-16s' % step + ''.join('%10.2f' % run['steps'][step] for title, run in columns))
    base = results[0]
    rerun = base['rerun']
    print()
    print('  a rerun on a ready workspace: %.1f s for %d tasks, median %.3f s a task: Ansible\'s task start-up and '
          'a step that finds its work done' % (rerun['wall'], rerun['tasks'], rerun['per_task']))
    print('  cores: %d, load average at start: %.2f' % (os.cpu_count(), load))
    one = statistics.median(r['wall'] for r in base['one'])
    community = statistics.median(base['community'])
    many = base['many']
    figures = (one, community, one / community, many['count'], many['wall'], many['wall'] / one, many['cpu'],
               os.cpu_count())
    print('create: 1 workspace %.2f s, community.proxmox clone+start %.2f s, ratio %.2f; %d workspaces %.2f s, '
          'ratio to one %.2f, cpu %.1f s on %d cores' % figures)


if __name__ == '__main__':
    main()
