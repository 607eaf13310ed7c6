"""The model stand-in speaking each protocol to a plain HTTP client: shapes, scripts by key, recording, faults.

tests/integration/agents runs the real CLIs against it."""

import http.client
import json
import os
import socket
import subprocess
import sys
import time

import pytest

from tests.models import NOTES, ModelServer, StubError

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
ANTHROPIC_TOOLS = [{'name': 'Write', 'input_schema': {}}, {'name': 'Bash', 'input_schema': {}}]
RESPONSES_TOOLS = [{'type': 'function', 'name': 'exec_command', 'parameters': {}}]
CHAT_TOOLS = [{'type': 'function', 'function': {'name': 'bash', 'parameters': {}}},
              {'type': 'function', 'function': {'name': 'write', 'parameters': {}}}]


@pytest.fixture
def stub():
    with ModelServer() as server:
        yield server


def post(stub, path, body, key='k1', bearer=False):
    conn = http.client.HTTPConnection('127.0.0.1', stub.port, timeout=10)
    headers = {'content-type': 'application/json'}
    if key is not None:
        headers.update({'authorization': 'Bearer %s' % key} if bearer else {'x-api-key': key})
    conn.request('POST', path, json.dumps(body), headers)
    answer = conn.getresponse()
    data = answer.read()
    conn.close()
    return answer.status, answer.getheader('content-type'), data.decode()


def sse(data):
    """[(event, payload)] of a server-sent event stream (payload None for [DONE])."""
    out = []
    for block in data.strip().split('\n\n'):
        name, payload = None, None
        for line in block.splitlines():
            if line.startswith('event: '):
                name = line[7:]
            elif line.startswith('data: '):
                payload = None if line[6:] == '[DONE]' else json.loads(line[6:])
        out.append((name, payload))
    return out


def anthropic(prompt='Add a farewell', stream=True, history=()):
    return {'model': 'm', 'stream': stream, 'tools': ANTHROPIC_TOOLS, 'system': 'Working directory: /w/repo',
            'messages': list(history) + [{'role': 'user', 'content': [{'type': 'text', 'text': prompt}]}]}


def test_a_streamed_anthropic_answer_is_a_tool_use_in_the_published_event_order(stub):
    stub.add_script('k1', [{'write': 'farewell.py', 'content': 'def bye(): pass\n'}, {'text': 'Wrote it.'}])
    status, kind, data = post(stub, '/v1/messages?beta=true', anthropic())
    assert status == 200 and kind == 'text/event-stream'
    events = sse(data)
    assert [e for e, dummy in events] == [
        'message_start', 'content_block_start', 'ping', 'content_block_delta', 'content_block_stop', 'message_delta',
        'message_stop']
    assert events[1][1]['content_block']['name'] == 'Write'
    # Relative paths are taken from the working directory the request names.
    assert json.loads(events[3][1]['delta']['partial_json']) == {'file_path': '/w/repo/farewell.py',
                                                                 'content': 'def bye(): pass\n'}
    assert events[5][1]['delta']['stop_reason'] == 'tool_use'
    status, kind, data = post(stub, '/v1/messages', anthropic(stream=False))
    message = json.loads(data)
    assert message['content'] == [{'type': 'text', 'text': 'Wrote it.'}] and message['stop_reason'] == 'end_turn'
    # After the last turn: "Done.".
    assert json.loads(post(stub, '/v1/messages', anthropic(stream=False))[2])['content'][0]['text'] == 'Done.'


def test_the_responses_api_answers_a_function_call_then_text(stub):
    stub.add_script('k1', [{'shell': 'make test'}, {'text': 'Tests pass.'}])
    body = {'model': 'gpt', 'stream': True, 'tools': RESPONSES_TOOLS,
            'input': [{'type': 'message', 'role': 'user', 'content': [{'type': 'input_text', 'text': 'run tests'}]}]}
    events = sse(post(stub, '/v1/responses', body, bearer=True)[2])
    names = [e for e, dummy in events]
    assert names[0] == 'response.created' and names[-1] == 'response.completed'
    assert [p['sequence_number'] for dummy, p in events] == list(range(len(events)))
    call = events[-1][1]['response']['output'][0]
    assert call['type'] == 'function_call' and call['name'] == 'exec_command'
    assert json.loads(call['arguments']) == {'cmd': 'make test'}
    events = sse(post(stub, '/v1/responses', body, bearer=True)[2])
    assert 'response.output_text.delta' in [e for e, dummy in events]
    assert events[-1][1]['response']['output'][0]['content'][0]['text'] == 'Tests pass.'


def test_chat_completions_stream_tool_call_deltas_and_end_with_done(stub):
    stub.add_script('k1', [{'write': '/abs/notes.md', 'content': 'x'}, {'text': 'ok'}])
    body = {'model': 'm', 'stream': True, 'tools': CHAT_TOOLS, 'messages': [{'role': 'user', 'content': 'go'}]}
    chunks = sse(post(stub, '/v1/chat/completions', body, bearer=True)[2])
    assert chunks[-1][1] is None  # data: [DONE]
    calls = [c['choices'][0]['delta']['tool_calls'] for dummy, c in chunks[:-1] if 'tool_calls' in c['choices'][0]['delta']]
    assert calls[0][0]['function']['name'] == 'write'
    assert json.loads(calls[0][0]['function']['arguments']) == {'filePath': '/abs/notes.md', 'content': 'x'}
    assert chunks[-2][1]['choices'][0]['finish_reason'] == 'tool_calls'


def test_an_unknown_key_gets_each_protocols_401_and_is_recorded(stub):
    status, dummy, data = post(stub, '/v1/messages', anthropic(), key='nobody')
    assert status == 401 and json.loads(data)['error']['type'] == 'authentication_error'
    status, dummy, data = post(stub, '/v1/responses', {'input': 'x', 'tools': RESPONSES_TOOLS}, key='nobody', bearer=True)
    assert status == 401 and json.loads(data)['error']['code'] == 'invalid_api_key'
    status, dummy, data = post(stub, '/v1/chat/completions', {'messages': []}, key=None)
    assert status == 401
    assert [(r['key'], r['answer']) for r in stub.requests()] == [('nobody', 'unknown key')] * 2 + [(None, 'unknown key')]


def test_requests_without_tools_do_not_advance_the_script(stub):
    stub.add_script('k1', [{'text': 'first'}])
    title = {'model': 'small', 'stream': False, 'messages': [{'role': 'user', 'content': 'title this'}]}
    assert json.loads(post(stub, '/v1/messages', title)[2])['content'][0]['text'] == 'Working on it'
    assert json.loads(post(stub, '/v1/messages', anthropic(stream=False))[2])['content'][0]['text'] == 'first'
    assert [r['turn'] for r in stub.requests('k1')] == [None, 0]
    assert stub.requests('k1', agent_only=True)[0]['body']['messages'][-1]['content'][0]['text'] == 'Add a farewell'


@pytest.mark.parametrize('status, kind', [(401, 'authentication_error'), (429, 'rate_limit_error'),
                                          (529, 'overloaded_error'), (500, 'api_error')])
def test_error_turns_answer_in_the_protocols_shape_then_the_script_goes_on(stub, status, kind):
    stub.add_script('k1', [{'error': status}, {'text': 'after'}])
    got, dummy, data = post(stub, '/v1/messages', anthropic(stream=False))
    assert got == status and json.loads(data)['error']['type'] == kind
    assert json.loads(post(stub, '/v1/messages', anthropic(stream=False))[2])['content'][0]['text'] == 'after'


def test_a_dropped_stream_is_cut_short_and_a_hang_holds_until_its_time(stub):
    stub.add_script('k1', [{'drop': True, 'text': 'x' * 500}, {'hang': 0.5}, {'text': 'late'}])
    conn = http.client.HTTPConnection('127.0.0.1', stub.port, timeout=10)
    conn.request('POST', '/v1/messages', json.dumps(anthropic()), {'x-api-key': 'k1'})
    answer = conn.getresponse()
    with pytest.raises(http.client.IncompleteRead):
        answer.read()
    started = time.monotonic()
    with pytest.raises((http.client.RemoteDisconnected, ConnectionError, socket.timeout)):
        post(stub, '/v1/messages', anthropic())
    assert time.monotonic() - started >= 0.45
    assert 'late' in post(stub, '/v1/messages', anthropic())[2]


def test_the_notes_script_appends_each_prompt_and_answers_a_tool_result_with_done(stub):
    stub.set_default(NOTES)
    events = sse(post(stub, '/v1/messages', anthropic('Fix the login bug'), key='anyone')[2])
    command = json.loads(events[3][1]['delta']['partial_json'])['command']
    assert command == "printf '%s\\n' '- Fix the login bug' >> EPHEMERA-NOTES.md"
    history = [{'role': 'user', 'content': 'Fix the login bug'},
               {'role': 'assistant', 'content': [{'type': 'tool_use', 'id': 't', 'name': 'Bash', 'input': {}}]},
               {'role': 'user', 'content': [{'type': 'tool_result', 'tool_use_id': 't', 'content': ''}]}]
    body = dict(anthropic(), stream=False, messages=history)
    assert json.loads(post(stub, '/v1/messages', body, key='anyone')[2])['content'][0]['text'] == 'Done.'


def test_bad_scripts_and_addresses_are_refused():
    with pytest.raises(StubError):
        ModelServer(host='0.0.0.0')
    with pytest.raises(StubError):
        ModelServer().add_script('k', [{'dance': 1}])


def test_the_command_line_serves_with_a_guarded_control_api(tmp_path):
    info = tmp_path / 'info.json'
    proc = subprocess.Popen([sys.executable, '-m', 'tests.models', 'serve', '--token', 'tok', '--info', str(info)],
                            cwd=ROOT)
    try:
        deadline = time.monotonic() + 20
        while not info.exists():
            assert time.monotonic() < deadline and proc.poll() is None
            time.sleep(0.05)
        url = json.loads(info.read_text())['url']
        host, port = url[7:].split(':')
        conn = http.client.HTTPConnection(host, int(port), timeout=10)
        conn.request('POST', '/_stub/scripts', json.dumps({'key': 'k9', 'turns': [{'text': 'hi'}]}))
        assert conn.getresponse().status == 403
        conn.close()
        conn = http.client.HTTPConnection(host, int(port), timeout=10)
        conn.request('POST', '/_stub/scripts', json.dumps({'key': 'k9', 'turns': [{'text': 'hi'}]}),
                     {'X-Stub-Token': 'tok'})
        assert conn.getresponse().status == 200
        conn.close()
        conn = http.client.HTTPConnection(host, int(port), timeout=10)
        conn.request('POST', '/v1/messages', json.dumps(anthropic(stream=False)), {'x-api-key': 'k9'})
        assert json.loads(conn.getresponse().read())['content'][0]['text'] == 'hi'
        conn.close()
        conn = http.client.HTTPConnection(host, int(port), timeout=10)
        conn.request('GET', '/_stub/requests?key=k9', headers={'X-Stub-Token': 'tok'})
        assert [r['answer'] for r in json.loads(conn.getresponse().read())] == ['text']
        conn.close()
    finally:
        proc.terminate()
        proc.wait(10)
