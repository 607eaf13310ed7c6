"""Workspaces on Hetzner Cloud through the shipped playbooks, on the try-out cloud's Hetzner fake (hcloud making the
requests, real sshd guests on the servers' public addresses): create to ready and a confirmed destroy; a lost create
answer gives one server; a lost delete answer is finished by the next run; a rejected and an uncertain DELETE; a
server hidden behind 404 while its deletion action runs; an unbindable creation answer reported and left alone; bad
input refused before a server is made. One cloud and one controller for the file."""

import json

import pytest

from ansible_collections.ephemera.workspaces.plugins.module_utils.core import lease as leasing
from ansible_collections.ephemera.workspaces.plugins.module_utils.core import ownership

from tests.integration.playbooks import make_repo

from .hzrun import HetznerSite


@pytest.fixture(scope='module')
def site(localcloud, tmp_path_factory):
    directory = tmp_path_factory.mktemp('hetzner')
    site = HetznerSite(localcloud, directory)
    site.repo = make_repo(str(directory / 'repo'))
    yield site
    print('playbook runs (playbook, workspace, seconds): %s' % site.timings)


@pytest.fixture()
def cloud(site):
    site.cloud.clear()
    yield site.cloud
    site.cloud.clear()


def ready(site, name, **extra):
    run = site.create(name, site.repo, **extra)
    assert run.ok, run.explain()
    ws = site.workspace(name)
    assert ws['status'] == 'ready' and ws['provider'] == 'hetzner', ws
    return ws


def destroyed(site, name):
    run = site.destroy(name)
    assert run.ok, run.explain()
    ws = site.workspace(name)
    assert ws['status'] == 'destroyed' and site.debt(name) == []
    assert site.servers(name) == []
    return ws


def actions(site, name):
    return [e['action'] for e in site.events(name)]


def test_create_to_ready_then_destroy_confirmed(site, cloud):
    ws = ready(site, 'hz-happy')
    server_id = ws['resource_id']
    assert server_id.isdigit() and ws['location'] == 'fsn1'
    assert ws['candidate_id'].startswith('eph-hz-happy-')
    assert ws['activity'] != 'unknown' and 'brief' in ws['progress']
    [server] = site.servers('hz-happy')
    assert str(server['id']) == server_id and server['name'] == ws['candidate_id']
    assert ws['address'] == server['public_net']['ipv4']['ip'] and server['sshd'] == 'up'
    provider = site.provider()
    resource = provider.find(server_id)
    assert provider.verify(resource, 'hz-happy', ownership.record_nonce(ws)) == ownership.VERIFIED
    assert provider.labels(resource) == leasing.lease_labels(ws['lease'], 'ready')
    recorded = json.dumps(ws['params'])
    assert site.cloud.info['hetzner']['token'] not in recorded
    with site.journal() as journal:
        assert site.cloud.info['hetzner']['token'] not in json.dumps(journal.events('hz-happy'), default=str)
    destroyed(site, 'hz-happy')
    # The deletion was confirmed: its action succeeded, then GET /servers/{id} answered 404.
    requests = site.cloud.hetzner('requests')
    delete_at = max(i for i, r in enumerate(requests) if r['method'] == 'DELETE' and r['path'] == '/servers/' + server_id)
    later = [r['path'] for r in requests[delete_at + 1:]]
    assert any(p.startswith('/actions/') for p in later) and '/servers/' + server_id in later
