"""opencode (the real CLI) against the stand-in model endpoint: opencode run --format json, with an
OpenAI-compatible provider in its configuration."""

from . import cli_cases

KIND = 'opencode'


def test_writes_the_file_and_runs_the_command(agent_bin, stub, workspace):
    run = cli_cases.writes_file_and_runs_command(KIND, agent_bin, stub, workspace)
    tools = [e['part'] for e in run.events if e['type'] == 'tool_use']
    assert [(t['tool'], t['state']['status']) for t in tools] == [('write', 'completed'), ('bash', 'completed')]
    assert run.events[-1]['type'] == 'step_finish' and run.events[-1]['part']['reason'] == 'stop'
    # It asks for a title with a request of its own (no tools): the stub answers it aside from the script.
    side = [r for r in stub.requests(side=True) if r['protocol'] == 'chat']
    assert side and 'title' in side[0]['body']['messages'][0]['content']
    # It asks the npm registry for @opencode-ai/plugin on every start (here: the stub, which says 404).
    assert [r['path'] for r in stub.requests(path='/npm/@opencode-ai%2fplugin')]


def test_an_unknown_key_fails_at_once(agent_bin, stub, workspace):
    run = cli_cases.unknown_key_fails_fast(KIND, agent_bin, stub, workspace)
    errors = [e for e in run.events if e['type'] == 'error']
    assert errors and errors[0]['error']['data']['statusCode'] == 401


def test_a_follow_up_resumes_the_session(agent_bin, stub, workspace):
    cli_cases.follow_up_sends_history(KIND, agent_bin, stub, workspace)


def test_a_permission_set_to_ask_is_rejected_and_the_run_ends(agent_bin, stub, workspace):
    run, requests = cli_cases.approval_is_refused(KIND, agent_bin, stub, workspace,
                                                  config={'permission': {'bash': 'ask'}})
    tools = [e['part'] for e in run.events if e['type'] == 'tool_use']
    assert tools[0]['tool'] == 'bash' and tools[0]['state']['status'] == 'error'
    assert 'rejected' in tools[0]['state']['error']
    assert 'auto-rejecting' in run.stderr
    assert len(requests) == 1  # it does not go back to the model
