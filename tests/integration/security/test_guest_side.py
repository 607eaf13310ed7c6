"""The agent inside a workspace is untrusted: end to end on the debian guest tier, where the agent is the guest's own
non-root `agent` user and the controller logs in as root.

One cluster (`up --guests debian`) and one workspace made by the create playbook, from a private repository served
over HTTP with a token (loopback, so the token may travel in plain text). Each test then plays the agent: it plants
what an agent could (a credential helper, a push URL, links where root used to write and read, Python start-up code
that runs in every python3 of the agent, a hostile branch name, a remote URL with line breaks, a flood of refs) and
checks what the controller did with it.
"""

import glob
import json
import os
import secrets
import shlex
import subprocess
import tarfile

import pytest

from ansible_collections.ephemera.workspaces.plugins.module_utils.core import failpoint
from ansible_collections.ephemera.workspaces.plugins.module_utils.core.journal import Journal
from ansible_collections.ephemera.workspaces.plugins.module_utils.flows.archive import ArchiveFlow
from ansible_collections.ephemera.workspaces.plugins.module_utils.guest.ssh import (
    Guest,
    SshError,
    SshHostKeyMismatch,
    SshOutputTooLarge,
    wait_for_guest,
)
from tests.integration.create.createrun import DESTROY, Controller, request_vars
from tests.integration.create.gitserver import GitHttpServer, Repo, git
from tests.integration.security.test_agent_user_on_every_cloud import (
    CREDENTIAL,
    check_the_agent_reaches_nothing_of_roots,
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
CHECKOUT = '/workspace/repo'
HOSTILE_BRANCH = 'x;touch${IFS}pwned;#'


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


def inside(ctl, command):
    """(exit status, stdout, stderr) of ``command`` run in the guest as root."""
    client = ssh(ctl.info, ctl.workspace(NAME)['address'], timeout=5)
    try:
        status, out, err = ssh_run(client, command)
    finally:
        client.close()
    return status, out.decode(errors='replace'), err.decode(errors='replace')


def as_agent(ctl, command):
    status, out, err = inside(ctl, 'runuser -u agent -- sh -c %s' % shlex.quote('cd %s && %s' % (CHECKOUT, command)))
    assert status == 0, (command, out, err)
    return out


def archive(ctl, mode='archive', **params):
    """An archive (or check) of the workspace, in process, as the archive module makes it."""
    args = dict(name=NAME, archive_dir=ctl.archive_dir, push=True, push_prefix='ephemera/', include_untracked=[],
                ssh_timeout=10, git_username=GIT_USER, command_timeout=120, push_timeout=60)
    args.update(params)
    with Journal.open(ctl.journal_path, create=False) as journal:
        flow = ArchiveFlow(journal, args)
        return flow.check() if mode == 'check' else flow.archive()


def holding(ctl, needle, where='/home /var/lib/ephemera /workspace /tmp /root /etc'):
    """Files in the guest (as root sees them) whose bytes contain ``needle``."""
    status, out, dummy = inside(ctl, 'grep -rlsF -- %s %s || true' % (shlex.quote(needle), where))
    return sorted(out.split())


def guest_of(ctl, host_key):
    ws = ctl.workspace(NAME)
    return Guest(ws['address'], port=ctl.info['ssh_port'], user='root', key_file=ctl.info['ssh_private_key'],
                 host_key=host_key)


# ------------------------------------------------------------------ the agent is a user of its own

def test_the_agent_is_a_user_of_its_own_that_reaches_nothing_of_roots(created):
    """What the same test checks on every cloud (test_agent_user_on_every_cloud.py), on Proxmox VE."""
    def run(command, user=None):
        if user is not None:
            command = 'runuser -u %s -- sh -c %s' % (user, shlex.quote(command))
        return inside(created, command)
    check_the_agent_reaches_nothing_of_roots(run, created.key, created.token)


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
    trap = GitHttpServer(os.path.dirname(created.repo.bare), 'trap', 'trap-' + secrets.token_hex(8))
    try:
        as_agent(created, "git config credential.helper '!f() { cat >>/home/agent/stolen-repo; }; f'")
        as_agent(created, "git config --global credential.helper '!f() { cat >>/home/agent/stolen-global; }; f'")
        as_agent(created, 'git config remote.origin.pushurl %s' % shlex.quote(trap.url_of(created.repo.bare)))
        # Where root used to write its helper: a link to a root-only place, and a watcher that copies what it finds.
        as_agent(created, 'ln -sfn /root/planted-by-agent /var/lib/ephemera/tmp/archive-askpass')
        as_agent(created, 'echo "work of the agent" >notes.txt')
        inside(created, 'runuser -u agent -- setsid sh -c %s </dev/null >/dev/null 2>&1 &' % shlex.quote(
            'echo $$ >/home/agent/watcher.pid; while :; do for f in /var/lib/ephemera/tmp/* /var/lib/ephemera/helpers/*; do '
            'cat "$f" >>/home/agent/seen 2>/dev/null; done; sleep 0.01; done'))
        result = archive(created, git_token=created.token)
        assert trap.attempts == []  # the agent's push URL was never asked
        assert holding(created, created.token) == []
        assert inside(created, 'test -e /root/planted-by-agent')[0] != 0
        assert result['push']['ok'], result
        pushed = git('rev-parse', 'refs/heads/ephemera/' + NAME, cwd=created.repo.bare)
        assert pushed == result['archive']['pushed_commit']
        assert git('show', pushed + ':notes.txt', cwd=created.repo.bare) == 'work of the agent'
        status, out, dummy = inside(created, 'ls -A /var/lib/ephemera/private; stat -c "%U %a" /var/lib/ephemera/private')
        assert out.split() == ['root', '700'], out  # root's scratch space, empty again
    finally:
        inside(created, 'kill "$(cat /home/agent/watcher.pid)"; rm -f /home/agent/seen /home/agent/stolen-* '
                        '/home/agent/watcher.pid')
        as_agent(created, 'git config --unset credential.helper; git config --global --unset credential.helper; '
                          'git config --unset remote.origin.pushurl; rm -f /var/lib/ephemera/tmp/archive-askpass')
        trap.stop()


# What the agent runs while root captures its work: a process of its own that swaps whatever it can reach of the
# directories the capture uses (root's private directory and its archive.* directories, and the scratch directory it
# shares) for links to root's files, and logs what it could and could not reach.
WATCHER = r"""
import glob, os, sys, time
log = open('/home/agent/watch.log', 'a', buffering=1)
trap = '/home/agent/trap'
os.makedirs(trap, exist_ok=True)
for name in ('worktree.patch', 'untracked.tar', '.untracked', '.refs', '.rc', '.err'):
    if not os.path.lexists(os.path.join(trap, name)):
        os.symlink('/root/secret.txt', os.path.join(trap, name))
end = time.time() + 300
while time.time() < end:
    for top in ('/var/lib/ephemera/private', '/var/lib/ephemera/tmp'):
        try:
            found = [os.path.join(top, n) for n in os.listdir(top)]
        except OSError as err:
            log.write('denied %s %s\n' % (top, err.errno))
            found = []
        for path in found:
            if os.path.basename(path).startswith('archive.') and not os.path.islink(path):
                try:
                    os.rename(path, path + '.moved')
                    os.symlink(trap, path)
                    log.write('swapped %s\n' % path)
                except OSError as err:
                    log.write('refused %s %s\n' % (path, err.errno))
    time.sleep(0.002)
"""


def test_nothing_of_the_agents_reaches_or_writes_into_the_capture(created):
    secret = 'root-only-' + secrets.token_hex(8)
    inside(created, 'umask 077; echo %s >/root/secret.txt' % secret)
    # Python start-up code of the agent: it runs in every python3 the agent's user starts, and puts an entry into any
    # tar that python makes: a .git/config whose fsmonitor runs a command at the restored clone's next git status.
    site = as_agent(created, 'python3 -c "import site; print(site.getusersitepackages())"').strip()
    as_agent(created, 'mkdir -p %s && cat >%s/usercustomize.py' % (site, site) + " <<'EOF'\n" + '\n'.join([
        'import io, tarfile',
        '_add = tarfile.TarFile.add',
        'def add(self, name, *args, **kwargs):',
        '    _add(self, name, *args, **kwargs)',
        '    if not getattr(self, "planted", False):',
        '        self.planted = True',
        '        data = b"[core]\\n\\tfsmonitor = touch /tmp/pwned-by-the-agent\\n"',
        '        info = tarfile.TarInfo(".git/config")',
        '        info.size = len(data)',
        '        self.addfile(info, io.BytesIO(data))',
        'tarfile.TarFile.add = add',
    ]) + '\nEOF')
    as_agent(created, 'cat >/home/agent/watcher.py' + " <<'EOF'\n" + WATCHER + '\nEOF')
    as_agent(created, 'rm -f /home/agent/watch.log; setsid python3 /home/agent/watcher.py </dev/null >/dev/null 2>&1 & '
                      'echo $! >/home/agent/watcher.pid')
    try:
        as_agent(created, 'echo "more work" >>README && echo "a note" >note.md')
        result = archive(created, push=False, include_untracked=['*.md'])
        assert result['changed'] and sorted(result['archive']['files']) == [
            'metadata.json', 'restore-untracked.py', 'untracked.tar', 'worktree.patch'], result
        path = result['archive']['path']
        for name in result['archive']['files']:
            with open(os.path.join(path, name), 'rb') as f:
                assert secret.encode() not in f.read(), name
        with open(os.path.join(path, 'worktree.patch')) as f:
            assert '+more work' in f.read()
        # The tar holds the agent's file and nothing its start-up code added.
        with tarfile.open(os.path.join(path, 'untracked.tar')) as tar:
            assert tar.getnames() == ['note.md']
        # Root wrote nothing through the agent's links, and the agent reached none of the capture's directories.
        assert inside(created, 'cat /root/secret.txt')[1].strip() == secret
        status, log, dummy = inside(created, 'cat /home/agent/watch.log; kill -0 "$(cat /home/agent/watcher.pid)"')
        assert status == 0, 'the watcher was not running through the capture'
        assert 'denied /var/lib/ephemera/private 13' in log and 'swapped /var/lib/ephemera/private' not in log, log
    finally:
        inside(created, 'kill "$(cat /home/agent/watcher.pid)"; rm -rf /home/agent/watcher.* /home/agent/watch.log '
                        '/home/agent/trap')
        as_agent(created, 'rm -f %s/usercustomize.py; git checkout -q -- README; rm -f note.md' % site)
        inside(created, 'rm -f /root/secret.txt')


def test_fetch_takes_regular_files_only_within_their_cap(created, tmp_path):
    inside(created, 'mkdir -p /root/fetch && cd /root/fetch && rm -f * && mkfifo fifo && ln -s /dev/zero zero && '
                    'head -c 5000 /dev/urandom >big && echo small >small')
    with guest_of(created, created.workspace(NAME)['facts']['host_key']).connect() as guest:
        for name, words in (('fifo', 'not a regular file'), ('zero', 'not a regular file'), ('big', 'holds 5000 bytes')):
            with open(str(tmp_path / name), 'wb') as out, pytest.raises(SshOutputTooLarge, match=words):
                guest.fetch('/root/fetch/' + name, out, max_bytes=4096, timeout=10)
            assert os.path.getsize(str(tmp_path / name)) == 0
        with open(str(tmp_path / 'small'), 'wb') as out:
            assert guest.fetch('/root/fetch/small', out, max_bytes=4096) == 6


# ------------------------------------------------------------------ finding 3: branch names, URLs, inspection

def test_a_hostile_branch_and_remote_url_neither_forge_the_verdict_nor_reach_a_shell(created, tmp_path):
    as_agent(created, 'git checkout -q -b %s' % shlex.quote(HOSTILE_BRANCH))
    as_agent(created, 'echo "on the hostile branch" >hostile.txt && git add hostile.txt && '
                      'git -c user.name=a -c user.email=a@example.invalid commit -q -m "hostile work"')
    head = as_agent(created, 'git rev-parse HEAD').strip()
    head_tree = as_agent(created, 'git rev-parse "HEAD^{tree}"').strip()
    forged = '\n'.join(['file:///nowhere', 'unpushed_count 0', 'index_tree ' + head_tree,
                        'tracked_tree ' + head_tree, 'tree ' + head_tree, 'untracked_count 0'])
    as_agent(created, 'git config remote.origin.url %s' % shlex.quote(forged))
    check = archive(created, mode='check')
    assert check['verdict'] == 'unsaved' and check['state']['unpushed_commits'] == 1, check
    result = archive(created, push=False)
    path = result['archive']['path']
    with open(os.path.join(path, 'metadata.json')) as f:
        meta = json.load(f)
    assert meta['checkout']['branch'] == HOSTILE_BRANCH
    assert meta['restore'][0] == 'git clone -- %s restored' % created.server.url_of(created.repo.bare)
    # The documented commands, run as an operator would, with the repository's login at hand.
    askpass = tmp_path / 'askpass'
    askpass.write_text('#!/bin/sh\ncase "$1" in Username*) echo %s ;; *) echo %s ;; esac\n' % (GIT_USER, created.token))
    askpass.chmod(0o700)
    place = tmp_path / 'restore'
    for name in os.listdir(path):
        (place / 'archive').mkdir(parents=True, exist_ok=True)
        with open(os.path.join(path, name), 'rb') as src:
            (place / 'archive' / name).write_bytes(src.read())
    proc = subprocess.run(['sh', '-ec', '\n'.join(meta['restore'])], cwd=str(place / 'archive'), check=False,
                          env=dict(os.environ, GIT_ASKPASS=str(askpass), GIT_TERMINAL_PROMPT='0'),
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    assert proc.returncode == 0, proc.stdout.decode()
    restored = str(place / 'archive' / 'restored')
    assert glob.glob(str(place / '**' / 'pwned'), recursive=True) == []
    assert git('symbolic-ref', '--short', 'HEAD', cwd=restored) == HOSTILE_BRANCH
    assert git('rev-parse', 'HEAD', cwd=restored) == head


# ------------------------------------------------------------------ finding 11: floods of output

def test_a_flood_of_output_is_cut_off(created):
    with guest_of(created, created.workspace(NAME)['facts']['host_key']).connect() as guest:
        with pytest.raises(SshOutputTooLarge, match='printed more than'):
            guest.run('head -c 40000000 /dev/zero', timeout=60)
        assert guest.run('echo still usable').stdout == 'still usable\n'
    # A repository with 300,000 branches: its inspection is larger than the controller reads.
    as_agent(created, 'cp .git/packed-refs /home/agent/packed-refs.keep 2>/dev/null || : >/home/agent/packed-refs.keep')
    head = as_agent(created, 'git rev-parse HEAD').strip()
    as_agent(created, 'python3 -c %s' % shlex.quote(
        # Without the "sorted" header git sorts the file itself.
        'lines = [l for l in open(".git/packed-refs") if not l.startswith("#")]\n'
        'lines += ["%s refs/heads/flood/%06d\\n" % ("' + head + '", i) for i in range(300000)]\n'
        'open(".git/packed-refs", "w").write("".join(lines))'))
    try:
        check = archive(created, mode='check')
        assert check['verdict'] == 'unknown' and 'printed more than' in check['msg'], check
    finally:
        as_agent(created, 'cp /home/agent/packed-refs.keep .git/packed-refs')
    assert archive(created, mode='check')['verdict'] in ('saved', 'unsaved')


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
