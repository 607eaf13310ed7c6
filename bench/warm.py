"""How long does a create take when it takes a warm pool member, against a cold create and community.proxmox?

    .venv/bin/python bench/warm.py [--count 20] [--repeat 3] [--forks 10] [--time-scale 0] [--provider all]

On one try-out cluster (tests/localpve, inside this process), one after the other, each through the shipped
playbooks as bench/create.py runs them (its helpers are reused):

- community.proxmox: clone and start of a bare container, --repeat times (median);
- cold: playbooks/create.yml from request to ready with no pool declared, --repeat times (median);
- warm: playbooks/pool_fill.yml fills a pool of size 1 (not timed), then a create whose request matches it, from
  request to ready, --repeat times (median);
- a pool of --count filled (not timed), then --count creates in one ansible-playbook run (one host each, --forks)
  that take its members.

Printed: each figure, where a warm create's time goes (per step, from the journal's step timestamps; the steps a
member did before are done at its candidate step), and last:

    warm: create from pool A s, cold B s, community.proxmox clone+start C s, ratio A/C R; 20 creates from a pool of 20 D s

With --provider aws (or all, the default, after the Proxmox VE figures) the same on the AWS try-out cloud
(tests/localcloud: moto behind its fault proxy, an sshd per running instance), --repeat times each:
amazon.aws.ec2_instance launching one instance and waiting until it runs (bench/create_aws.py's run), the cold create,
and a create from a pool of size 1 filled before it (not timed); last:

    warm (aws): create from pool A s, cold B s, amazon.aws.ec2_instance launch C s, ratio A/C R; repeat N

No figure is asserted.
"""

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# The repository root first on sys.path, so that bench.* and tests.* import as packages.
sys.path[0] = ROOT

from bench.create import make_repo, run_community, run_create, teardown, workspace_figures  # noqa: E402 pylint: disable=wrong-import-position
from tests.localpve import LocalCluster  # noqa: E402 pylint: disable=wrong-import-position
from ansible_collections.ephemera.workspaces.plugins.module_utils.core.journal import Journal  # noqa: E402 pylint: disable=wrong-import-position
from ansible_collections.ephemera.workspaces.plugins.module_utils.flows.create import POOLED_STEPS, STEPS  # noqa: E402 pylint: disable=wrong-import-position

POOL_FILL = os.path.join(ROOT, 'playbooks', 'pool_fill.yml')


def fill(workdir, cluster, journal, repo, declaration):
    run_create(workdir, cluster.info['state_dir'], journal, repo, ['fill'], 1, {'ephemera_pools': declaration},
               playbook=POOL_FILL)


def from_pool(journal, names):
    with Journal.open(journal, create=False) as jnl:
        taken = [(jnl.get_workspace(n)['facts'] or {}).get('from_pool') for n in names]
    if not all(taken):
        sys.exit('not every create took a pool member: %s' % dict(zip(names, taken)))


def step_times(journal, name, started):
    """{step: seconds from the previous step's end} of a create that took a member: the steps the member had done are
    marked done together at the candidate step, whose time they share."""
    with Journal.open(journal, create=False) as jnl:
        progress = jnl.get_workspace(name)['progress']
    out, previous = {}, started
    for step in [s for s in STEPS if s not in POOLED_STEPS or s == 'vmid']:
        out[step] = progress[step] - previous
        previous = progress[step]
    return out


def scenario(time_scale, count, repeat, forks):
    workdir = tempfile.mkdtemp(prefix='ephemera-bench-warm-')
    cluster = LocalCluster.start(os.path.join(workdir, 'cluster'), time_scale=time_scale)
    out = {}
    try:
        cluster.run(lambda: setattr(cluster.pve, 'max_requests', 10 ** 7))
        repo = make_repo(workdir)
        journal = os.path.join(workdir, 'journal.sqlite')
        state_dir = cluster.info['state_dir']
        out['community'] = [run_community(workdir, cluster, 5000 + n) for n in range(repeat)]
        out['cold'] = [run_create(workdir, state_dir, journal, repo, ['cold-%d' % n], forks)[0] for n in range(repeat)]
        one = [{'name': 'one', 'location': cluster.info['template_node'], 'template': cluster.info['template_vmid'],
                'size': 1}]
        warm = []
        for n in range(repeat):
            fill(workdir, cluster, journal, repo, one)
            before = cluster.run(lambda: len(cluster.pve.requests))
            wall, started, dummy = run_create(workdir, state_dir, journal, repo, ['warm-%d' % n], forks,
                                              {'ephemera_pools': one})
            from_pool(journal, ['warm-%d' % n])
            warm.append(dict(workspace_figures(cluster, journal, ['warm-%d' % n], started, before), wall=wall,
                             steps=step_times(journal, 'warm-%d' % n, started)))
        out['warm'] = warm
        many = [dict(one[0], name='many', size=count)]
        fill(workdir, cluster, journal, repo, many)
        names = ['pooled-%02d' % n for n in range(1, count + 1)]
        out['many'] = run_create(workdir, state_dir, journal, repo, names, forks, {'ephemera_pools': many})[0]
        from_pool(journal, names)
        return out
    finally:
        teardown(cluster, workdir)


def aws_scenario(repeat):
    """{'plain': [s], 'cold': [s], 'warm': [s]} on one AWS try-out cloud."""
    from bench.create_aws import run_ec2_instance  # pylint: disable=import-outside-toplevel
    from tests.ansible_run import run_ansible  # pylint: disable=import-outside-toplevel
    from tests.localcloud.fixtures import cloud_process  # pylint: disable=import-outside-toplevel
    workdir = tempfile.mkdtemp(prefix='ephemera-bench-warm-aws-')
    out = {'plain': [], 'cold': [], 'warm': []}
    try:
        with cloud_process(os.path.join(workdir, 'cloud')) as cloud:
            info = cloud.info
            repo = make_repo(workdir)
            journal = os.path.join(workdir, 'journal.sqlite')
            one = [{'name': 'one', 'location': info['region'], 'template': info['seed']['image_id'], 'size': 1}]

            def play(playbook, **extra):
                run = run_ansible(['ansible-playbook', '-i', os.path.join(ROOT, 'inventories', 'localcloud'),
                                   'ephemera.workspaces.' + playbook, '-e', json.dumps(extra)],
                                  env={'LOCALCLOUD_STATE_DIR': info['state_dir'], 'EPHEMERA_JOURNAL': journal},
                                  timeout=600, fail=False, unset=('AWS_', 'EPHEMERA_', 'PROXMOX_'))
                if not run.ok:
                    sys.exit('%s failed (rc %d):\n%s' % (playbook, run.returncode, run.output[-4000:]))
                return run.seconds

            def create(name, **extra):
                return play('create', workspace=name, repo=repo, purpose='Benchmark a create on AWS', agent='bench',
                            ephemera_agents={'bench': ['sh', '-c', 'sleep 600']}, **extra)
            for n in range(repeat):
                out['plain'].append(run_ec2_instance(workdir, info)[0])
                out['cold'].append(create('cold-%d' % n))
                play('pool_fill', ephemera_pools=one)
                out['warm'].append(create('warm-%d' % n, ephemera_pools=one))
                from_pool(journal, ['warm-%d' % n])
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    return out


def print_aws(repeat):
    result = aws_scenario(repeat)
    plain, cold, warm = (statistics.median(result[k]) for k in ('plain', 'cold', 'warm'))
    print('warm pools on AWS (the try-out cloud), load average %.2f' % os.getloadavg()[0])
    print('  amazon.aws.ec2_instance launch  %s' % ' '.join('%.2fs' % s for s in result['plain']))
    print('  cold create to ready            %s' % ' '.join('%.2fs' % s for s in result['cold']))
    print('  create from the pool to ready   %s' % ' '.join('%.2fs' % s for s in result['warm']))
    print('warm (aws): create from pool %.2f s, cold %.2f s, amazon.aws.ec2_instance launch %.2f s, ratio A/C %.2f; '
          'repeat %d' % (warm, cold, plain, warm / plain, repeat))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n', maxsplit=1)[0])
    parser.add_argument('--count', type=int, default=20)
    parser.add_argument('--repeat', type=int, default=3)
    parser.add_argument('--forks', type=int, default=10)
    parser.add_argument('--time-scale', type=float, default=0.0)
    parser.add_argument('--provider', choices=['all', 'proxmox', 'aws'], default='all')
    args = parser.parse_args()
    if args.provider != 'aws':
        print_proxmox(args)
    if args.provider != 'proxmox':
        print_aws(args.repeat)


def print_proxmox(args):
    result = scenario(args.time_scale, args.count, args.repeat, args.forks)
    community = statistics.median(result['community'])
    cold = statistics.median(result['cold'])
    warm = statistics.median(r['wall'] for r in result['warm'])
    print('warm pools at time scale %g, --forks %d, %d cores, load average %.2f'
          % (args.time_scale, args.forks, os.cpu_count(), os.getloadavg()[0]))
    print('  community.proxmox clone+start  %s' % ' '.join('%.2fs' % s for s in result['community']))
    print('  cold create to ready           %s' % ' '.join('%.2fs' % s for s in result['cold']))
    print('  create from the pool to ready  %s' % ' '.join('%.2fs' % r['wall'] for r in result['warm']))
    print('  median seconds per step of a create from the pool (from the previous step\'s end; the candidate step '
          'takes the member: %s done with it):' % ', '.join(s for s in POOLED_STEPS if s != 'vmid'))
    for step in result['warm'][0]['steps']:
        print('    %-12s %6.2f' % (step, statistics.median(r['steps'][step] for r in result['warm'])))
    print('warm: create from pool %.2f s, cold %.2f s, community.proxmox clone+start %.2f s, ratio A/C %.2f; '
          '%d creates from a pool of %d %.2f s' % (warm, cold, community, warm / community, args.count, args.count,
                                                   result['many']))


if __name__ == '__main__':
    main()
