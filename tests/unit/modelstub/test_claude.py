"""claude-code (the real CLI) against the stand-in model endpoint: claude -p ... --output-format stream-json."""

import json

from . import cli_cases

KIND = 'claude'


def test_writes_the_file_and_runs_the_command(agent_bin, stub, workspace):
    run = cli_cases.writes_file_and_runs_command(KIND, agent_bin, stub, workspace)
    assert run.types()[0] == 'system' and run.events[0]['subtype'] == 'init'
    assert run.events[0]['session_id'] == run.session and run.events[0]['permissionMode'] == 'acceptEdits'
    result = run.events[-1]
    assert result['type'] == 'result' and result['is_error'] is False and result['subtype'] == 'success'
    uses = [b['name'] for e in run.events if e['type'] == 'assistant' for b in e['message']['content']
            if b['type'] == 'tool_use']
    assert uses == ['Write', 'Bash']


def test_an_unknown_key_fails_at_once(agent_bin, stub, workspace):
    run = cli_cases.unknown_key_fails_fast(KIND, agent_bin, stub, workspace)
    result = run.events[-1]
    assert result['type'] == 'result' and result['is_error'] is True
    assert result['api_error_status'] == 401 and result['terminal_reason'] == 'api_error'
    assert any(e.get('error') == 'authentication_failed' for e in run.events if e['type'] == 'assistant')


def test_a_follow_up_resumes_the_session(agent_bin, stub, workspace):
    cli_cases.follow_up_sends_history(KIND, agent_bin, stub, workspace)


def test_bash_needing_approval_is_denied_and_the_run_goes_on(agent_bin, stub, workspace):
    run, requests = cli_cases.approval_is_refused(KIND, agent_bin, stub, workspace)
    denied = [e for e in run.events if e['type'] == 'system' and e.get('subtype') == 'permission_denied']
    assert denied and denied[0]['tool_name'] == 'Bash'
    assert run.events[-1]['permission_denials'][0]['tool_name'] == 'Bash'
    assert len(requests) == 2 and 'requires approval' in json.dumps(requests[1]['body']['messages'][-1])
