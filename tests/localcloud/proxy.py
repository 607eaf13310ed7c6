"""The fault proxy: the EC2 endpoint the collection talks to, in front of moto.

It forwards EC2 Query API requests to moto and
- shows every instance as the fleet does (pending, stopping, shutting-down on the way; the guest's loopback
  addresses in the documented address fields);
- answers a RunInstances whose ClientToken it has seen with the instance(s) of that token, as EC2 does (moto
  would launch another), and refuses one with other parameters (IdempotentParameterMismatch);
- hides a new instance id while the fleet says it is not visible yet (InvalidInstanceID.NotFound when named,
  absent from filtered listings);
- shows an instance launched without a ClientToken with an empty clientToken, as EC2 does (moto shows a
  placeholder; the client-token filter moto lacks is added to it, fleet.teach_moto); a paged listing with that
  filter is cut into pages first and filtered page by page, so that its pages may be short or empty, as EC2's
  filtered pages may be;
- answers GetConsoleOutput (moto's is a fixed sample) with the console of the instance: once its guest's sshd
  serves, the host key block cloud-init prints, with that sshd's key (fleet.console_output);
- applies its rules, which match an operation (the Action, a glob) and, with `match`, only requests with a field
  value matching that glob (an instance id, a ClientToken), and act on `times` requests after letting `skip`
  through:
    drop-response  forward, then cut the connection: it took effect, the client never hears
    reset          cut the connection before forwarding: nothing happened
    delay          forward, then hold the answer back `seconds`
    error          answer an EC2 error (code, message, status) without forwarding
    throttle       error RequestLimitExceeded, HTTP 503
    pages          DescribeInstances in pages of `size` reservations; `repeat_at` page N answers the token it was
                   asked with again, `fail_at` page N fails with an error, `endless` never ends (empty pages
                   with new tokens)
    log            record the request (its hits) and let the other rules act on it as if it were not there
"""

import asyncio
import fnmatch
import hashlib
import itertools
import logging
import re
import time

import aiohttp
from aiohttp import web

from tests.localpve.proxy import HOP_HEADERS, ProxyServer, _count as pve_count, _reset

from . import ec2xml
from .config import CloudError
from .fleet import moto_instances

LOG = logging.getLogger('localcloud.proxy')
ACTIONS = ('drop-response', 'reset', 'delay', 'error', 'throttle', 'pages', 'log')
INSTANCE_ANSWERS = ('RunInstances', 'DescribeInstances', 'StartInstances', 'StopInstances', 'TerminateInstances',
                    'DescribeInstanceStatus')
CREDENTIAL = re.compile(r'Credential=([^/,\s]+)/\d{8}/([^/]+)/')
TOKEN_PREFIX = 'lcp.'
XML = 'text/xml;charset=UTF-8'
# Not part of what a repeated RunInstances must match.
VOLATILE = ('ClientToken', 'Version')
# Paged listings whose later pages are still served.
MAX_LISTINGS = 50


def _count(value, what, minimum):
    return pve_count(value, what, minimum, CloudError)


class ProxyRule:
    """One rule; times None acts on every matching request, skip lets that many matching ones through first."""

    def __init__(self, rule_id, action, operation, times=1, skip=0, seconds=None, code=None, message=None,
                 status=None, size=None, repeat_at=None, fail_at=None, endless=False, match=None):
        if action not in ACTIONS:
            raise CloudError('malformed fault rule: action must be one of {0}, not {1!r}'.format(
                ', '.join(ACTIONS), action))
        if not isinstance(operation, str) or not re.match(r'^[A-Za-z*?\[\]]+$', operation):
            raise CloudError('malformed fault rule: the operation is an EC2 Action name or a glob, e.g. RunInstances '
                             'or Describe* (got {0!r})'.format(operation))
        self.id = rule_id
        self.action = action
        self.operation = operation
        self.times = None if times is None else _count(times, 'times', 1)
        self.skip = _count(skip, 'skip', 0)
        self.seconds = None
        if action == 'delay':
            try:
                self.seconds = float(seconds)
            except (TypeError, ValueError):
                raise CloudError('malformed fault rule: a delay needs seconds (a number), not {0!r}'.format(
                    seconds)) from None
            if self.seconds < 0:
                raise CloudError('malformed fault rule: the delay cannot be negative')
        elif seconds is not None:
            raise CloudError('malformed fault rule: only a delay takes seconds')
        self.code, self.message, self.status = code, message, status
        if action == 'throttle':
            self.code = code or 'RequestLimitExceeded'
            self.message = message or 'Request limit exceeded.'
            self.status = _count(status or 503, 'status', 400)
        elif action == 'error':
            if not code or not message:
                raise CloudError('malformed fault rule: an error needs the code and the message EC2 would send, e.g. '
                                 '--code InsufficientInstanceCapacity --message "..."')
            self.status = _count(status or 400, 'status', 400)
        elif action == 'pages':
            if operation != 'DescribeInstances':
                raise CloudError('malformed fault rule: pages acts on DescribeInstances only')
            self.code = code or 'InternalError'
            self.message = message or 'An internal error has occurred'
            self.status = _count(status or 500, 'status', 400)
        elif code is not None or message is not None or status is not None:
            raise CloudError('malformed fault rule: only error, throttle and pages take code, message and status')
        if self.status is not None and self.status > 599:
            raise CloudError('malformed fault rule: status must be an HTTP error status (400-599)')
        self.size = self.repeat_at = self.fail_at = None
        self.endless = bool(endless)
        if action == 'pages':
            self.size = _count(size or 1, 'size', 1)
            self.repeat_at = None if repeat_at is None else _count(repeat_at, 'repeat_at', 2)
            self.fail_at = None if fail_at is None else _count(fail_at, 'fail_at', 2)
        elif size is not None or repeat_at is not None or fail_at is not None or endless:
            raise CloudError('malformed fault rule: only pages takes size, repeat_at, fail_at and endless')
        if match is not None and (not isinstance(match, str) or not match):
            raise CloudError('malformed fault rule: match is a glob on the request\'s field values, e.g. i-0abc* or '
                             'ephemera-w1-*')
        self.match = match
        self.seen = 0
        self.hits = []

    @property
    def spent(self):
        return self.times is not None and len(self.hits) >= self.times

    def take(self, operation, fields=None):
        """True if the rule acts on this request (and counts it). A hit records the operation, the instance ids the
        request names and a RunInstances' ClientToken."""
        if self.spent or not fnmatch.fnmatchcase(operation, self.operation):
            return False
        fields = fields or {}
        if self.match and not any(fnmatch.fnmatchcase(str(v), self.match) for v in fields.values()):
            return False
        self.seen += 1
        if self.seen <= self.skip:
            return False
        self.hits.append({'operation': operation, 'time': time.time(), 'instances': ec2xml.named_instances(fields),
                          'client_token': fields.get('ClientToken')})
        return True

    def view(self):
        fields = ('id', 'action', 'operation', 'times', 'skip', 'seconds', 'code', 'message', 'status', 'size',
                  'repeat_at', 'fail_at', 'endless', 'match', 'seen', 'hits')
        out = {k: getattr(self, k) for k in fields}
        out['spent'] = self.spent
        return out


def _error(code, message, status):
    return web.Response(status=status, body=ec2xml.error_body(code, message), content_type='text/xml',
                        charset='UTF-8')


def _fingerprint(fields):
    kept = sorted((k, v) for k, v in fields.items() if k not in VOLATILE)
    return hashlib.sha256(repr(kept).encode()).hexdigest()


class FaultProxy(ProxyServer):
    """The endpoint: plain HTTP on a loopback address, forwarding to moto (the try-out cluster's proxy server)."""

    rule_class = ProxyRule
    error = CloudError
    log = LOG

    def __init__(self, upstream, host, port, fleet):
        super().__init__(upstream, host, port)
        self.fleet = fleet
        self._listings = itertools.count(1)
        # listing id -> (the pages rule serving it, the whole answer of its first page: later pages are cut from it).
        self.listings = {}
        # ClientToken -> fingerprint of the RunInstances that used it first.
        self.tokens = {}
        self.requests = 0

    # ------------------------------------------------------------ requests

    async def _handle(self, request):
        self.requests += 1
        body = await request.read()
        fields = ec2xml.parse_query(body if request.method == 'POST' else b'', request.query_string)
        operation = fields.get('Action', '')
        if not operation and request.headers.get('X-Amz-Target'):
            # JSON protocols (SSM): the operation is the last part of the target.
            operation = request.headers['X-Amz-Target'].rsplit('.', 1)[-1]
            fields = {}
        token = fields.get('NextToken', '')
        if operation == 'DescribeInstances' and token.startswith(TOKEN_PREFIX):
            return await self._next_page(request, fields, token)
        for logger in self.rules:
            if logger.action == 'log':
                logger.take(operation, fields)
        rule = next((r for r in self.rules if r.action != 'log' and r.take(operation, fields)), None)
        if rule is not None:
            LOG.info('proxy rule %s (%s) hits %s', rule.id, rule.action, operation)
            if rule.action == 'reset':
                return _reset(request)
            if rule.action in ('error', 'throttle'):
                return _error(rule.code, rule.message, rule.status)
        now = time.monotonic()
        self.fleet.refresh(now)
        for instance_id in ec2xml.named_instances(fields):
            if not self.fleet.visible(instance_id, now):
                LOG.info('%s names %s, not visible yet', operation, instance_id)
                return _error(*ec2xml.not_found(instance_id), status=400)
        if rule is not None and rule.action == 'pages':
            return await self._first_page(request, fields, rule)
        if operation == 'GetConsoleOutput':
            text = self.fleet.console_output(fields.get('InstanceId'))
            if text is not None:
                return web.Response(status=200, body=ec2xml.dump(ec2xml.console_answer(fields['InstanceId'], text)),
                                    content_type='text/xml', charset='UTF-8')
        replay = None
        if operation == 'RunInstances' and fields.get('ClientToken'):
            replay = self._replay(request, fields)
            if isinstance(replay, web.Response):
                return replay
        try:
            if replay:
                status, headers, payload = await self._replayed_run(request, replay)
            else:
                status, headers, payload = await self._forward(request, fields, body)
        except (aiohttp.ClientError, asyncio.TimeoutError, ConnectionError):
            return _reset(request)
        if status == 200 and operation in INSTANCE_ANSWERS:
            payload = self._rewrite(payload, keep_new=operation == 'RunInstances')
        if rule is not None and rule.action == 'drop-response':
            return _reset(request)
        if rule is not None and rule.action == 'delay':
            try:
                await asyncio.wait_for(self.closing.wait(), rule.seconds)
                return _reset(request)
            except asyncio.TimeoutError:
                pass
        return web.Response(status=status, headers=headers, body=payload)

    def _replay(self, request, fields):
        """The instance ids an earlier RunInstances with this ClientToken launched (in the request's region), an
        error answer if the parameters differ, or None for a new token."""
        token = fields['ClientToken']
        found = CREDENTIAL.search(request.headers.get('Authorization', ''))
        region = found.group(2) if found else None
        ids = [raw.id for account, reg, raw in moto_instances()
               if getattr(raw, 'client_token', None) == token and (region is None or reg == region)]
        fingerprint = _fingerprint(fields)
        if not ids:
            self.tokens[token] = fingerprint
            return None
        if self.tokens.get(token, fingerprint) != fingerprint:
            return _error('IdempotentParameterMismatch', 'The client token you have provided is associated with a '
                          'resource that has different parameters. Specify a new client token.', 400)
        LOG.info('RunInstances with ClientToken %s again: the answer names %s', token, ', '.join(ids))
        return ids

    async def _replayed_run(self, request, ids):
        fields = {'Action': 'DescribeInstances', 'Version': '2016-11-15'}
        for n, instance_id in enumerate(ids, 1):
            fields['InstanceId.{0}'.format(n)] = instance_id
        status, headers, payload = await self._forward(request, fields, None)
        root = ec2xml.parse(payload) if status == 200 else None
        if root is None:
            return status, headers, payload
        return status, headers, ec2xml.dump(ec2xml.run_answer(root))

    def _rewrite(self, payload, keep_new=False):
        root = ec2xml.parse(payload)
        if root is None:
            return payload
        now = time.monotonic()
        self.fleet.refresh(now)
        hidden = set()
        for parent, item in ec2xml.instance_items(root):
            instance_id = ec2xml.item_id(item)
            ec2xml.show_client_token(item)
            instance = self.fleet.instances.get(instance_id)
            if instance is None:
                continue
            if not keep_new and not self.fleet.visible(instance_id, now):
                hidden.add(instance_id)
                continue
            ec2xml.rewrite_instance(item, instance.view(now))
        if hidden:
            ec2xml.drop_instances(root, hidden)
        return ec2xml.dump(root)

    async def _listing(self, request, fields):
        """The whole DescribeInstances answer (every reservation, rewritten) for a paged listing."""
        plain = {k: v for k, v in fields.items() if k not in ('NextToken', 'MaxResults')}
        plain, tokens = ec2xml.take_filter(plain, 'client-token')
        status, headers, payload = await self._forward(request, plain, None)
        if status != 200:
            return status, headers, payload, None, None
        payload = self._rewrite(payload)
        return status, headers, payload, ec2xml.parse(payload), tokens

    async def _first_page(self, request, fields, rule):
        listing = next(self._listings)
        try:
            status, headers, payload, root, tokens = await self._listing(request, fields)
        except (aiohttp.ClientError, asyncio.TimeoutError, ConnectionError):
            return _reset(request)
        if root is None:
            return web.Response(status=status, headers=headers, body=payload)
        self.listings[listing] = (rule, headers, payload, tokens)
        for old in sorted(self.listings)[:-MAX_LISTINGS]:
            del self.listings[old]
        return self._page(rule, headers, payload, listing, 1, 0, tokens=tokens)

    async def _next_page(self, request, fields, token):
        try:
            listing, number, offset = [int(x) for x in token[len(TOKEN_PREFIX):].split('.')]
            rule, headers, payload, tokens = self.listings[listing]
        except (ValueError, KeyError):
            return _error('InvalidParameterValue', 'The value of NextToken is not valid: {0}'.format(token), 400)
        return self._page(rule, headers, payload, listing, number, offset, asked=token, tokens=tokens)

    def _page(self, rule, headers, payload, listing, number, offset, asked=None, tokens=None):
        if rule.fail_at == number:
            LOG.info('listing %s: page %s fails with %s', listing, number, rule.code)
            return _error(rule.code, rule.message, rule.status)
        root = ec2xml.parse(payload)
        total = len(ec2xml.reservations(root))
        more = offset + rule.size < total or rule.endless
        token = '{0}{1}.{2}.{3}'.format(TOKEN_PREFIX, listing, number + 1, offset + rule.size) if more else None
        if rule.repeat_at == number and asked:
            token = asked
        ec2xml.page(root, offset, rule.size, token)
        if tokens is not None:
            ec2xml.keep_client_tokens(root, tokens)
        LOG.info('listing %s: page %s (reservations %s-%s of %s), next token %s', listing, number, offset,
                 offset + rule.size, total, token)
        return web.Response(status=200, headers=headers, body=ec2xml.dump(root))

    async def _forward(self, request, fields, body):
        """Send the request (its fields re-encoded if they were changed) to moto; (status, headers, payload)."""
        headers = {k: v for k, v in request.headers.items() if k.lower() not in HOP_HEADERS}
        if body is None or request.method != 'POST':
            data = ec2xml.encode_query(fields)
            headers['Content-Type'] = 'application/x-www-form-urlencoded; charset=utf-8'
            method, url = 'POST', self.upstream + '/'
        else:
            data, method, url = body, request.method, self.upstream + request.raw_path
        async with self.session.request(method, url, headers=headers, data=data, allow_redirects=False) as resp:
            payload = await resp.read()
            out = [(k, v) for k, v in resp.headers.items() if k.lower() not in HOP_HEADERS]
            return resp.status, out, payload
