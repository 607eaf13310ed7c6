"""The failpoints kill a real ansible-playbook run whole (the shipped playbooks, as the matrix runs them), and the
next real run converges."""

import os
import types

import pytest

from ansible_collections.ephemera.workspaces.plugins.module_utils.core import failpoint
from tests.faults import invariants
from tests.faults.site import AGENTS, GIT_USER, Kill, read_trace
from tests.integration.playbooks import Site
from tests.localpve import system


def playbook_site(site):
    return Site(types.SimpleNamespace(state_dir=site.info['state_dir']), site.journal_path)


def run_vars(site, name):
    return dict(workspace=name, repo=site.repo_url, purpose='work on %s' % name, agent='fake', ephemera_agents=AGENTS,
                git_token=site.git_token, git_username=GIT_USER, agent_credentials={'AGENT_API_KEY': site.agent_key})


@pytest.mark.parametrize('playbook,point', [
    ('create.yml', 'create.clone pve POST /nodes/*/lxc/*/clone'),
    ('create.yml', 'create.checkout ssh put git-askpass'),
], ids=['create-clone-answered', 'create-askpass-written'])
def test_a_playbook_killed_at_a_point_dies_whole_and_the_next_run_converges(site, tmp_path, playbook, point):
    name = 'pb-' + point.split()[0].split('.')[1].replace('_', '-')
    runner = playbook_site(site)
    trace = str(tmp_path / 'trace')
    site.clear_faults()
    site.log_requests()
    killed = runner.playbook(playbook, env={failpoint.TRACE_ENV: trace, failpoint.KILL_ENV: Kill(name, point).env()},
                             **run_vars(site, name))
    assert killed.returncode == -9, killed.output[-2000:]
    assert read_trace(trace)[-1] == (name, point)
    # Nothing of the run is left: no process carries its trace in its environment.
    assert system.left_with_environment((failpoint.TRACE_ENV + '=' + trace).encode()) == []
    rerun = runner.playbook(playbook, **run_vars(site, name))
    assert rerun.ok, rerun.output[-3000:]
    found, leaks, view = invariants.check(site, [name], {}, site.requests(), site.secret(), site.clones(), site.since)
    assert found == {k: [] for k in invariants.NAMES} and leaks == {}
    assert sorted(n for n in view.ours.values() if n == name) == [name]


def test_a_destroy_playbook_killed_after_its_delete_was_answered_is_finished_by_reconcile(site, tmp_path):
    name = 'pb-destroy'
    runner = playbook_site(site)
    assert runner.playbook('create.yml', **run_vars(site, name)).ok
    trace = str(tmp_path / 'trace')
    site.clear_faults()
    site.log_requests()
    point = 'destroy.delete pve DELETE /nodes/*/lxc/*'
    killed = runner.playbook('destroy.yml', env={failpoint.TRACE_ENV: trace, failpoint.KILL_ENV: Kill(name, point).env()},
                             workspace=name, git_token=site.git_token)
    assert killed.returncode == -9 and read_trace(trace)[-1] == (name, point)
    with site.journal() as journal:
        assert journal.get_workspace(name)['status'] == 'destroying'
    reconciled = runner.playbook('reconcile.yml')
    assert reconciled.ok, reconciled.output[-3000:]
    with site.journal() as journal:
        assert journal.get_workspace(name)['status'] == 'destroyed'
    found, leaks, view = invariants.check(site, [name], {}, site.requests(), site.secret(), site.clones(), site.since)
    assert found == {k: [] for k in invariants.NAMES} and leaks == {} and name not in view.ours.values()
    assert os.path.exists(site.journal_path)


def test_reconcile_refuses_resumes_that_lack_their_secrets_tries_them_all_and_finishes_them_once_given(site, tmp_path):
    names = ['pb-resume-a', 'pb-resume-b']
    runner = playbook_site(site)
    for name in names:
        trace = str(tmp_path / name)
        killed = runner.playbook('create.yml', env={failpoint.TRACE_ENV: trace, failpoint.KILL_ENV: Kill(
            name, 'create.clone pve POST /nodes/*/lxc/*/clone').env()}, **run_vars(site, name))
        assert killed.returncode == -9 and read_trace(trace)[-1][0] == name
    with site.journal() as journal:
        before = {name: journal.get_workspace(name) for name in names}
        history = {name: len(journal.events(name)) for name in names}
    assert [ws['status'] for ws in before.values()] == ['provisioning', 'provisioning']

    # A reconcile without the vault: both resumes are tried and refused before their turn, with what to pass.
    without = runner.playbook('reconcile.yml')
    assert not without.ok
    assert "Workspace 'pb-resume-a' was requested with agent_credentials (AGENT_API_KEY)" in without.output
    assert "Workspace 'pb-resume-b' was requested with agent_credentials (AGENT_API_KEY)" in without.output
    assert 'Could not resume pb-resume-a, pb-resume-b' in without.output
    with site.journal() as journal:
        assert {name: journal.get_workspace(name) for name in names} == before
        assert {name: len(journal.events(name)) for name in names} == history

    # With the secrets as extra vars, as the create playbook takes them, reconcile finishes both.
    given = runner.playbook('reconcile.yml', git_token=site.git_token, git_username=GIT_USER,
                            agent_credentials={'AGENT_API_KEY': site.agent_key})
    assert given.ok, given.output[-3000:]
    found, leaks, view = invariants.check(site, names, {}, site.requests(), site.secret(), site.clones(), site.since)
    assert found == {k: [] for k in invariants.NAMES} and leaks == {}
    assert sorted(n for n in view.ours.values() if n in names) == names
    with site.journal() as journal:
        assert [journal.get_workspace(name)['status'] for name in names] == ['ready', 'ready']
