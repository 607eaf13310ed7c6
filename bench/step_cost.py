"""What one task of the collection costs: started as a module process, or run in the worker by its action plugin.

    .venv/bin/python bench/step_cost.py [--tasks 20] [--repeat 3]

One playbook of --tasks tasks, each a workspace_info of an empty journal (a step that has nothing to do), run
three ways in one sitting: ansible.builtin.debug (Ansible's own cost of a task), the collection's module through
its action plugin (in the worker), and the same module file started as a module process (a copy of it in a
library directory under another name, so that no action plugin claims it); and a play without tasks (Ansible's
start-up). Printed: the wall time of each playbook (median of --repeat runs), the cost of one task (the
playbook's time less the empty play's, per task), and the ratio of module process to in the worker. No figure
is asserted.
"""

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# The repository root first on sys.path, so that tests.* imports as a package.
sys.path[0] = ROOT

from tests.ansible_run import run_ansible  # noqa: E402 pylint: disable=wrong-import-position

MODULE = os.path.join(ROOT, 'plugins', 'modules', 'workspace_info.py')


def playbook(workdir, name, action, tasks, journal):
    path = os.path.join(workdir, name + '.yml')
    args = {'msg': 'nothing'} if action == 'ansible.builtin.debug' else {'journal_path': journal}
    with open(path, 'w') as out:
        json.dump([{'hosts': 'localhost', 'gather_facts': False,
                    'tasks': [{'name': 'task %d' % n, action: args} for n in range(tasks if action else 0)]}], out)
    return path


def wall(book, library, repeat):
    seconds = []
    for dummy in range(repeat):
        run = run_ansible(['ansible-playbook', '-i', 'localhost,', '-c', 'local', book],
                          env={'ANSIBLE_LIBRARY': library}, timeout=600)
        if not run.ok:
            sys.exit('%s failed (rc %d):\n%s' % (book, run.returncode, run.output[-3000:]))
        seconds.append(run.seconds)
    return statistics.median(seconds)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n', maxsplit=1)[0])
    parser.add_argument('--tasks', type=int, default=20)
    parser.add_argument('--repeat', type=int, default=3)
    args = parser.parse_args()
    workdir = tempfile.mkdtemp(prefix='ephemera-bench-step-')
    try:
        library = os.path.join(workdir, 'library')
        os.makedirs(library)
        shutil.copy(MODULE, os.path.join(library, 'workspace_info_as_module.py'))
        journal = os.path.join(workdir, 'no-journal-yet.sqlite')
        books = [('empty play', None), ('debug', 'ansible.builtin.debug'),
                 ('in the worker', 'ephemera.workspaces.workspace_info'), ('module process', 'workspace_info_as_module')]
        times = dict((label, wall(playbook(workdir, label.replace(' ', '-'), action, args.tasks, journal), library,
                                  args.repeat)) for label, action in books)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    start = times['empty play']
    per_task = dict((label, (times[label] - start) / args.tasks) for label, dummy in books)
    print('step cost: %d tasks a playbook, median of %d runs, on %d cores'
          % (args.tasks, args.repeat, os.cpu_count()))
    for label, dummy in books:
        print('  %-15s %6.2f s a playbook, %6.3f s a task' % (label, times[label], per_task[label]))
    print('step: module process %.3f s a task, in the worker %.3f s a task (debug %.3f s), ratio %.1f' % (
        per_task['module process'], per_task['in the worker'], per_task['debug'],
        per_task['module process'] / max(per_task['in the worker'], 0.001)))


if __name__ == '__main__':
    main()
