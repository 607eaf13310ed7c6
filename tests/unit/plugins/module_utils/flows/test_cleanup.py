"""The direct cleanup sweep by labels (flows/cleanup.py and the workspace_cleanup module), against an in-process fakepve.

Every row of the decision table of docs/leases.md is a container in the pool, with our marker and a lease line; beside
them foreign, forged, copied and kept containers, one the journal knows, a template and one outside the scope. A dry
run sends nothing that changes the cluster; an applied sweep deletes exactly the rows the table selects whose marker
verifies and whose workspace the journal does not know.
"""

import os
import re
import time

import pytest

from ansible_collections.ephemera.workspaces.plugins.module_utils.core import lease as leasing
from ansible_collections.ephemera.workspaces.plugins.module_utils.core import ownership
from ansible_collections.ephemera.workspaces.plugins.module_utils.flows.cleanup import Sweep, sweep_secret
from ansible_collections.ephemera.workspaces.plugins.module_utils.providers.proxmox.provider import with_lease
from ansible_collections.ephemera.workspaces.plugins.plugin_utils.in_process import run_in_process

from flowsite import POOL, SECRET, TEMPLATE

NOW = time.time()
HOUR = 3600
CONTROLLER = ownership.controller_id(SECRET)


def marker(name, vmid, secret=SECRET):
    return ownership.render(secret, ownership.controller_id(secret), name, vmid)


def description(name, vmid, labels, secret=SECRET, note=None):
    text = marker(name, vmid, secret) if name else ''
    if note:
        text = (text + '\n' if text else '') + note
    return with_lease(text, labels) if labels else text


def labels(state=None, expires_at=None, keep=None):
    out = {'created_at': str(int(NOW - 10 * HOUR))}
    if state is not None:
        out['state'] = state
    if expires_at is not None:
        out['expires_at'] = expires_at if isinstance(expires_at, str) else str(int(expires_at))
    if keep is not None:
        out['keep'] = keep
    return out


# vmid -> (name in the marker, labels, expected decision, expected action in an applied sweep with the secret)
ROWS = {
    # none, or keep=true: skip
    200: ('no-labels', {}, 'skip', 'skipped'),
    201: ('kept', labels('ready', NOW - 2 * HOUR, 'true'), 'skip', 'skipped'),
    202: ('kept-failed', labels('failed', keep='TRUE'), 'skip', 'skipped'),
    # running / provisioning: only when stale, past expires_at plus 12 hours
    203: ('running-fresh', labels('running', NOW - 11 * HOUR), 'skip', 'skipped'),
    204: ('running-stale', labels('running', NOW - 13 * HOUR), 'delete', 'deleted'),
    205: ('provisioning-fresh', labels('provisioning', NOW - HOUR), 'skip', 'skipped'),
    206: ('provisioning-stale', labels('provisioning', NOW - 13 * HOUR), 'delete', 'deleted'),
    # leased / ready / active: once past expires_at
    207: ('leased-past', labels('leased', NOW - 60), 'delete', 'deleted'),
    208: ('ready-past', labels('ready', NOW - 60), 'delete', 'deleted'),
    209: ('active-past', labels('active', NOW - 60), 'delete', 'deleted'),
    210: ('ready-future', labels('ready', NOW + HOUR), 'skip', 'skipped'),
    211: ('active-no-expiry', labels('active'), 'skip', 'skipped'),
    # failed / released / expired: delete
    212: ('failed', labels('failed'), 'delete', 'deleted'),
    213: ('released', labels('released', NOW + HOUR), 'delete', 'deleted'),
    214: ('expired', labels('expired'), 'delete', 'deleted'),
    # anything else: once past expires_at; skip when it is missing or in the future
    215: ('other-past', labels('hibernating', NOW - 60), 'delete', 'deleted'),
    216: ('other-missing', labels('hibernating'), 'skip', 'skipped'),
    217: ('other-future', labels('hibernating', NOW + HOUR), 'skip', 'skipped'),
    218: ('no-state-past', labels(None, NOW - 60), 'delete', 'deleted'),
    # expires_at as RFC 3339, past and future
    219: ('rfc3339-past', labels('ready', leasing.format_time(NOW - HOUR)), 'delete', 'deleted'),
    220: ('rfc3339-future', labels('ready', '2999-01-01T00:00:00+02:00'), 'skip', 'skipped'),
    221: ('unreadable-time', labels('ready', 'tomorrow'), 'report', 'reported'),
}


def add(site, vmid, desc, status='running', pool=POOL, **config):
    config['description'] = desc
    return site.pve.add_ct(vmid, 'ct-%d' % vmid, status=status, pool=pool, config=config)


@pytest.fixture
def fleet(site):
    """The table's rows, and the containers around them whose labels say delete but must not be deleted."""
    for vmid, (name, row, dummy, dummy) in ROWS.items():
        add(site, vmid, description(name, vmid, row), status='running' if vmid % 2 else 'stopped')
    expired = labels('ready', NOW - HOUR)
    # Not ours: no marker, another controller's marker, a forged token, our marker copied from another VMID.
    add(site, 230, description(None, 230, expired, note='someone else copied our labels'))
    add(site, 231, description('theirs', 231, expired, secret=b'another controller'))
    forged = marker('forged', 232).replace('token=', 'token=00')
    add(site, 232, with_lease(forged, expired))
    add(site, 233, description('copied', 208, expired))
    # Known to the journal: by the marker's name, and by its VMID alone.
    add(site, 240, description('known', 240, expired))
    site.journal.create_workspace('known', status='ready', resource_id=240, location='pve1')
    add(site, 241, description('renamed', 241, expired))
    site.journal.create_workspace('holds-241', status='failed', resource_id=241, location='pve1')
    # Destroyed in the journal but there again with its marker (a restored backup, a copied marker): reported, never
    # deleted by a sweep.
    add(site, 242, description('destroyed-record', 242, labels('released')))
    site.journal.create_workspace('destroyed-record', status='destroyed', desired_state='destroyed',
                                  resource_id=242, location='pve1')
    # A template in the pool with our marker and expired labels; one of ours outside the scope; one by tag only.
    site.pve.add_ct(250, 'old-template', template=True, pool=POOL,
                    config={'description': description('template', 250, labels('failed'))})
    add(site, 251, description('elsewhere', 251, labels('failed')), pool=None)
    add(site, 252, description('tagged', 252, labels('failed')), pool=None, tags='ephemera')
    site.setup_requests = len(site.pve.requests)
    return site


EXPECTED = {vmid: (row[2], row[3]) for vmid, row in ROWS.items()}
EXPECTED.update({230: ('report', 'reported'), 231: ('report', 'reported'), 232: ('report', 'reported'),
                 233: ('report', 'reported'), 240: ('delete', 'reported'), 241: ('delete', 'reported'),
                 242: ('delete', 'reported'), 252: ('delete', 'deleted')})
DELETED = sorted(vmid for vmid, (dummy, action) in EXPECTED.items() if action == 'deleted')


def sweep(site, apply=False, secret=SECRET, journal=True, **options):
    options.setdefault('now', NOW)
    options.setdefault('lock_timeout', 2)
    return Sweep(site.journal if journal else None, site.provider, secret, pool=POOL, apply=apply, task_timeout=30,
                 sleep=lambda seconds: None, **options)


def by_id(result):
    return {e['id']: e for e in result['entries']}


def test_a_dry_run_decides_every_row_of_the_table_and_sends_nothing_that_changes(fleet):
    result = sweep(fleet).run()
    found = by_id(result)
    assert sorted(found) == sorted(EXPECTED)  # no template, nothing outside the pool and the tag
    for vmid, (decision, action) in EXPECTED.items():
        entry = found[vmid]
        assert entry['decision'] == decision, (vmid, entry)
        assert entry['action'] == (action if action != 'deleted' else 'would delete'), (vmid, entry)
    assert fleet.changes_sent() == []
    assert result['counts'] == {'to_delete': len(DELETED), 'would_delete': len(DELETED), 'deleted': 0,
                                'reported': 8, 'skipped': 10, 'failed': 0}
    assert result['report'][0] == 'cleanup (dry run): %d to delete, 0 deleted, 8 reported, 10 skipped, 0 failed' \
        % len(DELETED)
    assert len(result['report']) == 1 + len(EXPECTED)


def test_the_entries_say_what_they_carry_and_why(fleet):
    found = by_id(sweep(fleet).run())
    ready = found[208]
    assert (ready['name'], ready['resource_name'], ready['location'], ready['verdict']) == (
        'ready-past', 'ct-208', 'pve1', ownership.VERIFIED)
    assert ready['labels']['state'] == 'ready' and 'has passed' in ready['reason'] and not ready['known']
    assert found[230]['verdict'] == ownership.ABSENT and 'does not verify' in found[230]['reason']
    assert found[231]['verdict'] == ownership.FOREIGN
    assert found[232]['verdict'] == ownership.FORGED
    assert found[233]['verdict'] == ownership.MISMATCH
    assert found[240]['known'] and found[240]['reason'].endswith(
        'known to the journal: released through its queue (ephemera.workspaces.destroy -e workspace=known, or the '
        'expiry sweep)')
    assert found[241]['known'] and 'workspace=holds-241' in found[241]['reason']
    assert not found[242]['known']
    assert 'parses as neither' in found[221]['reason']


def vmid_of(path):
    return int(re.search(r'/lxc/([0-9]+)', path).group(1))


def test_apply_deletes_exactly_the_verified_unknown_rows_the_table_selects(fleet):
    running = sorted(vmid for vmid in DELETED if fleet.pve.ct(vmid).status == 'running')
    result = sweep(fleet, apply=True).run()
    found = by_id(result)
    for vmid, (decision, action) in EXPECTED.items():
        assert found[vmid]['action'] == action, (vmid, found[vmid])
    gone = sorted(vmid for vmid in list(EXPECTED) + [250, 251] if fleet.pve.ct(vmid) is None)
    assert gone == DELETED
    assert fleet.pve.ct(250).template and fleet.pve.ct(TEMPLATE) is not None and fleet.pve.ct(251) is not None
    # Only the deletions changed anything: stops of the running ones and deletes with purge, nothing else.
    sent = fleet.changes_sent()
    assert sorted(vmid_of(path) for method, path, body in sent if method == 'DELETE') == DELETED
    assert sorted(vmid_of(path) for method, path, body in sent if method == 'POST') == running
    assert all(path.endswith('/status/stop') for method, path, body in sent if method == 'POST')
    assert set(method for method, path, body in sent) <= {'POST', 'DELETE'}
    assert result['counts']['deleted'] == result['counts']['to_delete'] == len(DELETED)
    assert result['report'][0].startswith('cleanup (applied): %d to delete, %d deleted, 8 reported, 10 skipped, '
                                          '0 failed' % (len(DELETED), len(DELETED)))
    # Each deletion is in the journal under the workspace its marker names.
    assert [e['action'] for e in fleet.journal.events('ready-past')] == ['cleanup_delete', 'cleanup_deleted']
    assert fleet.journal.events('ready-past')[0]['detail']['vmid'] == 208
    assert 'cleanup_delete' not in [e['action'] for e in fleet.journal.events('destroyed-record')]
    assert 'was destroyed at this id' in found[242]['reason'] and fleet.pve.ct(242) is not None
    assert fleet.journal.events('known')[-1]['action'] == 'create_workspace'
    # A second sweep finds nothing more to delete.
    again = sweep(fleet, apply=True).run()
    assert again['counts']['to_delete'] == 0 and again['counts']['deleted'] == 0


def test_without_the_secret_nothing_verifies_and_nothing_is_deleted(fleet):
    result = sweep(fleet, apply=True, secret=None).run()
    assert result['report'][0].startswith('cleanup (applied): 0 to delete, 0 deleted')
    assert 'no controller secret' in result['report'][0] and 'nothing is deleted' in result['report'][0]
    assert set(e['verdict'] for e in result['entries'] if e['name']) == {ownership.UNVERIFIED}
    assert all(e['action'] in ('reported', 'skipped') for e in result['entries'])
    assert fleet.changes_sent() == []


def test_with_another_secret_our_containers_are_foreign_and_reported(fleet):
    result = sweep(fleet, apply=True, secret=b'a secret made after the journal was lost').run()
    assert result['counts']['deleted'] == 0 and fleet.changes_sent() == []
    assert by_id(result)[208]['verdict'] == ownership.FOREIGN


def test_without_a_journal_every_resource_is_unknown_and_the_known_ones_go_too(fleet):
    result = sweep(fleet, apply=True, journal=False, journal_path='/lost/journal.sqlite').run()
    found = by_id(result)
    assert found[240]['action'] == found[241]['action'] == 'deleted'
    assert 'no journal at /lost/journal.sqlite: every resource counts as unknown to it' in result['report'][0]
    assert fleet.pve.ct(240) is None and fleet.pve.ct(241) is None


def test_one_resource_that_cannot_be_deleted_or_read_does_not_stop_the_sweep(fleet):
    fleet.pve.ct(212).config['protection'] = 1
    fleet.pve.fail('GET', '/nodes/pve1/lxc/214/config', 500, 'config read failed on purpose')
    result = sweep(fleet, apply=True).run()
    found = by_id(result)
    assert found[212]['action'] == 'failed' and 'protection' in found[212]['error']
    assert found[214]['action'] == 'failed' and 'config read failed on purpose' in found[214]['error']
    assert fleet.pve.ct(212) is not None and fleet.pve.ct(214) is not None
    assert all(fleet.pve.ct(vmid) is None for vmid in DELETED if vmid not in (212, 214))
    assert result['counts']['failed'] == 2 and result['report'][0].endswith('2 failed')
    assert [e['action'] for e in fleet.journal.events('failed')] == ['cleanup_delete', 'cleanup_delete_failed']
    assert [line.split()[2] for line in result['report'] if line.startswith('failed ')] == ['212', '214']


def test_a_resource_whose_labels_changed_since_they_were_read_is_not_deleted(fleet):
    run = sweep(fleet, apply=True)
    found = run._find

    def refreshed(listed):
        resource = found(listed)
        if listed['id'] == 208:
            # A heartbeat elsewhere moved the expiry after the sweep read it: the fresh look before the delete sees it.
            fleet.pve.ct(208).config['description'] = description('ready-past', 208, labels('ready', NOW + HOUR))
        return resource
    run._find = refreshed
    result = run.run()
    entry = by_id(result)[208]
    assert entry['action'] == 'skipped' and 'changed since they were read' in entry['reason']
    assert fleet.pve.ct(208) is not None
    assert fleet.journal.events('ready-past')[-1]['action'] == 'cleanup_not_deleted'


def test_a_locked_resource_is_retried_then_reported_with_its_error(fleet):
    fleet.pve.ct(212).config['lock'] = 'backup'
    result = sweep(fleet, apply=True, lock_timeout=0.2).run()
    entry = by_id(result)[212]
    assert entry['action'] == 'failed' and 'stayed locked' in entry['error'] and fleet.pve.ct(212) is not None


def test_the_secret_is_read_but_never_made(tmp_path, monkeypatch):
    monkeypatch.delenv(ownership.SECRET_ENV, raising=False)
    path = str(tmp_path / 'journal.sqlite')
    assert sweep_secret(path) is None and not os.listdir(str(tmp_path))
    assert sweep_secret(path, 'given' * 8) == b'given' * 8
    monkeypatch.setenv(ownership.SECRET_ENV, 'from-env' * 4)
    assert sweep_secret(path) == b'from-env' * 4
    monkeypatch.delenv(ownership.SECRET_ENV)
    with open(os.open(ownership.secret_path(path), os.O_WRONLY | os.O_CREAT, 0o600), 'w') as out:
        out.write('from-file\n')
    assert sweep_secret(path) == b'from-file'


# ------------------------------------------------------------------------------------ the module, in-process

def module_args(site, **changes):
    args = dict(site.connection(), pool=POOL, task_timeout=30, lock_timeout=2)
    args.update(changes)
    return args


def test_the_module_without_apply_reports_and_changes_nothing(fleet):
    result = run_in_process('workspace_cleanup', module_args(fleet))
    assert not result.get('failed') and not result['changed'], result
    assert result['report'][0].startswith('cleanup (dry run): %d to delete, 0 deleted' % len(DELETED))
    assert fleet.changes_sent() == []


def test_the_module_in_check_mode_never_deletes_whatever_apply_says(fleet):
    result = run_in_process('workspace_cleanup', module_args(fleet, apply=True), check_mode=True)
    assert not result['changed'] and result['counts']['would_delete'] == len(DELETED)
    assert fleet.changes_sent() == []


def test_the_module_with_apply_deletes_and_is_changed(fleet):
    result = run_in_process('workspace_cleanup', module_args(fleet, apply=True))
    assert result['changed'] and result['counts']['deleted'] == len(DELETED), result
    assert sorted(e['id'] for e in result['entries'] if e['action'] == 'deleted') == DELETED


def test_the_module_with_a_lost_journal_makes_neither_a_journal_nor_a_secret(fleet, tmp_path, monkeypatch):
    monkeypatch.delenv(ownership.SECRET_ENV, raising=False)
    lost = tmp_path / 'lost'
    lost.mkdir()
    path = str(lost / 'journal.sqlite')
    args = module_args(fleet, journal_path=path, controller_secret=None)
    dry = run_in_process('workspace_cleanup', args)
    assert not dry['changed'] and dry['counts']['to_delete'] == 0
    # (The site's API password is the word "secret", which Ansible masks in results: the note is read by its end.)
    assert 'no ownership marker verifies, so nothing is deleted' in dry['report'][0]
    assert 'no journal at %s' % path in dry['report'][0]
    applied = run_in_process('workspace_cleanup', dict(args, apply=True))
    assert not applied['changed'] and applied['counts']['deleted'] == 0
    assert os.listdir(str(lost)) == [] and fleet.changes_sent() == []
    # With the secret (a vault copy), the journal's workspaces are unknown and go with the others.
    restored = run_in_process('workspace_cleanup', dict(args, apply=True, controller_secret=SECRET.decode()))
    assert restored['changed'] and {240, 241} <= set(e['id'] for e in restored['entries'] if e['action'] == 'deleted')
    assert os.listdir(str(lost)) == []


def test_the_module_fails_cleanly_when_the_cluster_cannot_be_listed(fleet):
    fleet.pve.fail('GET', '/cluster/resources', 500, 'cluster read failed on purpose')
    result = run_in_process('workspace_cleanup', module_args(fleet, apply=True))
    assert result['failed'] and 'cluster read failed on purpose' in result['msg'] and result.get('status') == 500


def test_the_module_over_the_fleet_sweeps_each_place_and_names_the_one_it_cannot_reach(fleet, monkeypatch):
    """fleet=true: the cluster is swept as without it, each entry naming its place; a place of the journal that
    cannot be reached (Hetzner Cloud, no token) is an entry of its own, and the task then fails naming it."""
    alone = run_in_process('workspace_cleanup', module_args(fleet))
    result = run_in_process('workspace_cleanup', module_args(fleet, fleet=True))
    assert not result.get('failed') and not result['changed'], result
    assert set(e['place'] for e in result['entries']) == {'proxmox'}
    assert sorted(e['id'] for e in result['entries']) == sorted(e['id'] for e in alone['entries'])
    actions = [e['action'] for e in alone['entries']]
    assert result['places'] == {'proxmox': {a: actions.count(a) for a in set(actions)}}
    assert result['counts'] == dict(alone['counts'], unreachable=0)
    assert result['report'][0].startswith('cleanup of the fleet (dry run): %d to delete, 0 deleted' % len(DELETED))
    assert result['report'][1] == '[proxmox] ' + alone['report'][0]
    for name in ('HCLOUD_TOKEN', 'EPHEMERA_HCLOUD_TOKEN'):
        monkeypatch.delenv(name, raising=False)
    fleet.journal.create_workspace('on-hetzner', status='ready', resource_id=7, provider='hetzner', location='fsn1')
    failed = run_in_process('workspace_cleanup', module_args(fleet, fleet=True, apply=True))
    assert failed['failed'] and 'could not reach hetzner' in failed['msg'], failed
    assert 'every other place was swept' in failed['msg']
    assert [e['place'] for e in failed['entries'] if e['action'] == 'unreachable'] == ['hetzner']
    assert failed['changed'] and failed['counts']['deleted'] == len(DELETED) and failed['counts']['unreachable'] == 1
    assert failed['report'][-1].startswith('[hetzner] unreachable: hetzner was not swept')
