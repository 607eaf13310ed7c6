"""The commands the documentation shows survive the shell and Ansible as written, and the roles number their steps
once each.

Through the shell, ``-e purpose="Fix the login"`` reaches Ansible as ``purpose=Fix the login``, whose key=value
parsing keeps only ``Fix``: every extra var a document shows must come through whole (JSON, a file, or a value
without spaces).
"""

import glob
import os
import re
import shlex

import pytest
import yaml

from ansible.parsing.splitter import parse_kv

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FENCE = re.compile(r'^```[^\n]*\n(.*?)^```', re.M | re.S)


def complete(command):
    try:
        shlex.split(command)
    except ValueError:
        return False
    return True


def documented_commands():
    """(file, command) of every ansible-playbook/ansible command in the README's and docs' code blocks and in the
    playbooks' usage comments, continuation lines joined."""
    found = []
    pages = sorted(glob.glob(os.path.join(ROOT, 'docs', '**', '*.md'), recursive=True))
    for path in [os.path.join(ROOT, 'README.md')] + pages:
        with open(path) as src:
            text = src.read()
        blocks = FENCE.findall(text)
        # Commands in table cells and running text, between backticks.
        blocks += re.findall(r'`(ansible(?:-playbook)? [^`]+)`', text)
        for block in blocks:
            lines = block.replace('\\\n', ' ').splitlines()
            while lines:
                command = lines.pop(0)
                # A quoted argument may go on over the next lines, as the shell reads it.
                while lines and not complete(command):
                    command += '\n' + lines.pop(0)
                if re.match(r'\s*(ansible-playbook|ansible) ', command):
                    found.append((os.path.relpath(path, ROOT), command.strip()))
    for path in sorted(glob.glob(os.path.join(ROOT, 'playbooks', '*.yml'))):
        with open(path) as src:
            for line in src:
                match = re.match(r'#\s+(ansible-playbook .*)$', line)
                if match:
                    found.append((os.path.relpath(path, ROOT), match.group(1)))
    return found


def extra_vars(command):
    words = shlex.split(command.split(' # ')[0])
    return [words[i + 1] for i, word in enumerate(words[:-1]) if word in ('-e', '--extra-vars')]


COMMANDS = documented_commands()


def test_the_documents_show_commands():
    # The README and docs/create.md show the create command: the scan finds it.
    assert any('ephemera.workspaces.create' in command for dummy, command in COMMANDS)
    assert len(COMMANDS) > 10


@pytest.mark.parametrize('where, command', COMMANDS)
def test_every_documented_extra_var_reaches_ansible_whole(where, command):
    for value in extra_vars(command):
        if value.startswith(('{', '@', '[')):
            continue
        parsed = parse_kv(value)
        assert '_raw_params' not in parsed, '%s: %r reaches Ansible as %r' % (where, value, parsed)


def test_the_old_create_command_would_be_caught():
    old = 'ansible-playbook ephemera.workspaces.create -e workspace=fix-login -e purpose="Fix the login redirect loop"'
    assert parse_kv(extra_vars(old)[1]) == {'purpose': 'Fix', '_raw_params': 'the login redirect loop'}


@pytest.mark.parametrize('role', sorted(os.listdir(os.path.join(ROOT, 'roles'))))
def test_a_role_numbers_its_steps_once_each_in_order(role):
    def load(name):
        with open(os.path.join(ROOT, 'roles', role, 'tasks', name)) as src:
            return yaml.safe_load(src)
    tasks = load('main.yml')

    def names(items):
        # The tasks of a file the role includes count in the place of its include.
        for task in items or []:
            if 'ansible.builtin.include_tasks' in task:
                yield from names(load(task['ansible.builtin.include_tasks']))
            elif 'name' in task:
                yield task['name']
            for key in ('block', 'rescue', 'always'):
                yield from names(task.get(key))
    numbered = [re.match(r'^(\d+)/(\d+) ', name) for name in names(tasks)]
    numbered = [(int(m.group(1)), int(m.group(2))) for m in numbered if m]
    if numbered:
        total = numbered[0][1]
        assert numbered == [(n, total) for n in range(1, total + 1)], numbered
