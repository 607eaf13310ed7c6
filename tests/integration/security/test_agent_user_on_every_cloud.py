"""On every cloud the agent is a user of its own: SSH logs in as root, the bootstrap makes the agent's user
(unprivileged, no sudo), and what is root's stays out of the agent's reach; and the guest-side checks of the archive
run there as on Proxmox VE.

One try-out cloud on the debian tier (`up --guests debian`: each machine a Debian userland of its own, with no user
but root, as a cloud image) and one workspace per provider (EC2, Hetzner Cloud, Compute Engine, Azure), each made
once by the create playbook through the provider's try-out inventory, from a repository served over HTTP with a
token (the module-scoped `workspace` fixture, one per provider: pytest runs a provider's tests together). Each test
then looks at the guest as root and as another user, and plays the agent: its credentials are its own only, its
runner's socket answers no one else, no process list shows a key, and it writes none of root's files
(docs/internals/security.md, "The agent is a user of its own"). The checks of tests/integration/security/guestchecks.py follow
on the same workspace, in the order test_guest_side.py runs them on Proxmox VE: the archive push and its token, the
capture's directories and the untracked tar with its restore, fetch, a hostile branch and remote URL with the restore
commands, and floods of output. They archive through the workspace's record in the journal, as the archive module
does on any provider.
"""

import json
import os
import secrets

import pytest

from tests.ansible_run import run_ansible
from tests.integration.create.gitserver import GitHttpServer, Repo
from tests.integration.security.guestchecks import (
    CREDENTIAL,
    GuestSide,
    check_a_flood_of_output_is_cut_off,
    check_a_hostile_branch_and_remote_url_neither_forge_the_verdict_nor_reach_a_shell,
    check_fetch_takes_regular_files_only_within_their_cap,
    check_nothing_of_the_agents_reaches_or_writes_into_the_capture,
    check_the_agent_reaches_nothing_of_roots,
    check_the_archive_push_hands_the_token_to_nothing_the_agent_controls,
)
from tests.localcloud.fixtures import cloud_process

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason='the debian guest tier needs root (mounts, namespaces)')

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
INVENTORIES = {'aws': 'localcloud', 'hetzner': 'localcloud-hetzner', 'gcp': 'localcloud-gcp',
               'azure': 'localcloud-azure'}
GIT_USER = 'ci-bot'
# The agent's command: it keeps running, so its process (and its environment) is there to look at.
AGENTS = {'worker': ['sh', '-c', 'echo "brief: {purpose}"; sleep 600']}


@pytest.fixture(scope='module')
def site(tmp_path_factory):
    base = tmp_path_factory.mktemp('every-cloud')
    repo = Repo(str(base / 'repo'))
    token = 'tok-' + secrets.token_hex(16)
    server = GitHttpServer(os.path.dirname(repo.bare), GIT_USER, token)
    key = 'sk-probe-' + secrets.token_hex(16)
    try:
        with cloud_process(str(base / 'cloud'), guests='debian', agent_clis=False) as cloud:
            yield {'cloud': cloud, 'info': cloud.info, 'bare': repo.bare, 'repo': server.url_of(repo.bare),
                   'token': token, 'key': key, 'journal': str(base / 'journal.sqlite'), 'base': base}
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
    return name


@pytest.fixture(scope='module', params=sorted(INVENTORIES))
def workspace(request, site):
    """The provider's workspace (made once, by its first test), as the guest-side checks reach it."""
    name = create(site, request.param)
    archives = os.path.join(str(site['base']), 'archives-' + request.param)
    os.makedirs(archives)
    return GuestSide(site['info'], site['journal'], name, site['bare'], site['repo'], GIT_USER, site['token'],
                     archives, provider=request.param)


def test_the_agent_is_a_user_of_its_own_that_reaches_nothing_of_roots(site, workspace):
    params = workspace.record()['params']
    assert (params['ssh_user'], params['agent_user'], params['agent_user_is_ssh_user']) == ('root', 'agent', False)
    # Azure's administrator user (made from osProfile, given sudo by Azure) is another user than the agent's.
    check_the_agent_reaches_nothing_of_roots(workspace.inside, site['key'], site['token'],
                                             admin='ephemera' if workspace.provider == 'azure' else None)


# The archive's guest side, as test_guest_side.py checks it on Proxmox VE (docs/internals/security.md, "Guest-side defences").
# Each runs on the provider's workspace after the test above, in this order: a later one finds the checkout as the
# one before left it, as on Proxmox VE.

def test_the_archive_push_hands_the_token_to_nothing_the_agent_controls(workspace):
    """Finding 1 on this cloud: a push with the agent's credential helpers, push URL, a link where root's helper was
    and a watcher in place gives the token to none of them."""
    check_the_archive_push_hands_the_token_to_nothing_the_agent_controls(workspace)


def test_nothing_of_the_agents_reaches_or_writes_into_the_capture(workspace, tmp_path):
    """Second review, findings 2 and 10, on this cloud: the capture's directories are out of the agent's reach, the
    untracked tar is made by root's isolated python (nothing the agent's start-up code adds), and its restore runs
    nothing. The restore itself runs on the controller, the same on every provider; tests/unit/security/test_restore.py
    checks it on tars more hostile than an agent's python can make here."""
    check_nothing_of_the_agents_reaches_or_writes_into_the_capture(workspace, str(tmp_path))


def test_fetch_takes_regular_files_only_within_their_cap(workspace, tmp_path):
    """Finding 2 on this cloud: a fetch over this provider's SSH takes regular files within their cap only."""
    check_fetch_takes_regular_files_only_within_their_cap(workspace, str(tmp_path))


def test_a_hostile_branch_and_remote_url_neither_forge_the_verdict_nor_reach_a_shell(workspace, tmp_path):
    """Finding 3 on this cloud: the restore commands of the workspace's archive restore a hostile branch and run
    nothing; a remote URL with line breaks forges no verdict."""
    check_a_hostile_branch_and_remote_url_neither_forge_the_verdict_nor_reach_a_shell(workspace, str(tmp_path))


def test_a_flood_of_output_is_cut_off(workspace):
    """Finding 11 on this cloud: output and an inspection beyond their caps are cut off."""
    check_a_flood_of_output_is_cut_off(workspace)
