"""Journal and cluster data never become templates, on the oldest ansible-core the collection claims
(meta/runtime.yml requires_ansible), whose templar still honours a ``#jinja2:`` header that chooses other
delimiters: a purpose typed into a survey with no brace in it used to run a lookup on the controller through the
inventory's host variables. docs/internals/security.md, finding 4.

The oldest ansible-core is installed once from the package index into build/ansible-core-<version>/ (with the
collection's requirements) and reused; the collection is this checkout, found through the pinned collections path.
"""

import os
import re
import subprocess
import sys

import pytest
import yaml

from ansible_collections.ephemera.workspaces.plugins.module_utils.core.journal import Journal
from tests.ansible_run import ROOT, run_ansible

PAYLOAD = ("#jinja2:variable_start_string:'<<',variable_end_string:'>>'\n"
           "Fix the login << lookup('pipe', 'touch %s') >>")


def oldest_claimed():
    with open(os.path.join(ROOT, 'meta', 'runtime.yml')) as meta:
        claim = yaml.safe_load(meta)['requires_ansible']
    found = re.match(r'^>=\s*(\d+)\.(\d+)', claim)
    assert found, 'requires_ansible %r has no lower bound' % claim
    return '%s.%s' % found.groups()


@pytest.fixture(scope='module')
def oldest_ansible():
    """The bin directory of a virtualenv with the oldest ansible-core the collection claims (the one make test-cores
    uses, made by scripts/core-venv.sh if it is not there yet)."""
    version = oldest_claimed()
    venv = os.path.join(ROOT, 'build', 'ansible-core-%s' % version)
    done = subprocess.run([os.path.join(ROOT, 'scripts', 'core-venv.sh'), version, venv, sys.executable],
                          capture_output=True, text=True, timeout=900, check=False)
    assert done.returncode == 0, 'cannot make the venv of ansible-core %s:\n%s' % (version, done.stderr[-2000:])
    found = subprocess.run([os.path.join(venv, 'bin', 'ansible'), '--version'], capture_output=True, text=True,
                           timeout=120, check=True).stdout
    assert 'core %s.' % version in found.splitlines()[0], found
    return os.path.join(venv, 'bin')


@pytest.fixture(scope='module')
def site(tmp_path_factory):
    base = tmp_path_factory.mktemp('oldest')
    state = base / 'state'
    state.mkdir(mode=0o700)
    journal_path = str(state / 'journal.sqlite')
    marker = str(base / 'evaluated')
    purpose = PAYLOAD % marker
    with Journal.open(journal_path) as journal:
        journal.create_workspace('ws-a', repo='file:///srv/git/app.git', ref='main', purpose=purpose)
        journal.update_workspace('ws-a', 1, status='ready', activity='idle', vmid=101, node='pve1',
                                 address='127.0.0.1')
    inventory = base / 'site.workspaces.yml'
    inventory.write_text('plugin: ephemera.workspaces.workspaces\njournal_path: %s\n' % journal_path)
    return {'base': base, 'journal': journal_path, 'marker': marker, 'purpose': purpose, 'inventory': str(inventory)}


PLAY = '''
- hosts: workspaces
  gather_facts: false
  tasks:
    - name: the purpose from the inventory
      ansible.builtin.copy:
        content: "{{ ephemera_purpose }}"
        dest: "%(base)s/from-inventory"
      delegate_to: localhost
    - name: the purpose from the lookup, even with allow_unsafe
      ansible.builtin.set_fact:
        looked_up: "{{ (query('ephemera.workspaces.journal', 'ws-a', allow_unsafe=True) | first).purpose }}"
    - name: the purpose from the lookup, used
      ansible.builtin.copy:
        content: "{{ looked_up }}"
        dest: "%(base)s/from-lookup"
      delegate_to: localhost
'''


def test_a_purpose_with_a_jinja2_header_is_never_evaluated_on_the_oldest_claimed_ansible(oldest_ansible, site):
    book = site['base'] / 'play.yml'
    book.write_text(PLAY % {'base': site['base']})
    run = run_ansible([os.path.join(oldest_ansible, 'ansible-playbook'), '-i', site['inventory'], str(book)],
                      callback=None, timeout=300, fail=False,
                      env={'EPHEMERA_JOURNAL': site['journal'], 'ANSIBLE_PYTHON_INTERPRETER':
                           os.path.join(oldest_ansible, 'python')})
    assert run.returncode == 0, run.output[-3000:]
    assert not os.path.exists(site['marker']), 'the purpose was evaluated as a template'
    for name in ('from-inventory', 'from-lookup'):
        assert (site['base'] / name).read_text() == site['purpose'], name
