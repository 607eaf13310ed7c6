"""The real agent CLIs working in workspaces of the try-out cluster (host tier), against scripted model endpoints.

The by-hand path (the default agent, no key or endpoint given: the inventory's), an approval the headless agent
cannot get (blocked, as the status playbook, the expiry sweep and the inventory see it), and a key the model
endpoint refuses (the brief fails with advice, a rerun with the right key goes on at the brief). Each of claude-code,
codex and opencode from create to restore: on the debian tier (tests/integration/template/test_toolset.py) and on
AWS (test_aws_agents.py), with agentsite.edit_brief_archive_restore.

The CLIs are the pinned npm packages (tests/models/clis.py); only their model endpoint is a stand-in
(tests/models), and every test checks what the CLI itself sent to it, so a stand-in agent fails them.
"""

import json
import os

import pytest

from tests.ansible_run import plain, run_ansible

from tests.integration.create.gitserver import Repo
from tests.integration.playbooks import running_cluster

from .agentsite import AgentSite, new_key

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


def test_the_by_hand_path_runs_the_default_agent_with_nothing_but_workspace_repo_and_purpose(site):
    """inventories/localpve as docs/localpve.md uses it: no agent, key or endpoint given; the real claude-code
    works against the cluster's own model endpoint, whose notes script writes the brief into the checkout."""
    name = 'by-hand'
    run = site.playbook('create.yml', workspace=name, repo=site.repo_url, purpose='Tidy up the greeting')
    assert run.ok, run.explain()
    ws, seen = site.wait_idle(name)
    assert ws['params']['agent'] == 'claude-code' and seen['name'] == 'claude-code' and seen['error'] is None
    with open(os.path.join(site.checkout(ws), 'EPHEMERA-NOTES.md')) as src:
        assert src.read() == '- Tidy up the greeting\n'
    sent = [r for r in site.stub.requests('tryout-anthropic-key', agent_only=True)
            if 'Tidy up the greeting' in str(r['body'])]
    assert sent and sent[0]['headers'].get('User-Agent', '').startswith('claude-cli/')
    assert site.playbook('destroy.yml', workspace=name).ok


def test_an_approval_the_headless_agent_cannot_get_leaves_it_blocked_for_every_reader(site, tmp_path):
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
    # The expiry sweep asks the agent too: blocked counts as activity, recorded with the workspace.
    sweep = site.playbook('expire.yml')
    assert sweep.ok, sweep.explain()
    assert '%s: activity: blocked' % name in sweep.output, sweep.output[-3000:]
    events = [e for e in site.events(name) if e['action'] == 'activity']
    assert events and events[-1]['detail']['activity'] == 'blocked'
    # The inventory: the host's activity and agent, and the group of agents waiting for a human.
    config = tmp_path / 'tryout.workspaces.yml'
    config.write_text('plugin: ephemera.workspaces.workspaces\njournal_path: %s\napi_host: %s\napi_token_id: %s\n'
                      'api_token_secret: %s\nca_file: %s\ngroups:\n  agents_waiting_for_a_human: '
                      "ephemera_activity == 'blocked'\n" % (
                          site.journal_path, site.info['proxy_url'], site.info['token_id'],
                          site.info['token_secret'], site.info['ca_file']))
    listed = run_ansible(['ansible-inventory', '-i', str(config), '--list'], env=site.env, callback=None, timeout=120)
    assert listed.ok, listed.explain()
    inventory = plain(json.loads(listed.stdout))
    host = inventory['_meta']['hostvars'][name]
    assert host['ephemera_activity'] == 'blocked' and host['ephemera_agent']['name'] == 'claude-code'
    assert host['ephemera_agent']['waiting'] and name in inventory['agents_waiting_for_a_human']['hosts']
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
