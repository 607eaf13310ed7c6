"""The stand-in model endpoint itself: the three protocols' shapes, selection by API key, recording, side
requests, errors, a dropped stream, a hang, and loopback-only binding."""

import http.client
import json
import socket
import threading
import time

import pytest

from tests.modelstub import (DEFAULT, ModelStub, Script, ScriptError, StubError, approval, call, drop, error,
                             hang, shell, text, write)

CWD = '/srv/work/repo'
CLAUDE_TOOLS = ({'name': 'Write', 'input_schema': {'type': 'object', 'properties': {
    'file_path': {'type': 'string'}, 'content': {'type': 'string'}}}},
    {'name': 'Bash', 'input_schema': {'type': 'object', 'properties': {
        'command': {'type': 'string'}, 'description': {'type': 'string'}}}})
CODEX_TOOLS = ({'type': 'function', 'name': 'exec_command', 'parameters': {'type': 'object', 'properties': {
    'cmd': {'type': 'string'}, 'workdir': {'type': 'string'}, 'sandbox_permissions': {'type': 'string'},
    'justification': {'type': 'string'}}}},
    {'type': 'custom', 'name': 'apply_patch', 'format': {'type': 'grammar'}})
OPENCODE_TOOLS = ({'type': 'function', 'function': {'name': 'write', 'parameters': {'type': 'object', 'properties': {
    'filePath': {'type': 'string'}, 'content': {'type': 'string'}}}}},
    {'type': 'function', 'function': {'name': 'bash', 'parameters': {'type': 'object', 'properties': {
        'command': {'type': 'string'}, 'description': {'type': 'string'}}}}})


def anthropic_body(tools=CLAUDE_TOOLS, stream=True, prompt='Do it'):
    return {'model': 'claude-test', 'max_tokens': 100, 'stream': stream, 'tools': list(tools),
            'system': [{'type': 'text', 'text': 'Primary working directory: %s\n' % CWD}],
            'messages': [{'role': 'user', 'content': prompt}]}


def responses_body(tools=CODEX_TOOLS, stream=True, prompt='Do it'):
    return {'model': 'gpt-test', 'stream': stream, 'tools': list(tools), 'instructions': 'You are codex.',
            'input': [{'type': 'message', 'role': 'user', 'content': [
                {'type': 'input_text', 'text': '<environment_context>\n  <cwd>%s</cwd>\n</environment_context>' % CWD}]},
                {'type': 'message', 'role': 'user', 'content': [{'type': 'input_text', 'text': prompt}]}]}


def chat_body(tools=OPENCODE_TOOLS, stream=True, prompt='Do it', usage=True):
    body = {'model': 'stub-model', 'stream': stream, 'tools': list(tools or ()),
            'messages': [{'role': 'system', 'content': 'Working directory: %s' % CWD},
                         {'role': 'user', 'content': prompt}]}
    if usage:
        body['stream_options'] = {'include_usage': True}
    if not tools:
        del body['tools']
    return body


def post(stub, path, body, key='sk-test', bearer=False, timeout=10, headers=None):
    """(status, headers, raw body) of one request to the stub."""
    conn = http.client.HTTPConnection(stub.host, stub.port, timeout=timeout)
    sent = {'Content-Type': 'application/json'}
    if key is not None:
        sent.update({'Authorization': 'Bearer %s' % key} if bearer else {'x-api-key': key})
    sent.update(headers or {})
    try:
        conn.request('POST', path, body=json.dumps(body), headers=sent)
        response = conn.getresponse()
        return response.status, dict((k.lower(), v) for k, v in response.getheaders()), response.read()
    finally:
        conn.close()


def events(raw):
    """[(event name or None, parsed data)] of a server-sent event stream."""
    out = []
    for block in raw.decode().split('\n\n'):
        name, data = None, None
        for line in block.splitlines():
            if line.startswith('event: '):
                name = line[7:]
            elif line.startswith('data: '):
                data = line[6:]
        if data is not None:
            out.append((name, data if data == '[DONE]' else json.loads(data)))
    return out


# --- Anthropic Messages -----------------------------------------------------------------------------------------

def test_anthropic_stream_is_the_messages_event_sequence_with_a_write_tool_use(stub):
    stub.add_script('sk-test', [write('notes/hello.txt', 'hi\n')])
    status, headers, raw = post(stub, '/v1/messages?beta=true', anthropic_body())
    assert status == 200 and headers['content-type'].startswith('text/event-stream')
    seen = events(raw)
    names = [n for n, _data in seen]
    assert names[0] == 'message_start' and names[-2:] == ['message_delta', 'message_stop']
    assert all(n == d['type'] for n, d in seen)
    start = dict(seen)['content_block_start']['content_block']
    assert start['type'] == 'tool_use' and start['name'] == 'Write' and start['input'] == {}
    partial = ''.join(d['delta']['partial_json'] for n, d in seen if n == 'content_block_delta')
    assert json.loads(partial) == {'file_path': CWD + '/notes/hello.txt', 'content': 'hi\n'}
    assert dict(seen)['message_delta']['delta']['stop_reason'] == 'tool_use'


def test_anthropic_plain_json_answer_with_text_and_bash(stub):
    stub.add_script('sk-test', [[text('Running it.'), shell('make test')], text('Done.')])
    status, _headers, raw = post(stub, '/v1/messages', anthropic_body(stream=False))
    message = json.loads(raw)
    assert status == 200 and message['type'] == 'message' and message['role'] == 'assistant'
    assert message['content'][0] == {'type': 'text', 'text': 'Running it.'}
    assert message['content'][1]['type'] == 'tool_use' and message['content'][1]['name'] == 'Bash'
    assert message['content'][1]['input']['command'] == 'make test'
    assert message['stop_reason'] == 'tool_use' and message['usage']['input_tokens'] > 0
    status, _headers, raw = post(stub, '/v1/messages', anthropic_body(stream=False))
    assert json.loads(raw)['content'] == [{'type': 'text', 'text': 'Done.'}]
    assert json.loads(raw)['stop_reason'] == 'end_turn'


# --- OpenAI Responses -------------------------------------------------------------------------------------------

def test_responses_stream_has_codex_event_sequence_and_custom_apply_patch(stub):
    stub.add_script('sk-test', [write('hello.txt', 'one\ntwo\n')])
    status, _headers, raw = post(stub, '/v1/responses', responses_body(), bearer=True)
    seen = events(raw)
    names = [n for n, _data in seen]
    assert status == 200
    assert names[:2] == ['response.created', 'response.in_progress'] and names[-1] == 'response.completed'
    assert 'response.custom_tool_call_input.delta' in names
    done = [d['item'] for n, d in seen if n == 'response.output_item.done']
    assert done[0]['type'] == 'custom_tool_call' and done[0]['name'] == 'apply_patch'
    assert done[0]['input'] == '*** Begin Patch\n*** Add File: hello.txt\n+one\n+two\n*** End Patch\n'
    completed = seen[-1][1]['response']
    assert completed['status'] == 'completed' and completed['output'] == done
    assert completed['usage']['total_tokens'] == completed['usage']['input_tokens'] + completed['usage']['output_tokens']
    assert [d['sequence_number'] for _name, d in seen] == list(range(len(seen)))


def test_responses_shell_and_approval_are_function_calls_of_exec_command(stub):
    stub.add_script('sk-test', [[shell('ls -la'), approval('curl -sS http://127.0.0.1:9/')]])
    _status, _headers, raw = post(stub, '/v1/responses', responses_body(), bearer=True)
    seen = events(raw)
    calls = [d['item'] for n, d in seen if n == 'response.output_item.done']
    arguments = [json.loads(c['arguments']) for c in calls]
    assert [c['type'] for c in calls] == ['function_call', 'function_call']
    assert arguments[0] == {'cmd': 'ls -la', 'workdir': CWD}
    assert arguments[1]['sandbox_permissions'] == 'require_escalated' and arguments[1]['justification']
    deltas = ''.join(d['delta'] for n, d in seen if n == 'response.function_call_arguments.delta'
                     and d['item_id'] == calls[0]['id'])
    assert json.loads(deltas) == arguments[0]


def test_responses_plain_json_answer(stub):
    stub.add_script('sk-test', [text('All done.')])
    status, _headers, raw = post(stub, '/v1/responses', responses_body(stream=False), bearer=True)
    response = json.loads(raw)
    assert status == 200 and response['object'] == 'response' and response['status'] == 'completed'
    assert response['output'][0]['content'][0] == {'type': 'output_text', 'text': 'All done.', 'annotations': []}


# --- Chat completions -------------------------------------------------------------------------------------------

def test_chat_stream_has_tool_call_deltas_usage_and_done(stub):
    stub.add_script('sk-test', [[write('a.txt', 'A'), shell('cat a.txt')]])
    status, _headers, raw = post(stub, '/v1/chat/completions', chat_body(), bearer=True)
    seen = events(raw)
    assert status == 200 and seen[-1] == (None, '[DONE]')
    chunks = [d for _name, d in seen[:-1]]
    assert all(c['object'] == 'chat.completion.chunk' for c in chunks)
    assert chunks[0]['choices'][0]['delta']['role'] == 'assistant'
    assert chunks[-1]['choices'] == [] and chunks[-1]['usage']['total_tokens'] > 0
    assert chunks[-2]['choices'][0]['finish_reason'] == 'tool_calls'
    calls = {}
    for c in chunks:
        for delta in (c['choices'][0]['delta'].get('tool_calls') or []) if c['choices'] else []:
            entry = calls.setdefault(delta['index'], {'name': None, 'arguments': ''})
            if 'id' in delta:
                entry['name'] = delta['function']['name']
            entry['arguments'] += delta['function']['arguments']
    assert calls[0]['name'] == 'write'
    assert json.loads(calls[0]['arguments']) == {'filePath': CWD + '/a.txt', 'content': 'A'}
    assert calls[1]['name'] == 'bash' and json.loads(calls[1]['arguments'])['command'] == 'cat a.txt'


def test_chat_plain_json_answer(stub):
    stub.add_script('sk-test', [text('Fine.')])
    _status, _headers, raw = post(stub, '/v1/chat/completions', chat_body(stream=False), bearer=True)
    answer = json.loads(raw)
    assert answer['object'] == 'chat.completion'
    assert answer['choices'][0]['message']['content'] == 'Fine.' and answer['choices'][0]['finish_reason'] == 'stop'


# --- keys, scripts, recording -----------------------------------------------------------------------------------

def test_a_request_gets_the_script_of_the_key_it_sent(stub):
    stub.add_script('sk-one', [text('from one')])
    stub.add_script('sk-two', [text('from two')])
    _status, _headers, raw_two = post(stub, '/v1/messages', anthropic_body(stream=False), key='sk-two')
    _status, _headers, raw_one = post(stub, '/v1/chat/completions', chat_body(stream=False), key='sk-one', bearer=True)
    assert json.loads(raw_two)['content'][0]['text'] == 'from two'
    assert json.loads(raw_one)['choices'][0]['message']['content'] == 'from one'
    assert [(r['key'], r['script']) for r in stub.requests()] == [('sk-two', 'sk-two'), ('sk-one', 'sk-one')]


@pytest.mark.parametrize('path,body,bearer', [('/v1/messages', anthropic_body(), False),
                                              ('/v1/responses', responses_body(), True),
                                              ('/v1/chat/completions', chat_body(), True)])
def test_an_unknown_key_gets_the_protocols_401(stub, path, body, bearer):
    stub.add_script('sk-known', [text('no')])
    status, _headers, raw = post(stub, path, body, key='sk-unknown', bearer=bearer)
    answer = json.loads(raw)
    assert status == 401
    if path == '/v1/messages':
        assert answer['type'] == 'error' and answer['error']['type'] == 'authentication_error'
    else:
        assert answer['error']['code'] == 'invalid_api_key' and answer['error']['type'] == 'invalid_request_error'
    assert stub.requests()[0]['status'] == 401 and stub.requests()[0]['script'] is None
    status, _headers, _raw = post(stub, path, body, key=None)
    assert status == 401


def test_a_default_script_answers_keys_without_one(stub):
    stub.set_default([text('try-out answer')])
    _status, _headers, raw = post(stub, '/v1/messages', anthropic_body(stream=False), key='any-key-at-all')
    assert json.loads(raw)['content'][0]['text'] == 'try-out answer'
    assert stub.requests()[0]['script'] == DEFAULT
    stub.set_default(None)
    assert post(stub, '/v1/messages', anthropic_body(stream=False), key='any-key-at-all')[0] == 401


def test_every_request_is_recorded_with_headers_body_and_turn(stub):
    stub.add_script('sk-test', [text('one'), text('two')])
    before = time.time()
    post(stub, '/v1/messages?beta=true', anthropic_body(prompt='the brief'), headers={'anthropic-version': '2023-06-01'})
    post(stub, '/v1/messages', anthropic_body(prompt='more'))
    first, second = stub.requests()
    assert first['method'] == 'POST' and first['path'] == '/v1/messages' and first['query'] == {'beta': 'true'}
    assert first['headers']['x-api-key'] == 'sk-test' and first['headers']['anthropic-version'] == '2023-06-01'
    assert first['body']['messages'][0]['content'] == 'the brief' and first['protocol'] == 'anthropic'
    assert first['turn'] == 0 and second['turn'] == 1 and first['cwd'] == CWD and first['stream'] is True
    assert before <= first['time'] <= second['time'] <= time.time()
    assert first['answer'] == {'texts': ['one'], 'calls': []} and first['outcome'] == 'answered'
    assert [r['id'] for r in stub.requests(since=first['id'])] == [second['id']]
    stub.reset()
    assert stub.requests() == []
    post(stub, '/v1/messages', anthropic_body())
    assert stub.requests()[0]['turn'] == 0  # reset rewinds the script too


def test_side_requests_get_a_short_text_and_leave_the_script_alone(stub):
    stub.add_script('sk-test', [write('x.txt', 'x'), text('Done.')])
    status, _headers, raw = post(stub, '/v1/chat/completions', chat_body(tools=None), bearer=True)
    text_sent = ''.join(d['choices'][0]['delta'].get('content') or '' for _name, d in events(raw)[:-1] if d['choices'])
    assert status == 200 and text_sent == stub.side_text
    _status, _headers, raw = post(stub, '/v1/chat/completions', chat_body(), bearer=True)
    assert b'"name":"write"' in raw
    assert [(r['side'], r['turn']) for r in stub.requests()] == [(True, None), (False, 0)]


def test_turn_times_and_then(stub):
    stub.add_script('sk-test', {'turns': [dict(error(429), times=2), text('ok')], 'then': error(500)})
    statuses = [post(stub, '/v1/messages', anthropic_body(stream=False))[0] for _attempt in range(5)]
    assert statuses == [429, 429, 200, 500, 500]
    assert [r['turn'] for r in stub.requests()] == [0, 0, 1, None, None]


def test_a_call_names_any_offered_tool_and_a_missing_tool_is_said_in_text(stub):
    stub.add_script('sk-test', [call('Bash', {'command': 'true', 'run_in_background': True}), call('Nope', {})])
    _status, _headers, raw = post(stub, '/v1/messages', anthropic_body(stream=False))
    assert json.loads(raw)['content'][0]['input'] == {'command': 'true', 'run_in_background': True}
    _status, _headers, raw = post(stub, '/v1/messages', anthropic_body(stream=False))
    assert 'cannot play this turn' in json.loads(raw)['content'][0]['text']
    assert 'Nope' in stub.requests()[1]['problem']


def test_bad_scripts_are_refused():
    for bad in ([{'text': 'a', 'shell': 'b'}], [[error(500), text('x')]], [{'write': 'a'}], [{'nothing': 1}],
                [error(200)], {'turns': [], 'extra': 1}):
        with pytest.raises(ScriptError):
            Script.of(bad)


# --- errors, drop, hang -----------------------------------------------------------------------------------------

def test_anthropic_errors_have_the_anthropic_shape(stub):
    stub.add_script('sk-test', [error(429, retry_after=7), error(529), error(500)])
    found = [post(stub, '/v1/messages', anthropic_body()) for _attempt in range(3)]
    assert [f[0] for f in found] == [429, 529, 500]
    assert [json.loads(f[2])['error']['type'] for f in found] == ['rate_limit_error', 'overloaded_error', 'api_error']
    assert all(json.loads(f[2])['type'] == 'error' and f[1]['request-id'] for f in found)
    assert found[0][1]['retry-after'] == '7'


def test_openai_errors_have_the_openai_shape(stub):
    stub.add_script('sk-test', [error(429, headers={'retry-after-ms': '50'}), error(500, 'boom')])
    status, headers, raw = post(stub, '/v1/chat/completions', chat_body(), bearer=True)
    assert status == 429 and headers['retry-after-ms'] == '50'
    assert json.loads(raw)['error']['code'] == 'rate_limit_exceeded'
    status, _headers, raw = post(stub, '/v1/responses', responses_body(), bearer=True)
    assert status == 500 and json.loads(raw)['error'] == {'message': 'boom', 'type': 'server_error', 'param': None,
                                                          'code': None}


def test_a_dropped_stream_ends_without_its_last_event(stub):
    stub.add_script('sk-test', [drop(), drop(after=4)])
    conn = http.client.HTTPConnection(stub.host, stub.port, timeout=10)
    conn.request('POST', '/v1/messages', body=json.dumps(anthropic_body()),
                 headers={'x-api-key': 'sk-test', 'Content-Type': 'application/json'})
    response = conn.getresponse()
    assert response.status == 200
    with pytest.raises(http.client.IncompleteRead) as cut:
        response.read()
    conn.close()
    assert b'message_start' in cut.value.partial and b'message_stop' not in cut.value.partial
    status, _headers, raw = _read_until_closed(stub, '/v1/responses', responses_body(), bearer=True)
    assert status == 200 and b'response.created' in raw and b'response.completed' not in raw
    assert [r['outcome'] for r in stub.requests()] == ['dropped', 'dropped']


def _read_until_closed(stub, path, body, bearer=False):
    """Read whatever arrives until the connection closes (raw socket: a cut stream is the point)."""
    sock = socket.create_connection((stub.host, stub.port), timeout=10)
    data = json.dumps(body).encode()
    auth = 'Authorization: Bearer sk-test' if bearer else 'x-api-key: sk-test'
    sock.sendall(('POST %s HTTP/1.1\r\nHost: x\r\n%s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n'
                  % (path, auth, len(data))).encode() + data)
    raw = b''
    while True:
        piece = sock.recv(65536)
        if not piece:
            break
        raw += piece
    sock.close()
    head = raw.split(b'\r\n', 1)[0]
    return int(head.split()[1]), head, raw


def test_a_hang_answers_nothing_for_its_seconds_then_closes(stub):
    stub.add_script('sk-test', [hang(1.0)])
    started = time.monotonic()
    with pytest.raises((http.client.RemoteDisconnected, ConnectionError)):
        post(stub, '/v1/messages', anthropic_body())
    assert 0.9 <= time.monotonic() - started < 5
    assert stub.requests()[0]['outcome'] == 'hung' and stub.requests()[0]['status'] is None


def test_a_hang_without_end_lasts_until_the_stub_stops():
    stub = ModelStub().start()
    stub.add_script('sk-test', [hang(None)])
    failures = []

    def ask():
        try:
            post(stub, '/v1/messages', anthropic_body(), timeout=30)
        except (http.client.HTTPException, OSError) as err:
            failures.append(err)

    asker = threading.Thread(target=ask)
    asker.start()
    stub.wait_for(1)
    time.sleep(0.5)
    assert asker.is_alive()
    started = time.monotonic()
    stub.stop()
    asker.join(10)
    assert not asker.is_alive() and failures and time.monotonic() - started < 5
    assert stub.requests()[0]['outcome'] == 'server stopped'


def test_a_delay_comes_before_the_answer(stub):
    stub.add_script('sk-test', [text('late', delay=0.6)])
    started = time.monotonic()
    assert post(stub, '/v1/messages', anthropic_body(stream=False))[0] == 200
    assert time.monotonic() - started >= 0.6


# --- models, unknown paths, binding -----------------------------------------------------------------------------

def test_models_list_in_each_shape(stub):
    stub.add_script('sk-test', [])
    conn = http.client.HTTPConnection(stub.host, stub.port, timeout=10)
    conn.request('GET', '/v1/models', headers={'Authorization': 'Bearer sk-test'})
    listed = json.loads(conn.getresponse().read())['data']
    assert listed == [{'id': 'stub-model', 'object': 'model', 'created': 1735689600, 'owned_by': 'stub'}]
    conn.request('GET', '/v1/models', headers={'x-api-key': 'sk-test', 'anthropic-version': '2023-06-01'})
    assert json.loads(conn.getresponse().read())['data'][0]['type'] == 'model'
    conn.request('GET', '/npm/left-pad', headers={})
    response = conn.getresponse()
    assert response.status == 404 and response.read()
    conn.close()
    assert [r['status'] for r in stub.requests()] == [200, 200, 404]


@pytest.mark.parametrize('host', ['0.0.0.0', '10.1.2.3', '192.168.1.1', '::1', 'example.com', '8.8.8.8'])
def test_binding_outside_loopback_is_refused(host):
    with pytest.raises(StubError):
        ModelStub(host=host)


def test_binding_another_loopback_address():
    with ModelStub(host='127.0.0.2') as other:
        other.add_script('sk-test', [text('from .2')])
        assert other.url.startswith('http://127.0.0.2:')
        _status, _headers, raw = post(other, '/v1/messages', anthropic_body(stream=False))
        assert json.loads(raw)['content'][0]['text'] == 'from .2'
