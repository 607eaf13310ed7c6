"""The GCP provider's reading of the host keys an instance published in its guest attributes
(instances.getGuestAttributes, hostkeys/): google-cloud-compute's REST transport making the requests, the Compute
Engine fake (tests/localcloud/gcp.py) answering them."""

import urllib.error
import urllib.request

import pytest

from ansible_collections.ephemera.workspaces.plugins.module_utils.providers import base

pytest.importorskip('google.cloud.compute_v1')

from ansible_collections.ephemera.workspaces.plugins.module_utils.providers.gcp.client import (  # noqa: E402
    Compute,
    credentials,
)
from ansible_collections.ephemera.workspaces.plugins.module_utils.providers.gcp.provider import (  # noqa: E402
    GcpProvider,
)
from tests.localcloud.gcp import GcpFake  # noqa: E402

SOURCE = 'the guest attributes (getGuestAttributes, hostkeys/)'


def _public_key(kind):
    """A real public key of ``kind`` (ed25519 or ecdsa) as "type base64"."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec, ed25519
    key = ed25519.Ed25519PrivateKey.generate() if kind == 'ed25519' else ec.generate_private_key(ec.SECP256R1())
    return key.public_key().public_bytes(serialization.Encoding.OpenSSH,
                                         serialization.PublicFormat.OpenSSH).decode('ascii')


@pytest.fixture()
def fake():
    fake = GcpFake().start()
    yield fake
    fake.stop()


def _provider(fake):
    compute = Compute(fake.project, fake.zone, credentials('anonymous'), endpoint=fake.url, retry_timeout=5)
    return GcpProvider(compute, None, {'ssh_public_key': 'ssh-ed25519 AAAA root'})


def _instance(fake, name, enabled=True):
    items = [{'key': 'enable-guest-attributes', 'value': 'TRUE'}] if enabled else []
    status, answer = fake.insert({'name': name, 'machineType': 'zones/%s/machineTypes/e2-small' % fake.zone,
                                  'metadata': {'items': items}}, None)
    assert status == 200, answer
    return base.Resource(name, fake.zone)


def test_the_provider_names_its_source_and_what_makes_an_image_publish():
    assert GcpProvider.host_key_source == SOURCE
    assert 'guest agent' in GcpProvider.host_key_advice and 'guest attributes' in GcpProvider.host_key_advice


def test_only_keys_of_the_hostkeys_namespace_that_name_their_own_type_are_read(fake):
    provider = _provider(fake)
    resource = _instance(fake, 'ws-keys')
    ed, ecdsa, stray = _public_key('ed25519'), _public_key('ecdsa'), _public_key('ed25519')
    for namespace, key, value in (('hostkeys', 'ssh-ed25519', ed.split()[1]),
                                  ('hostkeys', 'ecdsa-sha2-nistp256', ecdsa.split()[1]),
                                  # A value whose encoding names another type than its key, a key that names no type
                                  # sshd serves, a fingerprint, and a key in another namespace: all left out.
                                  ('hostkeys', 'ssh-rsa', stray.split()[1]),
                                  ('hostkeys', 'rdp', stray.split()[1]),
                                  ('hostkeys', 'ssh-dss', 'SHA256:abcdefabcdefabcdefabcdefabcdefabcdefabcdef'),
                                  ('guestInventory', 'ssh-ed25519', stray.split()[1])):
        assert fake.guest_attribute_write('ws-keys', namespace, key, value) == (200, '')
    assert provider.published_host_keys(resource) == sorted([ed, ecdsa])
    assert ('GET', 'zones/%s/instances/ws-keys/getGuestAttributes' % fake.zone,
            {'queryPath': 'hostkeys/'}) in fake.calls


def test_nothing_published_yet_reads_as_none(fake):
    provider = _provider(fake)
    # Guest attributes on, nothing written yet: Compute Engine answers 404, read as "not yet".
    resource = _instance(fake, 'ws-empty')
    assert provider.published_host_keys(resource) == []
    # Only another namespace written: hostkeys/ is still not found.
    assert fake.guest_attribute_write('ws-empty', 'guestInventory', 'ShortName', 'debian') == (200, '')
    assert provider.published_host_keys(resource) == []
    # Guest attributes not enabled: the guest's writes are refused, and nothing is ever published.
    off = _instance(fake, 'ws-off', enabled=False)
    status, dummy = fake.guest_attribute_write('ws-off', 'hostkeys', 'ssh-ed25519', _public_key('ed25519').split()[1])
    assert status == 403
    assert provider.published_host_keys(off) == []
    # An instance that is not there (deleted meanwhile): none either; the create's wait goes on until its timeout.
    assert provider.published_host_keys(base.Resource('ws-gone', fake.zone)) == []


def test_the_metadata_server_takes_guest_attributes_only_when_they_are_enabled(fake):
    _instance(fake, 'ws-on')
    _instance(fake, 'ws-off', enabled=False)
    blob = _public_key('ed25519').split()[1]

    def put(name, flavor=True):
        url = fake.metadata_server(name) + '/computeMetadata/v1/instance/guest-attributes/hostkeys/ssh-ed25519'
        request = urllib.request.Request(url, data=blob.encode(), method='PUT',
                                         headers={'Metadata-Flavor': 'Google'} if flavor else {})
        try:
            with urllib.request.urlopen(request, timeout=10) as answer:
                return answer.status
        except urllib.error.HTTPError as err:
            return err.code
    assert (put('ws-on', flavor=False), put('ws-off'), put('ws-on')) == (403, 403, 200)
    assert fake.guest_attributes == {'ws-on': {'hostkeys': {'ssh-ed25519': blob}}}
    assert _provider(fake).published_host_keys(base.Resource('ws-on', fake.zone)) == ['ssh-ed25519 ' + blob]


def test_a_warm_members_instance_is_given_to_the_claiming_workspace(fake):
    from ansible_collections.ephemera.workspaces.plugins.module_utils.core import ownership
    compute = Compute(fake.project, fake.zone, credentials('anonymous'), endpoint=fake.url, retry_timeout=5)
    provider = GcpProvider(compute, b's' * 32, {'ssh_public_key': 'ssh-ed25519 AAAA root'}, sleep=lambda s: None)
    assert provider.pool_refusal is None
    name = provider.candidate_for('gce-member', '1')
    provider.wait(provider.allocate(base.Allocation(name, 'gce-member', 'debian-12', fake.zone, 'agent-gce-member',
                                                    'disposable-workspaces', labels={'state': 'warm'},
                                                    nonce='ab' * 16)), 10)
    member = provider.find(name)
    assert provider.verify(member, 'gce-member', 'ab' * 16) == ownership.VERIFIED
    provider.remark(member, 'gce-claimer', 'cd' * 16, 'agent-gce-claimer', {'state': 'provisioning', 'keep': 'true'})
    taken = provider.find(name)
    assert provider.verify(taken, 'gce-claimer', 'cd' * 16) == ownership.VERIFIED
    assert provider.verify(taken, 'gce-member', 'ab' * 16) == ownership.MISMATCH
    assert provider.labels(taken) == {'state': 'provisioning', 'keep': 'true'}
    assert taken.native['labels']['ephemera-workspace'] == 'gce-claimer' and taken.id == name
    # The other metadata stays (the SSH key, guest attributes).
    metadata = {i.key for i in compute.get_instance(name).metadata.items}
    assert {'ssh-keys', 'enable-guest-attributes', 'ephemera-marker'} <= metadata
    with pytest.raises(base.Conflict, match='changed since it was read'):
        provider.remark(member, 'gce-third', 'ef' * 16, 'agent-gce-third')


@pytest.mark.parametrize('lost', ['setLabels', 'setMetadata'])
def test_a_claim_whose_answer_is_lost_is_written_whole_by_its_rerun(fake, lost):
    """A claim's rerun skips the re-signing once the marker verifies for the workspace (CreateFlow._take_member): a
    claim stopped after either of its two writes leaves either the member's marker (the rerun writes both again) or
    the workspace's marker with the workspace's labels, never the workspace's marker under labels that name the
    member."""
    from ansible_collections.ephemera.workspaces.plugins.module_utils.core import ownership
    compute = Compute(fake.project, fake.zone, credentials('anonymous'), endpoint=fake.url, retry_timeout=5)
    provider = GcpProvider(compute, b's' * 32, {'ssh_public_key': 'ssh-ed25519 AAAA root'}, sleep=lambda s: None)
    name = provider.candidate_for('gce-member', '1')
    provider.wait(provider.allocate(base.Allocation(name, 'gce-member', 'debian-12', fake.zone, 'agent-gce-member',
                                                    'disposable-workspaces', labels={'state': 'warm'},
                                                    nonce='ab' * 16)), 10)
    fake.fault('drop', 'POST', r'/instances/%s/%s$' % (name, lost))
    with pytest.raises(base.UnknownOutcome):
        provider.remark(provider.find(name), 'gce-claimer', 'cd' * 16, 'agent-gce-claimer', {'state': 'provisioning'})
    found = provider.find(name)
    if provider.verify(found, 'gce-claimer', 'cd' * 16) != ownership.VERIFIED:
        # The rerun finds the member's marker and gives the instance to the workspace again.
        assert provider.verify(found, 'gce-member', 'ab' * 16) == ownership.VERIFIED
        provider.remark(found, 'gce-claimer', 'cd' * 16, 'agent-gce-claimer', {'state': 'provisioning'})
        found = provider.find(name)
    assert provider.verify(found, 'gce-claimer', 'cd' * 16) == ownership.VERIFIED
    assert found.native['labels']['ephemera-workspace'] == 'gce-claimer'
    assert provider.labels(found) == {'state': 'provisioning'}
