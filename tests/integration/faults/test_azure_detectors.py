"""The Azure rows' invariants (tests/faults/azure.py) over the ARM fake, broken on purpose: a set with our
verifying marker and no journal record is a leak, as is one whose record is destroyed; a copy of our tags with a
marker no controller made is foreign; a foreign resource retagged, unbound or replaced, and an acting request of
ours that names one, are seen; a ready workspace whose members are incomplete or whose VM is off fails ready.
The clean create and destroy that the matrix itself runs show the other side (every row ok)."""

import os

import pytest

from ansible_collections.ephemera.workspaces.plugins.module_utils.core import ownership
from tests.faults import azure as rows
from tests.faults import cloud as shape
from tests.localcloud.fixtures import cloud_process

SECRET = b'0123456789abcdef0123456789abcdef'


class Site:
    adapter = rows.AzureAdapter()

    def __init__(self, cloud):
        self.cloud = cloud

    def items(self):
        return self.adapter.items(self)


@pytest.fixture(scope='module')
def cloud(tmp_path_factory):
    with cloud_process(os.path.join(str(tmp_path_factory.mktemp('azure-detectors')), 'cloud')) as made:
        yield made


def ours(workspace, base):
    controller = ownership.controller_id(SECRET)
    marker = ownership.render_resource(SECRET, controller, workspace, base, ownership.new_nonce())
    return {'ephemera:marker': marker, 'ephemera:workspace': workspace, 'ephemera:set': base}


def test_leaks_foreign_and_ready_are_detected(cloud):
    site = Site(cloud)
    tags = ours('w1', 'w1-0a1b2c3d')
    # A set member of ours (made here by the other principal: the invariants read tags, as a controller does).
    cloud.azure('foreign_create', kind='pip', name='w1-0a1b2c3d-pip', tags=tags)
    cloud.azure('foreign_create', kind='pip', name='copy-pip', tags=dict(tags, **{'ephemera:marker': 'forged'}))
    cloud.azure('foreign_create', kind='pip', name='their-pip', tags={'team': 'web'})
    cloud.azure('foreign_create', kind='nic', name='their-nic', attach_to='their-pip')
    view = rows.CloudView(site, SECRET)
    assert sorted(r.rsplit('/', 1)[-1] for r in view.ours) == ['w1-0a1b2c3d-pip']
    assert sorted(r.rsplit('/', 1)[-1] for r in view.foreign) == ['copy-pip', 'their-nic', 'their-pip']
    # No record, a destroyed record, a record naming another set: each a leak; the right record: none.
    adapter = site.adapter
    assert list(shape.leaks(adapter, view, {}).values()) == ['w1: no journal record']
    assert list(shape.leaks(adapter, view, {'w1': {'status': 'destroyed'}}).values()) == ['w1: the journal says destroyed']
    other = '/subscriptions/s/resourceGroups/g/providers/Microsoft.Compute/virtualMachines/w1-99999999-vm'
    assert list(shape.leaks(adapter, view, {'w1': {'status': 'ready', 'resource_id': other}}).values()) == [
        'w1: the journal names %s' % other]
    mine = other.replace('99999999', '0a1b2c3d')
    assert shape.leaks(adapter, view, {'w1': {'status': 'ready', 'resource_id': mine}}) == {}
    # A ready workspace whose set is one public IP: not ready.
    assert shape.check_ready(adapter, view, {'name': 'w1', 'resource_id': mine}) == [
        'w1 is ready with %s, but its VMs carrying its marker are []' % mine]
    # Foreign resources changed behind our back, and a request of ours that acted on one.
    before = view.foreign
    assert shape.check_foreign(adapter, before, rows.CloudView(site, SECRET), []) == []
    cloud.azure('change', resource='their-pip', tags={'team': 'data'})
    cloud.azure('detach', resource='their-nic')
    cloud.azure('replace', resource='copy-pip')
    requests = [(0, 'PublicIPAddresses_Delete', ('their-pip',), None), (0, 'PublicIPAddresses_Get', ('copy-pip',), None)]
    found = shape.check_foreign(adapter, before, rows.CloudView(site, SECRET), requests)
    assert sorted(found) == sorted([
        'foreign %s changed: bindings, tags' % [r for r in before if r.endswith('/their-pip')][0],
        'foreign %s changed: bindings' % [r for r in before if r.endswith('/their-nic')][0],
        'foreign %s changed: identity' % [r for r in before if r.endswith('/copy-pip')][0],
        'our controller sent PublicIPAddresses_Delete to foreign their-pip'])
    # A creating PUT for a set no record holds.
    events = shape.check_events(adapter, {'w1': {'candidate_id': 'w1-0a1b2c3d'}}, [
        (0, 'NetworkInterfaces_CreateOrUpdate', ('w1-0a1b2c3d-nic',), 'w1-0a1b2c3d'),
        (0, 'PublicIPAddresses_CreateOrUpdate', ('w2-12345678-pip',), 'w2-12345678')])
    assert events == ['PublicIPAddresses_CreateOrUpdate was sent with set w2-12345678, which no journal record holds']
