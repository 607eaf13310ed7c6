"""Ownership markers against people who may edit a container's description: crafted fields never raise, and a
marker of an earlier life of a workspace (a restored backup, a copy pasted onto a container that got the same
VMID) is never taken for the current one's. docs/internals/security.md, findings 5 and 6."""

import pytest

from ansible_collections.ephemera.workspaces.plugins.module_utils.core import ownership
from ansible_collections.ephemera.workspaces.plugins.module_utils.flows.create import CreateFlow
from ansible_collections.ephemera.workspaces.plugins.module_utils.flows.destroy import DestroyFlow, NotOurs
from ansible_collections.ephemera.workspaces.plugins.module_utils.flows.reconcile import Reconciler

from flowsite import POOL, SECRET

CONTROLLER = ownership.controller_id(SECRET)
NONCE = '5e' * 16
PARAMS = {'pool': POOL, 'task_timeout': 30, 'lock_timeout': 2, 'shutdown_timeout': 5}
STEPS = ('request', 'vmid', 'clone', 'wait_clone', 'configure', 'start', 'address')


def genuine(workspace='ws1', vmid=105, nonce=NONCE):
    return ownership.render(SECRET, CONTROLLER, workspace, vmid, nonce)


def crafted(version='v1', **fields):
    """A marker line naming our controller with ``fields`` as given (what anyone may write into a description);
    version 1 markers (no nonce) are what every controller before nonces accepted."""
    base = dict(workspace='ws1', controller=CONTROLLER, vmid='105', token='ab' * 32)
    if version == 'v2':
        base['nonce'] = NONCE
    base.update(fields)
    return '%s %s %s' % (ownership.PREFIX, version, ' '.join('%s=%s' % kv for kv in base.items() if kv[1] is not None))


@pytest.mark.parametrize('description', [
    crafted(token='é' * 64),                                   # a non-ASCII token: compare_digest raised on it
    crafted(token='ÿ'),
    genuine().replace('token=', 'token=\u00e9'),
    crafted(vmid='１０５'),                                      # full-width digits: int() reads them as 105
    crafted(vmid='0105'),
    crafted(vmid='9' * 40),
    crafted(workspace='WS1'),
    crafted(workspace='ws1\u200b'),
    crafted('v2', token='é' * 64),
    crafted('v2', nonce='é' * 32),
    crafted('v2', nonce=None),
    crafted('v2', vmid='１０５'),
    crafted(token=None),
    crafted(token='AB' * 32),
    '%s v3 workspace=ws1 controller=%s vmid=105 token=%s' % (ownership.PREFIX, CONTROLLER, 'ab' * 32),
    crafted(workspace='x' * 10000),
], ids=lambda description: repr(description[-40:]))
def test_a_crafted_marker_naming_our_controller_is_forged_never_an_error(description):
    for nonce in (ownership.ANY, None, NONCE):
        assert ownership.verify(description, SECRET, CONTROLLER, 'ws1', 105, nonce) == ownership.FORGED
        assert ownership.verify(description, SECRET, CONTROLLER) == ownership.FORGED


def test_a_marker_of_another_life_of_the_workspace_is_replayed():
    marker = genuine(nonce=NONCE)
    assert ownership.verify(marker, SECRET, CONTROLLER, 'ws1', 105, NONCE) == ownership.VERIFIED
    assert ownership.verify(marker, SECRET, CONTROLLER, 'ws1', 105, '7a' * 16) == ownership.REPLAYED
    # A record made before nonces accepts only the old form, which it made.
    assert ownership.verify(marker, SECRET, CONTROLLER, 'ws1', 105, None) == ownership.REPLAYED
    old = ownership.render(SECRET, CONTROLLER, 'ws1', 105)
    assert ' v1 ' in old and 'nonce=' not in old
    assert ownership.verify(old, SECRET, CONTROLLER, 'ws1', 105, None) == ownership.VERIFIED
    assert ownership.verify(old, SECRET, CONTROLLER, 'ws1', 105, NONCE) == ownership.REPLAYED
    # The nonce is signed: changing it breaks the token.
    assert ownership.verify(marker.replace(NONCE, '7a' * 16), SECRET, CONTROLLER, 'ws1', 105,
                            '7a' * 16) == ownership.FORGED


def create(site, name):
    for step in STEPS:
        CreateFlow(site.journal, site.provider, site.create_params(name), SECRET, sleep=lambda s: None).run(step)
    return site.journal.get_workspace(name)


def destroy(site, name):
    for step in ('mark', 'shutdown', 'stop', 'delete', 'finish'):
        DestroyFlow(site.journal, site.provider, site.destroy_params(name), SECRET, sleep=lambda s: None).run(step)


def test_the_nonce_is_recorded_before_the_clone_and_is_in_the_marker(site):
    ws = create(site, 's-nonce')
    nonce = ws['facts']['marker_nonce']
    assert ownership.valid_nonce(nonce)
    dispatched = [e for e in site.journal.events('s-nonce') if (e['kind'], e['action']) == ('dispatched', 'clone')]
    assert dispatched and dispatched[0]['at'] <= [e for e in site.journal.events('s-nonce')
                                                  if e['action'] == 'clone_confirmed'][0]['at']
    assert 'nonce=%s ' % nonce in site.pve.ct(ws['vmid']).config['description']


def test_a_crafted_description_on_a_tagged_container_does_not_stop_reconcile(site):
    vmid = create(site, 's-ready')['vmid']
    site.journal.update_workspace('s-ready', site.journal.get_workspace('s-ready')['generation'], status='ready')
    # Any user who may create a container in the pool (or tag one) writes what they like into its description;
    # our controller id is in every marker anyone can read.
    site.pve.add_ct(170, 'crafted', pool=POOL, config={'tags': 'ephemera',
                                                       'description': crafted(vmid='170', token='é' * 64)})
    site.pve.add_ct(171, 'crafted-2', pool=POOL, config={'description': crafted(vmid='１７１')})
    report = Reconciler(site.journal, site.provider, SECRET, PARAMS).run()
    found = {f['workspace'] or f['vmid']: (f['kind'], f['detail']) for f in report['findings']}
    assert found['s-ready'][0] == 'ok' and found[vmid] if vmid in found else True
    assert found[170] == ('foreign', 'in the pool but not ours (forged)')
    assert found[171] == ('foreign', 'in the pool but not ours (forged)')
    assert site.pve.ct(170) is not None and site.pve.ct(171) is not None


@pytest.mark.parametrize('orphans', ['report', 'delete'])
def test_a_container_at_a_destroyed_records_vmid_is_reported_never_deleted(site, orphans):
    """A restored backup of a destroyed workspace carries its genuine marker (nonce and all): reconcile used to
    destroy whatever verified there. A VMID is given again, so even reconcile's delete mode (for providers whose ids
    are never reused) leaves it alone."""
    ws = create(site, 's-gone')
    vmid, description = ws['vmid'], site.pve.ct(ws['vmid']).config['description']
    destroy(site, 's-gone')
    assert site.journal.get_workspace('s-gone')['status'] == 'destroyed' and site.pve.ct(vmid) is None
    site.pve.add_ct(vmid, 'restored', pool=POOL, status='running', config={'description': description})
    sent = len(site.pve.requests)
    report = Reconciler(site.journal, site.provider, SECRET, dict(PARAMS, orphans=orphans)).run()
    [finding] = [f for f in report['findings'] if f['vmid'] == vmid]
    assert (finding['kind'], finding['workspace']) == ('destroyed_present', 's-gone')
    assert 'not touched' in finding['detail'] and 'confirm_orphan=true' in finding['detail']
    assert report['counts']['destroyed'] == 0 and not report.get('changed')
    assert site.pve.ct(vmid) is not None and site.pve.ct(vmid).status == 'running'
    assert [r for r in site.pve.requests[sent:] if r[0] in ('POST', 'PUT', 'DELETE')] == []
    assert site.journal.get_workspace('s-gone')['status'] == 'destroyed'


def test_a_marker_of_an_earlier_life_at_a_reused_vmid_is_not_destroyed(site):
    """Workspace s-life is destroyed and made again at the same VMID; someone replaces that container with one of
    their own carrying the first life's marker. Destroying the workspace leaves theirs alone."""
    first = create(site, 's-life')
    vmid, old_marker = first['vmid'], site.pve.ct(first['vmid']).config['description']
    destroy(site, 's-life')
    second = create(site, 's-life')
    assert second['vmid'] == vmid and second['facts']['marker_nonce'] != first['facts']['marker_nonce']
    site.pve.cts.remove(site.pve.ct(vmid))
    site.pve.add_ct(vmid, 'someone-elses', pool=POOL, status='running', config={'description': old_marker})
    sent = len(site.pve.requests)
    try:
        destroy(site, 's-life')
    except NotOurs as refused:
        assert 'earlier life of this workspace' in str(refused)
    assert site.pve.ct(vmid).config['hostname'] == 'someone-elses' and site.pve.ct(vmid).status == 'running'
    assert [r for r in site.pve.requests[sent:] if r[0] in ('POST', 'PUT', 'DELETE') and '/%d' % vmid in r[1]] == []


def test_a_workspace_made_before_nonces_is_still_destroyed(site):
    """Back-compat: a record with no nonce and its container with a version 1 marker."""
    ws = create(site, 's-legacy')
    vmid = ws['vmid']
    facts = {k: v for k, v in ws['facts'].items() if k != 'marker_nonce'}
    site.journal.update_workspace('s-legacy', ws['generation'], facts=facts)
    site.pve.ct(vmid).config['description'] = ownership.render(SECRET, CONTROLLER, 's-legacy', vmid)
    destroy(site, 's-legacy')
    assert site.pve.ct(vmid) is None and site.journal.get_workspace('s-legacy')['status'] == 'destroyed'


def test_the_inventory_does_not_take_an_earlier_lifes_marker_for_the_workspaces():
    from ansible_collections.ephemera.workspaces.plugins.inventory import workspaces as inventory
    record = {'name': 'f', 'status': 'ready', 'activity': 'idle', 'desired_state': 'present', 'vmid': 106,
              'candidate_vmid': 106, 'node': 'pve1', 'repo': 'r', 'ref': 'main', 'purpose': 'p', 'created_at': 'x',
              'updated_at': 'x', 'failure': None, 'address': None, 'params': {'pool': POOL}, 'progress': {},
              'facts': {'marker_nonce': NONCE}}
    for marker, verdict in ((genuine('f', 106, NONCE), ownership.VERIFIED),
                            (genuine('f', 106, '7a' * 16), ownership.REPLAYED)):
        live = {'vmid': 106, 'name': 'renamed-f', 'status': 'running', 'pool': POOL, 'node': 'pve1', 'type': 'lxc'}
        snap = inventory.assemble([dict(record)], [], {}, [live], [POOL])
        ws = snap['workspaces'][0]
        inventory.apply_marker(snap, ws, marker, SECRET, CONTROLLER)
        assert ws['marker'] == verdict
        assert 'marker_nonce' not in inventory.workspace_vars(ws)


def test_one_container_that_cannot_be_checked_does_not_stop_reconcile(site, monkeypatch):
    for name in ('s-first', 's-second'):
        create(site, name)
        site.journal.update_workspace(name, site.journal.get_workspace(name)['generation'], status='ready')
    broken = site.journal.get_workspace('s-first')['vmid']
    find = site.provider.find

    def failing_find(vmid, node=None, search=False):
        if vmid == broken:
            raise ValueError('a config this code did not expect')
        return find(vmid, node, search)
    monkeypatch.setattr(site.provider, 'find', failing_find)
    report = Reconciler(site.journal, site.provider, SECRET, PARAMS).run()
    found = {f['workspace']: (f['kind'], f['detail']) for f in report['findings'] if f['workspace']}
    assert found['s-second'][0] == 'ok'
    assert found['s-first'][0] == 'unreadable' and 'ValueError' in found['s-first'][1]
