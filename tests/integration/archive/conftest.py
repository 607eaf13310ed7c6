"""One try-out cluster process and one workspace, made with the create playbook, shared by the archive tests.

The workspace's checkout holds, after ``work`` ran: two commits on main and one on a side branch that no
remote has, unstaged edits to a text file and a binary file, a mode change, a deletion, a staged new file
edited again, untracked files (two Markdown files and a text file) and an ignored log file.
"""

import json
import os
import subprocess

import pytest

from tests.ansible_run import run_ansible
from tests.localpve.cluster import pick_host
from tests.localpve.config import Options
from tests.localpve.process import down, up

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
SECRET = 's3cr3t-archive-credential-value'
IDENTITY = ['-c', 'user.name=Test', '-c', 'user.email=test@example.invalid']


def git(cwd, *args, stdin=None, check=True):
    """stdout (bytes) of git in ``cwd``; optional locks off, so that reading never rewrites an index."""
    env = dict(os.environ, GIT_OPTIONAL_LOCKS='0', LC_ALL='C')
    proc = subprocess.run(['git'] + IDENTITY + list(args), cwd=cwd, input=stdin, env=env, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, check=False)
    if check and proc.returncode != 0:
        raise AssertionError('git %s in %s failed: %s' % (' '.join(args), cwd, proc.stderr.decode()))
    return proc.stdout


class Ansible:
    """ansible-playbook and ansible runs against the cluster's inventory, with the JSON callback."""

    def __init__(self, state_dir, journal, archive_dir, tmp):
        self.env = dict(LOCALPVE_STATE_DIR=state_dir, EPHEMERA_JOURNAL=journal, EPHEMERA_ARCHIVE_DIR=archive_dir)
        self.inventory = os.path.join(ROOT, 'inventories', 'localpve')
        self.tmp = tmp

    def _run(self, cmd):
        run = run_ansible(cmd, env=self.env)
        if run.data is None:
            raise AssertionError('no JSON from %s (rc %d):\n%s' % (cmd[0], run.returncode, run.output[-3000:]))
        return run

    def playbook(self, name, extra_vars, check=False):
        """(rc, {task name: host result}) of playbooks/<name>.yml; role tasks without their "<role> : "."""
        run = self._run(['ansible-playbook', '-i', self.inventory, os.path.join(ROOT, 'playbooks', name + '.yml'),
                         '-e', json.dumps(extra_vars)] + (['--check'] if check else []))
        return run.returncode, dict(run.results())

    def module(self, args):
        """The result of one workspace_archive call."""
        run = self._run(['ansible', 'localhost', '-i', self.inventory, '-m', 'ephemera.workspaces.workspace_archive',
                         '-a', json.dumps(args)])
        return run.results()[0][1]


@pytest.fixture(scope='module')
def cluster(tmp_path_factory):
    options = Options(state_dir=str(tmp_path_factory.mktemp('localpve')), host=pick_host(), api_port=0, proxy_port=0,
                      time_scale=0).check()
    info = up(options)
    try:
        yield info
    finally:
        down(options.state_dir)


@pytest.fixture(scope='module')
def origin(tmp_path_factory):
    """A bare repository with a few commits on main; returns (path, url)."""
    base = tmp_path_factory.mktemp('origin')
    bare, seed = str(base / 'origin.git'), str(base / 'seed')
    git(str(base), 'init', '--quiet', '--bare', '--initial-branch=main', bare)
    git(str(base), 'clone', '--quiet', bare, seed)
    files = {'README.md': b'# Project\n', '.gitignore': b'*.log\n', 'old.txt': b'to be removed\n',
             'script.sh': b'#!/bin/sh\necho hi\n', 'data.bin': bytes(range(256)) * 8}
    for name, content in sorted(files.items()):
        with open(os.path.join(seed, name), 'wb') as out:
            out.write(content)
        git(seed, 'add', name)
        git(seed, 'commit', '--quiet', '-m', 'add %s' % name)
    git(seed, 'push', '--quiet', 'origin', 'main')
    return bare, 'file://' + bare


@pytest.fixture(scope='module')
def workspace(cluster, origin, tmp_path_factory):
    """A ready workspace 'arch' made by the create playbook; a dict with the paths the tests need."""
    base = tmp_path_factory.mktemp('archive-run')
    journal, archive_dir = str(base / 'journal.sqlite'), str(base / 'archives')
    ansible = Ansible(cluster['state_dir'], journal, archive_dir, str(base))
    name = 'arch'
    rc, tasks = ansible.playbook('create', {
        'workspace': name, 'repo': origin[1], 'ref': 'main', 'purpose': 'Keep notes of the work',
        'agent': 'demo', 'ephemera_agents': {'demo': ['sh', '-c', 'echo working on {purpose}']},
        'agent_credentials': {'EPHEMERA_TEST_KEY': SECRET}})
    assert rc == 0, json.dumps(tasks, indent=1)[-3000:]
    ready = tasks['Workspace %s' % name]['workspaces'][0]
    assert ready['status'] == 'ready'
    root = cluster['guest_root'].replace('{vmid}', str(ready['vmid']))
    return {'name': name, 'vmid': ready['vmid'], 'node': ready['node'], 'root': root,
            'checkout': os.path.join(root, 'workspace', 'repo'), 'journal': journal, 'archive_dir': archive_dir,
            'ansible': ansible, 'origin': origin[0], 'origin_url': origin[1], 'base': str(base)}


def write(path, content, mode=None):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, 'wb') as out:
        out.write(content)
    if mode is not None:
        os.chmod(path, mode)


@pytest.fixture(scope='module')
def work(workspace):
    """The agent's work in the checkout (see the module docstring); returns the checkout path."""
    co = workspace['checkout']
    git(co, 'checkout', '--quiet', '-b', 'side')
    write(os.path.join(co, 'side.txt'), b'an idea on a side branch\n')
    git(co, 'add', 'side.txt')
    git(co, 'commit', '--quiet', '-m', 'side idea')
    git(co, 'checkout', '--quiet', 'main')
    write(os.path.join(co, 'lib.py'), b'def answer():\n    return 42\n')
    git(co, 'add', 'lib.py')
    git(co, 'commit', '--quiet', '-m', 'add lib')
    write(os.path.join(co, 'data.bin'), bytes(reversed(range(256))) * 8)
    git(co, 'commit', '--quiet', '-am', 'new data')
    write(os.path.join(co, 'README.md'), b'# Project\n\nWork in progress.\n')
    write(os.path.join(co, 'data.bin'), os.urandom(1500) + b'\0\xff')
    os.chmod(os.path.join(co, 'script.sh'), 0o755)
    os.unlink(os.path.join(co, 'old.txt'))
    write(os.path.join(co, 'staged.txt'), b'staged line\n')
    git(co, 'add', 'staged.txt')
    write(os.path.join(co, 'staged.txt'), b'staged line\nand an unstaged one\n')
    write(os.path.join(co, 'notes.md'), b'notes of the agent\n')
    write(os.path.join(co, 'docs', 'deep.md'), b'a deeper note\n')
    write(os.path.join(co, 'scratch.txt'), b'untracked, not asked for\n')
    write(os.path.join(co, 'build.log'), b'ignored output\n')
    return co
