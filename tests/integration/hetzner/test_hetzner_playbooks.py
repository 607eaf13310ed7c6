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


def test_lost_create_answer_gives_one_server(site, cloud):
    site.rule('drop', method='POST', path='/servers')
    ws = ready(site, 'hz-lost-create')
    assert len(site.servers('hz-lost-create')) == 1
    assert 'adopted' in actions(site, 'hz-lost-create')
    posts = [r for r in site.cloud.hetzner('requests') if r['method'] == 'POST' and r['path'] == '/servers']
    assert len(posts) >= 1
    assert str(site.servers('hz-lost-create')[0]['id']) == ws['resource_id']
    destroyed(site, 'hz-lost-create')


def test_lost_delete_answer_is_finished(site, cloud):
    ready(site, 'hz-lost-delete')
    site.rule('drop', method='DELETE', path='/servers')
    first = site.destroy('hz-lost-delete')
    if not first.ok:
        assert site.debt('hz-lost-delete'), first.explain()
        second = site.destroy('hz-lost-delete')
        assert second.ok, second.explain()
    assert 'delete_outcome_unknown' in actions(site, 'hz-lost-delete')
    ws = site.workspace('hz-lost-delete')
    assert ws['status'] == 'destroyed' and site.servers('hz-lost-delete') == []


def test_rejected_delete_retires_its_attempt_uncertain_one_does_not(site, cloud):
    ready(site, 'hz-rejected')
    site.rule('error', method='DELETE', path='/servers', status=403)
    run = site.destroy('hz-rejected')
    assert not run.ok and 'forbidden' in run.explain()
    assert 'delete_rejected' in actions(site, 'hz-rejected') and site.debt('hz-rejected')
    assert len(site.servers('hz-rejected')) == 1
    # Uncertain: a 500 after the DELETE is never taken for a rejection; the run looks and sends a new one.
    site.rule('error', method='DELETE', path='/servers', status=500)
    before = actions(site, 'hz-rejected').count('delete_rejected')
    destroyed(site, 'hz-rejected')
    after = actions(site, 'hz-rejected')
    assert after.count('delete_rejected') == before and 'delete_outcome_unknown' in after


def test_server_hidden_while_its_deletion_runs_is_not_taken_for_deleted(site, cloud):
    ws = ready(site, 'hz-hidden')
    site.rule('hide', method='DELETE', path='/servers', seconds=4)
    run = site.destroy('hz-hidden', ephemera_hetzner_action_timeout=1)
    assert not run.ok and 'not confirmed' in run.explain()
    assert site.workspace('hz-hidden')['status'] != 'destroyed' and site.debt('hz-hidden')
    # Hidden: the server answers 404 while its deletion action still runs.
    assert site.provider().find(ws['resource_id']) is None
    destroyed(site, 'hz-hidden')


def test_unbindable_creation_answer_is_reported_and_left_alone(site, cloud):
    site.rule('foreign_answer', method='POST', path='/servers')
    run = site.create('hz-unbound', site.repo)
    assert not run.ok and 'Unresolved allocation' in run.explain() and 'not deleted' in run.explain()
    assert len(site.servers('hz-unbound')) == 1
    deletes = [r for r in site.cloud.hetzner('requests') if r['method'] == 'DELETE']
    destroyed(site, 'hz-unbound')
    assert len([r for r in site.cloud.hetzner('requests') if r['method'] == 'DELETE']) == len(deletes) + 1


# Unknown server type, image and network are refused the same way (tests/unit/.../test_provider_hetzner.py).
@pytest.mark.parametrize('extra,message', [
    ({'ephemera_hetzner_location': 'mars1'}, 'Unknown location'),
    ({'ephemera_hetzner_labels': {'team': 'a b'}}, 'label value'),
    ({'ephemera_hetzner_token': 'wrong'}, 'Check the API token'),
])
def test_bad_input_is_refused_before_a_server_is_made(site, cloud, extra, message):
    def posts():
        return len([r for r in site.cloud.hetzner('requests') if r['method'] == 'POST'])

    before, sent = len(site.cloud.hetzner('servers')), posts()
    name = 'hz-bad-%d' % len(site.timings)
    run = site.create(name, site.repo, **extra)
    assert not run.ok and message in run.explain(), run.explain()
    # Nothing was created: no server, no SSH key, no POST at all.
    assert len(site.cloud.hetzner('servers')) == before and posts() == sent


def _server(site, provider, name, labels):
    """A server of ours made straight through the provider (as a run that lost its journal would have left it)."""
    from ansible_collections.ephemera.workspaces.plugins.module_utils.providers import base
    nonce = ownership.new_nonce()
    candidate = provider.candidate_for(name, '1')
    handle = provider.allocate(base.Allocation(candidate, name, 'ubuntu-24.04', 'fsn1', 'agent-' + name,
                                               'disposable-workspaces', labels=labels, nonce=nonce))
    return candidate, provider.resource_of(candidate, handle), nonce


def test_orphan_and_label_sweeps_on_hetzner_labels(site, cloud):
    import time
    from ansible_collections.ephemera.workspaces.plugins.module_utils.core.journal import Journal
    with Journal.open(site.journal_path):
        pass  # the journal (and with the provider, the controller secret) exist, whichever test ran first
    provider = site.provider()
    future = {'state': 'ready', 'expires_at': str(int(time.time()) + 3600), 'keep': 'false',
              'created_at': str(int(time.time()))}
    past = dict(future, expires_at=str(int(time.time()) - 7200))
    candidate, bound_id, nonce = _server(site, provider, 'hz-gone', future)
    with Journal.open(site.journal_path) as journal:
        journal.create_workspace('hz-gone', status='destroyed', desired_state='destroyed', provider='hetzner',
                                 location='fsn1', candidate_id=candidate, resource_id=bound_id,
                                 facts={'marker_nonce': nonce}, repo='file://' + site.repo, ref='main',
                                 purpose='left behind', params={'pool': 'disposable-workspaces'})
    lost_id = _server(site, provider, 'hz-lost', future)[1]
    expired_id = _server(site, provider, 'hz-expired', past)[1]
    copied = dict(site.cloud.hetzner('servers')[-1]['labels'])
    foreign_id = str(site.cloud.hetzner('foreign_create', name='someone-else', labels=copied)['id'])

    run = site.playbook('reconcile.yml', reconcile_resume_creates=False)
    assert run.ok, run.explain()
    found = dict((f['vmid'], (f['kind'], f['workspace'])) for f in run.task('Compare the journal with the cluster')[
        'findings'])
    assert found[bound_id] == ('destroyed_present', 'hz-gone')
    assert found[lost_id] == ('orphan', 'hz-lost')
    assert found[foreign_id][0] == 'foreign'
    run = site.playbook('reconcile.yml', reconcile_resume_creates=False, ephemera_orphans='delete')
    assert run.ok, run.explain()
    ids = set(str(s['id']) for s in site.cloud.hetzner('servers'))
    # Only the server an exact retained record binds is deleted.
    assert bound_id not in ids and {lost_id, expired_id, foreign_id} <= ids

    run = site.playbook('cleanup.yml', apply=True)
    assert run.ok, run.explain()
    entries = dict((e['id'], e) for e in run.task('Sweep the pool by labels')['entries'])
    assert entries[expired_id]['action'] == 'deleted'
    assert [e['id'] for e in entries.values() if e['action'] == 'deleted'] == [expired_id]
    ids = set(str(s['id']) for s in site.cloud.hetzner('servers'))
    assert expired_id not in ids and {lost_id, foreign_id} <= ids


def test_the_inventory_lists_hetzner_workspaces_and_orphans(site, cloud, tmp_path):
    from ansible_collections.ephemera.workspaces.plugins.module_utils.core.journal import Journal
    from tests.ansible_run import run_ansible
    with Journal.open(site.journal_path):
        pass
    provider = site.provider()
    lease = {'state': 'ready', 'expires_at': '4000000000', 'keep': 'false', 'created_at': '1700000000'}
    candidate, server_id, nonce = _server(site, provider, 'hz-listed', lease)
    orphan_id = _server(site, provider, 'hz-unrecorded', lease)[1]
    with Journal.open(site.journal_path) as journal:
        journal.create_workspace('hz-listed', status='ready', desired_state='present', provider='hetzner',
                                 location='fsn1', candidate_id=candidate, resource_id=server_id,
                                 facts={'marker_nonce': nonce}, repo='file://' + site.repo, ref='main',
                                 purpose='listed', params={'pool': 'disposable-workspaces'})
    info = site.cloud.info['hetzner']
    path = str(tmp_path / 'hz.workspaces.yml')
    with open(path, 'w') as out:
        out.write(json.dumps({'plugin': 'ephemera.workspaces.workspaces', 'journal_path': site.journal_path,
                              'hetzner_endpoint': info['endpoint']}))
    run = run_ansible(['ansible-inventory', '-i', path, '--list'], timeout=120, fail=False, callback=None,
                      env=dict(ANSIBLE_INVENTORY_UNPARSED_FAILED='1', XDG_CACHE_HOME=str(tmp_path / 'cache'),
                               HCLOUD_TOKEN=info['token']),
                      unset=('PROXMOX_', 'EPHEMERA_', 'AWS_', 'HCLOUD_'))
    assert run.returncode == 0, run.output
    listed = run.data
    assert 'hz-listed' in listed['provider_hetzner']['hosts'] and 'hz-listed' in listed['region_fsn1']['hosts']
    hostvars = listed['_meta']['hostvars']['hz-listed']
    text = json.dumps(hostvars)
    assert '"hetzner"' in text and server_id in text and info['token'] not in run.output
    assert orphan_id in run.output
