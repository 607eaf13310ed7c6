"""The step order lives twice: the roles run the steps as numbered tasks, and the flows (reconcile, the expiry sweep,
the pool, the fork) run the same steps from the step tuples. These tests tie the two, so that a step added,
removed or moved in one is found missing in the other."""

import os
import re

import pytest
import yaml

from ansible_collections.ephemera.workspaces.plugins.module_utils.flows import create, destroy
from ansible_collections.ephemera.workspaces.plugins.module_utils.providers import registry

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
NUMBERED = re.compile(r'^(\d+)/(\d+) ')


INCLUDE = 'ansible.builtin.include_tasks'


def load_tasks(role, name='main.yml'):
    with open(os.path.join(ROOT, 'roles', role, 'tasks', name)) as src:
        return yaml.safe_load(src)


def numbered_steps(role, module):
    """[(number, of, step)] of the tasks of ``role`` named 'N/M ...' that run ``module``, in the order they run
    (the tasks of a file the role includes in the place of the include)."""
    tasks = load_tasks(role)
    found = []

    def walk(items):
        for task in items or ():
            for key in ('block', 'rescue', 'always'):
                walk(task.get(key))
            if INCLUDE in task:
                walk(load_tasks(role, task[INCLUDE]))
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


def role_tasks(role):
    """[(task, [the ``when`` of each block or include around it, outermost first])] of the tasks of ``role``, in
    order (an included file's in the place of its include)."""
    found = []

    def walk(items, whens):
        for task in items or ():
            if 'block' in task:
                walk(task['block'], whens + [task.get('when')])
                continue
            if INCLUDE in task:
                walk(load_tasks(role, task[INCLUDE]), whens + [task.get('when')])
                continue
            found.append((task, whens + [task.get('when')]))
    walk(load_tasks(role), [])
    return found


FROM_POOL = '_workspace_create_vmid.details.from_pool | default(false)'


def test_a_create_from_a_warm_pool_runs_the_rest_of_its_steps_in_step_2s_task_and_none_of_the_numbered_ones():
    tasks = role_tasks('workspace_create')
    steps = [(task['ephemera.workspaces.workspace_create'].get('step'), [w for w in whens if w])
             for task, whens in tasks if isinstance(task.get('ephemera.workspaces.workspace_create'), dict)]
    by_step = {}
    for step, whens in steps:
        by_step.setdefault(step, []).append(whens)
    # Step 2's own task goes on with the rest when it took a member (then_warm_rest), with the secrets the steps
    # need; no task of the role runs the step value warm_rest.
    assert 'warm_rest' not in by_step and len(by_step['vmid']) == 1
    vmid = [task for task, dummy in tasks if (task.get('ephemera.workspaces.workspace_create') or {}).get('step')
            == 'vmid'][0]['ephemera.workspaces.workspace_create']
    assert vmid['then_warm_rest'] is True
    assert {'agent_credentials', 'git_token', 'git_username'} <= set(vmid)
    # Every numbered step after step 2 runs only when step 2 did not answer from_pool (a rerun, a cold create).
    for step in create.STEPS[2:]:
        assert by_step[step] and all('not (%s)' % FROM_POOL in whens for whens in by_step[step]), (step, by_step[step])
    for step in create.STEPS[:2]:
        assert not any(FROM_POOL in ' '.join(whens) for whens in by_step[step])
    # What the one task runs is what a member did not do, in the role's order.
    assert list(create.WARM_REST) == [s for s in create.STEPS[2:] if s not in create.POOLED_STEPS]


def test_a_create_from_a_warm_pool_skips_the_numbered_steps_as_one_task():
    """Each task of a skipped block is skipped on its own (a worker each); a skipped include is one task."""
    includes = []

    def walk(items):
        for task in items or ():
            walk(task.get('block'))
            if INCLUDE in task:
                includes.append((task[INCLUDE], task.get('when')))
    walk(load_tasks('workspace_create'))
    assert includes == [('steps.yml', 'not (%s)' % FROM_POOL)]
    steps = load_tasks('workspace_create', 'steps.yml')
    assert [task['ephemera.workspaces.workspace_create']['step'] for task in steps] == list(create.STEPS[2:])
    assert [task.get('when') for task in steps] == [None] * len(steps)


# A task named in the provider's words: the template at the end of its name (ansible-lint's name[template]).
TEMPLATED = re.compile(r"^(\d+)/13 (.*?)\{\{ _workspace_create_request\.task_names\.(\w+) \| default\('(\w+)'\) \}\}$")


def test_steps_2_to_6_are_named_in_the_provider_s_words_and_the_rest_as_the_flow_names_them():
    tasks = [task for task, dummy in role_tasks('workspace_create')
             if NUMBERED.match(task.get('name') or '') and 'ephemera.workspaces.workspace_create' in task]
    by_step = {task['ephemera.workspaces.workspace_create']['step']: task['name'] for task in tasks}
    words = registry.provider_class('aws').step_words()
    for step in create.STEPS[1:]:
        number = create.STEPS.index(step) + 1
        match = TEMPLATED.match(by_step[step])
        if step in words:
            # Templated from step 1's answer (the module's task_names), falling back to the step's own name.
            assert match and (match.group(1), match.group(3), match.group(4)) == (str(number), step, step), by_step[step]
        else:
            assert match is None and by_step[step] == '%d/13 %s' % (number, create.TASK_NAMES[step])
    assert by_step['request'] == '1/13 persist request'


@pytest.mark.parametrize('provider', sorted(registry.PROVIDERS))
def test_each_provider_names_its_allocation_in_its_own_words(provider):
    names, labels = create.task_names(provider), create.step_labels(provider)
    assert set(names) == set(labels) == set(create.STEPS)
    words = ' '.join('%s %s' % (names[step], labels[step]) for step in create.STEPS).lower()
    noun = registry.provider_class(provider).noun
    assert names['configure'] == 'configure the %s' % noun and names['start'] == 'start the %s' % noun
    if provider == 'proxmox':
        assert (names['vmid'], names['clone'], names['wait_clone']) == (
            'candidate vmid', 'clone the template', 'wait for the clone task')
    else:
        assert not [word for word in ('vmid', 'container', 'clone', 'template') if word in words], words
    assert 'failed at step 3/13 (%s): no' % labels['clone'] in create.failure_message('w', 'clone', 'no', labels)


def test_the_table_of_words_in_the_docs_is_the_providers_own():
    with open(os.path.join(ROOT, 'docs', 'internals', 'create.md')) as src:
        rows = {line.split('|')[1].strip().strip('`'): [cell.strip() for cell in line.split('|')[2:-1]]
                for line in src if line.startswith('| `') and line.count('|') == 7}
    order = ['proxmox', 'aws', 'hetzner', 'gcp', 'azure']
    assert sorted(order) == sorted(registry.PROVIDERS)
    for step in ('vmid', 'clone', 'wait_clone', 'configure', 'start'):
        assert rows[step] == [create.task_names(provider)[step] for provider in order], step
