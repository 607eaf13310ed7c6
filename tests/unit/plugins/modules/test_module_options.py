"""Every module's argument_spec (its module_args(), which its action plugin validates a task against too) is the set
of options its documentation shows, fragments merged in as ansible-doc merges them: same names, types, defaults,
choices (in any order), elements and required."""

import glob
import importlib
import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))))
MODULES = sorted(os.path.basename(path)[:-3] for path in glob.glob(os.path.join(ROOT, 'plugins', 'modules', '*.py')))
ANSIBLE_DOC = os.path.join(os.path.dirname(sys.executable), 'ansible-doc')


@pytest.fixture(scope='module')
def documented():
    """{module: its options as ansible-doc shows them}."""
    proc = subprocess.run([ANSIBLE_DOC, '--json'] + ['ephemera.workspaces.%s' % name for name in MODULES],
                          capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    return {name.split('.')[-1]: shown['doc'].get('options') or {} for name, shown in json.loads(proc.stdout).items()}


@pytest.mark.parametrize('name', MODULES)
def test_the_argument_spec_is_the_documented_options(name, documented):
    module = importlib.import_module('ansible_collections.ephemera.workspaces.plugins.modules.%s' % name)
    spec = module.module_args()['argument_spec']
    options = documented[name]
    assert sorted(spec) == sorted(options)
    for option, declared in spec.items():
        shown = options[option]
        assert shown.get('type', 'str') == declared.get('type', 'str'), option
        assert shown.get('default') == declared.get('default'), option
        assert sorted(shown.get('choices') or []) == sorted(declared.get('choices') or []), option
        assert shown.get('elements') == declared.get('elements'), option
        assert bool(shown.get('required')) == bool(declared.get('required')), option
