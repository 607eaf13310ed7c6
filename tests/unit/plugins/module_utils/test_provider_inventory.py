"""Each provider's inventory hook (providers/<name>/inventory.py, found through registry.inventory_hook): what the
inventory plugin needs of it, so that the plugin names no provider and imports no provider package."""

import subprocess
import sys

import pytest
import yaml

from ansible_collections.ephemera.workspaces.plugins.inventory import workspaces as inv
from ansible_collections.ephemera.workspaces.plugins.module_utils.providers import base, registry
from ansible_collections.ephemera.workspaces.plugins.module_utils.providers.proxmox.client import (
    PveAuthError,
    PvePermissionDenied,
    PveTlsError,
    PveUnreachable,
)

CLOUDS = [name for name in registry.PROVIDERS if name != base.DEFAULT_PROVIDER]
OPTIONS = yaml.safe_load(inv.DOCUMENTATION)['options']


def options(**given):
    return given.get


def test_every_provider_has_a_hook_of_its_name_and_the_default_one_lists_the_cluster():
    hooks = registry.inventory_hooks()
    assert [hook.name for hook in hooks] == list(registry.PROVIDERS)
    assert [hook.name for hook in hooks if hook.listing == 'cluster'] == [base.DEFAULT_PROVIDER]
    assert isinstance(registry.inventory_hook(base.DEFAULT_PROVIDER), base.ClusterHook)
    assert set(hook.listing for hook in hooks) <= {'cluster', 'instances', 'sets'}
    with pytest.raises(ValueError, match='Unknown provider'):
        registry.inventory_hook('nimbus')


def inventory_options(name):
    """The options provider ``name`` gives the inventory: INVENTORY of its doc fragment, which the inventory's
    DOCUMENTATION extends."""
    import importlib
    fragment = importlib.import_module('ansible_collections.ephemera.workspaces.plugins.doc_fragments.' + name)
    assert 'ephemera.workspaces.%s.inventory' % name in yaml.safe_load(inv.DOCUMENTATION)['extends_documentation_fragment']
    return yaml.safe_load(fragment.ModuleDocFragment.INVENTORY)['options']


@pytest.mark.parametrize('name', CLOUDS)
def test_a_cloud_hook_names_an_option_of_the_inventory_for_its_scopes(name):
    hook = registry.inventory_hook(name)
    own = inventory_options(name)
    assert own[hook.scope_option]['type'] == 'list'
    # Every option a provider gives the inventory is its own (named after it), none is the inventory's too.
    assert all(option.startswith(name + '_') for option in own) and not set(own) & set(OPTIONS)
    for option in hook.params(options(), 'somewhere'):
        if option not in ('aws_region', 'hetzner_location', 'gcp_zone'):
            assert option in own, option


def test_the_cluster_hook_reads_options_the_inventory_has():
    """The connection options come from the doc fragment the inventory extends (ephemera.workspaces.proxmox)."""
    from ansible_collections.ephemera.workspaces.plugins.doc_fragments.proxmox import ModuleDocFragment
    hook = registry.inventory_hook(base.DEFAULT_PROVIDER)
    fragment = yaml.safe_load(ModuleDocFragment.DOCUMENTATION)['options']
    assert 'ephemera.workspaces.%s' % hook.name in yaml.safe_load(inv.DOCUMENTATION)['extends_documentation_fragment']
    assert set(hook.connection_options) | {hook.endpoint_option} <= set(fragment)


def test_the_hooks_load_no_sdk_and_no_provider_code_before_they_connect():
    program = '\n'.join((
        'import sys',
        'from ansible_collections.ephemera.workspaces.plugins.module_utils.providers import registry',
        'registry.inventory_hooks()',
        'loaded = [m for m in sys.modules if m.split(".")[0] in ("boto3", "hcloud", "google", "azure")',
        '          or m.endswith(tuple(".%s.provider" % n for n in ("aws", "hetzner", "gcp", "azure")))]',
        'print(loaded)',
    ))
    done = subprocess.run([sys.executable, '-c', program], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == '[]'


@pytest.mark.parametrize('name, given, scope, text', [
    ('aws', {}, 'eu-west-1', 'the AWS credentials of the environment (region eu-west-1): no. The inventory needs '
                             'ec2:DescribeInstances.'),
    ('aws', {'aws_profile': 'p', 'aws_endpoint_url': 'http://x'}, 'eu-west-1',
     'options aws_profile, aws_endpoint_url (region eu-west-1): no. The inventory needs ec2:DescribeInstances.'),
    ('hetzner', {}, 'fsn1', 'option hetzner_token (or HCLOUD_TOKEN) (location fsn1): no.'),
    ('gcp', {}, 'europe-west1-b', 'options gcp_project, gcp_auth_kind, gcp_service_account_file (zone europe-west1-b): '
                                  'no. The inventory needs compute.instances.list.'),
    ('azure', {}, 'rg1', 'options azure_subscription_id, azure_tenant_id, azure_client_id, azure_client_secret '
                         '(resource group rg1): no. The inventory needs to read the resource group (Reader).'),
])
def test_the_advice_for_a_refusal_names_the_options_and_the_scope(name, given, scope, text):
    assert registry.inventory_hook(name).refused(options(**given), scope, base.Refused('no.')) == text


@pytest.mark.parametrize('name, sdk', [
    ('aws', 'boto3 on the controller (pip install boto3)'),
    ('hetzner', 'hcloud on the controller (pip install hcloud)'),
    ('gcp', 'google-cloud-compute on the controller (pip install google-cloud-compute)'),
    ('azure', 'azure-identity, azure-mgmt-compute and azure-mgmt-network on the controller (pip install '
              'azure-identity azure-mgmt-compute azure-mgmt-network)'),
])
def test_a_connection_that_cannot_be_made_says_what_to_install_or_to_set(monkeypatch, name, sdk):
    hook = registry.inventory_hook(name)

    class Refusing:
        @classmethod
        def from_params(cls, params, secret):
            raise base.Refused('bad options')

    def missing():
        raise ImportError('No module named sdk')

    monkeypatch.setattr(hook, 'provider_class', missing)
    with pytest.raises(base.InventoryConfigError) as caught:
        hook.connect(options(), 'here', None)
    assert str(caught.value) == 'the %s workspaces need %s: No module named sdk' % (name, sdk)
    monkeypatch.setattr(hook, 'provider_class', lambda: Refusing)
    scope = None if hook.listing == 'sets' else 'here'
    with pytest.raises(base.InventoryConfigError) as caught:
        hook.connect(options(), scope, None)
    assert str(caught.value) == '%s: bad options' % hook.where(options(), scope)


def test_a_set_hook_reads_the_scope_a_record_was_made_in():
    hook = registry.inventory_hook('azure')
    assert (hook.listing, hook.scope_key, hook.scope_word) == ('sets', 'resource_group', 'resource group')
    assert hook.record_scope({'params': {'launch': {'resource_group': 'rg1'}}}) == 'rg1'
    assert hook.record_scope({'params': {}}) is None
    assert registry.inventory_hook('aws').record_scope({'location': 'eu-west-1'}) == 'eu-west-1'


def test_the_cluster_hook_connects_only_with_a_host(monkeypatch):
    hook = registry.inventory_hook(base.DEFAULT_PROVIDER)
    for name in hook.env_vars.values():
        monkeypatch.delenv(name, raising=False)
    assert hook.connect_cluster({}) is None
    monkeypatch.setenv('PROXMOX_VALIDATE_CERTS', 'maybe')
    with pytest.raises(base.InventoryConfigError, match='^connection options: PROXMOX_VALIDATE_CERTS=.* boolean'):
        hook.connect_cluster({'api_host': 'pve1'})


def test_the_cluster_hook_tells_misconfiguration_from_an_unreachable_cluster():
    hook = registry.inventory_hook(base.DEFAULT_PROVIDER)

    class Client:
        auth_mode = 'token'

    class Provider:
        client = Client()

    def where(*names):
        return 'options %s' % ', '.join(names)

    assert hook.misconfigured(PveAuthError('401'), Provider(), where) == 'options api_token_id, api_token_secret: 401'
    Client.auth_mode = 'password'
    assert hook.misconfigured(PveAuthError('401'), Provider(), where) == 'options api_user, api_password: 401'
    assert hook.misconfigured(PveTlsError('tls'), Provider(), where) == 'options ca_file, validate_certs: tls'
    assert hook.misconfigured(PvePermissionDenied('403'), Provider(), where) == (
        'options api_user: 403 The inventory needs VM.Audit on /vms (or on the pools).')
    assert hook.misconfigured(PveUnreachable('down'), Provider(), where) is None
