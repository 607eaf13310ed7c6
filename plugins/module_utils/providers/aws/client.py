# -*- coding: utf-8 -*-
# Copyright: ephemera.workspaces contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""EC2 calls in the provider seam's terms: one boto3 client, its errors mapped onto the seam's kinds, retries with
backoff where a retry is safe, and reads that follow every page or say they are incomplete.

boto3 is imported here, when an AWS provider is made: never at the import of shared code.

Error mapping (docs/aws.md has the table): throttling (RequestLimitExceeded, Throttling) and 5xx are transient
and retried with backoff up to ``retry_timeout``; a connection that failed before the request went out is
transient; a timeout or reset after it went out is an unknown outcome for a call that acts (reads are retried);
``*.NotFound`` of an instance id is not found; everything else is a refusal with AWS's message and what to do.
"""

import random
import re
import time

from ansible_collections.ephemera.workspaces.plugins.module_utils.core import failpoint
from ansible_collections.ephemera.workspaces.plugins.module_utils.core import renewal
from ansible_collections.ephemera.workspaces.plugins.module_utils.providers import base

# Environment variables of the options that are not AWS's own (AWS's own are read by boto3 itself as well).
ENDPOINT_ENV = ('EPHEMERA_AWS_ENDPOINT_URL', 'AWS_ENDPOINT_URL_EC2', 'AWS_ENDPOINT_URL')
REGION_ENV = ('AWS_REGION', 'AWS_DEFAULT_REGION')
# A read that follows more pages than this is incomplete.
MAX_PAGES = 100
THROTTLING = ('RequestLimitExceeded', 'Throttling', 'ThrottlingException', 'TooManyRequestsException',
              'RequestThrottled', 'RequestThrottledException', 'SlowDown')
SERVER_ERRORS = ('InternalError', 'InternalFailure', 'ServiceUnavailable', 'Unavailable')
NOT_FOUND = ('InvalidInstanceID.NotFound',)
# Refusals whatever the HTTP status says (InsufficientInstanceCapacity comes as a server error).
DEFINITE = ('InvalidParameterValue', 'UnauthorizedOperation', 'InsufficientInstanceCapacity')
CREDENTIALS = ('AuthFailure', 'InvalidClientTokenId', 'UnrecognizedClientException', 'SignatureDoesNotMatch',
               'ExpiredToken', 'RequestExpired')
# What to do about a refusal, by error code (prefix match for the families).
HINTS = (
    ('InvalidAMIID', 'Give the id of an AMI this account can launch in this region (aws ec2 describe-images), or an '
                     'SSM parameter name (resolve:ssm:/aws/service/...).'),
    ('InvalidSubnetID', 'Give a subnet id of this region (aws ec2 describe-subnets).'),
    ('InvalidGroup', 'Give security group ids of the subnet\'s VPC (aws ec2 describe-security-groups).'),
    ('InvalidKeyPair', 'Give the name of a key pair of this region (aws ec2 describe-key-pairs), or leave aws_key_name '
                       'unset and give aws_ssh_public_key.'),
    ('InvalidInstanceType', 'Give an instance type offered in this region (aws ec2 describe-instance-types).'),
    ('InsufficientInstanceCapacity', 'AWS has no capacity for this instance type here now: try another instance '
                                     'type or subnet (availability zone), or retry later.'),
    ('UnauthorizedOperation', 'Grant the credentials the actions of the IAM policy in docs/quickstart-aws.md.'),
    ('AuthFailure', 'Check the credentials (AWS_PROFILE, or AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY).'),
    ('InvalidClientTokenId', 'Check the credentials (AWS_PROFILE, or AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY).'),
    ('ExpiredToken', 'The session token expired: get new credentials.'),
    ('InvalidParameterValue', 'Correct the value AWS names.'),
    ('IdempotentParameterMismatch', 'The client token was used for another request: destroy the workspace and '
                                    'create it again.'),
    ('OptInRequired', 'Subscribe the account to the region or the AMI first.'),
)


IncompleteInventory = base.IncompleteInventory


# The SDK this client imports when it is first used (and registry.preload before a run forks its workers).
LIBRARIES = ('boto3', 'botocore.config', 'botocore.exceptions', 'botocore.parsers')


def _botocore():
    import botocore.config  # noqa: F401 (imported when the provider is used)
    import botocore.exceptions
    import botocore.parsers  # noqa: F401 (its ResponseParserError: an answer that is not an EC2 answer)
    return botocore


def known_regions():
    """Every EC2 region botocore knows, in every partition."""
    import boto3
    session = boto3.session.Session()
    regions = set()
    for partition in session.get_available_partitions():
        regions.update(session.get_available_regions('ec2', partition_name=partition))
    return regions


REGION_FORM = re.compile(r'^[a-z]{2}(-[a-z]+)+-\d+$')


def check_region(region, endpoint_url=None):
    """Refused unless ``region`` is an EC2 region botocore knows (also with an endpoint URL of its own)."""
    if not region:
        raise base.InvalidRequest('No AWS region: set aws_region (or the environment variable AWS_REGION).')
    if not REGION_FORM.match(region) or region not in known_regions():
        raise base.InvalidRequest('Unknown AWS region %r. Give an EC2 region such as us-east-1 or eu-central-1 '
                                  '(aws ec2 describe-regions lists the account\'s).' % (region,))


class Ec2:
    """The EC2 calls of one region. ``retry_timeout``: how long throttling and server errors are ridden out."""

    def __init__(self, region, profile=None, access_key=None, secret_key=None, session_token=None, endpoint_url=None,
                 retry_timeout=60, request_timeout=30, sleep=time.sleep):
        try:
            import boto3
            botocore = _botocore()
        except ImportError as err:
            raise base.missing_sdk('AWS', ('boto3>=1.28',), 'requirements-aws.txt', err)
        check_region(region, endpoint_url)
        self.region = region
        self.endpoint_url = endpoint_url
        self.retry_timeout = retry_timeout
        self.sleep = sleep
        self._errors = botocore.exceptions
        self._garbled = botocore.parsers.ResponseParserError
        try:
            session = boto3.session.Session(profile_name=profile or None, aws_access_key_id=access_key or None,
                                            aws_secret_access_key=secret_key or None,
                                            aws_session_token=session_token or None, region_name=region)
        except self._errors.ProfileNotFound:
            raise base.InvalidRequest('AWS profile %r is not configured (~/.aws/config, ~/.aws/credentials). Give an '
                                      'existing profile, or credentials in AWS_ACCESS_KEY_ID and '
                                      'AWS_SECRET_ACCESS_KEY.' % (profile,))
        if session.get_credentials() is None:
            raise base.InvalidRequest('No AWS credentials: set AWS_PROFILE, or AWS_ACCESS_KEY_ID and '
                                      'AWS_SECRET_ACCESS_KEY (and AWS_SESSION_TOKEN for temporary ones), or the options '
                                      'aws_profile / aws_access_key_id and aws_secret_access_key.')
        # Our own retries only: botocore's would hide a throttled or lost answer from the journal.
        config = botocore.config.Config(retries={'total_max_attempts': 1}, connect_timeout=min(10, request_timeout),
                                        read_timeout=request_timeout)
        self.session = session
        self.config = config
        self.client = session.client('ec2', endpoint_url=endpoint_url or None, config=config)

    def ssm_parameter(self, name):
        """The value of the SSM parameter ``name`` (an AMI id's public parameter, say)."""
        ssm = self.session.client('ssm', endpoint_url=self.endpoint_url or None, config=self.config)
        try:
            return ssm.get_parameter(Name=name)['Parameter']['Value']
        except Exception as exc:
            err = self.error(exc, 'GetParameter', False)
            if err is None:
                raise
            raise err

    @property
    def where(self):
        return self.endpoint_url or 'EC2 in %s' % self.region

    # ------------------------------------------------------------------------------- errors

    def error(self, exc, action, acts):
        """The seam's error for ``exc`` raised by ``action``; ``acts``: the call changes something."""
        errors = self._errors
        if isinstance(exc, errors.ClientError):
            info = exc.response.get('Error') or {}
            code = info.get('Code') or ''
            message = info.get('Message') or str(exc)
            status = (exc.response.get('ResponseMetadata') or {}).get('HTTPStatusCode') or 0
            text = '%s: %s (%s)' % (action, message, code)
            definite = code in DEFINITE or code.startswith('InvalidAMIID')
            if code in THROTTLING:
                return _with(base.Transient('%s; AWS throttled the request.' % text), code, message)
            if not definite and (code in SERVER_ERRORS or status >= 500):
                return _with(base.Transient('%s; AWS answered with a server error (%s).' % (text, status)), code,
                             message)
            if code in NOT_FOUND:
                return _with(base.NotFound(text), code, message)
            if code == 'IdempotentParameterMismatch':
                return _with(base.Conflict('%s. %s' % (text, _hint(code))), code, message)
            hint = _hint(code)
            return _with(base.Refused('%s.%s' % (text, ' ' + hint if hint else '')), code, message)
        if isinstance(exc, (errors.NoCredentialsError, errors.PartialCredentialsError)):
            return base.InvalidRequest('%s: no usable AWS credentials (%s). Set AWS_PROFILE, or AWS_ACCESS_KEY_ID and '
                                       'AWS_SECRET_ACCESS_KEY.' % (action, exc))
        if isinstance(exc, (errors.EndpointConnectionError, errors.ConnectTimeoutError)) and not isinstance(
                exc, errors.ConnectionClosedError):
            err = base.Transient('%s: %s does not answer (%s). Check aws_endpoint_url (or AWS_ENDPOINT_URL), the '
                                 'network and the proxy, then rerun.' % (action, self.where, exc))
            err.transport = 'connect'
            return err
        if isinstance(exc, (errors.ReadTimeoutError, errors.ConnectionClosedError, errors.ConnectionError,
                            errors.ResponseStreamingError)):
            kind = base.UnknownOutcome if acts else base.Transient
            err = kind('%s: the request went out and no answer came back from %s (%s)%s.'
                       % (action, self.where, exc, '; it may have been carried out' if acts else ''))
            err.transport = 'timeout' if isinstance(exc, errors.ReadTimeoutError) else 'reset'
            return err
        if isinstance(exc, self._garbled):
            kind = base.UnknownOutcome if acts else base.Transient
            err = kind('%s: %s answered with something that is not an EC2 answer (%s)%s.'
                       % (action, self.where, str(exc).splitlines()[0][:200], '; it may have been carried out' if acts
                          else ''))
            err.transport = 'garbled'
            return err
        if isinstance(exc, errors.ParamValidationError):
            return base.InvalidRequest('%s: %s' % (action, exc))
        return None

    # -------------------------------------------------------------------------------- calls

    def call(self, operation, acts=False, **kwargs):
        """The answer of one EC2 call, transient failures retried with backoff for up to ``retry_timeout`` seconds
        (an unknown outcome of a call that acts is raised at once: look before repeating it)."""
        deadline = time.monotonic() + self.retry_timeout
        delay = 0.2
        attempts = 0
        while True:
            attempts += 1
            if acts:
                renewal.check()  # a step that lost its claim acts no more
            try:
                answer = getattr(self.client, operation)(**kwargs)
            except Exception as exc:  # botocore's errors have no common base worth naming
                err = self.error(exc, operation, acts)
                if err is None:
                    raise
                retry = isinstance(err, base.Transient) and not (err.transport == 'connect' and attempts >= 3)
                if not retry or time.monotonic() + delay > deadline:
                    if isinstance(err, base.Transient) and attempts > 1:
                        err.message += ' (%d attempts in %d s)' % (attempts, self.retry_timeout)
                    raise err
                self.sleep(delay * (1 + random.random() * 0.3))
                delay = min(delay * 2, 5.0)
                continue
            if acts:
                # The cloud acted and the journal does not know yet: a crash-safety test can kill the run here.
                failpoint.reached(api_point(operation))
            return answer

    def describe_instances(self, **kwargs):
        """Every instance of a DescribeInstances read, following every page; duplicates kept (a caller checks for
        ambiguity). IncompleteInventory when a token repeats, more than MAX_PAGES pages come, or a later page fails."""
        found = []
        seen = set()
        token = None
        pages = 0
        while True:
            pages += 1
            if pages > MAX_PAGES:
                raise IncompleteInventory('DescribeInstances returned more than %d pages; the inventory is incomplete '
                                          'and confirms nothing. Narrow the filters, or retry later.' % MAX_PAGES)
            args = dict(kwargs, NextToken=token) if token else kwargs
            try:
                answer = self.call('describe_instances', **args)
            except base.NotFound:
                raise
            except base.ProviderError as err:
                if pages == 1:
                    raise
                raise IncompleteInventory('DescribeInstances failed on page %d (%s); the inventory is incomplete and '
                                          'confirms nothing. Retry later.' % (pages, err))
            for reservation in answer.get('Reservations') or []:
                found.extend(reservation.get('Instances') or [])
            token = answer.get('NextToken')
            if not token:
                return found
            if token in seen:
                raise IncompleteInventory('DescribeInstances returned the pagination token of an earlier page again '
                                          '(page %d); the inventory is incomplete and confirms nothing. Retry later.'
                                          % pages)
            seen.add(token)


def api_point(operation):
    """The failpoint of an EC2 call that acts, by its API name: ``aws RunInstances``."""
    return 'aws %s' % ''.join(word.title() for word in operation.split('_'))


def _with(err, code, message):
    err.code = code
    err.aws_message = message
    return err


def _hint(code):
    for prefix, hint in HINTS:
        if code.startswith(prefix):
            return hint
    return ''
