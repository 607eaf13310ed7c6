"""The AWS rows' invariants see what they claim to count (tests/faults/aws.py): a clean create on the try-out cloud
passes every one of them, and each fails on a cloud broken on purpose: an instance of ours the journal does not know,
a foreign instance changed or named by a request of ours, a ready workspace whose instance is not running.
"""

import pytest

from ansible_collections.ephemera.workspaces.plugins.module_utils.core import ownership
from tests.faults import aws
from tests.faults.matrix import points_of


@pytest.fixture(scope='module')
def cloud_site(tmp_path_factory):
    site = aws.AwsSite.start(str(tmp_path_factory.mktemp('faults-aws')))
    try:
        site.clear_faults()
        site.log_requests()
        outcome = site.run([site.create_op('ok1')])
        assert outcome.ok, outcome.explain()
        site.trace = outcome.trace
        yield site
    finally:
        site.stop()


def check(site, names, foreign_before=None):
    return aws.check(site, names, foreign_before or {}, site.requests(), site.secret())


def test_a_clean_create_passes_every_invariant_and_its_trace_names_the_ec2_calls(cloud_site):
    found, leaks, view = check(cloud_site, ['ok1'])
    assert found == {name: [] for name in aws.NAMES} and leaks == {}
    assert list(view.ours.values()) == ['ok1']
    points = [point for point, nth in points_of(cloud_site.trace, 'ok1')]
    assert 'create.clone aws RunInstances' in points and 'create.ready aws CreateTags' in points
    assert [p for p, n in aws.aws_decisive(points_of(cloud_site.trace, 'ok1'))] == [
        'create.clone journal clone', 'create.clone aws RunInstances', 'create.configure aws CreateTags',
        'create.ready aws CreateTags']


def test_an_instance_of_ours_the_journal_does_not_know_is_a_leak(cloud_site):
    secret = cloud_site.secret()
    token = 'ephemera-ghost-0123456789abcdef01234567'
    marker = ownership.render_resource(secret, ownership.controller_id(secret), 'ghost', token, ownership.new_nonce())
    seed = cloud_site.info['seed']
    made = cloud_site.cloud.ec2(direct=True).run_instances(
        ImageId=seed['image_id'], InstanceType=seed['instance_type'], MinCount=1, MaxCount=1,
        SubnetId=seed['subnet_id'], ClientToken=token, TagSpecifications=[{'ResourceType': 'instance', 'Tags': [
            {'Key': aws.TAG_WORKSPACE, 'Value': 'ghost'}, {'Key': aws.TAG_MARKER, 'Value': marker},
            {'Key': aws.TAG_TOKEN, 'Value': token}]}])['Instances'][0]['InstanceId']
    try:
        found, leaks, view = check(cloud_site, ['ghost'])
        assert leaks == {made: 'ghost: no journal record'}
        # Its copy on another instance (another ClientToken) verifies for nobody: foreign, no leak.
        copy = cloud_site.cloud.foreign_create(tags={aws.TAG_WORKSPACE: 'ghost', aws.TAG_MARKER: marker})
        found, leaks, view = check(cloud_site, ['ghost'])
        assert set(leaks) == {made} and copy['instance_ids'][0] in view.foreign
    finally:
        cloud_site.cloud.ec2(direct=True).terminate_instances(InstanceIds=[made])


def test_a_foreign_instance_changed_or_named_by_a_request_of_ours_is_seen(cloud_site):
    before = aws.CloudView(cloud_site, cloud_site.secret()).foreign
    foreign = cloud_site.info['seed']['foreign_instances']
    # The foreign principal itself retags one of its instances; our controller's client stops another.
    cloud_site.cloud.foreign_ec2().create_tags(Resources=[foreign['other_tags']], Tags=[{'Key': 'team', 'Value': 'x'}])
    cloud_site.cloud.ec2().stop_instances(InstanceIds=[foreign['untagged']])
    try:
        found, leaks, view = check(cloud_site, ['ok1'], before)
        assert 'foreign %s changed: tags' % foreign['other_tags'] in found['foreign']
        assert 'foreign %s changed: state' % foreign['untagged'] in found['foreign']
        assert 'our controller sent StopInstances to foreign %s' % foreign['untagged'] in found['foreign']
    finally:
        cloud_site.cloud.ec2(direct=True).start_instances(InstanceIds=[foreign['untagged']])


def test_a_ready_workspace_whose_instance_does_not_run_fails_ready(cloud_site):
    with cloud_site.journal() as journal:
        instance_id = journal.get_workspace('ok1')['resource_id']
    cloud_site.cloud.ec2(direct=True).stop_instances(InstanceIds=[instance_id])
    found, leaks, view = check(cloud_site, ['ok1'])
    assert found['ready'] and found['ready'][0].startswith('ok1 is ready, but %s is stop' % instance_id)
