"""The try-out cloud itself: the seed, guests that come and go with their instances, and every fault of the proxy.

One cloud process for the module (tests/localcloud/fixtures.py); each test clears the faults it set.
"""

import os
import subprocess
import sys
import time

import botocore.exceptions
import paramiko
import pytest

from tests.localcloud.config import ROOT
from tests.localcloud.fixtures import cloud_process
from tests.localpve import system
from tests.localpve.pki import ssh_key_pair

pytestmark = pytest.mark.usefixtures('clean_cloud')
ONE_TRY = {'mode': 'standard', 'total_max_attempts': 1}
# What a client sees of an answer that never came.
LOST = (botocore.exceptions.HTTPClientError, botocore.exceptions.ConnectionError)


def launch(cloud, ec2=None, token=None, **extra):
    seed = cloud.info['seed']
    params = dict(ImageId=seed['image_id'], InstanceType=seed['instance_type'], MinCount=1, MaxCount=1,
                  SubnetId=seed['subnet_id'], KeyName=seed['key_name'], SecurityGroupIds=[seed['security_group_id']])
    if token:
        params['ClientToken'] = token
    params.update(extra)
    return (ec2 or cloud.ec2()).run_instances(**params)['Instances'][0]


def describe(ec2, instance_id):
    return ec2.describe_instances(InstanceIds=[instance_id])['Reservations'][0]['Instances'][0]


def wait_state(ec2, instance_id, state, timeout=30):
    deadline = time.monotonic() + timeout
    seen = []
    while time.monotonic() < deadline:
        found = describe(ec2, instance_id)
        if not seen or seen[-1] != found['State']['Name']:
            seen.append(found['State']['Name'])
        if found['State']['Name'] == state:
            return found, seen
        time.sleep(0.05)
    raise AssertionError('{0} never reached {1}: {2}'.format(instance_id, state, seen))


def wait_for(predicate, timeout=5):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return predicate()


def ssh_run(cloud, address, command, key=None):
    client = paramiko.SSHClient()
    client.set_missing_host_key_policy(paramiko.AutoAddPolicy())
    client.connect(address, port=cloud.info['ssh_port'], username=cloud.info['ssh_user'],
                   key_filename=key or cloud.info['ssh_private_key'], look_for_keys=False, allow_agent=False,
                   timeout=5)
    try:
        dummy, out, dummy = client.exec_command(command, timeout=10)
        return out.read().decode().strip()
    finally:
        client.close()


def listens(cloud, address):
    return (address, cloud.info['ssh_port']) in system.listening()


def instances_with_token(cloud, token):
    """Every instance of a ClientToken, as moto itself holds them (no proxy between)."""
    direct = cloud.ec2(direct=True)
    return [i['InstanceId'] for r in direct.describe_instances()['Reservations'] for i in r['Instances']
            if i.get('ClientToken') == token]


def test_seed_has_what_a_workspace_and_the_foreign_checks_need(localcloud):
    info, seed = localcloud.info, localcloud.info['seed']
    ec2 = localcloud.ec2()
    assert ec2.describe_subnets(SubnetIds=[seed['subnet_id']])['Subnets'][0]['VpcId'] == seed['vpc_id']
    assert ec2.describe_key_pairs(KeyNames=[seed['key_name']])['KeyPairs'][0]['KeyName'] == 'workspaces'
    assert ec2.describe_images(ImageIds=[seed['image_id']])['Images'][0]['Name'] == seed['image_name']
    ssm = localcloud.ec2(service='ssm')
    assert ssm.get_parameter(Name=seed['image_parameter'])['Parameter']['Value'] == seed['image_id']
    foreign = seed['foreign_instances']
    tags = {i['InstanceId']: {t['Key']: t['Value'] for t in i.get('Tags', [])}
            for r in ec2.describe_instances(InstanceIds=list(foreign.values()))['Reservations']
            for i in r['Instances']}
    assert tags[foreign['untagged']] == {}
    assert tags[foreign['other_tags']]['team'] == 'data'
    assert tags[foreign['tag_copy']]['ephemera:marker'].startswith('ephemera-workspace: v2 ')
    assert tags[foreign['tag_copy']]['ephemera:scope'] == 'disposable-workspaces'
    assert info['foreign']['access_key_id'] != info['access_key_id']
    # An unknown AMI, instance type or key pair is refused, as EC2 does, and nothing is launched.
    before = len(localcloud.instances())
    for bad, code in (({'ImageId': 'ami-0123456789abcdef0'}, 'InvalidAMIID.NotFound'),
                      ({'InstanceType': 't3.gigantic'}, 'InvalidInstanceType.NotFound'),
                      ({'KeyName': 'nobody'}, 'InvalidKeyPair.NotFound')):
        with pytest.raises(botocore.exceptions.ClientError) as caught:
            launch(localcloud, **bad)
        assert caught.value.response['Error']['Code'] == code
    assert len(localcloud.instances()) == before


def test_guest_comes_and_goes_with_its_instance(localcloud, tmp_path):
    ec2 = localcloud.ec2()
    extra_key = str(tmp_path / 'user_key')
    extra_public = ssh_key_pair(extra_key, 'user-data')
    user_data = '#cloud-config\nssh_authorized_keys:\n  - {0}\n'.format(extra_public)
    # Each passing state lasts a second: long enough to be seen between two looks on a busy machine.
    localcloud.timing(boot_secs=1.0, stop_secs=1.0, shutdown_secs=1.0)
    started = launch(localcloud, UserData=user_data)
    instance_id = started['InstanceId']
    assert started['State']['Name'] == 'pending'
    running, seen = wait_state(ec2, instance_id, 'running')
    assert seen[0] == 'pending'
    private, public = running['PrivateIpAddress'], running['PublicIpAddress']
    nic = running['NetworkInterfaces'][0]
    assert private.startswith('127.') and public.startswith('127.') and private != public
    assert nic['PrivateIpAddress'] == private and nic['Association']['PublicIp'] == public
    assert nic['PrivateIpAddresses'][0]['PrivateIpAddress'] == private
    root = localcloud.info['guest_root'].replace('{vmid}', instance_id)
    assert wait_for(lambda: listens(localcloud, private) and listens(localcloud, public), timeout=20)
    assert ssh_run(localcloud, private, 'echo $LOCALPVE_GUEST_ROOT') == root
    assert ssh_run(localcloud, public, 'echo $LOCALPVE_VMID', key=extra_key) == instance_id
    assert os.path.isdir(os.path.join(root, 'workspace'))

    ec2.stop_instances(InstanceIds=[instance_id])
    stopped, seen = wait_state(ec2, instance_id, 'stopped')
    assert 'stopping' in seen and 'PublicIpAddress' not in stopped
    assert not listens(localcloud, private) and os.path.isdir(root)
    ec2.start_instances(InstanceIds=[instance_id])
    wait_state(ec2, instance_id, 'running')
    assert wait_for(lambda: listens(localcloud, private), timeout=20)

    answer = ec2.terminate_instances(InstanceIds=[instance_id])['TerminatingInstances'][0]
    assert answer['CurrentState']['Name'] == 'shutting-down'
    assert wait_for(lambda: not listens(localcloud, private) and not listens(localcloud, public), timeout=20)
    gone, seen = wait_state(ec2, instance_id, 'terminated')
    assert 'PrivateIpAddress' not in gone and 'PublicIpAddress' not in gone
    assert wait_for(lambda: not os.path.exists(root), timeout=20)


def test_client_token_gives_the_same_instance_and_a_lost_answer_leaves_one(localcloud):
    ec2 = localcloud.ec2(retries=ONE_TRY)
    first = launch(localcloud, ec2, token='lc-token-1')['InstanceId']
    assert launch(localcloud, ec2, token='lc-token-1')['InstanceId'] == first
    with pytest.raises(botocore.exceptions.ClientError) as caught:
        launch(localcloud, ec2, token='lc-token-1', InstanceType='t3.small')
    assert caught.value.response['Error']['Code'] == 'IdempotentParameterMismatch'
    assert instances_with_token(localcloud, 'lc-token-1') == [first]

    rule = localcloud.drop_response('RunInstances')
    with pytest.raises(LOST):
        launch(localcloud, ec2, token='lc-token-2')
    assert [r['hits'] for r in localcloud.proxy_rules() if r['id'] == rule['id']][0]
    made = instances_with_token(localcloud, 'lc-token-2')
    assert len(made) == 1
    assert launch(localcloud, ec2, token='lc-token-2')['InstanceId'] == made[0]
    assert instances_with_token(localcloud, 'lc-token-2') == made


def test_throttle_reset_delay_and_a_lost_terminate_answer(localcloud):
    ec2 = localcloud.ec2(retries=ONE_TRY)
    before = len(localcloud.instances())
    localcloud.throttle('RunInstances')
    with pytest.raises(botocore.exceptions.ClientError) as caught:
        launch(localcloud, ec2)
    assert caught.value.response['Error']['Code'] == 'RequestLimitExceeded'
    assert caught.value.response['ResponseMetadata']['HTTPStatusCode'] == 503
    localcloud.proxy_add('reset', 'RunInstances')
    with pytest.raises(LOST):
        launch(localcloud, ec2)
    assert len(localcloud.instances()) == before

    instance_id = launch(localcloud, ec2)['InstanceId']
    localcloud.proxy_add('delay', 'DescribeInstances', seconds=0.6)
    started = time.monotonic()
    describe(ec2, instance_id)
    assert time.monotonic() - started >= 0.6
    localcloud.drop_response('TerminateInstances')
    with pytest.raises(LOST):
        ec2.terminate_instances(InstanceIds=[instance_id])
    assert describe(ec2, instance_id)['State']['Name'] in ('shutting-down', 'terminated')


def test_a_new_instance_id_is_invisible_for_a_while(localcloud):
    ec2 = localcloud.ec2(retries=ONE_TRY)
    localcloud.invisible(6)
    instance_id = launch(localcloud, ec2)['InstanceId']
    for call in (lambda: describe(ec2, instance_id), lambda: ec2.terminate_instances(InstanceIds=[instance_id])):
        with pytest.raises(botocore.exceptions.ClientError) as caught:
            call()
        assert caught.value.response['Error']['Code'] == 'InvalidInstanceID.NotFound'
    assert instance_id not in str(ec2.describe_instances())
    # Nothing named it in moto: the terminate did not happen.
    assert [i['moto_state'] for i in localcloud.instances() if i['instance_id'] == instance_id] == ['running']
    assert wait_for(lambda: instance_id in str(ec2.describe_instances()), timeout=12)
    assert describe(ec2, instance_id)['InstanceId'] == instance_id


def test_describe_instances_in_pages(localcloud):
    ec2 = localcloud.ec2(retries=ONE_TRY)
    paginator = ec2.get_paginator('describe_instances')
    total = len(ec2.describe_instances()['Reservations'])
    assert total >= 3
    localcloud.pages(size=1)
    pages = list(paginator.paginate())
    assert len(pages) == total and all(len(p['Reservations']) == 1 for p in pages)
    localcloud.pages(size=1, repeat_at=2)
    with pytest.raises(botocore.exceptions.PaginationError):
        list(paginator.paginate())
    localcloud.pages(size=1, fail_at=2)
    with pytest.raises(botocore.exceptions.ClientError) as caught:
        list(paginator.paginate())
    assert caught.value.response['Error']['Code'] == 'InternalError'
    localcloud.pages(size=2, endless=True)
    count = 0
    for dummy in paginator.paginate():
        count += 1
        if count > 101:
            break
    assert count == 102
    # Without a rule the listing is one answer again.
    assert 'NextToken' not in ec2.describe_instances()


def test_foreign_client_copies_tags_with_a_marker_no_controller_made(localcloud):
    source = launch(localcloud, TagSpecifications=[{'ResourceType': 'instance', 'Tags': [
        {'Key': 'ephemera:workspace', 'Value': 'ours'}, {'Key': 'ephemera:marker', 'Value': 'original'}]}])
    made = localcloud.foreign_create(copy_tags_of=source['InstanceId'])
    copy = describe(localcloud.foreign_ec2(), made['instance_ids'][0])
    tags = {t['Key']: t['Value'] for t in copy['Tags']}
    assert tags['ephemera:workspace'] == 'ours'
    assert tags['ephemera:marker'] not in ('original', '') and tags['ephemera:marker'].startswith('ephemera-workspace:')


def test_command_line_against_the_running_cloud(localcloud):
    state = localcloud.info['state_dir']

    def cli(*args):
        return subprocess.run([sys.executable, '-m', 'tests.localcloud'] + list(args) + ['--state-dir', state],
                              cwd=ROOT, capture_output=True, text=True, timeout=60, check=False)
    status = cli('status')
    assert status.returncode == 0 and 'running' in status.stdout
    assert localcloud.info['seed']['foreign_instances']['untagged'] in status.stdout
    added = cli('fault', 'proxy', 'throttle', 'TerminateInstances', '--times', '2')
    assert added.returncode == 0 and '"RequestLimitExceeded"' in added.stdout
    env = cli('env')
    assert 'export AWS_ENDPOINT_URL={0}'.format(localcloud.info['endpoint_url']) in env.stdout
    bad = cli('fault', 'proxy', 'error', 'RunInstances', '--code', 'X', '--message', 'y', '--status', '700')
    assert bad.returncode == 1 and 'status' in bad.stderr
    refused = subprocess.run([sys.executable, '-m', 'tests.localcloud', 'up', '--host', '10.1.2.3', '--state-dir',
                              state + '-bad'], cwd=ROOT, capture_output=True, text=True, timeout=60, check=False)
    assert refused.returncode == 1 and 'not a loopback address' in refused.stderr
    assert not os.path.exists(os.path.join(state + '-bad', 'cloud.json'))


def test_a_log_rule_records_every_request_and_match_scopes_a_fault(localcloud):
    ec2 = localcloud.ec2(retries=ONE_TRY)
    log = localcloud.proxy_add('log', '*', times=None)
    first = launch(localcloud, ec2, token='lc-log-1')['InstanceId']
    second = launch(localcloud, ec2)['InstanceId']
    localcloud.drop_response('TerminateInstances', match=second)
    ec2.terminate_instances(InstanceIds=[first])
    with pytest.raises(LOST):
        ec2.terminate_instances(InstanceIds=[second])
    hits = [r for r in localcloud.proxy_rules() if r['id'] == log['id']][0]['hits']
    runs = [h for h in hits if h['operation'] == 'RunInstances']
    terminations = [h['instances'] for h in hits if h['operation'] == 'TerminateInstances']
    assert len(runs) == 2 and runs[0]['client_token'] == 'lc-log-1'
    assert terminations == [[first], [second]]
    # The lost answer's termination happened all the same.
    assert [i['moto_state'] for i in localcloud.instances() if i['instance_id'] == second] == ['terminated']


def test_error_rule_timing_fault_and_a_guest_that_never_comes_up(localcloud):
    ec2 = localcloud.ec2(retries=ONE_TRY)
    before = len(localcloud.instances())
    localcloud.proxy_add('error', 'RunInstances', code='InsufficientInstanceCapacity', status=500,
                         message='We currently do not have sufficient t3.micro capacity.')
    with pytest.raises(botocore.exceptions.ClientError) as caught:
        launch(localcloud, ec2)
    assert caught.value.response['Error']['Code'] == 'InsufficientInstanceCapacity'
    assert caught.value.response['ResponseMetadata']['HTTPStatusCode'] == 500
    assert len(localcloud.instances()) == before

    localcloud.timing(boot_secs=1.5, shutdown_secs=1.5)
    localcloud.guest_fault('never')
    started = time.monotonic()
    instance_id = launch(localcloud, ec2)['InstanceId']
    running, seen = wait_state(ec2, instance_id, 'running')
    assert time.monotonic() - started >= 1.5 and seen[0] == 'pending'
    time.sleep(0.5)
    assert not listens(localcloud, running['PrivateIpAddress'])
    assert [i['sshd'] for i in localcloud.instances() if i['instance_id'] == instance_id] == ['suppressed']
    ec2.terminate_instances(InstanceIds=[instance_id])
    time.sleep(0.5)
    assert describe(ec2, instance_id)['State']['Name'] == 'shutting-down'
    wait_state(ec2, instance_id, 'terminated')


def test_a_cloud_starts_empty_and_forgets_the_try_out_journal_of_the_last_one(tmp_path):
    """moto starts empty, so the records of the try-out inventories' journal (journal.sqlite in the state directory)
    would name instances that are gone: the start removes them with the last cloud's guests."""
    state = tmp_path / 'cloud'
    state.mkdir()
    journal = ['journal.sqlite', 'journal.sqlite-shm', 'journal.sqlite.secret']
    for name in journal + ['keep.txt']:
        (state / name).write_text('the last cloud')
    with cloud_process(str(state)) as cloud:
        assert cloud.info['state_dir'] == str(state)
        assert not [name for name in journal if (state / name).exists()]
        assert (state / 'keep.txt').exists()
