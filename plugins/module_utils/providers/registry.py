# -*- coding: utf-8 -*-
# Copyright: ephemera.workspaces contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The registry of providers: each one's name, the class that serves it (imported when it is first used), the one
way a module or a flow gets a provider (bind, api_from_params) and the one way a module gets the providers' options
(provider_argument_spec). The package itself is empty, so that a provider's modules can import the seam
(providers/base.py) without importing the registry that names them."""

import importlib
import os

from ansible.module_utils.basic import env_fallback

from ansible_collections.ephemera.workspaces.plugins.module_utils.providers.base import (
    DEFAULT_PROVIDER,
    PROVIDER_ENV,
    Provider,
    provider_of,
)

# name -> (module, class) of each provider, in the order the inventory reads them.
PROVIDERS = {
    'proxmox': ('ansible_collections.ephemera.workspaces.plugins.module_utils.providers.proxmox.provider',
                'ProxmoxProvider'),
    'aws': ('ansible_collections.ephemera.workspaces.plugins.module_utils.providers.aws.provider', 'AwsProvider'),
    'hetzner': ('ansible_collections.ephemera.workspaces.plugins.module_utils.providers.hetzner.provider',
                'HetznerProvider'),
    'gcp': ('ansible_collections.ephemera.workspaces.plugins.module_utils.providers.gcp.provider', 'GcpProvider'),
    'azure': ('ansible_collections.ephemera.workspaces.plugins.module_utils.providers.azure.provider', 'AzureProvider'),
}

# The providers whose SDKs a run loads before it forks its workers, besides Proxmox VE's (a comma-separated list).
PRELOAD_ENV = 'EPHEMERA_PRELOAD'
# Each provider's client module but the default one's: its LIBRARIES are the SDK it imports when it is first used.
CLIENTS = {name: module.rsplit('.', 1)[0] + '.client' for name, (module, _cls) in PROVIDERS.items()
           if name != DEFAULT_PROVIDER}


def preload(environ=None):
    """Import the default provider (Proxmox VE) with the libraries its client needs (requests, proxmoxer), and the
    SDKs of the cloud providers EPHEMERA_PRELOAD names (``gcp``, ``aws,azure``, ...) or EPHEMERA_PROVIDER selects,
    where a run forks its workers from (plugin_utils/in_process.py): each worker then finds them loaded instead of
    importing them again for its one task. Without either a cloud SDK is imported only by the tasks that use it; a
    name that is no cloud provider, or an SDK that is not installed, is passed over (the task that needs it says what
    is missing)."""
    provider_class('proxmox')
    load_pve_libraries()
    environ = os.environ if environ is None else environ
    named = ','.join(environ.get(k) or '' for k in (PRELOAD_ENV, PROVIDER_ENV)).replace(' ', '').lower()
    for name in [n for n in set(named.split(',')) if n in CLIENTS]:
        provider_class(name)
        for library in importlib.import_module(CLIENTS[name]).LIBRARIES:
            try:
                importlib.import_module(library)
            except ImportError:
                break


def load_pve_libraries():
    """Import the libraries the Proxmox VE client needs (requests, proxmoxer), once: (the missing one, its traceback),
    or (None, None)."""
    from ansible_collections.ephemera.workspaces.plugins.module_utils.providers.proxmox import client
    return client.load_libraries()


def provider_class(name):
    """The provider class registered as ``name``."""
    package(name)
    module, cls = PROVIDERS[name]
    return getattr(importlib.import_module(module), cls)


def package(name):
    """The dotted name of provider ``name``'s package (ValueError: no such provider)."""
    if name not in PROVIDERS:
        raise ValueError('Unknown provider %r; the providers are %s.' % (name, ', '.join(sorted(PROVIDERS))))
    return PROVIDERS[name][0].rsplit('.', 1)[0]


def inventory_hook(name):
    """What the inventory needs of provider ``name`` (base.InventoryHook): HOOK of its package's inventory.py, which
    imports neither the provider's code nor its SDK until it connects."""
    return importlib.import_module(package(name) + '.inventory').HOOK


def provider_options(name):
    """Provider ``name``'s options.py: the options it adds to a module (``argument_spec()``, a doc fragment's options),
    with neither the provider's code nor its SDK."""
    return importlib.import_module(package(name) + '.options')


def provider_option():
    """The option that selects the provider (doc fragment ephemera.workspaces.provider): one of the registered ones,
    Proxmox VE when neither the task nor EPHEMERA_PROVIDER names one."""
    return dict(type='str', default=DEFAULT_PROVIDER, choices=list(PROVIDERS), fallback=(env_fallback, [PROVIDER_ENV]))


def provider_argument_spec(names=None):
    """The options the providers ``names`` (by default every registered one) add to a module's argument_spec, merged
    in the registry's order; by default with ``provider`` first, which chooses among them. Two providers may
    declare one option (the same spec twice is one option); declared differently, it is refused with a ValueError
    naming both."""
    for name in names or ():
        package(name)
    spec = {'provider': provider_option()} if names is None else {}
    declared_by = dict.fromkeys(spec, 'the registry')
    for name in [n for n in PROVIDERS if names is None or n in names]:
        for option, declared in provider_options(name).argument_spec().items():
            if option in spec and spec[option] != declared:
                raise ValueError('Providers %r and %r declare option %r differently: %r and %r.' % (
                    declared_by[option], name, option, spec[option], declared))
            spec[option] = declared
            declared_by.setdefault(option, name)
    return spec


def inventory_hooks():
    """Every provider's inventory hook, in the registry's order."""
    return [inventory_hook(name) for name in PROVIDERS]


def bind(api, secret=None):
    """A provider that signs with ``secret``: ``api`` itself (a Provider), or the provider that speaks the API of the
    client ``api`` (a PveClient, say). None for None."""
    if api is None:
        return None
    if isinstance(api, Provider):
        return api if secret is None or api.secret == secret else api.with_secret(secret)
    for name in PROVIDERS:
        cls = provider_class(name)
        if cls.serves(api):
            return cls(api, secret)
    raise TypeError('%r is neither a provider nor the client of one (%s).' % (api, ', '.join(sorted(PROVIDERS))))


def api_from_params(params, secret=None):
    """What a module acts through, from its options (doc fragments ephemera.workspaces.proxmox and .aws): the
    Proxmox VE client, or the provider named by ``provider``."""
    if provider_of(params) != DEFAULT_PROVIDER:
        return provider_class(params['provider']).from_params(params, secret)
    from ansible_collections.ephemera.workspaces.plugins.module_utils.providers.proxmox.client import client_from_params
    return client_from_params(params)
