"""A restore on a hostile archive: the archive is the agent's work, and the agent may have made untracked.tar
hostile. The documented restore commands (restore_commands, as metadata.json gives them) run with real git on a
real clone; the untracked files' tar program runs as the guest runs it (python3 -I -S, an empty environment)."""

import io
import os
import subprocess
import sys
import tarfile
import types

from ansible_collections.ephemera.workspaces.plugins.module_utils.flows import archive

GIT = ['git', '-c', 'user.name=t', '-c', 'user.email=t@example.invalid', '-c', 'init.defaultBranch=main']


def git(*args, cwd=None):
    return subprocess.run(GIT + list(args), cwd=cwd, check=True, capture_output=True, text=True).stdout.strip()


def make_origin(tmp_path, with_link=None):
    origin = str(tmp_path / 'origin')
    git('init', '-q', origin)
    with open(os.path.join(origin, 'README'), 'w') as out:
        out.write('hello\n')
    if with_link:
        os.symlink(with_link, os.path.join(origin, 'tracked_link'))
    git('add', '-A', cwd=origin)
    git('commit', '-q', '-m', 'first', cwd=origin)
    return origin, git('rev-parse', 'HEAD', cwd=origin)


def member(tar, name, data=b'', kind=tarfile.REGTYPE, linkname=''):
    info = tarfile.TarInfo(name)
    info.type, info.linkname, info.size, info.mode = kind, linkname, len(data), 0o644
    tar.addfile(info, io.BytesIO(data) if kind == tarfile.REGTYPE else None)


def restore(tmp_path, origin, head, entries):
    """Run the restore commands of an archive whose untracked.tar holds ``entries``; (process, restored path)."""
    place = tmp_path / 'archive'
    place.mkdir()
    with tarfile.open(str(place / archive.UNTRACKED_TAR), 'w', format=tarfile.PAX_FORMAT) as tar:
        for entry in entries:
            member(tar, *entry)
    (place / archive.RESTORE_UNTRACKED).write_text(archive.EXTRACT_PROGRAM)
    state = types.SimpleNamespace(branch='main', head=head)
    lines = archive.restore_commands(state, None, {archive.UNTRACKED_TAR: {}, archive.RESTORE_UNTRACKED: {}}, [],
                                     'file://' + origin)
    proc = subprocess.run(['sh', '-c', 'set -e\n' + '\n'.join(lines)], cwd=str(place), capture_output=True, text=True,
                          check=False)
    return proc, str(place / 'restored')


def test_a_hostile_untracked_tar_is_refused_whole_and_the_next_git_status_runs_nothing(tmp_path):
    origin, head = make_origin(tmp_path)
    pwned = tmp_path / 'pwned'
    config = ('[core]\n\trepositoryformatversion = 0\n\tfsmonitor = touch %s\n' % pwned).encode()
    proc, restored = restore(tmp_path, origin, head, [
        ('notes.md', b'the agent\'s notes\n'), ('.git/config', config), ('sub/.GIT/hooks/post-checkout', b'x'),
        ('../outside.txt', b'out'), ('/tmp/abs-%s' % os.getpid(), b'abs')])
    assert proc.returncode != 0 and 'nothing was extracted' in proc.stderr, proc.stderr
    for name in ('.git/config', 'sub/.GIT/hooks/post-checkout', '../outside.txt', '/tmp/abs-%d' % os.getpid()):
        assert repr(name) in proc.stderr
    assert not os.path.exists(os.path.join(restored, 'notes.md'))
    assert not (tmp_path / 'archive' / 'outside.txt').exists() and not os.path.exists('/tmp/abs-%d' % os.getpid())
    with open(os.path.join(restored, '.git', 'config')) as src:
        assert 'fsmonitor' not in src.read()
    subprocess.run(['git', 'status'], cwd=restored, check=True, capture_output=True)
    assert not pwned.exists()


def test_links_devices_and_paths_through_links_are_left_out_and_files_land_inside(tmp_path):
    outside = tmp_path / 'outside'
    outside.mkdir()
    origin, head = make_origin(tmp_path, with_link=str(outside))
    proc, restored = restore(tmp_path, origin, head, [
        ('notes/a.md', b'kept\n'), ('up', b'', tarfile.SYMTYPE, '..'), ('up/escaped.txt', b'no'),
        ('tracked_link/x', b'no'), ('hard', b'', tarfile.LNKTYPE, 'README'), ('fifo', b'', tarfile.FIFOTYPE),
        ('dev', b'', tarfile.CHRTYPE)])
    assert proc.returncode == 0, proc.stderr
    with open(os.path.join(restored, 'notes', 'a.md'), 'rb') as src:
        assert src.read() == b'kept\n'
    assert os.listdir(str(outside)) == [] and not (tmp_path / 'archive' / 'escaped.txt').exists()
    for name in ('hard', 'fifo', 'dev'):
        assert not os.path.lexists(os.path.join(restored, name)) and 'left out: %s' % name in proc.stderr
    # The link was left out, so up/escaped.txt is a file in a directory of the clone, not beside the archive.
    assert 'left out: up (a link)' in proc.stderr and not os.path.islink(os.path.join(restored, 'up'))
    assert os.path.isfile(os.path.join(restored, 'up', 'escaped.txt'))
    assert 'left out: tracked_link/x (through the link' in proc.stderr
    assert '2 file(s) extracted, 5 entries left out' in proc.stdout


def test_the_tar_program_puts_in_no_absolute_dotdot_or_dotgit_name_and_runs_nothing_of_the_checkouts(tmp_path):
    work = tmp_path / 'checkout'
    (work / 'sub').mkdir(parents=True)
    (work / 'ok.md').write_text('fine\n')
    (work / 'sub' / 'b.md').write_text('fine too\n')
    # A module of the checkout named like the one the program imports: isolated mode never imports it.
    (work / 'tarfile.py').write_text('raise SystemExit("the checkout\'s tarfile.py ran")\n')
    names = ['ok.md', '.git/config', 'a/../../x', '/etc/hostname', 'sub/.GIT/hooks/x', 'sub/b.md', 'agent.env']
    proc = subprocess.run(['env', '-i', sys.executable, '-I', '-S', '-c', archive.TAR_PROGRAM, str(os.getuid()),
                           str(os.getgid()), 'agent.env'], cwd=str(work), input=b'\0'.join(n.encode() for n in names),
                          capture_output=True, check=False)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.decode().split() == ['4', '2']
    with tarfile.open(fileobj=io.BytesIO(proc.stdout)) as tar:
        assert tar.getnames() == ['ok.md', 'sub/b.md']
