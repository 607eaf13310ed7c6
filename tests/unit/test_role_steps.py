"""The step order lives twice: the roles run the steps as numbered tasks, and the flows (reconcile, the expiry sweep,
the pool, the fork) run the same steps from the step tuples. These tests tie the two, so that a step added,
removed or moved in one is found missing in the other."""

import os
import re

import pytest
import yaml

from ansible_collections.ephemera.workspaces.plugins.module_utils.flows import create, destroy

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
NUMBERED = re.compile(r'^(\d+)/(\d+) ')


def numbered_steps(role, module):
    """[(number, of, step)] of the tasks of ``role`` named 'N/M ...' that run ``module``, in the order they run."""
    with open(os.path.join(ROOT, 'roles', role, 'tasks', 'main.yml')) as src:
        tasks = yaml.safe_load(src)
    found = []

    def walk(items):
        for task in items or ():
            for key in ('block', 'rescue', 'always'):
                walk(task.get(key))
            args = task.get('ephemera.workspaces.' + module)
            match = NUMBERED.match(task.get('name') or '')
            if match and isinstance(args, dict):
                found.append((int(match.group(1)), int(match.group(2)), args.get('step')))
    walk(tasks)
    return found


@pytest.mark.parametrize('role, module, steps', [
    ('workspace_create', 'workspace_create', create.STEPS),
    ('workspace_destroy', 'workspace_destroy', destroy.ROLE_STEPS),
])
def test_the_role_runs_the_flow_s_steps_in_its_order_numbered_as_its_failures_say(role, module, steps):
    found = numbered_steps(role, module)
    assert [each[2] for each in found] == list(steps)
    assert [each[:2] for each in found] == [(i + 1, len(steps)) for i in range(len(steps))]


def test_a_failure_names_the_step_as_the_role_numbers_it():
    assert 'at step 5/6 (delete)' in destroy.failure_message('w', 'delete', 'no')
    assert 'at step 10/13 (checkout)' in create.failure_message('w', 'checkout', 'no')
