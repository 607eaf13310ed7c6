# -*- coding: utf-8 -*-
# Copyright: ephemera.workspaces contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The collection's one Proxmox VE API client: connection, errors, task ids and task waits.

Every Proxmox call of the collection goes through ``PveClient``. proxmoxer's https backend logs in
(a ticket with its CSRF token, or an API token) and owns the ``requests`` session; the client sends
each request through that session itself, because what the caller may do next depends on details
proxmoxer's own calls drop: PVE's full message and ``errors`` map, and whether a connection failed
before or after the request went out. docs/errors.md lists the error kinds and what to do on each.

Mutating calls are never repeated by the client: after ``PveUnknownOutcome`` the caller looks at the
cluster before it decides. Reads (GET) are repeated a few times on failures that cannot have changed
anything.
"""

import collections
import os
import re
import socket
import ssl
import threading
import time
import traceback
import warnings
from urllib.parse import quote, urlsplit

from ansible.module_utils.parsing.convert_bool import boolean

from ansible_collections.ephemera.workspaces.plugins.module_utils.core import failpoint
from ansible_collections.ephemera.workspaces.plugins.module_utils.core import renewal
from ansible_collections.ephemera.workspaces.plugins.module_utils.core.waiter import TIMEOUT, Backoff, done, pending, wait_for
from ansible_collections.ephemera.workspaces.plugins.module_utils.providers import answers, base
# The connection options are declared in options.py (a module gets them through the registry); the client reads
# their defaults and environment variables there.
from ansible_collections.ephemera.workspaces.plugins.module_utils.providers.proxmox.options import (
    DEFAULT_PORT, DEFAULT_TIMEOUT, ENV_VARS)

# The libraries the client needs, imported by load_libraries() when the first client is made: a step that never
# talks to the API (the guest steps) does not pay the tenth of a second requests and proxmoxer take to import.
# Modules report a missing one through missing_required_lib(PVE_MISSING_LIBRARY) instead of a traceback.
requests = InsecureRequestWarning = NewConnectionError = proxmoxer_https = ProxmoxerAuthenticationError = None
PVE_MISSING_LIBRARY = None
PVE_IMPORT_ERROR = None
_LOADED = []
# Clients may be made in threads at once (parallel releases): the first one imports, the others wait for it.
_LOADING = threading.Lock()


def load_libraries():
    """Import requests and proxmoxer once; returns (the missing library, its traceback), or (None, None)."""
    global requests, InsecureRequestWarning, NewConnectionError, proxmoxer_https, ProxmoxerAuthenticationError
    global PVE_MISSING_LIBRARY, PVE_IMPORT_ERROR
    with _LOADING:
        if _LOADED:
            return PVE_MISSING_LIBRARY, PVE_IMPORT_ERROR
        try:
            import requests  # pylint: disable=import-outside-toplevel,redefined-outer-name
            from urllib3.exceptions import InsecureRequestWarning, NewConnectionError  # pylint: disable=import-outside-toplevel
        except ImportError:
            PVE_MISSING_LIBRARY = 'requests'
            PVE_IMPORT_ERROR = traceback.format_exc()
        else:
            # proxmoxer's https backend exits the process when requests is missing, so it comes second.
            try:
                from proxmoxer.backends import https as proxmoxer_https  # pylint: disable=import-outside-toplevel
                from proxmoxer.core import AuthenticationError as ProxmoxerAuthenticationError  # pylint: disable=import-outside-toplevel
            except ImportError:
                PVE_MISSING_LIBRARY = 'proxmoxer'
                PVE_IMPORT_ERROR = traceback.format_exc()
        _LOADED.append(True)
    return PVE_MISSING_LIBRARY, PVE_IMPORT_ERROR


# Establishing a connection never needs long; a dead address should not cost a whole request_timeout.
CONNECT_TIMEOUT_MAX = 10
# Lines of a task's log that go into a failure message and the task result.
LOG_TAIL_LINES = 20
# A UPID PVE has just returned can briefly be unknown to the status call.
NOT_FOUND_GRACE = 5.0
# A look at a task near its deadline still gets this long to answer.
MIN_LOOK_SECONDS = 0.2
# Task log pages, and how many pages at most are read to find warnings.
LOG_PAGE = 500
LOG_MAX_PAGES = 40

CONNECTION_DEFAULTS = dict(api_port=DEFAULT_PORT, validate_certs=True, request_timeout=DEFAULT_TIMEOUT)


# ---------------------------------------------------------------------------------------- errors

class PveError(base.ProviderError):
    """Base of everything the Proxmox client raises. Each class is also one of the provider seam's error
    kinds (providers/base.py): what PVE says is mapped onto what the caller may do next."""


class PveConfigError(PveError, base.Refused):
    """The client's settings are missing or wrong (host, credentials, CA file). Nothing was sent."""


class PveBadUpid(PveError, base.Refused):
    """A value that is not a PVE task id (UPID)."""


class PveApiError(PveError):
    """A request failed. ``kind`` says how, and so what the caller may do next (docs/errors.md).

    Attributes: method, path, status (HTTP status, None when no answer came), pve_message (PVE's own
    text), errors (PVE's per-parameter messages, or None), transport (how the connection failed,
    None when PVE answered: refused, dns, connect_failed, connect_timeout, read_timeout,
    connection_lost, tls).
    """

    kind = 'other'

    def __init__(self, message, method=None, path=None, status=None, pve_message=None, errors=None, transport=None,
                 **extra):
        details = dict(kind=self.kind, method=method, path=path, status=status, pve_message=pve_message,
                       errors=errors, transport=transport)
        details.update(extra)
        super().__init__(message, **{k: v for k, v in details.items() if v is not None})
        self.method = method
        self.path = path
        self.status = status
        self.pve_message = pve_message
        self.errors = errors
        self.transport = transport

    @property
    def provider_message(self):
        return self.pve_message


class PveNotFound(PveApiError, base.NotFound):
    """The guest (config file), task or other object does not exist, at least not on that node."""
    kind = 'not_found'


class PveLocked(PveApiError, base.Locked):
    """The guest carries a config lock (``lock`` holds its name: create, disk, backup, ...)."""
    kind = 'locked'

    def __init__(self, message, lock=None, **kwargs):
        super().__init__(message, lock=lock, **kwargs)
        self.lock = lock


class PveLockTimeout(PveApiError, base.Locked):
    """PVE could not take the guest's config file lock in time: another task holds it."""
    kind = 'lock_timeout'


class PveAlreadyExists(PveApiError, base.Conflict):
    """The id or name is taken."""
    kind = 'already_exists'


class PveParameterError(PveApiError, base.Refused):
    """PVE rejected parameters (HTTP 400); ``errors`` maps each parameter to PVE's message."""
    kind = 'parameter'


class PvePermissionDenied(PveApiError, base.Refused):
    """The user or token lacks a privilege (HTTP 403)."""
    kind = 'permission'


class PveAuthError(PveApiError, base.Refused):
    """The credentials were refused: wrong user, password, token id or secret."""
    kind = 'auth'


class PveTlsError(PveApiError, base.Refused):
    """The server's TLS certificate does not verify, or TLS failed before the request went out."""
    kind = 'tls'


class PveTransient(PveApiError, base.Transient):
    """A temporary failure in which PVE surely did not carry out the request: retrying later is safe."""
    kind = 'transient'


class PveUnreachable(PveTransient):
    """No connection to the API (refused, unknown host, no answer to connect). Nothing was sent."""
    kind = 'unreachable'


class PveUnknownOutcome(PveApiError, base.UnknownOutcome):
    """The request went out but no usable answer came back: it may or may not have been carried out."""
    kind = 'unknown_outcome'


class PveTaskFailed(PveError, base.TaskFailed):
    """A task stopped with an error. ``task`` is its TaskResult (exitstatus, log_tail, ...)."""

    def __init__(self, task):
        lines = '\n'.join('  ' + line for line in task.log_tail) or '  (the task log is empty)'
        message = ('task {0} failed: {1}\nupid: {2}\nlast lines of the task log:\n{3}'.format(
            task.describe(), task.exitstatus, task.upid, lines))
        super().__init__(message, kind='task_failed', task=task.as_dict())
        self.task = task
        self.upid = self.task_id = task.upid
        self.exitstatus = task.exitstatus
        self.log_tail = task.log_tail


class PveTaskTimeout(PveError, base.TaskTimeout):
    """A task did not finish before the deadline. It may still be running (or finish later) in PVE.

    ``task`` is the last TaskResult seen (None if no status was ever read), ``last_error`` the last
    error of a look that failed (None if the last look succeeded).
    """

    def __init__(self, upid, timeout, elapsed, task=None, last_error=None):
        if task is not None:
            message = ('task {0} still running after {1:.1f} s (timeout {2} s); it goes on in PVE. Wait again with a '
                       'longer timeout (ephemera.workspaces.pve_task), or stop it in PVE.\nupid: {3}'.format(
                           task.describe(), elapsed, timeout, upid))
        else:
            message = ('no status of task {0} within {1:.1f} s (timeout {2} s); the task may be running in PVE. '
                       'Check the connection, then wait again.\nupid: {0}'.format(upid, elapsed, timeout))
        if last_error is not None:
            message += '\nlast error: {0}'.format(last_error)
        super().__init__(message, kind='task_timeout', upid=str(upid),
                         task=task.as_dict() if task is not None else None)
        self.upid = self.task_id = str(upid)
        self.timeout = timeout
        self.elapsed = elapsed
        self.task = task
        self.last_error = last_error


ERROR_CLASSES = {cls.kind: cls for cls in (
    PveApiError, PveNotFound, PveLocked, PveLockTimeout, PveAlreadyExists, PveParameterError, PvePermissionDenied,
    PveAuthError, PveTlsError, PveTransient, PveUnreachable, PveUnknownOutcome)}

# What to do next, per kind: the second half of every error message.
HINTS = {
    'not_found': 'It does not exist (on that node); look it up (e.g. in /cluster/resources) before acting on it.',
    'locked': "Another operation holds the guest's lock '{lock}'; retry with backoff. A lock that never clears "
              "needs 'pct unlock <vmid>' (or 'qm unlock') on the node: no API call removes it.",
    'lock_timeout': "Another task holds the guest's config file lock; retry with backoff.",
    'already_exists': 'The id or name is taken: pick another one, and prove ownership before using an existing one.',
    'parameter': 'Fix the parameters named above.',
    'permission': 'The user or API token lacks this privilege: grant it in PVE (Datacenter > Permissions; '
                  'a token with privilege separation needs its own grant), or use another account.',
    'auth': 'Check the credentials.',
    'transient': 'A temporary failure: PVE did not carry out the request, so retrying later is safe.',
    'unreachable': 'Nothing was sent, so retrying later is safe.',
    'unknown_outcome': 'The request may or may not have been carried out: look at the cluster before retrying.',
    'other': '',
}

_CONFIG_MISSING = re.compile(r"Configuration file '[^']*' does not exist")
_LOCKED = re.compile(r'\b(?:CT|VM) is locked \(([^)]*)\)')
_LOCK_TIMEOUT = re.compile(r"can't lock file '[^']*' - got timeout")
_ALREADY_EXISTS = re.compile(r'\balready exists\b')
_NO_SUCH_TASK = re.compile(r'\bno such task\b')
# A node that cannot parse a UPID that parsed here does not know that task either.
_UNKNOWN_TASK = re.compile(r'\bno such task\b|\bunable to parse worker upid\b')
_NO_QUORUM = re.compile(r'\bno quorum\b')
# 595: pveproxy could not reach the node (nothing was sent to it). 596-599 and a gateway's 502/504
# can happen after the request reached PVE.
_TRANSIENT_STATUS = (503, 595)
_UNKNOWN_STATUS = (502, 504, 596, 597, 598, 599)


def classify(status, message, errors=None, pve_answer=True):
    """The kind of a PVE error answer: (kind, lock name or None).

    PVE answers most errors with HTTP 500, so the message decides: a missing config file is
    not_found, "CT is locked (x)" locked, "can't lock file ... got timeout" lock_timeout, "... already
    exists" already_exists. A 400 with an ``errors`` map is parameter (already_exists or not_found
    when a field says so). pve_answer is False when the body was not PVE's JSON (a proxy's page).
    """
    message = message or ''
    texts = [message] + [str(v) for v in (errors or {}).values()]
    if status == 401:
        return 'auth', None
    if status == 403:
        return 'permission', None
    if any(_ALREADY_EXISTS.search(t) for t in texts):
        return 'already_exists', None
    if any(_CONFIG_MISSING.search(t) or _NO_SUCH_TASK.search(t) for t in texts):
        return 'not_found', None
    if status == 400 or errors:
        return 'parameter', None
    locked = _LOCKED.search(message)
    if locked:
        return 'locked', locked.group(1)
    if _LOCK_TIMEOUT.search(message):
        return 'lock_timeout', None
    if status in _TRANSIENT_STATUS or _NO_QUORUM.search(message):
        return 'transient', None
    if status in _UNKNOWN_STATUS:
        return 'unknown_outcome', None
    if status >= 500 and not pve_answer:
        return 'transient', None
    return 'other', None


# -------------------------------------------------------------------------------------- task ids

_UPID = re.compile(r'^UPID:(?P<node>[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?):(?P<pid>[0-9A-Fa-f]{8}):'
                   r'(?P<pstart>[0-9A-Fa-f]{8,9}):(?P<starttime>[0-9A-Fa-f]{8}):(?P<type>[^:\s]+):'
                   r'(?P<id>[^:\s]*):(?P<user>[^:\s]+):$')


class Upid:
    """A parsed PVE task id: ``UPID:node:pid:pstart:starttime:type:id:user:``.

    Attributes node, pid, pstart, starttime (Unix time), type (vzclone, vzstart, ...), id (the guest
    id for guest tasks; for a clone the source's), user, text (the UPID itself; also str()).
    """

    __slots__ = ('text', 'node', 'pid', 'pstart', 'starttime', 'type', 'id', 'user')

    def __init__(self, text):
        if not isinstance(text, str):
            raise PveBadUpid('a task id (UPID) is a string like UPID:pve1:0001A2B3:00C4D5E6:65F0A1B2:vzclone:9000:'
                             'root@pam:, not {0!r}'.format(text), upid=repr(text))
        match = _UPID.match(text.strip())
        if not match:
            shown = text if len(text) <= 120 else text[:117] + '...'
            raise PveBadUpid('{0!r} is not a Proxmox VE task id (UPID): expected UPID:<node>:<pid>:<pstart>:'
                             '<starttime>:<type>:<id>:<user>: as a PVE call returns it (for example the result of a '
                             'clone or start); pass that value unchanged'.format(shown), upid=shown)
        self.text = text.strip()
        self.node = match.group('node')
        self.pid = int(match.group('pid'), 16)
        self.pstart = int(match.group('pstart'), 16)
        self.starttime = int(match.group('starttime'), 16)
        self.type = match.group('type')
        self.id = match.group('id')
        self.user = match.group('user')

    @classmethod
    def parse(cls, value):
        """A Upid from a string (or the Upid itself); PveBadUpid if it is not one."""
        return value if isinstance(value, cls) else cls(value)

    def __str__(self):
        return self.text

    def __repr__(self):
        return 'Upid({0!r})'.format(self.text)

    def __eq__(self, other):
        return isinstance(other, Upid) and other.text == self.text

    def __ne__(self, other):
        return not self == other

    def __hash__(self):
        return hash(self.text)


class TaskResult(base.TaskResult):
    """A Proxmox VE task as :class:`base.TaskResult` tells it, with the fields of its UPID (node, type, id, user,
    starttime): what ephemera.workspaces.pve_task returns (:meth:`as_dict`)."""

    FIELDS = ('upid', 'node', 'type', 'id', 'user', 'starttime', 'status', 'exitstatus', 'succeeded', 'warnings',
              'warning_lines', 'log_tail', 'elapsed')

    def __init__(self, upid, status, exitstatus=None, elapsed=0.0, log_tail=(), warning_lines=()):
        upid = Upid.parse(upid)
        super().__init__(upid.text, status, exitstatus, elapsed, log_tail, warning_lines)
        self.node = upid.node
        self.type = upid.type
        self.id = upid.id
        self.user = upid.user
        self.starttime = upid.starttime

    def describe(self):
        """A short name for messages: 'vzstart 105 on node pve1'."""
        return '{0}{1} on node {2}'.format(self.type, ' ' + self.id if self.id else '', self.node)

    def as_dict(self):
        """The documented result of ephemera.workspaces.pve_task (JSON-able)."""
        return {name: getattr(self, name) for name in self.FIELDS}

    def __repr__(self):
        return 'TaskResult({0!r}, status={1!r}, exitstatus={2!r})'.format(self.upid, self.status, self.exitstatus)


# ---------------------------------------------------------------------------------------- client

class _TicketRejected(Exception):
    """A 401 on a ticket session: the ticket expired or was revoked; one fresh login may cure it."""

    def __init__(self, answer):
        super().__init__(answer)
        self.answer = answer


def _form(values):
    """Parameters as PVE reads them: no None values, booleans as 1/0."""
    out = {}
    for key, value in (values or {}).items():
        if value is None:
            continue
        out[key] = int(value) if isinstance(value, bool) else value
    return out


def _chain(exc):
    """exc and every exception it wraps (args, urllib3's reason, cause, context)."""
    seen = []
    todo = [exc]
    while todo:
        item = todo.pop(0)
        if not isinstance(item, BaseException) or any(item is s for s in seen):
            continue
        seen.append(item)
        todo.extend([getattr(item, 'reason', None), item.__cause__, item.__context__] + list(item.args))
    return seen


def _find(exc, types):
    for item in _chain(exc):
        if isinstance(item, types):
            return item
    return None


def _parse_api_host(api_host, api_port):
    """(host, port, path prefix or None) from 'host', 'host:port', '[v6]:port' or 'https://host[:port][/prefix]'."""
    text = api_host.strip()
    if not text:
        raise PveConfigError('api_host is empty: give the Proxmox VE host (or set PROXMOX_HOST)')
    if '://' not in text and text.count(':') > 1 and not text.startswith('['):
        return text, api_port, None  # a bare IPv6 address
    try:
        parts = urlsplit(text if '://' in text else '//' + text)
        port = parts.port
    except ValueError as exc:
        raise PveConfigError('api_host {0!r} is not a host, host:port or https URL ({1})'.format(api_host, exc))
    if parts.scheme and parts.scheme.lower() != 'https':
        raise PveConfigError('api_host {0!r} uses {1}://, but the Proxmox VE API is served over https only: use '
                             'https://{2}'.format(api_host, parts.scheme, text.split('://', 1)[1]))
    if not parts.hostname:
        raise PveConfigError('api_host {0!r} names no host'.format(api_host))
    prefix = parts.path.strip('/')
    if prefix.endswith('api2/json'):
        prefix = prefix[:-len('api2/json')].strip('/')
    return parts.hostname, port or api_port, prefix or None


class PveClient:
    """One connection to a Proxmox VE API.

    Authentication: an API token (api_token_id 'user@realm!name', or 'name' with api_user) with
    api_token_secret; else api_user and api_password (a login ticket, renewed once when PVE rejects
    it). The token wins when both are given. The login happens with the first request.

    Every request has explicit (connect, read) timeouts. get/post/put/delete return PVE's ``data``;
    failures raise a PveApiError subclass. request_count counts the HTTP requests made (the login
    included).
    """

    def __init__(self, api_host, api_user=None, api_password=None, api_token_id=None, api_token_secret=None,
                 api_port=DEFAULT_PORT, validate_certs=True, ca_file=None, request_timeout=DEFAULT_TIMEOUT,
                 get_retries=2):
        missing, dummy = load_libraries()
        if missing:
            raise PveConfigError('the Proxmox client needs the Python library {0} on the host that runs it: '
                                 'pip install -r requirements.txt'.format(missing))
        if not api_host:
            raise PveConfigError('no Proxmox VE API given: set api_host (or the PROXMOX_HOST environment variable)')
        self.host, self.port, self._prefix = _parse_api_host(str(api_host), int(api_port or DEFAULT_PORT))
        shown_host = '[{0}]'.format(self.host) if ':' in self.host else self.host
        self.base_url = 'https://{0}:{1}'.format(shown_host, self.port)
        if self._prefix:
            self.base_url += '/' + self._prefix
        self._api_url = self.base_url + '/api2/json'
        self._backend_host = shown_host
        self._set_credentials(api_user, api_password, api_token_id, api_token_secret)
        if request_timeout is None or float(request_timeout) <= 0:
            raise PveConfigError('request_timeout must be a positive number of seconds, not {0!r}'.format(request_timeout))
        self.request_timeout = float(request_timeout)
        self.connect_timeout = min(self.request_timeout, CONNECT_TIMEOUT_MAX)
        self.ca_file = None
        if validate_certs:
            if ca_file:
                self.ca_file = os.path.abspath(os.path.expanduser(str(ca_file)))
                if not os.path.isfile(self.ca_file) or not os.access(self.ca_file, os.R_OK):
                    raise PveConfigError('ca_file {0!r} is not a readable file: give the PEM file of the CA that '
                                         'signed the PVE certificate (on a PVE node: /etc/pve/pve-root-ca.pem)'.format(
                                             self.ca_file))
            self._verify = self.ca_file or True
        else:
            self._verify = False
        self.get_retries = int(get_retries)
        self.request_count = 0
        self._http = None

    def _set_credentials(self, api_user, api_password, api_token_id, api_token_secret):
        self._token_name = self._token_secret = self._password = None
        if api_token_id or api_token_secret:
            if not (api_token_id and api_token_secret):
                missing = 'api_token_secret (PROXMOX_TOKEN_SECRET)' if api_token_id else 'api_token_id (PROXMOX_TOKEN_ID)'
                raise PveConfigError('an API token needs both its id and its secret: {0} is not set'.format(missing))
            if '!' in api_token_id:
                user, name = api_token_id.split('!', 1)
                if api_user and api_user != user:
                    raise PveConfigError('api_token_id {0!r} belongs to {1!r}, but api_user is {2!r}: give one user'.format(
                        api_token_id, user, api_user))
            else:
                user, name = api_user, api_token_id
                if not user:
                    raise PveConfigError('api_token_id {0!r} names no user: set api_user, or give the full token id '
                                         'user@realm!{0}'.format(api_token_id))
            if '@' not in user or not name:
                raise PveConfigError('API token {0!r} is not of the form user@realm!name'.format('{0}!{1}'.format(user, name)))
            self.user, self._token_name, self._token_secret = user, name, api_token_secret
            self.auth_mode = 'token'
        elif api_user and api_password:
            self.user, self._password = api_user, api_password
            self.auth_mode = 'password'
        else:
            raise PveConfigError('no Proxmox VE credentials: set api_user and api_password (PROXMOX_USER, '
                                 'PROXMOX_PASSWORD), or api_token_id and api_token_secret (PROXMOX_TOKEN_ID, '
                                 'PROXMOX_TOKEN_SECRET)' + (' (api_password is missing)' if api_user else ''))

    def __repr__(self):
        return 'PveClient({0}, user={1!r}, auth={2})'.format(self.base_url, self.user, self.auth_mode)

    def close(self):
        """Close the connection (a later request logs in again)."""
        self._logout()

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        self.close()

    @property
    def token_id(self):
        """The full API token id (user@realm!name), or None with password authentication."""
        return '{0}!{1}'.format(self.user, self._token_name) if self._token_name else None

    # ------------------------------------------------------------------------------- requests

    def get(self, path, /, **params):
        """GET path (e.g. '/cluster/resources') with query parameters; returns PVE's data."""
        return self.request('GET', path, params=params)

    def post(self, path, /, **data):
        """POST path with form parameters; returns PVE's data (a UPID for task-starting calls)."""
        return self.request('POST', path, data=data)

    def put(self, path, /, **data):
        """PUT path with form parameters; returns PVE's data."""
        return self.request('PUT', path, data=data)

    def delete(self, path, /, **params):
        """DELETE path with query parameters; returns PVE's data."""
        return self.request('DELETE', path, params=params)

    def request(self, method, path, params=None, data=None, timeout=None, retries=None):
        """One API call; returns the answer's ``data``.

        timeout: read timeout in seconds for this call (default request_timeout). retries: how often
        a GET is repeated after a failure that changed nothing (default get_retries); other methods
        are never repeated, whatever happened.
        """
        return self._call(method, path, params, data, timeout, retries).get('data')

    def _call(self, method, path, params=None, data=None, timeout=None, retries=None):
        """request(), returning PVE's whole answer (data plus attributes such as a task log's total)."""
        method = method.upper()
        if retries is None:
            retries = self.get_retries if method == 'GET' else 0
        elif retries and method != 'GET':
            raise ValueError('only GET requests are repeated by the client; {0} {1} is not'.format(method, path))
        backoff = Backoff(start=0.25, maximum=2.0, factor=2.0, jitter=0.25)
        fresh_login = False
        attempt = 0
        while True:
            try:
                return self._send(method, path, params, data, timeout)
            except _TicketRejected as rejected:
                # PVE refused the ticket before it looked at the request, so sending it again is safe.
                if fresh_login:
                    raise self._auth_refused(rejected.answer, method, path)
                fresh_login = True
                self._logout()
            except PveApiError as err:
                if attempt >= retries or not _repeatable_read(err):
                    raise
                attempt += 1
                time.sleep(backoff.next_delay())

    def _url(self, path):
        path = '/' + str(path).lstrip('/')
        if path.startswith('/api2/json/'):
            path = path[len('/api2/json'):]
        return path, self._api_url + quote(path, safe="/:@!=,~-._")

    def _timeouts(self, timeout):
        if timeout is None:
            return (self.connect_timeout, self.request_timeout)
        timeout = float(timeout)
        return (min(self.connect_timeout, timeout), timeout)

    def _send(self, method, path, params, data, timeout):
        if method != 'GET':
            renewal.check()  # a step that lost its claim acts no more
        session = self._session()
        path, url = self._url(path)
        self.request_count += 1
        try:
            self._quiet_tls()
            answer = session.request(method, url, params=_form(params), data=_form(data),
                                     timeout=self._timeouts(timeout))
        except requests.exceptions.RequestException as exc:
            raise self._transport_error(exc, method, path, timeout)
        except answers.AnswerTooLarge as exc:
            raise self._too_large(exc, method, path)
        if method != 'GET':
            # The cluster has acted on the request; nothing has been recorded about its answer yet.
            failpoint.reached(failpoint.api_point(method, path))
        return self._answer(answer, method, path)

    def _too_large(self, exc, method, path):
        """An answer over the cap (answers.PVE_ANSWER_MAX): a read is refused as it is (a repeat would get the same);
        a request that acts may have been carried out."""
        text = '{0} {1} on {2}: {3}.'.format(method, path, self.base_url, exc)
        if method == 'GET':
            return PveApiError(text, method=method, path=path, transport='too_large')
        return PveUnknownOutcome('{0} {1}'.format(text, HINTS['unknown_outcome']), method=method, path=path,
                                 transport='too_large')

    def _quiet_tls(self):
        """No warning per request when certificate checks were turned off on purpose (validate_certs: false).

        One filter for the whole process, added once: only a request made without checking the certificate warns,
        and every such request was asked for. (Filters set and restored around each request, as
        warnings.catch_warnings does, are not thread-safe: requests in threads at once undo each other's.)"""
        quiet = ('ignore', None, InsecureRequestWarning, None, 0)   # the entry filterwarnings makes
        if not self._verify and quiet not in warnings.filters:
            with _LOADING:
                if quiet not in warnings.filters:
                    warnings.filterwarnings('ignore', category=InsecureRequestWarning)

    # --------------------------------------------------------------------------------- login

    def _session(self):
        if self._http is None:
            self._login()
        return self._http

    def _logout(self):
        if self._http is not None:
            self._http.close()
            self._http = None

    def _login(self):
        options = dict(host=self._backend_host, port=self.port, path_prefix=self._prefix, verify_ssl=self._verify,
                       timeout=self._timeouts(None), user=self.user)
        if self.auth_mode == 'token':
            options.update(token_name=self._token_name, token_value=self._token_secret)
        else:
            options.update(password=self._password)
            self.request_count += 1  # proxmoxer posts /access/ticket right away
        try:
            self._quiet_tls()
            backend = proxmoxer_https.Backend(**options)
        except ProxmoxerAuthenticationError as exc:
            raise self._login_failed(exc)
        except requests.exceptions.RequestException as exc:
            err = self._transport_error(exc, 'POST', '/access/ticket', None, changes=False)
            if isinstance(err, PveUnknownOutcome):
                # A login changes nothing in the cluster: a lost answer is just a failed try.
                err = PveTransient('the login at {0} got no answer ({1}); logging in changes nothing, so retrying later '
                                   'is safe'.format(self.base_url, err.transport.replace('_', ' ')),
                                   method=err.method, path=err.path, transport=err.transport)
            raise err
        except (ValueError, KeyError, TypeError) as exc:
            raise PveApiError('{0} answered the login with something other than a PVE ticket ({1}): is api_host a '
                              'Proxmox VE API?'.format(self.base_url, exc), method='POST', path='/access/ticket')
        # Every answer of the session is read up to PVE_ANSWER_MAX, never further (providers/answers.py).
        self._http = answers.bound_session(backend.get_session(), answers.PVE_ANSWER_MAX)

    def _login_failed(self, exc):
        text = str(exc)
        if 'TFA' in text:
            return PveAuthError('user {0!r} has two-factor authentication at {1}: use an API token (api_token_id and '
                                'api_token_secret) instead'.format(self.user, self.base_url),
                                method='POST', path='/access/ticket')
        code = re.search(r'code: (\d+)', text)
        status = int(code.group(1)) if code else None
        if status == 401:
            return self._auth_refused(None, 'POST', '/access/ticket')
        kind = classify(status, text, pve_answer=False)[0] if status else 'other'
        cls = PveTransient if kind == 'unknown_outcome' else ERROR_CLASSES[kind]
        return cls('the login at {0} failed with HTTP {1}: {2}. {3}'.format(self.base_url, status, text, HINTS[kind]).strip(),
                   method='POST', path='/access/ticket', status=status)

    def _auth_refused(self, answer, method, path):
        said = ' ({0})'.format(answer) if answer else ''
        if self.auth_mode == 'token':
            message = ('Proxmox VE at {0} refused API token {1!r}{2}: check api_token_id and api_token_secret '
                       '(PROXMOX_TOKEN_ID, PROXMOX_TOKEN_SECRET), and that the token exists and has not expired'.format(
                           self.base_url, self.token_id, said))
        else:
            message = ('Proxmox VE at {0} refused the login of {1!r}{2}: check api_user and api_password '
                       '(PROXMOX_USER, PROXMOX_PASSWORD); the user needs its realm, e.g. root@pam'.format(
                           self.base_url, self.user, said))
        return PveAuthError(message, method=method, path=path, status=401, pve_message=answer)

    # ------------------------------------------------------------------------------- answers

    def _transport_error(self, exc, method, path, timeout, changes=None):
        """The PveApiError for a request that got no HTTP answer. changes: whether the request may change
        anything in the cluster (default: all but GET)."""
        changes = method != 'GET' if changes is None else changes
        where = '{0} {1} on {2}'.format(method, path, self.base_url)
        verify = _find(exc, ssl.SSLCertVerificationError)
        if verify is not None or isinstance(exc, requests.exceptions.SSLError):
            reason = getattr(verify, 'verify_message', None) or getattr(_find(exc, ssl.SSLError), 'reason', None) or exc
            if verify is not None or not changes or _handshake_failure(reason):
                against = "ca_file '{0}'".format(self.ca_file) if self.ca_file else "the system's CA certificates"
                what = ('the TLS certificate of {0} does not verify against {1} ({2}): set ca_file to the CA '
                        'certificate that signed it (on a PVE node: /etc/pve/pve-root-ca.pem), or validate_certs to '
                        'false on a test cluster only' if verify is not None else
                        'TLS with {0} failed ({2}): check that api_host and api_port name the Proxmox VE API (port 8006)')
                return PveTlsError(what.format(self.base_url, against, reason), method=method, path=path, transport='tls')
            return PveUnknownOutcome('{0}: TLS failed ({1}). {2}'.format(where, reason, HINTS['unknown_outcome']),
                                     method=method, path=path, transport='tls')
        if isinstance(exc, requests.exceptions.ConnectTimeout):
            return self._unreachable('no connection within {0:g} s'.format(self._timeouts(timeout)[0]), 'connect_timeout',
                                     method, path)
        if isinstance(exc, requests.exceptions.ReadTimeout):
            return PveUnknownOutcome('{0}: no answer within {1:g} s after the request was sent. {2}'.format(
                where, self._timeouts(timeout)[1], HINTS['unknown_outcome']), method=method, path=path,
                transport='read_timeout')
        failure = _find(exc, NewConnectionError) if isinstance(exc, requests.exceptions.ConnectionError) else None
        if failure is not None:
            if _find(exc, socket.gaierror) is not None or type(failure).__name__ == 'NameResolutionError':
                return self._unreachable('host name {0!r} not found'.format(self.host), 'dns', method, path)
            if _find(exc, ConnectionRefusedError) is not None:
                return self._unreachable('connection refused', 'refused', method, path)
            cause = _find(exc, OSError)
            return self._unreachable(str(cause.strerror if cause is not None and cause.strerror else failure),
                                     'connect_failed', method, path)
        if isinstance(exc, (requests.exceptions.ConnectionError, requests.exceptions.ChunkedEncodingError,
                            requests.exceptions.ContentDecodingError)):
            return PveUnknownOutcome('{0}: the connection broke after the request was sent ({1}). {2}'.format(
                where, _find(exc, (ConnectionError, OSError)) or exc, HINTS['unknown_outcome']), method=method, path=path,
                transport='connection_lost')
        return PveApiError('{0}: {1}'.format(where, exc), method=method, path=path)

    def _unreachable(self, reason, transport, method, path):
        return PveUnreachable('cannot connect to the Proxmox VE API at {0} ({1}): check api_host and api_port, and '
                              'that pveproxy runs there and is reachable from this host. {2}'.format(
                                  self.base_url, reason, HINTS['unreachable']),
                              method=method, path=path, transport=transport)

    def _answer(self, answer, method, path):
        """PVE's answer as a dict, or the PveApiError it means."""
        status = answer.status_code
        try:
            body = answer.json()
        except ValueError:
            body = None
        pve_answer = isinstance(body, dict) and 'data' in body
        where = '{0} {1} on {2}'.format(method, path, self.base_url)
        if 200 <= status < 300:
            if pve_answer:
                return body
            text = '{0}: HTTP {1} without PVE\'s JSON answer: is api_host the Proxmox VE API?'.format(where, status)
            if method == 'GET':
                raise PveApiError(text, method=method, path=path, status=status)
            raise PveUnknownOutcome('{0} {1}'.format(text, HINTS['unknown_outcome']), method=method, path=path,
                                    status=status)
        message = body.get('message') if isinstance(body, dict) else None
        message = (message or answer.reason or (answer.text or '')[:200] or 'HTTP {0}'.format(status)).strip()
        errors = body.get('errors') if isinstance(body, dict) and isinstance(body.get('errors'), dict) else None
        if status == 401:
            if self.auth_mode == 'password':
                raise _TicketRejected(message)
            raise self._auth_refused(message, method, path)
        kind, lock = classify(status, message, errors, pve_answer)
        said = message
        if errors:
            said = '{0}: {1}'.format(message.rstrip('.'), '; '.join('{0}: {1}'.format(k, str(v).strip())
                                                                    for k, v in sorted(errors.items())))
        hint = HINTS[kind].format(lock=lock)
        text = '{0}: {1} (HTTP {2}). {3}'.format(where, said, status, hint).strip()
        extra = dict(lock=lock) if kind == 'locked' else {}
        raise ERROR_CLASSES[kind](text, method=method, path=path, status=status, pve_message=message, errors=errors,
                                  **extra)

    # --------------------------------------------------------------------------------- tasks

    def _task_path(self, task, leaf):
        return '/nodes/{0}/tasks/{1}/{2}'.format(task.node, quote(task.text, safe=':@!'), leaf)

    def _task_status(self, task, timeout=None, retries=None):
        """PVE's status dict of the task; PveNotFound if the node does not know the task."""
        try:
            return self.request('GET', self._task_path(task, 'status'), timeout=timeout, retries=retries) or {}
        except PveApiError as err:
            said = [err.pve_message or ''] + [str(v) for v in (err.errors or {}).values()]
            if err.kind in ('not_found', 'parameter', 'other') and any(_UNKNOWN_TASK.search(s) for s in said):
                raise PveNotFound('task {0} is unknown on node {1} ({2}): check that the UPID comes from this cluster '
                                  'and that its log has not been removed'.format(task, task.node, err.pve_message),
                                  method='GET', path=err.path, status=err.status, pve_message=err.pve_message,
                                  errors=err.errors)
            raise

    def task_log(self, upid, tail=LOG_TAIL_LINES, with_warnings=False):
        """(the last `tail` lines of the task's log, its WARN lines if with_warnings else [])."""
        task = Upid.parse(upid)
        path = self._task_path(task, 'log')
        last = collections.deque(maxlen=tail)
        warned = []
        start = 0
        for _page in range(LOG_MAX_PAGES):
            body = self._call('GET', path, params=dict(start=start, limit=LOG_PAGE))
            lines = [item.get('t', '') for item in sorted(body.get('data') or [], key=lambda i: i.get('n', 0))]
            last.extend(lines)
            warned.extend(line for line in lines if with_warnings and line.startswith('WARN'))
            start += len(lines)
            total = body.get('total')
            if len(lines) < LOG_PAGE or (total is not None and start >= int(total)):
                break
            if not with_warnings and total is not None and int(total) - start > tail:
                # PVE says how long the log is: jump to its end.
                start = int(total) - tail
        return list(last), warned

    def _result(self, task, status, elapsed, log_lines):
        result = TaskResult(task, status.get('status') or 'unknown', status.get('exitstatus'), elapsed=elapsed)
        if result.status != 'running' and (not result.succeeded or result.warnings):
            try:
                result.log_tail, result.warning_lines = self.task_log(task, log_lines, with_warnings=bool(result.warnings))
            except PveApiError as err:
                # The task's outcome is known; a log that cannot be read must not hide it.
                result.log_tail = ['(the task log could not be read: {0})'.format(err)]
        return result

    def task_status(self, upid, log_lines=LOG_TAIL_LINES):
        """A TaskResult from one look at the task, with the log tail if it stopped with an error or warnings."""
        task = Upid.parse(upid)
        return self._result(task, self._task_status(task), 0.0, log_lines)

    def wait_task(self, upid, timeout=300, not_found_grace=NOT_FOUND_GRACE, backoff=None, log_lines=LOG_TAIL_LINES):
        """Wait until the task stops; returns its TaskResult if it succeeded (exitstatus OK or WARNINGS: n).

        Raises PveTaskFailed as soon as the task stopped with an error (the log tail in the message),
        PveTaskTimeout when it is still running (or no status could be read) at the deadline: timeout
        seconds by the monotonic clock, however slow each look is. A task the node does not know is
        looked for again during not_found_grace seconds, and at least once more however slow the first look was
        (a loaded node may answer after the grace has passed), then PveNotFound. Looks that fail on the way
        (connection trouble, 5xx) are retried until the deadline.
        """
        task = Upid.parse(upid)
        clock = time.monotonic
        began = clock()
        seen = dict(status=None, error=None, unknown=0)

        def look(remaining):
            try:
                status = self._task_status(task, timeout=min(self.request_timeout, max(remaining, MIN_LOOK_SECONDS)),
                                           retries=0)
            except PveNotFound as err:
                seen['unknown'] += 1
                if seen['unknown'] < 2 or clock() - began < not_found_grace:
                    seen['error'] = err
                    return pending(seen['status'])
                raise
            except (PveTransient, PveUnknownOutcome) as err:
                seen['error'] = err
                return pending(seen['status'])
            seen.update(status=status, error=None)
            return pending(status) if status.get('status') == 'running' else done(status)

        def what(_status):
            return ('the PVE task %s%s on node %s' % (task.type, ' of %s' % task.id if task.id else '', task.node),
                    seen['error'] or (seen['status'] or {}).get('status'))

        outcome = wait_for(look, timeout, backoff=backoff or Backoff(start=0.05, maximum=2.0, factor=1.5), what=what)
        if outcome.outcome == TIMEOUT:
            last = seen['status']
            raise PveTaskTimeout(task, timeout, outcome.elapsed,
                                 TaskResult(task, last.get('status') or 'unknown', last.get('exitstatus'),
                                            elapsed=outcome.elapsed) if last else None,
                                 seen['error'])
        result = self._result(task, outcome.value, outcome.elapsed, log_lines)
        if not result.succeeded:
            raise PveTaskFailed(result)
        return result


# OpenSSL reasons that only a TLS handshake produces: the request was not sent yet.
_HANDSHAKE_REASONS = ('WRONG_VERSION_NUMBER', 'UNSUPPORTED_PROTOCOL', 'UNKNOWN_PROTOCOL', 'HTTP_REQUEST',
                      'NO_PROTOCOLS_AVAILABLE', 'NO_SHARED_CIPHER', 'RECORD_LAYER_FAILURE', 'PACKET_LENGTH_TOO_LONG',
                      'CERTIFICATE_VERIFY_FAILED')


def _handshake_failure(reason):
    text = str(reason).upper()
    return any(word in text for word in _HANDSHAKE_REASONS + ('ALERT', 'HANDSHAKE'))


def _repeatable_read(err):
    """True for a failed GET that may be sent again at once: nothing changed and a retry may work."""
    if not isinstance(err, (PveTransient, PveUnknownOutcome)):
        return False
    return err.transport in (None, 'refused', 'connection_lost')


# ------------------------------------------------------------------------------ module options

def connection_options(params, environ=None):
    """The connection options from params, each unset one from its environment variable, then its default.

    Modules get the environment through their argument_spec already; plugins and scripts that build a
    client themselves get the same rules here.
    """
    environ = os.environ if environ is None else environ
    options = {}
    for name in ('api_host', 'api_port', 'api_user', 'api_password', 'api_token_id', 'api_token_secret',
                 'validate_certs', 'ca_file', 'request_timeout'):
        value = params.get(name)
        if value is None and environ.get(ENV_VARS.get(name, '')):
            value = environ[ENV_VARS[name]]
            if name == 'validate_certs':
                try:
                    value = boolean(value, strict=True)
                except TypeError:
                    raise PveConfigError('{0}={1!r} is not a boolean: use true or false'.format(ENV_VARS[name], value))
        options[name] = CONNECTION_DEFAULTS.get(name) if value is None else value
    return options


def client_from_params(params, environ=None):
    """A PveClient from module params (or any dict with the connection options); PveConfigError if incomplete."""
    return PveClient(**connection_options(params, environ))
