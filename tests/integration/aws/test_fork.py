"""Fork an EC2 workspace through the shipped playbook on the try-out cloud: an AMI of the parent made without
reboot, children launched from it, each through identity reset, the image and its snapshots gone at the end."""

import os

import pytest

from tests.integration.playbooks import make_repo

from .awsrun import AwsSite, FAKE_AGENTS

FORK_TAG = 'ephemera:fork-image'


@pytest.fixture(scope='module')
def site(localcloud, tmp_path_factory):
    directory = tmp_path_factory.mktemp('aws-fork')
    site = AwsSite(localcloud, directory)
    site.repo = make_repo(str(directory / 'repo'))
    yield site


@pytest.fixture(scope='module')
def parent(site):
    """One parent for the module: a failed fork leaves it as it was, so the next fork starts from it again."""
    made = site.create('aws-par', site.repo)
    assert made.ok, made.explain()
    return 'aws-par'


def root_of(site, name):
    instance_id = site.workspace(name)['resource_id']
    return [i for i in site.cloud.instances() if i['instance_id'] == instance_id][0]['root']


def guest_file(site, name, path):
    with open(os.path.join(root_of(site, name), path.lstrip('/')), encoding='utf-8') as handle:
        return handle.read()


def fork_images(site):
    """The fork images and their EBS snapshots the account still has (straight at moto)."""
    ec2 = site.cloud.ec2(direct=True)
    images = ec2.describe_images(Owners=['self'], Filters=[{'Name': 'name', 'Values': ['ephemera-fork-*']}])['Images']
    snapshots = ec2.describe_snapshots(OwnerIds=['self'], Filters=[{'Name': 'tag-key', 'Values': [FORK_TAG]}])
    return [i['ImageId'] for i in images] + [s['SnapshotId'] for s in snapshots['Snapshots']]


def fork(site, parent, **extra):
    values = dict(workspace=parent, agent_credentials={'ANTHROPIC_API_KEY': 'child-key'}, ephemera_agents=FAKE_AGENTS)
    values.update(extra)
    return site.playbook('fork.yml', **values)


def test_a_child_that_fails_undoes_the_fork_and_leaves_no_image(site, parent):
    before = site.workspace(parent)
    # CreateImage's answer is lost: the fork finds the image by its name and never asks for a second one. The second
    # child's launch is refused: the first child, launched and reset, is terminated with it.
    sent = site.cloud.proxy_add('log', 'CreateImage', times=None)
    lost = site.cloud.drop_response('CreateImage')
    site.cloud.proxy_add('error', 'RunInstances', skip=1, times=1, code='InsufficientInstanceCapacity', status=500,
                         message='We currently do not have sufficient t3.micro capacity.')
    try:
        result = fork(site, parent, children=['aws-bad-1', 'aws-bad-2'])
        rules = site.cloud.proxy_rules()
    finally:
        site.cloud.proxy_clear()
    assert not result.ok
    assert 'is as it was' in result.output, result.explain()
    assert 'InsufficientInstanceCapacity' in result.output, result.explain()
    hits = {r['id']: len(r['hits']) for r in rules}
    assert hits[sent['id']] == 1 and hits[lost['id']] == 1, rules
    # The children are launched side by side: whichever launch was refused, neither child was briefed.
    for name in ('aws-bad-1', 'aws-bad-2'):
        done = [e['action'] for e in site.events(name)]
        assert 'brief' not in done and 'ready' not in done, (name, done)
    for name in ('aws-bad-1', 'aws-bad-2'):
        child = site.workspace(name)
        assert (child['status'], child['desired_state']) == ('destroyed', 'destroyed'), name
        assert site.instances(name) == []
    after = site.workspace(parent)
    assert after['status'] == 'ready' and after['resource_id'] == before['resource_id']
    assert after['facts']['fork']['state'] == 'abandoned'
    assert fork_images(site) == []


def test_a_fork_on_aws_makes_children_from_an_image_and_leaves_no_image(site, parent):
    before = site.workspace('aws-par')
    root = root_of(site, parent)
    os.makedirs(os.path.join(root, 'etc'), exist_ok=True)
    with open(os.path.join(root, 'etc/machine-id'), 'w', encoding='utf-8') as out:
        out.write('0' * 32 + '\n')
    with open(os.path.join(root, 'var/lib/ephemera/agent.env'), 'w', encoding='utf-8') as out:
        out.write('ANTHROPIC_API_KEY=parent-secret\n')
    with open(os.path.join(root, 'workspace/prepared'), 'w', encoding='utf-8') as out:
        out.write('warm build\n')
    result = fork(site, parent, count=2)
    assert result.ok, result.output[-4000:]
    children = [site.workspace('aws-par-%d' % i) for i in (1, 2)]
    assert [c['status'] for c in children] == ['ready', 'ready']
    assert all(c['resource_id'] != before['resource_id'] and c['resource_id'].startswith('i-') for c in children)
    machine_ids, host_keys, markers = set(), set(), set()
    for child in children:
        assert child['facts']['fork']['parent'] == 'aws-par'
        assert child['facts']['fork']['fork_point'] == before['facts']['head']
        assert guest_file(site, child['name'], '/workspace/prepared') == 'warm build\n'
        env = guest_file(site, child['name'], '/var/lib/ephemera/agent.env')
        assert 'parent-secret' not in env and 'child-key' in env
        machine_ids.add(guest_file(site, child['name'], '/etc/machine-id').strip())
        host_keys.add(child['facts']['host_key'])
        [instance] = site.instances(child['name'])
        markers.add(instance['tags']['ephemera:marker'])
    assert len(machine_ids) == 2 and '0' * 32 not in machine_ids
    assert len(host_keys) == 2 and before['facts']['host_key'] not in host_keys
    [parent_instance] = site.instances(parent)
    assert len(markers) == 2 and parent_instance['tags']['ephemera:marker'] not in markers
    after = site.workspace(parent)
    assert after['status'] == 'ready' and after['resource_id'] == before['resource_id']
    assert after['facts']['host_key'] == before['facts']['host_key']
    assert 'parent-secret' in guest_file(site, parent, '/var/lib/ephemera/agent.env')
    assert after['facts']['fork']['state'] == 'done'
    assert sorted(after['facts']['fork_children']) == ['aws-par-1', 'aws-par-2']
    assert fork_images(site) == []
    # Launched side by side: each child was recorded before the other reached identity reset.
    first = dict(((name, action), min(e['id'] for e in site.events(name) if action in (None, e['action'])))
                 for name in ('aws-par-1', 'aws-par-2') for action in (None, 'identity_reset'))
    assert max(first[n, None] for n in ('aws-par-1', 'aws-par-2')) < \
        min(first[n, 'identity_reset'] for n in ('aws-par-1', 'aws-par-2'))
    dispatched = [e for e in site.events(parent) if e['action'] == 'fork_snapshot']
    assert dispatched, 'the image is recorded before CreateImage'
