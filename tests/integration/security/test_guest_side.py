"""The agent inside a workspace is untrusted: end to end on the debian guest tier, where the agent is the guest's own
non-root `agent` user and the controller logs in as root.

One cluster (`up --guests debian`) and one workspace made by the create playbook, from a private repository served
over HTTP with a token (loopback, so the token may travel in plain text). Each test then plays the agent: it plants
what an agent could (a credential helper, a push URL, links where root used to write and read, Python start-up code
that runs in every python3 of the agent, a hostile branch name, a remote URL with line breaks, a flood of refs) and
checks what the controller did with it. The checks of the archive, the capture, fetch, the restore commands and
floods of output are in guestchecks.py, which test_agent_user_on_every_cloud.py runs on each cloud too.
"""

import os
import secrets

import pytest

from ansible_collections.ephemera.workspaces.plugins.module_utils.core import failpoint
from ansible_collections.ephemera.workspaces.plugins.module_utils.guest.ssh import (
    Guest,
    SshError,
    SshHostKeyMismatch,
    wait_for_guest,
)
from tests.integration.create.createrun import DESTROY, Controller, request_vars
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
from tests.faults.site import Kill
from tests.localpve import pki, ssh, ssh_run
from tests.localpve.clients import wait_task
from tests.localpve.cluster import pick_host
from tests.localpve.config import Options
from tests.localpve.control import ControlClient
from tests.localpve.process import down, up

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason='the debian guest tier needs root (mounts, namespaces)')

NAME = 'guarded'
GIT_USER = 'ci-bot'
AGENT = ['sh', '-c', 'echo "brief: {purpose}"; sleep 600']


@pytest.fixture(scope='module')
def created(tmp_path_factory):
    opts = Options(state_dir=str(tmp_path_factory.mktemp('guest-side')), host=pick_host(), api_port=0,
                   proxy_port=0, time_scale=0, guests='debian').check()
    cluster = ControlClient(up(opts))
    repo = Repo(str(tmp_path_factory.mktemp('repo')))
    token = 'tok-' + secrets.token_hex(16)
    server = GitHttpServer(os.path.dirname(repo.bare), GIT_USER, token)
    ctl = Controller(cluster, tmp_path_factory.mktemp('controller'))
    try:
        key = 'sk-probe-' + secrets.token_hex(16)
        run = ctl.create(request_vars(server.url_of(repo.bare), NAME, ref='main', git_token=token,
                                      git_username=GIT_USER, ephemera_agents={'worker': AGENT},
                                      agent_credentials={CREDENTIAL: key}))
        assert run.ok, run.explain()
        ctl.repo, ctl.token, ctl.server, ctl.key = repo, token, server, key
        ctl.archive_dir = str(tmp_path_factory.mktemp('archives'))
        yield ctl
    finally:
        ctl.stop()
        server.stop()
        down(opts.state_dir)


def side_of(ctl):
    """The workspace as the guest-side checks (guestchecks.py) reach it, on this cluster."""
    return GuestSide(ctl.info, ctl.journal_path, NAME, ctl.repo.bare, ctl.server.url_of(ctl.repo.bare), GIT_USER,
                     ctl.token, ctl.archive_dir)


def inside(ctl, command):
    """(exit status, stdout, stderr) of ``command`` run in the guest as root."""
    return side_of(ctl).inside(command)


def guest_of(ctl, host_key):
    return side_of(ctl).guest(host_key)


# ------------------------------------------------------------------ the agent is a user of its own

def test_the_agent_is_a_user_of_its_own_that_reaches_nothing_of_roots(created):
    """What the same test checks on every cloud (test_agent_user_on_every_cloud.py), on Proxmox VE."""
    check_the_agent_reaches_nothing_of_roots(side_of(created).inside, created.key, created.token)


# ------------------------------------------------------------------ finding 7: host keys

def test_the_clone_gets_host_keys_of_its_own_before_anything_secret_is_sent(created):
    ws = created.workspace(NAME)
    # What the guest presented at the first SSH: the key it came with (on a real cluster, its template's).
    first = pki.ssh_key(os.path.join(os.path.dirname(created.guest_root(ws['vmid'])), 'ssh_host_ed25519_key'), 'x')
    first = ' '.join(first.split()[:2])
    pinned = ws['facts']['host_key']
    assert pinned.startswith('ssh-ed25519 ') and pinned != first
    assert 'host_key_next' not in ws['facts']
    status, out, err = inside(created, 'cat /etc/ssh/ssh_host_ed25519_key.pub /etc/ssh/ephemera-host-keys')
    assert status == 0, err
    lines = out.splitlines()
    assert ' '.join(lines[0].split()[:2]) == pinned and lines[1].startswith('%s %s ' % (NAME, ws['vmid']))
    # The guest's sshd presents the new key; the old one is refused.
    guest_of(created, pinned).connect().close()
    with pytest.raises(SshHostKeyMismatch):
        guest_of(created, first).connect()
    # The new keys were made before the bootstrap wrote the credentials and before the checkout used the token.
    actions = [(e['action'], (e.get('detail') or {}).get('step')) for e in created.events(NAME)]
    assert actions.index(('host_keys', None)) < actions.index(('step_done', 'bootstrap'))


@pytest.mark.parametrize('point', ['create.bootstrap journal host_keys', 'create.bootstrap ssh install the host keys'],
                         ids=['killed-once-the-new-key-was-recorded', 'killed-once-sshd-reloaded'])
def test_a_create_killed_during_the_key_renewal_is_finished_by_the_next_run(created, tmp_path, point):
    name = 'rekey-' + ('recorded' if point.endswith('host_keys') else 'reloaded')
    request = request_vars(created.server.url_of(created.repo.bare), name, git_token=created.token,
                           git_username=GIT_USER, ephemera_agents={'worker': AGENT})
    killed = created.create(request, env={failpoint.TRACE_ENV: str(tmp_path / 'trace'),
                                          failpoint.KILL_ENV: Kill(name, point).env()})
    assert killed.returncode == -9, killed.explain()
    assert 'host_key_next' in created.workspace(name)['facts']  # the renewal was under way
    again = created.create(request)
    assert again.ok, again.explain()
    ws = created.workspace(name)
    assert ws['status'] == 'ready' and 'host_key_next' not in ws['facts']
    client = ssh(created.info, ws['address'], timeout=5)
    try:
        status, out, err = ssh_run(client, 'ssh-keygen -y -f /etc/ssh/ssh_host_ed25519_key')
    finally:
        client.close()
    assert status == 0 and ' '.join(out.decode().split()[:2]) == ws['facts']['host_key']
    guest = Guest(ws['address'], port=created.info['ssh_port'], user='root', key_file=created.info['ssh_private_key'],
                  host_key=ws['facts']['host_key'])
    guest.connect().close()
    assert created.create({'workspace': name}, playbook=DESTROY).ok


# ------------------------------------------------------------------ findings 1, 2 and 9: the push and its token

def test_the_archive_push_hands_the_token_to_nothing_the_agent_controls(created):
    check_the_archive_push_hands_the_token_to_nothing_the_agent_controls(side_of(created))


def test_nothing_of_the_agents_reaches_or_writes_into_the_capture(created, tmp_path):
    check_nothing_of_the_agents_reaches_or_writes_into_the_capture(side_of(created), str(tmp_path))


def test_fetch_takes_regular_files_only_within_their_cap(created, tmp_path):
    check_fetch_takes_regular_files_only_within_their_cap(side_of(created), str(tmp_path))


# ------------------------------------------------------------------ finding 3: branch names, URLs, inspection

def test_a_hostile_branch_and_remote_url_neither_forge_the_verdict_nor_reach_a_shell(created, tmp_path):
    check_a_hostile_branch_and_remote_url_neither_forge_the_verdict_nor_reach_a_shell(side_of(created), str(tmp_path))


# ------------------------------------------------------------------ finding 11: floods of output

def test_a_flood_of_output_is_cut_off(created):
    check_a_flood_of_output_is_cut_off(side_of(created))


def test_a_restart_keeps_the_guest_s_own_key(created):
    ws = created.workspace(NAME)
    api = created.api
    node = ws['node']
    for action in ('stop', 'start'):
        upid = getattr(api.nodes(node).lxc(ws['vmid']).status, action).post()
        assert wait_task(api, upid)['exitstatus'] == 'OK'
    try:
        wait_for_guest(lambda: guest_of(created, ws['facts']['host_key']), 30).close()
    except SshError as err:
        pytest.fail('the pinned key no longer answers after a restart: %s' % err)
