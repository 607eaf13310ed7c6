"""The real agent CLIs working in workspaces of the try-out cluster (host tier), against scripted model endpoints.

claude-code, codex and opencode, each once through the shipped playbooks (agentsite.edit_brief_archive_restore):
the create briefs the real CLI, which edits the repository as its model's script says, activity goes active then
idle as the CLI's own event stream says, a follow-up brief continues the same session and makes a second change,
and destroy archives the agent's actual work, from which a restore shows both changes. Then an approval the headless
agent cannot get (blocked), and a key the model endpoint refuses (the brief fails with advice, a rerun with the
right key goes on at the brief).

The CLIs are the pinned npm packages (tests/models/clis.py); only their model endpoint is a stand-in
(tests/models), and every test checks what the CLI itself sent to it, so a stand-in agent fails them.
"""

import os

import pytest

from tests.integration.create.gitserver import Repo
from tests.integration.playbooks import running_cluster

from .agentsite import AGENTS, AgentSite, edit_brief_archive_restore, new_key

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


@pytest.fixture(scope='module')
def site(tmp_path_factory):
    with running_cluster(tmp_path_factory.mktemp('agents-cluster')) as cluster:
        info = cluster.info
        repo = Repo(str(tmp_path_factory.mktemp('agents-repo')))

        def checkout(ws):
            return os.path.join(info['guest_root'].replace('{vmid}', str(ws['vmid'])), 'workspace', 'repo')

        yield AgentSite(info, os.path.join(ROOT, 'inventories', 'localpve'), {'LOCALPVE_STATE_DIR': info['state_dir']},
                        tmp_path_factory.mktemp('agents-controller'), repo.url, checkout)


@pytest.mark.parametrize('agent', AGENTS)
def test_the_real_cli_edits_works_is_briefed_again_and_its_work_is_archived(site, agent, tmp_path):
    template = site.info['guest_root'].replace('{vmid}', str(site.info['template_vmid']))
    edit_brief_archive_restore(site, agent, 'real-%s' % agent, str(tmp_path / 'restore'), template_root=template)


def test_an_approval_the_headless_agent_cannot_get_leaves_it_blocked(site):
    name, key = 'real-blocked', new_key('claude-code')
    site.stub.add_script(key, [{'approval': 'curl -s http://127.0.0.1:9/install.sh | sh'},
                               {'text': 'I need your approval to run the installer.'}])
    run = site.create(name, 'claude-code', key, 'Install the project tooling')
    assert run.ok, run.explain()
    ws, seen = site.wait_idle(name)
    assert ws['activity'] == 'blocked', seen
    assert seen['waiting'] and 'curl' in seen['waiting'][0]
    status = site.playbook('status.yml', queue_target=name)
    assert 'claude-code blocked, waits for needs approval: Bash curl' in status.output
    assert site.playbook('destroy.yml', workspace=name).ok


def test_a_refused_key_fails_the_brief_with_advice_and_a_rerun_with_the_right_key_goes_on(site):
    name, wrong, right = 'real-key', new_key('claude-code'), new_key('claude-code')
    site.stub.add_script(right, [{'write': 'notes.md', 'content': 'ok\n'}, {'text': 'Done.'}])
    # The try-out endpoint answers any key; this one it refuses, every time it is asked.
    site.stub.add_script(wrong, [{'error': 401}] * 50)
    failed = site.create(name, 'claude-code', wrong, 'Take notes')
    assert not failed.ok
    assert "refused the agent's key" in failed.output and 'ANTHROPIC_API_KEY' in failed.output
    ws, seen = site.agent_of(name)
    assert ws['status'] == 'failed' and ws['failure']['step'] == 'brief' and seen['error']['kind'] == 'auth'
    assert 'runner' in ws['progress'] and os.path.isdir(site.checkout(ws))
    # The stand-in saw the wrong key and answered 401; the runner stopped the CLI at its first retry.
    refused = site.stub.requests(wrong)
    assert {r['answer'] for r in refused} == {'error'} and len(refused) <= 3
    again = site.create(name, 'claude-code', right, 'Take notes')
    assert again.ok, again.explain()
    changed = [name for name, result in again.results('localhost') if name[:1].isdigit() and result.get('changed')]
    assert [c.split(' ', 1)[0] for c in changed] == ['12/13', '13/13'], changed
    ws, seen = site.wait_idle(name)
    assert seen['error'] is None and ws['status'] == 'ready'
    assert os.path.exists(os.path.join(site.checkout(ws), 'notes.md'))
    assert site.playbook('destroy.yml', workspace=name).ok
