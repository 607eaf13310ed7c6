"""The clouds' pool rows (tests/faults/cloudpools.py, awspools.py): their parts are registered beside the others,
their ci points are the Proxmox pools rows' with each provider's own calls, and the Azure set check reads a set the
way the matrix does. The matrix itself (python -m tests.faults matrix --part hetzner-pools|gcp-pools|azure-pools) and
tests/integration/faults/test_pool_detectors.py run them on the try-out cloud."""

from tests.faults import __main__ as faults_main
from tests.faults import awspools, azure, cloudpools


def test_the_three_parts_are_in_the_clouds_group_and_not_in_all():
    for part in ('hetzner-pools', 'gcp-pools', 'azure-pools'):
        assert part in faults_main.PARTS and part in cloudpools.MATRICES
        assert part in faults_main.GROUPS['clouds'] and part not in faults_main.GROUPS['all']


def test_the_ci_points_name_each_providers_own_calls():
    assert awspools.CI_FILL == (('pool.begin journal pool_slot', 1), ('pool.record journal create_workspace', 1),
                                ('create.clone aws RunInstances', 1), ('create.runner journal pool_warm', 1))
    assert ('create.vmid aws CreateTags', 1) in awspools.CI_CLAIM
    hz, gce, az = cloudpools.HetznerPoolMatrix, cloudpools.GcpPoolMatrix, cloudpools.AzurePoolMatrix
    assert ('create.clone hetzner POST /servers', 1) in hz.ci_fill
    assert ('create.vmid hetzner PUT /servers', 1) in hz.ci_claim
    assert ('create.wait_clone gcp operation DONE insert', 1) in gce.ci_fill
    assert [p for p, dummy in gce.ci_claim if ' gcp ' in p] == ['create.vmid gcp instances.setLabels',
                                                                'create.vmid gcp instances.setMetadata']
    assert [p for p, dummy in az.ci_claim if ' azure ' in p] == ['create.vmid azure PATCH disks',
                                                                 'create.vmid azure PATCH virtualMachines']
    for matrix in (hz, gce, az):
        assert not any(' pve ' in p for p, dummy in matrix.ci_fill + matrix.ci_claim)
        # The claim's journal points are the Proxmox rows'.
        assert ('create.vmid journal pool_member_taken', 1) in matrix.ci_claim
        lost = matrix.sizes['ci']['lost']
        assert [op for dummy, op, dummy2, dummy3 in lost[:2]] == ['fill', 'claim']
    assert [call for dummy, dummy2, call, dummy3 in gce.sizes['ci']['lost']] == [
        'instances.insert', 'instances.setLabels', 'instances.setMetadata']


class View:
    def __init__(self, items, ours):
        self.instances, self.ours = items, ours


def _resource(kind, name, base, workspace, marker='m1'):
    return {'kind': kind, 'name': name, 'base': base,
            'tags': {azure.TAG_MARKER: marker, azure.TAG_WORKSPACE: workspace, azure.TAG_SET: base}}


def test_the_azure_set_check_wants_every_resource_of_a_rows_set_tagged_as_its_vm():
    base = 'pc-1-abc'
    items = {'vm': _resource('vm', base + '-vm', base, 'c1'), 'nic': _resource('nic', base + '-nic', base, 'c1'),
             'disk': _resource('disk', base + '-osdisk', base, 'pc-1'),
             # Another's copy of the set's tags, under a name of its own: not the set's.
             'copy': _resource('pip', 'copied-pip', base, 'c1', marker='theirs')}
    matrix = cloudpools.AzurePoolMatrix.__new__(cloudpools.AzurePoolMatrix)
    view = View(items, {'vm': 'c1', 'nic': 'c1'})
    assert matrix.set_problems(view, {'name': 'pc'}, ['c1']) == [
        'disk %s-osdisk of set %s has %s pc-1, its VM c1' % (base, base, azure.TAG_WORKSPACE)]
    # A set that is none of the row's is not looked at.
    assert matrix.set_problems(view, {'name': 'other'}, []) == []
    assert matrix.machines_of(view, 'c1') == ['vm']


def test_a_hetzner_lost_row_names_its_method_and_path():
    assert cloudpools.HetznerPoolMatrix.sizes['ci']['lost'] == (
        ('fill create', 'fill', 'POST /servers', None), ('claim re-labelling', 'claim', 'PUT /servers', None))
