"""What a task pays to open the journal, as AWX runs the collection: a journal in PostgreSQL, opened by every task.

    .venv/bin/python bench/journal_tasks.py [--tasks 20] [--repeat 3] [--opens 200]

Two measures, side by side in one sitting:

- Playbooks of --tasks tasks, each a workspace_info of one recorded workspace (a task that opens the journal and
  reads a record), against a journal file (SQLite), against a database of a PostgreSQL server started for the run
  (tests/pgserver.py, loopback) with its URL in EPHEMERA_JOURNAL_URL (as the AWX credential injects it: the driver
  is imported once, where the workers are forked from), and against the same database with the URL given only as
  the variable ephemera_journal_url (each task's worker imports the driver itself, as every task did before).
  Printed: the wall and CPU time of each playbook (medians of --repeat runs), a task's cost (less an empty play's,
  per task) and the ratios.
- Journal.open of the database, --opens times in this process: the schema check in one statement, and the full
  look it replaced (information_schema: tables, then the meta table's columns, then its version). Printed: ms per
  open, and the raw connection's for comparison.

No figure is asserted.
"""

import argparse
import json
import os
import resource
import shutil
import statistics
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[0] = ROOT

from tests.ansible_run import run_ansible  # noqa: E402 pylint: disable=wrong-import-position
from tests.conftest import _make_collection_importable  # noqa: E402 pylint: disable=wrong-import-position
from tests.pgserver import PgServer  # noqa: E402 pylint: disable=wrong-import-position

_make_collection_importable()

from ansible_collections.ephemera.workspaces.plugins.module_utils.core import journal_pg  # noqa: E402
from ansible_collections.ephemera.workspaces.plugins.module_utils.core.journal import Journal  # noqa: E402


def children_cpu():
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    return used.ru_utime + used.ru_stime


def playbook(workdir, name, tasks, extra):
    path = os.path.join(workdir, name + '.yml')
    task = dict({'name': 'ws1'}, **extra)
    with open(path, 'w') as out:
        json.dump([{'hosts': 'localhost', 'gather_facts': False,
                    'tasks': [{'name': 'task %d' % n, 'ephemera.workspaces.workspace_info': task}
                              for n in range(tasks)]}], out)
    return path


def measure(book, repeat, env):
    seconds, cpu = [], []
    for dummy in range(repeat):
        before = children_cpu()
        run = run_ansible(['ansible-playbook', '-i', 'localhost,', '-c', 'local', book], env=env, timeout=600,
                          unset=('EPHEMERA_JOURNAL', 'EPHEMERA_PRELOAD'))
        if not run.ok:
            sys.exit('%s failed (rc %d):\n%s' % (book, run.returncode, run.output[-3000:]))
        seconds.append(run.seconds)
        cpu.append(children_cpu() - before)
    return statistics.median(seconds), statistics.median(cpu)


def opens(url, count):
    """ms per Journal.open of ``url``: with the one-statement check, with the full look, and a raw connection."""
    import psycopg
    out = {}
    for label in ('one statement', 'full look'):
        saved = journal_pg._known_version
        if label == 'full look':
            journal_pg._known_version = lambda conn: None
        try:
            started = time.perf_counter()
            for dummy in range(count):
                Journal.open(url=url).close()
            out[label] = (time.perf_counter() - started) / count * 1000
        finally:
            journal_pg._known_version = saved
    started = time.perf_counter()
    for dummy in range(count):
        psycopg.connect(url, autocommit=True).close()
    out['connection alone'] = (time.perf_counter() - started) / count * 1000
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n', maxsplit=1)[0])
    parser.add_argument('--tasks', type=int, default=20)
    parser.add_argument('--repeat', type=int, default=3)
    parser.add_argument('--opens', type=int, default=200)
    args = parser.parse_args()
    workdir = tempfile.mkdtemp(prefix='ephemera-bench-journal-tasks-')
    try:
        with PgServer() as pg:
            url = pg.new_database('bench_tasks')
            path = os.path.join(workdir, 'journal.sqlite')
            for where in (dict(path=path), dict(url=url)):
                with Journal.open(**where) as journal:
                    journal.create_workspace('ws1')
            books = [
                ('empty play', None, {}),
                ('sqlite', {'journal_path': path}, {}),
                ('postgresql', {}, {'EPHEMERA_JOURNAL_URL': url}),
                ('pg, URL as a variable', {'journal_url': url}, {}),
            ]
            measured = {}
            for label, extra, env in books:
                book = playbook(workdir, label.split(',', maxsplit=1)[0].replace(' ', '-') + str(len(measured)),
                                args.tasks if extra is not None else 0, extra or {})
                measured[label] = measure(book, args.repeat, env)
            opened = opens(url, args.opens)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    start = measured['empty play']
    per_task = {label: [(measured[label][i] - start[i]) / args.tasks for i in (0, 1)] for label, e, v in books}
    print('journal tasks: %d workspace_info tasks a playbook, median of %d runs, on %d cores'
          % (args.tasks, args.repeat, os.cpu_count()))
    for label, dummy, dummy2 in books:
        print('  %-22s %6.2f s a playbook (%6.2f s CPU), %6.1f ms a task (%6.1f ms CPU)'
              % (label, measured[label][0], measured[label][1], per_task[label][0] * 1000, per_task[label][1] * 1000))
    print('  Journal.open of the database: %s' % ', '.join('%s %.2f ms' % item for item in opened.items()))
    print('journal tasks: a task on postgresql %.1f ms, on sqlite %.1f ms (ratio %.2f); the URL as a variable only '
          '%.1f ms (ratio %.2f to the preloaded); open %.2f ms against %.2f ms with the full look (ratio %.2f)' % (
              per_task['postgresql'][0] * 1000, per_task['sqlite'][0] * 1000,
              per_task['postgresql'][0] / max(per_task['sqlite'][0], 1e-6),
              per_task['pg, URL as a variable'][0] * 1000,
              per_task['pg, URL as a variable'][0] / max(per_task['postgresql'][0], 1e-6),
              opened['one statement'], opened['full look'], opened['full look'] / max(opened['one statement'], 1e-6)))


if __name__ == '__main__':
    main()
