# -*- coding: utf-8 -*-
# Copyright: ephemera.workspaces contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The only file that talks to Azure Resource Manager: requests through the authenticated pipelines of
azure-mgmt-compute's and azure-mgmt-network's clients (imported when a connection is made), ARM's errors mapped
onto the seam's kinds, and long-running operations polled by our own rules:

- an ``Azure-AsyncOperation`` status document completes on ``"status": "Succeeded"`` only; Failed and Canceled
  fail; an empty answer (or one without a status) is never success, it is still pending;
- ``Location`` polling: 202 is pending; 200 or 204 completes only when the body states no pending or failed
  status.

Credentials never leave this file: no message, handle or record holds a secret.
"""

import json
import os
import time

try:
    from urllib.parse import urlsplit
except ImportError:  # pragma: no cover - Python 2
    from urlparse import urlsplit

from ansible_collections.ephemera.workspaces.plugins.module_utils.core import failpoint, renewal, waiter
from ansible_collections.ephemera.workspaces.plugins.module_utils.providers import answers, base

# The API versions azure-mgmt-compute 39.0.0 and azure-mgmt-network 33.1.0 use.
API_VERSIONS = {'compute': '2026-04-01', 'disks': '2026-03-02', 'network': '2026-03-01'}
SCOPE = 'https://management.azure.com/.default'
PENDING = 'pending'
SUCCEEDED = 'succeeded'
MAX_PAGES = 100
# The SDK this client imports when it is first used (and registry.preload before a run forks its workers).
LIBRARIES = ('azure.identity', 'azure.mgmt.compute', 'azure.mgmt.network', 'azure.core.rest')
PENDING_STATES = ('accepted', 'inprogress', 'running', 'creating', 'updating', 'deleting', 'notstarted')
FAILED_STATES = ('failed', 'canceled', 'cancelled')
IN_USE = ('InUseNetworkInterfaceCannotBeDeleted', 'NicInUse', 'PublicIPAddressInUse', 'InUsePublicIpAddressCannotBeDeleted',
          'OperationNotAllowed', 'DiskInUse', 'AnotherOperationInProgress', 'RetryableError')
# What ARM answers (409) to a write or delete under a management lock.
SCOPE_LOCKED = 'ScopeLocked'
NOT_FOUND_CODES = ('ResourceNotFound', 'NotFound', 'ResourceGroupNotFound', 'SubscriptionNotFound',
                   'InvalidSubscriptionId')
# Boot diagnostics (managed storage): retrieveBootDiagnosticsData answers SAS URLs of the VM's serial log and
# screenshot, valid this many minutes (the API takes 1 to 1440; 120 when not said).
SAS_MINUTES = 5
# Where such a URL may point: Azure Storage's blob endpoints of the public cloud, Azure Government and Azure
# operated by 21Vianet (or the Resource Manager the client was given: the try-out cloud serves the blob there).
BLOB_HOST_SUFFIXES = ('.blob.core.windows.net', '.blob.core.usgovcloudapi.net', '.blob.core.chinacloudapi.cn')
# The most of a serial log that is read: its first MiB (a Range request, and the reading stops there whatever the
# server sends). cloud-init prints the host keys at the end of the first boot, far below that.
BOOT_LOG_MAX = answers.MIB


def api_point(method, path):
    """The failpoint of an ARM call that acts, by its method and resource types: ``azure PUT publicIPAddresses``,
    ``azure POST virtualMachines/start``."""
    parts = path.split('?')[0].strip('/').split('/')
    lowered = [p.lower() for p in parts]
    if 'providers' in lowered:
        at = len(lowered) - 1 - lowered[::-1].index('providers')
        types = parts[at + 2:][0::2]
    else:
        types = parts[-1:]
    return 'azure %s %s' % (method.upper(), '/'.join(types))


class OperationFailed(base.TaskFailed):
    """A long-running operation ended Failed or Canceled."""


def judge_async(status, body):
    """PENDING, SUCCEEDED or a failure sentence for one answer of an Azure-AsyncOperation status URL."""
    if status == 202 or status >= 500:
        return PENDING
    if not isinstance(body, dict) or not body.get('status'):
        # An empty status document says nothing: never success.
        return PENDING
    state = str(body['status']).lower()
    if state == 'succeeded':
        return SUCCEEDED
    if state in FAILED_STATES:
        err = body.get('error') or {}
        return 'the operation ended %s%s' % (body['status'], (': %s %s' % (err.get('code'), err.get('message'))
                                                              if err else ''))
    return PENDING


def judge_location(status, body):
    """PENDING, SUCCEEDED or a failure sentence for one answer of a Location polling URL."""
    if status == 202:
        return PENDING
    if status in (200, 201, 204):
        state = str((body or {}).get('status') or '').lower() if isinstance(body, dict) else ''
        if state in PENDING_STATES:
            return PENDING
        if state in FAILED_STATES:
            err = body.get('error') or {}
            return 'the operation ended %s%s' % (body['status'], ': %s' % err.get('message') if err else '')
        return SUCCEEDED
    if status >= 500:
        return PENDING
    return 'the operation answered HTTP %d' % status


def operation_of(status, headers):
    """The polling URLs of an answer to a PUT or DELETE ({'async': url, 'location': url}), or None when the answer
    itself is final (no polling header on a 200, 201 or 204)."""
    heads = {k.lower(): v for k, v in (headers or {}).items()}
    op = {'async': heads.get('azure-asyncoperation'), 'location': heads.get('location')}
    if op['async'] or op['location']:
        return op
    if status == 202:
        # Accepted with nowhere to look: the outcome can only be read from the resource.
        return {'async': None, 'location': None}
    return None


def judge(op, status, body, which):
    return judge_async(status, body) if which == 'async' else judge_location(status, body)


class Answer:
    __slots__ = ('status', 'headers', 'body')

    def __init__(self, status, headers, body):
        self.status = status
        self.headers = headers
        self.body = body


def _body(text):
    if not text:
        return None
    try:
        return json.loads(text)
    except ValueError:
        return None


def arm_error(answer, what):
    """The seam error of an ARM error answer."""
    err = (answer.body or {}).get('error') or {} if isinstance(answer.body, dict) else {}
    code, message = err.get('code') or '', err.get('message') or ''
    text = '%s: HTTP %d %s %s' % (what, answer.status, code, message)
    if answer.status in (401, 403):
        error = base.Refused(text + ' Check the credentials (AZURE_CLIENT_ID, AZURE_TENANT_ID, AZURE_CLIENT_SECRET) '
                                    'and that the principal has a role on the resource group.')
    elif answer.status == 404 or code in NOT_FOUND_CODES:
        error = base.NotFound(text)
    elif answer.status == 429:
        error = base.Transient(text + ' (throttled)')
    elif code == SCOPE_LOCKED:
        # A management lock is not waited out: it stays until someone removes it.
        error = base.Refused(text + ' A management lock (CanNotDelete or ReadOnly) is on the resource, its resource '
                                    'group or the subscription: remove it (az lock list, az lock delete) or ask its '
                                    'owner, then run again.')
    elif code in IN_USE or answer.status == 409:
        error = base.Locked(text)
    elif answer.status >= 500:
        error = base.Transient(text)
    else:
        error = base.Refused(text)
    # The HTTP status ARM answered, for the few callers that tell one error answer from another.
    error.status = answer.status
    return error


def steady(interval):
    """Looks every ``interval`` seconds (a wait on Azure's own pace: it says when to look again, not a backoff)."""
    interval = max(interval, 0.001)
    return waiter.Backoff(start=interval, maximum=interval, factor=1)


class Arm:
    """ARM requests of one subscription (``compute`` and ``network``: the SDK clients whose pipelines carry the
    token; any object with ``send_request`` will do)."""

    def __init__(self, subscription, compute, network, sleep=time.sleep, max_retry_after=30, deadline=120,
                 endpoint=None, ca_file=None, transport=None):
        self.subscription = subscription
        self.compute = compute
        self.network = network
        # Another Resource Manager than Azure's (the try-out cloud), and the CA file that verifies it (None: the
        # system's trust, as the SDK's): the serial log's blob is read with the same.
        self.endpoint = endpoint
        self.ca_file = ca_file
        # A factory of the transport that reads blobs (tests); by default azure-core's RequestsTransport.
        self.transport = transport
        self.sleep = sleep
        self.max_retry_after = max_retry_after
        self.deadline = deadline

    @classmethod
    def connect(cls, subscription, tenant=None, client_id=None, client_secret=None, authority=None, endpoint=None,
                ca_file=None, retry_total=3):
        """Clients of azure-mgmt-compute and azure-mgmt-network with a client-secret credential (or
        DefaultAzureCredential without a secret); ``endpoint``: another Resource Manager (the try-out cloud)."""
        # pylint: disable=import-outside-toplevel
        try:
            from azure.identity import ClientSecretCredential, DefaultAzureCredential
            from azure.mgmt.compute import ComputeManagementClient
            from azure.mgmt.network import NetworkManagementClient
        except ImportError as err:
            raise base.missing_sdk('Azure', ('azure-identity>=1.27', 'azure-mgmt-compute>=39', 'azure-mgmt-network>=33'),
                                   'requirements-azure.txt', err)
        if not subscription:
            raise base.InvalidRequest('No Azure subscription: give azure_subscription_id or AZURE_SUBSCRIPTION_ID.')
        ident = {}
        if authority:
            ident['authority'] = authority
        if endpoint:
            # Not Microsoft's cloud: nothing to discover.
            ident['disable_instance_discovery'] = True
        if ca_file:
            ident['connection_verify'] = ca_file
        if client_secret:
            if not (tenant and client_id):
                raise base.InvalidRequest('A client secret needs its tenant and client id: give azure_tenant_id and '
                                          'azure_client_id (or AZURE_TENANT_ID and AZURE_CLIENT_ID).')
            credential = ClientSecretCredential(tenant, client_id, client_secret, **ident)
        else:
            credential = DefaultAzureCredential(**{k: v for k, v in ident.items() if k != 'connection_verify'})
        options = {'retry_total': retry_total}
        if endpoint:
            options['base_url'] = endpoint.rstrip('/')
            options['credential_scopes'] = [SCOPE]
        if ca_file:
            options['connection_verify'] = ca_file
        return cls(subscription, ComputeManagementClient(credential, subscription, **options),
                   NetworkManagementClient(credential, subscription, **options), endpoint=endpoint, ca_file=ca_file)

    def _client(self, path):
        return self.network if '/microsoft.network/' in path.lower() else self.compute

    def send(self, method, path, version=None, body=None, acts=False, what=None):
        """One request; an :class:`Answer` for any HTTP answer below 400 (and 404 for a DELETE), else the seam's
        error. Throttling is waited out (Retry-After) up to the deadline. A connection lost after the request went
        out is UnknownOutcome for a request that acts, Transient otherwise."""
        # pylint: disable=import-outside-toplevel
        from azure.core.exceptions import ClientAuthenticationError, ServiceRequestError, ServiceResponseError
        from azure.core.rest import HttpRequest
        what = what or '%s %s' % (method, path.split('?')[0])
        params = {} if version is None or 'api-version=' in path else {'api-version': version}
        started = time.monotonic()
        while True:
            if acts:
                renewal.check()  # a step that lost its claim acts no more
            request = HttpRequest(method, path, params=params, json=body) if body is not None else \
                HttpRequest(method, path, params=params)
            try:
                # Streamed, so that the answer is read here up to CLOUD_ANSWER_MAX and never further.
                response = self._client(path).send_request(request, stream=True)
                try:
                    sent = getattr(getattr(response, 'request', None), 'url', None) or request.url
                    text = answers.read_bounded(response.iter_bytes(), answers.CLOUD_ANSWER_MAX, sent,
                                                response.headers).decode('utf-8', 'replace')
                finally:
                    response.close()
            except answers.AnswerTooLarge as err:
                # A repeat would get the same: a read is refused; a request that acts may have been carried out.
                if acts:
                    raise base.UnknownOutcome('%s: %s (azure_endpoint_url). It may have been carried out: look before '
                                              'repeating it.' % (what, err))
                raise base.Refused('%s: %s (azure_endpoint_url).' % (what, err))
            except ClientAuthenticationError as err:
                raise base.Refused('Azure refused the credentials: %s. Check AZURE_TENANT_ID, AZURE_CLIENT_ID and '
                                   'AZURE_CLIENT_SECRET (or what DefaultAzureCredential finds).'
                                   % str(err).splitlines()[0])
            except ServiceRequestError as err:
                raise base.Transient('%s did not reach Azure: %s' % (what, str(err).splitlines()[0]))
            except ServiceResponseError as err:
                cls = base.UnknownOutcome if acts else base.Transient
                raise cls('%s: the answer was lost (%s)%s' % (what, str(err).splitlines()[0],
                                                              '; look before repeating it' if acts else ''))
            answer = Answer(response.status_code, dict(response.headers), _body(text))
            if acts and answer.status < 400:
                # Azure acted (or accepted the request); the record does not know yet.
                failpoint.reached(api_point(method, path))
            if answer.status == 429:
                wait = min(float(answer.headers.get('Retry-After') or 1), self.max_retry_after)
                if time.monotonic() - started + wait < self.deadline:
                    self.sleep(wait)
                    continue
            if answer.status < 400:
                return answer
            raise arm_error(answer, what)

    def get(self, path, version):
        """The document at ``path``, or None for 404."""
        try:
            return self.send('GET', path, version).body
        except base.NotFound:
            return None

    def list(self, path, version):
        """Every item of a list, every page (nextLink) followed. IncompleteInventory when a link comes again, more
        than MAX_PAGES pages come, or a later page fails: a partial listing confirms nothing."""
        out, url, seen = [], path, set()
        while url:
            if len(seen) >= MAX_PAGES:
                raise base.IncompleteInventory('Listing %s went on for more than %d pages; the inventory is incomplete '
                                               'and confirms nothing. Retry later.' % (path, MAX_PAGES))
            seen.add(url)
            try:
                body = self.send('GET', url, None if 'api-version=' in url else version).body or {}
            except base.ProviderError as err:
                if len(seen) == 1:
                    raise
                raise base.IncompleteInventory('Listing %s failed on page %d (%s); the inventory is incomplete and '
                                               'confirms nothing. Retry later.' % (path, len(seen), err))
            out.extend(body.get('value') or [])
            url = body.get('nextLink')
            if url in seen:
                raise base.IncompleteInventory('Listing %s gave the link of an earlier page again (page %d); the '
                                               'inventory is incomplete and confirms nothing. Retry later.'
                                               % (path, len(seen)))
        return out

    def poll(self, op):
        """One look at a long-running operation: PENDING, SUCCEEDED or a failure sentence. The status document is
        preferred where the answer named both."""
        which = 'async' if op.get('async') else 'location'
        url = op.get(which)
        if not url:
            return PENDING
        try:
            answer = self.send('GET', url, what='polling the operation')
        except base.NotFound:
            return 'the operation is unknown to Azure (HTTP 404)'
        except base.Refused as err:
            return str(err)
        return judge(op, answer.status, answer.body, which)

    def wait(self, op, timeout, interval=1.0, what='an Azure operation'):
        """Poll ``op`` until it ends: None on success, OperationFailed on failure, TaskTimeout at the deadline.
        ``what`` names it in the progress lines and the timeout."""
        def probe(remaining):
            verdict = self.poll(op)
            if verdict == SUCCEEDED:
                return waiter.done()
            return waiter.pending() if verdict == PENDING else waiter.failed(verdict)

        result = waiter.wait_for(probe, timeout, steady(interval), sleep=self.sleep, what=what)
        if result.ok:
            return None
        if result.outcome == waiter.FAILED:
            raise OperationFailed(result.value)
        err = base.TaskTimeout('%s was still running after %d s. Check it in the resource group\'s activity log, '
                               'then run again: the next run looks at it again.' % (what[:1].upper() + what[1:], timeout))
        err.task_id = op.get('async') or op.get('location')
        raise err

    # ------------------------------------------------------------------ boot diagnostics
    def boot_log_url(self, vm_path, version):
        """The SAS URL of the serial log of the VM at ``vm_path`` (retrieveBootDiagnosticsData, valid SAS_MINUTES),
        or None when Azure names none. The URL is a credential: it is returned to the caller only, never put in a
        message."""
        try:
            answer = self.send('POST', '%s/retrieveBootDiagnosticsData?sasUriExpirationTimeInMinutes=%d'
                               % (vm_path, SAS_MINUTES), version,
                               what='retrieveBootDiagnosticsData of VM %s' % vm_path.rstrip('/').rsplit('/', 1)[-1])
        except base.Locked as err:
            # 409 Conflict (OperationNotAllowed): the VM has no boot diagnostics data to give yet (or none enabled):
            # no link yet, as a log not written yet; the caller keeps waiting up to its own timeout.
            if getattr(err, 'status', None) == 409:
                return None
            raise
        url = (answer.body or {}).get('serialConsoleLogBlobUri') if isinstance(answer.body, dict) else None
        return url or None

    def read_blob(self, url, limit=BOOT_LOG_MAX):
        """The first ``limit`` bytes of the blob at SAS URL ``url`` (text), or None while it is not there (404).
        Read with a plain GET: the SAS is the authorization, no Authorization header is ever sent (not the bearer
        token of Resource Manager, nor one of a .netrc). Only an https URL on an Azure blob host (or on the very
        host and port of the given Resource Manager) is read; TLS is verified as the SDK's clients verify it."""
        host = blob_host(url, self.endpoint)
        # pylint: disable=import-outside-toplevel
        from azure.core.exceptions import AzureError
        from azure.core.rest import HttpRequest
        request = HttpRequest('GET', url, headers={'Range': 'bytes=0-%d' % (limit - 1)})
        transport = (self.transport or _blob_transport)(self.ca_file)
        try:
            with transport:
                response = transport.send(request, stream=True, read_timeout=60, connection_timeout=30)
                try:
                    status = response.status_code
                    if status == 404:
                        return None
                    if status >= 400:
                        heads = {k.lower(): v for k, v in dict(response.headers).items()}
                        text = 'The serial log at %s answered HTTP %d %s' % (host, status,
                                                                             heads.get('x-ms-error-code') or '')
                        if status in (401, 403):
                            raise base.Refused(text.rstrip() + ' (the link may have expired).')
                        raise (base.Transient if status >= 500 or status == 429 else base.Refused)(text.rstrip())
                    data = bytearray()
                    for chunk in response.iter_bytes():
                        data.extend(chunk[:limit - len(data)])
                        if len(data) >= limit:
                            break
                finally:
                    response.close()
        except AzureError as err:
            # The error's text may hold the URL with its signature: only the host and the kind are said.
            raise base.Transient('The serial log at %s could not be read (%s).' % (host, type(err).__name__))
        return bytes(data).decode('utf-8', 'replace')


def _blob_transport(ca_file):
    """azure-core's requests transport without any Authorization header (its session's auth removes one, so
    neither a token nor a .netrc entry is ever sent), verifying TLS with ``ca_file`` or the system's trust."""
    # pylint: disable=import-outside-toplevel
    import requests
    from azure.core.pipeline.transport import RequestsTransport

    def no_authorization(request):
        request.headers.pop('Authorization', None)
        return request
    session = requests.Session()
    session.auth = no_authorization
    return RequestsTransport(session=session, session_owner=True, connection_verify=ca_file or True)


def blob_host(url, endpoint=None):
    """The host of a serial log's SAS URL when it may be read: https, on an Azure blob host (BLOB_HOST_SUFFIXES)
    or on the very host and port of ``endpoint`` (the Resource Manager the client was given); else Refused naming
    the host (never the URL: it holds the signature)."""
    try:
        parts = urlsplit(str(url or ''))
        host, port = (parts.hostname or '').lower(), parts.port or 443
    except ValueError:
        raise base.Refused('The serial log link Azure answered is not a URL; it was not read.')
    if parts.scheme != 'https':
        raise base.Refused('The serial log link Azure answered is not https (host %s); it was not read.'
                           % (host or 'none'))
    if host.endswith(BLOB_HOST_SUFFIXES) and parts.port in (None, 443) and '@' not in parts.netloc:
        return host
    if endpoint:
        ours = urlsplit(endpoint)
        if (ours.hostname or '').lower() == host and (ours.port or 443) == port and '@' not in parts.netloc:
            return '%s:%d' % (host, port)
    where = '%s:%d' % (host, port) if port != 443 else host
    raise base.Refused('The serial log link Azure answered points at %s, which is no Azure blob host (%s) nor the '
                       'Resource Manager of azure_endpoint_url; it was not read.'
                       % (where, ', '.join('*' + s for s in BLOB_HOST_SUFFIXES)))


def option(params, name, env, environ=None):
    environ = os.environ if environ is None else environ
    value = params.get(name)
    if value:
        return value
    for key in env:
        if environ.get(key):
            return environ[key]
    return None
