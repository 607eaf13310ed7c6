"""A lossy HTTPS proxy in front of the API: the faults fakepve cannot make itself.

Rules match a method and a path pattern and act on a number of requests:
  drop-response  forward the request, then cut the connection: it took effect, the client never hears
  delay          forward the request, then hold the response back for `seconds`
  reset          reset the connection before forwarding: nothing happened
  error          answer with a Proxmox VE style error (status, message) without forwarding
"""

import asyncio
import fnmatch
import itertools
import logging
import socket
import struct
import time

import aiohttp
import yarl
from aiohttp import web

from .config import ClusterError

LOG = logging.getLogger('localpve.proxy')
ACTIONS = ('drop-response', 'delay', 'reset', 'error')
METHODS = ('GET', 'POST', 'PUT', 'DELETE', '*')
PREFIXES = ('/api2/json', '/api2/extjs')
# Not forwarded either way: connection handling, and what the proxy recomputes.
HOP_HEADERS = frozenset(('connection', 'keep-alive', 'transfer-encoding', 'content-length', 'host', 'upgrade',
                         'proxy-connection', 'te', 'trailer', 'accept-encoding', 'content-encoding', 'date',
                         'server'))


def api_path(path):
    """A path without its /api2/json or /api2/extjs prefix: rules are written against the API's own paths."""
    for prefix in PREFIXES:
        if path == prefix or path.startswith(prefix + '/'):
            return path[len(prefix):] or '/'
    return path


def _count(value, what, minimum, error=ClusterError):
    try:
        number = int(value)
    except (TypeError, ValueError):
        raise error('malformed fault rule: {0} must be a whole number, not {1!r}'.format(what, value)) from None
    if number < minimum:
        raise error('malformed fault rule: {0} must be at least {1}, not {2}'.format(what, minimum, number))
    return number


class ProxyRule:
    """One rule; times None acts on every matching request, skip lets that many matching ones through first."""

    def __init__(self, rule_id, action, method, path, times=1, skip=0, seconds=None, status=None, message=None,
                 errors=None):
        if action not in ACTIONS:
            raise ClusterError('malformed fault rule: action must be one of {0}, not {1!r}'.format(
                ', '.join(ACTIONS), action))
        method = str(method or '').upper()
        if method not in METHODS:
            raise ClusterError('malformed fault rule: method must be one of {0}, not {1!r}'.format(
                ', '.join(METHODS), method))
        if not isinstance(path, str) or not path.startswith('/'):
            raise ClusterError('malformed fault rule: the path pattern must start with /, e.g. '
                               '/nodes/*/lxc/*/clone (got {0!r})'.format(path))
        self.id = rule_id
        self.action = action
        self.method = method
        self.path = api_path(path)
        self.times = None if times is None else _count(times, 'times', 1)
        self.skip = _count(skip, 'skip', 0)
        self.seconds = None
        if action == 'delay':
            try:
                self.seconds = float(seconds)
            except (TypeError, ValueError):
                raise ClusterError('malformed fault rule: a delay needs seconds (a number), not {0!r}'.format(
                    seconds)) from None
            if self.seconds < 0:
                raise ClusterError('malformed fault rule: the delay cannot be negative')
        elif seconds is not None:
            raise ClusterError('malformed fault rule: only a delay takes seconds')
        self.status, self.message, self.errors = None, None, None
        if action == 'error':
            self.status = _count(status, 'status', 400)
            if self.status > 599:
                raise ClusterError('malformed fault rule: status must be an HTTP error status (400-599)')
            if not message:
                raise ClusterError('malformed fault rule: an error needs the message PVE would send')
            if errors is not None and not isinstance(errors, dict):
                raise ClusterError('malformed fault rule: errors must map parameter names to messages')
            self.message, self.errors = str(message), errors
        elif status is not None or message is not None or errors is not None:
            raise ClusterError('malformed fault rule: only an error takes status, message and errors')
        self.seen = 0
        self.hits = []

    @property
    def spent(self):
        return self.times is not None and len(self.hits) >= self.times

    def take(self, method, path):
        """True if the rule acts on this request (and counts it)."""
        if self.spent or self.method not in ('*', method) or not fnmatch.fnmatchcase(api_path(path), self.path):
            return False
        self.seen += 1
        if self.seen <= self.skip:
            return False
        self.hits.append({'method': method, 'path': path, 'time': time.time()})
        return True

    def view(self):
        fields = ('id', 'action', 'method', 'path', 'times', 'skip', 'seconds', 'status', 'message', 'errors', 'seen',
                  'hits')
        out = {k: getattr(self, k) for k in fields}
        out['spent'] = self.spent
        return out


def _pve_error(status, message, errors=None):
    """An error answer as PVE's API server writes it."""
    body = {'data': None, 'message': message + '\n'}
    if errors:
        body['errors'] = errors
    return web.json_response(body, status=status, reason=message.splitlines()[0][:200])


def _reset(request):
    """Cut the client's connection with a TCP reset; aiohttp then has nothing to write to."""
    sock = request.transport.get_extra_info('socket') if request.transport else None
    if sock is not None:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack('ii', 1, 0))
    if request.transport is not None:
        request.transport.abort()
    return web.Response(status=204)


class ProxyServer:
    """A proxy on a loopback address in front of ``upstream`` with its fault rules (made by ``rule_class``); HTTPS
    with ``server_ssl``, to an upstream checked with ``client_ssl``. A subclass handles the requests (_handle)."""

    rule_class = None
    error = ClusterError
    log = LOG

    def __init__(self, upstream, host, port, server_ssl=None, client_ssl=None):
        self.upstream = upstream
        self.host = host
        self.port = port
        self.server_ssl = server_ssl
        self.client_ssl = client_ssl
        self.rules = []
        self._ids = itertools.count(1)
        self.runner = None
        self.session = None
        self.closing = None

    @property
    def url(self):
        return '{0}://{1}:{2}'.format('https' if self.server_ssl else 'http', self.host, self.port)

    async def start(self):
        self.closing = asyncio.Event()
        app = web.Application(client_max_size=64 * 1024 ** 2)
        app.router.add_route('*', '/{tail:.*}', self._handle)
        self.runner = web.AppRunner(app, access_log=None, handle_signals=False)
        await self.runner.setup()
        await web.TCPSite(self.runner, self.host, self.port, ssl_context=self.server_ssl).start()
        self.port = self.runner.addresses[0][1]
        connector = {'connector': aiohttp.TCPConnector(ssl=self.client_ssl)} if self.client_ssl else {}
        self.session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=None), auto_decompress=False,
                                             **connector)

    async def _handle(self, request):
        raise NotImplementedError

    async def stop(self):
        if self.closing is not None:
            # Responses held back by delay rules are cut, not waited for.
            self.closing.set()
        if self.session is not None:
            await self.session.close()
            self.session = None
        if self.runner is not None:
            await self.runner.cleanup()
            self.runner = None

    def add(self, action, *match, **options):
        """Add a rule of ``action`` for requests that ``match`` (a method and path, an operation); its view."""
        rule = self.rule_class(next(self._ids), action, *match, **options)
        self.rules.append(rule)
        self.log.info('proxy rule added: %s', rule.view())
        return rule.view()

    def remove(self, rule_id):
        before = len(self.rules)
        self.rules = [r for r in self.rules if r.id != int(rule_id)]
        if len(self.rules) == before:
            raise self.error('no proxy rule {0}'.format(rule_id))

    def clear(self):
        self.rules = []

    def view(self):
        return [r.view() for r in self.rules]


class FaultProxy(ProxyServer):
    """The proxy: listens with the API's certificate, forwards to the API with the cluster's CA."""

    rule_class = ProxyRule

    async def _handle(self, request):
        body = await request.read()
        rule = next((r for r in self.rules if r.take(request.method, request.path)), None)
        if rule is not None:
            LOG.info('proxy rule %s (%s) hits %s %s', rule.id, rule.action, request.method, request.path)
            if rule.action == 'reset':
                return _reset(request)
            if rule.action == 'error':
                return _pve_error(rule.status, rule.message, rule.errors)
        try:
            status, reason, headers, payload = await self._forward(request, body)
        except (aiohttp.ClientError, asyncio.TimeoutError, ConnectionError):
            # The API dropped the connection (fakepve's flaky network): so does the proxy, transparently.
            return _reset(request)
        if rule is not None and rule.action == 'drop-response':
            return _reset(request)
        if rule is not None and rule.action == 'delay':
            try:
                await asyncio.wait_for(self.closing.wait(), rule.seconds)
                return _reset(request)
            except asyncio.TimeoutError:
                pass
        return web.Response(status=status, reason=reason, headers=headers, body=payload)

    async def _forward(self, request, body):
        headers = {k: v for k, v in request.headers.items() if k.lower() not in HOP_HEADERS}
        url = yarl.URL(self.upstream + request.raw_path, encoded=True)
        async with self.session.request(request.method, url, headers=headers, data=body or None,
                                        allow_redirects=False) as resp:
            payload = await resp.read()
            out = [(k, v) for k, v in resp.headers.items() if k.lower() not in HOP_HEADERS]
            return resp.status, resp.reason, out, payload
