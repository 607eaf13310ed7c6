"""The Compute Engine rows' invariants see what they claim to count (tests/faults/gcp.py, tests/faults/cloud.py): a
clean create on the try-out cloud's Compute Engine fake passes every one of them and its trace names the provider's
kill points; each invariant fails on a fake broken on purpose: an instance with our marker that no record holds (a
leak, and an insert no record announced), its copy on another name (foreign, no leak), a foreign instance relabelled
and one stopped by a request of ours (foreign), a ready workspace whose instance is stopped (ready). One cloud and one
create for the file.
"""

import uuid

import pytest

from ansible_collections.ephemera.workspaces.plugins.module_utils.core import ownership
from tests.faults import cloud, gcp
from tests.faults.matrix import points_of


@pytest.fixture(scope='module')
def cloud_site(tmp_path_factory):
    site = gcp.GcpSite.start(str(tmp_path_factory.mktemp('faults-gcp')))
    try:
        site.clear_faults()
        site.log_requests()
        outcome = site.run([site.create_op('ok1')])
        assert outcome.ok, outcome.explain()
        site.trace = outcome.trace
        yield site
    finally:
        site.stop()


def check(site, names, foreign_before=None):
    return gcp.check(site, names, foreign_before or {}, site.requests(), site.secret())


def fake_path(site, tail=''):
    g = site.info['gcp']
    return '/compute/v1/projects/%s/zones/%s/instances%s' % (g['project'], g['zone'], tail)


def call(site, method, tail, body=None, foreign=False):
    """A request straight at the fake's API: (its requestId, the answer). ``foreign``: another principal's (left out
    of the requests our controller sent)."""
    import http.client
    import json
    import urllib.parse
    request = str(uuid.uuid4())
    if foreign:
        site.foreign_requests = getattr(site, 'foreign_requests', set()) | {request}
    url = urllib.parse.urlsplit(site.info['gcp']['endpoint'])
    conn = http.client.HTTPConnection(url.hostname, url.port, timeout=30)
    try:
        conn.request(method, fake_path(site, tail) + '?requestId=' + request,
                     None if body is None else json.dumps(body), {'Content-Type': 'application/json'})
        answer = conn.getresponse()
        data = json.loads(answer.read() or b'{}')
    finally:
        conn.close()
    assert answer.status == 200, data
    return request, data


def insert(site, name, labels, marker, foreign=True):
    g = site.info['gcp']
    body = {'name': name, 'machineType': 'zones/%s/machineTypes/%s' % (g['zone'], g['machine_type']),
            'labels': labels, 'metadata': {'items': [{'key': gcp.META_MARKER, 'value': marker}]},
            'networkInterfaces': [{'network': 'projects/%s/global/networks/default' % g['project']}]}
    return call(site, 'POST', '', body, foreign=foreign)[0]


def test_a_clean_create_passes_every_invariant_and_its_trace_names_the_provider_s_points(cloud_site):
    found, leaks, view = check(cloud_site, ['ok1'])
    assert found == {name: [] for name in cloud.NAMES} and leaks == {}
    assert list(view.ours.values()) == ['ok1']
    points = [point for point, nth in points_of(cloud_site.trace, 'ok1')]
    for point in ('create.clone journal clone', 'create.clone gcp instances.insert',
                  'create.wait_clone gcp operation DONE insert', 'create.ready gcp instances.setLabels'):
        assert point in points, points
    assert [p for p, n in gcp.gcp_decisive(points_of(cloud_site.trace, 'ok1'))][:3] == [
        'create.clone journal clone', 'create.clone gcp instances.insert', 'create.wait_clone gcp operation DONE insert']


def test_an_instance_of_ours_no_record_holds_is_a_leak_and_its_copy_is_foreign(cloud_site):
    secret = cloud_site.secret()
    name = 'eph-ghost-0123456789abcdef'
    marker = ownership.render_resource(secret, ownership.controller_id(secret), 'ghost', name, ownership.new_nonce())
    labels = {'ephemera': 'workspace', 'ephemera-workspace': 'ghost'}
    # Sent as if by our controller, with a requestId no record announced.
    request = insert(cloud_site, name, labels, marker, foreign=False)
    insert(cloud_site, 'theirs-ghost', labels, marker)
    try:
        found, leaks, view = check(cloud_site, ['ghost'])
        assert leaks == {name: 'ghost: no journal record'}
        assert 'theirs-ghost' in view.foreign and 'theirs-ghost' not in view.ours
        assert found['events'] == ['POST instances was sent with requestId %s, which no journal record holds'
                                   % request]
        before = cloud.CloudView(cloud_site, secret).foreign
        # The foreign principal relabels its copy: changed, by nobody of ours.
        fingerprint = call(cloud_site, 'GET', '/theirs-ghost')[1]['labelFingerprint']
        call(cloud_site, 'POST', '/theirs-ghost/setLabels', {'labels': dict(labels, team='web'),
                                                             'labelFingerprint': fingerprint}, foreign=True)
        found, leaks, view = check(cloud_site, ['ghost'], before)
        assert found['foreign'] == ['foreign theirs-ghost changed: tags']
        # A request of ours stops it.
        call(cloud_site, 'POST', '/theirs-ghost/stop', {})
        found, leaks, view = check(cloud_site, ['ghost'], before)
        assert found['foreign'] == ['foreign theirs-ghost changed: state, tags',
                                    'our controller sent POST instances.stop to foreign theirs-ghost']
    finally:
        for each in (name, 'theirs-ghost'):
            call(cloud_site, 'DELETE', '/' + each, foreign=True)


def test_a_ready_workspace_whose_instance_is_stopped_fails_ready(cloud_site):
    with cloud_site.journal() as journal:
        name = journal.get_workspace('ok1')['resource_id']
    call(cloud_site, 'POST', '/%s/stop' % name, {})
    found, leaks, view = check(cloud_site, ['ok1'])
    assert found['ready'] and found['ready'][0] == 'ok1 is ready, but %s is TERMINATED' % name
