"""The create playbook on the debian guest tier: SSH as root, the agent as the guest's own `agent` user.

One cluster process (`up --guests debian`, time scale 0) for the module, a private repository served over HTTP
with a token, one create from request to ready (module fixture); the tests look at the guest from inside, over
SSH, and then destroy the workspace.
"""

import json
import os
import secrets
import stat

import pytest

from tests.integration.playbooks import running_cluster
from tests.integration.create.createrun import DESTROY, Controller, files_containing, request_vars
from tests.integration.create.gitserver import GitHttpServer, Repo
from tests.localpve import ssh, ssh_run, system

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason='the debian guest tier needs root (mounts, namespaces)')

NAME = 'deb-happy'
GIT_USER = 'ci-bot'
CREDENTIAL = 'sk-test-' + secrets.token_hex(12)
AGENT = ['sh', '-c', 'test -n "$AGENT_API_KEY" && echo "credential present"; echo "brief: {purpose}"; sleep 300']
RUNNER_DIR = '/var/lib/ephemera/runner'


@pytest.fixture(scope='module')
def cluster(tmp_path_factory):
    with running_cluster(tmp_path_factory.mktemp('debian-create'), guests='debian') as client:
        yield client


@pytest.fixture(scope='module')
def created(cluster, tmp_path_factory):
    repo = Repo(str(tmp_path_factory.mktemp('repo')))
    token = 'tok-' + secrets.token_hex(16)
    server = GitHttpServer(os.path.dirname(repo.bare), GIT_USER, token)
    ctl = Controller(cluster, tmp_path_factory.mktemp('controller'))
    try:
        # The guest reaches the repository over the network, as a real one would: not through a file:// path.
        request = request_vars(server.url_of(repo.bare), NAME, ref='feature', git_token=token, git_username=GIT_USER,
                               agent_credentials={'AGENT_API_KEY': CREDENTIAL}, ephemera_agents={'worker': AGENT})
        ctl.first = ctl.create(request)
        ctl.repo, ctl.token = repo, token
        yield ctl
    finally:
        ctl.stop()
        server.stop()


def inside(ctl, command):
    """(exit status, stdout, stderr) of ``command`` run in the workspace's guest over SSH as root."""
    ws = ctl.workspace(NAME)
    client = ssh(ctl.info, ws['address'], timeout=5)
    try:
        status, out, err = ssh_run(client, command)
    finally:
        client.close()
    return status, out.decode(), err.decode()


def proc_status(ctl, pid):
    """{field: value} of /proc/<pid>/status in the guest."""
    status, out, err = inside(ctl, 'cat /proc/%d/status' % pid)
    assert status == 0, err
    return dict(line.split(':', 1) for line in out.splitlines() if ':' in line)


def test_the_workspace_is_ready_with_its_checkout(created):
    run = created.first
    assert run.ok, run.explain()
    assert sorted(run.step_results()) == list(range(1, 14))
    ws = created.workspace(NAME)
    assert (ws['status'], ws['activity'], ws['failure']) == ('ready', 'active', None)
    status, out, err = inside(created, 'runuser -u agent -- git -C /workspace/repo rev-parse HEAD; '
                                       'stat -c %U /workspace/repo /workspace/repo/farewell.py')
    assert status == 0, err
    assert out.split() == [created.repo.feature_head, 'agent', 'agent']
    assert ws['facts']['head'] == created.repo.feature_head


def test_the_runner_and_the_agent_run_as_the_agent_user(created):
    agent_uid = inside(created, 'id -u agent')[1].strip()
    assert agent_uid == '1000'
    status, out, err = inside(created, 'cat %s/runner.json; echo; cat %s/state.json' % (RUNNER_DIR, RUNNER_DIR))
    assert status == 0, err
    runner, state = [json.loads(line) for line in out.splitlines()]
    for pid in (runner['pid'], state['agent_process']['pid']):
        fields = proc_status(created, pid)
        # Real, effective, saved and file-system uid.
        assert fields['Uid'].split() == [agent_uid] * 4, (pid, fields)
    status, out, err = inside(created, 'ps -o user=,args= -p %d,%d' % (runner['pid'], state['agent_process']['pid']))
    lines = out.splitlines()
    assert status == 0 and len(lines) == 2, err
    assert all(line.split()[0] == 'agent' for line in lines), lines
    assert 'agent_runner.py serve' in out and 'sleep 300' in out
    # The agent works in the checkout with the credential it was given.
    assert inside(created, 'readlink /proc/%d/cwd' % state['agent_process']['pid'])[1].strip() == '/workspace/repo'
    status, out, err = inside(created, 'python3 /opt/ephemera/agent_runner.py call --socket %s/runner.sock '
                                       '\'{"op": "status"}\'' % RUNNER_DIR)
    assert status == 0, err
    assert 'credential present' in json.loads(out)['log_tail']


def test_root_written_secrets_stay_out_of_what_the_agent_can_write(created):
    listing = ('stat -c "%n %U %a %F" /var/lib/ephemera /var/lib/ephemera/agent.env /var/lib/ephemera/helpers '
               '{0} {0}/runner.sock {0}/runner.log; ls -A /var/lib/ephemera/helpers'.format(RUNNER_DIR))
    status, out, err = inside(created, listing)
    assert status == 0, err
    assert out.replace('regular empty file', 'regular file').splitlines() == [
        '/var/lib/ephemera root 755 directory',
        '/var/lib/ephemera/agent.env agent 600 regular file',
        '/var/lib/ephemera/helpers root 711 directory',
        '%s agent 700 directory' % RUNNER_DIR,
        '%s/runner.sock agent 660 socket' % RUNNER_DIR,
        '%s/runner.log agent 644 regular file' % RUNNER_DIR,
    ]
    # The agent can neither add a file next to its credentials nor plant one where root writes git helpers.
    for where in ('/var/lib/ephemera', '/var/lib/ephemera/helpers'):
        status, out, err = inside(created, 'runuser -u agent -- touch %s/planted' % where)
        assert status != 0 and 'Permission denied' in err, (where, err)
    # What the container wrote holds the agent credential in its credentials file only, and never the git token.
    ws = created.workspace(NAME)
    guest = os.path.dirname(created.guest_root(ws['vmid']))
    with open(os.path.join(guest, 'stack.json'), encoding='utf-8') as fh:
        own = os.path.join(os.path.dirname(guest), 'layers', json.load(fh)['own'])
    assert files_containing(own, CREDENTIAL) == [os.path.join(own, 'var', 'lib', 'ephemera', 'agent.env')]
    assert files_containing(own, created.token) == []
    mode = os.stat(os.path.join(own, 'var', 'lib', 'ephemera', 'agent.env')).st_mode
    assert stat.S_IMODE(mode) == 0o600


def test_destroy_removes_the_container_its_files_and_its_processes(created):
    ws = created.workspace(NAME)
    root = created.guest_root(ws['vmid'])
    assert system.rooted_under(root)
    run = created.create({'workspace': NAME}, playbook=DESTROY)
    assert run.ok, run.explain()
    assert created.workspace(NAME)['status'] == 'destroyed'
    assert ws['vmid'] not in created.guests()
    assert system.rooted_under(root) == []
    assert [p for p in system.mount_points() if p.startswith(os.path.dirname(root))] == []
    assert not os.path.exists(os.path.dirname(root))
