"""Which of the collection's Python files a file imports, read from its source: the import statements, at the top or
in a function, and module paths named in strings (a provider's package, imported by name when it is first used).
The architecture's import rules (tests/unit/plugins/test_import_rules.py) and the modules' documented requirements
(tests/unit/packaging/test_plugin_docs.py) are checked with it."""

import ast
import functools
import os
import runpy

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PLUGINS = os.path.join(ROOT, 'plugins')


# The script that prints the import graph resolves a dotted name to its file the same way.
_GRAPH = runpy.run_path(os.path.join(ROOT, 'scripts', 'import_graph.py'))


def file_of(dotted):
    """The file of a dotted name inside this collection (a module, or a package's __init__.py), or None (an imported
    class or function: not a file)."""
    return _GRAPH['file_of'](PLUGINS, dotted)


@functools.lru_cache(maxsize=None)
def imported_files(path):
    """The collection's files that ``path`` imports: ``import a.b``, ``from a import b`` (a, and a.b where that is a
    module), and module names in strings."""
    with open(path) as source:
        tree = ast.parse(source.read(), path)
    found = set()
    for node in ast.walk(tree):
        names = []
        if isinstance(node, ast.ImportFrom) and node.module:
            names = [node.module] + ['%s.%s' % (node.module, alias.name) for alias in node.names]
        elif isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            names = [node.value]
        for name in names:
            target = file_of(name)
            if target and target != path:
                found.add(target)
    return frozenset(found)
