"""The real agent CLIs in workspaces on AWS (the try-out cloud: moto behind a fault proxy, with SSH guests whose image
carries the CLIs), against scripted model endpoints: claude-code, codex and opencode, each once through the shipped
playbooks, from create to a restore of their archived work (agentsite.edit_brief_archive_restore)."""

import os

import pytest

from tests.integration.create.gitserver import Repo
from tests.localcloud.fixtures import cloud_process

from .agentsite import AGENTS, AgentSite, edit_brief_archive_restore

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


@pytest.fixture(scope='module')
def site(tmp_path_factory):
    with cloud_process(os.path.join(str(tmp_path_factory.mktemp('agents-cloud')), 'cloud')) as cloud:
        info = cloud.info
        repo = Repo(str(tmp_path_factory.mktemp('agents-repo')))

        def checkout(ws):
            return os.path.join(info['guest_root'].replace('{vmid}', str(ws['resource_id'])), 'workspace', 'repo')

        yield AgentSite(info, os.path.join(ROOT, 'inventories', 'localcloud'),
                        {'LOCALCLOUD_STATE_DIR': info['state_dir']}, tmp_path_factory.mktemp('agents-controller'),
                        repo.url, checkout)


@pytest.mark.parametrize('agent', AGENTS)
def test_the_real_cli_on_ec2_edits_is_briefed_again_and_its_work_is_archived(site, agent, tmp_path):
    edit_brief_archive_restore(site, agent, 'ec2-%s' % agent, str(tmp_path / 'restore'))
    record = site.workspace('ec2-%s' % agent)
    assert record['provider'] == 'aws' and record['status'] == 'destroyed'
