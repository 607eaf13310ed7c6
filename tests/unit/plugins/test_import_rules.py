"""The imports between the collection's Python files follow the rules docs/internals/architecture.md states: no
cycle, every module_utils module imports on its own, and each part imports only what is below it.

An import counts wherever it stands (at the top, or in a function that runs later), and so does a string that names a
module of the collection (the provider registry imports a provider's package by name when it is first used).
"""

import ast
import glob
import os
import subprocess
import sys

import pytest

from tests.plugin_imports import imported_files as imports

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
PLUGINS = os.path.join(ROOT, 'plugins')
PACKAGE = 'ansible_collections.ephemera.workspaces.plugins.'
FILES = sorted(glob.glob(os.path.join(PLUGINS, '**', '*.py'), recursive=True))
MODULE_UTILS = [path for path in FILES if os.sep + 'module_utils' + os.sep in path]


def dotted(path):
    relative = os.path.relpath(path, PLUGINS)[:-3].split(os.sep)
    if relative[-1] == '__init__':
        relative = relative[:-1]
    return PACKAGE + '.'.join(relative)


def cycles(files, edges):
    """The strongly connected groups of more than one file (Tarjan), each sorted."""
    index, low, stack, on_stack, groups = {}, {}, [], set(), []

    def visit(node):
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in edges(node):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.append(member)
                if member == node:
                    break
            if len(group) > 1:
                groups.append(sorted(group))

    for node in files:
        if node not in index:
            visit(node)
    return groups


def test_the_walk_sees_the_imports():
    """A walker that finds nothing would pass every test below."""
    registry = os.path.join(PLUGINS, 'module_utils', 'providers', 'registry.py')
    found = {os.path.relpath(path, PLUGINS) for path in imports(registry)}
    assert {os.path.join('module_utils', 'providers', 'base.py'),
            os.path.join('module_utils', 'providers', 'aws', 'provider.py')} <= found
    assert cycles(['a', 'b', 'c'], {'a': ['b'], 'b': ['a'], 'c': ['a']}.get) == [['a', 'b']]


def test_no_import_cycle():
    found = cycles(FILES, imports)
    assert not found, 'import cycles: %s' % '; '.join(
        ' <-> '.join(os.path.relpath(path, PLUGINS) for path in group) for group in found)


def test_every_module_utils_module_imports_on_its_own():
    """Each module, imported into an interpreter that has none of the collection's modules loaded: an import cycle
    at the top of two files fails for one of their orders at least."""
    names = [dotted(path) for path in MODULE_UTILS]
    program = '\n'.join((
        'import importlib, sys, traceback',
        'failed = []',
        'for name in sys.argv[1:]:',
        '    for loaded in [m for m in sys.modules if m.startswith("ansible_collections.ephemera")]:',
        '        del sys.modules[loaded]',
        '    try:',
        '        importlib.import_module(name)',
        '    except Exception:',
        '        failed.append(name + ": " + traceback.format_exc().strip().splitlines()[-1])',
        'print("\\n".join(failed))',
        'sys.exit(1 if failed else 0)',
    ))
    done = subprocess.run([sys.executable, '-c', program] + names, capture_output=True, text=True, check=False,
                          cwd=ROOT)
    assert done.returncode == 0, done.stdout + done.stderr[-2000:]


@pytest.mark.parametrize('path', [os.path.join(PLUGINS, 'module_utils', 'providers', '__init__.py')])
def test_the_providers_package_is_empty(path):
    """A provider's files import the seam (providers.base); were the registry that names them the package itself,
    every one of them would import it back."""
    with open(path) as source:
        assert source.read().strip() == ''


# ------------------------------------------------------------------------------- the rules of docs/internals/architecture.md

def part(path):
    """The part of the tree a file belongs to, as docs/internals/architecture.md names them: 'core', 'guest',
    'flows', 'operation', 'providers' (the seam's own files: base.py, registry.py, cloud.py, ...), 'provider:<name>'
    (one provider's package), 'modules', 'action', 'inventory', 'lookup', 'plugin_utils', 'doc_fragments'."""
    relative = os.path.relpath(path, PLUGINS).split(os.sep)
    if relative[0] != 'module_utils':
        return relative[0]
    if relative[1] == 'providers':
        return 'provider:%s' % relative[2] if len(relative) > 3 else 'providers'
    return relative[1] if len(relative) > 2 else relative[1][:-3]


def seam_file(path):
    return os.path.relpath(path, os.path.join(PLUGINS, 'module_utils', 'providers'))


def broken_rules(path, targets):
    """What ``path`` imports against the rules, as sentences."""
    mine, broken = part(path), []
    for target in sorted(targets):
        theirs = part(target)
        said = '%s imports %s' % (os.path.relpath(path, PLUGINS), os.path.relpath(target, PLUGINS))
        if mine == 'core' and theirs != 'core':
            broken.append(said + ': core imports nothing outside core')
        elif mine in ('guest', 'operation') and theirs not in ('core', mine):
            broken.append(said + ': %s imports core only' % mine)
        elif mine == 'flows' and theirs.startswith('provider:'):
            broken.append(said + ': a flow imports no provider package, only the seam (providers/base.py and '
                                 'providers/registry.py)')
        elif mine == 'inventory' and theirs.startswith('provider:'):
            broken.append(said + ': the inventory imports no provider package; it reaches each through its '
                                 'inventory hook (registry.inventory_hook)')
        elif mine == 'flows' and theirs == 'providers' and \
                seam_file(target) not in ('base.py', 'registry.py', '__init__.py'):
            broken.append(said + ': a flow reaches providers through the seam (base.py) and the registry only')
        elif (mine.startswith('provider:') or mine == 'providers') and theirs in (
                'flows', 'operation', 'guest', 'modules', 'action', 'inventory', 'lookup', 'plugin_utils'):
            broken.append(said + ': a provider imports no flow (nor the runner, the guest code or a plugin)')
        elif mine.startswith('provider:') and theirs.startswith('provider:') and theirs != mine:
            broken.append(said + ': a provider package imports no other provider package')
        elif mine == 'providers' and theirs.startswith('provider:') and seam_file(path) != 'registry.py':
            broken.append(said + ': only the registry names a provider package')
        elif mine == 'modules' and theirs == 'modules':
            broken.append(said + ': no module imports another module')
        elif mine == 'action' and theirs not in ('plugin_utils',):
            broken.append(said + ': an action plugin imports plugin_utils/in_process.py and names its own module')
    return broken


def test_the_rules_see_a_broken_import():
    module_utils = os.path.join(PLUGINS, 'module_utils')
    journal = os.path.join(module_utils, 'core', 'journal.py')
    create = os.path.join(module_utils, 'flows', 'create.py')
    azure = os.path.join(module_utils, 'providers', 'azure', 'members.py')
    registry = os.path.join(module_utils, 'providers', 'registry.py')
    assert broken_rules(journal, [create]) and broken_rules(create, [azure]) and broken_rules(azure, [create])
    assert broken_rules(os.path.join(PLUGINS, 'modules', 'workspace_create.py'),
                        [os.path.join(PLUGINS, 'modules', 'workspace_destroy.py')])
    assert not broken_rules(create, [registry]) and not broken_rules(registry, [azure])
    assert broken_rules(os.path.join(PLUGINS, 'inventory', 'workspaces.py'), [azure])


def test_the_imports_follow_the_rules():
    broken = [sentence for path in FILES for sentence in broken_rules(path, imports(path))]
    assert not broken, '\n'.join(broken)


def test_an_action_plugin_runs_its_own_module():
    for path in glob.glob(os.path.join(PLUGINS, 'action', '*.py')):
        with open(path) as source:
            tree = ast.parse(source.read(), path)
        named = [node.value.value for node in ast.walk(tree) if isinstance(node, ast.Assign)
                 and [getattr(t, 'id', None) for t in node.targets] == ['MODULE']]
        assert named == [os.path.basename(path)[:-3]], path
