"""Create on AWS: ours from request to ready against amazon.aws.ec2_instance creating one instance and waiting for it.

    .venv/bin/python bench/create.py --provider aws          (make bench-create PROVIDER=aws)

One try-out cloud (tests/localcloud: moto behind the fault proxy, with an sshd per running instance), and on it,
one after the other, one run each:

- amazon.aws.ec2_instance (from the ``ansible`` package in the venv): one task that launches an instance from the
  seeded AMI into the seeded subnet with the key pair and waits until it is running (``wait: true``): what a
  hand-written playbook does, without the journal, the ownership marker, the client token or any guest step;
- ours: the shipped create playbook (``ephemera.workspaces.create``) for one workspace, from request to ready.
  Ours does more than launch: the record and the client token before RunInstances, the visibility window, the
  address, then the guest steps over SSH (bootstrap, checkout, the agent runner, the brief). So two figures are
  printed for it: the provider part (request to a known address: the steps that talk to EC2, from the journal's
  step times) and the whole (request to ready).

Both talk to the same endpoint with the same credentials; instances read ``pending`` for the cloud's boot time
(0.2 s) first. Printed: each run's wall time, ours per step, and one line with the ratios. No figure is asserted.
"""

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

from tests.ansible_run import run_ansible  # noqa: E402 pylint: disable=wrong-import-position
from tests.localcloud.fixtures import cloud_process  # noqa: E402 pylint: disable=wrong-import-position
from ansible_collections.ephemera.workspaces.plugins.module_utils.flows.create import STEPS  # noqa: E402 pylint: disable=wrong-import-position
from ansible_collections.ephemera.workspaces.plugins.module_utils.core.journal import Journal  # noqa: E402 pylint: disable=wrong-import-position

INVENTORY = os.path.join(ROOT, 'inventories', 'localcloud')
# The last step of ours that talks to EC2: the instance runs and its address is known.
PROVIDER_PART = 'address'


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


def run_ec2_instance(workdir, info):
    """amazon.aws.ec2_instance: launch one instance and wait for it to run, in one ansible-playbook run; (wall
    seconds, instance id)."""
    seed = info['seed']
    book = os.path.join(workdir, 'ec2_instance.yml')
    with open(book, 'w') as out:
        json.dump([{'name': 'Launch and wait with amazon.aws.ec2_instance', 'hosts': 'localhost',
                    'gather_facts': False,
                    'tasks': [{'name': 'Launch one instance and wait until it runs', 'amazon.aws.ec2_instance': {
                        'name': 'plain-bench', 'image_id': seed['image_id'], 'instance_type': seed['instance_type'],
                        'vpc_subnet_id': seed['subnet_id'], 'security_groups': [seed['security_group_id']],
                        'key_name': seed['key_name'], 'region': info['region'], 'endpoint_url': info['endpoint_url'],
                        'access_key': info['access_key_id'], 'secret_key': info['secret_access_key'],
                        'state': 'running', 'wait': True, 'wait_timeout': 300}, 'register': 'made'}]}], out)
    run = run_ansible(['ansible-playbook', '-i', 'localhost,', '-c', 'local', '-e',
                       'ansible_python_interpreter=' + sys.executable, book], timeout=600, fail=False,
                      unset=('AWS_',))
    if not run.ok:
        sys.exit('amazon.aws.ec2_instance failed (rc %d):\n%s' % (run.returncode, run.output[-4000:]))
    result = run.task('Launch one instance and wait until it runs')
    return run.seconds, result['instance_ids'][0]


def run_ours(workdir, info, repo, journal):
    """The shipped create playbook for one workspace; (wall seconds, start epoch)."""
    extra = {'workspace': 'bench-aws', 'repo': repo, 'purpose': 'Benchmark the create on AWS', 'agent': 'bench',
             'ephemera_agents': {'bench': ['sh', '-c', 'sleep 600']}}
    started = time.time()
    run = run_ansible(['ansible-playbook', '-i', INVENTORY, 'ephemera.workspaces.create', '-e', json.dumps(extra)],
                      env={'LOCALCLOUD_STATE_DIR': info['state_dir'], 'EPHEMERA_JOURNAL': journal}, timeout=600,
                      fail=False, unset=('AWS_', 'EPHEMERA_', 'PROXMOX_'))
    if not run.ok:
        sys.exit('ephemera.workspaces.create failed (rc %d):\n%s' % (run.returncode, run.output[-4000:]))
    return run.seconds, started


def step_times(journal, started):
    """Seconds from the run's start to the end of each step of ``bench-aws``, from the journal."""
    with Journal.open(journal, create=False) as jnl:
        record = jnl.get_workspace('bench-aws')
    if record is None or record['status'] != 'ready':
        sys.exit('bench-aws is not ready: %s' % (record and record['status']))
    return {step: record['progress'][step] - started for step in STEPS if step in record['progress']}


def main():
    load = os.getloadavg()[0]
    workdir = tempfile.mkdtemp(prefix='ephemera-bench-create-aws-')
    try:
        with cloud_process(os.path.join(workdir, 'cloud')) as cloud:
            info = cloud.info
            repo = make_repo(workdir)
            journal = os.path.join(workdir, 'journal.sqlite')
            plain, instance = run_ec2_instance(workdir, info)
            states = {i['instance_id']: i['state'] for i in cloud.instances()}
            ours, started = run_ours(workdir, info, repo, journal)
            steps = step_times(journal, started)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    provider = steps[PROVIDER_PART]
    whole = steps['ready']
    print('create on AWS (the try-out cloud: moto behind the fault proxy, real sshd guests), one run each')
    print('  %-44s %8.2f s   (instance %s %s)'
          % ('amazon.aws.ec2_instance launch + wait running', plain, instance, states.get(instance)))
    print('  %-44s %8.2f s' % ('ours: ansible-playbook run, request to ready', ours))
    print()
    print('  ours, seconds from the start of the run to the end of each step:')
    previous = 0.0
    for step in STEPS:
        if step in steps:
            print('    %-12s %7.2f  (+%.2f)%s' % (step, steps[step], steps[step] - previous,
                                                  '   <- provider part ends' if step == PROVIDER_PART else ''))
            previous = steps[step]
    print('  cores: %d, load average at start: %.2f' % (os.cpu_count(), load))
    print('create (aws): ours provider part (request to address) %.2f s, whole (request to ready) %.2f s; '
          'amazon.aws.ec2_instance %.2f s; ratio provider part %.2f, whole %.2f'
          % (provider, whole, plain, provider / plain, whole / plain))


if __name__ == '__main__':
    main()
