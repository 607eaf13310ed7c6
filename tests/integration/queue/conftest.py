"""Real ansible-playbook runs of the queue, started in the background, against one journal file."""

import json

import pytest

from tests.ansible_run import Run

from .runs import OP_PLAYBOOK


@pytest.fixture
def journal_path(tmp_path):
    return str(tmp_path / 'journal.sqlite')


@pytest.fixture
def start_run(journal_path):
    """start_run(extra_vars, playbook=op.yml, inventory=None, forks=None) -> Run, already started."""
    runs = []

    def start(extra_vars=None, playbook=OP_PLAYBOOK, inventory=None, forks=None):
        cmd = ['ansible-playbook', playbook, '-e', json.dumps(extra_vars or {})]
        if inventory:
            cmd += ['-i', inventory]
        if forks:
            cmd += ['--forks', str(forks)]
        run = Run.start(cmd, env={'EPHEMERA_JOURNAL': journal_path})
        runs.append(run)
        return run

    yield start
    for run in runs:
        run.kill()
