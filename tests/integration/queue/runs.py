"""Helpers for the queue's integration tests: background ansible-playbook runs and journal reads."""

import json
import os
import signal
import sqlite3
import sys
import time

import pytest

BIN = os.path.dirname(sys.executable)
HERE = os.path.dirname(os.path.abspath(__file__))
OP_PLAYBOOK = os.path.join(HERE, 'op.yml')


class Run:
    """One ansible-playbook process in its own session (so that what it leaves behind can be stopped)."""

    def __init__(self, proc, out_path):
        self.proc = proc
        self.pid = proc.pid
        self.out_path = out_path
        self.returncode = None
        self.data = None
        self.output = ''

    def finish(self, timeout=240):
        self.returncode = self.proc.wait(timeout)
        with open(self.out_path) as f:
            self.output = f.read()
        try:
            self.data = json.loads(self.output)
        except ValueError:
            self.data = None
        return self

    def report(self, host='localhost'):
        """The msg of the op playbook's Report task for ``host``."""
        for play in self.data['plays']:
            for task in play['tasks']:
                if task['task']['name'] == 'Report':
                    return task['hosts'][host]['msg']
        raise KeyError('no Report task in the output:\n' + self.output)

    def stop_leftovers(self):
        try:
            os.killpg(self.pid, signal.SIGKILL)
        except OSError:
            pass


def query(path, sql, args=()):
    """Rows of a read-only query against the journal file (a fresh connection each time)."""
    if not os.path.exists(path):
        return []
    conn = sqlite3.connect(path, timeout=60)
    conn.row_factory = sqlite3.Row
    try:
        return [dict(row) for row in conn.execute(sql, args).fetchall()]
    except sqlite3.OperationalError as exc:
        if 'no such table' in str(exc):
            return []
        raise
    finally:
        conn.close()


def wait_until(condition, what, timeout=120, runs=()):
    """Poll ``condition()`` until it is true; fail naming ``what`` (and any run that ended meanwhile) if it never is."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        ended = [run for run in runs if run.proc.poll() is not None]
        if ended:
            run = ended[0].finish()
            pytest.fail('run %d ended (rc %s) before %s:\n%s' % (run.pid, run.returncode, what, run.output[-3000:]))
        if time.monotonic() > deadline:
            pytest.fail('never saw %s within %d s' % (what, timeout))
        time.sleep(0.1)


def open_gate(path):
    with open(path, 'w') as f:
        f.write('open\n')
