"""A warm pool on Compute Engine through the shipped playbooks, on the try-out cloud's Compute Engine fake
(tests/integration/poolrun.py): a claim re-writes the member's marker (metadata) and labels (ephemera-workspace, the
lease's); its name, which the marker binds, stays."""

import pytest

from tests.integration.poolrun import filled_site, members
# The scenario's tests, in the order they run (pytest takes a module's tests in the order its names were bound).
from tests.integration.poolrun import (  # noqa: F401 pylint: disable=unused-import  # isort: skip
    test_a_fill_makes_warm_members_each_carrying_its_own_marker_and_lease,
    test_warm_members_show_in_status_the_inventory_workspace_info_and_lease_audit,
    test_reconcile_reports_warm_members_as_pool_members_never_as_orphans_or_creates_to_resume,
    test_a_matching_create_takes_a_member_and_its_machine_is_the_workspaces,
    test_a_create_that_matches_no_pool_is_cold,
    test_the_destroy_of_the_claimed_workspace_leaves_nothing,
    test_the_next_fill_refills,
)

from .gcprun import GcpSite


class GcpPoolSite(GcpSite):

    def live(self):
        return [i for i in self.cloud.gcp('instances') if (i.get('labels') or {}).get('ephemera-workspace')]

    def machines(self, workspace):
        return [i['name'] for i in self.live() if i['labels'].get('ephemera-workspace') == workspace]

    def ours(self):
        return {i['name']: i['labels'].get('ephemera-workspace') for i in self.live()}

    def machine_name(self, name):
        return name

    @staticmethod
    def claimed_name(workspace, before):
        # The instance keeps its name (its candidate, which the marker binds).
        return before

    def inventory_source(self):
        info = self.cloud.info['gcp']
        return {'gcp_endpoint_url': info['endpoint'], 'gcp_project': info['project'], 'gcp_auth_kind': 'anonymous'}, {}


@pytest.fixture(scope='module')
def site(localcloud, tmp_path_factory):
    directory = tmp_path_factory.mktemp('gcp-pool')
    site = GcpPoolSite(localcloud, directory)
    info = localcloud.info['gcp']
    yield filled_site(site, directory, info['zone'], info['image'])
    print('playbook runs (playbook, workspace, seconds): %s' % site.timings)
    assert localcloud.gcp('violations') == []


def test_a_members_instance_has_no_termination_time_that_would_cut_the_workspaces_lease(site):
    # Compute Engine deletes an instance at its termination time, and changes it only on a stopped one: a member is
    # made without one, so that the workspace that takes it is not deleted at the end of the member's lease.
    provider = site.provider()
    for record in members(site, 'warm'):
        assert provider.deadline_of(site.workspace(record['member'])['resource_id']) == (None, None)
