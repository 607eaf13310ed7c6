"""The Azure provider's published host keys at unit level: the VM body enables boot diagnostics; the serial log's SAS
link is read only when it is https on an Azure blob host (or the configured Resource Manager's own host and port),
without any Authorization header and at most its first MiB; a log not written yet, or a VM without its link yet, is
"no keys yet". The whole path through the shipped playbooks runs in
tests/integration/azure/test_azure_host_keys.py."""

import copy

import pytest

from ansible_collections.ephemera.workspaces.plugins.module_utils.providers import base
from ansible_collections.ephemera.workspaces.plugins.module_utils.providers.azure import client as azclient
from ansible_collections.ephemera.workspaces.plugins.module_utils.providers.azure import provider as azprovider
from ansible_collections.ephemera.workspaces.plugins.module_utils.providers.azure import plan as azplan
from ansible_collections.ephemera.workspaces.plugins.module_utils.providers.azure.plan import VM
from tests.unit.plugins.module_utils.test_provider_azure import GROUP, SUB, Recorded, Response, new_set

KEY = 'ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIAABAgMEBQYHCAkKCwwNDg8QERITFBUWFxgZGhscHR4f'
LOG = ('[    0.000000] Linux version 6.1.0\n-----BEGIN SSH HOST KEY KEYS-----\n%s root@vm\n'
       '-----END SSH HOST KEY KEYS-----\n' % KEY)
BLOB = ('https://md-abc123.blob.core.windows.net/xyz/serialconsole.log?sv=2022-11-02&se=2030-01-01T00%3A00%3A00Z'
        '&sig=SECRET')


class BlobResponse:
    def __init__(self, status, body=b'', headers=None, chunk=64 * 1024):
        self.status_code = status
        self.headers = headers or {}
        self.body = body
        self.chunk = chunk
        self.delivered = 0

    def iter_bytes(self):
        for at in range(0, len(self.body), self.chunk):
            self.delivered += len(self.body[at:at + self.chunk])
            yield self.body[at:at + self.chunk]

    def close(self):
        pass


class Transport:
    """A blob transport double: records what was sent, answers ``response``."""

    def __init__(self, response):
        self.response = response
        self.sent = []
        self.verify = None

    def __call__(self, ca_file):
        self.verify = ca_file
        return self

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def send(self, request, **kw):
        self.sent.append((request.method, request.url, dict(request.headers), kw))
        return self.response


class Sets:
    def __init__(self, records):
        self.records = {r['plan']['base']: copy.deepcopy(r) for r in records}

    def load(self, name):
        return copy.deepcopy(self.records.get(name))

    def save(self, record):
        self.records[record['plan']['base']] = copy.deepcopy(record)

    def use(self, journal, claim=None, workspace=None):
        pass


def provider(arm_answers, blob, endpoint=None):
    client = Recorded(arm_answers)
    transport = Transport(blob)
    arm = azclient.Arm(SUB, client, client, sleep=lambda s: None, endpoint=endpoint, ca_file='/ca.pem',
                       transport=transport)
    plan = azplan.plan('ws1', 'ws1-abc', GROUP, 'westeurope', 'MARKER', 'scope', subscription=SUB)
    vm_id = azplan.resource_id(SUB, GROUP, VM, plan['names'][VM])
    record = {'plan': plan, 'ids': {VM: vm_id}, 'image': 'Debian:debian-12:12-gen2:latest'}
    p = azprovider.AzureProvider(arm, b's' * 32, {'resource_group': GROUP, 'location': 'westeurope'},
                                 store=Sets([record]), sleep=lambda s: None)
    return p, base.Resource(vm_id, 'westeurope'), client, transport


def test_the_vm_is_made_with_boot_diagnostics_in_managed_storage():
    ws, dummy, dummy = new_set()
    ws.record['ids'] = {'nic': '/nic', 'pip': '/pip'}
    assert ws.body(VM)['properties']['diagnosticsProfile'] == {'bootDiagnostics': {'enabled': True}}


def test_the_keys_of_the_serial_log_are_read_with_a_short_link_no_authorization_and_a_range():
    p, resource, client, transport = provider([Response(200, {'serialConsoleLogBlobUri': BLOB,
                                                              'consoleScreenshotBlobUri': BLOB})],
                                              BlobResponse(206, LOG.encode()))
    assert p.host_key_source == 'the serial log of boot diagnostics (retrieveBootDiagnosticsData)'
    assert p.published_host_keys(resource) == [KEY]
    [(method, url)] = client.sent
    assert method == 'POST' and url.split('?')[0].endswith('/virtualMachines/ws1-abc-vm/retrieveBootDiagnosticsData')
    assert 'sasUriExpirationTimeInMinutes=5' in url and 'api-version=' in url
    [(method, url, headers, options)] = transport.sent
    assert method == 'GET' and url == BLOB and transport.verify == '/ca.pem'
    assert headers['Range'] == 'bytes=0-1048575' and 'Authorization' not in headers and options['stream']


@pytest.mark.parametrize('url,host', [
    ('http://md-abc.blob.core.windows.net/x/serialconsole.log?sig=SECRET', 'md-abc.blob.core.windows.net'),
    ('https://collector.example.com/x/serialconsole.log?sig=SECRET', 'collector.example.com'),
    ('https://md-abc.blob.core.windows.net.example.com/x?sig=SECRET', 'md-abc.blob.core.windows.net.example.com'),
    ('https://md-abc.blob.core.windows.net@example.com/x?sig=SECRET', 'example.com'),
    ('https://md-abc.blob.core.windows.net:8443/x?sig=SECRET', 'md-abc.blob.core.windows.net:8443'),
    ('https://127.0.0.1:9999/bootdiagnostics/x/serialconsole.log?sig=SECRET', '127.0.0.1:9999'),
])
def test_a_link_that_is_not_https_on_an_azure_blob_host_is_refused_naming_the_host(url, host):
    p, resource, client, transport = provider([Response(200, {'serialConsoleLogBlobUri': url})],
                                              BlobResponse(200, LOG.encode()), endpoint='https://127.0.0.1:8443')
    with pytest.raises(base.Refused) as err:
        p.published_host_keys(resource)
    assert host in str(err.value) and 'SECRET' not in str(err.value) and 'sig=' not in str(err.value)
    assert transport.sent == []


@pytest.mark.parametrize('url', [
    BLOB, 'https://md-x.blob.core.usgovcloudapi.net/a/serialconsole.log?sig=S',
    'https://md-x.blob.core.chinacloudapi.cn/a/serialconsole.log?sig=S',
    'https://MD-X.BLOB.CORE.WINDOWS.NET:443/a/serialconsole.log?sig=S',
    'https://127.0.0.1:8443/bootdiagnostics/x/serialconsole.log?sig=S',
])
def test_a_link_on_an_azure_blob_host_or_the_resource_manager_given_is_read(url):
    p, resource, client, transport = provider([Response(200, {'serialConsoleLogBlobUri': url})],
                                              BlobResponse(200, LOG.encode()), endpoint='https://127.0.0.1:8443/')
    assert p.published_host_keys(resource) == [KEY]
    assert [s[1] for s in transport.sent] == [url]


def test_at_most_the_first_mib_of_the_log_is_read():
    big = (LOG + 'x' * 1023 + '\n') * 3000
    blob = BlobResponse(200, big.encode())
    p, resource, client, transport = provider([Response(200, {'serialConsoleLogBlobUri': BLOB})], blob)
    text = p.arm.read_blob(BLOB)
    assert len(text) == azclient.BOOT_LOG_MAX == 1024 * 1024
    assert blob.delivered <= azclient.BOOT_LOG_MAX + blob.chunk


def test_a_log_not_written_yet_or_no_link_yet_is_no_keys_yet():
    p, resource, client, transport = provider([Response(200, {'serialConsoleLogBlobUri': BLOB})],
                                              BlobResponse(404, b'<Error><Code>BlobNotFound</Code></Error>',
                                                           {'x-ms-error-code': 'BlobNotFound'}))
    assert p.published_host_keys(resource) == []
    p, resource, client, transport = provider([Response(200, {})], BlobResponse(200, LOG.encode()))
    assert p.published_host_keys(resource) == [] and transport.sent == []
    p, resource, client, transport = provider([Response(200, {'serialConsoleLogBlobUri': BLOB})],
                                              BlobResponse(206, b'[    0.000000] Linux version 6.1.0\n'))
    assert p.published_host_keys(resource) == []


def test_a_conflict_before_the_boot_diagnostics_data_exists_is_no_keys_yet():
    """ARM answers 409 (OperationNotAllowed) while a VM has no boot diagnostics data to give: no link yet, as a log
    not written yet, so the create keeps waiting; no blob is read."""
    not_yet = Response(409, {'error': {'code': 'OperationNotAllowed',
                                       'message': 'Boot diagnostics is not enabled for the virtual machine.'}})
    p, resource, client, transport = provider([not_yet], BlobResponse(200, LOG.encode()))
    assert p.published_host_keys(resource) == [] and transport.sent == []


def test_errors_are_provider_errors_the_wait_tolerates_and_never_say_the_link():
    invalid = Response(400, {'error': {'code': 'InvalidParameter',
                                       'message': 'The value of parameter sasUriExpirationTimeInMinutes is invalid.'}})
    p, resource, client, transport = provider([invalid], BlobResponse(200, LOG.encode()))
    with pytest.raises(base.Refused):
        p.published_host_keys(resource)
    assert transport.sent == []
    p, resource, client, transport = provider([Response(200, {'serialConsoleLogBlobUri': BLOB})],
                                              BlobResponse(403, b'', {'x-ms-error-code': 'AuthenticationFailed'}))
    with pytest.raises(base.Refused) as err:
        p.published_host_keys(resource)
    assert 'AuthenticationFailed' in str(err.value) and 'SECRET' not in str(err.value)

    class Lost(Transport):
        def send(self, request, **kw):
            from azure.core.exceptions import ServiceRequestError
            raise ServiceRequestError('Max retries exceeded with url: %s' % request.url)
    p, resource, client, transport = provider([Response(200, {'serialConsoleLogBlobUri': BLOB})], None)
    p.arm.transport = Lost(None)
    with pytest.raises(base.Transient) as err:
        p.published_host_keys(resource)
    assert 'md-abc123.blob.core.windows.net' in str(err.value) and 'SECRET' not in str(err.value)


def test_the_blob_transport_never_sends_an_authorization_header():
    transport = azclient._blob_transport('/ca.pem')  # pylint: disable=protected-access
    import requests
    prepared = requests.Request('GET', BLOB, headers={'Authorization': 'Bearer token'}).prepare()
    assert 'Authorization' not in transport.session.auth(prepared).headers
    assert transport.connection_config.verify == '/ca.pem'
