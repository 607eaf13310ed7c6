"""The custom role of docs/quickstart-gcp.md names exactly the IAM permissions of the Compute Engine calls the GCP
provider makes: every call the code makes (``compute.call('<method>', ...)`` and the provider's ``_act``) is mapped
here to the permissions Compute Engine's IAM documentation gives for it, and a call this table lacks fails the test
until it is mapped (and the page follows)."""

import glob
import os
import re

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# The permissions of each method (Compute Engine's "IAM permissions" of the method; an insert with a boot disk from
# an image, on a subnetwork with an external address, with labels, metadata and scheduling).
PERMISSIONS = {
    'instances.insert': {'compute.instances.create', 'compute.disks.create', 'compute.images.useReadOnly',
                         'compute.subnetworks.use', 'compute.subnetworks.useExternalIp',
                         'compute.instances.setMetadata', 'compute.instances.setLabels',
                         'compute.instances.setScheduling'},
    'instances.get': {'compute.instances.get'},
    'instances.list': {'compute.instances.list'},
    'instances.delete': {'compute.instances.delete'},
    'instances.start': {'compute.instances.start'},
    'instances.stop': {'compute.instances.stop'},
    'instances.setLabels': {'compute.instances.setLabels'},
    'instances.setScheduling': {'compute.instances.setScheduling'},
    'instances.setMetadata': {'compute.instances.setMetadata'},
    'instances.getGuestAttributes': {'compute.instances.getGuestAttributes'},
    'zoneOperations.get': {'compute.zoneOperations.get'},
    'zones.get': {'compute.zones.get'},
    'machineTypes.get': {'compute.machineTypes.get'},
    'networks.get': {'compute.networks.get'},
    'images.get': {'compute.images.get'},
    'images.getFromFamily': {'compute.images.getFromFamily'},
}


def called_methods():
    found = set()
    for path in glob.glob(os.path.join(ROOT, 'plugins', 'module_utils', 'providers', 'gcp', '*.py')):
        with open(path) as handle:
            text = handle.read()
        found.update(re.findall(r"""\.call\(\s*'([A-Za-z]+\.[A-Za-z]+)'""", text))
        found.update(re.findall(r"""_act\(\s*'[a-z]+',\s*'([A-Za-z]+\.[A-Za-z]+)'""", text))
    return found


def page_permissions():
    with open(os.path.join(ROOT, 'docs', 'quickstart-gcp.md')) as handle:
        text = handle.read()
    return set(re.search(r'gcloud iam roles create \S+ .*--permissions=(\S+)', text).group(1).split(','))


def test_every_call_of_the_provider_is_mapped():
    called = called_methods()
    # The reader sees the call sites: a pattern that missed them would let this test pass wrongly.
    assert {'instances.insert', 'instances.delete', 'instances.get', 'zoneOperations.get'} <= called
    assert called - set(PERMISSIONS) == set(), 'map the permissions of these calls: %s' % (called - set(PERMISSIONS))


def test_the_quickstart_role_names_exactly_the_permissions_of_the_calls():
    needed = set().union(*(PERMISSIONS[method] for method in called_methods()))
    listed = page_permissions()
    assert listed == needed, (sorted(listed - needed), sorted(needed - listed))
    assert not [p for p in listed if '*' in p]


def test_the_try_out_fake_asks_the_same_permission_of_each_call_it_routes():
    from tests.localcloud.gcp import PERMISSIONS as FAKE, POWER_PERMISSIONS
    fake = dict(FAKE, **POWER_PERMISSIONS)
    for route, method in (('insert', 'instances.insert'), ('get', 'instances.get'), ('list', 'instances.list'),
                          ('delete', 'instances.delete'), ('set_labels', 'instances.setLabels'),
                          ('set_scheduling', 'instances.setScheduling'), ('start', 'instances.start'),
                          ('stop', 'instances.stop'), ('guest_attributes', 'instances.getGuestAttributes')):
        assert fake[route] in PERMISSIONS[method], (route, fake[route])
