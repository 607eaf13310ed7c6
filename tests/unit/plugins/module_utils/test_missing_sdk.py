"""A cloud provider whose SDK is not installed says which packages it needs and which of the collection's requirement
files installs them (requirements-<provider>.txt), before anything is done; the SDK is imported only when that
provider is used."""

import sys

import pytest

from ansible_collections.ephemera.workspaces.plugins.module_utils.providers import base
from ansible_collections.ephemera.workspaces.plugins.module_utils.providers.aws import client as aws
from ansible_collections.ephemera.workspaces.plugins.module_utils.providers.azure import client as azure
from ansible_collections.ephemera.workspaces.plugins.module_utils.providers.gcp import client as gcp
from ansible_collections.ephemera.workspaces.plugins.module_utils.providers.hetzner import client as hetzner


def without(monkeypatch, *names):
    """Make ``import name`` fail for each name (and its submodules), as on a controller without the package."""
    for name in list(sys.modules):
        if name in names or any(name.startswith(n + '.') for n in names):
            monkeypatch.delitem(sys.modules, name)
    for name in names:
        monkeypatch.setitem(sys.modules, name, None)


@pytest.mark.parametrize('provider, packages, requirements, make', [
    ('AWS', ['boto3'], 'requirements-aws.txt', lambda: aws.Ec2('us-east-1')),
    ('Hetzner', ['hcloud'], 'requirements-hetzner.txt', lambda: hetzner.HCloud('token')),
    ('Compute Engine', ['google'], 'requirements-gcp.txt', gcp._google),
    ('Azure', ['azure'], 'requirements-azure.txt', lambda: azure.Arm.connect('sub')),
])
def test_a_missing_sdk_names_its_requirement_file(monkeypatch, provider, packages, requirements, make):
    without(monkeypatch, *packages)
    with pytest.raises(base.InvalidRequest) as refused:
        make()
    message = str(refused.value)
    assert message.startswith('The %s provider needs ' % provider), message
    assert 'pip install -r %s' % requirements in message and 'Nothing was done.' in message
