"""The failure table: each row's fault on the try-out cluster, the behaviour the row promises, and a rerun
that converges to one ready workspace.

Every test has its own journal and workspace name; the faults are the cluster's own (lossy proxy,
fakepve's catalogued task errors, DHCP, sshd, a broken guest) and are cleared after each test.
"""

import os
import re
import shutil
import time

from ansible_collections.ephemera.workspaces.plugins.module_utils.core import ownership
from tests.localpve import wait_task

from .conftest import GIT_USER
from .createrun import files_containing, request_vars
from .gitserver import git

CLONE = '/nodes/{node}/lxc/{vmid}/clone'
START = '/nodes/{node}/lxc/{vmid}/status/start'


def step_changes(run):
    """{step number: changed} of the steps that ran."""
    return {n: bool(r.get('changed')) for n, r in run.step_results().items() if not r.get('skipped')}


def assert_one_ready(ctl, name, run):
    assert run.ok, run.explain()
    ws = ctl.workspace(name)
    assert (ws['status'], ws['failure']) == ('ready', None)
    assert ctl.ours(name) == [ws['vmid']]
    assert ctl.guests()[ws['vmid']]['status'] == 'running'
    return ws


def clone_tasks_since(ctl, since):
    """Clone tasks of the template started by the collection's API token since ``since``."""
    node = ctl.api.nodes(ctl.info['template_node'])
    tasks = node.tasks.get(typefilter='vzclone', vmid=ctl.info['template_vmid'], source='all', limit=500)
    return [t for t in tasks if t['user'] == ctl.info['token_id'] and int(t['starttime']) >= int(since)]


def test_clone_response_lost_the_candidate_is_inspected_and_adopted_by_its_marker(controller, repo):
    name = 'lost-answer'
    since = time.time() - 1
    rule = controller.cluster.proxy_add('drop-response', 'POST', '/nodes/*/lxc/*/clone', times=1)
    run = controller.create(request_vars(repo.url, name))
    ws = assert_one_ready(controller, name, run)
    assert [len(r['hits']) for r in controller.cluster.proxy_rules() if r['id'] == rule['id']] == [1]
    events = controller.events(name)
    dispatched = [e for e in events if e['action'] == 'clone' and e['kind'] == 'dispatched']
    adopted = [e for e in events if e['action'] == 'adopted']
    assert len(dispatched) == 1 and len(adopted) == 1
    assert adopted[0]['detail']['vmid'] == ws['vmid'] and 'answer was lost' in adopted[0]['detail']['reason']
    # One clone was made, never a second one; its task was found in the task list and waited for.
    tasks = clone_tasks_since(controller, since)
    assert [t['upid'] for t in tasks] == [ws['upids']['clone']] and tasks[0]['status'] == 'OK'
    again = controller.create(request_vars(repo.url, name))
    assert again.ok and again.stats()['changed'] == 0, again.explain()


def test_clone_task_failed_its_log_is_kept_nothing_is_left_and_a_rerun_clones_again(controller, repo):
    name = 'clone-fails'
    before = set(controller.guests())
    controller.cluster.pve_fail('POST', CLONE, error='clone_failed', times=1)
    run = controller.create(request_vars(repo.url, name))
    assert not run.ok
    step, result = run.failure()
    assert step.startswith('4/13') and 'clone failed: unexpected error' in result['msg']
    ws = controller.workspace(name)
    assert ws['status'] == 'failed' and ws['failure']['step'] == 'wait_clone'
    assert any('clone failed: unexpected error' in line for line in ws['failure']['log_tail'])
    assert ws['failure']['upid'].startswith('UPID:') and ws['candidate_vmid'] is None and ws['vmid'] is None
    # The failed clone left no container (PVE's worker removed it), and nothing else was touched.
    assert set(controller.guests()) == before and controller.ours(name) == []
    rerun = controller.create(request_vars(repo.url, name))
    assert_one_ready(controller, name, rerun)


def test_boot_failed_the_container_stays_failed_for_diagnosis_and_a_retry_starts_it(controller, repo):
    name = 'boot-fails'
    # Twice: the step stops the container and starts it once more after a failed start (the cold-start fallback).
    controller.cluster.pve_fail('POST', START, error='mtu_size_bigger_than_bridge', times=2)
    run = controller.create(request_vars(repo.url, name))
    assert not run.ok and run.failure()[0].startswith('6/13'), run.explain()
    assert 'did not start, twice' in run.failure()[1]['msg']
    ws = controller.workspace(name)
    assert (ws['status'], ws['failure']['step'], ws['failure']['phase']) == ('failed', 'start', 'booting')
    assert any('MTU size' in line for line in ws['failure']['log_tail'])
    # Kept for diagnosis: the container is there, stopped, and provably ours (so a destroy may delete it).
    vmid = ws['vmid']
    assert controller.guests()[vmid]['status'] == 'stopped'
    assert controller.marker_verdict(vmid, name) == ownership.VERIFIED
    rerun = controller.create(request_vars(repo.url, name))
    ws = assert_one_ready(controller, name, rerun)
    assert ws['vmid'] == vmid
    changes = step_changes(rerun)
    assert [n for n in range(1, 6) if changes[n]] == [] and changes[6]


def test_no_dhcp_address_is_an_explicit_booting_failure_after_bounded_looks(controller, repo):
    name = 'no-lease'
    controller.cluster.dhcp(None)
    request = request_vars(repo.url, name, ephemera_address_timeout=3)
    run = controller.create(request)
    assert not run.ok and run.failure()[0].startswith('7/13'), run.explain()
    ws = controller.workspace(name)
    assert (ws['status'], ws['failure']['step'], ws['failure']['phase']) == ('failed', 'address', 'booting')
    assert 'did not report an address from DHCP within 3 s' in ws['failure']['message']
    assert ws['address'] is None
    controller.cluster.dhcp(0)
    rerun = controller.create(request)
    ws = assert_one_ready(controller, name, rerun)
    assert ws['address'] == cluster_guest(controller, ws['vmid'])['address']


def test_ssh_refused_for_a_while_is_retried_with_backoff_until_it_answers(controller, repo):
    name = 'ssh-late'
    fault = controller.cluster.guest_fault('refuse', seconds=3)
    run = controller.create(request_vars(repo.url, name), env={'EPHEMERA_PROGRESS_INTERVAL': '0.2'})
    assert_one_ready(controller, name, run)
    assert [f['hits'] for f in controller.cluster.guest_faults() if f['id'] == fault['id']][0]
    assert run.step_results()[8]['details']['attempts'] > 1
    # While it waited, the task said what for, at intervals: the guest's address and the last refusal.
    ws = controller.workspace(name)
    said = re.findall(r'ssh-late: waiting for SSH at %s:\d+ \((\d+) s of \d+ s; last: .*cannot connect.*\)'
                      % re.escape(ws['address']), run.output)
    assert said, run.output[-3000:]


def test_ssh_that_never_comes_up_fails_the_run_and_the_workspace_is_never_ready(controller, repo):
    name = 'ssh-never'
    controller.cluster.guest_fault('never')
    request = request_vars(repo.url, name, ephemera_ssh_timeout=3)
    run = controller.create(request)
    assert not run.ok and run.failure()[0].startswith('8/13'), run.explain()
    ws = controller.workspace(name)
    assert (ws['status'], ws['failure']['step']) == ('failed', 'ssh')
    assert 'No SSH on the guest after' in ws['failure']['message']
    assert 'its sshd started' in ws['failure']['message'] and 'goes on at its SSH step' in ws['failure']['message']
    assert not [e for e in controller.events(name) if e['action'] == 'ready']
    # The operator restarts the container (its sshd comes up at the next boot); the rerun goes on from SSH.
    node = ws['node']
    api = controller.api
    for action in ('stop', 'start'):
        upid = getattr(api.nodes(node).lxc(ws['vmid']).status, action).post()
        assert wait_task(api, upid)['exitstatus'] == 'OK'
    rerun = controller.create(request)
    assert assert_one_ready(controller, name, rerun)['vmid'] == ws['vmid']
    assert step_changes(rerun)[8]


def test_repository_clone_failed_the_git_credentials_are_removed_and_the_workspace_failed(
        controller, repo, git_server, git_token):
    name = 'bad-fetch'
    request = request_vars(git_server.url_of(repo.bare), name, ref='feature', git_token=git_token, git_username=GIT_USER)
    attempts = len(git_server.attempts)
    # The repository answers the request check (it lists its refs), then fails the clone's fetch.
    git_server.refuse_fetch = True
    try:
        run = controller.create(request)
    finally:
        git_server.refuse_fetch = False
    assert not run.ok and run.failure()[0].startswith('10/13'), run.explain()
    ws = controller.workspace(name)
    assert (ws['status'], ws['failure']['step']) == ('failed', 'checkout')
    assert '500' in ws['failure']['message'] and 'run the create again' in ws['failure']['message']
    # git got in with the token (the refs were listed), then the fetch failed.
    assert True in git_server.attempts[attempts:]
    guests = os.path.dirname(os.path.dirname(controller.guest_root(ws['vmid'])))
    assert files_containing(guests, git_token) == []
    assert os.listdir(os.path.join(controller.guest_root(ws['vmid']), 'var', 'lib', 'ephemera', 'helpers')) == []
    assert git_token not in run.output
    # The forge is well again; the rerun checks the ref out.
    rerun = controller.create(request)
    ws = assert_one_ready(controller, name, rerun)
    checkout = os.path.join(controller.guest_root(ws['vmid']), 'workspace', 'repo')
    assert git('rev-parse', 'HEAD', cwd=checkout) == repo.feature_head
    assert files_containing(guests, git_token) == []


def test_agent_runner_that_does_not_come_up_keeps_the_container_and_only_its_step_is_retried(controller, repo):
    name = 'no-runner'
    # A template that carries a directory where the runner's socket goes: the runner cannot serve.
    template_root = controller.guest_root(controller.info['template_vmid'])
    obstacle = os.path.join(template_root, 'var', 'lib', 'ephemera', 'runner', 'runner.sock')
    made = os.path.join(template_root, 'var')
    while os.path.exists(os.path.dirname(made)) and os.path.exists(made):
        made = os.path.join(made, os.path.relpath(obstacle, made).split(os.sep)[0])
    os.makedirs(obstacle)
    try:
        # A long timeout: a runner that exited is seen as such at once, not waited for.
        request = request_vars(repo.url, name, ephemera_runner_timeout=120)
        run = controller.create(request)
    finally:
        shutil.rmtree(made)
    assert not run.ok and run.failure()[0].startswith('11/13'), run.explain()
    ws = controller.workspace(name)
    assert (ws['status'], ws['failure']['step'], ws['failure']['phase']) == ('failed', 'runner', 'registering')
    assert 'The agent runner exited after' in ws['failure']['message']
    assert 'something other than a socket' in ws['failure']['message']
    assert controller.guests()[ws['vmid']]['status'] == 'running'
    # The guest is repaired; the rerun runs the runner step and what follows, nothing before it.
    os.rmdir(os.path.join(controller.guest_root(ws['vmid']), 'var', 'lib', 'ephemera', 'runner', 'runner.sock'))
    rerun = controller.create(request)
    assert assert_one_ready(controller, name, rerun)['vmid'] == ws['vmid']
    changes = step_changes(rerun)
    assert [n for n in range(1, 11) if changes[n]] == [] and changes[11] and changes[12]


def test_agent_that_fails_to_start_keeps_the_container_and_only_the_brief_is_retried(controller, repo):
    name = 'no-agent'
    request = request_vars(repo.url, name, ephemera_agents={'worker': ['no-such-agent', '--task', '{purpose}']})
    run = controller.create(request)
    assert not run.ok and run.failure()[0].startswith('12/13'), run.explain()
    ws = controller.workspace(name)
    assert (ws['status'], ws['failure']['step']) == ('failed', 'brief')
    assert "cannot start the agent 'worker' (no-such-agent)" in ws['failure']['message']
    assert controller.guests()[ws['vmid']]['status'] == 'running'
    # The agent's command line is a setting, not the workspace's identity: the rerun corrects it and briefs again.
    fixed = request_vars(repo.url, name)
    rerun = controller.create(fixed)
    assert assert_one_ready(controller, name, rerun)['vmid'] == ws['vmid']
    changes = step_changes(rerun)
    assert changes[1] and [n for n in range(2, 12) if changes[n]] == [] and changes[12]
    assert controller.workspace(name)['params']['agents'] == fixed['ephemera_agents']
    # Another agent, though, is another workspace.
    other = controller.create(dict(fixed, agent='other', ephemera_agents={'other': ['true']}))
    assert not other.ok and 'exists with other parameters (agent' in other.failure()[1]['msg']


def cluster_guest(ctl, vmid):
    """What the cluster's harness says about a guest: address, sshd state."""
    return [g for g in ctl.cluster.status()['guests'] if g['vmid'] == vmid][0]
