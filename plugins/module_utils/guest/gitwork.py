# -*- coding: utf-8 -*-
# Copyright: ephemera.workspaces contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Git in a guest's checkout, for the archive (flows/archive.py): the scripts that run there and the parsers of
what they print.

- :func:`inspect_script` prints the checkout's state as ``key value`` lines, run as the agent; :func:`parse_inspection`
  takes them as untrusted and :class:`CheckoutState` is what they say (HEAD, branches, the three trees, what no
  remote has).
- ``TAR_PROGRAM`` packs the untracked files an archive keeps (run as the agent, refusing what is not the agent's);
  ``EXTRACT_PROGRAM`` (written into an archive as ``RESTORE_UNTRACKED``) unpacks them again, refusing paths that leave
  the checkout.
- :func:`restore_commands` writes the shell commands that bring an archive back into a fresh clone.

The names of an archive's files and the environment every git command runs in are here too, for both sides.
"""

import hashlib
import json
import re

from ansible_collections.ephemera.workspaces.plugins.module_utils.core.errors import EphemeraError
from ansible_collections.ephemera.workspaces.plugins.module_utils.guest.operations import q

BUNDLE = 'head.bundle'
WORKTREE_PATCH = 'worktree.patch'
INDEX_PATCH = 'index.patch'
UNTRACKED_TAR = 'untracked.tar'
LIST_LIMIT = 200
UNMERGED = 'unmerged'

# No optional locks: no git command of ours may rewrite the index, not even to refresh stat data. No system or global
# configuration, no replace objects; signatures never shown (their text is the signer's).
GIT_ENV = ('export GIT_OPTIONAL_LOCKS=0 LC_ALL=C GIT_TERMINAL_PROMPT=0 GIT_CONFIG_NOSYSTEM=1 GIT_CONFIG_GLOBAL=/dev/null '
           'GIT_NO_REPLACE_OBJECTS=1')
OBJECT_ID = re.compile(r'^(?:[0-9a-f]{40}|[0-9a-f]{64})$')


class ArchiveError(EphemeraError):
    """The workspace cannot be checked or archived; the message says why and what to do."""


def inspect_script(checkout, remote=None):
    """A shell script that prints the checkout's state as ``key value`` lines (see :func:`parse_inspection`).

    It runs as the agent, in the agent's repository: everything it prints is the agent's to choose, so
    :func:`parse_inspection` takes it as untrusted. No value it prints can hold a line break (object
    ids, counts, ref names, one-line subjects, C-quoted file names), the remote's URL is not asked
    (the journal has it), and each key but the lists appears exactly once. ``remote`` is not used.
    """
    return '\n'.join([
        'set -eu',
        GIT_ENV,
        'cd %s 2>/dev/null || { echo "missing 1"; exit 0; }' % q(checkout),
        '[ "$(git rev-parse --show-toplevel 2>/dev/null)" = "$(pwd -P)" ] || { echo "missing 1"; exit 0; }',
        'gitdir=$(git rev-parse --absolute-git-dir)',
        'head=$(git rev-parse -q --verify "HEAD^{commit}" || true)',
        'echo "head $head"',
        'branch=$(git symbolic-ref -q --short HEAD || true)',
        'echo "branch $branch"',
        # git's own rule for branch names; a name it refuses is not used in a restore command.
        'if [ -z "$branch" ] || git check-ref-format --branch "$branch" >/dev/null 2>&1; then echo "branch_ok 1"; '
        'else echo "branch_ok 0"; fi',
        'echo "upstream $(git rev-parse -q --abbrev-ref --symbolic-full-name "@{upstream}" 2>/dev/null || true)"',
        'if [ -n "$head" ]; then echo "head_tree $(git rev-parse "$head^{tree}")"; '
        'else echo "head_tree $(git hash-object -t tree /dev/null)"; fi',
        # A copy of the index: the real one is never written.
        'idx=$(mktemp "$gitdir/ephemera-index.XXXXXX")',
        'trap \'rm -f "$idx" "$idx.lock"\' EXIT',
        'real=$(git rev-parse --git-path index)',
        'if [ -f "$real" ]; then cp "$real" "$idx"; '
        'else rm -f "$idx"; if [ -n "$head" ]; then GIT_INDEX_FILE=$idx git read-tree HEAD; '
        'else GIT_INDEX_FILE=$idx git read-tree --empty; fi; fi',
        'echo "index_tree $(GIT_INDEX_FILE=$idx git write-tree 2>/dev/null || echo %s)"' % UNMERGED,
        'GIT_INDEX_FILE=$idx git add -u -- .',
        'echo "tracked_tree $(GIT_INDEX_FILE=$idx git write-tree)"',
        'GIT_INDEX_FILE=$idx git add -A -- .',
        'echo "tree $(GIT_INDEX_FILE=$idx git write-tree)"',
        'refs=--branches',
        '[ -z "$head" ] || refs="HEAD $refs"',
        '! git rev-parse -q --verify refs/stash >/dev/null || refs="$refs refs/stash"',
        'echo "refs_args $refs"',
        'git for-each-ref --format="ref %(objectname) %(refname)" refs/heads refs/stash',
        'echo "unpushed_count $(git rev-list --count $refs --not --remotes)"',
        'git -c log.showSignature=false log --no-show-signature --format="unpushed %%H %%s" -n %d $refs --not --remotes'
        % LIST_LIMIT,
        'base=$head',
        'if [ -n "$head" ]; then',
        '  oldest=$(git rev-list --first-parent --reverse HEAD --not --remotes | head -n 1)',
        '  [ -z "$oldest" ] || base=$(git rev-parse -q --verify "$oldest^" || true)',
        'fi',
        'echo "base $base"',
        'echo "untracked_count $(git ls-files -o --exclude-standard -z | tr -cd "\\000" | wc -c)"',
        'git -c core.quotePath=true ls-files -o --exclude-standard | head -n %d | sed "s/^/untracked /"' % LIST_LIMIT,
        'echo "end 1"',
    ])


def parse_lines(text, lists=()):
    """``key value`` lines as a dict; keys in ``lists`` collect every value in a list."""
    values = {key: [] for key in lists}
    for line in text.splitlines():
        key, dummy, value = line.partition(' ')
        if key in lists:
            values[key].append(value)
        elif key:
            values[key] = value.strip()
    return values


class InspectionRefused(EphemeraError):
    """The inspection's output is not in the form the script prints: it cannot be trusted."""


# Every key the inspection prints once, and what its value must look like (None: free, but one line).
_HEX = r'(?:[0-9a-f]{40}|[0-9a-f]{64})'


_SCALARS = {
    'head': re.compile(r'^(?:%s)?$' % _HEX), 'branch': None, 'branch_ok': re.compile(r'^[01]$'), 'upstream': None,
    'head_tree': re.compile(r'^%s$' % _HEX), 'index_tree': re.compile(r'^(?:%s|%s)$' % (_HEX, UNMERGED)),
    'tracked_tree': re.compile(r'^%s$' % _HEX), 'tree': re.compile(r'^%s$' % _HEX),
    'refs_args': re.compile(r'^(?:HEAD )?--branches(?: refs/stash)?$'), 'unpushed_count': re.compile(r'^[0-9]+$'),
    'base': re.compile(r'^(?:%s)?$' % _HEX), 'untracked_count': re.compile(r'^[0-9]+$'), 'end': re.compile(r'^1$'),
}


_LISTS = {
    'ref': re.compile(r'^%s refs/(?:heads/\S+|stash)$' % _HEX),
    'unpushed': re.compile(r'^%s(?: .*)?$' % _HEX),
    'untracked': None,
}


def parse_inspection(text):
    """The inspection's ``key value`` lines as a dict, read strictly: an unknown key, a key twice, a missing one, a
    value of the wrong form or a branch that fails git's ref-format check raise InspectionRefused."""
    if text.strip() == 'missing 1':
        return {'missing': '1'}
    values = {key: [] for key in _LISTS}
    for number, line in enumerate(text.split('\n'), 1):
        if not line:
            continue
        key, dummy, value = line.partition(' ')
        if key in _LISTS:
            form = _LISTS[key]
            if form is not None and not form.match(value):
                raise InspectionRefused('line %d: %s %r is not of the expected form' % (number, key, value[:80]))
            values[key].append(value)
        elif key in _SCALARS:
            if key in values:
                raise InspectionRefused('line %d: %s given twice' % (number, key))
            form = _SCALARS[key]
            if (form is not None and not form.match(value)) or '\r' in value:
                raise InspectionRefused('line %d: %s %r is not of the expected form' % (number, key, value[:80]))
            values[key] = value
        else:
            raise InspectionRefused('line %d: unknown key %r' % (number, key[:40]))
    absent = sorted(set(_SCALARS) - set(values))
    if absent:
        raise InspectionRefused('%s missing' % ', '.join(absent))
    if values['branch'] and (values['branch_ok'] != '1' or not valid_branch(values['branch'])):
        raise InspectionRefused('the branch name %r is not one git accepts' % values['branch'][:80])
    if values['upstream'] and not valid_ref(values['upstream'], one_level=True):
        raise InspectionRefused('the upstream name %r is not one git accepts' % values['upstream'][:80])
    for line in values['ref']:
        if not valid_ref(line.split(' ', 1)[1]):
            raise InspectionRefused('the ref name %r is not one git accepts' % line[:80])
    return values


_REF_FORBIDDEN = re.compile(r'[\x00-\x20\x7f~^:?*\[\\]')


def valid_ref(name, one_level=False):
    """git's check-ref-format rules, for a full ref name (``refs/heads/x``) or, ``one_level``, a short one."""
    if not name or name == '@' or name.endswith(('.', '/')) or name.startswith('/') or '..' in name or '@{' in name:
        return False
    if _REF_FORBIDDEN.search(name) or '//' in name:
        return False
    parts = name.split('/')
    if not one_level and len(parts) < 2:
        return False
    return all(part and not part.startswith('.') and not part.endswith('.lock') for part in parts)


def valid_branch(name):
    """A branch name git accepts (``git check-ref-format --branch``) that also cannot be read as an option."""
    return bool(name) and not name.startswith('-') and valid_ref('refs/heads/' + name)


class CheckoutState:
    """What an inspection found. Trees and commits are object ids; ``missing`` when there is no checkout."""

    def __init__(self, values):
        self.values = values
        get = values.get
        self.missing = bool(get('missing'))
        self.head = get('head') or None
        self.branch = get('branch') or None
        self.upstream = get('upstream') or None
        self.base = get('base') or None
        self.head_tree = get('head_tree')
        self.index_tree = get('index_tree')
        self.tracked_tree = get('tracked_tree')
        self.tree = get('tree')
        self.refs_args = get('refs_args') or '--branches'
        self.refs = values.get('ref', [])
        self.unpushed_count = int(get('unpushed_count') or 0)
        self.unpushed = [dict(zip(('commit', 'subject'), (line.split(' ', 1) + [''])[:2]))
                         for line in values.get('unpushed', [])]
        self.untracked_count = int(get('untracked_count') or 0)
        self.untracked = values.get('untracked', [])

    LISTS = ('ref', 'unpushed', 'untracked')

    @classmethod
    def parse(cls, text):
        """The state an inspection printed, read strictly (InspectionRefused when it is not what the script prints)."""
        return cls(parse_inspection(text))

    @property
    def tracked_changes(self):
        return self.tracked_tree != self.head_tree

    @property
    def staged_changes(self):
        return self.index_tree != self.head_tree

    @property
    def untracked_changes(self):
        return self.tree != self.tracked_tree

    @property
    def clean(self):
        """Nothing here that a remote lacks: no unpushed commits, no changes, no new files."""
        return not (self.unpushed_count or self.tracked_changes or self.staged_changes or self.untracked_changes)

    @property
    def digest(self):
        canonical = json.dumps({'head': self.head, 'branch': self.branch, 'refs': sorted(self.refs),
                                'index_tree': self.index_tree, 'tracked_tree': self.tracked_tree, 'tree': self.tree},
                               sort_keys=True, separators=(',', ':'))
        return 'sha256:' + hashlib.sha256(canonical.encode('utf-8')).hexdigest()

    def summary(self):
        """The parts a person reads: one line of what is not on a remote."""
        parts = []
        if self.unpushed_count:
            parts.append('%d commit(s) on no remote' % self.unpushed_count)
        if self.tracked_changes:
            parts.append('uncommitted changes to tracked files')
        elif self.staged_changes:
            parts.append('staged changes')
        if self.untracked_changes:
            parts.append('%d untracked file(s)' % self.untracked_count)
        return ', '.join(parts) or 'nothing that is not on a remote'

    def to_result(self):
        return {
            'branch': self.branch, 'head': self.head, 'upstream': self.upstream, 'base': self.base,
            'unpushed_commits': self.unpushed_count, 'tracked_changes': self.tracked_changes,
            'staged_changes': self.staged_changes, 'untracked_files': self.untracked_count, 'digest': self.digest,
        }

    def to_metadata(self):
        result = self.to_result()
        result.update(head_tree=self.head_tree, index_tree=self.index_tree, tracked_tree=self.tracked_tree,
                      tree=self.tree, refs=sorted(self.refs),
                      unpushed=self.unpushed, untracked=self.untracked,
                      untracked_listed=min(self.untracked_count, len(self.untracked)))
        return result


# A tar of the files named on standard input (NUL-separated), made by the guest's python3 (no GNU tar needed), started
# by root in isolated mode (-I -S, an empty environment: nothing of the agent's runs in it) with the agent's uid and gid:
# it takes the agent's user before it opens anything, so it reads only what the agent may read, and as a process
# whose ids changed it cannot be traced by the agent. A name that is absolute, holds "..", or has a .git part is
# never put in (a restore would write it into the repository's own directory); symbolic links are stored as links,
# never followed; the credentials file is skipped by name. Standard error ends with the count refused, then the
# count put in.
TAR_PROGRAM = '''
import os, sys, tarfile
uid, gid, excluded = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
if os.getuid() != uid:
    os.setgroups([])
    os.setgid(gid)
    os.setuid(uid)
names = [n.decode('utf-8', 'surrogateescape') for n in sys.stdin.buffer.read().split(b'\\0') if n]
kept, refused = [], 0
for name in names:
    parts = name.rstrip('/').split('/')
    if name.startswith('/') or '..' in parts or any(p.lower() == '.git' for p in parts):
        refused += 1
    elif name.rstrip('/') != excluded:
        kept.append(name)
with tarfile.open(fileobj=sys.stdout.buffer, mode='w|', format=tarfile.PAX_FORMAT) as tar:
    for name in kept:
        tar.add(name, recursive=False)
sys.stderr.write('%d\\n%d\\n' % (refused, len(kept)))
'''


# The extractor that a restore runs on untracked.tar (written next to metadata.json as RESTORE_UNTRACKED): an
# archive is the agent's work, and the agent may have made it hostile. It puts in regular files and directories
# only, each below the current directory through directories only (never through a link, whether in the archive or
# already in the clone), never a name that is absolute, holds "..", or has a .git part; links, devices and other
# kinds are listed and left out. A name it must refuse stops it before it writes anything.
RESTORE_UNTRACKED = 'restore-untracked.py'


EXTRACT_PROGRAM = '''#!/usr/bin/env python3
"""Extract an archive's untracked.tar into the current directory (the restored clone), checked entry by entry.

    python3 -I restore-untracked.py untracked.tar

Regular files and directories only; never an absolute name, "..", a .git part, or a path through a link."""
import os
import stat
import sys
import tarfile


def problem(member):
    parts = member.name.rstrip('/').split('/')
    if member.name.startswith('/'):
        return 'an absolute name'
    if '..' in parts or '' in parts:
        return 'a name with ".." or an empty part'
    if any(p.lower() == '.git' for p in parts):
        return "a name in the repository's own .git directory"
    return None


def through_links(top, parts):
    path = top
    for part in parts:
        path = os.path.join(path, part)
        try:
            if stat.S_ISLNK(os.lstat(path).st_mode):
                return path
        except FileNotFoundError:
            return None
    return None


def main(argv):
    if len(argv) != 2:
        sys.exit('usage: python3 -I restore-untracked.py untracked.tar  (run it inside the restored clone)')
    top = os.getcwd()
    with tarfile.open(argv[1], 'r:') as tar:
        members = tar.getmembers()
        bad = [(m.name, problem(m)) for m in members if problem(m)]
        if bad:
            for name, why in bad:
                sys.stderr.write('refused: %r is %s\\n' % (name, why))
            sys.exit('%s holds entries a restore must not write; nothing was extracted.' % argv[1])
        put, left = 0, []
        for member in members:
            parts = member.name.rstrip('/').split('/')
            if not (member.isreg() or member.isdir()):
                left.append('%s (%s)' % (member.name, 'a link' if member.issym() or member.islnk() else 'not a file'))
                continue
            link = through_links(top, parts[:-1] if member.isreg() else parts)
            if link:
                left.append('%s (through the link %s)' % (member.name, link))
                continue
            target = os.path.join(top, *parts)
            if member.isdir():
                os.makedirs(target, exist_ok=True)
                continue
            os.makedirs(os.path.dirname(target), exist_ok=True)
            if through_links(top, parts[:-1]):
                left.append('%s (through a link)' % member.name)
                continue
            fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, member.mode & 0o755 | 0o600)
            with os.fdopen(fd, 'wb') as out, tar.extractfile(member) as src:
                while True:
                    block = src.read(1 << 20)
                    if not block:
                        break
                    out.write(block)
            put += 1
    for entry in left:
        sys.stderr.write('left out: %s\\n' % entry)
    print('%d file(s) extracted, %d entr%s left out' % (put, len(left), 'y' if len(left) == 1 else 'ies'))


if __name__ == '__main__':
    main(sys.argv)
'''


def bundle_ref(line):
    """True for a ``git bundle list-heads`` line: an object id and HEAD or a ref name git accepts."""
    oid, dummy, name = line.partition(' ')
    return bool(OBJECT_ID.match(oid)) and (name == 'HEAD' or valid_ref(name))


_URL_UNSAFE = re.compile(r'[\x00-\x20\x7f]')


def restore_commands(state, push, files, bundle_refs, remote_url):
    """The shell commands that rebuild the checkout from this archive, for metadata.json and the docs.

    Every value is quoted for the shell; commits must be object ids and the branch a name git accepts
    (else the commands check out the commit detached); an URL with white space or control characters
    is not written into a command (the first line says to clone the repository by hand).
    """
    def oid(value):
        if not value or not OBJECT_ID.match(value):
            raise ArchiveError('%r is not a commit id; no restore commands are written with it.' % (value,))
        return value

    if remote_url and not _URL_UNSAFE.search(remote_url) and not remote_url.startswith('-'):
        lines = ['git clone -- %s restored' % q(remote_url)]
    else:
        lines = ['# the repository URL is not fit for a command line: clone it by hand into ./restored',
                 'test -d restored/.git']
    lines.append('cd restored')
    if BUNDLE in files:
        specs = ["'+refs/*:refs/archive/*'"]
        if 'HEAD' in [line.split(' ', 1)[-1] for line in bundle_refs if bundle_ref(line)]:
            specs.append('+HEAD:refs/archive/HEAD')
        lines += ['git bundle verify ../%s' % BUNDLE, 'git fetch ../%s %s' % (BUNDLE, ' '.join(specs))]
    branch = state.branch if state.branch and valid_branch(state.branch) else None
    switch = '-B %s' % q(branch) if branch else '--detach'
    head = oid(state.head)
    if push and push.get('ok') and push.get('commit') != state.head:
        if not valid_ref(push['ref']):
            raise ArchiveError('%r is not a ref name git accepts.' % push['ref'])
        lines += [
            'git fetch origin %s' % q(push['ref']),
            'git checkout %s %s' % (switch, oid(push['commit'])),
            'git reset %s   # HEAD as it was; the rest becomes uncommitted changes and untracked files' % head,
        ]
    else:
        if push and push.get('ok'):
            lines.append('git fetch origin %s' % q(push['ref']))
        lines.append('git checkout %s %s' % (switch, head))
        if INDEX_PATCH in files:
            lines.append('git apply --cached ../%s' % INDEX_PATCH)
        if WORKTREE_PATCH in files:
            lines.append('git apply ../%s' % WORKTREE_PATCH)
    if UNTRACKED_TAR in files:
        lines.append('python3 -I ../%s ../%s' % (RESTORE_UNTRACKED, UNTRACKED_TAR))
    return lines
