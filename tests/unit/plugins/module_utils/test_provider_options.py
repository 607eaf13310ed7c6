"""A module gets every provider's options one way: registry.provider_argument_spec, which merges the options.py of
each registered provider in the registry's order and refuses two providers that declare one option differently."""

import importlib
import os
import subprocess
import sys
import uuid

import pytest

from ansible_collections.ephemera.workspaces.plugins.module_utils.providers import registry

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))))
# The top-level packages of the providers' SDKs and of the libraries their clients need.
SDKS = ('boto3', 'botocore', 'hcloud', 'google', 'azure', 'proxmoxer', 'requests', 'urllib3')


def made_up_provider(tmp_path, monkeypatch, options):
    """Register provider ``madeup`` (after the real ones), whose package on sys.path holds only an options.py
    declaring ``options`` (the source of the dict its argument_spec() returns)."""
    name = 'madeup_provider_%s' % uuid.uuid4().hex  # a package of its own for each test: none is cached
    package = tmp_path / name
    package.mkdir()
    (package / '__init__.py').write_text('')
    (package / 'options.py').write_text('def argument_spec():\n    return %s\n' % options)
    monkeypatch.syspath_prepend(str(tmp_path))
    importlib.invalidate_caches()
    monkeypatch.setattr(registry, 'PROVIDERS', dict(registry.PROVIDERS, madeup=(name + '.provider', 'MadeUpProvider')))


def test_every_registered_provider_adds_its_options_in_the_registrys_order():
    spec = registry.provider_argument_spec()
    expected = ['provider']
    for name in registry.PROVIDERS:
        expected += [option for option in registry.provider_options(name).argument_spec() if option not in expected]
    assert list(spec) == expected
    assert {'api_host', 'provider', 'aws_region', 'hetzner_token', 'gcp_zone', 'azure_vm_size'} <= set(spec)


def test_the_options_of_some_providers_only():
    spec = registry.provider_argument_spec(['proxmox'])
    assert list(spec) == list(registry.provider_options('proxmox').argument_spec())
    assert spec['api_password']['no_log'] is True and 'provider' not in spec
    with pytest.raises(ValueError, match="Unknown provider 'nosuch'"):
        registry.provider_argument_spec(['nosuch'])


def test_a_registered_provider_gets_its_options_into_the_spec(tmp_path, monkeypatch):
    made_up_provider(tmp_path, monkeypatch, "dict(madeup_token=dict(type='str', no_log=True), "
                                            "api_port=dict(type='int', default=8006))")
    spec = registry.provider_argument_spec()
    assert list(spec)[-1] == 'madeup_token' and spec['madeup_token'] == dict(type='str', no_log=True)
    # The same option declared the same way by two providers is one option, where the first declared it.
    assert spec['api_port'] == dict(type='int', default=8006) and list(spec).index('api_port') == 2
    # The provider option offers it too.
    assert spec['provider']['choices'] == list(registry.PROVIDERS) and spec['provider']['choices'][-1] == 'madeup'


def test_two_providers_declaring_one_option_differently_are_refused(tmp_path, monkeypatch):
    made_up_provider(tmp_path, monkeypatch, "dict(api_port=dict(type='str'))")
    with pytest.raises(ValueError, match="Providers 'proxmox' and 'madeup' declare option 'api_port' differently"):
        registry.provider_argument_spec()


@pytest.mark.parametrize('name', sorted(registry.PROVIDERS))
def test_a_providers_options_are_cheap_to_import(name):
    """options.py holds declarations only: importing it loads none of the provider's other files nor an SDK."""
    program = '\n'.join((
        'import sys',
        'from tests import conftest',
        'from ansible_collections.ephemera.workspaces.plugins.module_utils.providers import registry',
        'before = set(sys.modules)',
        'registry.provider_options(%r).argument_spec()' % name,
        'print("\\n".join(sorted(set(sys.modules) - before)))',
    ))
    done = subprocess.run([sys.executable, '-c', program], capture_output=True, text=True, check=True, cwd=ROOT)
    loaded = done.stdout.split()
    package = registry.package(name)
    assert [module for module in loaded if module.startswith(package + '.')] == [package + '.options'], loaded
    assert not [module for module in loaded if module.split('.')[0] in SDKS], loaded


def test_the_provider_option_offers_every_registered_provider_as_its_doc_fragment_says():
    from ansible_collections.ephemera.workspaces.plugins.doc_fragments.provider import ModuleDocFragment
    import yaml
    documented = yaml.safe_load(ModuleDocFragment.DOCUMENTATION)['options']['provider']
    spec = registry.provider_argument_spec()['provider']
    assert documented['choices'] == spec['choices'] == list(registry.PROVIDERS)
    assert documented['default'] == spec['default'] == 'proxmox'
    # Every provider but the default one has a client whose SDK a run may load before it forks (EPHEMERA_PRELOAD).
    assert sorted(registry.CLIENTS) == sorted(set(registry.PROVIDERS) - {'proxmox'})
    for name, module in registry.CLIENTS.items():
        assert importlib.import_module(module).LIBRARIES, name
