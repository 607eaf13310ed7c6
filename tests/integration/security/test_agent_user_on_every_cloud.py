"""On every cloud the agent is a user of its own: SSH logs in as root, the bootstrap makes the agent's user
(unprivileged, no sudo), and what is root's stays out of the agent's reach.

One try-out cloud on the debian tier (`up --guests debian`: each machine a Debian userland of its own, with no user
but root, as a cloud image) and one workspace per provider (EC2, Hetzner Cloud, Compute Engine, Azure), each made by
the create playbook through the provider's try-out inventory, from a repository served over HTTP with a token.
Each test then looks at the guest as root and as another user, and plays the agent: its credentials are its own
only, its runner's socket answers no one else, no process list shows a key, and it writes none of root's files.
docs/security.md, "The agent is a user of its own".
"""

import json
import os
import secrets
import shlex

import pytest

from tests.ansible_run import run_ansible
from tests.integration.create.gitserver import GitHttpServer, Repo
from tests.localcloud.fixtures import cloud_process
from tests.localpve import ssh, ssh_run

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason='the debian guest tier needs root (mounts, namespaces)')

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
INVENTORIES = {'aws': 'localcloud', 'hetzner': 'localcloud-hetzner', 'gcp': 'localcloud-gcp',
               'azure': 'localcloud-azure'}
GIT_USER = 'ci-bot'
CREDENTIAL = 'EPHEMERA_PROBE_KEY'
# The agent's command: it keeps running, so its process (and its environment) is there to look at.
AGENTS = {'worker': ['sh', '-c', 'echo "brief: {purpose}"; sleep 600']}
# What only root may write: the runner and its configuration, the helpers directory, root's own files, the system's.
ROOTS_FILES = ('/opt/ephemera/agent_runner.py', '/opt/ephemera/runner.json', '/var/lib/ephemera/helpers/planted',
               '/var/lib/ephemera/private/planted', '/var/lib/ephemera/planted', '/root/.ssh/authorized_keys',
               '/etc/passwd', '/etc/sudoers.d/agent')


@pytest.fixture(scope='module')
def site(tmp_path_factory):
    base = tmp_path_factory.mktemp('every-cloud')
    repo = Repo(str(base / 'repo'))
    token = 'tok-' + secrets.token_hex(16)
    server = GitHttpServer(os.path.dirname(repo.bare), GIT_USER, token)
    key = 'sk-probe-' + secrets.token_hex(16)
    try:
        with cloud_process(str(base / 'cloud'), guests='debian', agent_clis=False) as cloud:
            yield {'cloud': cloud, 'info': cloud.info, 'repo': server.url_of(repo.bare), 'token': token, 'key': key,
                   'journal': str(base / 'journal.sqlite')}
    finally:
        server.stop()


def create(site, provider):
    name = 'own-' + provider
    extra = {'workspace': name, 'repo': site['repo'], 'ref': 'main', 'purpose': 'work on ' + name,
             'agent': 'worker', 'ephemera_agents': AGENTS, 'git_token': site['token'], 'git_username': GIT_USER,
             'agent_credentials': {CREDENTIAL: site['key']}}
    run = run_ansible(['ansible-playbook', '-i', os.path.join(ROOT, 'inventories', INVENTORIES[provider]),
                       os.path.join(ROOT, 'playbooks', 'create.yml'), '-e', json.dumps(extra)], timeout=300,
                      fail=False, env={'LOCALCLOUD_STATE_DIR': site['info']['state_dir'],
                                       'EPHEMERA_JOURNAL': site['journal']})
    assert run.ok, run.explain()
    # pylint: disable=import-outside-toplevel
    from ansible_collections.ephemera.workspaces.plugins.module_utils.core.journal import Journal
    with Journal.open(site['journal'], create=False) as journal:
        return journal.get_workspace(name)


class Inside(object):
    """Commands in the workspace's guest over SSH as root (the cloud's key), and as its other users."""

    def __init__(self, info, address):
        self.client = ssh(info, address, timeout=10)

    def __call__(self, command, user=None):
        if user is not None:
            command = 'runuser -u %s -- sh -c %s' % (user, shlex.quote(command))
        status, out, err = ssh_run(self.client, command)
        return status, out.decode(errors='replace'), err.decode(errors='replace')

    def close(self):
        self.client.close()


def check_the_agent_reaches_nothing_of_roots(inside, key, token, admin=None):
    """The agent's user in a guest (``inside(command, user=None)`` runs a command there as root or as ``user``): its
    own, unprivileged; its credentials, its runner's socket and its processes' environment are out of others'
    reach; it writes none of root's files. ``key`` is its credential, ``token`` the git token; ``admin`` a user the
    machine was made with for the controller's login, which must be another."""
    # SSH is root's; the agent's user is the bootstrap's, unprivileged: no uid 0, no admin group, no sudo rule.
    assert inside('id -u')[1].strip() == '0'
    status, out, dummy = inside('id -u agent; id -nG agent')
    uid, groups = out.split('\n', 1)
    assert status == 0 and int(uid) >= 1000, out
    assert not set(groups.split()) & {'root', 'sudo', 'wheel', 'adm', 'admin'}, groups
    assert inside('grep -rsw agent /etc/sudoers /etc/sudoers.d')[1] == ''
    if admin:
        assert inside('id -u %s' % admin)[0] == 0 and admin != 'agent'
    # The runner and the agent run as the agent user.
    status, out, dummy = inside('ps -eo user=,args= | grep -E "agent_runner|brief: " | grep -v grep')
    owners = set(line.split(None, 1)[0] for line in out.splitlines())
    assert status == 0 and owners == {'agent'}, out
    # Its credentials are its own (0600, the agent's) and no one else's; root's key is not its.
    assert inside('stat -c "%U %a" /var/lib/ephemera/agent.env')[1].split() == ['agent', '600']
    assert inside('cat /var/lib/ephemera/agent.env', user='agent')[1].count(key) == 1
    assert inside('cat /var/lib/ephemera/agent.env', user='nobody')[0] != 0
    assert inside('cat /root/.ssh/authorized_keys', user='agent')[0] != 0
    # The runner's socket answers the agent's user only.
    assert inside('stat -c "%U %a" /var/lib/ephemera/runner')[1].split() == ['agent', '700']
    probe = 'import socket; s = socket.socket(socket.AF_UNIX); s.connect("/var/lib/ephemera/runner/runner.sock")'
    assert inside('python3 -c %s' % shlex.quote(probe), user='agent')[0] == 0
    status, dummy, err = inside('python3 -c %s' % shlex.quote(probe), user='nobody')
    assert status != 0 and 'Permission denied' in err, err
    # Another user's ps sees every command line (no hidepid here), and none carries the key or the token.
    status, out, dummy = inside('ps -eo args=', user='nobody')
    assert status == 0 and 'brief: ' in out, out
    assert key not in out and token not in out
    # The agent writes none of root's files, and cannot become root.
    for path in ROOTS_FILES:
        status, dummy, dummy = inside('echo planted >>%s' % shlex.quote(path), user='agent')
        assert status != 0, path
    assert inside('test -e /var/lib/ephemera/helpers/planted || test -e /etc/sudoers.d/agent')[0] != 0
    assert inside('su -c true root </dev/null', user='agent')[0] != 0
    # Nothing of the key or the token lies where root keeps its own files.
    status, out, dummy = inside('grep -rlsF -e %s -e %s /root /etc /opt /var/lib/ephemera /workspace || true'
                                % (shlex.quote(key), shlex.quote(token)))
    assert out.split() == ['/var/lib/ephemera/agent.env'], out


@pytest.mark.parametrize('provider', sorted(INVENTORIES))
def test_the_agent_is_a_user_of_its_own_that_reaches_nothing_of_roots(site, provider):
    ws = create(site, provider)
    params = ws['params']
    assert (params['ssh_user'], params['agent_user'], params['agent_user_is_ssh_user']) == ('root', 'agent', False)
    inside = Inside(site['info'], ws['address'])
    try:
        # Azure's administrator user (made from osProfile, given sudo by Azure) is another user than the agent's.
        check_the_agent_reaches_nothing_of_roots(inside, site['key'], site['token'],
                                                 admin='ephemera' if provider == 'azure' else None)
    finally:
        inside.close()
