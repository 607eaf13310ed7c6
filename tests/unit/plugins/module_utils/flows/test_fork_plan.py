"""What a fork asks for, checked before anything is copied (flows/fork.py plan_children)."""

import pytest

from ansible_collections.ephemera.workspaces.plugins.module_utils.flows.fork import ForkError, plan_children
from ansible_collections.ephemera.workspaces.plugins.module_utils.providers.aws.provider import AwsProvider
from ansible_collections.ephemera.workspaces.plugins.module_utils.providers.azure.provider import AzureProvider
from ansible_collections.ephemera.workspaces.plugins.module_utils.providers.gcp.provider import GcpProvider
from ansible_collections.ephemera.workspaces.plugins.module_utils.providers.hetzner.provider import HetznerProvider
from ansible_collections.ephemera.workspaces.plugins.module_utils.providers.proxmox.provider import ProxmoxProvider

PARENT = {'name': 'fix', 'purpose': 'Fix the login'}


def test_count_names_the_children_after_the_parent_with_its_purpose():
    assert plan_children(PARENT, count=3) == [{'name': 'fix-%d' % i, 'purpose': 'Fix the login'} for i in (1, 2, 3)]


def test_children_take_their_own_purpose_or_the_common_one():
    plan = plan_children(PARENT, children=[{'name': 'a', 'purpose': 'Try A'}, 'b'], purpose='Try something')
    assert plan == [{'name': 'a', 'purpose': 'Try A'}, {'name': 'b', 'purpose': 'Try something'}]


@pytest.mark.parametrize('kwargs, words', [
    ({'count': 17}, 'at most 16'),
    ({'count': 0}, 'at least 1'),
    ({}, 'how many children'),
    ({'count': 2, 'children': ['a']}, 'not both'),
    ({'children': ['a', 'a']}, 'given twice'),
    ({'children': ['fix']}, 'given twice'),
    ({'children': ['Bad_Name']}, 'Invalid workspace name'),
    ({'children': [{'name': 'a', 'repo': 'x'}]}, 'only name and purpose'),
    ({'children': [{'name': 'a', 'purpose': '-rf'}]}, 'starts with "-"'),
])
def test_bad_plans_are_refused_saying_what_to_do(kwargs, words):
    with pytest.raises(ForkError) as err:
        plan_children(PARENT, **kwargs)
    assert words in str(err.value)


def test_the_limit_can_be_raised():
    assert len(plan_children(PARENT, count=20, limit=20)) == 20


def test_proxmox_and_aws_fork_and_the_others_say_why():
    assert ProxmoxProvider.fork_refusal is None
    assert AwsProvider.fork_refusal is None
    for provider in (HetznerProvider, GcpProvider, AzureProvider):
        assert 'not built yet' in provider.fork_refusal


def test_proxmox_clones_of_a_snapshot_take_turns_and_aws_launches_do_not():
    # A PVE clone holds its source's lock: disk until its task ends (pve-container's clone, and fakepve's).
    assert ProxmoxProvider.snapshot_copies_take_turns is True
    assert AwsProvider.snapshot_copies_take_turns is False
