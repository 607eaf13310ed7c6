"""The agents' catalogue (guest/agents.py) and the recording of what an agent does (flows/agent.py)."""

import json
import tomllib

import pytest

from ansible_collections.ephemera.workspaces.plugins.module_utils.core import lease as leasing
from ansible_collections.ephemera.workspaces.plugins.module_utils.core.journal import Journal
from ansible_collections.ephemera.workspaces.plugins.module_utils.flows import agent as agent_flow
from ansible_collections.ephemera.workspaces.plugins.module_utils.guest import agents


def test_the_built_in_agents_start_headless_with_their_event_streams_and_continue_their_sessions():
    spec = agents.runner_spec('claude-code')
    assert spec['command'][:3] == ['claude', '-p', '{purpose}'] and 'stream-json' in spec['command']
    assert '--resume' in spec['continue'] and '{session}' in spec['continue'] and spec['events'] == 'claude'
    assert spec['environment']['CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC'] == '1'
    codex = agents.runner_spec('codex')
    assert codex['command'][:3] == ['codex', 'exec', '--json'] and codex['events'] == 'codex'
    assert codex['continue'][-3:] == ['resume', '{session}', '{purpose}']
    opencode = agents.runner_spec('opencode')
    assert opencode['command'][:2] == ['opencode', 'run'] and ['--session', '{session}'] == \
        opencode['continue'][-3:-1]
    # The tool a template must have verified, for each built-in agent.
    assert [agents.tool_of(n, agents.BUILTIN[n]) for n in ('claude-code', 'codex', 'opencode')] == [
        'claude', 'codex', 'opencode']


def test_an_endpoint_and_a_model_reach_each_agent_its_own_way_and_no_key_is_written():
    claude = agents.runner_agents('claude-code', None, {'claude-code': 'https://llm.example.com/anthropic'},
                                  {'claude-code': 'claude-opus'})['claude-code']
    assert claude['environment']['ANTHROPIC_BASE_URL'] == 'https://llm.example.com/anthropic'
    assert claude['environment']['ANTHROPIC_MODEL'] == 'claude-opus'
    codex = agents.runner_agents('codex', None, {'codex': 'https://llm.example.com/openai/v1'})['codex']
    config = tomllib.loads(codex['files']['.codex/config.toml'])
    assert config['model_provider'] == 'ephemera' and config['model'] == 'gpt-5.5'
    assert config['model_providers']['ephemera'] == {'name': 'ephemera', 'base_url': 'https://llm.example.com/openai/v1',
                                                     'env_key': 'OPENAI_API_KEY', 'wire_api': 'responses'}
    opencode = agents.runner_agents('opencode', None, {'opencode': 'http://127.0.0.1:9/v1'}, {'opencode': 'm1'})
    settings = json.loads(opencode['opencode']['files']['.config/opencode/opencode.json'])
    assert settings['model'] == 'ephemera/m1' and settings['autoupdate'] is False
    assert settings['provider']['ephemera']['options'] == {'baseURL': 'http://127.0.0.1:9/v1',
                                                           'apiKey': '{env:OPENAI_API_KEY}'}
    assert opencode['opencode']['environment']['OPENCODE_DISABLE_MODELS_FETCH'] == '1'
    # Without an endpoint: OpenAI's own for codex, opencode's own providers.
    plain = tomllib.loads(agents.runner_spec('codex')['files']['.codex/config.toml'])
    assert plain['model_providers']['ephemera']['base_url'] == agents.OPENAI_BASE_URL
    assert 'provider' not in json.loads(agents.runner_spec('opencode')['files']['.config/opencode/opencode.json'])


@pytest.mark.parametrize('url, said', [
    ('ftp://llm.example.com', 'must be an http:// or https:// URL'),
    ('https://user:secret@llm.example.com/v1', 'carries credentials in the URL'),
    ('llm.example.com', 'must be an http:// or https:// URL'),
])
def test_an_endpoint_that_is_not_one_is_refused(url, said):
    with pytest.raises(agents.AgentError, match=said):
        agents.runner_agents('codex', None, {'codex': url})


@pytest.mark.parametrize('entry, said', [
    ([], 'has no command line'),
    ('claude', 'must be a command line'),
    ({'command': ['x', '{purpose}'], 'events': 'xml'}, "events 'xml' is not one of"),
    ({'command': ['x'], 'shell': True}, 'unknown key'),
    ({'command': ['x'], 'files': {'/etc/passwd': 'x'}}, 'must be a path under the agent'),
    ({'command': ['x'], 'files': {'../.ssh/authorized_keys': 'x'}}, 'must be a path under the agent'),
    ({'command': ['x'], 'environment': {'A': 1}}, 'environment must map names to strings'),
    ({'command': ['x'], 'continue': 'x'}, 'continue must be a command line'),
])
def test_an_agents_entry_that_cannot_start_is_refused(entry, said):
    with pytest.raises(agents.AgentError, match=said):
        agents.check({'mine': entry})


def test_an_entry_replaces_the_built_in_of_its_name_and_a_list_has_no_event_stream():
    mine = {'claude-code': ['claude', '-p', '{purpose}'], 'aider': {'command': ['aider', '{purpose}'], 'tool': 'aider'}}
    agents.check(mine)
    assert agents.runner_spec('claude-code', mine) == {'command': ['claude', '-p', '{purpose}'], 'events': 'lines'}
    assert agents.tool_of('claude-code', agents.catalogue(mine)['claude-code']) is None
    assert agents.tool_of('aider', agents.catalogue(mine)['aider']) == 'aider'
    with pytest.raises(agents.AgentError, match="Unknown agent 'nope'"):
        agents.runner_spec('nope', mine)


@pytest.mark.parametrize('text, said', [
    ('', 'empty'), ('   ', 'empty'), ('--dangerously-skip-permissions', 'starts with "-"'),
    ('a\x00b', 'NUL'), ('x' * 8001, '8001 characters long'),
])
def test_a_follow_up_message_the_command_line_cannot_carry_is_refused(text, said):
    with pytest.raises(agent_flow.AgentError, match=said):
        agent_flow.check_message(text)


def answer(activity, **agent):
    view = {'name': 'claude-code', 'session': 's-1', 'answered': True, 'error': None, 'waiting': [], 'briefs': 1,
            'running': activity == 'active', 'exit': None, 'events': [{'type': 'tool', 'text': 'Write a.py', 'at': 1.0}]}
    view.update(agent)
    return {'ok': True, 'alive': True, 'activity': activity, 'agent': view}


@pytest.fixture
def journal(tmp_path):
    with Journal.open(str(tmp_path / 'journal.sqlite')) as jnl:
        jnl.create_workspace('w1', status='ready', activity='unknown', desired_state='present', params={},
                             lease={'created_at': 1000.0, 'last_touched_at': 1000.0, 'ttl': 5400,
                                    'idle_timeout': 1800, 'keep': False, 'expires_at': 2800.0},
                             lease_expires_at=2800.0)
        yield jnl


def test_an_observation_is_recorded_with_an_event_only_when_the_activity_or_the_error_changes(journal):
    ws, touched = agent_flow.record(journal, 'w1', answer('active'), now=1500.0)
    assert ws['activity'] == 'active' and ws['facts']['agent']['session'] == 's-1' and not touched
    assert ws['facts']['agent']['observed_at'] == 1500.0
    agent_flow.record(journal, 'w1', answer('active'), now=1600.0)
    agent_flow.record(journal, 'w1', answer('idle', error={'kind': 'auth', 'message': 'refused', 'at': 1.0}),
                      now=1700.0)
    observed = [e for e in journal.events('w1') if e['action'] == 'activity']
    assert [e['detail'] for e in observed] == [{'activity': 'active'}, {'activity': 'idle', 'error': 'auth'}]
    assert journal.get_workspace('w1')['facts']['agent']['observed_at'] == 1700.0


def test_a_working_agent_touches_the_lease_when_the_sweep_asks_never_past_its_ttl(journal):
    ws, touched = agent_flow.record(journal, 'w1', answer('blocked'), now=2000.0, touch_lease=True)
    assert touched and ws['lease']['expires_at'] == 3800.0
    ws, touched = agent_flow.record(journal, 'w1', answer('idle'), now=2100.0, touch_lease=True)
    assert not touched and ws['lease']['expires_at'] == 3800.0


def test_an_agent_that_says_active_counts_only_as_late_as_its_last_progress(journal):
    """Its activity is its own word: the lease is touched as of the last look that saw its events, output or CPU
    time change, so one that says active and does nothing expires idle_timeout after it stopped."""
    working = {'events': 4, 'written': 300, 'cpu': 2}
    ws, touched = agent_flow.record(journal, 'w1', answer('active', progress=working), now=2000.0, touch_lease=True)
    assert touched and ws['lease']['expires_at'] == 3800.0 and ws['facts']['agent']['progress_at'] == 2000.0
    # Nothing changed since: the lease stays as of 2000, one event says since when.
    for now in (2500.0, 3000.0, 3500.0):
        ws, touched = agent_flow.record(journal, 'w1', answer('active', progress=working), now=now, touch_lease=True)
        assert not touched and ws['lease']['expires_at'] == 3800.0 and ws['facts']['agent']['progress_at'] == 2000.0
    stalled = [e['detail'] for e in journal.events('w1') if e['detail'].get('no_progress_since')]
    assert stalled == [{'activity': 'active', 'no_progress_since': leasing.format_time(2000.0)}]
    # The CPU time moved: progress again, the lease runs from now.
    ws, touched = agent_flow.record(journal, 'w1', answer('active', progress=dict(working, cpu=3)), now=3600.0,
                                    touch_lease=True)
    assert touched and ws['lease']['expires_at'] == 5400.0 and ws['facts']['agent']['progress_at'] == 3600.0


def test_check_mode_records_nothing_and_a_runner_without_an_agent_view_keeps_the_facts(journal):
    agent_flow.record(journal, 'w1', answer('active'), now=1500.0, check_mode=True)
    assert journal.get_workspace('w1')['activity'] == 'unknown'
    ws, dummy = agent_flow.record(journal, 'w1', {'ok': True, 'alive': True, 'activity': 'idle'}, now=1500.0)
    assert ws['activity'] == 'idle' and 'agent' not in ws['facts']


def test_the_brief_waits_for_the_models_answer_an_error_or_the_agents_end():
    seen = iter([answer('active', answered=False, running=True), answer('active', answered=False, running=True),
                 answer('active')])
    last, slow = agent_flow.wait_for_answer(lambda: next(seen), 10, sleep=lambda s: None)
    assert last['agent']['answered'] and not slow
    stuck = answer('active', answered=False, running=True)
    clock = iter(range(100))
    last, slow = agent_flow.wait_for_answer(lambda: stuck, 0, sleep=lambda s: next(clock))
    assert slow
    refused = answer('idle', answered=False, running=False, error={'kind': 'auth', 'message': 'Invalid API key'})
    with pytest.raises(agent_flow.AgentError, match="refused the agent's key: check agent_credentials "
                                                    r"\(ANTHROPIC_API_KEY, ANTHROPIC_AUTH_TOKEN\)"):
        agent_flow.check_briefed(refused, 'claude-code')


def test_describe_says_in_one_line_what_the_agent_does():
    record = {'activity': 'blocked', 'facts': {'agent': dict(answer('blocked')['agent'], waiting=['needs approval: Bash x'],
                                                             observed_at=0)}}
    assert agents.describe(record) == ('claude-code blocked, waits for needs approval: Bash x; last: Write a.py '
                                       '(observed 1970-01-01T00:00:00Z)')
    assert agents.describe({'activity': 'idle', 'facts': {}}) is None


def test_the_briefs_own_answer_ends_the_wait_when_it_settles_it_and_is_looked_past_when_not():
    looks = []

    def call():
        looks.append(1)
        return answer('active')
    # An agent without an event stream is answered at its start: the brief's answer says so, no look follows.
    last, slow = agent_flow.wait_for_answer(call, 10, sleep=lambda s: None, first=answer('active'))
    assert last['agent']['answered'] and not slow and looks == []
    # Still waiting for the model: the runner is asked.
    last, slow = agent_flow.wait_for_answer(call, 10, sleep=lambda s: None,
                                            first=answer('active', answered=False, running=True))
    assert last['agent']['answered'] and looks == [1]
    # An answer without the agent's view settles nothing.
    last, slow = agent_flow.wait_for_answer(call, 10, sleep=lambda s: None, first={'ok': True})
    assert looks == [1, 1]
