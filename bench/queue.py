"""Do operations on different workspaces still run in parallel behind the queue?

    .venv/bin/python bench/queue.py [--runs N] [--hold SECONDS] [--same-target]

Runs a real ansible-playbook against a fresh journal, each host one workspace, each doing one
queued operation (wait for the turn, two step records, hold for --hold seconds, record the outcome):
- 1 workspace x 1 operation;
- 10 workspaces x 1 operation each, with forks 10.
Prints the median wall time of each over N runs and their ratio: about 1 means the queue lets
different workspaces run side by side; 10 would mean it serialised them. --same-target adds
10 operations on one workspace (forks 10), which the queue must run one after another (~10 x hold).
"""

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

BIN = os.path.dirname(sys.executable)

PLAYBOOK = '''
- name: One queued operation per host
  hosts: all
  gather_facts: false
  tasks:
    - name: Wait for the turn
      ephemera.workspaces.queue:
        kind: reconcile
        target: "{{ target | default(inventory_hostname) }}"
        params: {host: "{{ inventory_hostname }}"}
        timeout: 600
      register: op
    - name: Work under the claim
      when: op.claimed
      block:
        - name: Step look
          ephemera.workspaces.queue: {state: step, claim: "{{ op.claim }}", step: look}
        - name: Step hold
          ephemera.workspaces.queue: {state: step, claim: "{{ op.claim }}", step: hold}
        - name: Hold
          ansible.builtin.command: sleep {{ hold }}
          changed_when: false
        - name: Outcome
          ephemera.workspaces.queue: {state: finished, claim: "{{ op.claim }}"}
'''


def one_run(workdir, hosts, hold, same_target):
    journal = os.path.join(workdir, 'journal-%d.sqlite' % time.monotonic_ns())
    names = ['ws%02d' % n for n in range(hosts)]
    inventory = os.path.join(workdir, 'hosts.ini')
    with open(inventory, 'w') as f:
        f.write(''.join('%s ansible_connection=local ansible_python_interpreter=%s\n' % (n, sys.executable)
                        for n in names))
    # The workspaces exist in the journal, as a reconcile needs.
    subprocess.run([sys.executable, '-c', 'import sys\n'
                    'from ansible_collections.ephemera.workspaces.plugins.module_utils.journal import Journal\n'
                    'j = Journal.open(sys.argv[1])\n'
                    '[j.create_workspace(n) for n in sys.argv[2:]]', journal] + names, check=True)
    extra = ['-e', 'hold=%s' % hold] + (['-e', 'target=ws00'] if same_target else [])
    env = dict(os.environ, EPHEMERA_JOURNAL=journal, ANSIBLE_LOCALHOST_WARNING='0', ANSIBLE_NOCOLOR='1')
    started = time.monotonic()
    proc = subprocess.run([os.path.join(BIN, 'ansible-playbook'), '-i', inventory, '--forks', str(hosts),
                           os.path.join(workdir, 'op.yml')] + extra, env=env, capture_output=True, text=True)
    elapsed = time.monotonic() - started
    if proc.returncode:
        sys.exit('ansible-playbook failed:\n' + proc.stdout[-3000:] + proc.stderr[-3000:])
    return elapsed


def measure(workdir, hosts, hold, runs, same_target=False):
    times = [one_run(workdir, hosts, hold, same_target) for _ in range(runs)]
    return statistics.median(times), min(times), max(times)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--runs', type=int, default=3)
    parser.add_argument('--hold', type=float, default=5.0, help='seconds each operation holds its workspace')
    parser.add_argument('--same-target', action='store_true', help='also 10 operations on one workspace')
    args = parser.parse_args()
    load = os.getloadavg()[0]
    workdir = tempfile.mkdtemp(prefix='ephemera-bench-queue-')
    with open(os.path.join(workdir, 'op.yml'), 'w') as f:
        f.write(PLAYBOOK)
    print('queue: one operation holds its workspace %.1f s; median of %d run(s) of ansible-playbook, wall time'
          % (args.hold, args.runs))
    one = measure(workdir, 1, args.hold, args.runs)
    print('  1 workspace  x 1 op             : %6.2f s  (%.2f-%.2f)' % one)
    ten = measure(workdir, 10, args.hold, args.runs)
    print('  10 workspaces x 1 op, forks 10  : %6.2f s  (%.2f-%.2f)' % ten)
    print('  ratio 10 workspaces / 1 workspace: %.2f  (1 = fully parallel, 10 = serialised)' % (ten[0] / one[0]))
    if args.same_target:
        same = measure(workdir, 10, args.hold, args.runs, same_target=True)
        print('  10 ops on 1 workspace, forks 10 : %6.2f s  (%.2f-%.2f)  ratio %.2f (the queue serialises them)'
              % (same + (same[0] / one[0],)))
    print('  cores: %d, load average at start: %.2f' % (os.cpu_count(), load))


if __name__ == '__main__':
    main()
