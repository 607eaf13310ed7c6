"""The try-out inventories are self-contained: their journal lives beside their state (never the default journal a
real cluster or account uses later), EPHEMERA_JOURNAL still chooses another, and when the place is not up a run
says in one line what to start instead of the file lookup's own error. No place is started here."""

import json
import os

import pytest

from tests.ansible_run import ROOT, run_ansible

PLACES = [('localpve', 'LOCALPVE_STATE_DIR', 'cluster.json', 'The try-out cluster is not up', 'make cluster-up'),
          ('localcloud', 'LOCALCLOUD_STATE_DIR', 'cloud.json', 'The try-out cloud is not up', 'make cloud-up'),
          ('localcloud-hetzner', 'LOCALCLOUD_STATE_DIR', 'cloud.json', 'The try-out cloud is not up', 'make cloud-up'),
          ('localcloud-gcp', 'LOCALCLOUD_STATE_DIR', 'cloud.json', 'The try-out cloud is not up', 'make cloud-up'),
          ('localcloud-azure', 'LOCALCLOUD_STATE_DIR', 'cloud.json', 'The try-out cloud is not up', 'make cloud-up')]


def journal_path(inventory, env):
    run = run_ansible(['ansible', '-i', os.path.join(ROOT, 'inventories', inventory), 'localhost', '-m',
                       'ansible.builtin.debug', '-a', 'var=ephemera_journal_path'], env=env, timeout=120,
                      unset=('EPHEMERA_', 'LOCALPVE_', 'LOCALCLOUD_'))
    assert run.ok, run.explain()
    [(_task, result)] = run.results()
    return result['ephemera_journal_path']


@pytest.mark.parametrize('inventory, variable, info, _said, _start', PLACES)
def test_the_journal_of_a_try_out_place_is_its_own(tmp_path, inventory, variable, info, _said, _start):
    state = tmp_path / 'state'
    state.mkdir()
    (state / info).write_text(json.dumps({}))
    assert journal_path(inventory, {variable: str(state)}) == str(state / 'journal.sqlite')
    chosen = str(tmp_path / 'mine.sqlite')
    assert journal_path(inventory, {variable: str(state), 'EPHEMERA_JOURNAL': chosen}) == chosen


@pytest.mark.parametrize('inventory, variable, info, said, start', PLACES)
def test_a_place_that_is_not_up_says_what_to_start(tmp_path, inventory, variable, info, said, start):
    home = tmp_path / 'home'
    home.mkdir()
    run = run_ansible(['ansible-playbook', '-i', os.path.join(ROOT, 'inventories', inventory),
                       os.path.join(ROOT, 'playbooks', 'create.yml'), '-e',
                       json.dumps({'workspace': 'not-up', 'repo': 'https://git.example.invalid/app.git',
                                   'purpose': 'Nothing yet'})],
                      env={variable: str(tmp_path / 'nothing-here'), 'HOME': str(home),
                           'XDG_STATE_HOME': str(home / 'state')}, timeout=180,
                      unset=('EPHEMERA_', 'LOCALPVE_', 'LOCALCLOUD_'))
    assert not run.ok
    said = "%s: there is no %s/%s. Start it with '%s'" % (said, tmp_path / 'nothing-here', info, start)
    assert said in run.output, run.output[-3000:]
    # Not the file lookup's own error.
    assert 'could not locate file' not in run.output and 'lookup plugin' not in run.output, run.output[-3000:]
    # Nothing was written: no journal in the user's default place, none in the place's directory.
    assert not (home / 'state').exists() and not (tmp_path / 'nothing-here').exists()
