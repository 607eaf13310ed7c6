"""What a fresh cloud holds: a network and an image for workspaces, a key pair, and the foreign client's instances.

Seeded through moto's own endpoint (no faults), with our credentials for our part and the foreign client's for
its instances, so every resource is made the way a site's would be.
"""

import secrets

from .clients import _client

VPC_CIDR = '10.80.0.0/16'
# A /20: room for a fleet of a thousand instances and more (a /24 holds 251: AWS keeps five of its addresses).
SUBNET_CIDR = '10.80.16.0/20'
IMAGE_NAME = 'ephemera-workspace-debian-12'
IMAGE_PARAMETER = '/ephemera/workspaces/images/debian-12'
KEY_NAME = 'workspaces'
GROUP_NAME = 'workspaces-ssh'
INSTANCE_TYPE = 't3.micro'


def _tags(**tags):
    return [{'Key': k, 'Value': v} for k, v in tags.items()]


def forged_marker(workspace, instance_id='i-00000000'):
    """A marker line of the collection's form whose token no controller secret gives."""
    return 'ephemera-workspace: v2 workspace={0} controller=c-{1} vmid={2} nonce={3} token={4}'.format(
        workspace, secrets.token_hex(8), instance_id, secrets.token_hex(16), secrets.token_hex(32))


def seed(info, scope):
    """Make the seed; returns the ids (the 'seed' entry of cloud.json)."""
    moto = info['moto_url']
    ours = dict(endpoint=moto, key=info['access_key_id'], secret=info['secret_access_key'])
    ec2 = _client('ec2', info, ours['key'], ours['secret'], endpoint=moto)
    ssm = _client('ssm', info, ours['key'], ours['secret'], endpoint=moto)
    region = info['region']
    vpc = ec2.create_vpc(CidrBlock=VPC_CIDR, TagSpecifications=[{'ResourceType': 'vpc', 'Tags': _tags(
        Name='workspaces')}])['Vpc']['VpcId']
    subnet = ec2.create_subnet(VpcId=vpc, CidrBlock=SUBNET_CIDR, AvailabilityZone=region + 'a', TagSpecifications=[
        {'ResourceType': 'subnet', 'Tags': _tags(Name='workspaces-a')}])['Subnet']['SubnetId']
    ec2.modify_subnet_attribute(SubnetId=subnet, MapPublicIpOnLaunch={'Value': True})
    group = ec2.create_security_group(GroupName=GROUP_NAME, Description='SSH to workspaces', VpcId=vpc)['GroupId']
    ec2.authorize_security_group_ingress(GroupId=group, IpPermissions=[{
        'IpProtocol': 'tcp', 'FromPort': 22, 'ToPort': 22, 'IpRanges': [{'CidrIp': '0.0.0.0/0'}]}])
    key = ec2.import_key_pair(KeyName=KEY_NAME, PublicKeyMaterial=info['ssh_public_key'].encode())
    image = ec2.register_image(Name=IMAGE_NAME, Description='Debian 12 workspace image (try-out cloud)',
                               Architecture='x86_64', RootDeviceName='/dev/xvda',
                               VirtualizationType='hvm')['ImageId']
    ssm.put_parameter(Name=IMAGE_PARAMETER, Value=image, Type='String', DataType='aws:ec2:image')

    foreign = info['foreign']
    fec2 = _client('ec2', info, foreign['access_key_id'], foreign['secret_access_key'], endpoint=moto)
    launch = dict(ImageId=image, InstanceType=INSTANCE_TYPE, MinCount=1, MaxCount=1, SubnetId=subnet)
    untagged = fec2.run_instances(**launch)['Instances'][0]['InstanceId']
    other = fec2.run_instances(TagSpecifications=[{'ResourceType': 'instance', 'Tags': _tags(
        Name='build-cache', team='data', purpose='ci-cache')}], **launch)['Instances'][0]['InstanceId']
    copy = fec2.run_instances(TagSpecifications=[{'ResourceType': 'instance', 'Tags': _tags(**{
        'Name': 'agent-tag-copy', 'ephemera:workspace': 'tag-copy', 'ephemera:scope': scope,
        'ephemera:token': 'ephemera-tag-copy-' + secrets.token_hex(8), 'ephemera:marker': forged_marker('tag-copy'),
        'ephemera:state': 'ready', 'ephemera:created-by': 'someone-else'})}], **launch)['Instances'][0]['InstanceId']
    return {'vpc_id': vpc, 'subnet_id': subnet, 'security_group_id': group, 'security_group_name': GROUP_NAME,
            'key_name': KEY_NAME, 'key_pair_id': key.get('KeyPairId'), 'image_id': image,
            'image_name': IMAGE_NAME, 'image_parameter': IMAGE_PARAMETER, 'instance_type': INSTANCE_TYPE,
            'availability_zone': region + 'a', 'scope': scope,
            'foreign_instances': {'untagged': untagged, 'other_tags': other, 'tag_copy': copy}}
