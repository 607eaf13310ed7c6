"""A Compute Engine fake for the try-out cloud: the v1 REST paths the GCP provider uses, over plain-HTTP loopback, with
zone operations, request ids, labels with fingerprints, scheduling (an instance past its ``terminationTime`` or
``maxRunDuration`` is deleted or stopped, as its ``instanceTerminationAction`` says, at the next tick or request),
serial port output, testIamPermissions, guest attributes (getGuestAttributes, written by the guest through its
metadata server only when its metadata enables them), and a metadata server per instance (its own loopback port:
identity, attributes, guest attributes, and a token only for an instance that runs with a service account, as
Google's metadata server).

Who calls: a request without an ``Authorization`` header is the operator's (the controller's anonymous credentials of
the try-out cloud); a bearer token must be one the fake issued (an instance's service account), else 401; a token's
account is refused (403) every permission it was denied (``deny``).

Every response goes through ``validate`` (tests/localcloud/gcpschema.py, the Compute v1 discovery document) when a
schema is loaded; a response that does not validate is answered 500 and kept in ``violations``.

Faults (``GcpFake.fault``): ``drop`` acts and then closes the connection without an answer, ``delay`` sleeps before
acting, ``ratelimit`` answers 429 without acting, ``fail_delete`` makes the next deletion's operation DONE with an
error (the instance stays). ``op_seconds`` keeps operations RUNNING that long.
"""

import calendar
import hashlib
import http.server
import json
import re
import secrets
import threading
import time
import urllib.parse

PREFIX = '/compute/v1/projects/'
DELETE_PERMISSION = 'compute.instances.delete'
# The IAM permission each routed call needs (docs of each method's "IAM Permissions").
PERMISSIONS = {'insert': 'compute.instances.create', 'list': 'compute.instances.list', 'get': 'compute.instances.get',
               'delete': DELETE_PERMISSION, 'set_labels': 'compute.instances.setLabels',
               'set_metadata': 'compute.instances.setMetadata', 'set_scheduling': 'compute.instances.setScheduling',
               'permissions': None, 'serial': 'compute.instances.getSerialPortOutput',
               'guest_attributes': 'compute.instances.getGuestAttributes'}
POWER_PERMISSIONS = {'start': 'compute.instances.start', 'stop': 'compute.instances.stop'}
ATTRIBUTE_NAME = re.compile(r'^[A-Za-z0-9_-]{1,63}$')
_RFC3339 = re.compile(r'^([0-9]{4}-[0-9]{2}-[0-9]{2})[Tt]([0-9]{2}:[0-9]{2}:[0-9]{2})(\.[0-9]+)?'
                      r'([Zz]|[+-][0-9]{2}:[0-9]{2})$')


def _now():
    return time.strftime('%Y-%m-%dT%H:%M:%S.000-00:00', time.gmtime())


def parse_rfc3339(text):
    """Unix seconds of an RFC 3339 time with an offset, or None."""
    m = _RFC3339.match(text or '')
    if not m:
        return None
    try:
        moment = calendar.timegm(time.strptime('%s %s' % (m.group(1), m.group(2)), '%Y-%m-%d %H:%M:%S'))
    except ValueError:
        return None
    offset = m.group(4)
    if offset not in ('Z', 'z'):
        sign = 1 if offset[0] == '+' else -1
        moment -= sign * (int(offset[1:3]) * 3600 + int(offset[4:6]) * 60)
    return moment + float(m.group(3) or 0)


class Fault:
    def __init__(self, kind, method, pattern, times=1, seconds=0.0, message=None, match=None):
        self.kind = kind
        self.match = match
        self.method = method
        self.pattern = re.compile(pattern)
        self.times = times
        self.seconds = seconds
        self.message = message


class GcpFake:
    """The fake's state and its HTTP server (``url``); ``project``/``zone`` are where it has instances."""

    def __init__(self, project='ephemera-test', zone='europe-west1-b', host='127.0.0.1', port=0, schema=None,
                 images=('debian-12',), machine_types=('e2-small', 'e2-medium'), networks=('default',),
                 addresses=None):
        # addresses: allocate(name) -> a public address, release(name) (the try-out cloud's pool); else 127.0.0.1.
        self.addresses = addresses
        self.project = project
        self.zone = zone
        self.host = host
        self.lock = threading.RLock()
        self.instances = {}
        self.operations = {}
        self.requests = {}
        self.images = set(images)
        self.machine_types = set(machine_types)
        self.networks = set(networks)
        self.faults = []
        self.calls = []
        self.violations = []
        self.schema = schema
        self.op_seconds = 0.0
        self.next_id = 4000000000000000000
        self.tokens = {}
        self.denied = {}
        # name -> (unix seconds, action) of an instance's time limit (Compute Engine's terminationTime/maxRunDuration)
        self.deadlines = {}
        # What Compute Engine did at a time limit: (instance name, action, unix seconds).
        self.terminated = []
        self.serial = {}
        # name -> {namespace: {key: value}}: what the instance's guest wrote to its guest attributes (kept while the
        # instance stops and starts, gone with it).
        self.guest_attributes = {}
        self.metadata_servers = {}
        # When set, every instance with an external address gets its metadata server at that address and this port
        # as soon as it is inserted (the guest reaches its own); else one on the fake's host, on first use.
        self.metadata_port = None
        # Where each instance's metadata server listens (its external address and metadata_port), by instance name.
        self.metadata_addresses = {}
        self.inserts = 0
        fake = self

        class Handler(_Handler):
            owner = fake
        self.server = http.server.ThreadingHTTPServer((host, port), Handler)
        self.server.daemon_threads = True
        self.url = 'http://%s:%d' % (host, self.server.server_address[1])
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def start(self):
        self.thread.start()
        return self

    def stop(self):
        for server in list(self.metadata_servers.values()):
            server.shutdown()
            server.server_close()
        self.server.shutdown()
        self.server.server_close()

    # ------------------------------------------------------------------------------ knobs

    def fault(self, kind, method, pattern, times=1, seconds=0.0, message=None, match=None):
        """A fault for the next ``times`` requests of ``method`` whose path matches ``pattern`` and, with ``match``,
        whose body holds that text (a workspace's name in an insert)."""
        with self.lock:
            self.faults.append(Fault(kind, method, pattern, times, seconds, message, match))

    def deny(self, service_account, permission=DELETE_PERMISSION):
        """``service_account`` lacks ``permission`` from now on (testIamPermissions leaves it out, the call is 403)."""
        with self.lock:
            self.denied.setdefault(service_account, set()).add(permission)

    def live(self):
        with self.lock:
            self.tick()
            return sorted(self.instances)

    def tick(self, now=None):
        """Compute Engine's time limits: every instance past its deadline is deleted or stopped, as its
        instanceTerminationAction says (the try-out cloud calls this on its ticks, the fake before every request)."""
        now = time.time() if now is None else now
        with self.lock:
            for name, (at, action) in list(self.deadlines.items()):
                instance = self.instances.get(name)
                if instance is None:
                    self.deadlines.pop(name, None)
                    continue
                if now < at or instance['status'] not in ('PROVISIONING', 'STAGING', 'RUNNING'):
                    continue
                self.deadlines.pop(name, None)
                self.terminated.append((name, action, now))
                if action == 'DELETE':
                    self._gone(name, instance)
                else:
                    instance['status'] = 'TERMINATED'

    def _gone(self, name, instance):
        """Instance ``name`` deleted (its serial output, metadata server and address released; the caller holds the
        lock)."""
        if self.instances.get(name) is not instance:
            return  # gone already (another delete's operation), or a new instance of that name
        del self.instances[name]
        self.deadlines.pop(name, None)
        self.serial.pop(name, None)
        self.guest_attributes.pop(name, None)
        self.metadata_addresses.pop(name, None)
        server = self.metadata_servers.pop(name, None)
        # The address goes back to the pool once its metadata server no longer listens on it: a new instance given
        # the address at once would find its port taken.
        if server is not None:
            threading.Thread(target=_close, args=(server, lambda: self._release_address(name)), daemon=True).start()
        else:
            self._release_address(name)

    def _scheduling(self, body):
        """(the instance's scheduling, its deadline (seconds, action) or None), or an error answer, for the
        ``scheduling`` of an insert or setScheduling body: what Compute Engine refuses, the fake refuses."""
        scheduling = dict(body or {})
        when = scheduling.get('terminationTime')
        duration = scheduling.get('maxRunDuration')
        action = scheduling.get('instanceTerminationAction') or 'STOP'
        if action not in ('STOP', 'DELETE'):
            return _error(400, 'invalid', "Invalid value for field 'resource.scheduling.instanceTerminationAction': "
                          "'%s'." % action)
        if when is not None and duration is not None:
            return _error(400, 'invalid', 'Only one of terminationTime and maxRunDuration can be specified.')
        if when is not None:
            at = parse_rfc3339(when)
            if at is None:
                return _error(400, 'invalid', "Invalid value for field 'resource.scheduling.terminationTime': '%s'. "
                              "Must be an RFC 3339 timestamp." % when)
            if at <= time.time():
                return _error(400, 'invalid', "Invalid value for field 'resource.scheduling.terminationTime': '%s'. "
                              "The termination time must be in the future." % when)
            return scheduling, (at, action)
        if duration is not None:
            seconds = int((duration or {}).get('seconds') or 0)
            if seconds < 30:
                return _error(400, 'invalid', "Invalid value for field 'resource.scheduling.maxRunDuration': must be "
                              "at least 30 seconds.")
            return scheduling, (time.time() + seconds, action)
        return scheduling, None

    def _take_fault(self, method, path, body=b''):
        with self.lock:
            for f in self.faults:
                if f.match and f.match.encode() not in body:
                    continue
                if f.times > 0 and f.method == method and f.pattern.search(path):
                    f.times -= 1
                    return f
        return None

    # ------------------------------------------------------------------------- operations

    def _operation(self, kind, name, error=None, instance_id=None):
        with self.lock:
            self.next_id += 1
            op_name = 'operation-%d-%s' % (int(time.time() * 1000), secrets.token_hex(6))
            op = {'kind': 'compute#operation', 'id': str(self.next_id), 'name': op_name, 'operationType': kind,
                  'zone': self._zone_url(), 'status': 'RUNNING', 'progress': 0, 'insertTime': _now(),
                  'startTime': _now(),
                  'targetLink': self._zone_url() + '/instances/' + name,
                  'selfLink': self._zone_url() + '/operations/' + op_name,
                  'user': 'fake@ephemera-test.iam.gserviceaccount.com'}
            if instance_id:
                op['targetId'] = str(instance_id)
            self.operations[op_name] = {'op': op, 'done_at': time.time() + self.op_seconds, 'error': error,
                                        'then': None}
            return op_name

    def _op_view(self, op_name):
        with self.lock:
            entry = self.operations[op_name]
            op = dict(entry['op'])
            if time.time() >= entry['done_at']:
                if entry['then'] is not None:
                    then, entry['then'] = entry['then'], None
                    then()
                op['status'] = 'DONE'
                op['progress'] = 100
                op['endTime'] = _now()
                if entry['error']:
                    op['error'] = {'errors': [{'code': entry['error'][0], 'message': entry['error'][1]}]}
                    op['httpErrorStatusCode'] = entry['error'][2]
                    op['httpErrorMessage'] = entry['error'][3]
            return op

    def _then(self, op_name, then):
        """Run ``then`` once, when the operation is done: now if operations take no time, else on the first look at
        it after its time (the caller holds the lock)."""
        if self.op_seconds <= 0:
            then()
        else:
            self.operations[op_name]['then'] = then

    def _zone_url(self):
        return '%s%s%s/zones/%s' % (self.url, PREFIX, self.project, self.zone)

    # ------------------------------------------------------------------------- instances

    def _fingerprint(self, labels):
        text = json.dumps(labels, sort_keys=True).encode()
        import base64
        return base64.b64encode(hashlib.sha256(text).digest()[:8]).decode()

    def insert(self, body, request_id):
        with self.lock:
            if request_id and request_id in self.requests:
                return 200, self._op_view(self.requests[request_id])
            name = body.get('name') or ''
            if not re.match(r'^[a-z]([-a-z0-9]{0,61}[a-z0-9])?$', name):
                return _error(400, 'invalid', 'Invalid value for field \'resource.name\': \'%s\'.' % name)
            if name in self.instances:
                return _error(409, 'alreadyExists', "The resource 'projects/%s/zones/%s/instances/%s' already exists"
                              % (self.project, self.zone, name))
            machine = (body.get('machineType') or '').rsplit('/', 1)[-1]
            if machine not in self.machine_types:
                return _error(400, 'invalid', "Invalid value for field 'resource.machineType': '%s'. Machine type "
                              "with name '%s' does not exist in zone '%s'." % (body.get('machineType'), machine,
                                                                               self.zone))
            scheduled = self._scheduling(body.get('scheduling'))
            if not isinstance(scheduled[1], (tuple, type(None))):
                return scheduled
            scheduling, limit = scheduled
            self.next_id += 1
            self.inserts += 1
            labels = dict(body.get('labels') or {})
            nics = []
            for n, nic in enumerate(body.get('networkInterfaces') or [{}]):
                view = {'kind': 'compute#networkInterface', 'name': 'nic%d' % n,
                        'network': nic.get('network'), 'networkIP': '10.128.0.%d' % (2 + len(self.instances))}
                if nic.get('accessConfigs'):
                    public = self.addresses.allocate(name) if self.addresses is not None else '127.0.0.1'
                    view['accessConfigs'] = [{'kind': 'compute#accessConfig', 'name': 'External NAT',
                                              'type': 'ONE_TO_ONE_NAT', 'natIP': public}]
                nics.append(view)
            # Through the API (not gcloud), an instance without serviceAccounts runs with none.
            accounts = body.get('serviceAccounts') or []
            instance = {'kind': 'compute#instance', 'id': str(self.next_id), 'name': name,
                        'creationTimestamp': _now(), 'zone': self._zone_url(),
                        'machineType': self._zone_url() + '/machineTypes/' + machine, 'status': 'PROVISIONING',
                        'labels': labels, 'labelFingerprint': self._fingerprint(labels),
                        'metadata': {'kind': 'compute#metadata', 'fingerprint': 'AAAAAAAAAAA=',
                                     'items': list((body.get('metadata') or {}).get('items') or [])},
                        'networkInterfaces': nics, 'disks': [{'kind': 'compute#attachedDisk', 'boot': True,
                                                              'autoDelete': True, 'deviceName': 'persistent-disk-0',
                                                              'type': 'PERSISTENT', 'mode': 'READ_WRITE'}],
                        'serviceAccounts': [{'email': a.get('email') or 'default', 'scopes': a.get('scopes') or []}
                                            for a in accounts],
                        'deletionProtection': bool(body.get('deletionProtection')),
                        'scheduling': scheduling,
                        'selfLink': self._zone_url() + '/instances/' + name}
            self.instances[name] = instance
            # The request id with the instance, before anything else can fail: a retry with the same requestId is
            # answered with this operation, as Compute Engine answers it, whatever happens to this answer.
            op_name = self._operation('insert', name, instance_id=instance['id'])
            if request_id:
                self.requests[request_id] = op_name

            def running():
                if name in self.instances:
                    self.instances[name]['status'] = 'RUNNING'
            self._then(op_name, running)
            if limit is not None:
                self.deadlines[name] = limit
            if self.metadata_port and nics and nics[0].get('accessConfigs'):
                self.metadata_addresses[name] = (nics[0]['accessConfigs'][0]['natIP'], self.metadata_port)
                try:
                    self.metadata_server(name)
                except OSError:
                    pass  # its address is busy for now (a server of a deleted instance closing): started at first use
            return 200, self._op_view(op_name)

    def delete(self, name, request_id, fail=None):
        with self.lock:
            if request_id and request_id in self.requests:
                return 200, self._op_view(self.requests[request_id])
            instance = self.instances.get(name)
            if instance is None:
                return _not_found(self, name)
            if instance.get('deletionProtection'):
                return _error(400, 'resourceInUseByAnotherResource', "Invalid resource usage: 'Resource cannot be "
                              "deleted if it's protected against deletion.'.")
            error = None
            if fail is not None:
                error = ('RESOURCE_OPERATION_RATE_EXCEEDED' if not fail.message else 'INTERNAL_ERROR',
                         fail.message or 'Operation rate exceeded for resource.', 503, 'SERVICE UNAVAILABLE')
            op_name = self._operation('delete', name, error=error, instance_id=instance['id'])
            if request_id:
                self.requests[request_id] = op_name
            if error is None:
                instance['status'] = 'STOPPING'

                self._then(op_name, lambda: self._gone(name, instance))
            return 200, self._op_view(op_name)

    def set_labels(self, name, body, request_id):
        with self.lock:
            instance = self.instances.get(name)
            if instance is None:
                return _not_found(self, name)
            if body.get('labelFingerprint') != instance['labelFingerprint']:
                return _error(412, 'conditionNotMet', "Labels fingerprint either invalid or resource labels have "
                              "changed")
            instance['labels'] = dict(body.get('labels') or {})
            instance['labelFingerprint'] = self._fingerprint(instance['labels'])
            op_name = self._operation('setLabels', name, instance_id=instance['id'])
            return 200, self._op_view(op_name)

    def set_metadata(self, name, body):
        with self.lock:
            instance = self.instances.get(name)
            if instance is None:
                return _not_found(self, name)
            if body.get('fingerprint') != instance['metadata']['fingerprint']:
                return _error(412, 'conditionNotMet', 'Supplied fingerprint does not match current metadata '
                              'fingerprint.')
            items = list(body.get('items') or [])
            instance['metadata'] = {'kind': 'compute#metadata', 'items': items,
                                    'fingerprint': self._fingerprint(items)}
            return 200, self._op_view(self._operation('setMetadata', name, instance_id=instance['id']))

    def power(self, name, verb):
        with self.lock:
            instance = self.instances.get(name)
            if instance is None:
                return _not_found(self, name)
            instance['status'] = 'RUNNING' if verb == 'start' else 'TERMINATED'
            scheduling = instance.get('scheduling') or {}
            if verb == 'start' and scheduling.get('maxRunDuration'):
                # A run's duration counts from its start.
                self.deadlines[name] = (time.time() + int(scheduling['maxRunDuration'].get('seconds') or 0),
                                        scheduling.get('instanceTerminationAction') or 'STOP')
            return 200, self._op_view(self._operation(verb, name, instance_id=instance['id']))

    def set_scheduling(self, name, body, request_id):
        with self.lock:
            if request_id and request_id in self.requests:
                return 200, self._op_view(self.requests[request_id])
            instance = self.instances.get(name)
            if instance is None:
                return _not_found(self, name)
            if instance['status'] != 'TERMINATED':
                # instances.setScheduling: "You can only call this method on a stopped instance".
                where = 'projects/%s/zones/%s/instances/%s' % (self.project, self.zone, name)
                return _error(400, 'resourceNotReady', "The resource '%s' is not ready: scheduling can be set only on "
                              "a stopped (TERMINATED) instance." % where)
            scheduled = self._scheduling(body)
            if not isinstance(scheduled[1], (tuple, type(None))):
                return scheduled
            instance['scheduling'], limit = scheduled
            self.deadlines.pop(name, None)
            if limit is not None:
                self.deadlines[name] = limit
            op_name = self._operation('setScheduling', name, instance_id=instance['id'])
            if request_id:
                self.requests[request_id] = op_name
            return 200, self._op_view(op_name)

    def list(self, query):
        with self.lock:
            found = sorted(self.instances.values(), key=lambda i: i['name'])
        wanted = (query.get('filter') or [''])[0]
        m = re.match(r'^labels\.([a-z0-9_-]+):\*$', wanted)
        if wanted and not m:
            return _error(400, 'invalid', 'Invalid list filter expression %r.' % wanted)
        if m:
            found = [i for i in found if m.group(1) in i['labels']]
        size = int((query.get('maxResults') or ['500'])[0])
        start = int((query.get('pageToken') or ['0'])[0] or 0)
        page = found[start:start + size]
        body = {'kind': 'compute#instanceList', 'id': 'projects/%s/zones/%s/instances' % (self.project, self.zone),
                'items': page, 'selfLink': self._zone_url() + '/instances'}
        if start + size < len(found):
            body['nextPageToken'] = str(start + size)
        return 200, body

    def test_permissions(self, name, body, account):
        with self.lock:
            if name not in self.instances:
                return _not_found(self, name)
            denied = self.denied.get(account, set()) if account else set()
            granted = [p for p in body.get('permissions') or [] if p not in denied]
        return 200, ({'permissions': granted} if granted else {})

    # ------------------------------------------------------------------ metadata servers

    def _release_address(self, name):
        if self.addresses is not None:
            with self.lock:
                self.addresses.release(name)

    def metadata_server(self, name, host=None, port=0):
        """The metadata server of instance ``name`` (started on first use, at ``host``:``port``, else at the address
        its insert gave it): its base URL."""
        with self.lock:
            if host is None and name in self.metadata_addresses:
                host, port = self.metadata_addresses[name]
            if name in self.metadata_servers:
                server = self.metadata_servers[name]
                return 'http://%s:%d' % server.server_address
            fake = self

            class Meta(_MetadataHandler):
                owner = fake
                instance = name
            server = http.server.ThreadingHTTPServer((host or self.host, port), Meta)
            server.daemon_threads = True
            threading.Thread(target=server.serve_forever, daemon=True).start()
            self.metadata_servers[name] = server
            return 'http://%s:%d' % server.server_address

    def token_for(self, name):
        """A token of the service account instance ``name`` runs with, or None when it runs with none."""
        with self.lock:
            accounts = (self.instances.get(name) or {}).get('serviceAccounts') or []
            if not accounts:
                return None
            token = 'ya29.fake-' + secrets.token_hex(12)
            self.tokens[token] = accounts[0].get('email') or 'default'
            return token

    def guest_attributes_enabled(self, name):
        """True when instance ``name``'s metadata holds enable-guest-attributes = TRUE (the fake has no project
        metadata, where Compute Engine also looks)."""
        with self.lock:
            instance = self.instances.get(name) or {}
            items = {i.get('key'): i.get('value') for i in instance.get('metadata', {}).get('items') or []}
            return str(items.get('enable-guest-attributes') or '').strip().upper() == 'TRUE'

    def guest_attribute_write(self, name, namespace, key, value):
        """What the metadata server answers a PUT of guest attribute ``namespace``/``key`` from inside instance
        ``name`` (the guest agent's host keys go the same way): (status, text)."""
        if not ATTRIBUTE_NAME.match(namespace or '') or not ATTRIBUTE_NAME.match(key or ''):
            return 400, 'Bad guest attribute path.'
        with self.lock:
            if name not in self.instances:
                return 404, 'not found'
            if not self.guest_attributes_enabled(name):
                return 403, 'Guest attributes endpoint access is disabled.'
            self.guest_attributes.setdefault(name, {}).setdefault(namespace, {})[key] = value
        return 200, ''

    def guest_attribute_read(self, name, namespace, key):
        """(status, text) of a GET of guest attribute ``namespace``/``key`` from inside instance ``name``."""
        with self.lock:
            if not self.guest_attributes_enabled(name):
                return 403, 'Guest attributes endpoint access is disabled.'
            value = self.guest_attributes.get(name, {}).get(namespace, {}).get(key)
        return (200, value) if value is not None else (404, 'not found')

    def get_guest_attributes(self, name, query_path, variable_key=None):
        """instances.getGuestAttributes: the entries under ``query_path`` ('' every namespace, 'ns/' a namespace,
        'ns/key' one entry); 404 when there are none (nothing written yet, or guest attributes not enabled)."""
        with self.lock:
            if name not in self.instances:
                return _not_found(self, name)
            stored = self.guest_attributes.get(name, {})
            link = self._zone_url() + '/instances/%s/getGuestAttributes' % name
            where = "projects/%s/zones/%s/instances/%s/guestAttributes/" % (self.project, self.zone, name)
            if variable_key:
                value = stored.get('', {}).get(variable_key)
                if value is None:
                    return _error(404, 'notFound', "The resource '%s%s' was not found" % (where, variable_key))
                return 200, {'kind': 'compute#guestAttributes', 'variableKey': variable_key, 'variableValue': value,
                             'selfLink': link}
            path = query_path or ''
            namespace, dummy, key = path.partition('/')
            items = [{'namespace': ns, 'key': k, 'value': v}
                     for ns, entries in sorted(stored.items()) if not path or ns == namespace
                     for k, v in sorted(entries.items()) if not key or k == key]
            if not items:
                return _error(404, 'notFound', "The resource '%s%s' was not found" % (where, path))
            return 200, {'kind': 'compute#guestAttributes', 'queryPath': path, 'queryValue': {'items': items},
                         'selfLink': link}

    def serial_write(self, name, text):
        with self.lock:
            self.serial[name] = self.serial.get(name, '') + text


def _close(server, then=None):
    server.shutdown()
    server.server_close()
    if then is not None:
        then()


def _error(status, reason, message):
    return status, {'error': {'code': status, 'message': message,
                              'errors': [{'message': message, 'domain': 'global', 'reason': reason}]}}


def _not_found(fake, name):
    return _error(404, 'notFound', "The resource 'projects/%s/zones/%s/instances/%s' was not found"
                  % (fake.project, fake.zone, name))


# Response schemas (names in the discovery document) by (method, path pattern).
ROUTES = [
    ('GET', r'^zones/([^/]+)$', 'zone', 'Zone'),
    ('GET', r'^zones/([^/]+)/machineTypes/([^/]+)$', 'machine_type', 'MachineType'),
    ('GET', r'^global/images/family/([^/]+)$', 'image_family', 'Image'),
    ('GET', r'^global/images/([^/]+)$', 'image', 'Image'),
    ('GET', r'^global/networks/([^/]+)$', 'network', 'Network'),
    ('POST', r'^zones/([^/]+)/instances$', 'insert', 'Operation'),
    ('GET', r'^zones/([^/]+)/instances$', 'list', 'InstanceList'),
    ('GET', r'^zones/([^/]+)/instances/([^/]+)$', 'get', 'Instance'),
    ('DELETE', r'^zones/([^/]+)/instances/([^/]+)$', 'delete', 'Operation'),
    ('POST', r'^zones/([^/]+)/instances/([^/]+)/setLabels$', 'set_labels', 'Operation'),
    ('POST', r'^zones/([^/]+)/instances/([^/]+)/setMetadata$', 'set_metadata', 'Operation'),
    ('POST', r'^zones/([^/]+)/instances/([^/]+)/setScheduling$', 'set_scheduling', 'Operation'),
    ('POST', r'^zones/([^/]+)/instances/([^/]+)/(start|stop)$', 'power', 'Operation'),
    ('POST', r'^zones/([^/]+)/instances/([^/]+)/testIamPermissions$', 'permissions', 'TestPermissionsResponse'),
    ('GET', r'^zones/([^/]+)/instances/([^/]+)/serialPort$', 'serial', 'SerialPortOutput'),
    ('GET', r'^zones/([^/]+)/instances/([^/]+)/getGuestAttributes$', 'guest_attributes', 'GuestAttributes'),
    ('GET', r'^zones/([^/]+)/operations/([^/]+)$', 'operation', 'Operation'),
    ('POST', r'^zones/([^/]+)/operations/([^/]+)/wait$', 'operation', 'Operation'),
]


class _Handler(http.server.BaseHTTPRequestHandler):
    owner = None
    protocol_version = 'HTTP/1.1'

    def log_message(self, *args):
        pass

    def do_GET(self):
        self._serve('GET')

    def do_POST(self):
        self._serve('POST')

    def do_DELETE(self):
        self._serve('DELETE')

    def _send(self, status, body, schema=None):
        fake = self.owner
        if status < 400 and schema and fake.schema is not None:
            problems = fake.schema.validate(schema, body)
            if problems:
                fake.violations.append((self.path, schema, problems))
                status, body = _error(500, 'backendError', 'fake answer does not validate: %s' % problems[:3])
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header('Content-Type', 'application/json; charset=UTF-8')
        self.send_header('Content-Length', str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _account(self):
        """None for a request without credentials (the operator's, in the try-out cloud); the account of a token the
        fake issued; False for any other credentials."""
        auth = self.headers.get('Authorization')
        if auth is None:
            return None
        token = auth[7:] if auth.startswith('Bearer ') else None
        with self.owner.lock:
            return self.owner.tokens.get(token, False) if token else False

    def _serve(self, method):
        fake = self.owner
        parsed = urllib.parse.urlsplit(self.path)
        query = urllib.parse.parse_qs(parsed.query)
        length = int(self.headers.get('Content-Length') or 0)
        raw = self.rfile.read(length) if length else b''
        try:
            body = json.loads(raw) if raw else {}
        except ValueError:
            return self._send(*_error(400, 'parseError', 'This API does not support parsing form-encoded input.'))
        prefix = PREFIX + fake.project + '/'
        if not parsed.path.startswith(prefix):
            return self._send(*_error(404, 'notFound', 'The resource \'%s\' was not found' % parsed.path))
        rest = parsed.path[len(prefix):]
        fake.calls.append((method, rest, {k: v[0] for k, v in query.items()}))
        for verb, pattern, action, schema in ROUTES:
            m = re.match(pattern, rest)
            if verb == method and m:
                break
        else:
            return self._send(*_error(404, 'notFound', 'No such method: %s %s' % (method, rest)))
        args = m.groups()
        if args and args[0] != fake.zone and rest.startswith('zones/'):
            return self._send(*_error(404, 'notFound', "The resource 'projects/%s/zones/%s' was not found"
                                      % (fake.project, args[0])))
        fault = fake._take_fault(method, rest, raw)
        if fault is not None and fault.kind == 'ratelimit':
            return self._send(*_error(429, 'rateLimitExceeded', 'Rate Limit Exceeded'))
        if fault is not None and fault.kind == 'delay':
            time.sleep(fault.seconds)
        request_id = (query.get('requestId') or [None])[0]
        fake.tick()
        account = self._account()
        if account is False:
            return self._send(*_error(401, 'authError', 'Request had invalid authentication credentials. Expected '
                                      'OAuth 2 access token, login cookie or other valid authentication credential.'))
        permission = POWER_PERMISSIONS.get(args[2]) if action == 'power' else PERMISSIONS.get(action)
        if account and permission and permission in fake.denied.get(account, set()):
            target = ('instances/%s' % args[1]) if len(args) > 1 else 'instances'
            return self._send(*_error(403, 'forbidden', "Required '%s' permission for 'projects/%s/zones/%s/%s'"
                                      % (permission, fake.project, fake.zone, target)))
        status, answer = self._dispatch(action, args, body, query, request_id, account,
                                        fault if fault is not None and fault.kind == 'fail_delete' else None)
        if fault is not None and fault.kind == 'drop':
            # Acted; the answer is lost.
            self.close_connection = True
            self.connection.shutdown(2)
            return None
        return self._send(status, answer, schema)

    def _dispatch(self, action, args, body, query, request_id, account, fail):
        fake = self.owner
        if action == 'zone':
            return 200, {'kind': 'compute#zone', 'id': '2001', 'name': fake.zone, 'status': 'UP',
                         'region': '%s%s%s/regions/%s' % (fake.url, PREFIX, fake.project, fake.zone.rsplit('-', 1)[0]),
                         'selfLink': fake._zone_url()}
        if action == 'machine_type':
            if args[1] not in fake.machine_types:
                return _error(404, 'notFound', "The resource 'projects/%s/zones/%s/machineTypes/%s' was not found"
                              % (fake.project, fake.zone, args[1]))
            return 200, {'kind': 'compute#machineType', 'id': '3001', 'name': args[1], 'guestCpus': 2,
                         'memoryMb': 2048, 'zone': fake.zone, 'selfLink': fake._zone_url() + '/machineTypes/' + args[1]}
        if action in ('image', 'image_family'):
            if args[0] not in fake.images:
                return _error(404, 'notFound', "The resource 'projects/%s/global/images/%s' was not found"
                              % (fake.project, args[0]))
            return 200, {'kind': 'compute#image', 'id': '5001', 'name': args[0], 'status': 'READY',
                         'family': args[0],
                         'selfLink': '%s%s%s/global/images/%s' % (fake.url, PREFIX, fake.project, args[0])}
        if action == 'network':
            if args[0] not in fake.networks:
                return _error(404, 'notFound', "The resource 'projects/%s/global/networks/%s' was not found"
                              % (fake.project, args[0]))
            return 200, {'kind': 'compute#network', 'id': '6001', 'name': args[0], 'autoCreateSubnetworks': True,
                         'selfLink': '%s%s%s/global/networks/%s' % (fake.url, PREFIX, fake.project, args[0])}
        if action == 'insert':
            return fake.insert(body, request_id)
        if action == 'list':
            return fake.list(query)
        if action == 'get':
            with fake.lock:
                instance = fake.instances.get(args[1])
                return (200, json.loads(json.dumps(instance))) if instance else _not_found(fake, args[1])
        if action == 'delete':
            return fake.delete(args[1], request_id, fail)
        if action == 'set_labels':
            return fake.set_labels(args[1], body, request_id)
        if action == 'set_scheduling':
            return fake.set_scheduling(args[1], body, request_id)
        if action == 'set_metadata':
            return fake.set_metadata(args[1], body)
        if action == 'power':
            return fake.power(args[1], args[2])
        if action == 'permissions':
            return fake.test_permissions(args[1], body, account)
        if action == 'serial':
            with fake.lock:
                if args[1] not in fake.instances:
                    return _not_found(fake, args[1])
                text = fake.serial.get(args[1], '')
            return 200, {'kind': 'compute#serialPortOutput', 'contents': text, 'start': '0',
                         'next': str(len(text)), 'selfLink': fake._zone_url() + '/instances/%s/serialPort' % args[1]}
        if action == 'guest_attributes':
            return fake.get_guest_attributes(args[1], (query.get('queryPath') or [''])[0],
                                             (query.get('variableKey') or [None])[0])
        if action == 'operation':
            with fake.lock:
                if args[1] not in fake.operations:
                    return _error(404, 'notFound', "The resource 'projects/%s/zones/%s/operations/%s' was not found"
                                  % (fake.project, fake.zone, args[1]))
                return 200, fake._op_view(args[1])
        return _error(500, 'backendError', 'unrouted')


class _MetadataHandler(http.server.BaseHTTPRequestHandler):
    """The metadata server of one instance: /computeMetadata/v1/... with Metadata-Flavor: Google (PUT and GET of
    instance/guest-attributes/<namespace>/<key>, refused 403 unless the instance's metadata enables guest attributes),
    and /serial (POST: text the guest writes to its serial console, which the fake serves as serial port output)."""
    owner = None
    instance = None
    protocol_version = 'HTTP/1.1'

    def log_message(self, *args):
        pass

    def _reply(self, status, text, ctype='application/text'):
        data = text.encode()
        self.send_response(status)
        self.send_header('Metadata-Flavor', 'Google')
        self.send_header('Content-Type', ctype)
        self.send_header('Content-Length', str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_POST(self):
        length = int(self.headers.get('Content-Length') or 0)
        text = self.rfile.read(length).decode('utf-8', 'replace')
        if self.path == '/serial':
            self.owner.serial_write(self.instance, text)
            return self._reply(200, '')
        return self._reply(404, 'not found')

    @staticmethod
    def _guest_attribute(path):
        """(namespace, key) of a path under instance/guest-attributes/, or None."""
        base = '/computeMetadata/v1/instance/guest-attributes/'
        if not path.startswith(base):
            return None
        parts = path[len(base):].split('/')
        return tuple(parts) if len(parts) == 2 else None

    def do_PUT(self):
        length = int(self.headers.get('Content-Length') or 0)
        text = self.rfile.read(length).decode('utf-8', 'replace')
        if self.headers.get('Metadata-Flavor') != 'Google':
            return self._reply(403, 'Missing Metadata-Flavor:Google header.')
        where = self._guest_attribute(urllib.parse.urlsplit(self.path).path)
        if where is None:
            return self._reply(404, 'not found')
        return self._reply(*self.owner.guest_attribute_write(self.instance, where[0], where[1], text))

    def do_GET(self):
        if self.headers.get('Metadata-Flavor') != 'Google':
            return self._reply(403, 'Missing Metadata-Flavor:Google header.')
        fake = self.owner
        path = urllib.parse.urlsplit(self.path).path
        base = '/computeMetadata/v1/'
        if not path.startswith(base):
            return self._reply(404, 'not found')
        where = self._guest_attribute(path)
        if where is not None:
            return self._reply(*fake.guest_attribute_read(self.instance, where[0], where[1]))
        key = path[len(base):]
        with fake.lock:
            instance = fake.instances.get(self.instance)
        if key == 'project/project-id':
            return self._reply(200, fake.project)
        if key == 'instance/name':
            return self._reply(200, self.instance)
        if key == 'instance/zone':
            return self._reply(200, 'projects/%s/zones/%s' % (fake.project, fake.zone))
        if key == 'instance/id' and instance:
            return self._reply(200, instance['id'])
        if key == 'instance/service-accounts/default/token':
            token = fake.token_for(self.instance)
            if token is None:
                # Google's metadata server, for an instance that runs with no service account.
                return self._reply(404, 'not found')
            return self._reply(200, json.dumps({'access_token': token, 'expires_in': 3599, 'token_type': 'Bearer'}),
                               'application/json')
        if key.startswith('instance/attributes/') and instance:
            items = {i['key']: i['value'] for i in instance['metadata'].get('items') or []}
            name = key[len('instance/attributes/'):]
            if name in items:
                return self._reply(200, items[name])
        return self._reply(404, 'not found')
