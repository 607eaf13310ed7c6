"""The result keys several modules share are written once (plugins/doc_fragments/failure_facts.py) and copied into
each module's RETURN by scripts/module_docs.py: every copy is what the source gives, and no module documents a shared
key by a copy of its own."""

import glob
import os
import runpy
import subprocess
import sys

import pytest
import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
SCRIPT = os.path.join(ROOT, 'scripts', 'module_docs.py')
docs = runpy.run_path(SCRIPT)
MODULES = sorted(glob.glob(os.path.join(ROOT, 'plugins', 'modules', '*.py')))


def returned(path):
    with open(path) as source:
        text = source.read()
    start, end = docs['return_span'](text)
    return text[start:end]


def family_docs():
    """{family: {key: its documentation}} of the source."""
    return {name: yaml.safe_load(text) for name, text in docs['families']().items()}


def test_the_source_has_the_families():
    families = family_docs()
    assert {'kind', 'status', 'pve_message', 'transport', 'task'} <= set(families['PROXMOX'])
    assert {'address', 'attempts', 'rc', 'stderr_tail'} <= set(families['GUEST'])


def test_every_copy_is_what_the_source_gives():
    differ, problems = docs['check']()
    assert not problems
    assert not differ, 'run python scripts/module_docs.py: %s' % ', '.join(os.path.relpath(p, ROOT) for p in differ)
    done = subprocess.run([sys.executable, SCRIPT, '--check'], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.parametrize('path', MODULES, ids=[os.path.basename(p)[:-3] for p in MODULES])
def test_a_shared_key_comes_from_its_block(path):
    """A module that documents a key of a family holds the family's block; a key it documents outside the block is
    its own, and so says something else than the source."""
    text = returned(path)
    outside = yaml.safe_load(docs['MARKED'].sub('', text)) or {}
    blocks = {match.group(1) for match in docs['MARKED'].finditer(text)}
    for name, keys in family_docs().items():
        shared = sorted(set(keys) & set(yaml.safe_load(text) or {}))
        if shared:
            assert name in blocks, '%s documents %s without the block failure_facts.%s' % (path, shared, name)
        copies = sorted(key for key in set(keys) & set(outside) if outside[key] == keys[key])
        assert not copies, '%s: %s copied by hand; drop them, the block failure_facts.%s has them' % (path, copies, name)


def test_the_script_writes_the_block_and_leaves_a_modules_own_key():
    shared = docs['families']()
    begin, end = docs['BEGIN'] % 'GUEST', docs['END'] % 'GUEST'
    own = 'rc:\n  description: The status of the runner.\n  returned: failure\n  type: int\n'
    text = '\nmsg:\n  description: What happened.\n  type: str\n%s\naddress: stale\n%s\n%s' % (begin, end, own)
    new, problems = docs['written'](text, shared)
    assert not problems
    found = yaml.safe_load(new)
    guest = yaml.safe_load(shared['GUEST'])
    assert found['address'] == guest['address'] and found['stderr_tail'] == guest['stderr_tail']
    assert found['rc']['description'] == 'The status of the runner.'
    assert docs['written'](new, shared) == (new, [])
    wrong, problems = docs['written']('\n%s\n%s\n' % (docs['BEGIN'] % 'NOPE', docs['END'] % 'NOPE'), shared)
    assert problems and 'NOPE' in problems[0]
