# -*- coding: utf-8 -*-
# Copyright: ephemera.workspaces contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Hetzner Cloud calls in the provider seam's terms: one ``hcloud`` client, its errors mapped onto the seam's kinds,
retries with backoff where a retry is safe, and listings that follow every page.

``hcloud`` is imported here, when a Hetzner provider is made: never at the import of shared code. Its own retries
(of rate limits, conflicts and timeouts) are switched off: a repeated POST or DELETE after a lost answer would be a
second request the journal never recorded. This module retries reads only, and calls that act only when the
answer proves they were not carried out.

Error mapping (docs/hetzner.md has the table). For a call that acts, the HTTP status decides first: 400, 401, 403,
405, 409, 410, 412, 423 and 429 are rejections (the request was not carried out), 408, 422, 5xx, a timeout, a reset
and an answer that cannot be read are unknown outcomes (it may have been carried out). Within the rejections the
error code picks the kind: ``rate_limit_exceeded`` transient, ``locked`` and ``conflict`` locked,
``uniqueness_error`` conflict, ``not_found`` not found, ``unauthorized`` an invalid request (the token), the rest
refused. Reads are retried on every transient answer.
"""

import random
import threading
import time

from ansible_collections.ephemera.workspaces.plugins.module_utils.core import failpoint
from ansible_collections.ephemera.workspaces.plugins.module_utils.core import renewal
from ansible_collections.ephemera.workspaces.plugins.module_utils.providers import answers, base

# The SDK this client imports when it is first used (and registry.preload before a run forks its workers).
LIBRARIES = ('hcloud',)

TOKEN_ENV = 'HCLOUD_TOKEN'
ENDPOINT_ENV = 'HCLOUD_ENDPOINT'
DEFAULT_ENDPOINT = 'https://api.hetzner.cloud/v1'
# A listing that follows more pages than this is incomplete.
MAX_PAGES = 100
PER_PAGE = 50
# HTTP statuses of a call that acts: rejected (not carried out) or uncertain (may have been carried out).
REJECTED = (400, 401, 403, 404, 405, 409, 410, 412, 423, 429)
UNCERTAIN = (408, 422)
CODE_KINDS = {
    'rate_limit_exceeded': base.Transient,
    'locked': base.Locked,
    'conflict': base.Locked,
    'uniqueness_error': base.Conflict,
    'not_found': base.NotFound,
    'unauthorized': base.InvalidRequest,
    'invalid_input': base.InvalidRequest,
    'json_error': base.InvalidRequest,
    'forbidden': base.Refused,
    'protected': base.Refused,
    'resource_limit_exceeded': base.Refused,
    'resource_unavailable': base.Refused,
    'placement_error': base.Refused,
    'server_error': base.Transient,
    'timeout': base.Transient,
    'maintenance': base.Transient,
    'unavailable': base.Transient,
    'service_error': base.Transient,
    'token_readonly': base.Refused,
    'unsupported_error': base.Refused,
    'deprecated_api_endpoint': base.Refused,
}
HINTS = {
    'unauthorized': 'Check the API token (hetzner_token or HCLOUD_TOKEN): it must be a token of the project, '
                    'with read and write permission.',
    'forbidden': 'The token may not do this: make a read & write token in the project\'s Security tab.',
    'token_readonly': 'The token may only read: make a read & write token in the project\'s Security tab.',
    'rate_limit_exceeded': 'The project\'s API rate limit is used up: retry later.',
    'resource_limit_exceeded': 'The project\'s server limit is reached: delete servers or ask Hetzner for more.',
    'resource_unavailable': 'The server type is not available in this location now: try another location or type.',
    'placement_error': 'No host could take the server: try another location or server type, or retry later.',
    'protected': 'The server has delete protection: turn it off (hcloud server disable-protection) if it should go.',
    'locked': 'Another action holds the server: retry later.',
}


class IncompleteListing(base.Transient):
    """A paginated read that could not be finished: it confirms nothing, absence least of all."""


def api_point(method, path):
    """The failpoint of a call that acts: ``hetzner POST /servers``, ``hetzner DELETE /servers``."""
    parts = [p for p in path.split('?')[0].split('/') if p]
    return 'hetzner %s /%s' % (method, '/'.join(p for p in parts if not p.isdigit()))


def error_kind(status, code, acts):
    """The seam's error class for an answer with HTTP ``status`` (None: no answer came) and error ``code``."""
    if acts:
        if status is None or status in UNCERTAIN or status >= 500:
            return base.UnknownOutcome
        if status in REJECTED:
            kind = CODE_KINDS.get(code, base.Refused)
            return base.Refused if kind is base.UnknownOutcome else kind
        return base.UnknownOutcome
    if status is None or status >= 500 or status in UNCERTAIN:
        return base.Transient
    return CODE_KINDS.get(code, base.Refused)


class HCloud:
    """The Hetzner Cloud API of one project (its token). ``request_timeout``: seconds per request;
    ``retry_timeout``: how long transient answers to reads are ridden out."""

    def __init__(self, token, endpoint=None, request_timeout=10, retry_timeout=60, sleep=time.sleep):
        if not token:
            raise base.InvalidRequest('No Hetzner Cloud API token: set hetzner_token or the environment variable '
                                      'HCLOUD_TOKEN (a read & write token of the project).')
        try:
            import hcloud  # noqa: F401 (imported when the provider is used)
            from hcloud import APIException
        except ImportError as exc:
            raise base.missing_sdk('Hetzner', ('hcloud>=2.27',), 'requirements-hetzner.txt', exc)
        self._api_exception = APIException
        self.endpoint = (endpoint or DEFAULT_ENDPOINT).rstrip('/')
        self.request_timeout = request_timeout
        self.retry_timeout = retry_timeout
        self.sleep = sleep
        self.client = hcloud.Client(token=token, api_endpoint=self.endpoint, application_name='ephemera.workspaces',
                                    timeout=(min(5, request_timeout), request_timeout))
        base_client = self.client._client  # pylint: disable=protected-access
        # No retries of hcloud's own: this module decides which calls may be repeated (see the module's text).
        base_client._retry_max_retries = 0  # pylint: disable=protected-access
        # The status of the last answer, per thread: threads of one sweep share this client (releases side by side),
        # and each reads the status of its own answer.
        self._answered = threading.local()
        base_client._session.hooks['response'].append(self._hook)  # pylint: disable=protected-access
        # Every answer is read up to CLOUD_ANSWER_MAX, never further (providers/answers.py).
        answers.bound_session(base_client._session, answers.CLOUD_ANSWER_MAX)  # pylint: disable=protected-access

    def _hook(self, response, *args, **kwargs):
        self._answered.status = response.status_code

    @property
    def _last_status(self):
        """The HTTP status of this thread's last answer (None: none came since its last call began)."""
        return getattr(self._answered, 'status', None)

    def error(self, exc, method, path, acts):
        """The seam's error for ``exc`` raised by a call, or None when it is not a failure of the call."""
        import requests
        what = '%s %s' % (method, path)
        if isinstance(exc, answers.AnswerTooLarge):
            # A repeat would get the same: a read is refused; a call that acts may have been carried out.
            kind = base.UnknownOutcome if acts else base.Refused
            err = kind('%s: %s (hetzner_endpoint or HCLOUD_ENDPOINT)%s.' % (
                what, exc, '; it may have been carried out: look before repeating it' if acts else ''))
            err.transport = 'too_large'
            err.status = self._last_status
            err.code = ''
            return err
        if isinstance(exc, self._api_exception):
            status = self._last_status
            code = exc.code if isinstance(exc.code, str) else ''
            if status is None and isinstance(exc.code, int):
                status = exc.code
            kind = error_kind(status, code, acts)
            hint = HINTS.get(code, '')
            text = '%s: Hetzner Cloud answered %s %s: %s' % (what, status, code or '(no error code)', exc.message)
            if kind is base.UnknownOutcome:
                text += '; it may have been carried out: look before repeating it'
            err = kind(text + ('. ' + hint if hint else '.'))
            err.status = status
            err.code = code
            return err
        if isinstance(exc, requests.exceptions.ConnectionError) and not isinstance(
                exc, (requests.exceptions.ReadTimeout,)) and _before_sending(exc):
            err = base.Transient('%s: %s does not answer (%s). Check hetzner_endpoint (or HCLOUD_ENDPOINT) and the '
                                 'network, then rerun.' % (what, self.endpoint, exc))
            err.transport = 'connect'
            err.status = None
            err.code = ''
            return err
        if isinstance(exc, (requests.exceptions.RequestException, ValueError, KeyError, TypeError)):
            kind = base.UnknownOutcome if acts else base.Transient
            transport = 'timeout' if isinstance(exc, requests.exceptions.Timeout) else (
                'reset' if isinstance(exc, requests.exceptions.RequestException) else 'garbled')
            err = kind('%s: no usable answer came back from %s (%s: %s)%s.'
                       % (what, self.endpoint, type(exc).__name__, str(exc)[:200],
                          '; it may have been carried out' if acts else ''))
            err.transport = transport
            err.status = None
            err.code = ''
            return err
        return None

    def call(self, method, path, acts=False, **kwargs):
        """The JSON answer of one call; transient failures of reads retried with backoff for up to
        ``retry_timeout`` seconds. A call that acts is sent once; its failure is raised as it is."""
        deadline = time.monotonic() + self.retry_timeout
        delay = 0.2
        attempts = 0
        while True:
            attempts += 1
            self._answered.status = None
            if acts:
                renewal.check()  # a step that lost its claim acts no more
            try:
                answer = self.client.request(method, path, **kwargs)
            except Exception as exc:  # hcloud, requests and JSON errors have no common base
                err = self.error(exc, method, path, acts)
                if err is None:
                    raise
                retry = isinstance(err, base.Transient) and not acts
                if not retry or time.monotonic() + delay > deadline:
                    if attempts > 1:
                        err.message += ' (%d attempts)' % attempts
                    raise err
                self.sleep(delay * (1 + random.random() * 0.3))
                delay = min(delay * 2, 5.0)
                continue
            if not isinstance(answer, dict):
                kind = base.UnknownOutcome if acts else base.Transient
                raise kind('%s %s: the answer is not a JSON object.' % (method, path))
            if acts:
                # The cloud acted and the journal does not know yet: a crash-safety test can kill the run here.
                failpoint.reached(api_point(method, path))
            return answer

    def list(self, path, key, params=None):
        """Every item of a paginated listing (``key``: the list's name in the answer). IncompleteListing when a
        later page fails, a page repeats or there are more than MAX_PAGES."""
        found = []
        page = 1
        pages = 0
        while True:
            pages += 1
            if pages > MAX_PAGES:
                raise IncompleteListing('%s has more than %d pages; the listing is incomplete and confirms nothing.'
                                        % (path, MAX_PAGES))
            query = dict(params or {}, page=page, per_page=PER_PAGE)
            try:
                answer = self.call('GET', path, params=query)
            except base.ProviderError as err:
                if pages == 1:
                    raise
                raise IncompleteListing('%s failed on page %d (%s); the listing is incomplete and confirms nothing. '
                                        'Retry later.' % (path, page, err))
            items = answer.get(key)
            if not isinstance(items, list):
                raise IncompleteListing('%s answered without a %s list; the listing confirms nothing.' % (path, key))
            found.extend(items)
            nxt = (((answer.get('meta') or {}).get('pagination') or {}).get('next_page'))
            if not nxt:
                return found
            if not isinstance(nxt, int) or nxt <= page:
                raise IncompleteListing('%s named page %r after page %d; the listing is incomplete and confirms '
                                        'nothing.' % (path, nxt, page))
            page = nxt


def _before_sending(exc):
    """True when a connection error happened before the request went out (refused, no route, DNS)."""
    text = str(exc)
    return any(word in text for word in ('Connection refused', 'Failed to establish', 'Name or service not known',
                                         'No route to host', 'NewConnectionError'))
