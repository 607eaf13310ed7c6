"""A workspace from request to ready, then a rerun and check-mode runs that change nothing; secrets kept in place.

One create (module fixture) of a private repository served over HTTP with a token, with agent
credentials, through the API token of the try-out inventory; the tests look at what it left.
"""

import json
import os
import stat

import pytest

from ansible_collections.ephemera.workspaces.plugins.module_utils.core import ownership
from tests.localpve import ssh, ssh_run

from .conftest import GIT_USER
from .createrun import Controller, files_containing, process_lists_containing, request_vars
from .gitserver import git

NAME = 'happy'
CREDENTIAL = 'sk-test-' + os.urandom(12).hex()
# The agent proves it got its credential (without printing it), then works until stopped.
AGENT = ['sh', '-c', 'test -n "$AGENT_API_KEY" && echo "credential present"; echo "brief: {purpose}"; sleep 300']


@pytest.fixture(scope='module')
def happy(cluster, repo, git_server, git_token, tmp_path_factory):
    ctl = Controller(cluster, tmp_path_factory.mktemp('happy'))
    # With variables of providers it does not use, as an inventory that serves several providers holds them: a
    # template only other hosts can render, a value their options would refuse. They are neither rendered nor checked.
    request = request_vars(git_server.url_of(repo.bare), NAME, ref='feature', git_token=git_token,
                           git_username=GIT_USER, agent_credentials={'AGENT_API_KEY': CREDENTIAL},
                           ephemera_agents={'worker': AGENT}, ephemera_aws_region='{{ aws_hosts_only }}',
                           ephemera_hetzner_networks={'not': 'a list'})
    run = ctl.create(request)
    assert run.ok, run.explain()
    ctl.request = request
    ctl.first = run
    ctl.secrets = {'agent credential': CREDENTIAL, 'git token': git_token,
                   'API token secret': cluster.info['token_secret']}
    try:
        yield ctl
    finally:
        ctl.stop()


def guest_call(ctl, ws, request):
    """Ask the workspace's agent runner over SSH, as the collection does."""
    root = ctl.guest_root(ws['vmid'])
    client = ssh(ctl.info, ws['address'], timeout=5)
    try:
        rc, out, err = ssh_run(client, "python3 %s/opt/ephemera/agent_runner.py call --socket "
                                       "%s/var/lib/ephemera/runner/runner.sock '%s'" % (root, root, json.dumps(request)))
    finally:
        client.close()
    assert rc == 0, err
    return json.loads(out)


def test_every_step_runs_once_and_the_workspace_is_ready(happy, repo, git_server):
    steps = happy.first.step_results()
    assert sorted(steps) == list(range(1, 14))
    assert all(result.get('changed') for result in steps.values()), steps
    ws = happy.workspace(NAME)
    assert (ws['status'], ws['desired_state'], ws['failure']) == ('ready', 'present', None)
    assert ws['activity'] == 'active'
    assert (ws['repo'], ws['ref']) == (git_server.url_of(repo.bare), 'feature')
    # What workspace_info showed at the end of the run.
    assert happy.first.report()[0] == '%s: ready, activity active' % NAME
    # In Proxmox VE's words: a template cloned into a container, named by its VMID on its node.
    assert happy.first.report()[1] == 'CT %d on %s' % (ws['vmid'], ws['node'])
    titles = [name for name, _result in happy.first.results() if '/13 ' in name]
    assert titles[1:6] == ['2/13 (with a warm pool member: 5, 9, 10, 12 and 13 too) candidate vmid',
                           '3/13 clone the template', '4/13 wait for the clone task', '5/13 configure the container',
                           '6/13 start the container']


def test_exactly_one_container_and_its_marker_verifies(happy):
    ws = happy.workspace(NAME)
    config = happy.config(ws['vmid'])
    assert happy.ours(NAME) == [ws['vmid']], (config, ws)
    assert happy.marker_verdict(ws['vmid'], NAME) == ownership.VERIFIED
    assert config['hostname'] == 'agent-%s' % NAME
    assert 'ephemera' in config['tags'].split(';')
    assert (config['cores'], config['memory']) == (2, 2048)
    assert 'ip=dhcp' in config['net0'] and 'lock' not in config
    guest = happy.guests()[ws['vmid']]
    assert (guest['status'], guest['pool'], guest['node']) == ('running', happy.info['pool'], ws['node'])
    # The marker does not verify on another VMID, nor for another workspace.
    assert ownership.verify(config['description'], happy.secret(), happy.controller_id(), NAME,
                            ws['vmid'] + 1) == ownership.MISMATCH
    assert ownership.verify(config['description'], happy.secret(), happy.controller_id(), 'other',
                            ws['vmid']) == ownership.MISMATCH


def test_the_checkout_is_at_the_ref(happy, repo):
    ws = happy.workspace(NAME)
    checkout = os.path.join(happy.guest_root(ws['vmid']), 'workspace', 'repo')
    assert git('rev-parse', 'HEAD', cwd=checkout) == repo.feature_head == ws['facts']['head']
    assert os.path.exists(os.path.join(checkout, 'farewell.py'))


def test_the_runner_answers_and_holds_the_brief(happy):
    ws = happy.workspace(NAME)
    ping = guest_call(happy, ws, {'op': 'ping'})
    assert {k: ping[k] for k in ('ok', 'alive', 'activity', 'briefed', 'version')} == {
        'ok': True, 'alive': True, 'activity': 'active', 'briefed': True, 'version': 2}
    assert ping['agent']['name'] == 'worker' and ping['agent']['running'] is True
    status = guest_call(happy, ws, {'op': 'status'})
    assert status['brief']['purpose'] == happy.request['purpose'] and status['brief']['agent'] == 'worker'
    assert status['agent_process']['ended_at'] is None
    assert 'credential present' in status['log_tail']
    assert 'brief: %s' % happy.request['purpose'] in status['log_tail']


def test_the_agent_hooks_report_blocked_and_active(happy):
    ws = happy.workspace(NAME)
    assert guest_call(happy, ws, {'op': 'activity', 'state': 'blocked'})['activity'] == 'blocked'
    assert guest_call(happy, ws, {'op': 'ping'})['activity'] == 'blocked'
    assert guest_call(happy, ws, {'op': 'activity', 'state': 'active'})['activity'] == 'active'


def test_secrets_are_written_only_where_the_agent_needs_them(happy):
    ws = happy.workspace(NAME)
    root = happy.guest_root(ws['vmid'])
    credentials = os.path.join(root, 'var', 'lib', 'ephemera', 'agent.env')
    guests = os.path.dirname(os.path.dirname(root))
    for what, value in happy.secrets.items():
        allowed = [credentials] if what == 'agent credential' else []
        assert files_containing(guests, value) == allowed, what
        assert value.encode() not in happy.journal_bytes(), what
        assert value not in happy.journal_dump(), what
        assert value not in happy.first.output, what
        # The guests are processes of this machine: none carries a secret on its command line.
        assert process_lists_containing(value) == [], what
    mode = os.stat(credentials).st_mode
    assert stat.S_IMODE(mode) == 0o600
    # No temporary git helper is left in the guest.
    assert os.listdir(os.path.join(root, 'var', 'lib', 'ephemera', 'helpers')) == []


def test_a_rerun_on_a_ready_workspace_changes_nothing(happy):
    generation = happy.workspace(NAME)['generation']
    state = happy.cluster_state()
    run = happy.create(happy.request)
    assert run.ok, run.explain()
    changed = [name for name, result in run.results() if result.get('changed')]
    assert changed == [] and run.stats()['changed'] == 0
    assert all(not result.get('changed') for result in run.step_results().values())
    ws = happy.workspace(NAME)
    assert ws['status'] == 'ready' and happy.ours(NAME) == [ws['vmid']]
    assert happy.cluster_state() == state
    # Only the queue's own bookkeeping was written: the workspace record did not change.
    assert ws['generation'] == generation


def test_check_mode_changes_nothing_for_a_ready_or_a_new_workspace(happy, repo, git_server):
    state = happy.cluster_state()
    before = happy.journal_dump()
    # Closing the last connection folded the write-ahead log into the file: its bytes are the whole journal.
    with open(happy.journal_path, 'rb') as src:
        data = src.read()
    ready = happy.create(happy.request, check=True, callback='default', verbose=3)
    assert ready.ok, ready.explain()
    new = happy.create(dict(happy.request, workspace='happy-new'), check=True)
    assert new.ok, new.explain()
    assert [n for n, r in new.step_results().items() if not r.get('changed')] == []
    assert 'would' in new.step_results()[1]['msg']
    with open(happy.journal_path, 'rb') as src:
        assert src.read() == data
    assert happy.journal_dump() == before
    assert happy.cluster_state() == state
    assert happy.workspace('happy-new') is None
    for what, value in happy.secrets.items():
        assert value not in ready.output and value not in new.output, what
