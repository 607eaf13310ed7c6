"""A warm pool on Azure through the shipped playbooks, on the try-out cloud's ARM fake (tests/integration/poolrun.py):
a claim re-tags the member's set, all four of its resources (marker, ephemera:workspace, the lease's tags), and the
set's record in the journal with them; the set keeps its names, which its marker binds. The orphan sweep (reconcile
and cleanup, as tests/integration/azure/test_azure_sweeps.py runs them) leaves the claimed set to the workspace that
took it, and the destroy of that workspace deletes all four."""

import os
import time

import pytest

from ansible_collections.ephemera.workspaces.plugins.module_utils.core import ownership
from ansible_collections.ephemera.workspaces.plugins.module_utils.providers.azure import orphans
from tests.integration.aws import awsrun
from tests.integration.aws.awsrun import AwsSite
from tests.integration.poolrun import filled_site
# The scenario's tests, in the order they run (pytest takes a module's tests in the order its names were bound).
from tests.integration.poolrun import (  # noqa: F401 pylint: disable=unused-import  # isort: skip
    test_a_fill_makes_warm_members_each_carrying_its_own_marker_and_lease,
    test_warm_members_show_in_status_the_inventory_workspace_info_and_lease_audit,
    test_reconcile_reports_warm_members_as_pool_members_never_as_orphans_or_creates_to_resume,
    test_a_matching_create_takes_a_member_and_its_machine_is_the_workspaces,
)

INVENTORY = os.path.join(awsrun.ROOT, 'inventories', 'localcloud-azure')
WORKSPACE = 'ephemera:workspace'
SUFFIXES = ('-vm', '-nic', '-pip', '-osdisk')

pytestmark = pytest.mark.usefixtures('clean_cloud')


class AzurePoolSite(AwsSite):

    def playbook(self, playbook, env=None, check=False, timeout=300, **extra_vars):
        saved = awsrun.INVENTORY
        awsrun.INVENTORY = INVENTORY
        try:
            return super().playbook(playbook, env=env, check=check, timeout=timeout, **extra_vars)
        finally:
            awsrun.INVENTORY = saved

    def resources(self):
        return self.cloud.azure('resources')

    def live(self):
        return [r for r in self.resources() if r['kind'] == 'vm' and (r.get('tags') or {}).get(WORKSPACE)]

    def machines(self, workspace):
        return [r['id'] for r in self.live() if r['tags'][WORKSPACE] == workspace]

    def ours(self):
        return {r['id']: r['tags'][WORKSPACE] for r in self.live()}

    def machine_name(self, vm_id):
        return [r['name'] for r in self.live() if r['id'] == vm_id][0]

    @staticmethod
    def claimed_name(workspace, before):
        # The set keeps its names (its base, which the marker binds).
        return before

    def inventory_source(self):
        az = self.cloud.info['azure']
        return {}, {'AZURE_SUBSCRIPTION_ID': az['subscription_id'], 'AZURE_TENANT_ID': az['tenant_id'],
                    'AZURE_CLIENT_ID': az['client_id'], 'AZURE_CLIENT_SECRET': az['client_secret'],
                    'AZURE_AUTHORITY_HOST': az['authority_host'],
                    'EPHEMERA_AZURE_ENDPOINT_URL': az['resource_manager_url'], 'EPHEMERA_AZURE_CA_FILE': az['ca_file']}

    def set_members(self, base):
        """{name: tags} of every resource of set ``base`` the fake holds."""
        return {r['name']: r.get('tags') or {} for r in self.resources() if r['name'] in [base + s for s in SUFFIXES]}

    def provider(self):
        from ansible_collections.ephemera.workspaces.plugins.module_utils.providers.azure.provider import AzureProvider
        az = self.cloud.info['azure']
        seed = az['seed']
        return AzureProvider.from_params({
            'azure_subscription_id': az['subscription_id'], 'azure_tenant_id': az['tenant_id'],
            'azure_client_id': az['client_id'], 'azure_client_secret': az['client_secret'],
            'azure_authority_host': az['authority_host'], 'azure_endpoint_url': az['resource_manager_url'],
            'azure_ca_file': az['ca_file'], 'azure_resource_group': seed['resource_group'],
            'azure_location': seed['location'], 'azure_subnet_id': seed['subnet_id'], 'azure_vm_size': seed['vm_size'],
            'azure_ssh_public_key': self.cloud.info['ssh_public_key'], 'journal_path': self.journal_path},
            self.secret())


def base_of(ws):
    """The set's base, read from the name of the VM the workspace's record names."""
    name = ws['resource_id'].rsplit('/', 1)[1]
    assert name.endswith('-vm'), name
    return name[:-len('-vm')]


@pytest.fixture(scope='module')
def site(localcloud, tmp_path_factory):
    directory = tmp_path_factory.mktemp('azure-pool')
    site = AzurePoolSite(localcloud, directory)
    seed = localcloud.info['azure']['seed']
    yield filled_site(site, directory, seed['location'], seed['image_urn'])
    print('playbook runs (playbook, workspace, seconds): %s' % site.timings)


def test_all_four_resources_of_the_claimed_set_are_the_claiming_workspaces_as_its_record_holds(site):
    ws = site.workspace('pooled')
    member = site.workspace(ws['facts']['pool_member'])
    base = site.claimed_base = base_of(ws)
    # The workspace's record accounts for the set: its candidate is the set's VM, from which the sweep reads the base.
    assert ws['candidate_id'] == ws['resource_id'] and orphans.set_base(ws) == base
    found = site.set_members(base)
    assert sorted(found) == sorted(base + s for s in SUFFIXES)
    marker = found[base + '-vm']['ephemera:marker']
    provider = site.provider()
    assert provider.marker_fields(provider.find(ws['resource_id']))['workspace'] == 'pooled'
    with site.journal() as journal:
        record = journal.provider_state('azure/set/' + base)[0]
    for name, tags in found.items():
        assert tags[WORKSPACE] == 'pooled' and tags['ephemera:marker'] == marker, (name, tags)
        assert tags['ephemera:set'] == base
        assert {k: v for k, v in tags.items() if k.startswith('ephemera:')} == \
            record['plan']['tags'][tags['ephemera:member']], name
    assert sorted(record['ids']) == ['disk', 'nic', 'pip', 'vm'] and not record.get('claims')
    # The member's record accounts for nothing any more: its life ended with the claim.
    assert member['status'] == 'destroyed' and orphans.set_base(member) is None


def _findings(run):
    result = run.task('Compare the journal with the cluster')
    return {f['vmid']: (f['kind'], f['workspace'], f['detail']) for f in result['findings']}


def test_the_orphan_sweep_leaves_the_claimed_set_to_the_workspace_that_took_it(site):
    ws = site.workspace('pooled')
    vm = ws['resource_id']
    base = base_of(ws)
    before = site.set_members(base)
    warm = {site.workspace(m)['resource_id']: m for m in site.ours().values() if m != 'pooled'}
    # In the sweep's own pass, the claimed set is held by the live record of the workspace that took it, and a warm
    # member's set by the member's.
    with site.journal() as journal:
        sweep = site.provider().set_sweep(journal, {'azure_orphan_grace': 0})
        groups = {g.base: g for g in sweep.run(journal.list_workspaces())}
    assert (groups[base].holder, groups[base].live) == ('pooled', True)
    assert groups[base].marker == ownership.VERIFIED and groups[base].named == 'pooled'
    for vm_id, name in warm.items():
        group = groups[base_of(site.workspace(name))]
        assert (group.holder, group.live) == (name, True)
    # Reconcile deleting orphans, twice with no grace (a leftover would be deleted on the second), and the cleanup
    # sweep with apply: the claimed set stays whole, unchanged.
    for dummy in range(2):
        run = site.playbook('reconcile.yml', reconcile_resume_creates=False, ephemera_orphans='delete',
                            ephemera_azure_orphan_grace=0)
        assert run.ok, run.explain()
        found = _findings(run)
        assert found[vm][:2] == ('ok', 'pooled'), found[vm]
        assert not [f for f in found.values() if base in (f[2] or '') and f[0] != 'ok'], found
        time.sleep(1)
    run = site.playbook('cleanup.yml', apply=True, ephemera_azure_orphan_grace=0)
    assert run.ok, run.explain()
    entries = {e['id']: e for e in run.task('Sweep the pool by labels')['entries']}
    assert entries[vm]['action'] != 'deleted', entries[vm]
    assert [e for e in entries.values() if e['action'] == 'deleted'] == []
    assert site.set_members(base) == before


# pylint: disable-next=unused-import,wrong-import-position
from tests.integration.poolrun import (  # noqa: E402,F401  # isort: skip
    test_a_create_that_matches_no_pool_is_cold,
    test_the_destroy_of_the_claimed_workspace_leaves_nothing,
)


def test_none_of_the_four_resources_of_the_claimed_set_is_left(site):
    assert site.set_members(site.claimed_base) == {}
    with site.journal() as journal:
        record = journal.provider_state('azure/set/' + site.claimed_base)[0]
    assert sorted(record['claims']) == ['disk', 'nic', 'pip', 'vm']


# pylint: disable-next=unused-import,wrong-import-position
from tests.integration.poolrun import (  # noqa: E402,F401  # isort: skip
    test_the_next_fill_refills,
)
