"""Runs that expect history (destroy, reconcile, expire, archive, status) never start over with an empty journal: the
shipped playbooks refuse a journal that is not at the configured place, make nothing (no journal, no secret), and
say what to do; -e ephemera_new_journal=true says it is a first run. Nothing here reaches a cluster: the refusal
comes before any API call (the API host does not resolve)."""

import os

import pytest

from tests.ansible_run import run_ansible
from tests.integration.playbooks import PLAYBOOKS

API = {'PROXMOX_HOST': 'pve.invalid', 'PROXMOX_TOKEN_ID': 'u@pve!t', 'PROXMOX_TOKEN_SECRET': 'token-secret-value'}


def play(name, journal, *extra):
    argv = ['ansible-playbook', os.path.join(PLAYBOOKS, name)]
    for value in extra:
        argv += ['-e', value]
    return run_ansible(argv, timeout=300, env=dict(API, EPHEMERA_JOURNAL=journal))


@pytest.mark.parametrize('name, extra', [
    ('destroy.yml', ('workspace=never-seen',)),
    ('reconcile.yml', ()),
    ('expire.yml', ()),
    ('archive.yml', ('workspace=never-seen',)),
    ('status.yml', ()),
])
def test_a_run_that_expects_history_refuses_a_missing_journal(tmp_path, name, extra):
    journal = str(tmp_path / 'journal.sqlite')
    run = play(name, journal, *extra)
    assert not run.ok, run.explain()
    [message] = run.failed_messages()
    assert message.startswith('No journal at %s, and this run expects one' % journal), message
    assert '-e ephemera_new_journal=true' in message
    assert os.listdir(str(tmp_path)) == []


def test_a_first_run_says_so_and_reads_an_empty_journal(tmp_path):
    journal = str(tmp_path / 'journal.sqlite')
    run = play('status.yml', journal, 'ephemera_new_journal=true')
    assert run.ok, run.explain()
    assert run.task('Print the workspaces with their lease and cleanup status')['msg'] == ['No workspaces recorded.']
    # A reader makes nothing, a first run included.
    assert os.listdir(str(tmp_path)) == []
    # A first run knows no workspace: a destroy names none, and still makes nothing.
    destroyed = play('destroy.yml', journal, 'workspace=never-seen', 'ephemera_new_journal=true')
    assert not destroyed.ok and destroyed.changed == 0, destroyed.explain()
    assert destroyed.failed_messages() == ['No workspace never-seen in this journal (%s); known: none' % journal]
    assert os.listdir(str(tmp_path)) == []
