"""The create flow's pure helpers: request checks, NIC values (the Proxmox provider's), addresses."""

import pytest

from ansible_collections.ephemera.workspaces.plugins.module_utils.flows.create import (
    CreateError,
    address_candidates,
    usable_address,
    validate_name,
    validate_ref,
    validate_repo,
)
from ansible_collections.ephemera.workspaces.plugins.module_utils.providers.proxmox.provider import (
    interface_addresses,
    merge_net as _merge_net,
    same_net as _same_net,
)


@pytest.mark.parametrize('url', [
    'https://git.example.com/app.git', 'http://127.0.0.1:8080/app.git', 'ssh://git@git.example.com:2222/app.git',
    'git://git.example.com/app.git', 'file:///srv/git/app.git', 'git@github.com:org/app.git',
    'host.example.com:app.git', '/srv/git/app.git',
])
def test_repository_urls_git_can_use_are_accepted(url):
    validate_repo(url)


@pytest.mark.parametrize('url, said', [
    ('', 'is not a URL'), ('not a url', 'is not a URL'), ('--upload-pack=touch /tmp/x', 'is not a URL'),
    ('-oProxyCommand=x', 'is not a URL'), ('ftp://example.com/app.git', 'use one of the schemes'),
    ('https:///app.git', 'with a host'), ('srv/git/app.git', 'is not a URL'), (' https://x/y', 'is not a URL'),
    ('https://x/y\n', 'is not a URL'), (None, 'is not a URL'),
])
def test_repository_urls_git_cannot_use_or_that_read_as_options_are_refused(url, said):
    with pytest.raises(CreateError, match=said):
        validate_repo(url)


@pytest.mark.parametrize('url', ['https://bot:hunter2@git.example.com/app.git', 'https://hunter2@git.example.com/app.git',
                                 'https://oauth2@gitlab.example.com/app.git'])
def test_a_login_in_the_url_is_refused_and_not_repeated(url):
    # A user name alone is refused too: a token is often given in its place.
    with pytest.raises(CreateError) as caught:
        validate_repo(url)
    assert 'carries a login' in str(caught.value) and 'git_token' in str(caught.value)
    assert 'hunter2' not in str(caught.value) and 'oauth2' not in str(caught.value)


@pytest.mark.parametrize('ref', ['main', 'feature/login', 'v1.2.3', 'HEAD', '3f0c9a1b', 'release-2026.12'])
def test_refs_git_can_name_are_accepted(ref):
    validate_ref(ref)


@pytest.mark.parametrize('ref', ['', '-b', '--orphan', 'a..b', 'a b', 'a~1', 'a^', 'a:b', 'a?', 'a*', 'a[', 'a\\b',
                                 'x.lock', 'x/', 'x.', '.x', 'a/.b', 'a//b', '@', 'a@{1}', None])
def test_refs_git_refuses_or_that_read_as_options_are_refused(ref):
    with pytest.raises(CreateError, match='is not a branch, tag or commit name'):
        validate_ref(ref)


@pytest.mark.parametrize('name', ['a', 'fix-login', 'w1', 'x' * 40])
def test_workspace_names_are_host_name_parts(name):
    validate_name(name)


@pytest.mark.parametrize('name', ['', 'Fix', 'a_b', '-a', 'a-', 'x' * 41, 'a.b'])
def test_other_workspace_names_are_refused(name):
    with pytest.raises(CreateError, match='Invalid workspace name'):
        validate_name(name)


TEMPLATE_NIC = 'name=eth0,bridge=vmbr0,firewall=1,hwaddr=BC:24:11:00:23:28,ip=dhcp,type=veth'


def test_the_template_nic_keeps_its_mac_firewall_and_type():
    merged = _merge_net(TEMPLATE_NIC, 'name=eth0,bridge=vmbr1,ip=10.0.0.5/24,gw=10.0.0.1')
    assert merged == 'name=eth0,bridge=vmbr1,firewall=1,hwaddr=BC:24:11:00:23:28,ip=10.0.0.5/24,type=veth,gw=10.0.0.1'


def test_dhcp_drops_a_gateway_the_template_had():
    merged = _merge_net('name=eth0,bridge=vmbr0,gw=10.0.0.1,ip=10.0.0.9/24', 'name=eth0,bridge=vmbr0,ip=dhcp')
    assert merged == 'name=eth0,bridge=vmbr0,ip=dhcp'
    assert not _same_net('name=eth0,bridge=vmbr0,gw=10.0.0.1,ip=10.0.0.9/24', merged)


def test_nic_values_compare_whatever_the_order():
    assert _same_net(TEMPLATE_NIC, 'type=veth,ip=dhcp,hwaddr=BC:24:11:00:23:28,firewall=1,bridge=vmbr0,name=eth0')
    assert not _same_net(TEMPLATE_NIC, TEMPLATE_NIC.replace('ip=dhcp', 'ip=10.0.0.5/24'))


@pytest.mark.parametrize('text, first, last, count', [
    ('10.0.0.10-10.0.0.12', '10.0.0.10', '10.0.0.12', 3),
    ('10.0.0.0/30', '10.0.0.1', '10.0.0.2', 2),
    ('10.0.0.7', '10.0.0.7', '10.0.0.7', 1),
])
def test_address_ranges(text, first, last, count):
    addresses = address_candidates(text)
    assert (addresses[0], addresses[-1], len(addresses)) == (first, last, count)


@pytest.mark.parametrize('text', ['10.0.0.12-10.0.0.10', 'nope', '', '10.0.0.300'])
def test_bad_address_ranges_are_refused(text):
    with pytest.raises(CreateError, match='address_range'):
        address_candidates(text)


def test_the_usable_address_is_the_first_ipv4_of_a_nic_from_ip_addresses():
    interfaces = [
        {'name': 'lo', 'ip-addresses': [{'ip-address-type': 'inet', 'ip-address': '127.0.0.1'}]},
        {'name': 'eth0', 'inet': '10.0.0.9/24', 'ip-addresses': [
            {'ip-address-type': 'inet6', 'ip-address': 'fe80::1'},
            {'ip-address-type': 'inet', 'ip-address': '10.0.0.5'},
            {'ip-address-type': 'inet', 'ip-address': '10.0.0.9'}]},
    ]
    addresses = interface_addresses(interfaces)
    assert usable_address(addresses) == '10.0.0.5'
    assert usable_address(addresses, expected='10.0.0.9') == '10.0.0.9'
    assert usable_address(addresses, expected='10.0.0.77') is None
    assert usable_address(interface_addresses(None)) is None
