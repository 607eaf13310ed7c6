"""Run real ansible-playbook processes against this checkout."""

import json
import os
import subprocess
import sys

import pytest

BIN = os.path.dirname(sys.executable)


@pytest.fixture
def run_playbook(tmp_path):
    """run_playbook(yaml_text, env=None, check=False) -> (returncode, json result of the json callback, raw output)."""
    def run(text, env=None, check=False, extra_args=()):
        book = tmp_path / 'play.yml'
        book.write_text(text)
        environ = dict(os.environ, ANSIBLE_STDOUT_CALLBACK='ansible.posix.json', ANSIBLE_NOCOLOR='1',
                       ANSIBLE_LOCALHOST_WARNING='0', ANSIBLE_INVENTORY_UNPARSED_WARNING='0',
                       ANSIBLE_PYTHON_INTERPRETER=sys.executable)
        environ.update(env or {})
        cmd = [os.path.join(BIN, 'ansible-playbook'), str(book)] + (['--check'] if check else []) + list(extra_args)
        proc = subprocess.run(cmd, capture_output=True, text=True, env=environ, timeout=300, check=False)
        try:
            data = json.loads(proc.stdout)
        except ValueError:
            data = None
        return proc.returncode, data, proc.stdout + proc.stderr
    return run


def _task_results(data, name):
    for play in data['plays']:
        for task in play['tasks']:
            if task['task']['name'] == name:
                return task['hosts']['localhost']
    raise KeyError(name)


@pytest.fixture
def task_results():
    """task_results(data, name): the localhost result of the task called ``name`` in a json-callback run."""
    return _task_results
