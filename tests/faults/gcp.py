"""The Compute Engine rows of the crash-safety matrix, on a try-out cloud of their own: the cloud parts' shape
(tests/faults/cloud.py) on the cloud's Compute Engine fake (tests/localcloud/gcp.py; docs/internals/gcp.md), with real sshd
guests on the instances' external addresses; the instances run with no service account and a termination time.

Kill points: besides the steps, journal commits and guest commands, the provider's own failpoints: right after the
answer of every call that acts (``gcp instances.insert``, ``gcp instances.setLabels`` (the lease labels at ready),
``gcp instances.stop``, ``gcp instances.delete``), right after a zone operation is seen DONE without an error
(``gcp operation DONE <action>``: Compute Engine finished, the journal does not know) and right after the GET 404
that completes a deletion (``gcp instances.get 404``).

Lost answers: every call that acts in the traces, once: the fake acts and closes the connection before it answers.
Each fault is matched to its own workspace's request: an insert by the instance name its body carries (``eph-<workspace>-``,
the fake's ``match``), a call that names the instance (setLabels, stop, delete) by its path, armed before the run by
the name the provider derives from the workspace (a create's) or from the journal (a destroy's). And the deletion's operation DONE with an error (the fake's
``fail_delete``): the destroy fails with Compute Engine's message, the instance stays, the next destroy deletes it.

A machine is an instance (a deleted one is gone from the fake); it is ours when its ``ephemera-marker`` metadata item
verifies for this controller, bound to the instance's name. The foreign instance is made after the traced create by
another principal, straight at the fake's API, with a copy of that workspace's labels and marker (it binds another
name, so it does not verify): its status and labels must stay as they were, and no request of ours but a read may
name it. Events: every insert our controller sent carried the requestId of a name a journal record holds as its
candidate.
"""

import http.client
import json
import re
import urllib.parse
import uuid

from tests.faults import cloud
from tests.faults.cloud import CloudMatrix, CloudSite

LABEL_WORKSPACE = 'ephemera-workspace'
META_MARKER = 'ephemera-marker'
# The calls that act, as the provider's failpoints name them: instances.<verb>.
ACTING = re.compile(r'^instances\.([A-Za-z]+)$')
# The fake's path of each call that acts on a named instance (below zones/<zone>/).
PATHS = {'delete': ('DELETE', r'/instances/%s$'), 'setLabels': ('POST', r'/instances/%s/setLabels$'),
         'stop': ('POST', r'/instances/%s/stop$'), 'start': ('POST', r'/instances/%s/start$'),
         'setMetadata': ('POST', r'/instances/%s/setMetadata$')}
# The insert's path names no instance (its body does).
INSERT = ('POST', r'/instances$')
DONE_WITH_ERROR = 'instances.delete operation DONE with an error'
ERROR_MESSAGE = 'Disk detach failed on the host.'


def slug(workspace):
    """The part of an instance name the provider derives from the workspace's name (GcpProvider.candidate_for)."""
    return re.sub(r'[^a-z0-9-]', '-', workspace.lower())[:36].strip('-') or 'ws'


def _provider_module():
    from ansible_collections.ephemera.workspaces.plugins.module_utils.providers.gcp import provider
    return provider


def gcp_decisive(points):
    """The ci size's points: the provider's own (the answer of every call that acts, every operation seen DONE, the
    GET 404 that completes a deletion) and the commits of an insert's and a deletion's dispatch (cloud.decisive)."""
    return cloud.decisive(points, 'gcp')


def call_of(what):
    """``gcp instances.insert`` -> ``instances.insert``; None for the points that are no call that acts (an operation
    seen DONE, the GET 404, anything not the provider's)."""
    if not what.startswith('gcp '):
        return None
    m = ACTING.match(what[4:])
    return what[4:] if m and m.group(1) != 'get' else None


class GcpAdapter(cloud.Adapter):
    label = 'gcp'
    title = 'Compute Engine'
    guest_prefix = 'gce-'
    clone_op = 'POST instances'
    clone_identity = 'requestId'

    def provider_vars(self, info):
        g = info['gcp']
        return {
            'ephemera_provider': 'gcp', 'ephemera_gcp_endpoint_url': g['endpoint'],
            'ephemera_gcp_auth_kind': 'anonymous', 'ephemera_gcp_project': g['project'],
            'ephemera_gcp_zone': g['zone'], 'ephemera_gcp_machine_type': g['machine_type'],
            'ephemera_gcp_network': g['network'], 'ephemera_gcp_ssh_public_key': g['ssh_public_key'],
            'ephemera_gcp_retry_timeout': 20, 'ephemera_template': g['image'],
            'ephemera_pool': 'disposable-workspaces', 'ephemera_guest_root': g['guest_prefix'],
        }

    def items(self, site):
        out = {}
        for i in site.cloud.gcp('instances'):
            labels = dict(i.get('labels') or {})
            out[i['name']] = {
                'id': i['name'], 'state': i['status'], 'running': i['status'] == 'RUNNING', 'live': True,
                'tags': labels, 'workspace': labels.get(LABEL_WORKSPACE),
                'marker': (i.get('metadata') or {}).get(META_MARKER), 'bound': i['name']}
        return out

    # ------------------------------------------------------------- requests

    def mark(self, site):
        site.calls_mark = len(site.cloud.gcp('calls'))

    def requests(self, site):
        """(index, operation, instance names named, requestId) of every request since the faults were cleared: the
        fake logs every request itself (method, path below the project, query), in order. The foreign principal's own
        requests (copy_foreign) are left out."""
        out = []
        foreign = getattr(site, 'foreign_requests', set())
        for index, (method, path, query) in enumerate(site.cloud.gcp('calls')[site.calls_mark:]):
            if query.get('requestId') in foreign:
                continue
            parts = path.split('/')
            named = ()
            op = '%s %s' % (method, path)
            if len(parts) >= 3 and parts[0] == 'zones' and parts[2] == 'instances':
                named = tuple(parts[3:4])
                op = '%s instances%s' % (method, ''.join('.' + p for p in parts[4:5]))
            out.append((index, op, named, query.get('requestId')))
        return out

    def is_read(self, op):
        return op.startswith('GET') or op.endswith('.testIamPermissions')

    def candidate_identity(self, candidate):
        return _provider_module().request_id(candidate, 'insert')

    # ------------------------------------------------------------- faults

    def call_of(self, what):
        return call_of(what)

    def extra_faults(self, lost):
        return [('destroy', DONE_WITH_ERROR)] if ('destroy', 'instances.delete') in lost else []

    def row_of(self, op, call):
        if call == DONE_WITH_ERROR:
            return 'gcp fault: %s (%s)' % (call, op)
        return super().row_of(op, call)

    def lost_rule(self, site, op, call, name, resource_id):
        if call == 'instances.insert':
            # The insert's path names no instance; its body does: eph-<workspace>-<digest> (the provider's names).
            rule = self.arm(site, 'drop', *INSERT, match='"eph-%s-' % slug(name))
            rule['workspace'] = name
            return rule
        if call == DONE_WITH_ERROR:
            if resource_id is None:
                return None
            return self.arm(site, 'fail_delete', 'DELETE', r'/instances/%s$' % re.escape(resource_id),
                            message=ERROR_MESSAGE)
        verb = ACTING.match(call).group(1)
        if verb not in PATHS:
            return None
        method, pattern = PATHS[verb]
        # A create's later call names its instance, eph-<workspace>-<digest>: armed before the run.
        named = re.escape(resource_id) if resource_id else 'eph-%s-[0-9a-f]+' % re.escape(slug(name))
        return self.arm(site, 'drop', method, pattern % named)

    @staticmethod
    def arm(site, kind, method, pattern, **extra):
        mark = len(site.cloud.gcp('calls'))
        site.cloud.gcp('fault', kind=kind, method=method, pattern=pattern, times=1, **extra)
        return {'kind': kind, 'method': method, 'pattern': pattern, 'mark': mark}

    def rule_hits(self, site, rule):
        """The requests that matched the fault since it was armed (the first of them met it). An insert's fault
        matches its workspace's body: its requests are those with the requestId of the workspace's candidate."""
        pattern = re.compile(rule['pattern'])
        wanted = None
        if rule.get('workspace'):
            with site.journal() as journal:
                ws = journal.get_workspace(rule['workspace'])
            wanted = self.candidate_identity(ws['candidate_id']) if ws and ws.get('candidate_id') else ''
        return sum(1 for method, path, query in site.cloud.gcp('calls')[rule['mark']:]
                   if method == rule['method'] and pattern.search(path)
                   and (wanted is None or query.get('requestId') == wanted))

    # ------------------------------------------------------------- foreign

    def copy_foreign(self, site, item, workspace):
        """Another principal inserts an instance of its own with ``item``'s labels and marker, straight at the fake
        (no external address: no guest)."""
        g = site.info['gcp']
        request = str(uuid.uuid4())
        site.foreign_requests = getattr(site, 'foreign_requests', set()) | {request}
        body = {'name': 'theirs-' + re.sub(r'[^a-z0-9-]', '-', workspace.lower()),
                'machineType': 'zones/%s/machineTypes/%s' % (g['zone'], g['machine_type']),
                'labels': dict(item['tags']),
                'metadata': {'items': [{'key': META_MARKER, 'value': item['marker']}]},
                'networkInterfaces': [{'network': 'projects/%s/global/networks/%s' % (g['project'], g['network'])}],
                'disks': [{'boot': True, 'autoDelete': True,
                           'initializeParams': {'sourceImage': 'projects/%s/global/images/%s'
                                                % (g['project'], g['image'])}}]}
        status, answer = post(g['endpoint'], '/compute/v1/projects/%s/zones/%s/instances?requestId=%s'
                              % (g['project'], g['zone'], request), body)
        if status != 200:
            raise RuntimeError('the foreign instance was not made: %s %s' % (status, answer))
        return body['name']


def post(endpoint, path, body):
    """(status, JSON answer) of a POST to the fake's API at ``endpoint``."""
    url = urllib.parse.urlsplit(endpoint)
    conn = http.client.HTTPConnection(url.hostname, url.port, timeout=30)
    try:
        conn.request('POST', path, json.dumps(body), {'Content-Type': 'application/json'})
        answer = conn.getresponse()
        return answer.status, json.loads(answer.read() or b'{}')
    finally:
        conn.close()


class GcpSite(CloudSite):
    """A try-out cloud (its own process) whose Compute Engine fake the rows work on, a git server, a journal."""

    adapter = GcpAdapter()

    def run_env(self, op):
        # google-cloud-compute imported once in ansible-playbook's process before the tasks fork (EPHEMERA_PRELOAD,
        # as the GCP integration tests and a user's runs set it): a step does not spend 10 s importing the library
        # on a loaded machine.
        from tests.integration.gcp.gcprun import PRELOAD
        return dict(PRELOAD)


# The shared shape's view and checks, under the names the detector tests know.
CloudView = cloud.CloudView
check = cloud.check


class GcpMatrix(CloudMatrix):
    """Kill chains (or single kills) through the Compute Engine create's and destroy's points, every lost answer of a
    call that acts and a deletion operation DONE with an error, against one GcpSite."""
