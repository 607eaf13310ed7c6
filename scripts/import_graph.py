# Copyright: ephemera.workspaces contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The import graph between the collection's parts, and the rules it keeps.

    python scripts/import_graph.py [--root DIR]

Reads every .py file under DIR/plugins (DIR: the collection, by default the one this script is in) with ``ast``; an
import counts wherever it stands (at the top, or in a function that runs later). Prints one line per edge between
two parts, ``<part> -> <part>: <number of imports>``; a part is ``core``, ``flows``, ``guest``, ``operation``,
``providers`` (the shared files: registry, base, cloud, answers, hostkeys), ``providers/<name>`` (one provider's
package), ``modules``, ``action``, ``inventory``, ``lookup``, ``plugin_utils``, ``callback``, ``doc_fragments``...

Exits 1, naming the file and line of each, when an import breaks a rule:

- a flow, the inventory, a module, an action plugin or core imports no provider package (providers/<name>/...):
  they reach a provider through the seam (providers/base.py) and the registry (providers/registry.py);
- core imports nothing outside core.

The imports the rules allow all the same are EXCEPTIONS below, each with why; the script prints them last.
"""

import argparse
import ast
import collections
import fnmatch
import os
import sys

PACKAGE = 'ansible_collections.ephemera.workspaces.plugins.'
# The parts that import no provider package.
NO_PROVIDER_PACKAGE = ('flows', 'inventory', 'modules', 'action', 'core')

# (importing file, imported file, why): paths from the collection's root, shell patterns. None: a module gets every
# provider's options through the registry (registry.provider_argument_spec).
EXCEPTIONS = ()


def part(relative):
    """The part of the collection a file (its path under plugins/, split) belongs to."""
    if relative[0] != 'module_utils':
        return relative[0]
    if len(relative) == 2:
        return relative[1][:-3] if relative[1].endswith('.py') else relative[1]
    if relative[1] == 'providers':
        return 'providers/%s' % relative[2] if len(relative) > 3 else 'providers'
    return relative[1]


def file_of(plugins, dotted):
    """The file (under ``plugins``) of a dotted module name of the collection, or None (not a module of ours)."""
    if not dotted.startswith(PACKAGE):
        return None
    base = os.path.join(plugins, *dotted[len(PACKAGE):].split('.'))
    for candidate in (base + '.py', os.path.join(base, '__init__.py')):
        if os.path.isfile(candidate):
            return candidate
    return None


def imports(plugins, path):
    """(line, imported file) of each of the collection's modules that ``path`` imports."""
    with open(path) as source:
        tree = ast.parse(source.read(), path)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and not node.level:
            targets = []
            for alias in node.names:
                # ``from package import module`` imports the module; ``from module import name`` the module.
                targets.append(file_of(plugins, '%s.%s' % (node.module, alias.name)) or file_of(plugins, node.module))
        elif isinstance(node, ast.Import):
            targets = [file_of(plugins, alias.name) for alias in node.names]
        else:
            continue
        for target in sorted(set(t for t in targets if t and t != path)):
            found.append((node.lineno, target))
    return sorted(found)


def excepted(root, path, target):
    mine, theirs = os.path.relpath(path, root), os.path.relpath(target, root)
    return any(fnmatch.fnmatch(mine, source) and fnmatch.fnmatch(theirs, imported)
               for source, imported, dummy in EXCEPTIONS)


def broken(mine, theirs):
    """The rule an import of part ``theirs`` from part ``mine`` breaks, or None."""
    if mine in NO_PROVIDER_PACKAGE and theirs.startswith('providers/'):
        return '%s imports no provider package: only providers/base.py and providers/registry.py' % mine
    if mine == 'core' and theirs != 'core':
        return 'core imports nothing outside core'
    return None


def graph(root):
    """({(part, part): number of imports}, [(file, line, sentence)] of the broken rules) of the collection at
    ``root``."""
    plugins = os.path.join(root, 'plugins')
    edges, problems = collections.Counter(), []
    for directory, dirs, files in os.walk(plugins):
        dirs.sort()
        for name in sorted(files):
            if not name.endswith('.py'):
                continue
            path = os.path.join(directory, name)
            mine = part(os.path.relpath(path, plugins).split(os.sep))
            for line, target in imports(plugins, path):
                theirs = part(os.path.relpath(target, plugins).split(os.sep))
                if theirs != mine:
                    edges[(mine, theirs)] += 1
                rule = broken(mine, theirs)
                if rule and not excepted(root, path, target):
                    problems.append((os.path.relpath(path, root), line, '%s imports %s: %s' % (
                        mine, os.path.relpath(target, root), rule)))
    return edges, problems


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n', maxsplit=1)[0])
    parser.add_argument('--root', default=os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                        help='the collection (the directory that holds plugins/)')
    args = parser.parse_args(argv)
    edges, problems = graph(args.root)
    for (mine, theirs), count in sorted(edges.items()):
        print('%s -> %s: %d' % (mine, theirs, count))
    print('exceptions to the rules:')
    for source, imported, why in EXCEPTIONS:
        print('  %s -> %s: %s' % (source, imported, why))
    for path, line, sentence in problems:
        sys.stderr.write('%s:%d: %s\n' % (path, line, sentence))
    return 1 if problems else 0


if __name__ == '__main__':
    sys.exit(main())
