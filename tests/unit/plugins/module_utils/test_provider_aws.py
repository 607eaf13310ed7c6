"""The AWS provider against moto in server mode on loopback (one server for the file), and its pieces that a server
cannot show (pagination faults, lost answers) against a scripted EC2 at unit level; the end-to-end paths run through
the shipped playbooks on the try-out cloud (tests/integration/aws/)."""

import os
import time

import pytest

from ansible_collections.ephemera.workspaces.plugins.module_utils.core import ownership
from ansible_collections.ephemera.workspaces.plugins.module_utils.providers import base
from ansible_collections.ephemera.workspaces.plugins.module_utils.providers.registry import provider_class
from ansible_collections.ephemera.workspaces.plugins.module_utils.providers.aws import client as awsclient
from ansible_collections.ephemera.workspaces.plugins.module_utils.providers.aws import provider as awsprovider
from tests.localcloud.fleet import teach_moto

boto3 = pytest.importorskip('boto3')
SECRET = b's' * 32
NONCE = 'ab' * 16
REGION = 'us-east-1'


@pytest.fixture(scope='module')
def moto_url():
    from moto.server import ThreadedMotoServer
    saved = {k: os.environ.get(k) for k in ('MOTO_ENABLE_AMI_VALIDATION', 'MOTO_ENABLE_KEYPAIR_VALIDATION')}
    os.environ['MOTO_ENABLE_AMI_VALIDATION'] = '1'
    os.environ['MOTO_ENABLE_KEYPAIR_VALIDATION'] = '1'
    teach_moto()
    server = ThreadedMotoServer(ip_address='127.0.0.1', port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    try:
        yield 'http://%s:%d' % (host, port)
    finally:
        server.stop()
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


@pytest.fixture(scope='module')
def ec2(moto_url):
    return awsclient.Ec2(REGION, access_key='testing', secret_key='testing', endpoint_url=moto_url, retry_timeout=5)


@pytest.fixture(scope='module')
def seeded(ec2):
    image = ec2.call('describe_images', Owners=['amazon'])['Images'][0]['ImageId']
    ec2.call('create_key_pair', KeyName='unit-key')
    vpc = ec2.call('create_vpc', CidrBlock='10.9.0.0/16')['Vpc']['VpcId']
    subnet = ec2.call('create_subnet', VpcId=vpc, CidrBlock='10.9.1.0/24')['Subnet']['SubnetId']
    group = ec2.call('create_security_group', GroupName='unit', Description='unit', VpcId=vpc)['GroupId']
    return {'image': image, 'subnet': subnet, 'group': group}


def launch(seeded, **more):
    return dict({'instance_type': 't3.micro', 'key_name': 'unit-key', 'subnet_id': seeded['subnet'],
                 'security_group_ids': [seeded['group']], 'address': 'private', 'tags': {'team': 'unit tests'}},
                **more)


def provider(ec2, seeded, secret=SECRET, **more):
    return awsprovider.AwsProvider(ec2, secret, launch=launch(seeded, **more), visibility_window=2,
                                   absence_window=30, sleep=lambda s: time.sleep(min(s, 0.2)))


def allocate(p, seeded, workspace):
    a = base.Allocation(p.candidate_for(workspace, 1.0), workspace, seeded['image'], REGION, 'agent-' + workspace,
                        'disposable-workspaces', labels={'state': 'provisioning', 'keep': 'false'}, nonce=NONCE,
                        options={'lease': {'id': 'lease-1', 'created_by': 'unit-host'}})
    task = p.allocate(a)
    p.wait(task, 10)
    return a, task, p.find(p.resource_of(a.candidate, task), REGION)


def test_registered_and_resource_keys():
    cls = provider_class('aws')
    assert cls is awsprovider.AwsProvider
    key = cls.resource_key('i-0123456789abcdef0', REGION)
    assert key == 'ec2/i-0123456789abcdef0@us-east-1'
    assert cls.parse_resource_key(key) == ('i-0123456789abcdef0', REGION)
    assert cls.parse_resource_key('lxc/105@pve1') == (None, None)
    assert cls.label('i-0123456789abcdef0', REGION) == 'instance i-0123456789abcdef0 in us-east-1'


def test_client_token_is_derived_from_the_record():
    p = awsprovider.AwsProvider(None, SECRET)
    first = p.candidate_for('ws-a', 1700000000.5)
    assert first == p.candidate_for('ws-a', 1700000000.5)
    assert first != p.candidate_for('ws-a', 1700000001.5)
    assert first != p.candidate_for('ws-b', 1700000000.5)
    other = p.candidate_for('ws-a', 1700000000.5, avoid=[first])
    assert other != first and len(other) <= 64


def test_create_tags_identity_and_confirmed_termination(ec2, seeded):
    p = provider(ec2, seeded)
    a, task, resource = allocate(p, seeded, 'unit-create')
    instance_id = resource.id
    assert task.startswith('ec2/run/us-east-1/%s/' % instance_id)
    assert p.verify(resource, 'unit-create', NONCE) == ownership.VERIFIED
    assert p.verify(resource, 'someone-else', NONCE) == ownership.MISMATCH
    assert p.verify(resource, 'unit-create', 'cd' * 16) == ownership.REPLAYED
    assert awsprovider.AwsProvider(ec2, b'o' * 32).verify(resource, 'unit-create') == ownership.FOREIGN
    tags = awsprovider.tags_of(resource.native)
    assert tags['Name'] == 'agent-unit-create'
    assert tags['ephemera:workspace'] == 'unit-create' and tags['ephemera:token'] == a.candidate
    assert tags['ephemera:lease-id'] == 'lease-1' and tags['ephemera:created-by'] == 'unit-host'
    assert tags['team'] == 'unit tests'
    assert p.labels(resource) == {'state': 'provisioning', 'keep': 'false'}
    # The volume carries the same tags, written by RunInstances itself.
    volumes = ec2.call('describe_volumes', Filters=[{'Name': 'attachment.instance-id', 'Values': [instance_id]}])
    assert volumes['Volumes'] and all(
        {'Key': 'ephemera:token', 'Value': a.candidate} in v.get('Tags', []) for v in volumes['Volumes'])
    # The client token finds the instance (a lost answer is looked for this way).
    assert p.find(a.candidate).id == instance_id
    assert p.allocation_task(a, 0).split('/')[3] == instance_id
    assert p.power(resource).running
    assert p.addresses(resource) == [('eth0', 'inet', resource.native['PrivateIpAddress'])]
    p.write_labels(resource, {'state': 'ready', 'keep': 'false'})
    assert p.labels(p.find(instance_id, REGION))['state'] == 'ready'
    # Termination: acknowledged for exactly this instance, then read as terminated; gone for find.
    handle = p.delete(resource)
    assert handle.startswith('ec2/terminate/us-east-1/%s/' % instance_id)
    assert p.wait(handle, 10).succeeded
    assert p.find(instance_id, REGION) is None
    assert p.find(a.candidate) is None
    assert p.power(resource).state is None


def test_the_marker_binds_what_ec2_records_never_a_tag(ec2, seeded):
    p = provider(ec2, seeded)
    a, task, launched = allocate(p, seeded, 'unit-bound')
    # The launch's marker binds the client token EC2 recorded; the configure step signs it again over the
    # instance id too, on the instance and its volumes, once.
    assert p.verify(launched, 'unit-bound', NONCE) == ownership.VERIFIED
    before, after = p.plan_settings(launched, None)['marker']
    assert before == launched.marker_text and after != before
    p.apply_settings(launched, {'marker': (before, after)})
    resigned = p.find(launched.id, REGION)
    assert resigned.marker_text == after and p.verify(resigned, 'unit-bound', NONCE) == ownership.VERIFIED
    assert p.plan_settings(resigned, None) == {}
    volumes = ec2.call('describe_volumes', Filters=[{'Name': 'attachment.instance-id', 'Values': [launched.id]}])
    assert volumes['Volumes'] and all({'Key': 'ephemera:marker', 'Value': after} in v['Tags']
                                      for v in volumes['Volumes'])
    # Someone who may only tag instances copies every tag of ours (the launch's marker, then the re-signed one)
    # onto an instance someone else launched: it verifies neither way, whatever client token it has, none included.
    other = ec2.call('run_instances', ImageId=seeded['image'], InstanceType='t3.micro', MinCount=1, MaxCount=1,
                     SubnetId=seeded['subnet'])['Instances'][0]['InstanceId']
    for marker in (before, after):
        tags = dict(awsprovider.tags_of(resigned.native), **{'ephemera:marker': marker})
        ec2.call('create_tags', Resources=[other], Tags=[{'Key': k, 'Value': v} for k, v in tags.items()])
        copy = p.find(other, REGION)
        assert copy.marker_text == marker and copy.native['ClientToken'] != a.candidate
        untokened = base.Resource(other, REGION, marker_text=marker, native=dict(copy.native, ClientToken=''))
        for each in (copy, untokened):
            assert p.verify(each) == ownership.MISMATCH
            assert p.verify(each, 'unit-bound', NONCE) == ownership.MISMATCH
            assert p.plan_settings(each, None) == {}
    # A copy of the re-signed marker onto an instance that has the client token is no good either: it binds the id.
    elsewhere = base.Resource(other, REGION, marker_text=after, native=dict(copy.native, ClientToken=a.candidate))
    assert p.verify(elsewhere) == ownership.MISMATCH
    # The client token finds the instance EC2 launched with it, never one that only carries the tag.
    assert p.find(a.candidate).id == launched.id
    assert p.resource_of(a.candidate, None) == launched.id
    p.wait(p.delete(resigned), 10)


def test_a_warm_members_instance_is_given_to_the_claiming_workspace(ec2, seeded):
    p = provider(ec2, seeded)
    assert p.pool_refusal is None
    a, task, member = allocate(p, seeded, 'unit-member')
    claimer_nonce = 'cd' * 16
    assert awsprovider.tags_of(member.native)['ephemera:created-by'] != 'claimers-controller'
    p.remark(member, 'unit-claimer', claimer_nonce, 'agent-unit-claimer', {'state': 'provisioning', 'keep': 'true'},
             created_by='claimers-controller')
    taken = p.find(member.id, REGION)
    # The marker binds the instance (its client token and id) for the claimer alone, with its nonce.
    assert p.verify(taken, 'unit-claimer', claimer_nonce) == ownership.VERIFIED
    assert p.verify(taken, 'unit-member', NONCE) == ownership.MISMATCH
    assert p.verify(taken, 'unit-claimer', NONCE) == ownership.REPLAYED
    assert p.plan_settings(taken, None) == {}
    tags = awsprovider.tags_of(taken.native)
    assert tags['Name'] == 'agent-unit-claimer' and tags['ephemera:workspace'] == 'unit-claimer'
    assert tags['ephemera:token'] == a.candidate and tags['ephemera:created-by'] == 'claimers-controller'
    assert p.labels(taken) == {'state': 'provisioning', 'keep': 'true'}
    volumes = ec2.call('describe_volumes', Filters=[{'Name': 'attachment.instance-id', 'Values': [member.id]}])
    assert volumes['Volumes'] and all({'Key': 'ephemera:marker', 'Value': taken.marker_text} in v['Tags']
                                      for v in volumes['Volumes'])
    # A read from before the claim is stale: nothing is written over the instance that changed since.
    with pytest.raises(base.Conflict, match='changed since it was read'):
        p.remark(member, 'unit-third', 'ef' * 16, 'agent-unit-third')
    assert p.verify(p.find(member.id, REGION), 'unit-claimer', claimer_nonce) == ownership.VERIFIED
    with pytest.raises(base.Refused, match='controller secret'):
        provider(ec2, seeded, secret=None).remark(taken, 'unit-third', 'ef' * 16, 'agent-unit-third')
    p.wait(p.delete(taken), 10)
    with pytest.raises(base.NotFound):
        p.remark(taken, 'unit-third', 'ef' * 16, 'agent-unit-third')


def test_the_console_of_an_instance_is_read_through_ec2(ec2, seeded):
    p = provider(ec2, seeded)
    a, task, resource = allocate(p, seeded, 'unit-console')
    # moto's console is a fixed sample without cloud-init's block: nothing published (the try-out cloud's proxy
    # serves the real block, tests/integration/aws/test_host_keys.py).
    assert p.host_key_source == 'the console output (GetConsoleOutput)'
    assert p.published_host_keys(resource) == []
    p.wait(p.delete(resource), 10)


def test_stop_and_start(ec2, seeded):
    p = provider(ec2, seeded)
    a, task, resource = allocate(p, seeded, 'unit-power')
    p.wait(p.stop(resource), 10)
    assert not p.power(resource).running
    assert p.addresses(resource) == []
    assert p.stop(resource) is None
    p.wait(p.start(resource), 10)
    assert p.power(resource).running
    p.wait(p.delete(resource), 10)


def test_bad_input_is_refused_before_anything_is_launched(ec2, seeded):
    before = len(ec2.describe_instances())
    cases = [
        (dict(instance_type='x9.nonexistent'), 'InvalidInstanceType'),
        (dict(subnet_id='subnet-0123456789abcdef0'), 'InvalidSubnetID'),
        (dict(security_group_ids=['sg-0123456789abcdef0']), 'InvalidGroup'),
        (dict(key_name='no-such-key'), 'InvalidKeyPair'),
        (dict(key_name=None, ssh_public_key=None), 'No way into the instance'),
        (dict(tags={'team': 'a#b'}), 'does not take'),
        (dict(tags={'aws:owner': 'x'}), 'reserved'),
        (dict(address='ipv6'), 'public or private'),
    ]
    for settings, said in cases:
        with pytest.raises(base.Refused) as err:
            provider(ec2, seeded, **settings).check_source(seeded['image'], None, 'disposable-workspaces')
        assert said in str(err.value), settings
    with pytest.raises(base.Refused) as err:
        provider(ec2, seeded).check_source('ami-0123456789abcdef0', None, 'disposable-workspaces')
    assert 'InvalidAMIID' in str(err.value) and 'describe-images' in str(err.value)
    with pytest.raises(base.InvalidRequest) as err:
        provider(ec2, seeded).resolve_source('ubuntu-latest')
    assert 'neither an AMI id' in str(err.value)
    assert provider(ec2, seeded).check_source(seeded['image'], None, 'disposable-workspaces') == REGION
    assert len(ec2.describe_instances()) == before


def test_unknown_region_and_missing_credentials(monkeypatch, tmp_path):
    with pytest.raises(base.InvalidRequest) as err:
        awsclient.Ec2('us-nowhere-9', access_key='a', secret_key='b')
    assert 'Unknown AWS region' in str(err.value)
    with pytest.raises(base.InvalidRequest) as err:
        awsclient.Ec2(None, access_key='a', secret_key='b')
    assert 'No AWS region' in str(err.value)
    for key in ('AWS_ACCESS_KEY_ID', 'AWS_SECRET_ACCESS_KEY', 'AWS_SESSION_TOKEN', 'AWS_PROFILE',
                'AWS_CONTAINER_CREDENTIALS_RELATIVE_URI', 'AWS_CONTAINER_CREDENTIALS_FULL_URI',
                'AWS_WEB_IDENTITY_TOKEN_FILE'):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv('AWS_SHARED_CREDENTIALS_FILE', str(tmp_path / 'none'))
    monkeypatch.setenv('AWS_CONFIG_FILE', str(tmp_path / 'none'))
    monkeypatch.setenv('AWS_EC2_METADATA_DISABLED', 'true')
    with pytest.raises(base.InvalidRequest) as err:
        awsclient.Ec2(REGION)
    assert 'No AWS credentials' in str(err.value)
    with pytest.raises(base.InvalidRequest) as err:
        awsclient.Ec2(REGION, profile='nope')
    assert "profile 'nope' is not configured" in str(err.value)


def test_endpoint_that_does_not_answer():
    import socket
    sock = socket.socket()
    sock.bind(('127.0.0.1', 0))
    port = sock.getsockname()[1]
    sock.close()
    ec2 = awsclient.Ec2(REGION, access_key='a', secret_key='b', endpoint_url='http://127.0.0.1:%d' % port,
                        retry_timeout=5, sleep=lambda s: None)
    started = time.monotonic()
    with pytest.raises(base.Transient) as err:
        ec2.call('describe_images', ImageIds=['ami-0123456789abcdef0'])
    assert 'does not answer' in str(err.value) and 'aws_endpoint_url' in str(err.value)
    assert err.value.transport == 'connect'
    assert time.monotonic() - started < 10


def test_an_answer_that_is_not_an_ec2_answer_is_an_unknown_outcome_of_a_call_that_acts():
    """A real botocore client against an endpoint that answers 200 with a page that is not EC2's XML (a proxy's or a
    captive portal's): a call that acts may have been carried out, one that only reads is retried."""
    import http.server
    import threading

    class Garbled(http.server.BaseHTTPRequestHandler):
        def do_POST(self):
            self.rfile.read(int(self.headers.get('Content-Length') or 0))
            body = b'<html><body>not EC2</body'
            self.send_response(200)
            self.send_header('Content-Type', 'text/xml')
            self.send_header('Content-Length', str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass
    server = http.server.ThreadingHTTPServer(('127.0.0.1', 0), Garbled)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        ec2 = awsclient.Ec2(REGION, access_key='a', secret_key='b', retry_timeout=1, sleep=lambda s: None,
                            endpoint_url='http://127.0.0.1:%d' % server.server_address[1])
        with pytest.raises(base.UnknownOutcome) as lost:
            ec2.call('run_instances', acts=True, ImageId='ami-0123456789abcdef0', MinCount=1, MaxCount=1)
        assert 'is not an EC2 answer' in str(lost.value) and 'may have been carried out' in str(lost.value)
        assert lost.value.transport == 'garbled'
        with pytest.raises(base.Transient) as read:
            ec2.call('describe_images', ImageIds=['ami-0123456789abcdef0'])
        assert not isinstance(read.value, base.UnknownOutcome) and read.value.transport == 'garbled'
    finally:
        server.shutdown()
        server.server_close()


def test_an_error_of_no_known_kind_is_raised_as_it_is():
    assert Scripted([]).error(ValueError('something else'), 'RunInstances', True) is None


def test_visibility_window(ec2, seeded):
    p = provider(ec2, seeded)
    # Within the window: a window of 30 s, so that a slow answer (a loaded machine) cannot take the handle past it.
    wide = provider(ec2, seeded)
    wide.visibility_window = 30
    ghost = 'i-0123456789abcdef0'
    # A new id EC2 does not show yet: "not visible yet" within the window, a failure after it.
    with pytest.raises(base.TaskTimeout):
        wide.wait(awsprovider.task_handle('run', REGION, ghost, time.time()), 0.5)
    with pytest.raises(base.TaskFailed) as err:
        p.wait(awsprovider.task_handle('run', REGION, ghost, time.time() - 60), 5)
    assert 'did not become visible' in str(err.value)
    # A termination confirmed by NotFound only once the window has passed.
    with pytest.raises(base.TaskTimeout):
        wide.wait(awsprovider.task_handle('terminate', REGION, ghost, time.time()), 0.5)
    assert p.wait(awsprovider.task_handle('terminate', REGION, ghost, time.time() - 60), 5).succeeded
    assert wide.task_status(awsprovider.task_handle('terminate', REGION, ghost, time.time())).status == 'running'
    # find() of an id this process just learned waits through NotFound until the window ends.
    p.learned[ghost] = time.time()
    started = time.monotonic()
    assert p.find(ghost, REGION) is None
    assert time.monotonic() - started >= 1.5


# ----------------------------------------------------------------------- a scripted EC2 (unit level)

class Scripted(awsclient.Ec2):
    """An Ec2 whose answers are a script: each call pops the next answer (a dict, or an exception to raise)."""

    def __init__(self, answers, **kwargs):
        ec2 = awsclient.Ec2(REGION, access_key='a', secret_key='b', endpoint_url='http://127.0.0.1:9', **kwargs)
        self.__dict__.update(ec2.__dict__)
        self.answers = list(answers)
        self.calls = []

        class Fake:
            pass
        fake = Fake()
        owner = self

        def operation(name):
            def call(**kw):
                owner.calls.append((name, kw))
                answer = owner.answers.pop(0)
                if isinstance(answer, Exception):
                    raise answer
                return answer
            return call
        for name in ('describe_instances', 'run_instances', 'terminate_instances'):
            setattr(fake, name, operation(name))
        self.client = fake


def client_error(code, status=400, operation='DescribeInstances'):
    from botocore.exceptions import ClientError
    return ClientError({'Error': {'Code': code, 'Message': 'scripted %s' % code},
                        'ResponseMetadata': {'HTTPStatusCode': status}}, operation)


def page(*ids, token=None):
    answer = {'Reservations': [{'Instances': [{'InstanceId': i, 'State': {'Name': 'running'}} for i in ids]}]}
    if token:
        answer['NextToken'] = token
    return answer


def test_every_page_is_read_and_duplicates_are_kept():
    ec2 = Scripted([page('i-1', token='t1'), page('i-2', 'i-1', token='t2'), page('i-3')])
    assert [i['InstanceId'] for i in ec2.describe_instances()] == ['i-1', 'i-2', 'i-1', 'i-3']
    assert [kw.get('NextToken') for name, kw in ec2.calls] == [None, 't1', 't2']


@pytest.mark.parametrize('script, said', [
    ([page('i-1', token='t1'), page('i-2', token='t1')], 'token of an earlier page'),
    ([page('i-%d' % n, token='t%d' % n) for n in range(101)], 'more than 100 pages'),
    ([page('i-1', token='t1'), client_error('InternalError', 500)] + [client_error('InternalError', 500)] * 50,
     'failed on page 2'),
])
def test_an_incomplete_inventory_is_refused(script, said):
    ec2 = Scripted(script, retry_timeout=0.5, sleep=lambda s: time.sleep(0.01))
    with pytest.raises(awsclient.IncompleteInventory) as err:
        ec2.describe_instances()
    assert said in str(err.value)
    # ... and a lookup by client token built on it confirms no absence either.
    p = awsprovider.AwsProvider(Scripted(script, retry_timeout=0.5, sleep=lambda s: time.sleep(0.01)), SECRET)
    with pytest.raises(awsclient.IncompleteInventory):
        p.find('ephemera-ws-0123')


def test_throttling_is_ridden_out_and_mapped():
    ec2 = Scripted([client_error('RequestLimitExceeded', 503), client_error('Throttling', 400), page('i-1')],
                   sleep=lambda s: None)
    assert [i['InstanceId'] for i in ec2.describe_instances()] == ['i-1']
    assert len(ec2.calls) == 3
    ec2 = Scripted([client_error('RequestLimitExceeded', 503)] * 1000, retry_timeout=0.3,
                   sleep=lambda s: time.sleep(0.01))
    with pytest.raises(base.Transient) as err:
        ec2.call('run_instances', acts=True)
    assert 'throttled' in str(err.value)


def test_error_kinds():
    from botocore.exceptions import ConnectionClosedError, EndpointConnectionError, ReadTimeoutError
    ec2 = Scripted([])
    kinds = [
        (client_error('InvalidInstanceID.NotFound'), False, base.NotFound),
        (client_error('InvalidParameterValue'), True, base.Refused),
        (client_error('UnauthorizedOperation', 403), True, base.Refused),
        (client_error('InvalidAMIID.Malformed'), True, base.Refused),
        (client_error('InsufficientInstanceCapacity', 500), True, base.Refused),
        (client_error('IdempotentParameterMismatch'), True, base.Conflict),
        (client_error('ServiceUnavailable', 503), True, base.Transient),
        (ReadTimeoutError(endpoint_url='http://x'), True, base.UnknownOutcome),
        (ConnectionClosedError(endpoint_url='http://x'), True, base.UnknownOutcome),
        (ReadTimeoutError(endpoint_url='http://x'), False, base.Transient),
        (EndpointConnectionError(endpoint_url='http://x'), True, base.Transient),
    ]
    for exc, acts, kind in kinds:
        err = ec2.error(exc, 'Op', acts)
        assert isinstance(err, kind) and err.error_kind == kind.error_kind, (exc, err)
    refused = ec2.error(client_error('UnauthorizedOperation', 403), 'RunInstances', True)
    assert 'IAM policy in docs/quickstart-aws.md' in str(refused)


def test_a_lost_run_answer_is_an_unknown_outcome():
    from botocore.exceptions import ReadTimeoutError
    p = awsprovider.AwsProvider(Scripted([ReadTimeoutError(endpoint_url='http://x')]), SECRET,
                                launch={'instance_type': 't3.micro', 'key_name': 'k'})
    a = base.Allocation(p.candidate_for('ws', 1.0), 'ws', 'ami-0123456789abcdef0', REGION, 'agent-ws', 'pool',
                        nonce=NONCE)
    with pytest.raises(base.UnknownOutcome):
        p.allocate(a)
    sent = p.ec2.calls[0][1]
    assert sent['ClientToken'] == a.candidate
    assert [s['ResourceType'] for s in sent['TagSpecifications']] == ['instance', 'volume']


def test_a_termination_must_acknowledge_the_exact_instance():
    p = awsprovider.AwsProvider(Scripted([{'TerminatingInstances': [{'InstanceId': 'i-0000000000000000f'}]}]), SECRET)
    with pytest.raises(base.UnknownOutcome) as err:
        p.delete(base.Resource('i-0123456789abcdef0', REGION))
    assert 'did not acknowledge' in str(err.value)


def test_an_image_named_by_an_ssm_parameter_is_resolved_once(ec2, seeded, moto_url):
    ssm = boto3.client('ssm', region_name=REGION, endpoint_url=moto_url, aws_access_key_id='testing',
                       aws_secret_access_key='testing')
    ssm.put_parameter(Name='/unit/images/debian', Value=seeded['image'], Type='String')
    ssm.put_parameter(Name='/unit/images/broken', Value='not-an-ami', Type='String')
    p = provider(ec2, seeded)
    assert p.resolve_source('resolve:ssm:/unit/images/debian') == seeded['image']
    assert p.resolve_source('/unit/images/debian') == seeded['image']
    assert p.resolve_source(seeded['image']) == seeded['image']
    with pytest.raises(base.InvalidRequest) as err:
        p.resolve_source('/unit/images/broken')
    assert 'not an AMI id' in str(err.value)
    with pytest.raises(base.InvalidRequest) as err:
        p.resolve_source('/unit/images/missing')
    assert 'could not be read' in str(err.value)


def test_an_expiry_sweep_leaves_a_workspace_of_another_provider_alone(journal):
    from ansible_collections.ephemera.workspaces.plugins.module_utils.core import lease as leasing
    from ansible_collections.ephemera.workspaces.plugins.module_utils.flows import lease as lease_flow
    from ansible_collections.ephemera.workspaces.plugins.module_utils.flows.expire import ExpirySweep
    from ansible_collections.ephemera.workspaces.plugins.module_utils.providers.proxmox.provider import ProxmoxProvider
    terms = leasing.new_lease(time.time() - 10000, ttl=3600)
    journal.create_workspace('on-aws', status='ready', desired_state='present', provider='aws', location=REGION,
                             resource_id='i-0123456789abcdef0', lease=terms, lease_expires_at=terms['expires_at'],
                             params={}, progress={}, cleanup={})
    before = journal.get_workspace('on-aws')
    entries = ExpirySweep(journal, ProxmoxProvider(None), {}, SECRET).run()
    assert [(e['workspace'], e['action']) for e in entries] == [('on-aws', 'other_provider')]
    assert 'lives on aws' in entries[0]['detail']
    assert journal.get_workspace('on-aws')['generation'] == before['generation']
    note = lease_flow.write_labels(journal, ProxmoxProvider(None), before)
    assert 'lives on aws' in note


def test_a_fork_image_is_made_once_found_by_its_name_launched_from_and_removed(ec2, seeded):
    from tests.localcloud.fleet import moto_images
    p = provider(ec2, seeded)
    a, task, parent = allocate(p, seeded, 'unit-fork')
    name = 'ephemera-fork-0a1b2c3d4e'
    marker = p.marker('unit-fork', parent.id)
    handle = p.snapshot(parent, name, marker)
    assert handle.startswith('ec2/image/us-east-1/ami-')
    ami = handle.split('/')[3]
    # Pending until its snapshot is complete; asked again (a lost answer's rerun), EC2 refuses the name: no second.
    assert p.snapshot_pending(parent, name) and not p.snapshot_exists(parent, name)
    with pytest.raises(base.Conflict):
        p.snapshot(parent, name, marker)
    moto_images()[ami].state = 'available'
    assert p.wait(handle, 10).succeeded and p.snapshot_exists(parent, name)
    images = ec2.call('describe_images', Owners=['self'], Filters=[{'Name': 'name', 'Values': [name]}])['Images']
    assert [i['ImageId'] for i in images] == [ami]
    # Another controller's image of that name is not taken for the fork's.
    with pytest.raises(base.Refused):
        awsprovider.AwsProvider(ec2, b'o' * 32, launch=launch(seeded)).snapshot_exists(parent, name)
    child = base.Allocation(p.candidate_for('unit-fork-1', 1.0), 'unit-fork-1', parent.id, REGION, 'agent-unit-fork-1',
                            'disposable-workspaces', nonce=NONCE, snapshot=name)
    launched = p.find(p.resource_of(child.candidate, p.allocate(child)), REGION)
    assert launched.native['ImageId'] == ami
    assert p.verify(launched, 'unit-fork-1', NONCE) == ownership.VERIFIED
    removal = p.delete_snapshot(parent, name)
    assert removal is not None and p.wait(removal, 10).succeeded
    assert ec2.call('describe_images', Owners=['self'], Filters=[{'Name': 'name', 'Values': [name]}])['Images'] == []
    assert ec2.call('describe_snapshots', OwnerIds=['self'],
                    Filters=[{'Name': 'tag:ephemera:fork-image', 'Values': [name]}])['Snapshots'] == []
    assert p.delete_snapshot(parent, name) is None
    for resource in (launched, parent):
        p.wait(p.delete(resource), 10)


class LosesAnswers:
    """The EC2 client, but the first answer of each call named in ``lost`` is lost after EC2 acted."""

    def __init__(self, ec2, lost):
        self.ec2 = ec2
        self.lost = set(lost)

    def __getattr__(self, attr):
        return getattr(self.ec2, attr)

    def call(self, operation, acts=False, **kwargs):
        answer = self.ec2.call(operation, acts=acts, **kwargs)
        if operation in self.lost:
            self.lost.discard(operation)
            raise base.UnknownOutcome('%s: the request went out and no answer came back' % operation)
        return answer


def test_a_fork_image_whose_removal_answers_are_lost_is_removed_all_the_same(ec2, seeded):
    from tests.localcloud.fleet import moto_images
    p = provider(ec2, seeded)
    a, task, parent = allocate(p, seeded, 'unit-fork-lost')
    name = 'ephemera-fork-1a2b3c4d5e'
    handle = p.snapshot(parent, name, p.marker('unit-fork-lost', parent.id))
    moto_images()[handle.split('/')[3]].state = 'available'
    assert p.wait(handle, 10).succeeded
    lossy = awsprovider.AwsProvider(LosesAnswers(ec2, ('deregister_image', 'delete_snapshot')), SECRET,
                                    launch=launch(seeded))
    removal = lossy.delete_snapshot(parent, name)
    assert removal is not None and p.wait(removal, 10).succeeded
    assert ec2.call('describe_images', Owners=['self'], Filters=[{'Name': 'name', 'Values': [name]}])['Images'] == []
    assert ec2.call('describe_snapshots', OwnerIds=['self'],
                    Filters=[{'Name': 'tag:ephemera:fork-image', 'Values': [name]}])['Snapshots'] == []
    p.wait(p.delete(parent), 10)
