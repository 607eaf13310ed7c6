"""The docs a user reads stay about using the collection; how it works inside lives under docs/internals/.

User pages name no source path, no "seam" and no numbered security finding, and each stays under
MAX_LINES lines. Every relative link in docs/ and README.md resolves to a file and, for '#anchor'
links, to a heading of that file (GitHub's anchor rules).
"""

import pathlib
import re

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
DOCS = ROOT / 'docs'

# The pages a user reads.
USER_PAGES = ['README.md'] + ['docs/%s.md' % name for name in (
    'aws', 'azure', 'gcp', 'hetzner', 'awx', 'localcloud', 'localpve', 'agents', 'inventory', 'archive',
    'install', 'errors', 'destroy', 'create', 'troubleshooting', 'model-endpoints', 'security', 'fork', 'leases',
    'templates', 'pools',
    'quickstart-aws', 'quickstart-azure', 'quickstart-gcp', 'quickstart-hetzner', 'quickstart-proxmox')]

# A user page longer than this is reference for a maintainer, or two pages.
MAX_LINES = 350

FORBIDDEN = [
    ('a source path', re.compile(r'(?<![\w.-])(plugins|module_utils|plugin_utils|tests|bench)/[\w.]')),
    ('"seam"', re.compile(r'\bseams?\b', re.I)),
    ('a numbered finding', re.compile(r'\b[Ff]inding\s*#?\d+|\bF\d+\b')),
]


# The collection's own Python files, by name; a name after a '/' is a path in a guest (/opt/ephemera/...).
SOURCE_FILES = {path.name for top in ('plugins', 'tests', 'bench') for path in (ROOT / top).rglob('*.py')}
PY_NAME = re.compile(r'(?<![\w/.-])([\w-]+\.py)\b')


def _problems(line):
    found = [what for what, pattern in FORBIDDEN if pattern.search(line)]
    if any(name in SOURCE_FILES for name in PY_NAME.findall(line)):
        found.append('a Python file of the collection')
    return found


def _pages():
    return sorted({str(p.relative_to(ROOT)) for p in DOCS.rglob('*.md')} | {'README.md'})


@pytest.mark.parametrize('page', USER_PAGES)
def test_user_page_is_for_users(page):
    path = ROOT / page
    assert path.is_file(), page
    lines = path.read_text(encoding='utf-8').splitlines()
    found = ['%s:%d names %s: %s' % (page, number, what, line.strip()[:120])
             for number, line in enumerate(lines, 1) for what in _problems(line)]
    assert not found, '\n'.join(found)
    assert len(lines) < MAX_LINES, '%s has %d lines; keep a user page under %d' % (page, len(lines), MAX_LINES)


def anchor(heading):
    """GitHub's anchor for a heading: lowercase, punctuation removed, spaces to '-'."""
    text = re.sub(r'`|\*\*|\[([^\]]*)\]\([^)]*\)', lambda m: m.group(1) or '', heading.strip().lower())
    text = re.sub(r'[^\w\- ]', '', text)
    return text.replace(' ', '-')


def anchors(path):
    found, counts, fenced = set(), {}, False
    for line in path.read_text(encoding='utf-8').splitlines():
        if line.lstrip().startswith('```'):
            fenced = not fenced
            continue
        match = None if fenced else re.match(r'#{1,6}\s+(.*?)\s*#*\s*$', line)
        if match:
            base = anchor(match.group(1))
            count = counts.get(base, 0)
            counts[base] = count + 1
            found.add(base if not count else '%s-%d' % (base, count))
    for match in re.finditer(r'<a\s+(?:name|id)="([^"]+)"', path.read_text(encoding='utf-8')):
        found.add(match.group(1))
    return found


LINK = re.compile(r'\[[^\]]*\]\(([^)\s]+)(?:\s+"[^"]*")?\)')


def _links(path):
    fenced = False
    for number, line in enumerate(path.read_text(encoding='utf-8').splitlines(), 1):
        if line.lstrip().startswith('```'):
            fenced = not fenced
            continue
        if fenced:
            continue
        for match in LINK.finditer(re.sub(r'`[^`]*`', '', line)):
            target = match.group(1)
            if re.match(r'[a-z][a-z0-9+.-]*:', target, re.I):
                continue
            yield number, target


@pytest.mark.parametrize('page', _pages())
def test_relative_links_resolve(page):
    path = ROOT / page
    broken = []
    for number, target in _links(path):
        file_part, dummy, fragment = target.partition('#')
        dest = (path.parent / file_part).resolve() if file_part else path
        if not dest.exists():
            broken.append('%s:%d links to %s: no such file' % (page, number, target))
        elif fragment and dest.suffix == '.md' and fragment not in anchors(dest):
            broken.append('%s:%d links to %s: no heading with that anchor' % (page, number, target))
    assert not broken, '\n'.join(broken)


def test_anchor_rules():
    assert anchor('A first workspace by hand') == 'a-first-workspace-by-hand'
    assert anchor('On PostgreSQL') == 'on-postgresql'
    assert anchor("A workspace's resource") == 'a-workspaces-resource'
    assert anchor('`make demo`: one command, 10 minutes') == 'make-demo-one-command-10-minutes'
