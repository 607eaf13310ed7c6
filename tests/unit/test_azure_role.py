"""The custom role of docs/quickstart-azure.md holds exactly the Azure RBAC actions of the Resource Manager requests
the Azure provider makes, no wildcard.

Every request goes through the ``Arm`` object of providers/azure/client.py, so every request site is a call of a
method on an ``arm`` (``arm.send``, ``arm.get``, ``self.arm.poll``, ...) somewhere in plugins/. SITES names each
site (file, function, method, its first arguments) and the operations it issues, by the operation ids of the ARM
fake (tests/localcloud/azure.py); ACTIONS gives each operation's actions (its own, and the linked ones ARM checks on
the resources its body refers to). A site SITES lacks fails the test until it is mapped, and the page follows.
"""

import ast
import json
import os
import re

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PLUGINS = os.path.join(ROOT, 'plugins')

MEMBER_TYPES = ('VirtualMachines', 'NetworkInterfaces', 'PublicIPAddresses', 'Disks')
# The polls of long-running operations: VMs' and disks' status documents are Compute's (disks' under
# DiskOperations), NICs' and public IPs' are Network's (operations, or operationResults for Location polling).
POLLS_CREATE = ('ComputeOperations_Get', 'NetworkOperations_Get', 'NetworkOperationResults_Get')
POLLS_DELETE = POLLS_CREATE + ('DiskOperations_Get',)

# (file, function, Arm method, its first arguments as written) -> the operations that site issues.
SITES = {
    ('members.py', 'read', 'get', 'self.path(member)'): ['%s_Get' % t for t in MEMBER_TYPES],
    ('members.py', '_check', 'send', "'GET', path"): [
        'ResourceGroups_Get', 'VirtualMachineSizes_List', 'VirtualMachineImages_List', 'Images_Get', 'Subnets_Get'],
    ('members.py', 'create', 'send', "'PUT', self.path(member)"): [
        'PublicIPAddresses_CreateOrUpdate', 'NetworkInterfaces_CreateOrUpdate', 'VirtualMachines_CreateOrUpdate'],
    ('members.py', 'create', 'wait', 'op'): list(POLLS_CREATE),
    ('members.py', '_disk', 'send', "'PATCH', self.path(DISK)"): ['Disks_Update'],
    ('members.py', '_delete', 'send', "'DELETE', self.path(member)"): ['%s_Delete' % t for t in MEMBER_TYPES],
    ('members.py', '_poll_accepted', 'poll', "accepted['op']"): list(POLLS_DELETE),
    ('members.py', 'inventory', 'list', 'prefix + planning.TYPES[member]'): ['%s_List' % t for t in MEMBER_TYPES],
    ('members.py', 'fresh_print', 'get', 'path'): ['%s_Get' % t for t in MEMBER_TYPES],
    ('provider.py', 'write_labels', 'send', "'PATCH', self._set(record).path(member)"): [
        'VirtualMachines_Update', 'NetworkInterfaces_UpdateTags', 'PublicIPAddresses_UpdateTags', 'Disks_Update'],
    # A warm pool claim re-tags the set's members (the same operations: no action of its own).
    ('provider.py', 'write_remark', 'send', "'PATCH', ws.path(member)"): [
        'VirtualMachines_Update', 'NetworkInterfaces_UpdateTags', 'PublicIPAddresses_UpdateTags', 'Disks_Update'],
    ('provider.py', 'published_host_keys', 'boot_log_url', 'self._set(record).path(VM)'): [
        'VirtualMachines_RetrieveBootDiagnosticsData'],
    # The serial log's blob: a SAS URL of Azure Storage, no Resource Manager request and no action.
    ('provider.py', 'published_host_keys', 'read_blob', 'url'): [],
    ('provider.py', 'power', 'send', "'GET', path"): ['VirtualMachines_InstanceView'],
    ('provider.py', '_post', 'send', "'POST', self._set(record).path(VM) + '/' + action"): [
        'VirtualMachines_Start', 'VirtualMachines_PowerOff'],
}

C, N = 'Microsoft.Compute/', 'Microsoft.Network/'
# Operation -> the RBAC actions it needs: its own, then the linked ones (a PUT that refers to another resource needs
# that resource's join action; a VM made from an image creates its OS disk).
ACTIONS = {
    'ResourceGroups_Get': {'Microsoft.Resources/subscriptions/resourceGroups/read'},
    'VirtualMachineSizes_List': {C + 'locations/vmSizes/read'},
    'VirtualMachineImages_List': {C + 'locations/publishers/artifacttypes/offers/skus/versions/read'},
    # A managed image of your own: read before the create, and read by the VM's PUT that is made from it.
    'Images_Get': {C + 'images/read'},
    'Subnets_Get': {N + 'virtualNetworks/subnets/read'},
    'VirtualMachines_Get': {C + 'virtualMachines/read'},
    'VirtualMachines_List': {C + 'virtualMachines/read'},
    'VirtualMachines_InstanceView': {C + 'virtualMachines/instanceView/read'},
    'VirtualMachines_CreateOrUpdate': {C + 'virtualMachines/write', N + 'networkInterfaces/join/action',
                                       C + 'disks/write'},
    'VirtualMachines_Update': {C + 'virtualMachines/write'},
    'VirtualMachines_Delete': {C + 'virtualMachines/delete'},
    'VirtualMachines_Start': {C + 'virtualMachines/start/action'},
    'VirtualMachines_PowerOff': {C + 'virtualMachines/powerOff/action'},
    'VirtualMachines_RetrieveBootDiagnosticsData': {C + 'virtualMachines/retrieveBootDiagnosticsData/action'},
    'Disks_Get': {C + 'disks/read'},
    'Disks_List': {C + 'disks/read'},
    'Disks_Update': {C + 'disks/write'},
    'Disks_Delete': {C + 'disks/delete'},
    'NetworkInterfaces_Get': {N + 'networkInterfaces/read'},
    'NetworkInterfaces_List': {N + 'networkInterfaces/read'},
    'NetworkInterfaces_CreateOrUpdate': {N + 'networkInterfaces/write', N + 'virtualNetworks/subnets/join/action',
                                         N + 'publicIPAddresses/join/action'},
    'NetworkInterfaces_UpdateTags': {N + 'networkInterfaces/write'},
    'NetworkInterfaces_Delete': {N + 'networkInterfaces/delete'},
    'PublicIPAddresses_Get': {N + 'publicIPAddresses/read'},
    'PublicIPAddresses_List': {N + 'publicIPAddresses/read'},
    'PublicIPAddresses_CreateOrUpdate': {N + 'publicIPAddresses/write'},
    'PublicIPAddresses_UpdateTags': {N + 'publicIPAddresses/write'},
    'PublicIPAddresses_Delete': {N + 'publicIPAddresses/delete'},
    'ComputeOperations_Get': {C + 'locations/operations/read'},
    'DiskOperations_Get': {C + 'locations/diskOperations/read'},
    'NetworkOperations_Get': {N + 'locations/operations/read'},
    'NetworkOperationResults_Get': {N + 'locations/operationResults/read'},
}
# The resources a PUT's body refers to by id (members.Members.body), each behind one linked action above.
LINKED = {'subnet': N + 'virtualNetworks/subnets/join/action', 'publicIPAddress': N + 'publicIPAddresses/join/action',
          'networkInterfaces': N + 'networkInterfaces/join/action'}

SUB, RG = '/subscriptions/7a5e0c43-1f3b-4c1e-9b7e-0d1e5c0a0b01', '/resourceGroups/ephemera-workspaces'
AT = SUB + '/providers/Microsoft.Compute/locations/westeurope/'
# A request of each operation the fake routes: the fake names it so, and the action its path and method make
# (ARM's rule: the resource types of the path, then read for GET, write for PUT and PATCH, delete for DELETE, the
# last segment's action for POST) is the operation's first action.
REQUESTS = dict(
    [('%s_%s' % (t, op), (method, SUB + RG + '/providers/%s/%s/x' % (ns, t[0].lower() + t[1:])))
     for t, ns in (('VirtualMachines', 'Microsoft.Compute'), ('Disks', 'Microsoft.Compute'),
                   ('NetworkInterfaces', 'Microsoft.Network'), ('PublicIPAddresses', 'Microsoft.Network'))
     for op, method in (('Get', 'GET'), ('CreateOrUpdate', 'PUT'), ('Delete', 'DELETE'))
     if (t, op) != ('Disks', 'CreateOrUpdate')]  # the OS disk is made by its VM's PUT, never PUT itself
    + [('%s_List' % t, ('GET', SUB + RG + '/providers/%s/%s' % (ns, t[0].lower() + t[1:])))
       for t, ns in (('VirtualMachines', 'Microsoft.Compute'), ('Disks', 'Microsoft.Compute'),
                     ('NetworkInterfaces', 'Microsoft.Network'), ('PublicIPAddresses', 'Microsoft.Network'))],
    VirtualMachines_Update=('PATCH', SUB + RG + '/providers/Microsoft.Compute/virtualMachines/x'),
    Disks_Update=('PATCH', SUB + RG + '/providers/Microsoft.Compute/disks/x'),
    NetworkInterfaces_UpdateTags=('PATCH', SUB + RG + '/providers/Microsoft.Network/networkInterfaces/x'),
    PublicIPAddresses_UpdateTags=('PATCH', SUB + RG + '/providers/Microsoft.Network/publicIPAddresses/x'),
    VirtualMachines_InstanceView=('GET', SUB + RG + '/providers/Microsoft.Compute/virtualMachines/x/instanceView'),
    VirtualMachines_Start=('POST', SUB + RG + '/providers/Microsoft.Compute/virtualMachines/x/start'),
    VirtualMachines_PowerOff=('POST', SUB + RG + '/providers/Microsoft.Compute/virtualMachines/x/powerOff'),
    VirtualMachines_RetrieveBootDiagnosticsData=(
        'POST', SUB + RG + '/providers/Microsoft.Compute/virtualMachines/x/retrieveBootDiagnosticsData'),
    ResourceGroups_Get=('GET', SUB + RG),
    Images_Get=('GET', SUB + RG + '/providers/Microsoft.Compute/images/x'),
    Subnets_Get=('GET', SUB + RG + '/providers/Microsoft.Network/virtualNetworks/v/subnets/s'),
    VirtualMachineSizes_List=('GET', AT + 'vmSizes'),
    VirtualMachineImages_List=(
        'GET', AT + 'publishers/Debian/artifacttypes/vmimage/offers/debian-12/skus/12-gen2/versions'),
)
# The polls, which the fake serves under one name of its own whatever the namespace: the URLs Azure answers.
POLL_URLS = {
    'ComputeOperations_Get': AT + 'operations/x',
    'DiskOperations_Get': AT + 'DiskOperations/x',
    'NetworkOperations_Get': SUB + '/providers/Microsoft.Network/locations/westeurope/operations/x',
    'NetworkOperationResults_Get': SUB + '/providers/Microsoft.Network/locations/westeurope/operationResults/x',
}


class _Sites(ast.NodeVisitor):
    """Every call of a method on an ``arm`` (``arm.x(...)``, ``self.arm.x(...)``), by its innermost function."""

    def __init__(self, name):
        self.name, self.function, self.sites = name, None, {}

    def visit_FunctionDef(self, node):
        outer, self.function = self.function, node.name
        self.generic_visit(node)
        self.function = outer

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_Call(self, node):
        owner = getattr(node.func, 'value', None)
        if isinstance(node.func, ast.Attribute) and (
                (isinstance(owner, ast.Name) and owner.id == 'arm')
                or (isinstance(owner, ast.Attribute) and owner.attr == 'arm')):
            count = 2 if node.func.attr == 'send' else 1
            args = ', '.join(ast.unparse(a) for a in node.args[:count])
            self.sites.setdefault((self.name, self.function, node.func.attr, args), node.lineno)
        self.generic_visit(node)


def request_sites():
    """{(file, function, method, first arguments): line} of every call of a method on an ``arm`` in plugins/."""
    sites = {}
    for folder, dummy, files in os.walk(PLUGINS):
        for name in sorted(files):
            if name.endswith('.py'):
                with open(os.path.join(folder, name)) as handle:
                    visitor = _Sites(name)
                    visitor.visit(ast.parse(handle.read()))
                sites.update(visitor.sites)
    return sites


def called_operations():
    found = set()
    for site in request_sites():
        found.update(SITES.get(site, ()))
    return found


def role_actions():
    with open(os.path.join(ROOT, 'docs', 'quickstart-azure.md')) as handle:
        text = handle.read()
    return json.loads(re.search(r'"Actions":\s*(\[.*?\])', text, re.S).group(1))


def route(method, path):
    from tests.localcloud.azure import AzureFake
    fake = AzureFake(None, '127.0.0.1', 0, None, None, None)
    fake.groups['ephemera-workspaces'] = {'name': 'ephemera-workspaces', 'location': 'westeurope', 'tags': {}}
    parts = path.strip('/').split('/')
    return fake._route(parts, [p.lower() for p in parts], method)['operation']


def lowered(actions):
    """ARM's actions ignore case."""
    return set(a.lower() for a in actions)


def path_action(method, path):
    """The action ARM checks for a request: the provider namespace, the resource types of the path, and the verb."""
    parts = path.strip('/').split('/')
    if len(parts) == 4 and parts[2].lower() == 'resourcegroups':
        return 'Microsoft.Resources/subscriptions/resourceGroups/read'
    at = len(parts) - 1 - [p.lower() for p in parts][::-1].index('providers')
    namespace, rest = parts[at + 1], parts[at + 2:]
    if method == 'POST':
        verb = rest.pop() + '/action'
    else:
        verb = {'GET': 'read', 'PUT': 'write', 'PATCH': 'write', 'DELETE': 'delete'}[method]
    # The path alternates types and names (locations/westeurope/vmSizes, .../artifacttypes/vmimage/offers/...).
    types = rest[0::2]
    return '/'.join([namespace] + types + [verb])


def test_every_request_site_is_mapped():
    sites = request_sites()
    # The reader sees the sites: a scan that missed them would let the other tests pass wrongly.
    assert {('members.py', 'create', 'send', "'PUT', self.path(member)"),
            ('members.py', '_delete', 'send', "'DELETE', self.path(member)")} <= set(sites)
    unmapped = sorted('%s:%d %s(%s) in %s' % (k[0], v, k[2], k[3], k[1]) for k, v in sites.items() if k not in SITES)
    assert unmapped == [], 'map the operations of these requests (SITES), and the role follows: %s' % unmapped
    assert set(SITES) - set(sites) == set(), 'sites no longer in the code: %s' % (set(SITES) - set(sites))
    assert called_operations() <= set(ACTIONS), called_operations() - set(ACTIONS)


def test_the_quickstart_role_holds_exactly_the_actions_of_the_calls():
    needed = set().union(*(ACTIONS[op] for op in called_operations()))
    listed = role_actions()
    assert len(listed) == len(set(listed)), 'an action listed twice'
    listed_, needed_ = lowered(listed), lowered(needed)
    assert listed_ == needed_, (sorted(listed_ - needed_), sorted(needed_ - listed_))
    assert not [a for a in listed if '*' in a]


def test_the_linked_actions_follow_the_ids_the_bodies_refer_to():
    with open(os.path.join(PLUGINS, 'module_utils', 'providers', 'azure', 'members.py')) as handle:
        body = re.search(r'\n    def body\(self, member\):\n(.*?)\n    def ', handle.read(), re.S).group(1)
    referred = set(re.findall(r"'(\w+)': \[?\s*\{'id'", body))
    assert referred == set(LINKED), 'a body refers to another resource: map its join action (LINKED, ACTIONS)'
    linked = set().union(ACTIONS['NetworkInterfaces_CreateOrUpdate'], ACTIONS['VirtualMachines_CreateOrUpdate'])
    assert set(LINKED.values()) <= linked


@pytest.mark.parametrize('operation', sorted(REQUESTS))
def test_the_fake_names_each_request_so_and_its_path_gives_the_action(operation):
    method, path = REQUESTS[operation]
    assert route(method, path) == operation
    assert path_action(method, path).lower() in lowered(ACTIONS[operation])


@pytest.mark.parametrize('operation', sorted(POLL_URLS))
def test_each_poll_reads_the_operation_of_its_url(operation):
    assert path_action('GET', POLL_URLS[operation]).lower() in lowered(ACTIONS[operation])


def test_every_called_operation_is_checked_against_the_fake_or_a_poll_url():
    assert called_operations() <= set(REQUESTS) | set(POLL_URLS)
