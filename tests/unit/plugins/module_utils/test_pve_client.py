"""The Proxmox client against a real fakepve server over HTTPS (fixtures from fakepve's pytest plugin).

Errors come from PVE's own catalogue (pve.errors_for / pve.fail(error=...)) or from the fake's
stateful behaviour; network trouble from slow_network / flaky_network and closed ports.
"""

import http.server
import re
import threading

import pytest

from fakepve.certs import make_cert

from ansible_collections.ephemera.workspaces.plugins.module_utils.providers.proxmox import client as pvemod
from ansible_collections.ephemera.workspaces.plugins.module_utils.providers.proxmox.client import (
    PveAlreadyExists, PveApiError, PveAuthError, PveBadUpid, PveClient, PveConfigError, PveLocked, PveLockTimeout,
    PveNotFound, PveParameterError, PvePermissionDenied, PveTaskFailed, PveTaskTimeout, PveTlsError, PveTransient,
    PveUnknownOutcome, PveUnreachable, TaskResult, Upid, classify, client_from_params, connection_options)
from tests.localpve.addresses import closed_port

TEMPLATE = 9000
OPEN = []


@pytest.fixture(autouse=True)
def close_clients(request):
    if 'fakepve' in request.fixturenames:
        request.getfixturevalue('fakepve')  # so that the server stops after its clients closed
    yield
    while OPEN:
        OPEN.pop().close()


def make_client(fakepve, cafile, **kwargs):
    options = dict(api_user='root@pam', api_password='secret', ca_file=cafile)
    options.update(kwargs)
    return connect(fakepve.url, **options)


def connect(*args, **kwargs):
    return keep(PveClient(*args, **kwargs))


def keep(client):
    OPEN.append(client)
    return client


def add_template(fakepve):
    return fakepve.add_ct(TEMPLATE, 'tpl', template=True,
                          config={'rootfs': 'local-lvm:base-{0}-disk-0,size=8G'.format(TEMPLATE)})


def requests_to(fakepve, method, suffix):
    return [r for r in fakepve.requests if r[0] == method and r[1].endswith(suffix)]


# ------------------------------------------------------------------------------------ auth

def test_password_login_then_request(fakepve, fakepve_cafile):
    client = make_client(fakepve, fakepve_cafile)
    assert client.get('/version')['version'] == fakepve.version
    assert client.auth_mode == 'password'
    assert client.request_count == 2  # the login, then the call
    assert [r[1] for r in fakepve.requests] == ['/api2/json/access/ticket', '/api2/json/version']


@pytest.mark.parametrize('token_options', [
    dict(api_token_id='root@pam!ci'),
    dict(api_user='root@pam', api_token_id='ci'),
])
def test_api_token_auth(fakepve, fakepve_cafile, token_options):
    fakepve.apitokens['root@pam!ci'] = 'token-secret'
    fakepve.add_ct(105, 'box')
    client = connect(fakepve.url, api_token_secret='token-secret', ca_file=fakepve_cafile, **token_options)
    upid = client.post('/nodes/pve1/lxc/105/status/start')
    assert Upid.parse(upid).user == 'root@pam!ci'
    assert client.token_id == 'root@pam!ci'
    assert client.request_count == 1  # no login round trip
    assert not requests_to(fakepve, 'POST', '/access/ticket')


def test_token_wins_over_password(fakepve, fakepve_cafile):
    fakepve.apitokens['root@pam!ci'] = 'token-secret'
    client = make_client(fakepve, fakepve_cafile, api_password='wrong', api_token_id='root@pam!ci',
                         api_token_secret='token-secret')
    assert client.get('/version')
    assert client.auth_mode == 'token'


def test_wrong_password_names_user_and_fix(fakepve, fakepve_cafile):
    client = make_client(fakepve, fakepve_cafile, api_password='not-the-password')
    with pytest.raises(PveAuthError) as info:
        client.get('/version')
    message = str(info.value)
    assert "'root@pam'" in message and fakepve.url in message
    assert 'api_password' in message and 'PROXMOX_PASSWORD' in message
    assert info.value.kind == 'auth'
    assert client.request_count == 1  # a refused login is not repeated


def test_wrong_token_secret_names_token_and_fix(fakepve, fakepve_cafile):
    fakepve.apitokens['root@pam!ci'] = 'token-secret'
    client = connect(fakepve.url, api_token_id='root@pam!ci', api_token_secret='nope', ca_file=fakepve_cafile)
    with pytest.raises(PveAuthError) as info:
        client.post('/nodes/pve1/lxc/105/status/start')
    assert "'root@pam!ci'" in str(info.value)
    assert 'api_token_secret' in str(info.value)
    assert info.value.status == 401
    assert client.request_count == 1


def test_revoked_ticket_is_renewed_once(fakepve, fakepve_cafile):
    client = make_client(fakepve, fakepve_cafile)
    client.get('/version')
    fakepve.revoke_tickets()
    assert client.get('/version')['version'] == fakepve.version
    assert client.request_count == 5  # login, call, refused call, new login, call
    assert len(requests_to(fakepve, 'POST', '/access/ticket')) == 2


def test_ticket_refused_even_after_fresh_login_is_an_auth_error(fakepve, fakepve_cafile):
    fakepve.fail('GET', '/version', error='invalid_ticket')
    client = make_client(fakepve, fakepve_cafile)
    with pytest.raises(PveAuthError) as info:
        client.get('/version')
    assert 'invalid PVE ticket' in str(info.value)
    assert len(requests_to(fakepve, 'POST', '/access/ticket')) == 2


# ------------------------------------------------------------------- configuration, env

@pytest.mark.parametrize('form', ['url', 'url_api_path', 'host_port', 'host_and_api_port'])
def test_api_host_forms(fakepve, fakepve_cafile, form):
    host = {'url': fakepve.url, 'url_api_path': fakepve.url + '/api2/json/', 'host_port': '127.0.0.1:{0}'.format(fakepve.port),
            'host_and_api_port': '127.0.0.1'}[form]
    client = connect(host, api_port=fakepve.port, api_user='root@pam', api_password='secret', ca_file=fakepve_cafile)
    assert client.base_url == fakepve.url
    assert client.get('/version')


def test_env_fallbacks_password(fakepve, fakepve_cafile):
    env = dict(PROXMOX_HOST=fakepve.url, PROXMOX_USER='root@pam', PROXMOX_PASSWORD='secret', PROXMOX_CA_FILE=fakepve_cafile)
    client = keep(client_from_params({}, environ=env))
    assert client.get('/version')
    assert (client.user, client.auth_mode, client.ca_file) == ('root@pam', 'password', fakepve_cafile)


def test_env_fallbacks_token_and_validate_certs(fakepve):
    fakepve.apitokens['root@pam!ci'] = 'token-secret'
    env = dict(PROXMOX_HOST=fakepve.url, PROXMOX_TOKEN_ID='root@pam!ci', PROXMOX_TOKEN_SECRET='token-secret',
               PROXMOX_VALIDATE_CERTS='false')
    client = keep(client_from_params({}, environ=env))
    assert client.get('/version')
    assert client.auth_mode == 'token'


def test_explicit_options_win_over_env(fakepve, fakepve_cafile):
    env = dict(PROXMOX_HOST='https://127.0.0.1:1', PROXMOX_USER='nobody@pve', PROXMOX_PASSWORD='wrong')
    client = keep(client_from_params(dict(api_host=fakepve.url, api_user='root@pam', api_password='secret',
                                     ca_file=fakepve_cafile), environ=env))
    assert client.get('/version')


def test_connection_defaults():
    options = connection_options({}, environ={})
    assert options['api_port'] == 8006 and options['validate_certs'] is True and options['request_timeout'] == 30
    with pytest.raises(PveConfigError, match='PROXMOX_VALIDATE_CERTS'):
        connection_options({}, environ=dict(PROXMOX_VALIDATE_CERTS='perhaps'))


@pytest.mark.parametrize('options, words', [
    (dict(), ['api_host', 'PROXMOX_HOST']),
    (dict(api_host='pve.example'), ['api_password', 'api_token_id']),
    (dict(api_host='pve.example', api_user='root@pam'), ['api_password is missing']),
    (dict(api_host='pve.example', api_token_id='root@pam!ci'), ['api_token_secret']),
    (dict(api_host='pve.example', api_token_id='ci', api_token_secret='x'), ['api_user', 'user@realm!ci']),
    (dict(api_host='pve.example', api_user='a@pve', api_token_id='root@pam!ci', api_token_secret='x'), ['one user']),
    (dict(api_host='http://pve.example:8006', api_user='root@pam', api_password='x'), ['https only']),
    (dict(api_host='pve.example:http', api_user='root@pam', api_password='x'), ['not a host']),
    (dict(api_host='pve.example', api_user='root@pam', api_password='x', ca_file='/nonexistent/ca.pem'),
     ["ca_file '/nonexistent/ca.pem'", 'pve-root-ca.pem']),
    (dict(api_host='pve.example', api_user='root@pam', api_password='x', request_timeout=0), ['request_timeout']),
])
def test_bad_settings_are_refused_before_any_request(options, words):
    with pytest.raises(PveConfigError) as info:
        client_from_params(options, environ={})
    for word in words:
        assert word in str(info.value)


def test_ipv6_host_forms():
    for text, port in (('::1', 8006), ('[::1]:8443', 8443), ('https://[::1]:9006', 9006)):
        client = PveClient(text, api_user='root@pam', api_password='x')
        assert client.base_url == 'https://[::1]:{0}'.format(port)


# --------------------------------------------------------------- unreachable, TLS, transport

def test_unreachable_host_says_where_and_what_to_check():
    port = closed_port()
    client = PveClient('127.0.0.1', api_port=port, api_user='root@pam', api_password='secret', get_retries=0)
    with pytest.raises(PveUnreachable) as info:
        client.get('/version')
    err = info.value
    assert isinstance(err, PveTransient)
    assert (err.kind, err.transport) == ('unreachable', 'refused')
    assert 'https://127.0.0.1:{0}'.format(port) in str(err) and 'connection refused' in str(err)
    assert 'api_host' in str(err) and 'api_port' in str(err)


def test_unreachable_with_token_is_the_same_error():
    client = PveClient('127.0.0.1', api_port=closed_port(), api_token_id='root@pam!ci', api_token_secret='x')
    with pytest.raises(PveUnreachable):
        client.post('/nodes/pve1/lxc/105/status/start')
    assert client.request_count == 1  # a POST is never repeated


def test_certificate_from_another_ca_does_not_verify(fakepve, tmp_path):
    other_ca = make_cert(str(tmp_path), name='other-ca', hosts=('127.0.0.1',))[0]
    client = make_client(fakepve, other_ca)
    with pytest.raises(PveTlsError) as info:
        client.get('/version')
    message = str(info.value)
    assert fakepve.url in message and 'does not verify' in message
    assert "ca_file '{0}'".format(other_ca) in message and 'validate_certs' in message
    assert info.value.transport == 'tls'


def test_self_signed_certificate_fails_against_system_cas(fakepve):
    client = make_client(fakepve, None)
    with pytest.raises(PveTlsError, match="system's CA certificates"):
        client.get('/version')


class QuietHandler(http.server.BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass


def test_port_without_tls_is_a_tls_error_naming_the_port():
    # An HTTP server where the HTTPS API should be: the TLS handshake fails before anything is sent.
    server = http.server.HTTPServer(('127.0.0.1', 0), QuietHandler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        client = connect('127.0.0.1', api_port=server.server_address[1], api_user='root@pam', api_password='secret')
        with pytest.raises(PveTlsError) as info:
            client.get('/version')
        token_client = connect('127.0.0.1', api_port=server.server_address[1], api_token_id='root@pam!ci',
                               api_token_secret='x')
        with pytest.raises(PveTlsError):
            token_client.post('/nodes/pve1/lxc/105/status/start')  # a failed handshake sent nothing
    finally:
        server.shutdown()
        server.server_close()
    assert 'TLS with https://127.0.0.1:{0} failed'.format(server.server_address[1]) in str(info.value)
    assert 'api_port' in str(info.value)


def test_validate_certs_false_accepts_any_certificate(fakepve):
    client = make_client(fakepve, None, validate_certs=False)
    assert client.get('/version')


@pytest.mark.fakepve(time_scale=1)
def test_read_timeout_is_unknown_outcome_and_the_post_is_not_repeated(fakepve, fakepve_cafile):
    add_template(fakepve)
    client = make_client(fakepve, fakepve_cafile, request_timeout=0.3)
    client.get('/version')
    fakepve.slow_network(0.8)
    with pytest.raises(PveUnknownOutcome) as info:
        client.post('/nodes/pve1/lxc/{0}/clone'.format(TEMPLATE), newid=105, hostname='agent-x')
    assert info.value.transport == 'read_timeout'
    assert 'no answer within 0.3 s after the request was sent' in str(info.value)
    assert 'may or may not have been carried out' in str(info.value)
    assert client.request_count == 3  # login, version, one POST: the caller decides what comes next


def test_connection_lost_after_send_is_unknown_outcome(fakepve, fakepve_cafile):
    fakepve.add_ct(105, 'box')
    client = make_client(fakepve, fakepve_cafile)
    client.get('/version')
    fakepve.flaky_network(drop_rate=1.0)
    with pytest.raises(PveUnknownOutcome) as info:
        client.post('/nodes/pve1/lxc/105/status/start')
    assert info.value.transport == 'connection_lost'
    assert client.request_count == 3  # login, version, one POST: never repeated


def test_get_is_repeated_after_a_lost_connection(fakepve, fakepve_cafile):
    client = make_client(fakepve, fakepve_cafile, get_retries=2)
    client.get('/version')
    fakepve.flaky_network(drop_rate=1.0)
    with pytest.raises(PveUnknownOutcome):
        client.get('/version')
    assert client.request_count == 2 + 3


def test_login_through_a_broken_network_is_transient(fakepve, fakepve_cafile):
    fakepve.flaky_network(drop_rate=1.0)
    with pytest.raises(PveTransient) as info:
        make_client(fakepve, fakepve_cafile).get('/version')
    assert info.value.path == '/access/ticket'
    assert 'retrying later is safe' in str(info.value) and 'may or may not' not in str(info.value)


def test_proxy_error_page_is_transient_and_get_retries(fakepve, fakepve_cafile):
    fakepve.fail('GET', '/cluster/resources', status=503, message='<html>Service Unavailable</html>', html=True, times=2)
    client = make_client(fakepve, fakepve_cafile)
    assert client.get('/cluster/resources', type='vm') == []
    assert len(requests_to(fakepve, 'GET', '/cluster/resources')) == 3


def test_transient_post_is_not_repeated(fakepve, fakepve_cafile):
    fakepve.add_ct(105, 'box')
    fakepve.fail('POST', '/nodes/pve1/lxc/105/status/start', error='no_quorum', times=1)
    client = make_client(fakepve, fakepve_cafile)
    with pytest.raises(PveTransient) as info:
        client.post('/nodes/pve1/lxc/105/status/start')
    assert info.value.pve_message == 'cluster not ready - no quorum?'
    assert len(requests_to(fakepve, 'POST', '/status/start')) == 1
    assert fakepve.ct(105).status == 'stopped'


def test_only_get_may_be_repeated(fakepve, fakepve_cafile):
    with pytest.raises(ValueError):
        make_client(fakepve, fakepve_cafile).request('POST', '/nodes/pve1/lxc/105/status/start', retries=2)


# ------------------------------------------------------------ PVE's catalogued error answers

CT_PATH = '/nodes/pve1/lxc/105'
CATALOGUED = [
    ('GET', CT_PATH + '/config', {}, 'configuration_file_does_not_exist', PveNotFound),
    ('DELETE', CT_PATH, {}, 'configuration_file_does_not_exist', PveNotFound),
    ('PUT', CT_PATH + '/config', {'memory': 1024}, 'locked', PveLocked),
    ('DELETE', CT_PATH, {}, 'locked', PveLocked),
    ('PUT', CT_PATH + '/config', {'memory': 1024}, 'config_lock_timeout', PveLockTimeout),
    ('POST', '/nodes/pve1/qemu/100/clone', {'newid': 105}, 'unable_create_config_file_already', PveAlreadyExists),
    ('GET', '/cluster/nextid', {'vmid': 105}, 'param_vmid_already_exists', PveAlreadyExists),
    ('PUT', CT_PATH + '/config', {'delete': 'mp0'}, 'param_delete_unknown_option', PveParameterError),
    ('GET', '/nodes/pve1/tasks/UPID:pve1:000003E8:00001B58:6B105231:vzstart:105:root@pam:/status', {},
     'param_upid_no_such_task', PveNotFound),
    ('GET', '/nodes/pve1/tasks/nonsense/status', {}, 'param_upid_unable_parse_worker', PveParameterError),
    ('POST', CT_PATH + '/status/start', {}, 'no_quorum', PveTransient),
    ('POST', CT_PATH + '/status/start', {}, 'no_route_to_host', PveTransient),
    ('POST', CT_PATH + '/status/start', {}, 'permission_denied', PvePermissionDenied),
    ('POST', CT_PATH + '/status/start', {}, 'already_running', PveApiError),
    ('POST', CT_PATH + '/status/start', {}, 'not_implemented', PveApiError),
]


@pytest.mark.parametrize('method, path, params, name, cls', CATALOGUED,
                         ids=['{0} {1} {2}'.format(c[0], c[1].split('/')[-1], c[3]) for c in CATALOGUED])
def test_catalogued_error_is_classified(fakepve, fakepve_cafile, method, path, params, name, cls):
    entry = [e for e in fakepve.errors_for(method, path, params) if e['name'] == name][0]
    fakepve.fail(method, path, error=name)
    client = make_client(fakepve, fakepve_cafile, get_retries=0)
    form = dict(params=params) if method in ('GET', 'DELETE') else dict(data=params)
    with pytest.raises(PveApiError) as info:
        client.request(method, path, **form)
    err = info.value
    assert err.__class__ is cls  # exactly this class, not a subclass
    assert err.status == entry['status']
    assert err.pve_message == entry['message']
    assert err.errors == entry.get('errors')
    assert entry['message'].rstrip('.') in str(err) and method + ' ' + path in str(err)
    assert err.details['kind'] == err.kind
    if cls is PveLocked:
        assert err.lock == 'backup'


def test_missing_container_is_not_found(fakepve, fakepve_cafile):
    with pytest.raises(PveNotFound, match=r"Configuration file 'nodes/pve1/lxc/404.conf' does not exist"):
        make_client(fakepve, fakepve_cafile).get('/nodes/pve1/lxc/404/config')


def test_container_on_another_node_is_not_found(fakepve, fakepve_cafile):
    fakepve.add_ct(105, 'box', node='pve2')
    with pytest.raises(PveNotFound):
        make_client(fakepve, fakepve_cafile).get('/nodes/pve1/lxc/105/config')


def test_clone_onto_a_taken_id_is_already_exists(fakepve, fakepve_cafile):
    add_template(fakepve)
    fakepve.add_ct(105, 'someone-else')
    with pytest.raises(PveAlreadyExists, match="CT 105 already exists on node 'pve1'"):
        make_client(fakepve, fakepve_cafile).post('/nodes/pve1/lxc/{0}/clone'.format(TEMPLATE), newid=105)


def test_container_in_create_lock_is_locked(fakepve, fakepve_cafile):
    fakepve.add_ct(105, 'half-made', lock='create')
    with pytest.raises(PveLocked) as info:
        make_client(fakepve, fakepve_cafile).put('/nodes/pve1/lxc/105/config', description='x')
    assert info.value.lock == 'create'
    assert 'pct unlock' in str(info.value)


def test_wrong_parameter_names_the_parameter(fakepve, fakepve_cafile):
    fakepve.add_ct(105, 'box')
    with pytest.raises(PveParameterError) as info:
        make_client(fakepve, fakepve_cafile).put('/nodes/pve1/lxc/105/config', memory='lots')
    assert set(info.value.errors) == {'memory'}
    assert 'memory: ' in str(info.value)


def test_booleans_and_none_are_sent_as_pve_reads_them(fakepve, fakepve_cafile):
    add_template(fakepve)
    client = make_client(fakepve, fakepve_cafile)
    client.post('/nodes/pve1/lxc/{0}/clone'.format(TEMPLATE), newid=106, full=False, pool=None, hostname='agent-y')
    body = requests_to(fakepve, 'POST', '/clone')[0][2].decode()
    assert 'full=0' in body and 'pool' not in body


@pytest.mark.parametrize('status, message, errors, pve_answer, kind', [
    (500, "CT is locked (create)", None, True, 'locked'),
    (500, "VM is locked (backup)", None, True, 'locked'),
    (500, "can't lock file '/run/lock/lxc/pve-config-105.lock' - got timeout", None, True, 'lock_timeout'),
    (500, "Configuration file 'nodes/pve1/lxc/105.conf' does not exist", None, True, 'not_found'),
    (400, 'Parameter verification failed.', {'upid': 'no such task'}, True, 'not_found'),
    (400, 'Parameter verification failed.', {'vmid': 'VM 105 already exists'}, True, 'already_exists'),
    (400, 'Parameter verification failed.', {'storage': "storage 'x' does not exist"}, True, 'parameter'),
    (500, 'CT 105 already running', None, True, 'other'),
    (500, 'internal error', None, False, 'transient'),
    (503, 'Service Unavailable', None, False, 'transient'),
    (502, 'Bad Gateway', None, False, 'unknown_outcome'),
    (504, 'Gateway Timeout', None, False, 'unknown_outcome'),
    (596, 'Connection timed out', None, True, 'unknown_outcome'),
    (595, 'No route to host', None, True, 'transient'),
])
def test_classify(status, message, errors, pve_answer, kind):
    assert classify(status, message, errors, pve_answer)[0] == kind


# -------------------------------------------------------------------------------- UPIDs

def test_upid_parsing():
    upid = Upid.parse(' UPID:pve-1:000003E8:00001B58:6B105231:vzclone:9000:root@pam!ci:\n')
    assert (upid.node, upid.pid, upid.pstart, upid.starttime) == ('pve-1', 1000, 7000, 0x6B105231)
    assert (upid.type, upid.id, upid.user) == ('vzclone', '9000', 'root@pam!ci')
    assert str(upid) == 'UPID:pve-1:000003E8:00001B58:6B105231:vzclone:9000:root@pam!ci:'
    assert Upid.parse(upid) is upid
    assert Upid.parse('UPID:n:00000001:000000002:00000003:aptupdate::root@pam:').id == ''


@pytest.mark.parametrize('text', [
    'UPID:pve1:termproxy:105:',
    'UPID:pve1:000003E8:00001B58:6B105231:vzclone:9000:root@pam',
    'UPID:pve1/../x:000003E8:00001B58:6B105231:vzclone:9000:root@pam:',
    'UPID:pve1:3E8:00001B58:6B105231:vzclone:9000:root@pam:',
    '105',
    '',
])
def test_malformed_upid_is_refused_with_the_expected_form(text):
    with pytest.raises(PveBadUpid) as info:
        Upid.parse(text)
    assert repr(text) in str(info.value)
    assert 'UPID:<node>:<pid>' in str(info.value)


def test_upid_must_be_a_string():
    with pytest.raises(PveBadUpid, match='not 105'):
        Upid.parse(105)


def test_wait_on_malformed_upid_sends_nothing(fakepve, fakepve_cafile):
    client = make_client(fakepve, fakepve_cafile)
    with pytest.raises(PveBadUpid, match="'not-a-upid'"):
        client.wait_task('not-a-upid')
    assert client.request_count == 0


# -------------------------------------------------------------------------------- tasks

def test_wait_for_a_clone(fakepve, fakepve_cafile):
    add_template(fakepve)
    client = make_client(fakepve, fakepve_cafile)
    upid = client.post('/nodes/pve1/lxc/{0}/clone'.format(TEMPLATE), newid=105, hostname='agent-x')
    result = client.wait_task(upid, timeout=30)
    assert isinstance(result, TaskResult)
    assert (result.status, result.exitstatus, result.succeeded, result.warnings) == ('stopped', 'OK', True, 0)
    assert (result.type, result.id, result.node) == ('vzclone', str(TEMPLATE), 'pve1')
    assert result.log_tail == []
    assert set(result.as_dict()) == set(TaskResult.FIELDS)
    assert fakepve.ct(105).lock is None


@pytest.mark.fakepve(time_scale=1)
def test_wait_for_a_task_that_takes_time(fakepve, fakepve_cafile):
    box = fakepve.add_ct(105, 'box')
    box.start_secs = 0.5
    client = make_client(fakepve, fakepve_cafile)
    upid = client.post('/nodes/pve1/lxc/105/status/start')
    assert client.task_status(upid).status == 'running'
    result = client.wait_task(upid, timeout=30)
    assert result.succeeded and fakepve.ct(105).status == 'running'
    assert len(requests_to(fakepve, 'GET', '/status')) >= 3  # it looked more than once


def test_failed_task_fails_fast_with_the_log_tail(fakepve, fakepve_cafile):
    box = fakepve.add_ct(105, 'box')
    box.start_error = 'mount failed: no such volume'
    client = make_client(fakepve, fakepve_cafile)
    upid = client.post('/nodes/pve1/lxc/105/status/start')
    with pytest.raises(PveTaskFailed) as info:
        client.wait_task(upid, timeout=600)  # a wait that did not fail fast would end in PveTaskTimeout
    err = info.value
    assert err.exitstatus == 'mount failed: no such volume'
    assert err.log_tail[-1] == 'TASK ERROR: mount failed: no such volume'
    assert err.upid == upid and err.task.succeeded is False
    assert 'vzstart 105 on node pve1 failed: mount failed' in str(err)
    assert 'TASK ERROR: mount failed: no such volume' in str(err)
    assert err.details['task']['exitstatus'] == err.exitstatus


def test_catalogued_in_task_error_fails_the_task(fakepve, fakepve_cafile):
    fakepve.add_ct(105, 'box')
    fakepve.fail('POST', '/nodes/pve1/lxc/105/status/start', error='locked')
    client = make_client(fakepve, fakepve_cafile)
    upid = client.post('/nodes/pve1/lxc/105/status/start')
    with pytest.raises(PveTaskFailed) as info:
        client.wait_task(upid, timeout=60)
    assert info.value.exitstatus == 'CT is locked (backup)'
    assert 'TASK ERROR: CT is locked (backup)' in info.value.log_tail


def test_log_tail_is_the_end_of_a_long_log(fakepve, fakepve_cafile):
    box = fakepve.add_ct(105, 'box')
    box.start_error = 'it broke'
    client = make_client(fakepve, fakepve_cafile)
    upid = client.post('/nodes/pve1/lxc/105/status/start')
    # A chatty task: 1200 lines before the error.
    fakepve.tasks[upid]['log'][:0] = ['step {0}'.format(n) for n in range(1200)]
    with pytest.raises(PveTaskFailed) as info:
        client.wait_task(upid, timeout=60)
    assert info.value.log_tail == ['step {0}'.format(n) for n in range(1182, 1200)] + ['it broke', 'TASK ERROR: it broke']
    assert len(requests_to(fakepve, 'GET', '/log')) == 3  # pages of 500 lines


def test_warnings_are_success_and_surfaced(fakepve, fakepve_cafile):
    fakepve.add_ct(105, 'box')
    client = make_client(fakepve, fakepve_cafile)
    upid = client.post('/nodes/pve1/lxc/105/status/start')
    # fakepve has no task that ends with warnings: record what PVE's worker writes for one.
    record = fakepve.tasks[upid]
    record['log'][-1:] = ['WARN: old config format', 'started', 'WARN: no DHCP lease', 'TASK WARNINGS: 2']
    record['exitstatus'] = 'WARNINGS: 2'
    result = client.wait_task(upid, timeout=60)
    assert (result.succeeded, result.warnings, result.exitstatus) == (True, 2, 'WARNINGS: 2')
    assert result.warning_lines == ['WARN: old config format', 'WARN: no DHCP lease']
    assert result.log_tail[-1] == 'TASK WARNINGS: 2'


def test_brand_new_upid_briefly_unknown_is_waited_for(fakepve, fakepve_cafile):
    fakepve.add_ct(105, 'box')
    client = make_client(fakepve, fakepve_cafile)
    upid = client.post('/nodes/pve1/lxc/105/status/start')
    fakepve.fail('GET', '/nodes/pve1/tasks/{0}/status'.format(upid), error='param_upid_no_such_task', times=2)
    assert client.wait_task(upid, timeout=60).succeeded
    assert len(requests_to(fakepve, 'GET', '/status')) == 3


def test_unknown_task_is_not_found_after_the_grace(fakepve, fakepve_cafile):
    client = make_client(fakepve, fakepve_cafile)
    upid = 'UPID:pve1:00FFFFFF:00001B58:6B105231:vzstart:105:root@pam:'
    with pytest.raises(PveNotFound) as info:
        client.wait_task(upid, timeout=60, not_found_grace=0.3)
    assert 'unknown on node pve1' in str(info.value) and upid in str(info.value)
    assert len(requests_to(fakepve, 'GET', '/status')) > 1  # it looked again during the grace


def test_an_unknown_task_is_looked_for_twice_however_slow_the_first_look(fakepve, fakepve_cafile):
    # A grace of 0: the first answer comes after it has passed (as on a loaded node), and still it looks once more.
    client = make_client(fakepve, fakepve_cafile)
    upid = 'UPID:pve1:00FFFFFF:00001B58:6B105231:vzstart:105:root@pam:'
    with pytest.raises(PveNotFound):
        client.wait_task(upid, timeout=60, not_found_grace=0)
    assert len(requests_to(fakepve, 'GET', '/status')) == 2


def test_wait_keeps_looking_through_transient_errors(fakepve, fakepve_cafile):
    fakepve.add_ct(105, 'box')
    client = make_client(fakepve, fakepve_cafile)
    upid = client.post('/nodes/pve1/lxc/105/status/start')
    fakepve.fail('GET', '/nodes/pve1/tasks/{0}/status'.format(upid), status=503, message='busy', html=True, times=2)
    assert client.wait_task(upid, timeout=60).succeeded


def test_wait_stops_on_errors_that_will_not_pass(fakepve, fakepve_cafile):
    fakepve.add_ct(105, 'box')
    client = make_client(fakepve, fakepve_cafile)
    upid = client.post('/nodes/pve1/lxc/105/status/start')
    fakepve.fail('GET', '/nodes/pve1/tasks/{0}/status'.format(upid), status=403, message='Permission check failed')
    with pytest.raises(PvePermissionDenied):
        client.wait_task(upid, timeout=60)


@pytest.mark.fakepve(time_scale=1)
def test_wait_times_out_by_wall_clock_on_a_slow_network(fakepve, fakepve_cafile):
    box = fakepve.add_ct(105, 'box')
    box.start_secs = 60
    client = make_client(fakepve, fakepve_cafile)
    upid = client.post('/nodes/pve1/lxc/105/status/start')
    fakepve.slow_network(0.4)
    before = client.request_count
    with pytest.raises(PveTaskTimeout) as info:
        client.wait_task(upid, timeout=1)
    err = info.value
    assert err.task.status == 'running' and err.task.succeeded is None
    assert err.elapsed >= 1
    # Counting sleeps instead of time would have looked ~20 times (1 s / 0.05 s); each look costs 0.4 s.
    assert client.request_count - before <= 4
    assert 'still running' in str(err) and upid in str(err)


@pytest.mark.fakepve(time_scale=1)
def test_deadline_bounds_a_look_that_hangs(fakepve, fakepve_cafile):
    box = fakepve.add_ct(105, 'box')
    box.start_secs = 60
    client = make_client(fakepve, fakepve_cafile)
    upid = client.post('/nodes/pve1/lxc/105/status/start')
    fakepve.slow_network(2.5)
    with pytest.raises(PveTaskTimeout) as info:
        client.wait_task(upid, timeout=0.5)
    err = info.value
    assert err.task is None  # no status ever arrived
    assert isinstance(err.last_error, PveUnknownOutcome) and err.last_error.transport == 'read_timeout'
    assert re.search(r'no answer within 0\.\d+ s', str(err.last_error))  # not request_timeout: the deadline


def test_inspect_without_waiting(fakepve, fakepve_cafile):
    box = fakepve.add_ct(105, 'box')
    box.start_error = 'no rootfs'
    client = make_client(fakepve, fakepve_cafile)
    upid = client.post('/nodes/pve1/lxc/105/status/start')
    result = client.task_status(upid)
    assert (result.status, result.succeeded, result.exitstatus) == ('stopped', False, 'no rootfs')
    assert result.log_tail[-1] == 'TASK ERROR: no rootfs'


def test_request_count_counts_every_http_request(fakepve, fakepve_cafile):
    client = make_client(fakepve, fakepve_cafile)
    for dummy in range(3):
        client.get('/version')
    assert client.request_count == len(fakepve.requests) == 4


def test_module_utils_reports_missing_libraries_cleanly():
    assert pvemod.load_libraries() == (None, None)
    assert pvemod.PVE_IMPORT_ERROR is None and pvemod.PVE_MISSING_LIBRARY is None


# --------------------------------------------------------------- answers beyond the cap

@pytest.mark.parametrize('declare', [False, True], ids=['close-delimited', 'announced'])
def test_an_answer_larger_than_the_cap_is_not_read_and_fails_clearly(tmp_path, declare):
    """A server in the API's place answers 80 MiB (more than twice PVE_ANSWER_MAX): the client stops reading at the
    cap, hangs up, and fails saying what was wrong and what to check; a GET is not repeated, a POST is an unknown
    outcome."""
    from ansible_collections.ephemera.workspaces.plugins.module_utils.providers import answers
    from tests.floodserver import MIB, FloodServer
    assert answers.PVE_ANSWER_MAX == 32 * MIB
    with FloodServer(80 * MIB, declare=declare, tls_dir=tmp_path) as server:
        client = connect('127.0.0.1', api_port=server.port, api_token_id='root@pam!ci', api_token_secret='x',
                         ca_file=server.ca_file, get_retries=3)
        with pytest.raises(PveApiError) as info:
            client.get('/cluster/resources')
        assert not isinstance(info.value, (PveTransient, PveUnknownOutcome))
        with pytest.raises(PveUnknownOutcome) as acted:
            client.post('/nodes/pve1/lxc/105/status/start')
        assert server.settled(2)
    assert (server.hung_up, server.completed) == (2, 0)
    assert server.requests == [('GET', '/api2/json/cluster/resources'),
                               ('POST', '/api2/json/nodes/pve1/lxc/105/status/start')]
    message = str(info.value)
    assert 'GET /cluster/resources on https://127.0.0.1:%d' % server.port in message
    assert 'larger than 32 MiB' in message and 'check that the endpoint is the API itself' in message
    assert info.value.transport == acted.value.transport == 'too_large'
    assert 'look at the cluster before retrying' in str(acted.value)
