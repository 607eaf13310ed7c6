"""scripts/import_graph.py: the import graph between the collection's parts, and the rules it keeps (no flow, inventory,
module, action plugin or core imports a provider package; core imports nothing outside core)."""

import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(ROOT, 'scripts', 'import_graph.py')
PACKAGE = 'ansible_collections.ephemera.workspaces.plugins.'


def run(*args):
    return subprocess.run([sys.executable, SCRIPT] + list(args), capture_output=True, text=True, check=False)


def write(root, relative, text=''):
    path = os.path.join(str(root), 'plugins', *relative.split('/'))
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, 'w') as out:
        out.write(text)


def test_the_collection_keeps_the_rules():
    done = run()
    # The exceptions the rules allow, each with why, are printed last.
    print(done.stdout[done.stdout.index('exceptions to the rules:'):])
    assert done.returncode == 0, done.stderr
    edges = dict(line.rsplit(': ', 1) for line in done.stdout.splitlines() if ' -> ' in line and ': ' in line
                 and not line.startswith(' '))
    assert int(edges['flows -> providers']) > 0 and int(edges['inventory -> providers']) > 0
    assert not [edge for edge in edges if edge.startswith(('inventory -> providers/', 'flows -> providers/',
                                                           'action -> providers/', 'core -> '))]


def test_a_flow_that_imports_a_provider_package_breaks_the_rule(tmp_path):
    write(tmp_path, 'module_utils/providers/__init__.py')
    write(tmp_path, 'module_utils/providers/base.py')
    write(tmp_path, 'module_utils/providers/aws/__init__.py')
    write(tmp_path, 'module_utils/providers/aws/provider.py')
    write(tmp_path, 'module_utils/flows/create.py', '\n'.join((
        'from %smodule_utils.providers import base' % PACKAGE,
        '',
        '',
        'def later():',
        '    from %smodule_utils.providers.aws.provider import AwsProvider' % PACKAGE,
        '    return AwsProvider',
        '')))
    done = run('--root', str(tmp_path))
    assert done.returncode == 1
    assert 'flows -> providers: 1' in done.stdout and 'flows -> providers/aws: 1' in done.stdout
    assert done.stderr.splitlines() == [
        'plugins/module_utils/flows/create.py:5: flows imports plugins/module_utils/providers/aws/provider.py: flows '
        'imports no provider package: only providers/base.py and providers/registry.py']


def test_core_imports_nothing_outside_core(tmp_path):
    write(tmp_path, 'module_utils/core/journal.py', 'from %smodule_utils.guest import ssh\n' % PACKAGE)
    write(tmp_path, 'module_utils/guest/ssh.py')
    done = run('--root', str(tmp_path))
    assert done.returncode == 1
    assert done.stderr.startswith('plugins/module_utils/core/journal.py:1: core imports '
                                  'plugins/module_utils/guest/ssh.py: core imports nothing outside core')
