"""The Azure set through azure-mgmt-compute's and azure-mgmt-network's pipelines against the try-out cloud's ARM
fake (HTTPS, real tokens, real sshd guests): create to running and a confirmed delete, a lost PUT answer, both
polling styles and an empty status document, a crash between creation PUTs, creation-prefix cases, the orphan
sweep's quarantine with a group that changes, and bad input refused before any PUT. One cloud for the file."""

import copy
import os
import time

import pytest

from ansible_collections.ephemera.workspaces.plugins.module_utils.providers import base
from ansible_collections.ephemera.workspaces.plugins.module_utils.providers.azure import client as azclient
from ansible_collections.ephemera.workspaces.plugins.module_utils.providers.azure import members as azset
from ansible_collections.ephemera.workspaces.plugins.module_utils.providers.azure import plan as azplan
from ansible_collections.ephemera.workspaces.plugins.module_utils.providers.azure.plan import NIC, PIP, VM

pytestmark = pytest.mark.usefixtures('clean_cloud')


@pytest.fixture(scope='module')
def arm(localcloud):
    az = localcloud.info['azure']
    return azclient.Arm.connect(az['subscription_id'], az['tenant_id'], az['client_id'], az['client_secret'],
                                authority=az['authority_host'], endpoint=az['resource_manager_url'],
                                ca_file=az['ca_file'], retry_total=0)


class Journal:
    def __init__(self):
        self.writes = []

    def __call__(self, record):
        self.writes.append(copy.deepcopy(record))


def new_set(cloud, arm, name, **kw):
    seed = cloud.info['azure']['seed']
    record = {'plan': azplan.plan(name, azplan.base_name(name, time.time()), seed['resource_group'], seed['location'],
                                  'MARKER-' + name, 'scope', labels={'keep': 'false'},
                                  subscription=seed['subscription_id'])}
    options = {'vm_size': seed['vm_size'], 'image': seed['image'], 'subnet_id': seed['subnet_id'],
               'ssh_public_key': 'ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIG1hZGUtdXAta2V5LWZvci10ZXN0cy0wMDAwMDAwMA t'}
    kw.setdefault('lost_window', 2)
    return azset.WorkspaceSet(arm, record, Journal(), options, interval=0.2, **kw)


def ours(cloud, ws):
    base_ = ws.plan['base']
    return sorted(r['name'] for r in cloud.azure('resources') if r['name'].startswith(base_))


def everything(cloud):
    return sorted((r['kind'], r['name'], r['id']) for r in cloud.azure('resources'))


def test_create_to_running_and_a_confirmed_delete_that_touches_nothing_foreign(localcloud, arm):
    foreign = localcloud.azure('foreign_create', kind='pip', name='their-pip')
    before = everything(localcloud)
    ws = new_set(localcloud, arm, 'ws-create')
    ids = ws.create()
    assert ours(localcloud, ws) == sorted(ws.plan['names'].values())
    vm = ws.check_binding()
    assert azplan.same_id(vm['id'], ids[VM])
    deadline = time.time() + 20
    while True:
        listed = {r['name']: r for r in localcloud.azure('resources')}
        if listed[ws.plan['names'][VM]].get('sshd') == 'up' or time.time() > deadline:
            break
        time.sleep(0.3)
    assert listed[ws.plan['names'][VM]].get('sshd') == 'up'
    disk = arm.get(ws.path(azplan.DISK), azset.VERSION[azplan.DISK])
    assert disk['tags'][azplan.TAG_MARKER] == 'MARKER-ws-create'
    assert ws.delete(pause=0.2)
    assert ours(localcloud, ws) == []
    assert set(ws.record['claims']) == {VM, NIC, PIP, azplan.DISK}
    assert everything(localcloud) == before and foreign


def test_a_lost_put_answer_is_looked_for_not_repeated(localcloud, arm):
    localcloud.azure('rule', action='drop-response', operation='NetworkInterfaces_CreateOrUpdate')
    ws = new_set(localcloud, arm, 'ws-lost')
    with pytest.raises(base.UnknownOutcome):
        ws.create()
    ws.create()
    nics = [r for r in localcloud.azure('resources') if r['kind'] == 'nic' and r['name'].startswith(ws.plan['base'])]
    assert len(nics) == 1
    assert ws.delete(pause=0.2) and ours(localcloud, ws) == []


@pytest.mark.parametrize('style', ['async', 'location'])
def test_each_polling_style_of_an_accepted_delete(localcloud, arm, style):
    ws = new_set(localcloud, arm, 'ws-poll-' + style)
    ws.create()
    localcloud.azure('rule', action='lro', operation='VirtualMachines_Delete', style=style, seconds=1)
    assert ws.delete_tick() == (azset.ACCEPTED, VM)
    assert VM not in ws.record['claims']
    states = []
    while VM not in ws.record['claims']:
        states.append(ws.delete_tick()[0])
        time.sleep(0.3)
    assert states[-1] == azset.DELETED
    assert ws.delete(pause=0.2) and ours(localcloud, ws) == []


def test_an_empty_status_document_never_counts_as_success(localcloud, arm):
    localcloud.azure('rule', action='lro', operation='PublicIPAddresses_CreateOrUpdate', style='async', seconds=60,
                     poll='empty')
    ws = new_set(localcloud, arm, 'ws-empty', timeout=3)
    with pytest.raises(base.TaskTimeout):
        ws.create()
    assert PIP not in ws.record['ids'] and PIP in ws.record['ops']
    localcloud.azure('clear')


def test_a_crash_between_nic_and_vm_is_cleaned_by_the_release(localcloud, arm):
    localcloud.azure('rule', action='reset', operation='VirtualMachines_CreateOrUpdate')
    ws = new_set(localcloud, arm, 'ws-prefix')
    with pytest.raises(base.ProviderError):
        ws.create()
    assert sorted(ws.record['ids']) == [NIC, PIP]
    assert ws.delete(pause=0.2)
    assert ours(localcloud, ws) == []
    assert set(ws.record['claims']) == {NIC, PIP}


def test_a_nic_without_its_public_ip_is_report_only(localcloud, arm):
    localcloud.azure('rule', action='reset', operation='VirtualMachines_CreateOrUpdate')
    ws = new_set(localcloud, arm, 'ws-nicalone')
    with pytest.raises(base.ProviderError):
        ws.create()
    # Someone takes the public IP off the NIC and deletes it: the NIC stands alone.
    localcloud.azure('detach', resource=ws.record['ids'][NIC])
    localcloud.azure('remove', resource=ws.record['ids'][PIP])
    ws.record['ids'].pop(PIP)
    ws.record['ids'].pop(NIC)
    before = everything(localcloud)
    with pytest.raises(azset.Contradiction):
        ws.delete_tick()
    assert everything(localcloud) == before


def test_orphan_sweep_quarantine_restarts_when_the_group_changes(localcloud, arm):
    seed = localcloud.info['azure']['seed']
    ws = new_set(localcloud, arm, 'ws-orphan')
    ids = ws.create()
    state = {}

    def sweep(now):
        out = azset.sweep(arm, seed['subscription_id'], seed['resource_group'], state,
                          {ws.plan['base']: ws.record}.get, now, 900, seed['location'])
        return ws.plan['base'] in out['candidates']
    assert not sweep(0)
    localcloud.azure('change', resource=ids[PIP], tags={'note': 'changed'})
    assert not sweep(1000)
    assert not sweep(1500)
    assert sweep(1901)
    assert ws.delete(pause=0.2) and ours(localcloud, ws) == []


BAD = [
    ('location', 'mars', 'azure_location'), ('vm_size', 'Standard_Nope', 'VM size Standard_Nope'),
    ('image', {'publisher': 'Debian', 'offer': 'nothing', 'sku': 'x', 'version': 'latest'}, 'offered in this'),
    ('subnet_id', '/subscriptions/7a5e0c43-1f3b-4c1e-9b7e-0d1e5c0a0b01/resourceGroups/workspaces/providers/'
                  'Microsoft.Network/virtualNetworks/workspaces-vnet/subnets/none', 'existing subnet'),
    ('resource_group', 'no-such-group', 'azure_resource_group'),
    ('subscription', '00000000-0000-0000-0000-000000000000', 'azure_subscription_id'),
]


@pytest.mark.parametrize('field,value,words', BAD, ids=[b[0] for b in BAD])
def test_bad_input_is_refused_before_any_put(localcloud, arm, field, value, words):
    before = everything(localcloud)
    ws = new_set(localcloud, arm, 'ws-bad')
    if field in ('location', 'resource_group', 'subscription'):
        ws.record['plan'][field] = value
    else:
        ws.options[field] = value
    with pytest.raises(base.InvalidRequest) as err:
        ws.create()
    assert words in str(err.value)
    assert not ws.record['dispatched']
    assert everything(localcloud) == before
    assert not [o for o in localcloud.azure('operations') if 'ws-bad' in str(o)]


def test_wrong_credentials_are_refused_with_what_to_check(localcloud):
    az = localcloud.info['azure']
    wrong = azclient.Arm.connect(az['subscription_id'], az['tenant_id'], az['client_id'], 'not-the-secret',
                                 authority=az['authority_host'], endpoint=az['resource_manager_url'],
                                 ca_file=az['ca_file'], retry_total=0)
    with pytest.raises(base.Refused) as err:
        wrong.get('/subscriptions/%s/resourcegroups/workspaces' % az['subscription_id'], '2022-09-01')
    assert 'AZURE_CLIENT_SECRET' in str(err.value) and 'not-the-secret' not in str(err.value)


def test_the_provider_seam_allocates_verifies_lists_and_deletes_a_set(localcloud, arm, tmp_path):
    from ansible_collections.ephemera.workspaces.plugins.module_utils.core import ownership
    from ansible_collections.ephemera.workspaces.plugins.module_utils.providers.azure import provider as azprovider
    seed = localcloud.info['azure']['seed']
    launch = {'resource_group': seed['resource_group'], 'location': seed['location'], 'vm_size': seed['vm_size'],
              'subnet_id': seed['subnet_id'], 'ssh_public_key': 'ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIG1h t',
              'tags': {'team': 'agents'}}
    from ansible_collections.ephemera.workspaces.plugins.module_utils.core.journal import Journal
    journal = Journal.open(str(tmp_path / 'journal.sqlite'))
    p = azprovider.AzureProvider(arm, b's' * 32, launch, azprovider.SetStore(journal), lost_window=2)
    image = p.resolve_source('Debian:debian-12:12-gen2')
    assert p.check_source(image, None, 'scope') == seed['location']
    candidate = p.candidate_for('ws-seam', '2026-12-03T10:00:00Z')
    assert candidate == p.candidate_for('ws-seam', '2026-12-03T10:00:00Z')
    nonce = ownership.new_nonce()
    handle = p.allocate(base.Allocation(candidate, 'ws-seam', image, seed['location'], 'ws-seam', 'scope',
                                        labels={'keep': 'false', 'state': 'active'}, nonce=nonce))
    assert p.wait(handle, 60).succeeded
    resource_id = p.resource_of(candidate, handle)
    assert resource_id.lower().endswith('/microsoft.compute/virtualmachines/%s-vm' % candidate)
    resource = p.find(resource_id)
    assert resource.id == resource_id
    assert p.verify(resource, 'ws-seam') == ownership.VERIFIED
    assert p.verify(resource, 'another') != ownership.VERIFIED
    assert p.labels(resource)['keep'] == 'false'
    assert p.power(resource).running
    assert p.addresses(resource)[0][1] == 'inet'
    listed = [e for e in p.list() if e['id'] == resource_id]
    assert listed and listed[0]['status'] == 'complete' and listed[0]['members'] == sorted(azplan.MEMBERS)
    # The set's record is in the journal, and holds no secret.
    record, dummy = journal.provider_state('azure/set/' + candidate)
    assert sorted(record['ids']) == sorted(azplan.MEMBERS)
    for name in os.listdir(str(tmp_path)):
        if name.startswith('journal.sqlite'):
            with open(str(tmp_path / name), 'rb') as fh:
                assert localcloud.info['azure']['client_secret'].encode() not in fh.read()
    assert p.delete_blocker(resource) is None
    assert p.wait(p.delete(resource), 60).succeeded
    assert p.find(resource_id) is None and p.find(candidate) is None
    assert not [r for r in localcloud.azure('resources') if r['name'].startswith(candidate)]
    journal.close()
