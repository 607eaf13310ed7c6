"""A fork of an EC2 workspace is refused until AWS can fork, naming the provider and why, with nothing copied."""

import pytest

from tests.integration.playbooks import make_repo

from .awsrun import AwsSite


@pytest.fixture(scope='module')
def site(localcloud, tmp_path_factory):
    directory = tmp_path_factory.mktemp('aws-fork')
    site = AwsSite(localcloud, directory)
    site.repo = make_repo(str(directory / 'repo'))
    yield site


def test_a_fork_on_aws_is_refused_before_anything_is_copied(site):
    made = site.create('aws-parent', site.repo)
    assert made.ok, made.explain()
    before = site.workspace('aws-parent')
    instances = len(site.cloud.instances())
    result = site.playbook('fork.yml', workspace='aws-parent', count=2)
    assert not result.ok
    assert 'lives on aws, which cannot fork yet' in result.output
    assert 'Create the children with ephemera.workspaces.create instead' in result.output
    assert site.workspace('aws-parent')['generation'] == before['generation']
    assert site.workspace('aws-parent-1') is None
    assert len(site.cloud.instances()) == instances
