"""Scripted stand-ins of the model endpoints the coding agents talk to, on one loopback HTTP server.

Three wire protocols, each as its published reference describes it (docs/model-endpoints.md):

- the Anthropic Messages API, ``POST /v1/messages`` (claude-code): streamed as server-sent events
  (``message_start``, ``content_block_start/delta/stop``, ``message_delta``, ``message_stop``) when the request
  says ``stream: true``, else one JSON message; ``tool_use`` blocks, and ``tool_result`` blocks read back;
- the OpenAI Responses API, ``POST /v1/responses`` (``codex exec``): streamed events ``response.created``,
  ``response.output_item.added/done``, ``response.function_call_arguments.delta/done``,
  ``response.output_text.delta/done``, ``response.completed``; ``function_call`` items, and
  ``function_call_output`` items read back;
- OpenAI-compatible chat completions, ``POST /v1/chat/completions`` (opencode's OpenAI-compatible provider):
  ``chat.completion.chunk`` events with ``tool_calls`` deltas, ending ``data: [DONE]``.

A **script** says what the "model" does, turn by turn. A request is matched to its script by the API key it sent
(``x-api-key`` or ``Authorization: Bearer``); a key with no script gets the protocol's 401, unless a default script
is set. Each request that carries the agent's tools takes the script's next turn (a cursor per key: a request
the client repeats after an error takes the next turn too, so a script puts as many error turns as it wants the
client to see); requests without tools (titles, summaries) get a short text and leave the cursor where it is.
After the last turn every request is answered with the text "Done.".

Turns (one key each, plus options):

``{"write": PATH, "content": TEXT}``   create a file (relative paths are taken from the agent's working
                                       directory, which the request names); ``{brief}`` in TEXT stands for the
                                       last prompt the agent sent
``{"shell": COMMAND}``                 run a shell command
``{"approval": COMMAND}``              a command the headless agent may not run without an approval it cannot get
                                       (claude-code: a Bash pipeline its permission mode does not allow)
``{"text": TEXT}``                     a final answer: the agent's turn ends
``{"error": STATUS, "message": M}``    an HTTP error in the protocol's own shape (401, 403, 429, 500, 529)
``{"drop": true}``                     the answer starts, then the connection is cut
``{"hang": SECONDS}``                  no answer for SECONDS (``null``: until the server stops)

Any turn may say ``"delay": SECONDS``: its answer comes that much later (a model that thinks), so that a test sees
the agent working.

The ``notes`` script (for a try-out site) is stateless: to a prompt it answers with a shell command that appends
the prompt to ``EPHEMERA-NOTES.md``, to a tool result with "Done.".

Every request is recorded: method, path, protocol, key, headers, JSON body, which turn answered it.
"""

import json
import re
import socket
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from ipaddress import ip_address

ANTHROPIC = 'anthropic'
RESPONSES = 'responses'
CHAT = 'chat'
PROTOCOLS = {'/v1/messages': ANTHROPIC, '/v1/responses': RESPONSES, '/v1/chat/completions': CHAT}
ACTIONS = ('write', 'shell', 'approval', 'text', 'error', 'drop', 'hang')
DONE = {'text': 'Done.'}
NOTES = 'notes'
NOTES_FILE = 'EPHEMERA-NOTES.md'
ERROR_TYPES = {400: 'invalid_request_error', 401: 'authentication_error', 403: 'permission_error',
               404: 'not_found_error', 429: 'rate_limit_error', 500: 'api_error', 503: 'overloaded_error',
               529: 'overloaded_error'}
CONTROL_PREFIX = '/_stub/'
CWD_PATTERNS = (re.compile(r'<cwd>([^<]+)</cwd>'), re.compile(r'[Ww]orking directory: (/[^\s"\\<]+)'))


class StubError(Exception):
    """A script or a setting the stand-in cannot use."""


def check_turns(turns):
    if not isinstance(turns, list):
        raise StubError('a script is a list of turns')
    for turn in turns:
        if not isinstance(turn, dict) or not [k for k in ACTIONS if k in turn]:
            raise StubError('a turn is a dict with one of %s: %r' % (', '.join(ACTIONS), turn))
    return turns


def loopback(host):
    try:
        return ip_address(host).is_loopback
    except ValueError:
        return False


# ------------------------------------------------------------------ what a request says

def api_key(headers):
    key = headers.get('x-api-key')
    if key:
        return key
    auth = headers.get('authorization') or ''
    return auth[7:].strip() if auth.lower().startswith('bearer ') else None


def _texts(value):
    """Every string inside ``value`` (a request body), for finding what it names."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from _texts(item)
    elif isinstance(value, list):
        for item in value:
            yield from _texts(item)


def working_directory(body):
    for text in _texts(body):
        for pattern in CWD_PATTERNS:
            found = pattern.search(text)
            if found:
                return found.group(1).strip()
    return None


def tool_names(protocol, body):
    names = []
    for tool in body.get('tools') or []:
        if not isinstance(tool, dict):
            continue
        if protocol == CHAT:
            names.append((tool.get('function') or {}).get('name'))
        else:
            names.append(tool.get('name'))
    return [n for n in names if n]


def _content_text(content):
    if isinstance(content, str):
        return content
    out = []
    for block in content or []:
        if isinstance(block, dict) and block.get('type') in ('text', 'input_text') and block.get('text'):
            if not block['text'].lstrip().startswith(('<system-reminder>', '<environment_context>',
                                                      '<user_instructions>', '# AGENTS.md')):
                out.append(block['text'])
    return '\n'.join(out)


def last_turn(protocol, body):
    """('prompt', its text) when the request ends with something the user said; ('result', None) after a tool's."""
    if protocol == RESPONSES:
        items = body.get('input') if isinstance(body.get('input'), list) else [
            {'type': 'message', 'role': 'user', 'content': body.get('input') or ''}]
        for item in reversed(items):
            kind = item.get('type')
            if kind in ('function_call_output', 'custom_tool_call_output', 'local_shell_call_output'):
                return 'result', None
            if kind == 'message' and item.get('role') == 'user':
                text = _content_text(item.get('content'))
                if text:
                    return 'prompt', text
            if kind == 'message' and item.get('role') == 'assistant':
                return 'result', None
        return 'prompt', ''
    messages = body.get('messages') or []
    for message in reversed(messages):
        role = message.get('role')
        if role == 'tool':
            return 'result', None
        if role == 'user':
            content = message.get('content')
            if isinstance(content, list) and any(isinstance(b, dict) and b.get('type') == 'tool_result'
                                                 for b in content):
                return 'result', None
            text = _content_text(content)
            if text:
                return 'prompt', text
        if role == 'assistant':
            return 'result', None
    return 'prompt', ''


# ------------------------------------------------------------------ turns as tool calls

def _absolute(path, cwd):
    if path.startswith('/') or not cwd:
        return path
    return cwd.rstrip('/') + '/' + path


def tool_call(protocol, tools, turn, cwd, brief):
    """(tool name, its arguments) that carry out ``turn`` with the tools the agent offered; None for a text."""
    def pick(*names):
        for name in names:
            if name in tools:
                return name
        return None

    if 'write' in turn:
        path = _absolute(turn['write'], cwd)
        content = str(turn.get('content', '')).replace('{brief}', brief or '')
        name = pick('Write', 'write')
        if name == 'Write':
            return name, {'file_path': path, 'content': content}
        if name == 'write':
            return name, {'filePath': path, 'content': content}
        command = "mkdir -p \"$(dirname %s)\" && printf '%%s' %s > %s" % (
            _quote(path), _quote(content), _quote(path))
        return _shell(pick, command)
    if 'shell' in turn:
        return _shell(pick, turn['shell'])
    if 'approval' in turn:
        name, args = _shell(pick, turn['approval'])
        if name == 'exec_command':
            args.update(sandbox_permissions='require_escalated', justification='May I run %s?' % turn['approval'])
        return name, args
    return None


def _shell(pick, command):
    name = pick('Bash', 'bash', 'exec_command', 'shell')
    if name == 'Bash':
        return name, {'command': command, 'description': 'Run a command'}
    if name == 'bash':
        return name, {'command': command, 'description': 'Run a command'}
    if name == 'exec_command':
        return name, {'cmd': command}
    if name == 'shell':
        return name, {'command': ['bash', '-lc', command]}
    raise StubError('the agent offered no shell tool')


def _quote(text):
    return "'" + text.replace("'", "'\"'\"'") + "'"


# ------------------------------------------------------------------ the three protocols' answers

def _sse(events):
    return ''.join('event: %s\ndata: %s\n\n' % (name, json.dumps(data)) for name, data in events).encode()


def anthropic_answer(body, call, text):
    model = body.get('model') or 'claude-stub'
    message = {'id': 'msg_%s' % uuid.uuid4().hex[:20], 'type': 'message', 'role': 'assistant', 'model': model,
               'content': [], 'stop_reason': None, 'stop_sequence': None,
               'usage': {'input_tokens': 10, 'output_tokens': 1}}
    if call:
        block = {'type': 'tool_use', 'id': 'toolu_%s' % uuid.uuid4().hex[:20], 'name': call[0], 'input': call[1]}
        stop = 'tool_use'
    else:
        block = {'type': 'text', 'text': text}
        stop = 'end_turn'
    if not body.get('stream'):
        return 'application/json', json.dumps(dict(message, content=[block], stop_reason=stop,
                                                   usage={'input_tokens': 10, 'output_tokens': 5})).encode()
    if call:
        start = dict(block, input={})
        delta = {'type': 'input_json_delta', 'partial_json': json.dumps(block['input'])}
    else:
        start = {'type': 'text', 'text': ''}
        delta = {'type': 'text_delta', 'text': text}
    return 'text/event-stream', _sse([
        ('message_start', {'type': 'message_start', 'message': message}),
        ('content_block_start', {'type': 'content_block_start', 'index': 0, 'content_block': start}),
        ('ping', {'type': 'ping'}),
        ('content_block_delta', {'type': 'content_block_delta', 'index': 0, 'delta': delta}),
        ('content_block_stop', {'type': 'content_block_stop', 'index': 0}),
        ('message_delta', {'type': 'message_delta', 'delta': {'stop_reason': stop, 'stop_sequence': None},
                           'usage': {'output_tokens': 5}}),
        ('message_stop', {'type': 'message_stop'}),
    ])


def responses_answer(body, call, text):
    rid = 'resp_%s' % uuid.uuid4().hex[:24]
    model = body.get('model') or 'gpt-stub'
    created = int(time.time())
    if call:
        item = {'type': 'function_call', 'id': 'fc_%s' % uuid.uuid4().hex[:20], 'call_id': 'call_%s' % uuid.uuid4()
                .hex[:20], 'name': call[0], 'arguments': json.dumps(call[1]), 'status': 'completed'}
    else:
        item = {'type': 'message', 'id': 'msg_%s' % uuid.uuid4().hex[:20], 'role': 'assistant', 'status': 'completed',
                'content': [{'type': 'output_text', 'text': text, 'annotations': []}]}
    usage = {'input_tokens': 10, 'input_tokens_details': {'cached_tokens': 0}, 'output_tokens': 5,
             'output_tokens_details': {'reasoning_tokens': 0}, 'total_tokens': 15}
    response = {'id': rid, 'object': 'response', 'created_at': created, 'model': model, 'status': 'in_progress',
                'output': [], 'usage': None}
    if not body.get('stream'):
        return 'application/json', json.dumps(dict(response, status='completed', output=[item], usage=usage)).encode()
    events = [('response.created', {'type': 'response.created', 'response': response}),
              ('response.in_progress', {'type': 'response.in_progress', 'response': response})]
    if call:
        events += [
            ('response.output_item.added', {'type': 'response.output_item.added', 'output_index': 0,
                                            'item': dict(item, arguments='', status='in_progress')}),
            ('response.function_call_arguments.delta', {'type': 'response.function_call_arguments.delta',
                                                        'item_id': item['id'], 'output_index': 0,
                                                        'delta': item['arguments']}),
            ('response.function_call_arguments.done', {'type': 'response.function_call_arguments.done',
                                                       'item_id': item['id'], 'output_index': 0,
                                                       'arguments': item['arguments']}),
        ]
    else:
        part = {'type': 'output_text', 'text': '', 'annotations': []}
        events += [
            ('response.output_item.added', {'type': 'response.output_item.added', 'output_index': 0,
                                            'item': dict(item, content=[], status='in_progress')}),
            ('response.content_part.added', {'type': 'response.content_part.added', 'item_id': item['id'],
                                             'output_index': 0, 'content_index': 0, 'part': part}),
            ('response.output_text.delta', {'type': 'response.output_text.delta', 'item_id': item['id'],
                                            'output_index': 0, 'content_index': 0, 'delta': text}),
            ('response.output_text.done', {'type': 'response.output_text.done', 'item_id': item['id'],
                                           'output_index': 0, 'content_index': 0, 'text': text}),
            ('response.content_part.done', {'type': 'response.content_part.done', 'item_id': item['id'],
                                            'output_index': 0, 'content_index': 0,
                                            'part': dict(part, text=text)}),
        ]
    events += [
        ('response.output_item.done', {'type': 'response.output_item.done', 'output_index': 0, 'item': item}),
        ('response.completed', {'type': 'response.completed',
                                'response': dict(response, status='completed', output=[item], usage=usage)}),
    ]
    for number, (dummy, data) in enumerate(events):
        data['sequence_number'] = number
    return 'text/event-stream', _sse(events)


def chat_answer(body, call, text):
    cid = 'chatcmpl-%s' % uuid.uuid4().hex[:24]
    model = body.get('model') or 'gpt-stub'
    created = int(time.time())

    def chunk(delta, finish=None, usage=None):
        out = {'id': cid, 'object': 'chat.completion.chunk', 'created': created, 'model': model,
               'choices': [{'index': 0, 'delta': delta, 'finish_reason': finish}]}
        if usage is not None:
            out['usage'] = usage
        return out

    usage = {'prompt_tokens': 10, 'completion_tokens': 5, 'total_tokens': 15}
    if call:
        tool = {'id': 'call_%s' % uuid.uuid4().hex[:20], 'type': 'function',
                'function': {'name': call[0], 'arguments': json.dumps(call[1])}}
        message, finish = {'role': 'assistant', 'content': None, 'tool_calls': [tool]}, 'tool_calls'
        chunks = [chunk({'role': 'assistant', 'content': None}),
                  chunk({'tool_calls': [dict(tool, index=0)]})]
    else:
        message, finish = {'role': 'assistant', 'content': text}, 'stop'
        chunks = [chunk({'role': 'assistant', 'content': ''}), chunk({'content': text})]
    if not body.get('stream'):
        return 'application/json', json.dumps({
            'id': cid, 'object': 'chat.completion', 'created': created, 'model': model,
            'choices': [{'index': 0, 'message': message, 'finish_reason': finish}], 'usage': usage}).encode()
    chunks.append(chunk({}, finish, usage))
    data = ''.join('data: %s\n\n' % json.dumps(c) for c in chunks) + 'data: [DONE]\n\n'
    return 'text/event-stream', data.encode()


ANSWERS = {ANTHROPIC: anthropic_answer, RESPONSES: responses_answer, CHAT: chat_answer}


def error_body(protocol, status, message):
    if protocol == ANTHROPIC:
        return {'type': 'error', 'error': {'type': ERROR_TYPES.get(status, 'api_error'), 'message': message}}
    code = {401: 'invalid_api_key', 429: 'rate_limit_exceeded'}.get(status)
    return {'error': {'message': message, 'type': ERROR_TYPES.get(status, 'server_error'), 'param': None,
                      'code': code}}


DEFAULT_MESSAGES = {401: 'invalid x-api-key', 403: 'this key may not use the model', 429: 'rate limit exceeded',
                    500: 'internal server error', 503: 'overloaded', 529: 'Overloaded'}


# ------------------------------------------------------------------ the server

class Script:
    def __init__(self, turns):
        self.turns = check_turns(list(turns))
        self.cursor = 0

    def next_turn(self):
        if self.cursor < len(self.turns):
            turn = self.turns[self.cursor]
            self.cursor += 1
            return turn, self.cursor - 1
        return DONE, None


class ModelServer:
    """The stand-in: ``start()``, ``url``, ``add_script(key, turns)``, ``requests(key=None)``, ``stop()``."""

    def __init__(self, host='127.0.0.1', port=0, default=None, token=None):
        if not loopback(host):
            raise StubError('the model stand-in listens on loopback addresses only (127.0.0.0/8, ::1), not %r'
                            % host)
        self.host = host
        self.port = port
        self.token = token
        self.lock = threading.Lock()
        self.scripts = {}
        self.default = default
        self.recorded = []
        self.stopping = threading.Event()
        self.httpd = None
        self.thread = None

    # -- control

    def add_script(self, key, turns):
        with self.lock:
            self.scripts[key] = turns if turns == NOTES else Script(turns)

    def set_default(self, turns):
        with self.lock:
            self.default = turns

    def requests(self, key=None, agent_only=False):
        with self.lock:
            out = list(self.recorded)
        if key is not None:
            out = [r for r in out if r['key'] == key]
        if agent_only:
            out = [r for r in out if r['tools']]
        return out

    def reset(self):
        with self.lock:
            self.scripts.clear()
            self.recorded.clear()

    @property
    def url(self):
        return 'http://%s:%d' % (self.host, self.port)

    def start(self):
        stub = self

        class Handler(StubHandler):
            server_stub = stub

        self.httpd = ThreadingHTTPServer((self.host, self.port), Handler)
        self.httpd.daemon_threads = True
        self.port = self.httpd.server_address[1]
        self.thread = threading.Thread(target=self.httpd.serve_forever, name='model-stub', daemon=True)
        self.thread.start()
        return self

    def stop(self):
        self.stopping.set()
        if self.httpd is not None:
            self.httpd.shutdown()
            self.httpd.server_close()
            self.thread.join(10)
            self.httpd = None

    def __enter__(self):
        return self.start() if self.httpd is None else self

    def __exit__(self, *exc):
        self.stop()

    # -- answering

    def choose(self, key, protocol, body):
        """(turn, its index or None, the script's name) for a request; None when the key has no script."""
        tools = tool_names(protocol, body)
        with self.lock:
            script = self.scripts.get(key)
            if script is None and self.default is not None:
                script = self.scripts.setdefault(key, self.default if self.default == NOTES else Script(self.default))
            if script is None:
                return None
            if not tools:
                return {'text': 'Working on it'}, None
            if script == NOTES:
                kind, text = last_turn(protocol, body)
                if kind == 'prompt':
                    return {'shell': "printf '%%s\\n' %s >> %s" % (_quote('- ' + ' '.join((text or '').split())),
                                                                   NOTES_FILE)}, 0
                return DONE, None
            return script.next_turn()


class StubHandler(BaseHTTPRequestHandler):
    protocol_version = 'HTTP/1.1'
    server_stub = None

    def log_message(self, fmt, *args):  # pylint: disable=arguments-differ
        pass

    def _send(self, status, content_type, data, close=False):
        self.send_response(status)
        self.send_header('Content-Type', content_type)
        self.send_header('Content-Length', str(len(data)))
        if close:
            self.send_header('Connection', 'close')
        self.end_headers()
        self.wfile.write(data)

    def _json(self, status, value):
        self._send(status, 'application/json', json.dumps(value).encode())

    def _body(self):
        length = int(self.headers.get('Content-Length') or 0)
        raw = self.rfile.read(length) if length else b''
        try:
            return json.loads(raw.decode('utf-8') or '{}')
        except ValueError:
            return None

    def do_GET(self):  # pylint: disable=invalid-name
        path = self.path.split('?', 1)[0]
        if path.startswith(CONTROL_PREFIX):
            return self._control(path, None)
        if path.rstrip('/').endswith('/models'):
            return self._json(200, {'object': 'list', 'data': [{'id': 'stub-model', 'object': 'model',
                                                                'created': 0, 'owned_by': 'ephemera'}]})
        return self._json(404, {'error': {'message': 'no such endpoint: %s' % path}})

    def do_POST(self):  # pylint: disable=invalid-name
        stub = self.server_stub
        path = self.path.split('?', 1)[0]
        body = self._body()
        if path.startswith(CONTROL_PREFIX):
            return self._control(path, body)
        protocol = None
        for suffix, name in PROTOCOLS.items():
            if path.endswith(suffix):
                protocol = name
        if protocol is None:
            return self._json(404, {'error': {'message': 'no such endpoint: %s' % path}})
        if not isinstance(body, dict):
            return self._json(400, error_body(protocol, 400, 'the body is not a JSON object'))
        key = api_key({k.lower(): v for k, v in self.headers.items()})
        record = {'at': time.time(), 'method': 'POST', 'path': self.path, 'protocol': protocol, 'key': key,
                  'headers': dict(self.headers.items()), 'body': body, 'tools': tool_names(protocol, body)}
        chosen = stub.choose(key, protocol, body)
        if chosen is None:
            record['answer'] = 'unknown key'
            with stub.lock:
                stub.recorded.append(record)
            return self._json(401, error_body(protocol, 401, 'invalid x-api-key' if protocol == ANTHROPIC
                                              else 'Incorrect API key provided'))
        turn, index = chosen
        record['turn'] = index
        record['answer'] = [k for k in ACTIONS if k in turn][0]
        with stub.lock:
            stub.recorded.append(record)
        if 'error' in turn:
            status = int(turn['error'])
            message = turn.get('message') or DEFAULT_MESSAGES.get(status, 'error')
            data = json.dumps(error_body(protocol, status, message)).encode()
            self.send_response(status)
            self.send_header('Content-Type', 'application/json')
            self.send_header('Content-Length', str(len(data)))
            if status == 429:
                self.send_header('Retry-After', '0')
            self.end_headers()
            self.wfile.write(data)
            return None
        if turn.get('delay'):
            stub.stopping.wait(float(turn['delay']))
        if 'hang' in turn:
            stub.stopping.wait(turn['hang'])
            self.close_connection = True
            return None
        cwd = working_directory(body)
        kind, brief = last_turn(protocol, body)
        call = tool_call(protocol, record['tools'], turn, cwd, brief if kind == 'prompt' else None)
        content_type, data = ANSWERS[protocol](body, call, turn.get('text', 'Done.'))
        if 'drop' in turn:
            self.send_response(200)
            self.send_header('Content-Type', content_type)
            self.send_header('Content-Length', str(len(data)))
            self.end_headers()
            self.wfile.write(data[:len(data) // 3])
            self.wfile.flush()
            self.connection.shutdown(socket.SHUT_RDWR)
            self.close_connection = True
            return None
        return self._send(200, content_type, data)

    def _control(self, path, body):
        stub = self.server_stub
        if stub.token is not None and self.headers.get('X-Stub-Token') != stub.token:
            return self._json(403, {'error': 'the control API wants the X-Stub-Token header'})
        name = path[len(CONTROL_PREFIX):].strip('/')
        try:
            if name == 'scripts' and isinstance(body, dict):
                stub.add_script(body['key'], body['turns'])
                return self._json(200, {'ok': True})
            if name == 'default' and isinstance(body, dict):
                stub.set_default(body['turns'])
                return self._json(200, {'ok': True})
            if name == 'requests':
                query = self.path.split('?', 1)[1] if '?' in self.path else ''
                params = dict(p.split('=', 1) for p in query.split('&') if '=' in p)
                return self._json(200, stub.requests(params.get('key')))
            if name == 'reset':
                stub.reset()
                return self._json(200, {'ok': True})
        except (KeyError, StubError) as err:
            return self._json(400, {'error': str(err)})
        return self._json(404, {'error': 'unknown control request %s' % path})
