"""The try-out cloud's debian tier: an image made by CreateImage is a copy of its instance's files at that moment,
and an instance launched from it starts from that copy (docs/internals/localcloud.md)."""

import os
import time

import pytest

from tests.localcloud.fixtures import cloud_process

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason='the debian guest tier needs root (mounts, namespaces)')


def launch(cloud, image_id=None):
    seed = cloud.info['seed']
    return cloud.ec2().run_instances(
        ImageId=image_id or seed['image_id'], InstanceType=seed['instance_type'], MinCount=1, MaxCount=1,
        SubnetId=seed['subnet_id'], KeyName=seed['key_name'],
        SecurityGroupIds=[seed['security_group_id']])['Instances'][0]['InstanceId']


def root_of(cloud, instance_id, timeout=60):
    """The instance's files once it runs and they are there."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = [i for i in cloud.instances() if i['instance_id'] == instance_id]
        if found and found[0]['state'] == 'running' and found[0].get('root') and \
                os.path.isdir(os.path.join(found[0]['root'], 'etc')):
            return found[0]['root']
        time.sleep(0.2)
    raise AssertionError('instance %s did not run with its files within %d s' % (instance_id, timeout))


def write(root, path, text):
    with open(os.path.join(root, path), 'w', encoding='utf-8') as out:
        out.write(text)


def test_an_instance_launched_from_an_image_starts_from_the_images_copy(tmp_path):
    with cloud_process(str(tmp_path / 'cloud'), guests='debian', agent_clis=False) as cloud:
        ec2 = cloud.ec2()
        parent = launch(cloud)
        parent_root = root_of(cloud, parent)
        write(parent_root, 'root/i1', 'at-image\n')
        image = ec2.create_image(InstanceId=parent, Name='debian-copy', NoReboot=True)['ImageId']
        # Written after CreateImage answered: no instance launched from the image sees these.
        write(parent_root, 'root/i1', 'changed\n')
        write(parent_root, 'root/i2', 'later\n')
        deadline = time.monotonic() + 30
        while ec2.describe_images(ImageIds=[image])['Images'][0]['State'] != 'available':
            assert time.monotonic() < deadline, 'the image did not become available'
            time.sleep(0.2)
        child_root = root_of(cloud, launch(cloud, image))
        with open(os.path.join(child_root, 'root/i1'), encoding='utf-8') as fh:
            assert fh.read() == 'at-image\n'
        assert not os.path.exists(os.path.join(child_root, 'root/i2'))
        # A Debian userland of its own, the launch's key added to root's.
        assert os.path.exists(os.path.join(child_root, 'etc/debian_version'))
        with open(os.path.join(child_root, 'root/.ssh/authorized_keys'), encoding='utf-8') as fh:
            assert fh.read().strip()
