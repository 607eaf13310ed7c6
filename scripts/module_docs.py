# Copyright: ephemera.workspaces contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Copy the result keys several modules share into their RETURN blocks, from one source.

    python scripts/module_docs.py           rewrite the blocks that differ from the source, naming each module
    python scripts/module_docs.py --check   name them and exit 1 instead (tests/unit/packaging/test_return_docs.py)

ansible-core merges a doc fragment into a module's DOCUMENTATION only, and ansible-doc reads RETURN as the module's
own string: the keys a module returns when the Proxmox VE API or a guest command failed cannot come from a fragment.
They are written once, in plugins/doc_fragments/failure_facts.py (PROXMOX, GUEST), and copied into each module's
RETURN between two comment lines, which YAML and ansible-doc pass over:

    # BEGIN failure_facts.PROXMOX: written by scripts/module_docs.py from plugins/doc_fragments/failure_facts.py
    kind:
      ...
    # END failure_facts.PROXMOX

A key the module documents itself, outside the markers, is the module's own (pve_task's ``task`` is a result on
success too) and is left out of the copy.
"""

import ast
import glob
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SOURCE = os.path.join('plugins', 'doc_fragments', 'failure_facts.py')
MODULES = os.path.join('plugins', 'modules')
BEGIN = '# BEGIN failure_facts.%s: written by scripts/module_docs.py from ' + SOURCE
END = '# END failure_facts.%s'
MARKED = re.compile(r'^# BEGIN failure_facts\.(\w+)[^\n]*\n(.*?)^# END failure_facts\.(\w+)[ \t]*$', re.M | re.S)
TOP_KEY = re.compile(r'^([A-Za-z_][A-Za-z0-9_]*):', re.M)


def families(root=ROOT):
    """{name: YAML text} of the class attributes of the source (``PROXMOX``, ``GUEST``)."""
    with open(os.path.join(root, SOURCE)) as source:
        tree = ast.parse(source.read())
    found = {}
    for cls in (n for n in tree.body if isinstance(n, ast.ClassDef)):
        for node in cls.body:
            if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant) and \
                    isinstance(node.value.value, str) and node.targets[0].id != 'DOCUMENTATION':
                found[node.targets[0].id] = node.value.value
    return found


def keys_of(text):
    """[(key, its YAML lines)] of the top-level keys of ``text``, in order."""
    starts = [m.start() for m in TOP_KEY.finditer(text)] + [len(text)]
    return [(TOP_KEY.match(text, a).group(1), text[a:b].rstrip('\n') + '\n') for a, b in zip(starts, starts[1:])]


def return_span(text):
    """Where the RETURN string of a module's source ``text`` starts and ends (offsets of its content)."""
    for node in ast.parse(text).body:
        if isinstance(node, ast.Assign) and getattr(node.targets[0], 'id', None) == 'RETURN':
            lines = text.splitlines(keepends=True)
            start = sum(len(line) for line in lines[:node.value.lineno - 1]) + node.value.col_offset
            end = sum(len(line) for line in lines[:node.value.end_lineno - 1]) + node.value.end_col_offset
            opening = re.match(r"[rR]?('''|\"\"\")", text[start:])
            return start + len(opening.group(0)), end - 3
    return None


def written(returned, shared):
    """``returned`` (a RETURN text) with each marked block holding its family's keys, less the module's own."""
    own = {key for key, lines in keys_of(MARKED.sub('', returned))}
    problems = []

    def block(match):
        name, closing = match.group(1), match.group(3)
        if name != closing or name not in shared:
            problems.append('the block %s ... %s names no family of %s (%s)' % (
                name, closing, SOURCE, ', '.join(sorted(shared))))
            return match.group(0)
        body = ''.join(lines for key, lines in keys_of(shared[name].lstrip('\n')) if key not in own)
        return '%s\n%s%s' % (BEGIN % name, body, END % name)
    return MARKED.sub(block, returned), problems


def check(root=ROOT):
    """{module path: (its text now, its text as written from the source)} of the modules that differ, and the
    problems met (a marker naming no family)."""
    shared = families(root)
    differ, problems = {}, []
    for path in sorted(glob.glob(os.path.join(root, MODULES, '*.py'))):
        with open(path) as source:
            text = source.read()
        span = return_span(text)
        if span is None:
            continue
        returned, found = written(text[span[0]:span[1]], shared)
        problems += ['%s: %s' % (os.path.relpath(path, root), p) for p in found]
        new = text[:span[0]] + returned + text[span[1]:]
        if new != text:
            differ[path] = (text, new)
    return differ, problems


def main(argv):
    differ, problems = check()
    for problem in problems:
        print('error: %s' % problem, file=sys.stderr)
    for path, (old, new) in differ.items():
        if '--check' in argv:
            print('%s: its RETURN differs from %s; run python scripts/module_docs.py' % (os.path.relpath(path, ROOT), SOURCE))
        else:
            with open(path + '.tmp', 'w') as out:
                out.write(new)
            os.replace(path + '.tmp', path)
            print('wrote %s' % os.path.relpath(path, ROOT))
    return 1 if problems or (differ and '--check' in argv) else 0


if __name__ == '__main__':
    sys.exit(main(sys.argv[1:]))
