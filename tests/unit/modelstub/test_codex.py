"""codex (the real CLI) against the stand-in model endpoint: codex exec --json -s workspace-write."""

from . import cli_cases

KIND = 'codex'


def test_writes_the_file_and_runs_the_command(agent_bin, stub, workspace):
    run = cli_cases.writes_file_and_runs_command(KIND, agent_bin, stub, workspace)
    assert run.types()[:2] == ['thread.started', 'turn.started'] and run.types()[-1] == 'turn.completed'
    items = [e['item'] for e in run.events if e['type'] == 'item.completed']
    assert [i['type'] for i in items] == ['file_change', 'command_execution', 'agent_message']
    assert items[1]['exit_code'] == 0 and 'hello from the stub' in items[1]['aggregated_output']
    # Its home is not under TMPDIR, so codex makes its helper binaries (apply_patch on PATH) without a warning.
    assert 'Refusing to create helper binaries' not in run.stderr


def test_an_unknown_key_fails_at_once(agent_bin, stub, workspace):
    run = cli_cases.unknown_key_fails_fast(KIND, agent_bin, stub, workspace)
    assert run.types()[-1] == 'turn.failed' and '401' in run.events[-1]['error']['message']


def test_a_follow_up_resumes_the_session(agent_bin, stub, workspace):
    cli_cases.follow_up_sends_history(KIND, agent_bin, stub, workspace)


def test_an_escalation_is_rejected_without_an_event(agent_bin, stub, workspace):
    run, requests = cli_cases.approval_is_refused(KIND, agent_bin, stub, workspace,
                                                  extra_args=['-c', 'approval_policy="on-request"'])
    assert run.types() == ['thread.started', 'turn.started', 'item.completed', 'turn.completed']
    output = [i for i in requests[1]['body']['input'] if i.get('type') == 'function_call_output']
    assert output and 'approval policy is Never' in output[-1]['output']
