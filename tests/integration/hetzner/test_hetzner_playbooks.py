"""Workspaces on Hetzner Cloud through the shipped playbooks, on the try-out cloud's Hetzner fake (hcloud making the
requests, real sshd guests on the servers' public addresses): create to ready and a confirmed destroy; a lost create
answer gives one server; a lost delete answer is finished by the next run; a rejected (403) and an uncertain (500)
DELETE; a server hidden behind 404 while its deletion action runs; an unbindable creation answer reported and left
alone; bad input refused before a server is made; the sweeps; the inventory. One cloud and one controller for the
file; the workspaces of the create and destroy paths are made in one run and destroyed in two (an inventory host per
workspace, each fault aimed at its own workspace's name or server), so the file costs a few ansible-playbook runs,
not one pair per case. The verdict on every other status of a DELETE is tested at unit level
(tests/unit/plugins/module_utils/flows/test_hetzner_delete_answers.py)."""

import json

import pytest

from ansible_collections.ephemera.workspaces.plugins.module_utils.core import lease as leasing
from ansible_collections.ephemera.workspaces.plugins.module_utils.core import ownership

from tests.integration.playbooks import make_repo

from .hzrun import HetznerSite

# The workspaces of the create and destroy paths, made together by one create run.
HAPPY, LOST_CREATE, REJECTED, HIDDEN, LOST_DELETE, UNBOUND = (
    'hz-happy', 'hz-lost-create', 'hz-rejected', 'hz-hidden', 'hz-lost-delete', 'hz-unbound')
# How long a deleted server hides behind 404 while its deletion action runs (past the end of the run that
# deleted it, so the test sees it hidden).
HIDE_SECONDS = 8


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


def actions(site, name):
    return [e['action'] for e in site.events(name)]


def said(run, host):
    """Everything the run's tasks answered for ``host`` (one workspace), as text."""
    return json.dumps(run.results(host))


def server_id(site, name):
    return str(site.servers(name)[0]['id'])


def requests(site, method, path):
    return [r for r in site.cloud.hetzner('requests') if r['method'] == method and r['path'] == path]


@pytest.fixture(scope='module')
def created(site):
    """One create run for six workspaces: a clean one, one whose POST /servers answer is lost, three that the destroy
    paths use, and one whose creation is answered with another server."""
    site.cloud.clear()
    site.rule('drop', method='POST', path='/servers', match=LOST_CREATE)
    site.rule('foreign_answer', method='POST', path='/servers', match=UNBOUND)
    run = site.create_many(dict.fromkeys([HAPPY, LOST_CREATE, REJECTED, HIDDEN, LOST_DELETE, UNBOUND]), site.repo)
    site.cloud.clear()
    return run


@pytest.fixture(scope='module')
def first_destroy(site, created):  # pylint: disable=redefined-outer-name
    """One destroy run: the clean workspace, a 403 to DELETE, a lost DELETE answer, and a server hidden behind 404
    while its deletion runs (watched 1 s only). What the journal and the cloud hold right after it."""
    for name in (HAPPY, REJECTED, HIDDEN, LOST_DELETE):
        assert site.workspace(name)['status'] == 'ready', said(created, name)
    ids = {name: server_id(site, name) for name in (HAPPY, REJECTED, HIDDEN, LOST_DELETE)}
    site.cloud.clear()
    site.rule('error', method='DELETE', path='/servers', status=403, match='/servers/' + ids[REJECTED])
    site.rule('drop', method='DELETE', path='/servers', match='/servers/' + ids[LOST_DELETE])
    site.rule('hide', method='DELETE', path='/servers', seconds=HIDE_SECONDS, match='/servers/' + ids[HIDDEN])
    run = site.destroy_many({HAPPY: {}, REJECTED: {}, LOST_DELETE: {},
                             HIDDEN: {'ephemera_hetzner_action_timeout': 1}})
    # Hidden: the server answers 404 while its deletion action still runs.
    hidden_found = site.provider().find(ids[HIDDEN])
    site.cloud.clear()
    seen = {name: {'actions': actions(site, name), 'debt': site.debt(name), 'servers': site.servers(name),
                   'status': site.workspace(name)['status']} for name in ids}
    return {'run': run, 'ids': ids, 'seen': seen, 'hidden_found': hidden_found}


@pytest.fixture(scope='module')
def second_destroy(site, first_destroy, created):  # pylint: disable=redefined-outer-name
    """The next destroy run: a 500 to the rejected workspace's DELETE; the hidden, the lost-delete (unless its first
    run finished it) and the unbound workspaces."""
    ids = first_destroy['ids']
    site.cloud.clear()
    site.rule('error', method='DELETE', path='/servers', status=500, match='/servers/' + ids[REJECTED])
    names = [REJECTED, HIDDEN, UNBOUND] + ([LOST_DELETE] if first_destroy['seen'][LOST_DELETE]['status'] !=
                                           'destroyed' else [])
    unbound_id = server_id(site, UNBOUND)
    run = site.destroy_many(dict.fromkeys(names))
    site.cloud.clear()
    return {'run': run, 'names': names, 'unbound_id': unbound_id}


def test_create_to_ready(site, created):  # pylint: disable=redefined-outer-name
    for name in (HAPPY, LOST_CREATE, REJECTED, HIDDEN, LOST_DELETE):
        ws = site.workspace(name)
        assert ws['status'] == 'ready' and ws['provider'] == 'hetzner', said(created, name)
    ws = site.workspace(HAPPY)
    server_id = ws['resource_id']
    assert server_id.isdigit() and ws['location'] == 'fsn1'
    assert ws['candidate_id'].startswith('eph-hz-happy-')
    assert ws['activity'] != 'unknown' and 'brief' in ws['progress']
    [server] = site.servers(HAPPY)
    assert str(server['id']) == server_id and server['name'] == ws['candidate_id']
    assert ws['address'] == server['public_net']['ipv4']['ip'] and server['sshd'] == 'up'
    provider = site.provider()
    resource = provider.find(server_id)
    assert provider.verify(resource, HAPPY, ownership.record_nonce(ws)) == ownership.VERIFIED
    assert provider.labels(resource) == leasing.lease_labels(ws['lease'], 'ready')
    recorded = json.dumps(ws['params'])
    assert site.cloud.info['hetzner']['token'] not in recorded
    with site.journal() as journal:
        assert site.cloud.info['hetzner']['token'] not in json.dumps(journal.events(HAPPY), default=str)


def test_lost_create_answer_gives_one_server(site, created):  # pylint: disable=redefined-outer-name
    ws = site.workspace(LOST_CREATE)
    assert ws['status'] == 'ready', said(created, LOST_CREATE)
    assert len(site.servers(LOST_CREATE)) == 1
    assert 'adopted' in actions(site, LOST_CREATE)
    posts = [r for r in site.cloud.hetzner('requests') if r['method'] == 'POST' and r['path'] == '/servers'
             and r.get('workspace') == LOST_CREATE]
    assert len(posts) >= 1
    assert str(site.servers(LOST_CREATE)[0]['id']) == ws['resource_id']


def test_unbindable_creation_answer_is_reported_and_left_alone(site, created):  # pylint: disable=redefined-outer-name
    text = said(created, UNBOUND)
    assert not created.ok and 'Unresolved allocation' in text and 'not deleted' in text, text
    assert len(site.servers(UNBOUND)) == 1
    assert requests(site, 'DELETE', '/servers/' + server_id(site, UNBOUND)) == []


def test_destroy_confirmed(site, first_destroy):  # pylint: disable=redefined-outer-name
    run, server_id = first_destroy['run'], first_destroy['ids'][HAPPY]  # pylint: disable=redefined-outer-name
    seen = first_destroy['seen'][HAPPY]
    assert seen['status'] == 'destroyed' and seen['debt'] == [] and seen['servers'] == [], said(run, HAPPY)
    # The deletion was confirmed: its recorded action was read after the DELETE, then GET /servers/{id} (404).
    action_id = site.workspace(HAPPY)['provider_tasks']['delete'].split('/')[3]
    paths = [(r['method'], r['path']) for r in site.cloud.hetzner('requests')]
    delete_at = max(i for i, p in enumerate(paths) if p == ('DELETE', '/servers/' + server_id))
    action_reads = [i for i, p in enumerate(paths) if p == ('GET', '/actions/' + action_id)]
    server_reads = [i for i, p in enumerate(paths) if p == ('GET', '/servers/' + server_id)]
    assert action_reads and min(action_reads) > delete_at
    assert server_reads and max(server_reads) > max(action_reads)


def test_rejected_delete_retires_its_attempt_uncertain_one_does_not(site, first_destroy, second_destroy):  # pylint: disable=redefined-outer-name
    seen = first_destroy['seen'][REJECTED]
    text = said(first_destroy['run'], REJECTED)
    assert not first_destroy['run'].ok and 'forbidden' in text, text
    assert 'delete_rejected' in seen['actions'] and seen['debt']
    assert len(seen['servers']) == 1
    # Uncertain: a 500 after the DELETE is never taken for a rejection; the run looks and sends a new one.
    assert second_destroy['run'].ok, second_destroy['run'].explain()
    after = actions(site, REJECTED)
    assert after.count('delete_rejected') == seen['actions'].count('delete_rejected')
    assert 'delete_outcome_unknown' in after[len(seen['actions']):]
    ws = site.workspace(REJECTED)
    assert ws['status'] == 'destroyed' and site.debt(REJECTED) == [] and site.servers(REJECTED) == []


def test_lost_delete_answer_is_finished(site, first_destroy, second_destroy):  # pylint: disable=redefined-outer-name
    seen = first_destroy['seen'][LOST_DELETE]
    if seen['status'] != 'destroyed':
        # The run that lost the answer did not finish: it kept the debt, and the next run finished the destroy.
        assert seen['debt'], said(first_destroy['run'], LOST_DELETE)
        assert LOST_DELETE in second_destroy['names'] and second_destroy['run'].ok
    assert 'delete_outcome_unknown' in actions(site, LOST_DELETE)
    ws = site.workspace(LOST_DELETE)
    assert ws['status'] == 'destroyed' and site.servers(LOST_DELETE) == []


def test_server_hidden_while_its_deletion_runs_is_not_taken_for_deleted(site, first_destroy, second_destroy):  # pylint: disable=redefined-outer-name
    seen = first_destroy['seen'][HIDDEN]
    text = said(first_destroy['run'], HIDDEN)
    assert 'not confirmed' in text, text
    assert seen['status'] != 'destroyed' and seen['debt']
    # Hidden: the server answered 404 while its deletion action still ran.
    assert first_destroy['hidden_found'] is None
    assert second_destroy['run'].ok, second_destroy['run'].explain()
    ws = site.workspace(HIDDEN)
    assert ws['status'] == 'destroyed' and site.debt(HIDDEN) == [] and site.servers(HIDDEN) == []


def test_unbound_server_is_deleted_by_its_destroy_only(site, second_destroy):  # pylint: disable=redefined-outer-name
    assert second_destroy['run'].ok, second_destroy['run'].explain()
    ws = site.workspace(UNBOUND)
    assert ws['status'] == 'destroyed' and site.debt(UNBOUND) == [] and site.servers(UNBOUND) == []
    assert len(requests(site, 'DELETE', '/servers/' + second_destroy['unbound_id'])) == 1


# Unknown server type, image and network are refused the same way (tests/unit/.../test_provider_hetzner.py).
BAD_INPUT = {
    'hz-bad-location': ({'ephemera_hetzner_location': 'mars1'}, 'Unknown location'),
    'hz-bad-label': ({'ephemera_hetzner_labels': {'team': 'a b'}}, 'label value'),
    'hz-bad-token': ({'ephemera_hetzner_token': 'wrong'}, 'Check the API token'),
}


def test_bad_input_is_refused_before_a_server_is_made(site, cloud):
    def posts():
        return len([r for r in site.cloud.hetzner('requests') if r['method'] == 'POST'])

    before, sent = len(site.cloud.hetzner('servers')), posts()
    run = site.create_many({name: own for name, (own, message) in BAD_INPUT.items()}, site.repo)
    assert not run.ok
    for name, (own, message) in BAD_INPUT.items():
        assert message in said(run, name), said(run, name)
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
    found = {f['vmid']: (f['kind'], f['workspace']) for f in run.task('Compare the journal with the cluster')[
        'findings']}
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
    entries = {e['id']: e for e in run.task('Sweep the pool by labels')['entries']}
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
