"""Do operations on different workspaces still run in parallel behind the queue?

    .venv/bin/python bench/queue_parallel.py [--runs N] [--hold SECONDS] [--same-target]

Runs a real ansible-playbook against a fresh journal, each host one workspace, each doing one
queued operation (wait for the turn, two step records, hold for --hold seconds, record the outcome):
- 1 workspace x 1 operation;
- 10 workspaces x 1 operation each, with forks 10.
Prints the median wall time of each over N runs and their ratio: about 1 means the queue lets
different workspaces run side by side; 10 would mean it serialised them. From the journal it also
prints the longest queue wait (queued -> claimed) and the most operations running at once, which
separate the queue's share from Ansible's own per-task cost (on 2 cores, 50 module processes
in the 10-workspace run). As a control, the same play with every queue task replaced by a
read-only queue_info task (as many module processes, no queue) is timed too: the ratio that
remains there is Ansible's, not the queue's. --same-target adds 10 operations on one workspace from 10 concurrent
ansible-playbook runs (as 10 operators would), which the queue must run one after another
(~10 x hold). (Hosts of one run on one target are refused at once: see docs/internals/queue.md.)
"""

import argparse
import os
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# The repository root first on sys.path, so that tests.* imports as a package.
sys.path[0] = ROOT

from tests.ansible_run import Run  # noqa: E402 pylint: disable=wrong-import-position

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


CONTROL = '''
- name: The same tasks without the queue
  hosts: all
  gather_facts: false
  tasks:
    - name: Read instead of waiting for the turn
      ephemera.workspaces.queue_info: {target: "{{ inventory_hostname }}"}
    - name: Read instead of step look
      ephemera.workspaces.queue_info: {target: "{{ inventory_hostname }}"}
    - name: Read instead of step hold
      ephemera.workspaces.queue_info: {target: "{{ inventory_hostname }}"}
    - name: Hold
      ansible.builtin.command: sleep {{ hold }}
      changed_when: false
    - name: Read instead of the outcome
      ephemera.workspaces.queue_info: {target: "{{ inventory_hostname }}"}
'''


def inventory_file(workdir, names):
    path = os.path.join(workdir, 'hosts-%s.ini' % '-'.join(names))
    with open(path, 'w') as f:
        f.write(''.join('%s ansible_connection=local ansible_python_interpreter=%s\n' % (n, sys.executable)
                        for n in names))
    return path


def one_run(workdir, hosts, hold, same_target, playbook_name='op.yml'):
    """Wall time of the operations on ``hosts`` workspaces: one run with forks=hosts, or (same_target) one run per host."""
    journal = os.path.join(workdir, 'journal-%d.sqlite' % time.monotonic_ns())
    names = ['ws%02d' % n for n in range(hosts)]
    # The workspaces exist in the journal, as a reconcile needs.
    subprocess.run([sys.executable, '-c', 'import sys\n'
                    'from ansible_collections.ephemera.workspaces.plugins.module_utils.core.journal import Journal\n'
                    'j = Journal.open(sys.argv[1])\n'
                    '[j.create_workspace(n) for n in sys.argv[2:]]', journal] + names, check=True)
    extra = ['-e', 'hold=%s' % hold] + (['-e', 'target=ws00'] if same_target else [])
    playbook = ['ansible-playbook', os.path.join(workdir, playbook_name)] + extra
    commands = ([playbook + ['-i', inventory_file(workdir, [n])] for n in names] if same_target
                else [playbook + ['-i', inventory_file(workdir, names), '--forks', str(hosts)]])
    started = time.monotonic()
    runs = [Run.start(cmd, env={'EPHEMERA_JOURNAL': journal}, callback=None) for cmd in commands]
    for run in runs:
        run.wait(3600)
    elapsed = time.monotonic() - started
    for run in runs:
        if not run.ok:
            sys.exit('ansible-playbook failed:\n' + run.output[-3000:])
    conn = sqlite3.connect(journal)
    spans = conn.execute('SELECT created_at, started_at, ended_at FROM queue').fetchall()
    conn.close()
    if not spans:  # the control play queues nothing
        return elapsed, 0.0, 0
    longest_wait = max(started - created for created, started, _ended in spans)
    # the most entries running at one instant: count at each start
    peak = max(sum(1 for span in spans if span[1] <= at < span[2]) for at in (span[1] for span in spans))
    return elapsed, longest_wait, peak


def measure(workdir, hosts, hold, runs, same_target=False, playbook_name='op.yml'):
    results = [one_run(workdir, hosts, hold, same_target, playbook_name) for _run in range(runs)]
    times = [r[0] for r in results]
    return (statistics.median(times), min(times), max(times), max(r[1] for r in results),
            min(r[2] for r in results))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n', maxsplit=1)[0])
    parser.add_argument('--runs', type=int, default=3)
    parser.add_argument('--hold', type=float, default=5.0, help='seconds each operation holds its workspace')
    parser.add_argument('--same-target', action='store_true', help='also 10 operations on one workspace')
    args = parser.parse_args()
    load = os.getloadavg()[0]
    workdir = tempfile.mkdtemp(prefix='ephemera-bench-queue-')
    with open(os.path.join(workdir, 'op.yml'), 'w') as f:
        f.write(PLAYBOOK)
    with open(os.path.join(workdir, 'control.yml'), 'w') as f:
        f.write(CONTROL)
    print('queue: one operation holds its workspace %.1f s; median of %d run(s) of ansible-playbook, wall time'
          % (args.hold, args.runs))
    line = '  %-33s: %6.2f s  (%.2f-%.2f); longest queue wait %.2f s; peak running at once %d'
    one = measure(workdir, 1, args.hold, args.runs)
    print(line % (('1 workspace x 1 op',) + one))
    ten = measure(workdir, 10, args.hold, args.runs)
    print(line % (('10 workspaces x 1 op, forks 10',) + ten))
    print('  ratio 10 workspaces / 1 workspace: %.2f  (1 = fully parallel, 10 = serialised)' % (ten[0] / one[0]))
    control_one = measure(workdir, 1, args.hold, args.runs, playbook_name='control.yml')
    control_ten = measure(workdir, 10, args.hold, args.runs, playbook_name='control.yml')
    print('  control without the queue, 1 / 10: %.2f s / %.2f s, ratio %.2f  (Ansible\'s own share)'
          % (control_one[0], control_ten[0], control_ten[0] / control_one[0]))
    if args.same_target:
        same = measure(workdir, 10, args.hold, args.runs, same_target=True)
        print(line % (('10 runs x 1 op on 1 workspace',) + same))
        print('  ratio 10 ops on 1 workspace / 1: %.2f  (the queue runs them one after another)' % (same[0] / one[0]))
    print('  cores: %d, load average at start: %.2f' % (os.cpu_count(), load))


if __name__ == '__main__':
    main()
