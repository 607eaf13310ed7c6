"""Requests: bad input is refused at the first step that can know, a second request with the same name must
match the first, and an idempotency key replays the first run's result.
"""

import json
import os

import pytest

from .createrun import DESTROY, Controller, request_vars


NO_REPO = 'no-repo'


@pytest.fixture(scope='module')
def keyed(cluster, repo, tmp_path_factory):
    """A controller with one workspace made ready by a request with an idempotency key.

    The same run (a host per request) also asks for workspace no-repo, whose repository does not exist.
    """
    ctl = Controller(cluster, tmp_path_factory.mktemp('requests'))
    ctl.request = request_vars(repo.url, 'keyed', idempotency_key='awx-workflow-4711')
    ctl.no_repo_request = request_vars(repo.url.replace('app.git', 'missing.git'), NO_REPO)
    inventory = os.path.join(ctl.workdir, 'requests.json')
    with open(inventory, 'w') as out:
        json.dump({'requests': {'hosts': {'keyed': ctl.request, NO_REPO: ctl.no_repo_request}, 'vars': {
            'ansible_connection': 'local', 'ansible_python_interpreter': '{{ ansible_playbook_python }}'}}}, out)
    ctl.first = ctl.create({}, inventory=inventory, target='requests', forks=2)
    assert ctl.first.stats('keyed')['failures'] == 0, ctl.first.explain()
    assert ctl.workspace('keyed')['status'] == 'ready', ctl.first.explain()
    try:
        yield ctl
    finally:
        ctl.stop()


def refused_at_request(ctl, run, name, host='localhost'):
    """The run failed when it checked the request, before the queue: nothing recorded. Returns the message."""
    assert not run.ok and run.stats(host)['failures'] == 1, run.explain()
    step, result = run.failure(host)
    # A task's title is templated once for all hosts of a run: with one host per request it names another's.
    assert step == 'Check the request for %s' % name or step == 'Check the inputs of the playbook create' or (
        host != 'localhost' and step.startswith('Check the request for ')), run.explain()
    assert ctl.workspace(name) is None and ctl.queue_entries(name) == []
    # A controller that never made a workspace does not even have a journal or a secret yet.
    assert not os.path.exists(ctl.journal_path) and not os.path.exists(ctl.journal_path + '.secret')
    return result['msg']


BAD_INPUT = {
    'unknown-template': ({'ephemera_template_vmid': 4242}, 'Template 4242 does not exist in the cluster'),
    'missing-pool': ({'ephemera_pool': 'no-such-pool'},
                     "Pool 'no-such-pool' does not exist. Create it (pveum pool add no-such-pool)"),
    'repo-not-a-url': ({'repo': 'not a repository'}, "Repository 'not a repository' is not a URL"),
    'repo-option': ({'repo': '--upload-pack=touch /tmp/x'}, 'is not a URL'),
    'repo-password': ({'repo': 'https://bot:hunter2@git.example.com/app.git'}, 'carries a login (user or token before the host)'),
    'ref-dots': ({'ref': 'main..feature'}, "Ref 'main..feature' is not a branch, tag or commit name git accepts"),
    'ref-option': ({'ref': '--orphan'}, "Ref '--orphan' is not"),
    'name': ({'workspace': 'Bad_Name'}, "Invalid workspace name 'Bad_Name'"),
    'agent': ({'agent': 'nobody'}, "Unknown agent 'nobody'; configured agents: claude-code, codex, opencode, worker"),
    # The playbook checks its inputs first (playbooks/tasks/check_inputs.yml); the module's own refusal of a request
    # without a purpose is for direct use of the module (tests/unit).
    'no-purpose': ({'purpose': None}, "The create playbook needs -e purpose, e.g. ansible-playbook "
                                      "ephemera.workspaces.create"),
    'resume-unknown': ({'workspace_create_resume': True},
                       "Workspace 'bad-input-resume-unknown' has no create to resume: it is not recorded."),
}


@pytest.fixture(scope='module')
def bad_input(cluster, repo, tmp_path_factory):
    """Every bad request of BAD_INPUT in one run, a host each (its request as host vars), on a fresh controller."""
    ctl = Controller(cluster, tmp_path_factory.mktemp('bad-input'))
    hosts = {}
    for case, (change, dummy) in BAD_INPUT.items():
        hosts[case] = dict(request_vars(repo.url, 'bad-input-' + case), **change)
    inventory = os.path.join(ctl.workdir, 'bad-input.json')
    with open(inventory, 'w') as out:
        json.dump({'bad': {'hosts': hosts, 'vars': {'ansible_connection': 'local',
                                                    'ansible_python_interpreter': '{{ ansible_playbook_python }}'}}}, out)
    guests = ctl.cluster_state()
    try:
        ctl.run = ctl.create({}, inventory=inventory, target='bad', forks=len(hosts))
        ctl.guests_before, ctl.guests_after = guests, ctl.cluster_state()
        yield ctl
    finally:
        ctl.stop()


@pytest.mark.parametrize('case', list(BAD_INPUT))
def test_bad_input_is_refused_before_anything_is_recorded_or_made(bad_input, case):
    change, expected = BAD_INPUT[case]
    name = change.get('workspace', 'bad-input-' + case)
    run = bad_input.run
    assert expected in refused_at_request(bad_input, run, name, host=case)
    assert 'hunter2' not in run.output
    assert bad_input.guests_after == bad_input.guests_before


def test_a_vmid_that_is_not_a_template_is_refused(controller, repo):
    foreign = controller.cluster.foreign_create(how='create')
    run = controller.create(dict(request_vars(repo.url, 'not-template'), ephemera_template_vmid=foreign['vmid']))
    message = refused_at_request(controller, run, 'not-template')
    assert 'VMID %d (foreign-%d) is not an LXC template' % (foreign['vmid'], foreign['vmid']) in message


def test_a_repository_that_does_not_exist_fails_the_checkout_and_destroy_cleans_up(keyed):
    controller, name = keyed, NO_REPO
    run = keyed.first
    assert not run.ok and run.failure(name)[0].startswith('10/13'), run.explain()
    ws = controller.workspace(name)
    assert (ws['status'], ws['failure']['step']) == ('failed', 'checkout') and 'missing.git' in ws['failure']['message']
    assert controller.ours(name) == [ws['vmid']]
    gone = controller.create({'workspace': name}, playbook=DESTROY)
    assert gone.ok, gone.explain()
    assert controller.workspace(name)['status'] == 'destroyed' and controller.ours(name) == []
    assert ws['vmid'] not in controller.guests()


def test_a_second_request_with_other_parameters_is_refused_and_changes_nothing(keyed, repo):
    ws = keyed.workspace('keyed')
    state = keyed.cluster_state()
    entries = keyed.queue_entries('keyed')
    run = keyed.create(dict(request_vars(repo.url, 'keyed'), ephemera_full_clone=True, ref='feature'))
    assert not run.ok and run.failure()[0] == 'Check the request for keyed'
    message = run.failure()[1]['msg']
    assert "A workspace named 'keyed' exists with other parameters" in message
    assert "full_clone: False, not True" in message and "ref: 'main', not 'feature'" in message
    assert keyed.workspace('keyed')['generation'] == ws['generation'] and keyed.cluster_state() == state
    assert keyed.queue_entries('keyed') == entries


def test_the_same_idempotency_key_replays_the_first_result(keyed):
    first = keyed.workspace('keyed')
    state = keyed.cluster_state()
    replay = keyed.create(keyed.request)
    assert replay.ok and replay.stats()['changed'] == 0, replay.explain()
    request = replay.step_results()[1]
    assert request['details']['replayed'] is True
    assert request['details']['result'] == {'name': 'keyed', 'vmid': first['vmid'], 'node': first['node'],
                                            'address': first['address'], 'status': 'ready'}
    assert [n for n, r in replay.step_results().items() if n > 1 and not r.get('skipped')] == []
    assert keyed.workspace('keyed')['generation'] == first['generation'] and keyed.cluster_state() == state
    # The same key for another request is a mistake, said as such.
    other = keyed.create(dict(keyed.request, workspace='keyed-2'))
    assert not other.ok
    assert 'The idempotency key was already used for a different create request' in other.failure()[1]['msg']
    assert keyed.workspace('keyed-2') is None


def test_check_mode_on_a_controller_with_no_journal_yet_writes_nothing(cluster, repo, tmp_path):
    ctl = Controller(cluster, tmp_path)
    guests = ctl.cluster_state()
    try:
        run = ctl.create(request_vars(repo.url, 'first-look'), check=True)
    finally:
        ctl.stop()
    assert run.ok, run.explain()
    assert 'would' in run.step_results()[1]['msg']
    # Neither the queue nor a step made the journal or the controller's secret on this first, looking-only run.
    assert not os.path.exists(ctl.journal_path) and not os.path.exists(ctl.journal_path + '.secret')
    assert ctl.cluster_state() == guests
