"""ephemera.workspaces resolves to this checkout only, even beside a stale copy of the collection where a release
install or Molecule puts one (~/.ansible/collections): every run through tests/ansible_run.py pins it.

Each case runs for real twice with the stale copy in a temporary HOME: pinned (as every test runs), the checkout's
code runs; unpinned (Ansible's defaults), the copy's does. Both sides are asserted, so the pin is what makes the
difference.
"""

import json
import os

import pytest

from tests.ansible_run import ROOT, environment, run_ansible

MODULE = '''#!/usr/bin/python
from ansible.module_utils.basic import AnsibleModule


def main():
    module = AnsibleModule(argument_spec={'name': {'type': 'str'}}, supports_check_mode=True)
    module.fail_json(msg='stale copy: its workspace_info module ran')


if __name__ == '__main__':
    main()
'''
ROLE = '''---
- name: Fail as a stale copy
  ansible.builtin.fail:
    msg: "stale copy: its workspace_create role ran"
'''
PLAYBOOK = '''---
- name: Show the operation queue
  hosts: localhost
  gather_facts: false
  tasks:
    - name: Fail as a stale copy
      ansible.builtin.fail:
        msg: "stale copy: its status playbook ran"
'''
USE_ROLE = '''---
- name: Use the create role without naming the workspace
  hosts: localhost
  gather_facts: false
  roles:
    - role: ephemera.workspaces.workspace_create
      vars:
        repo: https://git.example.com/app.git
        purpose: nothing
'''


@pytest.fixture(scope='module')
def home(tmp_path_factory):
    """A HOME whose ~/.ansible/collections holds a stale, broken ephemera.workspaces (as ansible-galaxy installs)."""
    home = tmp_path_factory.mktemp('home')
    copy = home / '.ansible' / 'collections' / 'ansible_collections' / 'ephemera' / 'workspaces'
    files = {
        'MANIFEST.json': json.dumps({'collection_info': {'namespace': 'ephemera', 'name': 'workspaces',
                                                         'version': '0.0.1'}, 'format': 1}),
        'plugins/modules/workspace_info.py': MODULE,
        'roles/workspace_create/tasks/main.yml': ROLE,
        'playbooks/status.yml': PLAYBOOK,
    }
    for name, text in files.items():
        path = copy / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return home


def env_of(home, tmp_path):
    # No ANSIBLE_HOME or ANSIBLE_CONFIG from outside: ~/.ansible of this HOME is Ansible's default.
    # A first run: the readers report the journal that is not there yet as empty (a fresh controller).
    return {'HOME': str(home), 'EPHEMERA_JOURNAL': str(tmp_path / 'journal.sqlite'), 'EPHEMERA_NEW_JOURNAL': 'true'}


def run(argv, home, tmp_path, pin):
    return run_ansible(argv, timeout=300, pin=pin, env=env_of(home, tmp_path), unset=('ANSIBLE_HOME', 'ANSIBLE_CONFIG'))


def test_a_module_is_the_checkouts(home, tmp_path):
    argv = ['ansible', 'localhost', '-m', 'ephemera.workspaces.workspace_info', '-a', 'name=pin-check']
    pinned = run(argv, home, tmp_path, pin=True)
    assert pinned.ok, pinned.explain()
    [(dummy, result)] = pinned.results()
    # The checkout's module: no journal yet is an empty answer with a warning.
    assert result['workspaces'] == [] and 'No journal at' in ' '.join(result['warnings'])
    assert 'stale copy' not in pinned.output

    unpinned = run(argv, home, tmp_path, pin=False)
    assert not unpinned.ok
    assert unpinned.failed_messages() == ['stale copy: its workspace_info module ran']


def test_a_role_is_the_checkouts(home, tmp_path):
    book = tmp_path / 'use-role.yml'
    book.write_text(USE_ROLE)
    pinned = run(['ansible-playbook', str(book)], home, tmp_path, pin=True)
    # The checkout's role checks its arguments (meta/argument_specs.yml) before any task: workspace is missing.
    [(name, failed)] = pinned.failures()
    assert name.startswith("Validating arguments against arg spec 'main' - Create a workspace and brief its agent")
    assert 'workspace' in failed['msg'] and 'stale copy' not in pinned.output, pinned.explain()

    unpinned = run(['ansible-playbook', str(book)], home, tmp_path, pin=False)
    assert unpinned.failed_messages() == ['stale copy: its workspace_create role ran']


def test_a_collection_playbook_is_the_checkouts(home, tmp_path):
    pinned = run(['ansible-playbook', 'ephemera.workspaces.status'], home, tmp_path, pin=True)
    assert pinned.ok, pinned.explain()
    assert pinned.task('Print the queue as a tree')['msg'] == [
        'Journal %s:' % (tmp_path / 'journal.sqlite'), 'The queue is empty: nothing queued, running or recently finished.']

    unpinned = run(['ansible-playbook', 'ephemera.workspaces.status'], home, tmp_path, pin=False)
    assert unpinned.failed_messages() == ['stale copy: its status playbook ran']


def test_the_pin_is_a_directory_with_only_a_link_to_this_checkout_and_no_run_changes_this_process(home, tmp_path):
    before = dict(os.environ)
    pinned = environment(env_of(home, tmp_path))
    top = pinned['ANSIBLE_COLLECTIONS_PATH']
    assert os.listdir(top) == ['ansible_collections']
    assert os.listdir(os.path.join(top, 'ansible_collections')) == ['ephemera']
    assert os.listdir(os.path.join(top, 'ansible_collections', 'ephemera')) == ['workspaces']
    assert os.path.realpath(os.path.join(top, 'ansible_collections', 'ephemera', 'workspaces')) == ROOT
    run(['ansible', 'localhost', '-m', 'ansible.builtin.ping'], home, tmp_path, pin=True)
    run(['ansible', 'localhost', '-m', 'ansible.builtin.ping'], home, tmp_path, pin=False)
    # What a run sets (HOME, the pin, the callback) is the run's alone.
    assert dict(os.environ) == before
