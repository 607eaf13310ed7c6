"""The pools parts' checks (tests/faults/pools.py, tests/faults/awspools.py on the try-out cloud's EC2 and
tests/faults/cloudpools.py on its Hetzner, Compute Engine and Azure fakes) see a pool broken on purpose: a member
claimed by a workspace that does not hold it, a member left released, a machine of a member the journal forgot, a
workspace that is not ready (and a volume or, on Azure, a resource of the set tagged for another workspace). The pools
rows report zeros; this shows that those zeros are measured."""

import pytest

from ansible_collections.ephemera.workspaces.plugins.module_utils.core import pools
from tests.faults import aws, azure
from tests.faults.aws import AwsSite
from tests.faults.awspools import AwsPoolMatrix
from tests.faults.cloudpools import MATRICES
from tests.faults.pools import PoolMatrix

from .conftest import started


@pytest.fixture(scope='module')
def cloud_site(tmp_path_factory):
    yield from started(AwsSite, str(tmp_path_factory.mktemp('faults-aws-pools')))


@pytest.fixture(scope='module', params=sorted(MATRICES))
def cloud_pool(request, tmp_path_factory):
    """A pools matrix of the Hetzner, Compute Engine or Azure rows on a try-out cloud of its own."""
    site_class, matrix_class = MATRICES[request.param]
    for site in started(site_class, str(tmp_path_factory.mktemp('faults-' + request.param))):
        yield matrix_class(site)


def test_the_pools_checks_see_a_pool_broken_on_purpose(site):
    broken_on_purpose(PoolMatrix(site))


def test_the_aws_pools_checks_see_a_pool_broken_on_purpose(cloud_site):
    matrix = AwsPoolMatrix(cloud_site)
    pool, member = broken_on_purpose(matrix)
    # A volume of the member's instance tagged for another workspace (a claim's re-tagging that missed it).
    (instance,) = [i for i, item in cloud_site.items().items() if item['workspace'] == member]
    ec2 = cloud_site.cloud.ec2(direct=True)
    (volume,) = [v['VolumeId'] for v in ec2.describe_volumes()['Volumes']
                 if any(a['InstanceId'] == instance for a in v.get('Attachments') or [])]
    assert matrix.volume_problems(matrix.view(), pool, []) == []
    ec2.create_tags(Resources=[volume], Tags=[{'Key': aws.TAG_WORKSPACE, 'Value': 'someone'}])
    assert matrix.volume_problems(matrix.view(), pool, []) == [
        'volume %s of %s has %s someone, its instance %s' % (volume, instance, aws.TAG_WORKSPACE, member)]


def test_each_clouds_pools_checks_see_a_pool_broken_on_purpose(cloud_pool):
    pool, member = broken_on_purpose(cloud_pool)
    if cloud_pool.prefix != 'azure-pools':
        return
    # A resource of the member's set tagged for another workspace (a claim's re-tagging that missed it).
    site, view = cloud_pool.site, cloud_pool.view()
    (disk,) = [item for item in view.instances.values() if item['kind'] == 'disk' and item['workspace'] == member]
    assert cloud_pool.set_problems(view, pool, []) == []
    site.cloud.azure('change', resource=disk['id'], tags={azure.TAG_WORKSPACE: 'someone'})
    assert cloud_pool.set_problems(cloud_pool.view(), pool, []) == [
        'disk %s of set %s has %s someone, its VM %s' % (disk['name'], disk['base'], azure.TAG_WORKSPACE, member)]


def broken_on_purpose(matrix):
    """A pool of one member filled on ``matrix``'s site, then broken one way after the other."""
    site = matrix.site
    pool = matrix.declared('pd', 1)
    site.clear_faults()
    filled = site.run([site.fill_op([pool])])
    assert filled.ok, filled.explain()
    matrix.secret = site.secret()

    def problems(workspaces=(), size=1):
        return matrix.pool_problems(matrix.view(), pool, list(workspaces), size)

    assert problems() == []
    with site.journal() as journal:
        record = pools.members(journal, 'pd')[0]
    member = record['member']
    value = {k: v for k, v in record.items() if k not in ('key', 'generation')}

    # Claimed by a workspace that never took it: its record still names its container.
    with site.journal() as journal:
        generation = journal.put_provider_state(record['key'], dict(value, state='claimed', workspace='nobody'),
                                                generation=record['generation'])
    found = problems()
    assert 'member %s is claimed by nobody, which does not hold it' % member in found
    assert any(p.startswith('claimed member %s: its record is registering' % member) for p in found)
    assert 'pool pd has 0 warm members, not 1' in found
    # A workspace of the row that is not ready.
    assert 'nobody is None, not ready' in problems(['nobody'])

    # Left released: never given out, and its container is still there.
    with site.journal() as journal:
        generation = journal.put_provider_state(record['key'], dict(value, state='released'), generation=generation)
    found = problems()
    assert 'member %s was left released' % member in found
    assert any(p.endswith('carries the marker of member %s, which is released' % member) for p in found)

    # Forgotten while its container is there: no record accounts for it.
    with site.journal() as journal:
        journal.delete_provider_state(record['key'], generation)
    assert any(p.endswith('carries the marker of member %s, which is forgotten' % member) for p in problems())
    return pool, member
