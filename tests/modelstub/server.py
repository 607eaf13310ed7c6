"""The stand-in model endpoint: one threaded HTTP server on loopback that answers three wire protocols from
scripts chosen by the API key of each request, records every request, and has a small control API.

Routes:
    POST /v1/messages            Anthropic Messages (claude-code; also with ?beta=true)
    POST /v1/responses           OpenAI Responses (codex)
    POST /v1/chat/completions    OpenAI-compatible chat completions (opencode's openai-compatible provider)
    GET  /v1/models              the configured model names (Anthropic's shape when anthropic-version is sent)
    /_stub/...                   control (see control()), guarded by a token in the X-Stub-Token header
Anything else is answered 404 and recorded, so a test can see what a CLI asked for.
"""

import copy
import hmac
import ipaddress
import json
import secrets
import socket
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from tests.modelstub import protocols
from tests.modelstub.script import Script, ScriptError, kind_of

DEFAULT = '*default*'
TOKEN_HEADER = 'X-Stub-Token'
SIDE_TEXT = 'Stub session'
CUT_TEXT = 'This answer is cut off in the middle of a sentence and never'


class StubError(Exception):
    """The stub cannot do what it was asked."""


def check_loopback(host):
    """Refuse any address outside 127.0.0.0/8 (``localhost`` is 127.0.0.1); returns the address to bind."""
    if host == 'localhost':
        return '127.0.0.1'
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        raise StubError('modelstub binds a literal 127.0.0.0/8 address, not %r' % (host,))
    if address.version != 4 or address not in ipaddress.ip_network('127.0.0.0/8'):
        raise StubError('modelstub binds only 127.0.0.0/8, not %s' % host)
    return str(address)


def key_of(headers):
    """The API key a request sent: x-api-key, else an Authorization bearer token; None if neither."""
    key = headers.get('x-api-key')
    if key:
        return key.strip()
    auth = headers.get('authorization') or ''
    if auth.lower().startswith('bearer '):
        return auth[7:].strip() or None
    return None


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False
    allow_reuse_address = True

    def __init__(self, address, stub):
        self.stub = stub
        self.connections = set()
        self.connections_lock = threading.Lock()
        super().__init__(address, _Handler)

    def process_request_thread(self, request, client_address):
        with self.connections_lock:
            self.connections.add(request)
        try:
            super().process_request_thread(request, client_address)
        finally:
            with self.connections_lock:
                self.connections.discard(request)


class _Gone(Exception):
    """The client closed the connection while we answered."""


class _Handler(BaseHTTPRequestHandler):
    protocol_version = 'HTTP/1.1'
    server_version = 'modelstub/1'
    sys_version = ''

    def log_message(self, *args):  # quiet: the record is the log
        pass

    def do_GET(self):
        self._dispatch()

    def do_POST(self):
        self._dispatch()

    def do_PUT(self):
        self._dispatch()

    def do_DELETE(self):
        self._dispatch()

    def _read_body(self):
        if 'chunked' in (self.headers.get('Transfer-Encoding') or '').lower():
            data = b''
            while True:
                size = int(self.rfile.readline().split(b';')[0].strip() or b'0', 16)
                if size == 0:
                    while self.rfile.readline() not in (b'\r\n', b'\n', b''):
                        pass
                    return data
                data += self.rfile.read(size)
                self.rfile.readline()
        length = int(self.headers.get('Content-Length') or 0)
        return self.rfile.read(length) if length else b''

    def _dispatch(self):
        stub = self.server.stub
        raw = self._read_body()
        path, _sep, query = self.path.partition('?')
        try:
            if path.startswith('/_stub/'):
                stub.control(self, path, query, raw)
            else:
                stub.answer(self, path, query, raw)
        except _Gone:
            self.close_connection = True

    # --- writing -------------------------------------------------------------------------------------------
    def send(self, status, body, headers=None):
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        try:
            self.send_response(status)
            self.send_header('Content-Type', 'application/json')
            self.send_header('Content-Length', str(len(data)))
            for name, value in (headers or {}).items():
                self.send_header(name, str(value))
            self.end_headers()
            self.wfile.write(data)
        except OSError:
            raise _Gone()

    def send_partial(self, status, data):
        """Promise the whole JSON body (Content-Length) and send only its first half."""
        try:
            self.send_response(status)
            self.send_header('Content-Type', 'application/json')
            self.send_header('Content-Length', str(len(data)))
            self.end_headers()
            self.wfile.write(data[:len(data) // 2])
            self.wfile.flush()
        except OSError:
            raise _Gone()

    def start_stream(self, headers=None):
        try:
            self.send_response(200)
            self.send_header('Content-Type', 'text/event-stream; charset=utf-8')
            self.send_header('Cache-Control', 'no-cache')
            self.send_header('Transfer-Encoding', 'chunked')
            for name, value in (headers or {}).items():
                self.send_header(name, str(value))
            self.end_headers()
        except OSError:
            raise _Gone()

    def chunk(self, data):
        try:
            self.wfile.write(b'%x\r\n%s\r\n' % (len(data), data))
            self.wfile.flush()
        except OSError:
            raise _Gone()

    def end_stream(self):
        try:
            self.wfile.write(b'0\r\n\r\n')
            self.wfile.flush()
        except OSError:
            raise _Gone()

    def cut(self):
        """Close the connection now, whatever was promised: the client sees the answer end mid-way."""
        self.close_connection = True
        try:
            self.wfile.flush()
            self.connection.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass


class ModelStub:
    """A scripted model endpoint on 127.0.0.0/8.

    Use as a context manager or call start()/stop(). ``add_script(key, turns)`` registers what a request sent
    with that key gets; ``requests()`` lists what was received.
    """

    def __init__(self, host='127.0.0.1', port=0, token=None, models=('stub-model',), side_text=SIDE_TEXT):
        self.host = check_loopback(host)
        self.requested_port = int(port or 0)
        self.token = token or secrets.token_hex(16)
        self.models = list(models)
        self.side_text = side_text
        self._scripts = {}
        self._records = []
        self._lock = threading.Condition()
        self._stopping = threading.Event()
        self._server = None
        self._thread = None

    # --- life ----------------------------------------------------------------------------------------------
    def start(self):
        if self._server is not None:
            return self
        self._stopping.clear()
        self._server = _Server((self.host, self.requested_port), self)
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={'poll_interval': 0.1},
                                        name='modelstub', daemon=True)
        self._thread.start()
        return self

    def stop(self):
        """Stop serving: hanging answers end, open connections are closed."""
        server, self._server = self._server, None
        if server is None:
            return
        self._stopping.set()
        server.shutdown()
        with server.connections_lock:
            open_connections = list(server.connections)
        for connection in open_connections:
            try:
                connection.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        server.server_close()
        self._thread.join(5)

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()

    @property
    def port(self):
        return self._server.server_address[1] if self._server else None

    @property
    def url(self):
        """The base URL without /v1 (claude's ANTHROPIC_BASE_URL); codex and opencode want url + '/v1'."""
        return 'http://%s:%s' % (self.host, self.port)

    @property
    def running(self):
        return self._server is not None

    def wait(self, seconds):
        """Sleep up to ``seconds`` (None: until stop); True if the server is stopping."""
        return self._stopping.wait(seconds)

    # --- scripts -------------------------------------------------------------------------------------------
    def add_script(self, key, script):
        """Register a script (a Script, a list of turns, or a dict with "turns"/"then") under an API key."""
        if not key or not isinstance(key, str):
            raise StubError('a script is registered under a non-empty API key')
        script = Script.of(script)
        with self._lock:
            self._scripts[key] = script
        return script

    def set_default(self, script):
        """The script for keys that have none of their own (None: such keys get a 401)."""
        with self._lock:
            if script is None:
                self._scripts.pop(DEFAULT, None)
            else:
                self._scripts[DEFAULT] = Script.of(script)

    def remove_script(self, key):
        with self._lock:
            return self._scripts.pop(key, None) is not None

    def scripts(self):
        with self._lock:
            return dict((k, s.as_dict()) for k, s in self._scripts.items())

    def _script_for(self, key):
        with self._lock:
            if key is not None and key in self._scripts and key != DEFAULT:
                return key, self._scripts[key]
            if DEFAULT in self._scripts:
                return DEFAULT, self._scripts[DEFAULT]
            return None, None

    # --- records -------------------------------------------------------------------------------------------
    def requests(self, key=None, side=None, since=0, path=None):
        """Copies of the recorded requests (optionally only those with this key, side or not, id > since)."""
        with self._lock:
            out = [r for r in self._records if r['id'] > since]
        if key is not None:
            out = [r for r in out if r['key'] == key]
        if side is not None:
            out = [r for r in out if r.get('side') == side]
        if path is not None:
            out = [r for r in out if r['path'] == path]
        return copy.deepcopy(out)

    def wait_for(self, count=1, timeout=10.0, **filters):
        """The recorded requests matching ``filters`` once there are at least ``count``; raises after timeout."""
        deadline = time.monotonic() + timeout
        while True:
            found = self.requests(**filters)
            if len(found) >= count:
                return found
            left = deadline - time.monotonic()
            if left <= 0:
                raise StubError('%d request(s) matching %r after %.1fs, wanted %d'
                                % (len(found), filters, timeout, count))
            with self._lock:
                self._lock.wait(min(left, 0.2))

    def reset(self, scripts=False):
        """Forget the recorded requests and rewind every script (or drop the scripts too)."""
        with self._lock:
            self._records = []
            if scripts:
                self._scripts = {}
            for script in self._scripts.values():
                script.reset()

    def _record(self, handler, path, query, raw, body, protocol, key):
        record = {
            'id': None, 'time': time.time(), 'method': handler.command, 'path': path,
            'query': dict(urllib.parse.parse_qsl(query, keep_blank_values=True)),
            'headers': dict((k.lower(), v) for k, v in handler.headers.items()),
            'body': body, 'protocol': protocol, 'key': key, 'script': None, 'side': None, 'turn': None,
            'actions': None, 'stream': None, 'cwd': None, 'status': None, 'outcome': None, 'problem': None,
        }
        if body is None and raw:
            record['raw'] = raw[:4096].decode('utf-8', 'replace')
        with self._lock:
            record['id'] = len(self._records) + 1
            self._records.append(record)
            self._lock.notify_all()
        return record

    def _update(self, record, **fields):
        with self._lock:
            record.update(fields)
            self._lock.notify_all()

    # --- answering -----------------------------------------------------------------------------------------
    def answer(self, handler, path, query, raw):
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            body = None
        name = protocols.ROUTES.get(path)
        if path in ('/v1/models', '/models') and handler.command == 'GET':
            name = 'models'
        key = key_of(dict((k.lower(), v) for k, v in handler.headers.items()))
        record = self._record(handler, path, query, raw, body, name, key)
        anthropic_shaped = name == 'anthropic' or 'anthropic-version' in record['headers']
        shape = protocols.PROTOCOLS['anthropic' if anthropic_shaped else 'responses']
        if name is None or (name != 'models' and handler.command != 'POST'):
            self._update(record, status=404, outcome='unknown path')
            return handler.send(404, shape.error(404, 'modelstub: no route %s %s' % (handler.command, path)))
        label, script = self._script_for(key)
        self._update(record, script=label)
        if script is None:
            self._update(record, status=401, outcome='unknown key')
            message = 'modelstub: no script for this API key' if key else 'modelstub: no API key sent'
            return handler.send(401, shape.error(401, message), self._request_id(anthropic_shaped))
        if name == 'models':
            self._update(record, status=200, outcome='answered')
            return handler.send(200, shape.models(self.models))
        protocol = protocols.PROTOCOLS[name]
        tools = protocol.tools(body)
        stream = protocol.is_stream(body)
        cwd = protocols.find_cwd(body) or script.cwd
        self._update(record, stream=stream, cwd=cwd, side=not tools)
        if not tools:
            return self._serve(handler, record, protocol, body, stream, [{'text': self.side_text}], tools, cwd)
        index, actions = script.next_turn()
        self._update(record, turn=index, actions=actions)
        return self._serve(handler, record, protocol, body, stream, actions, tools, cwd)

    @staticmethod
    def _request_id(anthropic_shaped):
        return {'request-id' if anthropic_shaped else 'x-request-id': protocols.new_id('req')}

    def _serve(self, handler, record, protocol, body, stream, actions, tools, cwd):
        first = actions[0]
        kind = kind_of(first)
        anthropic_shaped = protocol.name == 'anthropic'
        if first.get('delay') and self.wait(float(first['delay'])):
            handler.cut()
            return self._update(record, outcome='server stopped')
        if kind == 'error':
            status = first['error']
            headers = self._request_id(anthropic_shaped)
            if first.get('retry_after') is not None:
                headers['retry-after'] = first['retry_after']
            headers.update(first.get('headers') or {})
            self._update(record, status=status, outcome='error')
            return handler.send(status, protocol.error(status, first.get('message'), first.get('type')), headers)
        if kind in ('drop', 'hang'):
            after = int(first.get('after', 2 if kind == 'drop' else 0))
            texts, calls = [first.get('text') or CUT_TEXT], []
            if after > 0:
                if stream:
                    events = protocol.events(body, texts, calls)
                    handler.start_stream(self._request_id(anthropic_shaped))
                    for event in events[:min(after, len(events) - 1)]:
                        handler.chunk(event)
                else:
                    handler.send_partial(200, json.dumps(protocol.json_body(body, texts, calls)).encode())
                self._update(record, status=200)
            if kind == 'hang':
                self._update(record, outcome='hanging')
                stopped = self.wait(first['hang'])
                self._update(record, outcome='server stopped' if stopped else 'hung')
            else:
                self._update(record, outcome='dropped')
            return handler.cut()
        try:
            texts, calls = protocols.plan(actions, tools, cwd)
        except protocols.PlanError as err:
            texts, calls = ['(modelstub cannot play this turn: %s)' % err], []
            self._update(record, problem=str(err))
        answer = {'texts': texts, 'calls': [{'name': c.name, 'input': c.arguments} for c in calls]}
        self._update(record, answer=answer)
        if not stream:
            self._update(record, status=200, outcome='answered')
            return handler.send(200, protocol.json_body(body, texts, calls), self._request_id(anthropic_shaped))
        events = protocol.events(body, texts, calls)
        handler.start_stream(self._request_id(anthropic_shaped))
        self._update(record, status=200, outcome='streaming')
        pace = float(first.get('pace') or 0)
        for event in events:
            if pace and self.wait(pace):
                self._update(record, outcome='server stopped')
                return handler.cut()
            handler.chunk(event)
        handler.end_stream()
        self._update(record, outcome='answered')

    # --- control -------------------------------------------------------------------------------------------
    def control(self, handler, path, query, raw):
        """The control API, for a stub that runs in another process (client.StubClient speaks it).

        GET    /_stub/health                      {"ok": true, "url": ..., "requests": n}
        GET    /_stub/scripts                     {key: script with its cursor}
        PUT    /_stub/scripts/<key>               body: a script; registers it (key URL-quoted)
        DELETE /_stub/scripts/<key>
        PUT    /_stub/default                     body: a script, or null for none
        GET    /_stub/requests?key=&side=&since=&path=   {"requests": [...]}
        POST   /_stub/reset                       body: {"scripts": false}; forget requests, rewind scripts
        POST   /_stub/stop                        stop serving (the serve command then exits)
        """
        sent = handler.headers.get(TOKEN_HEADER) or ''
        if not hmac.compare_digest(sent.encode(), self.token.encode()):
            return handler.send(403, {'error': 'modelstub control: wrong or missing %s' % TOKEN_HEADER})
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            return handler.send(400, {'error': 'the body is not JSON'})
        method = handler.command
        params = dict(urllib.parse.parse_qsl(query))
        try:
            if path == '/_stub/health' and method == 'GET':
                return handler.send(200, {'ok': True, 'url': self.url, 'requests': len(self._records)})
            if path == '/_stub/scripts' and method == 'GET':
                return handler.send(200, self.scripts())
            if path.startswith('/_stub/scripts/') and method in ('PUT', 'POST'):
                key = urllib.parse.unquote(path[len('/_stub/scripts/'):])
                self.add_script(key, body)
                return handler.send(200, {'ok': True, 'key': key})
            if path.startswith('/_stub/scripts/') and method == 'DELETE':
                key = urllib.parse.unquote(path[len('/_stub/scripts/'):])
                return handler.send(200 if self.remove_script(key) else 404, {'key': key})
            if path == '/_stub/default' and method in ('PUT', 'POST'):
                self.set_default(body)
                return handler.send(200, {'ok': True})
            if path == '/_stub/requests' and method == 'GET':
                side = {'true': True, 'false': False}.get(params.get('side'))
                found = self.requests(key=params.get('key'), side=side, since=int(params.get('since') or 0),
                                      path=params.get('path'))
                return handler.send(200, {'requests': found})
            if path == '/_stub/reset' and method == 'POST':
                self.reset(scripts=bool((body or {}).get('scripts')))
                return handler.send(200, {'ok': True})
            if path == '/_stub/stop' and method == 'POST':
                handler.send(200, {'ok': True})
                threading.Thread(target=self.stop, daemon=True).start()
                return None
        except (ScriptError, StubError) as err:
            return handler.send(400, {'error': str(err)})
        return handler.send(404, {'error': 'no control route %s %s' % (method, path)})
