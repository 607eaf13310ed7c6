"""The seam is declared once, on the provider base (providers/base.py): what a task came to (TaskResult), and every
method and capability a flow may use, with its default. The flows call what the base declares plainly, never
looking first whether a provider has it."""

import ast
import glob
import os

import pytest

from ansible_collections.ephemera.workspaces.plugins.module_utils.providers import base, registry
from ansible_collections.ephemera.workspaces.plugins.module_utils.providers.proxmox import client as pve

MODULE_UTILS = os.path.dirname(os.path.dirname(os.path.abspath(base.__file__)))
FLOWS = sorted(glob.glob(os.path.join(MODULE_UTILS, 'flows', '*.py')))


def parsed(path):
    with open(path) as source:
        return ast.parse(source.read(), path)


def test_a_task_result_says_how_the_task_ended():
    running = base.TaskResult('h-1', 'running', None)
    assert running.succeeded is None and running.warnings == 0
    done = base.TaskResult('h-1')
    assert done.succeeded is True and done.status == 'stopped' and done.log_tail == [] and done.elapsed == 0.0
    warned = base.TaskResult('h-1', exitstatus='WARNINGS: 2', elapsed=1.23456, warning_lines=['WARN: a', 'WARN: b'])
    assert warned.succeeded is True and warned.warnings == 2 and warned.elapsed == 1.235
    failed = base.TaskResult('h-1', exitstatus='clone failed', log_tail=['TASK ERROR: clone failed'])
    assert failed.succeeded is False and failed.log_tail == ['TASK ERROR: clone failed']


def test_a_proxmox_task_result_is_the_seams_with_its_upids_fields():
    task = pve.TaskResult('UPID:pve1:000003E8:00001B58:6B105231:vzclone:9000:root@pam:', 'stopped', 'WARNINGS: 1')
    assert isinstance(task, base.TaskResult)
    assert (task.node, task.type, task.id, task.user, task.succeeded, task.warnings) == \
        ('pve1', 'vzclone', '9000', 'root@pam', True, 1)
    assert set(task.as_dict()) == set(pve.TaskResult.FIELDS)


def test_task_result_is_defined_once():
    """Every class named TaskResult in module_utils is the base's, or derives from it."""
    found = []
    for path in glob.glob(os.path.join(MODULE_UTILS, '**', '*.py'), recursive=True):
        for node in ast.walk(parsed(path)):
            if isinstance(node, ast.ClassDef) and node.name == 'TaskResult':
                bases = [ast.unparse(b) for b in node.bases]
                found.append((os.path.relpath(path, MODULE_UTILS), bases))
    assert sorted(found) == [(os.path.join('providers', 'base.py'), []),
                             (os.path.join('providers', 'proxmox', 'client.py'), ['base.TaskResult'])]


def test_the_base_declares_guest_setup_and_use_journal_with_defaults():
    assert base.Provider.guest_setup(lambda action: pytest.fail('connected'), None, '192.0.2.7', {}) == ('', [])
    assert base.Provider(None).use_journal(object(), 'claim', 'w1') is None


def declared():
    """The names base.Provider declares (methods, properties, capabilities)."""
    return {name for name in dir(base.Provider) if not name.startswith('__')}


@pytest.mark.parametrize('path', FLOWS, ids=[os.path.basename(p)[:-3] for p in FLOWS])
def test_flows_call_what_the_base_declares_plainly(path):
    """No ``hasattr(provider, 'use_journal')`` or ``getattr(cls, 'guest_setup', None)`` on a name the base declares:
    every provider has it."""
    names = declared()
    found = []
    for node in ast.walk(parsed(path)):
        if isinstance(node, ast.Call) and getattr(node.func, 'id', None) in ('hasattr', 'getattr') and \
                len(node.args) >= 2 and isinstance(node.args[1], ast.Constant) and node.args[1].value in names:
            found.append('%s line %d: %s' % (os.path.basename(path), node.lineno, ast.unparse(node)))
    assert not found, found


@pytest.mark.parametrize('name', sorted(registry.PROVIDERS))
def test_a_provider_has_a_set_sweep_exactly_when_it_sweeps_sets(name):
    cls = registry.provider_class(name)
    assert cls.sweeps_sets == (cls.set_sweep is not base.Provider.set_sweep), name


def test_the_base_has_no_set_sweep():
    assert base.Provider(None).set_sweep(object(), {}, counting=True) is None


def test_each_provider_declares_its_own_location_option():
    """The option that binds a connection to one location is declared in the provider's package (its options.py,
    read by the lease audit without the provider's code), and its class takes it from there; a name that is no
    provider has none."""
    assert not hasattr(base, 'LOCATION_OPTIONS')
    for name in registry.PROVIDERS:
        assert base.location_option(name) == registry.provider_class(name).location_option
    assert base.location_option('aws') == 'aws_region' and base.location_option('gcp') == 'gcp_zone'
    for none in ('proxmox', 'hetzner', 'azure', 'nope', '../x', None):
        assert base.location_option(none) is None


def strings_in_code(tree):
    """The string constants of ``tree`` that are not docstrings."""
    docstrings = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body and \
                isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant):
            docstrings.add(id(node.body[0].value))
    return [node for node in ast.walk(tree) if isinstance(node, ast.Constant) and isinstance(node.value, str)
            and id(node) not in docstrings]


@pytest.mark.parametrize('path', FLOWS, ids=[os.path.basename(p)[:-3] for p in FLOWS])
def test_flows_name_no_provider(path):
    """A flow loops over what providers declare: no provider's name in its code (the default provider of a record
    that names none is the registry's)."""
    names = set(registry.PROVIDERS)
    found = ['line %d: %r' % (node.lineno, node.value) for node in strings_in_code(parsed(path)) if node.value in names]
    assert not found, found


@pytest.mark.parametrize('name', sorted(registry.PROVIDERS))
def test_a_resource_is_named_alike_by_its_provider_and_by_a_reader_without_the_provider_s_code(name):
    cls = registry.provider_class(name)
    for resource_id, location in ((105, 'pve1'), ('i-0abc', 'eu-west-1'), ('x', None)):
        assert cls.label(resource_id, location) == base.resource_label(name, resource_id, location)
    if name != 'azure':
        assert cls.label('x').startswith({'proxmox': 'CT'}.get(name, cls.noun) + ' x')
    # A provider that declares no RESOURCE_LABEL (or no such provider) still gets a name for its resources.
    assert base.resource_label('no-such-provider', 7, 'here') == 'resource 7 in here'
