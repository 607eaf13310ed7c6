"""The try-out cloud's ARM fake: tokens, the four resource types of a workspace with their in-use rules and OS
disk, both polling styles of long-running operations, faults, changes behind the client's back, guests over real
SSH, and the shapes checked against the SDK's own model classes.

One cloud process for the module (tests/localcloud/fixtures.py); each test clears the rules it set.
"""

import base64
import json
import os
import subprocess
import sys
import time
import typing

import pytest
import requests
from azure.core.exceptions import (ClientAuthenticationError, HttpResponseError, ResourceExistsError,
                                   ResourceNotFoundError, ServiceRequestError, ServiceResponseError)
from azure.mgmt.compute import models as cm
from azure.mgmt.network import models as nm

from tests.localcloud.azure_clients import compute_client, credential, network_client
from tests.localcloud.config import ROOT
from tests.localpve.pki import ssh_key_pair

pytestmark = pytest.mark.usefixtures('clean_cloud')
LOST = (ServiceRequestError, ServiceResponseError, requests.exceptions.ConnectionError)


@pytest.fixture(scope='module')
def az(localcloud):
    """(cloud, network client, compute client, seed) with the SDK's own retries off, to see each fault once."""
    info = localcloud.info
    return (localcloud, network_client(info, retry_total=0), compute_client(info, retry_total=0),
            info['azure']['seed'])


class Raw:
    """Plain HTTPS to the fake with our bearer token: to see statuses and headers the SDK hides."""

    def __init__(self, info):
        self.azure = info['azure']
        self.token = credential(info).get_token(self.azure['credential_scope']).token

    def __call__(self, method, path_or_url, body=None, version='2026-03-01'):
        url = path_or_url if path_or_url.startswith('https://') else '{0}{1}?api-version={2}'.format(
            self.azure['resource_manager_url'], path_or_url, version)
        return requests.request(method, url, json=body, verify=self.azure['ca_file'], timeout=20,
                                headers={'Authorization': 'Bearer ' + self.token}, allow_redirects=False)


def make_pip(net, seed, name, tags=None):
    return net.public_ip_addresses.begin_create_or_update(seed['resource_group'], name, nm.PublicIPAddress(
        location=seed['location'], sku=nm.PublicIPAddressSku(name='Standard'), public_ip_allocation_method='Static',
        tags=tags or {})).result()


def make_nic(net, seed, name, pip_id=None, delete_option=None, tags=None):
    conf = nm.NetworkInterfaceIPConfiguration(name='ipconfig1', subnet=nm.Subnet(id=seed['subnet_id']))
    if pip_id:
        conf.public_ip_address = nm.PublicIPAddress(id=pip_id, delete_option=delete_option)
    return net.network_interfaces.begin_create_or_update(seed['resource_group'], name, nm.NetworkInterface(
        location=seed['location'], ip_configurations=[conf], tags=tags or {})).result()


def root_login(key):
    """osProfile.customData that authorizes ``key`` for root, as the collection sends it."""
    text = '#cloud-config\nssh_authorized_keys:\n  - {0}\ndisable_root: false\n'.format(key)
    return base64.b64encode(text.encode()).decode()


def vm_model(seed, name, nic_id, key, disk_delete=None, nic_delete=None, size=None, image=None, custom_data=True):
    image = dict(seed['image'], **(image or {}))
    if custom_data is True:
        custom_data = root_login(key)
    return cm.VirtualMachine(
        location=seed['location'], tags={'workspace': name},
        hardware_profile=cm.HardwareProfile(vm_size=size or seed['vm_size']),
        storage_profile=cm.StorageProfile(
            image_reference=cm.ImageReference(**image),
            os_disk=cm.OSDisk(name=name + '-osdisk', create_option='FromImage', delete_option=disk_delete)),
        os_profile=cm.OSProfile(computer_name=name, admin_username='ephemera', custom_data=custom_data or None,
                                linux_configuration=cm.LinuxConfiguration(
                                    disable_password_authentication=True, ssh=cm.SshConfiguration(public_keys=[
                                        cm.SshPublicKey(path='/home/ephemera/.ssh/authorized_keys', key_data=key)]))),
        network_profile=cm.NetworkProfile(network_interfaces=[
            cm.NetworkInterfaceReference(id=nic_id, delete_option=nic_delete)]))


def resources(cloud, kind=None):
    return {r['name']: r for r in cloud.azure('resources') if kind is None or r['kind'] == kind}


def wait(predicate, timeout=10):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError('condition not met within {0} s'.format(timeout))


def ssh(info, key, address, command):
    return subprocess.run(['ssh', '-i', key, '-p', str(info['ssh_port']), '-o', 'BatchMode=yes',
                           '-o', 'StrictHostKeyChecking=yes', '-o', 'UserKnownHostsFile=' + info['azure'][
                               'ssh_known_hosts'], '-o', 'ConnectTimeout=5', '{0}@{1}'.format(info['ssh_user'], address),
                           command], capture_output=True, text=True, timeout=30, check=False)


def test_tokens_and_bad_references(az):
    cloud, net, comp, seed = az
    info = cloud.info
    wrong = dict(info, azure=dict(info['azure'], client_secret='not-the-secret'))
    with pytest.raises(ClientAuthenticationError, match='AADSTS7000215'):
        credential(wrong).get_token(info['azure']['credential_scope'])
    unknown = dict(info, azure=dict(info['azure'], tenant_id='00000000-0000-0000-0000-0000000000aa'))
    with pytest.raises(ClientAuthenticationError):
        credential(unknown).get_token(info['azure']['credential_scope'])
    raw = Raw(info)
    answer = raw('GET', '/subscriptions/00000000-0000-0000-0000-000000000001/resourceGroups/workspaces')
    assert answer.status_code == 404 and answer.json()['error']['code'] == 'SubscriptionNotFound'
    bad_token = requests.get(info['azure']['url'] + '/subscriptions/{0}/resourceGroups/workspaces?api-version=x'.format(
        seed['subscription_id']), headers={'Authorization': 'Bearer nope'}, verify=info['azure']['ca_file'], timeout=10)
    assert bad_token.status_code == 401 and bad_token.json()['error']['code'] == 'InvalidAuthenticationToken'
    assert 'Bearer' in bad_token.headers['WWW-Authenticate']
    with pytest.raises(ResourceNotFoundError) as err:
        net.public_ip_addresses.get('no-such-group', 'x')
    assert err.value.error.code == 'ResourceGroupNotFound'
    with pytest.raises(ResourceNotFoundError) as err:
        net.public_ip_addresses.get(seed['resource_group'], 'absent-pip')
    assert err.value.error.code == 'ResourceNotFound'
    assert net.subnets.get(seed['resource_group'], seed['virtual_network'], seed['subnet']).address_prefix == \
        '10.90.1.0/24'
    with pytest.raises(HttpResponseError) as err:
        make_pip(net, dict(seed, location='moonbase'), 'bad-location-pip')
    assert err.value.error.code == 'LocationNotAvailableForResourceType'
    with pytest.raises(HttpResponseError) as err:
        make_pip(net, seed, '-bad-name-')
    assert err.value.error.code == 'InvalidResourceName'
    sizes = [s.name for s in comp.virtual_machine_sizes.list(seed['location'])]
    assert seed['vm_size'] in sizes
    versions = comp.virtual_machine_images.list(seed['location'], seed['image']['publisher'], seed['image']['offer'],
                                                seed['image']['sku'])
    assert versions and all(v.name for v in versions)
    with pytest.raises(ResourceNotFoundError):
        comp.virtual_machine_images.list(seed['location'], 'Debian', 'debian-99', '99')
    assert not resources(cloud), 'a refused request left something behind'


def check_shapes(raw, seed, pip_id, nic_id, vm_id, disk_id):
    """Every GET of the four resource types, the subnet and the instance view has only fields the SDK's model class
    knows (recursively), and survives a round trip through that model unchanged."""
    checks = [(nm.PublicIPAddress, pip_id, '2026-03-01'), (nm.NetworkInterface, nic_id, '2026-03-01'),
              (cm.VirtualMachine, vm_id, '2026-04-01'), (cm.Disk, disk_id, '2026-03-02'),
              (nm.Subnet, seed['subnet_id'], '2026-03-01'),
              (cm.VirtualMachineInstanceView, vm_id + '/instanceView', '2026-04-01')]
    for model_class, path, version in checks:
        data = raw('GET', path, version=version).json()
        assert unknown_fields(model_class, data) == [], model_class.__name__
        assert json.loads(json.dumps(model_class(data).as_dict())) == data, model_class.__name__
        if 'id' in data:
            assert data['id'] == path


def test_workspace_set_create_in_use_and_ordered_delete(az, tmp_path):
    cloud, net, comp, seed = az
    info = cloud.info
    key = str(tmp_path / 'id_ed25519')
    public = ssh_key_pair(key, 'agent')
    rg = seed['resource_group']
    pip = make_pip(net, seed, 'ws-a-pip', tags={'ephemera:workspace': 'ws-a'})
    nic = make_nic(net, seed, 'ws-a-nic', pip.id)
    vm = comp.virtual_machines.begin_create_or_update(rg, 'ws-a', vm_model(seed, 'ws-a', nic.id, public)).result()
    assert vm.provisioning_state == 'Succeeded' and vm.vm_id
    disk = comp.disks.get(rg, 'ws-a-osdisk')
    assert disk.managed_by == vm.id and disk.disk_state == 'Attached'
    assert vm.storage_profile.os_disk.managed_disk.id == disk.id
    assert vm.storage_profile.os_disk.delete_option == 'Detach'
    pip = net.public_ip_addresses.get(rg, 'ws-a-pip')
    nic = net.network_interfaces.get(rg, 'ws-a-nic')
    assert pip.ip_configuration.id == nic.ip_configurations[0].id and nic.virtual_machine.id == vm.id
    view = comp.virtual_machines.get(rg, 'ws-a', expand='instanceView')
    assert 'PowerState/running' in [s.code for s in view.instance_view.statuses]
    # Powered off, the guest is down (the shapes then too); started again, it is back.
    comp.virtual_machines.begin_power_off(rg, 'ws-a').result()
    assert 'PowerState/stopped' in [s.code for s in comp.virtual_machines.instance_view(rg, 'ws-a').statuses]
    wait(lambda: resources(cloud)['ws-a'].get('sshd') == 'stopped')
    check_shapes(Raw(info), seed, pip.id, nic.id, vm.id, disk.id)
    comp.virtual_machines.begin_start(rg, 'ws-a').result()
    # A real guest on both addresses, with the VM's key.
    wait(lambda: resources(cloud)['ws-a'].get('sshd') == 'up')
    assert resources(cloud)['ws-a']['root'] == info['azure']['guest_prefix'].replace('{vmid}', vm.id)
    for address in (pip.ip_address, nic.ip_configurations[0].private_ip_address):
        done = ssh(info, key, address, 'echo $LOCALPVE_VMID; test -d "$LOCALPVE_GUEST_ROOT/workspace" && echo ok')
        assert done.returncode == 0, done.stderr
        assert done.stdout.split() == [resources(cloud)['ws-a']['guest'], 'ok']
    refused = ssh(info, info['ssh_private_key'], pip.ip_address, 'true')
    assert refused.returncode != 0, 'the cloud key is not the VM key: the guest must refuse it'
    # In use: nothing of the set goes before the VM.
    with pytest.raises(ResourceExistsError) as err:
        net.network_interfaces.begin_delete(rg, 'ws-a-nic').result()
    assert err.value.error.code == 'NicInUse' and err.value.status_code == 409
    with pytest.raises(ResourceExistsError) as err:
        net.public_ip_addresses.begin_delete(rg, 'ws-a-pip').result()
    assert err.value.error.code == 'PublicIPAddressCannotBeDeleted'
    with pytest.raises(ResourceExistsError) as err:
        comp.disks.begin_delete(rg, 'ws-a-osdisk').result()
    assert err.value.error.code == 'OperationNotAllowed'
    assert set(resources(cloud)) == {'ws-a', 'ws-a-nic', 'ws-a-pip', 'ws-a-osdisk'}
    # VM first: its disk and NIC stay, unattached; its guest ends.
    comp.virtual_machines.begin_delete(rg, 'ws-a').result()
    left = resources(cloud)
    assert set(left) == {'ws-a-nic', 'ws-a-pip', 'ws-a-osdisk'}
    assert left['ws-a-osdisk']['disk_state'] == 'Unattached' and left['ws-a-osdisk']['managed_by'] is None
    assert left['ws-a-nic']['virtual_machine'] is None and left['ws-a-nic']['public_ip'] == pip.id
    wait(lambda: ssh(info, key, pip.ip_address, 'true').returncode != 0)
    with pytest.raises(ResourceExistsError):
        net.public_ip_addresses.begin_delete(rg, 'ws-a-pip').result()
    net.network_interfaces.begin_delete(rg, 'ws-a-nic').result()
    assert resources(cloud)['ws-a-pip']['ip_configuration'] is None
    net.public_ip_addresses.begin_delete(rg, 'ws-a-pip').result()
    comp.disks.begin_delete(rg, 'ws-a-osdisk').result()
    assert not resources(cloud)
    # A DELETE of what is not there: 204, as ARM answers.
    assert Raw(info)('DELETE', '/subscriptions/{0}/resourceGroups/{1}/providers/Microsoft.Compute/disks/ws-a-osdisk'.format(
        seed['subscription_id'], rg), version='2026-03-02').status_code == 204


def test_custom_data_is_taken_as_azure_takes_it_and_root_logs_in_only_where_it_says_so(az, tmp_path):
    cloud, net, comp, seed = az
    info = cloud.info
    rg = seed['resource_group']
    key = str(tmp_path / 'id_ed25519')
    public = ssh_key_pair(key, 'controller')
    # Not base64, or more than 65535 bytes once decoded: refused, nothing made.
    for bad in ('not base64!', base64.b64encode(b'#' * 65536).decode()):
        nic = make_nic(net, seed, 'cd-bad-nic')
        with pytest.raises(HttpResponseError) as err:
            comp.virtual_machines.begin_create_or_update(rg, 'cd-bad', vm_model(seed, 'cd-bad', nic.id, public,
                                                                                custom_data=bad)).result()
        assert err.value.error.code == 'InvalidParameter' and 'Base64' in err.value.error.message
        assert 'cd-bad' not in resources(cloud)
        net.network_interfaces.begin_delete(rg, 'cd-bad-nic').result()
    # Without custom data root has no login (cloud-init's disable_root); with the collection's, it has.
    for name, custom in (('cd-none', None), ('cd-root', True)):
        pip = make_pip(net, seed, name + '-pip')
        nic = make_nic(net, seed, name + '-nic', pip.id, delete_option='Delete')
        comp.virtual_machines.begin_create_or_update(rg, name, vm_model(
            seed, name, nic.id, public, disk_delete='Delete', nic_delete='Delete', custom_data=custom)).result()
        wait(lambda n=name: resources(cloud)[n].get('sshd') == 'up')
        done = ssh(info, key, pip.ip_address, 'true')
        assert (done.returncode == 0) == (custom is True), (name, done.stderr)
    # Never answered; never changed once the VM is made.
    raw = Raw(info)
    path = '/subscriptions/{0}/resourceGroups/{1}/providers/Microsoft.Compute/virtualMachines/cd-root'.format(
        seed['subscription_id'], rg)
    doc = raw('GET', path, version='2026-04-01').json()
    assert not doc['properties']['osProfile'].get('customData')
    doc['properties']['osProfile']['customData'] = root_login('ssh-ed25519 AAAAother other')
    changed = raw('PUT', path, body={'location': doc['location'], 'properties': doc['properties']},
                  version='2026-04-01')
    assert changed.status_code == 409 and changed.json()['error']['code'] == 'PropertyChangeNotAllowed'
    for name in ('cd-none', 'cd-root'):
        comp.virtual_machines.begin_delete(rg, name).result()
    wait(lambda: not [n for n in resources(cloud) if n.startswith('cd-')] or None, timeout=10)


def test_delete_options_cascade_when_set(az, tmp_path):
    cloud, net, comp, seed = az
    rg = seed['resource_group']
    pip = make_pip(net, seed, 'ws-c-pip')
    nic = make_nic(net, seed, 'ws-c-nic', pip.id, delete_option='Delete')
    public = ssh_key_pair(str(tmp_path / 'k'), 'agent')
    vm = comp.virtual_machines.begin_create_or_update(rg, 'ws-c', vm_model(
        seed, 'ws-c', nic.id, public, disk_delete='Delete', nic_delete='Delete')).result()
    assert vm.storage_profile.os_disk.delete_option == 'Delete'
    assert vm.network_profile.network_interfaces[0].delete_option == 'Delete'
    assert net.network_interfaces.get(rg, 'ws-c-nic').ip_configurations[0].public_ip_address.delete_option == 'Delete'
    comp.virtual_machines.begin_delete(rg, 'ws-c').result()
    assert not resources(cloud), 'deleteOption Delete takes the disk, the NIC and with it the public IP'


def test_polling_styles(az):
    cloud, net, comp, seed = az
    info = cloud.info
    raw = Raw(info)
    rg = seed['resource_group']
    path = '/subscriptions/{0}/resourceGroups/{1}/providers/Microsoft.Network/publicIPAddresses/'.format(
        seed['subscription_id'], rg)
    body = {'location': seed['location'], 'sku': {'name': 'Standard'},
            'properties': {'publicIPAllocationMethod': 'Static'}}
    # Azure-AsyncOperation (the default of a PUT): 201, a status document InProgress then Succeeded.
    answer = raw('PUT', path + 'p-async', body)
    assert answer.status_code == 201 and 'Location' not in answer.headers
    assert answer.json()['properties']['provisioningState'] == 'Creating'
    status = raw('GET', answer.headers['Azure-AsyncOperation'])
    assert status.status_code == 200 and status.json()['status'] == 'InProgress'
    time.sleep(info['azure']['pending_secs'] + 0.1)
    assert raw('GET', answer.headers['Azure-AsyncOperation']).json()['status'] == 'Succeeded'
    assert raw('GET', path + 'p-async').json()['properties']['provisioningState'] == 'Succeeded'
    # Location polling: 202 while pending, then 200 with the resource; a DELETE's ends in 204.
    cloud.azure('rule', action='lro', operation='PublicIPAddresses_*', style='location', times=2)
    answer = raw('PUT', path + 'p-loc', body)
    assert answer.status_code == 202 and 'Azure-AsyncOperation' not in answer.headers
    assert raw('GET', answer.headers['Location']).status_code == 202
    time.sleep(info['azure']['pending_secs'] + 0.1)
    final = raw('GET', answer.headers['Location'])
    assert final.status_code == 200 and final.json()['name'] == 'p-loc'
    answer = raw('DELETE', path + 'p-loc')
    assert answer.status_code == 202 and set(answer.headers) >= {'Location', 'Retry-After'}
    assert raw('GET', answer.headers['Location']).status_code == 202
    time.sleep(info['azure']['pending_secs'] + 0.1)
    assert raw('GET', answer.headers['Location']).status_code == 204
    # Explicit states on a Location poll's 200, and a failing deletion (nothing deleted).
    cloud.azure('rule', action='lro', operation='PublicIPAddresses_Delete', style='location', poll='explicit',
                outcome='Failed')
    answer = raw('DELETE', path + 'p-async')
    pending = raw('GET', answer.headers['Location'])
    assert pending.status_code == 200 and pending.json() == {'status': 'InProgress'}
    time.sleep(info['azure']['pending_secs'] + 0.1)
    failed = raw('GET', answer.headers['Location'])
    assert failed.status_code == 200 and failed.json()['status'] == 'Failed' and failed.json()['error']['code']
    assert 'p-async' in resources(cloud)
    # An empty Azure-AsyncOperation answer, for as long as the operation exists.
    cloud.azure('rule', action='lro', operation='PublicIPAddresses_Delete', style='async', poll='empty')
    answer = raw('DELETE', path + 'p-async')
    time.sleep(info['azure']['pending_secs'] + 0.1)
    empty = raw('GET', answer.headers['Azure-AsyncOperation'])
    assert empty.status_code == 200 and empty.content == b''
    assert 'p-async' not in resources(cloud)
    # The SDK: a failed deletion raises and leaves the resource; a sync one is done in the answer.
    make_pip(net, seed, 'p-sdk')
    cloud.azure('rule', action='lro', operation='PublicIPAddresses_Delete', outcome='Failed')
    with pytest.raises(HttpResponseError):
        net.public_ip_addresses.begin_delete(rg, 'p-sdk').result()
    assert resources(cloud)['p-sdk']['state'] == 'Failed'
    cloud.azure('rule', action='lro', operation='PublicIPAddresses_Delete', style='sync')
    net.public_ip_addresses.begin_delete(rg, 'p-sdk').result()
    assert not resources(cloud)
    kinds = [(o['method'], o['style'], o['status']) for o in cloud.azure('operations')]
    assert ('DELETE', 'location', 'Failed') in kinds and ('DELETE', 'sync', 'Succeeded') in kinds


def test_faults_lost_answer_throttle_delay_error(az):
    cloud, net, comp, seed = az
    rg = seed['resource_group']
    cloud.azure('rule', action='drop-response', operation='PublicIPAddresses_CreateOrUpdate', match='f-lost')
    with pytest.raises(LOST):
        make_pip(net, seed, 'f-lost')
    assert 'f-lost' in resources(cloud), 'the PUT acted before its answer was lost'
    cloud.azure('rule', action='reset', operation='PublicIPAddresses_CreateOrUpdate')
    with pytest.raises(LOST):
        make_pip(net, seed, 'f-reset')
    assert 'f-reset' not in resources(cloud)
    cloud.azure('rule', action='throttle', operation='PublicIPAddresses_Get', seconds=2)
    raw = Raw(cloud.info)
    throttled = raw('GET', '/subscriptions/{0}/resourceGroups/{1}/providers/Microsoft.Network/publicIPAddresses/'
                    'f-lost'.format(seed['subscription_id'], rg))
    assert throttled.status_code == 429 and throttled.headers['Retry-After'] == '2'
    assert throttled.json()['error']['code'] == 'TooManyRequests'
    # The SDK's own retry policy honours Retry-After and rides one throttle out.
    cloud.azure('rule', action='throttle', operation='PublicIPAddresses_Get', seconds=1)
    started = time.monotonic()
    assert network_client(cloud.info).public_ip_addresses.get(rg, 'f-lost').name == 'f-lost'
    assert time.monotonic() - started >= 1
    cloud.azure('rule', action='delay', operation='PublicIPAddresses_Get', seconds=1.5)
    started = time.monotonic()
    net.public_ip_addresses.get(rg, 'f-lost')
    assert time.monotonic() - started >= 1.5
    cloud.azure('rule', action='error', operation='*_Delete', code='InternalServerError', status=500,
                message='Something went wrong.')
    with pytest.raises(HttpResponseError) as err:
        net.public_ip_addresses.begin_delete(rg, 'f-lost').result()
    assert err.value.status_code == 500 and err.value.error.code == 'InternalServerError'
    assert 'f-lost' in resources(cloud)
    rules = cloud.azure('rules')
    assert [len(r['hits']) for r in rules] == [1, 1, 1, 1, 1, 1]
    cloud.azure('clear')
    cloud.azure('rule', action='drop-response', operation='PublicIPAddresses_Delete')
    with pytest.raises(LOST):
        net.public_ip_addresses.begin_delete(rg, 'f-lost').result()
    wait(lambda: 'f-lost' not in resources(cloud), timeout=5)


def test_behind_the_back_and_foreign(az):
    cloud, net, comp, seed = az
    rg = seed['resource_group']
    pip = make_pip(net, seed, 'b-pip', tags={'ephemera:marker': 'm1', 'keep': 'no'})
    make_nic(net, seed, 'b-nic', pip.id)
    cloud.azure('change', resource='b-pip', tags={'ephemera:marker': 'changed'}, remove_tags=['keep'])
    assert net.public_ip_addresses.get(rg, 'b-pip').tags == {'ephemera:marker': 'changed'}
    cloud.azure('detach', resource='b-nic')
    assert net.network_interfaces.get(rg, 'b-nic').ip_configurations[0].public_ip_address is None
    assert net.public_ip_addresses.get(rg, 'b-pip').ip_configuration is None
    foreign = cloud.azure('foreign_create', kind='nic', name='their-nic', attach_to='b-pip', tags={'team': 'web'})
    assert foreign['owner'] == 'foreign' and foreign['public_ip'] == pip.id
    with pytest.raises(ResourceExistsError):
        net.public_ip_addresses.begin_delete(rg, 'b-pip').result()
    cloud.azure('remove', resource='b-nic')
    with pytest.raises(ResourceNotFoundError):
        net.network_interfaces.get(rg, 'b-nic')
    cloud.azure('change', resource='their-nic', properties={'virtualMachine': {'id': '/subscriptions/x/vm'}})
    assert net.network_interfaces.get(rg, 'their-nic').virtual_machine.id == '/subscriptions/x/vm'
    # The foreign principal's own client sees and acts on the same group.
    other = network_client(cloud.info, foreign=True, retry_total=0)
    assert 'their-nic' in [n.name for n in other.network_interfaces.list(rg)]
    cloud.azure('change', resource='their-nic', properties={'virtualMachine': None})
    other.network_interfaces.begin_delete(rg, 'their-nic').result()
    net.public_ip_addresses.begin_delete(rg, 'b-pip').result()
    assert not resources(cloud)


def _field_type(annotation):
    """The model class a field holds (itself, in a list, or optional), or None."""
    origin = typing.get_origin(annotation)
    if origin in (list, typing.Union):
        for arg in typing.get_args(annotation):
            found = _field_type(arg)
            if found is not None:
                return found
        return None
    return annotation if isinstance(annotation, type) and hasattr(annotation, '_attr_to_rest_field') else None


def unknown_fields(model_class, data, where=''):
    """Every key of data (recursively) the SDK's model class does not know."""
    if not isinstance(data, dict):
        return []
    fields = {}
    for klass in reversed(model_class.__mro__):
        for attr, field in vars(klass).items():
            if hasattr(field, '_rest_name'):
                fields[field._rest_name] = (attr, field)  # pylint: disable=protected-access
    hints = {}
    for klass in reversed(model_class.__mro__):
        try:
            hints.update(typing.get_type_hints(klass))
        except (NameError, TypeError):
            continue
    out = []
    for key, value in data.items():
        if key not in fields:
            out.append(where + key)
            continue
        inner = _field_type(hints.get(fields[key][0]))
        if inner is None:
            continue
        for item in value if isinstance(value, list) else [value]:
            out += unknown_fields(inner, item, where + key + '.')
    return out


def test_pages_replacement_and_tag_updates(az, tmp_path):
    cloud, net, comp, seed = az
    raw = Raw(cloud.info)
    rg = seed['resource_group']
    for n in range(3):
        make_pip(net, seed, 'pg-{0}'.format(n))
    # A paged listing: pages of one linked by nextLink (the SDK follows them), and one failing at page 2.
    cloud.azure('rule', action='pages', operation='PublicIPAddresses_List', size=1)
    path = '/subscriptions/{0}/resourceGroups/{1}/providers/Microsoft.Network/publicIPAddresses'.format(
        seed['subscription_id'], rg)
    first = raw('GET', path).json()
    assert [p['name'] for p in first['value']] == ['pg-0'] and '$skiptoken=' in first['nextLink']
    second = raw('GET', first['nextLink']).json()
    assert [p['name'] for p in second['value']] == ['pg-1']
    cloud.azure('rule', action='pages', operation='PublicIPAddresses_List', size=1)
    assert [p.name for p in net.public_ip_addresses.list(rg)] == ['pg-0', 'pg-1', 'pg-2']
    cloud.azure('rule', action='pages', operation='PublicIPAddresses_List', size=2, fail_at=2)
    with pytest.raises(HttpResponseError) as err:
        list(net.public_ip_addresses.list(rg))
    assert err.value.status_code == 500
    # Replaced behind the client's back: the same ARM id, a new identity.
    before = net.public_ip_addresses.get(rg, 'pg-0')
    replaced = cloud.azure('replace', resource='pg-0')
    after = net.public_ip_addresses.get(rg, 'pg-0')
    assert after.id == before.id and after.resource_guid != before.resource_guid
    assert replaced['identity'] == after.resource_guid
    # Tags of a NIC or public IP (PATCH, answered at once), of a disk and a VM (begin_update).
    net.public_ip_addresses.update_tags(rg, 'pg-1', nm.TagsObject(tags={'ephemera:keep': 'true'}))
    assert net.public_ip_addresses.get(rg, 'pg-1').tags == {'ephemera:keep': 'true'}
    nic = make_nic(net, seed, 'pg-nic', before.id)
    comp.virtual_machines.begin_create_or_update(rg, 'pg-vm', vm_model(seed, 'pg-vm', nic.id, ssh_key_pair(
        str(tmp_path / 'k'), 'agent'))).result()
    comp.disks.begin_update(rg, 'pg-vm-osdisk', cm.DiskUpdate(tags={'ephemera:marker': 'm'})).result()
    assert comp.disks.get(rg, 'pg-vm-osdisk').tags == {'ephemera:marker': 'm'}
    comp.virtual_machines.begin_update(rg, 'pg-vm', cm.VirtualMachineUpdate(tags={'a': 'b'})).result()
    vm = comp.virtual_machines.get(rg, 'pg-vm')
    assert vm.tags == {'a': 'b'} and vm.storage_profile.os_disk.managed_disk.id.endswith('/pg-vm-osdisk')
    old_sshd = wait(lambda: resources(cloud)['pg-vm'].get('sshd') == 'up' and resources(cloud)['pg-vm']['sshd_pid'])
    marker = os.path.join(resources(cloud)['pg-vm']['root'], 'workspace', 'left-by-the-old-machine')
    open(marker, 'w', encoding='utf-8').close()
    cloud.azure('replace', resource='pg-vm')
    assert comp.virtual_machines.get(rg, 'pg-vm').vm_id != vm.vm_id
    wait(lambda: resources(cloud)['pg-vm']['sshd_pid'] not in (None, old_sshd) and
         resources(cloud)['pg-vm']['sshd'] == 'up')
    assert not os.path.exists(marker), 'a replaced VM is another machine, with files of its own'
    comp.virtual_machines.begin_delete(rg, 'pg-vm').result()
    net.network_interfaces.begin_delete(rg, 'pg-nic').result()
    comp.disks.begin_delete(rg, 'pg-vm-osdisk').result()
    for n in range(3):
        net.public_ip_addresses.begin_delete(rg, 'pg-{0}'.format(n)).result()
    assert not resources(cloud)


def test_fault_azure_from_the_command_line(az):
    cloud, net, comp, seed = az
    state = cloud.info['state_dir']

    def cli(*args):
        done = subprocess.run([sys.executable, '-m', 'tests.localcloud', 'fault', 'azure'] + list(args) +
                              ['--state-dir', state], capture_output=True, text=True, timeout=60, check=False,
                              cwd=ROOT)
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout)

    rule = cli('lro', 'VirtualMachines_Delete', '--style', 'location', '--outcome', 'Failed', '--times', 'always')
    assert (rule['action'], rule['style'], rule['outcome'], rule['times']) == ('lro', 'location', 'Failed', None)
    assert [r['operation'] for r in cloud.azure('rules')] == ['VirtualMachines_Delete']
    make_pip(net, seed, 'cli-pip', tags={'k': 'v'})
    changed = cli('change', 'cli-pip', '--tag', 'k=w', '--remove-tag', 'x')
    assert changed['tags'] == {'k': 'w'} and net.public_ip_addresses.get(seed['resource_group'], 'cli-pip').tags == \
        {'k': 'w'}
    cli('clear')
    assert cloud.azure('rules') == []
    cloud.azure('remove', resource='cli-pip')
