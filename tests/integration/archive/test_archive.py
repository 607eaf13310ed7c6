"""Archive and check of a workspace with unsaved work, end to end on the try-out cluster.

The tests share one workspace (made once by the create playbook, which takes most of the time) and run
in file order: check, refused archive directory, archive with a remote that refuses the push, restore
from that archive, archive with a remote that accepts it, and last an unreachable guest.
"""

import hashlib
import json
import os
import shutil
import sqlite3
import stat
import subprocess

import pytest

from ansible_collections.ephemera.workspaces.plugins.module_utils.flows.archive import ArchiveError, ArchiveFlow
from ansible_collections.ephemera.workspaces.plugins.module_utils.core.journal import Journal

from tests.localpve.clients import proxmox, wait_task

from .conftest import SECRET, git, write

UNTRACKED = ['*.md']


def snapshot(co):
    """Everything an archive must leave alone: the index file, HEAD, local refs, and every file with its mode."""
    files = {}
    for top, dirs, names in os.walk(co):
        dirs[:] = [d for d in dirs if not (top == co and d == '.git')]
        for name in names:
            path = os.path.join(top, name)
            with open(path, 'rb') as f:
                files[os.path.relpath(path, co)] = (stat.S_IMODE(os.lstat(path).st_mode), hashlib.sha256(f.read()).hexdigest())
    with open(os.path.join(co, '.git', 'index'), 'rb') as f:
        index = hashlib.sha256(f.read()).hexdigest()
    return {'index': index, 'head': git(co, 'rev-parse', 'HEAD'), 'files': files,
            'refs': git(co, 'for-each-ref', 'refs/heads', 'refs/stash', 'refs/tags')}


def diffs(co):
    return git(co, 'diff', '--binary', 'HEAD'), git(co, 'diff', '--binary', '--cached', 'HEAD')


def journal_facts(workspace):
    conn = sqlite3.connect(workspace['journal'])
    try:
        row = conn.execute('SELECT facts FROM workspaces WHERE name = ?', (workspace['name'],)).fetchone()
        actions = [r[0] for r in conn.execute('SELECT action FROM events WHERE workspace = ? ORDER BY id',
                                              (workspace['name'],))]
    finally:
        conn.close()
    return json.loads(row[0]), actions


def queue_states(workspace):
    """(kind, state) of the workspace's queue entries, oldest first."""
    conn = sqlite3.connect(workspace['journal'])
    try:
        return [tuple(r) for r in conn.execute('SELECT kind, state FROM queue WHERE target = ? ORDER BY id',
                                               (workspace['name'],))]
    finally:
        conn.close()


def remote_branch(workspace):
    out = git(workspace['origin'], 'for-each-ref', '--format=%(objectname)', 'refs/heads/ephemera/' + workspace['name'])
    return out.decode().strip() or None


def flow(workspace, **params):
    """An in-process ArchiveFlow on the workspace's journal (for cases that need no Ansible around them)."""
    journal = Journal.open(workspace['journal'], create=False)
    args = dict(name=workspace['name'], archive_dir=workspace['archive_dir'], push=True, push_remote='origin',
                push_prefix='ephemera/', include_untracked=[], ssh_timeout=5)
    args.update(params)
    return journal, ArchiveFlow(journal, args)


@pytest.fixture(scope='module')
def originals(work):
    """HEAD, both diffs and the untracked files as the agent left them, before any archive."""
    wt, ix = diffs(work)
    side = git(work, 'rev-parse', 'side').decode().strip()
    untracked = {}
    for name in ('notes.md', os.path.join('docs', 'deep.md')):
        with open(os.path.join(work, name), 'rb') as f:
            untracked[name] = f.read()
    return {'head': git(work, 'rev-parse', 'HEAD').decode().strip(), 'worktree': wt, 'index': ix, 'side': side,
            'untracked': untracked, 'snapshot': snapshot(work)}


def test_check_reports_unsaved_work_and_changes_nothing(workspace, work, originals):
    result = workspace['ansible'].module({'name': workspace['name'], 'mode': 'check'})
    assert result['unsaved'] is True and result['verdict'] == 'unsaved', result
    assert result['changed'] is False
    state = result['state']
    assert state['head'] == originals['head'] and state['branch'] == 'main' and state['upstream'] == 'origin/main'
    assert state['unpushed_commits'] == 3  # two on main, one on side
    assert state['tracked_changes'] and state['staged_changes']
    assert state['untracked_files'] == 3  # notes.md, docs/deep.md, scratch.txt; build.log is ignored
    assert 'never pushed or archived' in result['msg'] and '3 commit(s)' in result['msg']
    assert snapshot(work) == originals['snapshot']
    assert not os.path.exists(workspace['archive_dir'])
    facts, dummy = journal_facts(workspace)
    assert 'archive' not in facts


def test_unwritable_archive_directory_is_refused_before_anything(workspace, work, originals):
    blocked = '/sys/ephemera-archives'  # sysfs refuses new directories, even to root
    rc, tasks = workspace['ansible'].playbook('archive', {'workspace': workspace['name'],
                                                          'ephemera_archive_dir': blocked})
    assert rc != 0
    failed = tasks['Archive the work of %s' % workspace['name']]
    assert failed.get('failed') and blocked in failed['msg'] and 'archive directory' in failed['msg'], failed
    # The step recorded its operation's failure itself: no rescue task said it again.
    assert [name for name, result in tasks.items() if result.get('failed')] == ['Archive the work of %s' % workspace['name']]
    assert queue_states(workspace)[-1] == ('archive', 'failed')
    # A file where the directory should be: the same clear refusal, from the engine.
    not_a_dir = os.path.join(workspace['base'], 'a-file')
    write(not_a_dir, b'')
    journal, archiver = flow(workspace, archive_dir=not_a_dir)
    with journal, pytest.raises(ArchiveError, match='not a directory'):
        archiver.archive()
    assert remote_branch(workspace) is None
    assert snapshot(work) == originals['snapshot']
    facts, actions = journal_facts(workspace)
    assert 'archive' not in facts and 'archive_push' not in facts and 'archived' not in actions


def test_refused_push_falls_back_to_bundle_and_patches(workspace, work, originals):
    hook = os.path.join(workspace['origin'], 'hooks', 'pre-receive')
    write(hook, b'#!/bin/sh\necho "this remote takes no pushes" >&2\nexit 1\n', mode=0o755)
    rc, tasks = workspace['ansible'].playbook('archive', {'workspace': workspace['name'],
                                                          'workspace_archive_include_untracked': UNTRACKED})
    result = tasks['Archive the work of %s' % workspace['name']]
    assert rc == 0 and result['changed'] is True, result
    assert result['verdict'] == 'saved' and result['unsaved'] is False
    archive = result['archive']
    assert archive['pushed_ref'] is None and archive['head'] == originals['head'] and archive['branch'] == 'main'
    assert sorted(archive['files']) == [
        'head.bundle', 'index.patch', 'metadata.json', 'restore-untracked.py', 'untracked.tar', 'worktree.patch']
    assert result['push']['attempted'] and not result['push']['ok']
    assert any('this remote takes no pushes' in note and 'bundle and patches' in note for note in result['notes'])
    path = archive['path']
    assert os.path.dirname(path) == os.path.join(workspace['archive_dir'], workspace['name'])
    assert sorted(os.listdir(path)) == sorted(archive['files'])  # no temporary file left
    for name in archive['files']:
        assert stat.S_IMODE(os.stat(os.path.join(path, name)).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o700
    # Nothing reached the remote, nothing in the checkout moved.
    assert remote_branch(workspace) is None
    assert snapshot(work) == originals['snapshot']
    assert diffs(work) == (originals['worktree'], originals['index'])

    with open(os.path.join(path, 'metadata.json')) as f:
        meta = json.load(f)
    assert meta['checkout']['head'] == originals['head'] and meta['checkout']['unpushed_commits'] == 3
    assert meta['runner']['brief']['purpose'] == 'Keep notes of the work'
    assert meta['record']['name'] == workspace['name'] and meta['events']
    assert 'scratch.txt' in meta['checkout']['untracked'] and meta['untracked_included'] == 2
    for name in archive['files']:
        with open(os.path.join(path, name), 'rb') as f:
            assert SECRET.encode() not in f.read(), name
        if name != 'metadata.json':
            with open(os.path.join(path, name), 'rb') as f:
                assert meta['files'][name]['sha256'] == hashlib.sha256(f.read()).hexdigest()
    with open(os.path.join(workspace['root'], 'var', 'lib', 'ephemera', 'agent.env')) as f:
        assert SECRET in f.read()  # the secret was there to be leaked

    facts, actions = journal_facts(workspace)
    assert facts['archive']['path'] == path and facts['archive']['digest'] == result['state']['digest']
    assert 'archive_push_failed' in actions and actions[-1] != 'archive_push_failed' and 'archived' in actions

    again = workspace['ansible'].module({'name': workspace['name'], 'include_untracked': UNTRACKED})
    assert again['changed'] is False and again['archive']['path'] == path, again
    check = workspace['ansible'].module({'name': workspace['name'], 'mode': 'check'})
    assert check['unsaved'] is False and check['verdict'] == 'saved' and path in check['msg']


def test_restore_reproduces_head_diffs_and_untracked_files(workspace, work, originals, tmp_path):
    facts, dummy = journal_facts(workspace)
    path = facts['archive']['path']
    with open(os.path.join(path, 'metadata.json')) as f:
        restore = json.load(f)['restore']
    place = tmp_path / 'restore'
    shutil.copytree(path, str(place / 'archive'))
    # The documented commands, as metadata.json gives them, run from the directory that holds the archive's files.
    script = 'set -e\n' + '\n'.join(restore)
    proc = subprocess.run(['sh', '-c', script], cwd=str(place / 'archive'), stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, check=False)
    assert proc.returncode == 0, proc.stdout.decode()
    restored = str(place / 'archive' / 'restored')
    assert git(restored, 'rev-parse', 'HEAD').decode().strip() == originals['head']
    wt, ix = diffs(restored)
    assert wt == originals['worktree'] and ix == originals['index']  # byte for byte
    for name, content in originals['untracked'].items():
        with open(os.path.join(restored, name), 'rb') as f:
            assert f.read() == content
    assert not os.path.exists(os.path.join(restored, 'scratch.txt'))  # not asked for
    assert git(restored, 'rev-parse', 'refs/archive/heads/side').decode().strip() == originals['side']


def test_push_lands_on_the_workspace_branch_with_everything(workspace, work, originals):
    os.unlink(os.path.join(workspace['origin'], 'hooks', 'pre-receive'))
    write(os.path.join(work, 'notes.md'), b'notes of the agent\nwritten after the first archive\n')
    before = snapshot(work)
    check = workspace['ansible'].module({'name': workspace['name'], 'mode': 'check'})
    assert check['unsaved'] is True  # the note changed since the archive
    rc, tasks = workspace['ansible'].playbook('archive', {'workspace': workspace['name']}, check=True)
    would = tasks['Archive the work of %s' % workspace['name']]
    assert rc == 0 and would['changed'] is True and would['msg'].startswith('would archive'), would
    assert remote_branch(workspace) is None and snapshot(work) == before

    rc, tasks = workspace['ansible'].playbook('archive', {'workspace': workspace['name']})
    result = tasks['Archive the work of %s' % workspace['name']]
    assert rc == 0 and result['changed'] and result['push']['ok'], result
    ref = 'refs/heads/ephemera/%s' % workspace['name']
    assert result['archive']['pushed_ref'] == ref
    pushed = remote_branch(workspace)
    assert pushed == result['archive']['pushed_commit']
    # The pushed commit: HEAD as parent, and the whole checkout except ignored files as its tree.
    assert git(workspace['origin'], 'rev-parse', pushed + '^').decode().strip() == originals['head']
    listed = git(workspace['origin'], 'ls-tree', '-r', '-z', pushed).split(b'\0')
    in_commit = {}
    for entry in filter(None, listed):
        meta, name = entry.split(b'\t', 1)
        mode, dummy, blob = meta.split()
        in_commit[name.decode()] = (mode.decode(), git(workspace['origin'], 'cat-file', 'blob', blob.decode()))
    on_disk = set(before['files']) - {'build.log'}
    assert set(in_commit) == on_disk
    for name, (mode, content) in in_commit.items():
        with open(os.path.join(work, name), 'rb') as f:
            assert f.read() == content, name
        assert (mode == '100755') == bool(before['files'][name][0] & 0o100), name
    assert snapshot(work) == before
    assert 'metadata.json' in result['archive']['files'] and 'worktree.patch' not in result['archive']['files']
    # The side branch is on no remote: it still goes into a bundle.
    assert 'head.bundle' in result['archive']['files']

    check = workspace['ansible'].module({'name': workspace['name'], 'mode': 'check'})
    assert check['unsaved'] is False and ref in check['msg']
    journal, archiver = flow(workspace)
    with journal:
        assert archiver.archive()['changed'] is False
    assert remote_branch(workspace) == pushed


def test_branch_pushed_by_someone_else_is_left_alone(workspace, work, originals):
    foreign = git(workspace['origin'], 'rev-parse', 'main').decode().strip()
    git(workspace['origin'], 'update-ref', 'refs/heads/ephemera/%s' % workspace['name'], foreign)
    write(os.path.join(work, 'notes.md'), b'a third version\n')
    journal, archiver = flow(workspace)
    with journal:
        result = archiver.archive()
    assert result['changed'] and not result['push']['ok'] and remote_branch(workspace) == foreign
    assert 'did not push' in result['push']['error']
    assert 'worktree.patch' in result['archive']['files']


def test_unreachable_guest_is_unknown_and_not_archived(cluster, workspace, work):
    write(os.path.join(work, 'notes.md'), b'a fourth version, never archived\n')
    api = proxmox(cluster)
    wait_task(api, api.nodes(workspace['node']).lxc(workspace['vmid']).status.stop.post())
    journal, checker = flow(workspace, ssh_timeout=2)
    with journal:
        result = checker.check()
    assert result['verdict'] == 'unknown' and result['unsaved'] is True
    assert 'cannot be reached' in result['msg']
    journal, archiver = flow(workspace, ssh_timeout=2)
    with journal, pytest.raises(ArchiveError, match='Nothing was archived'):
        archiver.archive()
