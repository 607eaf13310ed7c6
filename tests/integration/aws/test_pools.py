"""A warm pool on AWS through the shipped playbooks, on the try-out cloud (tests/integration/poolrun.py): a claim
re-tags the member's instance (marker, Name, ephemera:workspace, the lease's tags)."""

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
    test_a_create_from_a_pool_declared_with_refill_fills_it_back,
)

from .awsrun import AwsSite


class AwsPoolSite(AwsSite):

    def live(self):
        """The live instances this controller launched (the cloud seeds instances of others, one with copies of our
        tags): ours carry the client tokens the collection derives."""
        return [i for i in self.cloud.instances() if i['state'] != 'terminated'
                and (i.get('client_token') or '').startswith('ephemera-')]

    def machines(self, workspace):
        return [i['instance_id'] for i in self.live() if i['tags'].get('ephemera:workspace') == workspace]

    def ours(self):
        return {i['instance_id']: i['tags'].get('ephemera:workspace') for i in self.live()}

    def machine_name(self, instance_id):
        return [i['tags'].get('Name') for i in self.live() if i['instance_id'] == instance_id][0]

    @staticmethod
    def claimed_name(workspace, before):
        return 'agent-%s' % workspace

    def inventory_source(self):
        info = self.cloud.info
        return ({'aws_endpoint_url': info['endpoint_url']},
                {'AWS_ACCESS_KEY_ID': info['access_key_id'], 'AWS_SECRET_ACCESS_KEY': info['secret_access_key']})


@pytest.fixture(scope='module')
def site(localcloud, tmp_path_factory):
    directory = tmp_path_factory.mktemp('aws-pool')
    site = AwsPoolSite(localcloud, directory)
    yield filled_site(site, directory, localcloud.info['region'], localcloud.info['seed']['image_id'])
    print('playbook runs (playbook, workspace, seconds): %s' % site.timings)
