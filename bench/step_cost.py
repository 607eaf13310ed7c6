"""What one task of the collection costs: started as a module process, or run in the worker by its action plugin.

    .venv/bin/python bench/step_cost.py [--tasks 20] [--repeat 3]

One playbook of --tasks tasks, each a workspace_info of a journal not made yet (new_journal: a step that has nothing to do), run
five ways in one sitting: ansible.builtin.debug (Ansible's own cost of a task), the collection's module through
its action plugin (in the worker), the same without the preload (EPHEMERA_NO_PRELOAD=1: each worker imports the
module's code itself, as before plugin_utils/in_process.py loaded it where the workers are forked from), the same
without the freeze (EPHEMERA_NO_FREEZE=1: the parent's objects stay in the garbage collector's sight), and the
same module file started as a module process (a copy of it in a library directory under another name, so that no
action plugin claims it); and a play without tasks (Ansible's start-up). Printed: the wall and CPU time of each
playbook (medians of --repeat runs; CPU: ansible-playbook and everything it started), the cost of one task (the
playbook's less the empty play's, per task), and the ratios. No figure is asserted.
"""

import argparse
import json
import os
import resource
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
    args = {'msg': 'nothing'} if action == 'ansible.builtin.debug' else {'journal_path': journal, 'new_journal': True}
    with open(path, 'w') as out:
        json.dump([{'hosts': 'localhost', 'gather_facts': False,
                    'tasks': [{'name': 'task %d' % n, action: args} for n in range(tasks if action else 0)]}], out)
    return path


def children_cpu():
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    return used.ru_utime + used.ru_stime


def measure(book, library, repeat, env=None):
    """(median wall seconds, median CPU seconds) of ``repeat`` runs of ``book``."""
    seconds, cpu = [], []
    for dummy in range(repeat):
        before = children_cpu()
        run = run_ansible(['ansible-playbook', '-i', 'localhost,', '-c', 'local', book],
                          env=dict({'ANSIBLE_LIBRARY': library}, **(env or {})), timeout=600)
        if not run.ok:
            sys.exit('%s failed (rc %d):\n%s' % (book, run.returncode, run.output[-3000:]))
        seconds.append(run.seconds)
        cpu.append(children_cpu() - before)
    return statistics.median(seconds), statistics.median(cpu)


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
        books = [('empty play', None, None), ('debug', 'ansible.builtin.debug', None),
                 ('in the worker', 'ephemera.workspaces.workspace_info', None),
                 ('no preload', 'ephemera.workspaces.workspace_info', {'EPHEMERA_NO_PRELOAD': '1'}),
                 ('no freeze', 'ephemera.workspaces.workspace_info', {'EPHEMERA_NO_FREEZE': '1'}),
                 ('module process', 'workspace_info_as_module', None)]
        measured = {label: measure(playbook(workdir, label.replace(' ', '-'), action, args.tasks, journal),
                                   library, args.repeat, env) for label, action, env in books}
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    start = measured['empty play']
    per_task = {label: [(measured[label][i] - start[i]) / args.tasks for i in (0, 1)] for label, d, e in books}
    print('step cost: %d tasks a playbook, median of %d runs, on %d cores'
          % (args.tasks, args.repeat, os.cpu_count()))
    for label, dummy, dummy2 in books:
        print('  %-15s %6.2f s a playbook (%6.2f s CPU), %6.3f s a task (%6.3f s CPU)'
              % (label, measured[label][0], measured[label][1], per_task[label][0], per_task[label][1]))
    print('step: module process %.3f s a task, in the worker %.3f s a task (debug %.3f s), ratio %.1f' % (
        per_task['module process'][0], per_task['in the worker'][0], per_task['debug'][0],
        per_task['module process'][0] / max(per_task['in the worker'][0], 0.001)))
    print('preload: a task in the worker without it %.3f s CPU, with it %.3f s CPU, ratio %.1f' % (
        per_task['no preload'][1], per_task['in the worker'][1],
        per_task['no preload'][1] / max(per_task['in the worker'][1], 0.001)))
    print('freeze: a task in the worker without it %.3f s CPU, with it %.3f s CPU, ratio %.2f' % (
        per_task['no freeze'][1], per_task['in the worker'][1],
        per_task['no freeze'][1] / max(per_task['in the worker'][1], 0.001)))


if __name__ == '__main__':
    main()
