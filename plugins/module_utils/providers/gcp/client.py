# -*- coding: utf-8 -*-
# Copyright: ephemera.workspaces contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Compute Engine calls in the provider seam's terms: google-cloud-compute's REST clients for one project and zone,
their errors mapped onto the seam's kinds, retries with backoff where a retry is safe, and zone operations waited on
directly (the library's operation helpers ignore a custom endpoint, so every call that acts is a ``*_unary`` one).

google-cloud-compute and google-auth are imported here, when a GCP provider is made: never at the import of shared
code.

Error mapping (docs/gcp.md has the table): 429 and 5xx are transient and retried with backoff up to
``retry_timeout`` (a call that acts is retried only with its request id, so that Compute Engine takes a repeat as the
same request); a connection that failed before the request went out is transient; a timeout or reset after it went
out is an unknown outcome for a call that acts (reads are retried); 404 is not found; 409 is a conflict; 412 (a label
fingerprint that changed) is a conflict too; 401 and 403 are refusals that say to check the credentials or grant the
permission; everything else is a refusal with Compute Engine's message.
"""

import importlib
import os
import random
import time

from ansible_collections.ephemera.workspaces.plugins.module_utils.core import failpoint
from ansible_collections.ephemera.workspaces.plugins.module_utils.core import renewal
from ansible_collections.ephemera.workspaces.plugins.module_utils.providers import answers, base

ENDPOINT_ENV = ('EPHEMERA_GCP_ENDPOINT_URL',)
PROJECT_ENV = ('GOOGLE_CLOUD_PROJECT', 'CLOUDSDK_CORE_PROJECT', 'GCP_PROJECT')
ZONE_ENV = ('EPHEMERA_GCP_ZONE', 'CLOUDSDK_COMPUTE_ZONE')
CREDENTIALS_ENV = 'GOOGLE_APPLICATION_CREDENTIALS'
SCOPE = 'https://www.googleapis.com/auth/compute'
MAX_PAGES = 100


# The SDK this client imports when it is first used (and registry.preload before a run forks its workers).
LIBRARIES = ('google.api_core.client_options', 'google.api_core.exceptions', 'google.auth', 'google.auth.credentials',
             'google.auth.exceptions', 'google.cloud.compute_v1')


def _google():
    """The google packages, imported when a provider is used."""
    try:
        for library in LIBRARIES:
            importlib.import_module(library)
        import google
    except ImportError as err:
        raise base.missing_sdk('Compute Engine', ('google-cloud-compute>=1.57',), 'requirements-gcp.txt', err)
    return google


def credentials(kind, path=None, environ=None):
    """Credentials the Google way: ``anonymous`` (a local fake only), ``serviceaccount`` from ``path`` (or
    GOOGLE_APPLICATION_CREDENTIALS), ``application`` (application default credentials). Refused, saying what to do,
    when none can be had; the message never holds a key."""
    google = _google()
    environ = os.environ if environ is None else environ
    if kind == 'anonymous':
        return google.auth.credentials.AnonymousCredentials()
    if kind == 'serviceaccount':
        path = path or environ.get(CREDENTIALS_ENV)
        if not path:
            raise base.InvalidRequest('gcp_auth_kind is serviceaccount and no key file is given: set '
                                      'gcp_service_account_file or %s.' % CREDENTIALS_ENV)
        if not os.path.isfile(path):
            raise base.InvalidRequest('The service-account key file %s does not exist: give the path of a JSON key '
                                      '(gcp_service_account_file or %s).' % (path, CREDENTIALS_ENV))
        from google.oauth2 import service_account
        try:
            return service_account.Credentials.from_service_account_file(path, scopes=[SCOPE])
        except (ValueError, KeyError, TypeError) as err:
            raise base.InvalidRequest('The file %s is not a service-account key Google accepts (%s): download a JSON '
                                      'key of the service account again.' % (path, type(err).__name__))
    if kind == 'application' and path:
        # A credentials file that was given (a service-account key, a gcloud user's ADC file, or the key AWX's Google
        # Compute Engine credential writes) is the one used: application default credentials might look elsewhere.
        if not os.path.isfile(path):
            raise base.InvalidRequest('The credentials file %s does not exist: give the path of a JSON key '
                                      '(gcp_service_account_file or %s).' % (path, CREDENTIALS_ENV))
        try:
            found, dummy = google.auth.load_credentials_from_file(path, scopes=[SCOPE])
        except google.auth.exceptions.DefaultCredentialsError as err:
            raise base.InvalidRequest('The file %s is not a credentials file Google accepts (%s): download a JSON '
                                      'key of the service account again.' % (path, type(err).__name__))
        return found
    if kind == 'application':
        try:
            found, dummy = google.auth.default(scopes=[SCOPE])
        except google.auth.exceptions.DefaultCredentialsError:
            raise base.InvalidRequest('No application default credentials: run gcloud auth application-default login, '
                                      'set %s, or give gcp_service_account_file.' % CREDENTIALS_ENV)
        return found
    raise base.InvalidRequest('gcp_auth_kind %r is not one of application, serviceaccount, anonymous.' % (kind,))


def api_point(operation):
    """The failpoint of a Compute Engine call that acts: ``gcp instances.insert``."""
    return 'gcp %s' % operation


class Compute:
    """The Compute Engine calls of one project and zone. ``endpoint``: an API endpoint of its own (a local fake:
    http://127.0.0.1:PORT); ``retry_timeout``: how long rate limits and server errors are ridden out."""

    def __init__(self, project, zone, creds, endpoint=None, retry_timeout=60, request_timeout=30, sleep=time.sleep):
        google = _google()
        if not project:
            raise base.InvalidRequest('No GCP project: set gcp_project (or GOOGLE_CLOUD_PROJECT).')
        if not zone:
            raise base.InvalidRequest('No GCP zone: set gcp_zone (or EPHEMERA_GCP_ZONE), such as europe-west1-b.')
        self.project = project
        self.zone = zone
        self.endpoint = endpoint
        self.retry_timeout = retry_timeout
        self.request_timeout = request_timeout
        self.sleep = sleep
        self._exc = google.api_core.exceptions
        self._auth_exc = google.auth.exceptions
        self.types = google.cloud.compute_v1
        options = google.api_core.client_options.ClientOptions(api_endpoint=endpoint) if endpoint else None
        kw = dict(transport='rest', credentials=creds, client_options=options)
        compute_v1 = google.cloud.compute_v1
        self.instances = compute_v1.InstancesClient(**kw)
        self.operations = compute_v1.ZoneOperationsClient(**kw)
        self.zones = compute_v1.ZonesClient(**kw)
        self.machine_types = compute_v1.MachineTypesClient(**kw)
        self.images = compute_v1.ImagesClient(**kw)
        self.networks = compute_v1.NetworksClient(**kw)
        # Every answer is read up to CLOUD_ANSWER_MAX, never further (providers/answers.py): the REST transports'
        # requests sessions read the body themselves otherwise.
        for api in (self.instances, self.operations, self.zones, self.machine_types, self.images, self.networks):
            answers.bound_session(api.transport._session, answers.CLOUD_ANSWER_MAX)  # pylint: disable=protected-access

    # ------------------------------------------------------------------------------- calls

    def _error(self, err, what, acts):
        """The seam's error for a library exception ``err`` of the call ``what``."""
        exc = self._exc
        if isinstance(err, answers.AnswerTooLarge):
            # A repeat would get the same: a read is refused; a call that acts may have been carried out.
            if acts:
                return base.UnknownOutcome('%s: %s (gcp_endpoint_url). It may have been carried out: look before '
                                           'repeating it.' % (what, err))
            return base.Refused('%s: %s (gcp_endpoint_url).' % (what, err))
        message = getattr(err, 'message', None) or str(err)
        code = getattr(err, 'code', None)
        if isinstance(err, self._auth_exc.GoogleAuthError):
            return base.Refused('%s: the credentials were not accepted (%s). Check gcp_auth_kind and the key file '
                                '(gcp_service_account_file or %s).' % (what, type(err).__name__, CREDENTIALS_ENV))
        if isinstance(err, exc.NotFound):
            return base.NotFound('%s: %s' % (what, message))
        if isinstance(err, (exc.Conflict, exc.PreconditionFailed)):
            return base.Conflict('%s: %s' % (what, message))
        if isinstance(err, exc.TooManyRequests) or (isinstance(code, int) and code >= 500):
            return base.Transient('%s: Compute Engine answered %s (%s).' % (what, code, message))
        if isinstance(err, exc.Unauthorized):
            return base.Refused('%s: the credentials were refused (401: %s). Check the key file or the application '
                                'default credentials.' % (what, message))
        if isinstance(err, exc.Forbidden):
            return base.Refused('%s: permission denied (403: %s). Grant the service account the permissions in '
                                'docs/gcp.md (roles/compute.instanceAdmin.v1 holds them).' % (what, message))
        if isinstance(err, exc.GoogleAPICallError):
            return base.Refused('%s: Compute Engine refused it (%s: %s).' % (what, code, message))
        if not _no_answer(err):
            return None
        # No answer: a connection error, a timeout, a reset, an answer that does not parse.
        text = '%s: no usable answer from Compute Engine (%s).' % (what, type(err).__name__)
        if acts and not _before_sending(err):
            return base.UnknownOutcome(text + ' It may have been carried out: look before repeating it.')
        result = base.Transient(text)
        result.transport = type(err).__name__
        return result

    def call(self, what, fn, acts=False, repeatable=False, **kwargs):
        """``fn(**kwargs)`` with the seam's errors; transient failures retried with backoff until ``retry_timeout``
        for reads and for calls that act with a request id (``repeatable``)."""
        deadline = time.monotonic() + self.retry_timeout
        delay = 0.5
        while True:
            if acts:
                renewal.check()  # a step that lost its claim acts no more
            try:
                answer = fn(timeout=self.request_timeout, retry=None, **kwargs)
            except Exception as err:  # pylint: disable=broad-except
                mapped = self._error(err, what, acts)
                if mapped is None:
                    raise
                retry = mapped.error_kind == base.TRANSIENT or (mapped.error_kind == base.UNKNOWN_OUTCOME and repeatable)
                if retry and time.monotonic() + delay < deadline:
                    self.sleep(delay + random.uniform(0, delay / 2))
                    delay = min(delay * 2, 8.0)
                    continue
                raise mapped
            if acts:
                # The cloud acted and the journal does not know yet: a crash-safety test can kill the run here.
                failpoint.reached(api_point(what))
            return answer

    # ------------------------------------------------------------------------------ helpers

    def get_instance(self, name):
        """The instance ``name`` (a compute_v1.Instance), or None on 404."""
        try:
            return self.call('instances.get', self.instances.get, project=self.project, zone=self.zone,
                             instance=name)
        except base.NotFound:
            return None

    def guest_attributes(self, name, query_path):
        """The guest attributes of instance ``name`` under ``query_path`` (``hostkeys/``: a namespace) as
        (namespace, key, value) tuples; [] on 404, which Compute Engine answers while nothing is written there yet
        (or guest attributes are not enabled on the instance)."""
        try:
            request = self.types.GetGuestAttributesInstanceRequest(project=self.project, zone=self.zone,
                                                                   instance=name, query_path=query_path)
            answer = self.call('instances.getGuestAttributes', self.instances.get_guest_attributes, request=request)
        except base.NotFound:
            return []
        return [(e.namespace, e.key, e.value) for e in answer.query_value.items]

    def list_instances(self, label_filter=None):
        """Every instance of the zone (``label_filter``: a filter expression), every page read; IncompleteInventory
        otherwise."""
        found = []
        token = ''
        seen = set()
        for dummy in range(MAX_PAGES):
            request = self.types.ListInstancesRequest(project=self.project, zone=self.zone, page_token=token,
                                                      max_results=500)
            if label_filter:
                request.filter = label_filter
            try:
                page = self.call('instances.list', self._list_page, request=request)
            except base.ProviderError as err:
                if found:
                    raise IncompleteInventory('instances.list failed on a later page: %s' % err)
                raise
            found.extend(page.items)
            token = page.next_page_token
            if not token:
                return found
            if token in seen:
                raise IncompleteInventory('instances.list repeated a page token: the listing is incomplete.')
            seen.add(token)
        raise IncompleteInventory('instances.list went on for more than %d pages.' % MAX_PAGES)

    def _list_page(self, request, timeout=None, retry=None):
        # One page (the pager's own iteration would fetch further pages outside call()).
        pager = self.instances.list(request=request, timeout=timeout, retry=retry)
        return pager._response  # pylint: disable=protected-access

    def operation(self, name):
        """One look at a zone operation."""
        return self.call('zoneOperations.get', self.operations.get, project=self.project, zone=self.zone,
                         operation=name)


IncompleteInventory = base.IncompleteInventory


def _no_answer(err):
    """True when ``err`` is a failure to get an answer (a connection, a timeout, an answer that does not parse), not a
    mistake in the call."""
    import requests
    return isinstance(err, (requests.exceptions.RequestException, ConnectionError, TimeoutError, ValueError)) or \
        type(err).__name__ in ('TransportError', 'RetryError')


def _before_sending(err):
    """True when ``err`` says the request never left (a refused connection, a name that did not resolve)."""
    text = repr(err)
    return 'ConnectionRefused' in text or 'NewConnectionError' in text or 'NameResolution' in text
