"""Real ansible-playbook runs of the queue, started in the background, against one journal file."""

import json
import os
import subprocess
import sys

import pytest

from .runs import BIN, OP_PLAYBOOK, Run


@pytest.fixture
def journal_path(tmp_path):
    return str(tmp_path / 'journal.sqlite')


@pytest.fixture
def start_run(tmp_path, journal_path):
    """start_run(extra_vars, playbook=op.yml, inventory=None, forks=None) -> Run, already started."""
    runs = []

    def start(extra_vars=None, playbook=OP_PLAYBOOK, inventory=None, forks=None):
        out_path = str(tmp_path / ('run-%d.json' % len(runs)))
        env = dict(os.environ, ANSIBLE_STDOUT_CALLBACK='ansible.posix.json', ANSIBLE_NOCOLOR='1',
                   ANSIBLE_LOCALHOST_WARNING='0', ANSIBLE_INVENTORY_UNPARSED_WARNING='0',
                   ANSIBLE_PYTHON_INTERPRETER=sys.executable, EPHEMERA_JOURNAL=journal_path)
        cmd = [os.path.join(BIN, 'ansible-playbook'), playbook, '-e', json.dumps(extra_vars or {})]
        if inventory:
            cmd += ['-i', inventory]
        if forks:
            cmd += ['--forks', str(forks)]
        with open(out_path, 'w') as out:
            proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        run = Run(proc, out_path)
        runs.append(run)
        return run

    yield start
    for run in runs:
        if run.proc.poll() is None:
            run.proc.kill()
            run.proc.wait()
        run.stop_leftovers()
