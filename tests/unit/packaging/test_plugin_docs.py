"""The modules' documentation says what their code does.

Each fact is read from the code, not from a list kept here: which Python packages a module needs (the module_utils
files it reaches through its imports, and which of them import paramiko, proxmoxer or requests), which result keys
it returns (``details``, ``diff``), which facts of an error its failure result carries (the keywords the error
classes of the Proxmox client and of the SSH wrapper are raised with), and whether it supports check mode. The
documentation is read the way ansible-doc reads it: the module's DOCUMENTATION and RETURN, with the requirements
of the doc fragments it extends.
"""

import ast
import functools
import glob
import os
import re

import pytest
import yaml

from tests.plugin_imports import imported_files

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
PLUGINS = os.path.join(ROOT, 'plugins')
MODULE_UTILS = os.path.join(PLUGINS, 'module_utils')
MODULES = sorted(glob.glob(os.path.join(PLUGINS, 'modules', '*.py')))
MODULE_NAMES = [os.path.basename(path)[:-3] for path in MODULES]
# The two families of errors whose facts a module's failure result carries and a playbook acts on: what the
# Proxmox VE API (or one of its tasks) said, and what happened on the guest.
PVE_CLIENT = os.path.join(MODULE_UTILS, 'providers', 'proxmox', 'client.py')
SSH = os.path.join(MODULE_UTILS, 'guest', 'ssh.py')


@functools.lru_cache(maxsize=None)
def parse(path):
    with open(path) as source:
        return ast.parse(source.read(), path)


def string_assignments(tree):
    """The string constants assigned to names at the top of ``tree`` (a module or a class body)."""
    found = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
            for target in node.targets:
                if isinstance(target, ast.Name):
                    found[target.id] = node.value.value
    return found


def blocks(path):
    return string_assignments(parse(path))


def fragment(name):
    """The YAML of a doc fragment named as in extends_documentation_fragment (``ephemera.workspaces.x[.part]``)."""
    parts = name.split('.')
    assert parts[:2] == ['ephemera', 'workspaces'], 'a fragment of another collection: %s' % name
    path = os.path.join(PLUGINS, 'doc_fragments', parts[2] + '.py')
    attribute = parts[3].upper() if len(parts) > 3 else 'DOCUMENTATION'
    classes = [node for node in parse(path).body if isinstance(node, ast.ClassDef) and node.name == 'ModuleDocFragment']
    return yaml.safe_load(string_assignments(classes[0])[attribute])


def documentation(path):
    """DOCUMENTATION with the requirements of its fragments merged in, as ansible-doc shows them."""
    doc = yaml.safe_load(blocks(path)['DOCUMENTATION'])
    requirements = list(doc.get('requirements') or [])
    for name in doc.get('extends_documentation_fragment') or []:
        requirements += fragment(name).get('requirements') or []
    doc['requirements'] = sorted(set(requirements))
    return doc


def returns(path):
    return yaml.safe_load(blocks(path)['RETURN']) or {}


# ------------------------------------------------------------------------------------------- the code

@functools.lru_cache(maxsize=None)
def reached(path):
    """Every file of the collection that ``path`` reaches through its imports."""
    seen, todo = set(), [path]
    while todo:
        for target in imported_files(todo.pop()):
            if target not in seen:
                seen.add(target)
                todo.append(target)
    return frozenset(seen)


def third_party_imports(path):
    """Top-level names of the packages ``path`` imports, at the top or in a function."""
    names = set()
    for node in ast.walk(parse(path)):
        if isinstance(node, ast.Import):
            names.update(alias.name.split('.')[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module.split('.')[0])
    return names


def needed_packages(path):
    """The runtime packages of requirements.txt that the module's code imports, directly or through module_utils."""
    wanted = set(floors())
    found = set()
    for target in reached(path) | {path}:
        found |= third_party_imports(target) & wanted
    return found


RUNTIME_REQUIREMENTS = ('requirements.txt', 'requirements-aws.txt', 'requirements-hetzner.txt', 'requirements-gcp.txt',
                        'requirements-azure.txt')


def floors():
    """requirements.txt and the providers' requirements-<provider>.txt as {package: its lower bound}."""
    found = {}
    for name in RUNTIME_REQUIREMENTS:
        with open(os.path.join(ROOT, name)) as lines:
            for line in lines:
                line = line.split('#')[0].strip()
                if line:
                    match = re.match(r'^([A-Za-z0-9_.-]+)\s*>=\s*([0-9][0-9.]*)', line)
                    assert match, '%s: %r has no lower bound' % (name, line)
                    found[match.group(1).lower()] = match.group(2)
    return found


@functools.lru_cache(maxsize=None)
def error_classes():
    """Names of every class of module_utils that derives from EphemeraError."""
    bases = {}
    for path in glob.glob(os.path.join(MODULE_UTILS, '**', '*.py'), recursive=True):
        for node in ast.walk(parse(path)):
            if isinstance(node, ast.ClassDef):
                bases[node.name] = [b.attr if isinstance(b, ast.Attribute) else getattr(b, 'id', None)
                                    for b in node.bases]

    def derives(name, seen=()):
        if name == 'EphemeraError':
            return True
        return name in bases and name not in seen and any(derives(b, seen + (name,)) for b in bases[name])
    return frozenset(name for name in bases if derives(name))


def error_facts(path):
    """The facts (``details``) that the errors of ``path`` carry: the keywords they are made with, their base's
    fixed facts (``details = dict(...)``) and what their constructors pass on to their base."""
    errors = error_classes()
    facts = set()
    tree = parse(path)
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else getattr(func, 'id', None)
        made = name in errors
        passed_on = name == '__init__' and isinstance(func.value, ast.Call) and getattr(func.value.func, 'id', '') == 'super'
        if made or passed_on:
            facts.update(k.arg for k in node.keywords if k.arg)
    for cls in (n for n in ast.walk(tree) if isinstance(n, ast.ClassDef) and n.name in errors):
        for node in ast.walk(cls):
            if isinstance(node, ast.Assign) and any(getattr(t, 'id', None) == 'details' for t in node.targets) \
                    and isinstance(node.value, ast.Call) and getattr(node.value.func, 'id', None) == 'dict':
                facts.update(k.arg for k in node.value.keywords if k.arg)
    return facts


def run_function(path):
    functions = [n for n in parse(path).body if isinstance(n, ast.FunctionDef) and n.name == 'run']
    assert functions, '%s has no run(module)' % path
    return functions[0]


def result_keys(path):
    """The keys the module's run() puts into a result dict by name: ``dict(k=...)``, ``{'k': ...}``,
    ``result['k'] = ...``, ``x.update(k=...)``, ``module.exit_json(k=...)``; each with whether it is set only
    under a condition."""
    keys = {}

    def visit(node, conditional):
        found = []
        if isinstance(node, ast.Call):
            name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, 'id', None)
            if name in ('dict', 'update', 'exit_json', 'fail_json'):
                found = [k.arg for k in node.keywords if k.arg]
        elif isinstance(node, ast.Dict):
            found = [k.value for k in node.keys if isinstance(k, ast.Constant)]
        elif isinstance(node, ast.Assign):
            found = [t.slice.value for t in node.targets
                     if isinstance(t, ast.Subscript) and isinstance(t.slice, ast.Constant)]
        for key in found:
            keys[key] = keys.get(key, True) and conditional
        for child in ast.iter_child_nodes(node):
            visit(child, conditional or isinstance(node, (ast.If, ast.IfExp)))

    for statement in run_function(path).body:
        visit(statement, False)
    return keys


def merges_error_facts(path):
    """Whether run() puts an error's facts into its failure result: ``**err.details``, ``x.update(err.details)``,
    or the module base's ``fail_from``."""
    for node in ast.walk(run_function(path)):
        if not isinstance(node, ast.Call):
            continue
        if getattr(node.func, 'id', None) == 'fail_from':
            return True
        arguments = [k.value for k in node.keywords if k.arg is None]
        if getattr(node.func, 'attr', None) == 'update':
            arguments += node.args
        if any(isinstance(a, ast.Attribute) and a.attr == 'details' for a in arguments):
            return True
    return False


def supports_check_mode(path):
    for node in ast.walk(parse(path)):
        if isinstance(node, ast.keyword) and node.arg == 'supports_check_mode':
            return bool(ast.literal_eval(node.value))
    return False


# ------------------------------------------------------------------------------------------- the tests

def test_every_module_is_seen():
    assert MODULE_NAMES, 'no module found under plugins/modules'
    assert 'workspace_create' in MODULE_NAMES


def test_the_code_facts_are_found():
    """The facts below are read from the code; these are the ones the collection is known to have, so that a
    reader that finds nothing cannot pass the other tests."""
    assert 'paramiko' in third_party_imports(SSH)
    assert {'proxmoxer', 'requests'} <= third_party_imports(PVE_CLIENT)
    assert {'kind', 'status', 'pve_message', 'transport', 'task'} <= error_facts(PVE_CLIENT)
    assert {'address', 'rc', 'stderr_tail'} <= error_facts(SSH)
    create = os.path.join(PLUGINS, 'modules', 'workspace_create.py')
    assert needed_packages(create) == {'boto3', 'hcloud', 'paramiko', 'proxmoxer', 'requests'}
    assert 'details' in result_keys(create) and result_keys(create)['diff'] is True
    assert merges_error_facts(create)


@pytest.mark.parametrize('path', MODULES, ids=MODULE_NAMES)
def test_blocks_are_yaml(path):
    found = blocks(path)
    for name in ('DOCUMENTATION', 'EXAMPLES', 'RETURN'):
        assert name in found, '%s has no %s' % (path, name)
        yaml.safe_load(found[name])
    assert documentation(path)['module'] == os.path.basename(path)[:-3]


@pytest.mark.parametrize('path', MODULES, ids=MODULE_NAMES)
def test_requirements_name_what_the_code_imports(path):
    """Every package of requirements.txt the module's code imports is a requirement of the module, with the
    lower bound of requirements.txt; none other is."""
    bounds = floors()
    needed = needed_packages(path)
    listed = {}
    for requirement in documentation(path)['requirements']:
        match = re.match(r'^([A-Za-z0-9_.-]+)\s*(?:>=\s*([0-9][0-9.]*))?$', requirement.strip())
        assert match, '%s: requirement %r is not "name" or "name >= version"' % (path, requirement)
        listed[match.group(1).lower()] = match.group(2)
    assert set(listed) & set(bounds) == needed
    for name in needed:
        assert listed[name] == bounds[name], '%s: %s >= %s in requirements.txt, %s in the docs' % (
            path, name, bounds[name], listed[name])


@pytest.mark.parametrize('path', MODULES, ids=MODULE_NAMES)
def test_details_are_documented(path):
    """A ``details`` result key is documented as a dict with a sample."""
    if 'details' not in result_keys(path):
        assert 'details' not in returns(path), '%s documents details it never returns' % path
        return
    doc = returns(path).get('details')
    assert doc, '%s returns details but RETURN does not document it' % path
    assert doc['type'] == 'dict' and doc.get('returned') and doc.get('sample'), doc


@pytest.mark.parametrize('path', MODULES, ids=MODULE_NAMES)
def test_failure_facts_are_documented(path):
    """A module whose failure carries the facts of the Proxmox client's or the SSH wrapper's errors documents each
    of them as returned on failure."""
    files = reached(path)
    wanted = set()
    if merges_error_facts(path):
        for family in (PVE_CLIENT, SSH):
            if family in files:
                wanted |= error_facts(family)
    documented = returns(path)
    missing = sorted(key for key in wanted if key not in documented)
    assert not missing, '%s: failure facts not in RETURN: %s' % (path, ', '.join(missing))
    for key in wanted:
        assert 'failure' in str(documented[key].get('returned')), '%s: %s is not documented as returned on failure' % (
            path, key)


@pytest.mark.parametrize('path', MODULES, ids=MODULE_NAMES)
def test_diff_mode_attribute_says_what_the_code_returns(path):
    """diff_mode is none when run() never returns a diff, partial when it returns one only in some cases (with
    details saying which), full when it always does."""
    keys = result_keys(path)
    attribute = documentation(path)['attributes']['diff_mode']
    if 'diff' not in keys:
        assert attribute['support'] == 'none', path
    elif keys['diff']:
        assert attribute['support'] == 'partial' and attribute.get('details'), path
    else:
        assert attribute['support'] == 'full', path


@pytest.mark.parametrize('path', MODULES, ids=MODULE_NAMES)
def test_check_mode_attribute_says_what_the_code_declares(path):
    attribute = documentation(path)['attributes']['check_mode']
    if supports_check_mode(path):
        assert attribute['support'] in ('full', 'partial'), path
    else:
        assert attribute['support'] == 'none', path
