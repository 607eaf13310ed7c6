"""A warm pool on Hetzner Cloud through the shipped playbooks, on the try-out cloud's Hetzner fake
(tests/integration/poolrun.py): a claim re-labels the member's server (marker labels, ephemera-workspace, the lease's
labels); its name, which the marker binds, stays."""

import pytest

from tests.integration.poolrun import filled_site
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

from .hzrun import HetznerSite


class HetznerPoolSite(HetznerSite):

    def live(self):
        return [s for s in self.cloud.hetzner('servers') if (s.get('labels') or {}).get('ephemera-workspace')]

    def machines(self, workspace):
        return [str(s['id']) for s in self.live() if s['labels'].get('ephemera-workspace') == workspace]

    def ours(self):
        return {str(s['id']): s['labels'].get('ephemera-workspace') for s in self.live()}

    def machine_name(self, server_id):
        return [s['name'] for s in self.live() if str(s['id']) == str(server_id)][0]

    @staticmethod
    def claimed_name(workspace, before):
        # The server keeps the member's name (its candidate, which the marker binds).
        return before

    def inventory_source(self):
        info = self.cloud.info['hetzner']
        return {'hetzner_endpoint': info['endpoint']}, {'HCLOUD_TOKEN': info['token']}


@pytest.fixture(scope='module')
def site(localcloud, tmp_path_factory):
    directory = tmp_path_factory.mktemp('hetzner-pool')
    site = HetznerPoolSite(localcloud, directory)
    info = localcloud.info['hetzner']
    yield filled_site(site, directory, info['location'], info.get('image') or 'ubuntu-24.04')
    print('playbook runs (playbook, workspace, seconds): %s' % site.timings)
