"""The Hetzner rows of the crash-safety matrix, on a try-out cloud of their own: the cloud parts' shape
(tests/faults/cloud.py) on the cloud's Hetzner Cloud fake (tests/localcloud/hetzner.py; docs/internals/hetzner.md).

The calls that act have failpoints of their own, right after their answer (``hetzner POST /servers``,
``hetzner PUT /servers`` (the lease labels at ready), ``hetzner POST /servers/actions/shutdown``,
``hetzner DELETE /servers``, ``hetzner POST /ssh_keys`` for an owned key); they are also the lost-answer rows: the
fake acts and closes the connection before it answers, each rule matching its own workspace's name (in the request's
body) or server id (in its path).

A machine is a server (a deleted one is gone from the fake); it is ours when its marker (in its labels) verifies for
this controller, bound to the server's name. The foreign server is made after the traced create with a copy of that
workspace's labels, marker included (it binds another name, so it does not verify): its labels must stay as they
were. Events: every POST /servers our controller sent named a server a journal record holds as its candidate.
"""

from tests.faults import cloud
from tests.faults.cloud import CloudMatrix, CloudSite

NAMES = cloud.NAMES
SIZES = cloud.SIZES
LABEL_WORKSPACE = 'ephemera-workspace'
CLOUD = dict(cloud.CLOUD)
DISPATCHES = cloud.DISPATCHES


def hetzner_decisive(points):
    """The ci size's points: the answer of every call that acts and the commits of a creation's and a deletion's
    dispatch (cloud.decisive)."""
    return cloud.decisive(points, 'hetzner')


def _provider_module():
    from ansible_collections.ephemera.workspaces.plugins.module_utils.providers.hetzner import provider
    return provider


class HetznerAdapter(cloud.Adapter):
    label = 'hetzner'
    title = 'Hetzner'
    guest_prefix = 'hz-'
    # A foreign server's status is the fake's to change (it boots): its labels are what ours must never touch.
    foreign_fields = ('tags',)
    clone_op = 'POST /servers'
    clone_identity = 'the name'

    def provider_vars(self, info):
        hz = info['hetzner']
        return {
            'ephemera_provider': 'hetzner', 'ephemera_hetzner_endpoint': hz['endpoint'],
            'ephemera_hetzner_token': hz['token'], 'ephemera_hetzner_location': hz['location'],
            'ephemera_hetzner_server_type': hz['server_type'], 'ephemera_hetzner_ssh_key': hz['ssh_key'],
            'ephemera_hetzner_action_timeout': 20, 'ephemera_template': hz['image'],
            'ephemera_pool': 'disposable-workspaces', 'ephemera_guest_root': hz['guest_prefix'],
        }

    def items(self, site):
        hp = _provider_module()
        out = {}
        for s in site.cloud.hetzner('servers'):
            labels = dict(s.get('labels') or {})
            out[str(s['id'])] = {
                'id': str(s['id']), 'state': s['status'], 'running': s['status'] == 'running', 'live': True,
                'tags': labels, 'workspace': labels.get(LABEL_WORKSPACE), 'marker': hp.marker_text(labels),
                'bound': s.get('name') or -1, 'name': s.get('name')}
        return out

    def requests(self, site):
        """(time, operation, server ids named, server name sent) of every request since the faults were cleared: the
        fake logs every request itself."""
        out = []
        for r in site.cloud.hetzner('requests'):
            if r['time'] < site.since:
                continue
            parts = [p for p in r['path'].split('/') if p]
            named = tuple(p for p in parts[1:2] if p.isdigit()) if parts[:1] == ['servers'] else ()
            op = '%s /%s' % (r['method'], '/'.join(p for p in parts if not p.isdigit()))
            out.append((r['time'], op, named, r.get('name')))
        return sorted(out)

    def is_read(self, op):
        return op.startswith('GET')

    def copy_foreign(self, site, item, workspace):
        # Someone else copies a workspace's labels onto a server of theirs (the marker binds another name).
        site.cloud.hetzner('foreign_create', name='copy-of-' + workspace, labels=item['tags'])

    def lost_rule(self, site, op, call, name, resource_id):
        method, path = call.split(' ', 1)
        if op == 'destroy':
            return self.drop(site, method, '/servers/' + resource_id, None)
        if path == '/servers':
            # The creation request and the label update carry the workspace's name as its ephemera-workspace label.
            return self.drop(site, method, path, name)
        # POST /ssh_keys (an owned key) and other calls without a server id: the next one of its kind.
        return self.drop(site, method, path, None)

    @staticmethod
    def drop(site, method, path, match):
        return site.cloud.hetzner('rule', kind='drop', method=method, path=path, match=match)

    def rule_hits(self, site, rule):
        return [r for r in site.cloud.hetzner('rules') if r['id'] == rule['id']][0]['hits']


class HetznerSite(CloudSite):
    """A try-out cloud (its own process) whose Hetzner fake the rows work on, a git server, a journal."""

    adapter = HetznerAdapter()


# The shared shape's view and checks, under the names the detector tests know.
CloudView = cloud.CloudView
check = cloud.check


class HetznerMatrix(CloudMatrix):
    """Kill chains (or single kills) through the Hetzner create's and destroy's points, and every lost answer of a
    call that acts, against one HetznerSite."""
