"""How tests/unit/plugins/module_utils/flows/data/journal-v1 was made: by the collection as it was at schema version 1.

    V1_OUT=DIR python -m pytest -p no:cacheprovider tests/unit/plugins/module_utils/flows/make_v1_journal.py

(with the collection at commit 46e9eb8, the last that wrote schema 1) runs the flows against an in-process fakepve and
writes DIR/journal.sqlite, its controller secret and DIR/cluster.json, the containers as the fake held them, so
that a test can put the cluster back as the journal knew it. Not collected by the test run (no test_ prefix).
"""

import json
import os
import shutil
import sqlite3

import pytest

from ansible_collections.ephemera.workspaces.plugins.module_utils.core.queue import Queue
from ansible_collections.ephemera.workspaces.plugins.module_utils.core.run_identity import Owner
from ansible_collections.ephemera.workspaces.plugins.module_utils.flows.create import CreateFlow
from ansible_collections.ephemera.workspaces.plugins.module_utils.flows.destroy import DestroyFlow
from flowsite import SECRET, Site

PROVIDER_STEPS = ('request', 'vmid', 'clone', 'wait_clone', 'configure', 'start', 'address')


def run_create(site, name, steps, **changes):
    for step in steps:
        CreateFlow(site.journal, site.provider, site.create_params(name, **changes), SECRET).run(step)


def test_make(fakepve, fakepve_cafile, tmp_path):
    out = os.environ.get('V1_OUT') or str(tmp_path / 'out')
    site = Site(fakepve, fakepve_cafile, tmp_path)
    journal = site.journal
    # Ready: the provider steps for real, the guest steps recorded as a run that did them records them.
    run_create(site, 'fx-ready', PROVIDER_STEPS, idempotency_key='ticket-4711')
    ws = journal.get_workspace('fx-ready')
    journal.update_workspace('fx-ready', ws['generation'], status='ready', activity='idle',
                             facts=dict(ws['facts'], host_key='ssh-ed25519 AAAAfixture', head='0' * 40),
                             progress=dict(ws['progress'], ssh=1, bootstrap=1, checkout=1, runner=1, brief=1, ready=1),
                             event={'kind': 'observed', 'action': 'ready'})
    flow = CreateFlow(journal, site.provider, site.create_params('fx-ready', idempotency_key='ticket-4711'), SECRET)
    claim = journal.begin_idempotent('ticket-4711', 'create', flow._idempotency_request(flow.request),
                                     owner=Owner.of_run())
    journal.finish_idempotent(claim, flow._result())
    journal.record_cleanup_debt('fx-ready', 'guest:git-askpass@lxc/%d' % ws['vmid'], 'the session broke', retry_in=60)
    # Mid-create: cloned, the clone task recorded, not yet confirmed.
    run_create(site, 'fx-mid', ('request', 'vmid', 'clone'))
    # Failed at start, its container kept stopped for diagnosis, and a delete that could not finish.
    run_create(site, 'fx-failed', PROVIDER_STEPS[:5])
    failed = journal.get_workspace('fx-failed')
    fakepve.ct(failed['vmid']).start_error = 'no rootfs'
    with pytest.raises(Exception):
        run_create(site, 'fx-failed', ('start',))
    fakepve.ct(failed['vmid']).start_error = None
    journal.record_cleanup_debt('fx-failed', 'lxc/%d@pve1' % failed['vmid'], 'CT is locked (backup)', retry_in=300)
    # Destroyed: created, then every destroy step.
    run_create(site, 'fx-gone', PROVIDER_STEPS)
    for step in ('mark', 'shutdown', 'stop', 'delete', 'finish'):
        DestroyFlow(journal, site.provider, site.destroy_params('fx-gone'), SECRET).run(step)
    # A candidate only: nothing cloned yet (nextid hands it the destroyed workspace's VMID).
    run_create(site, 'fx-candidate', ('request', 'vmid'))
    # Queue entries: the mid-create's run, claimed by a run that is gone; a finished destroy.
    queue = Queue(journal)
    gone = queue.poll(queue.enqueue('destroy', 'fx-gone', source='manual', requested_by='fixture').request_id)
    queue.finish(gone.claim, 'done', {'workspace': 'fx-gone', 'status': 'destroyed'})
    turn = queue.poll(queue.enqueue('create', 'fx-mid', source='manual', requested_by='fixture').request_id)
    queue.step(turn.claim, '3/13 clone', detail={'workspace': 'fx-mid'})
    journal.close()
    conn = sqlite3.connect(site.journal_path)
    conn.execute('PRAGMA wal_checkpoint(TRUNCATE)')
    assert conn.execute('PRAGMA user_version').fetchone()[0] == 1
    conn.close()
    os.makedirs(out, exist_ok=True)
    shutil.copy(site.journal_path, os.path.join(out, 'journal.sqlite'))
    with open(os.path.join(out, 'journal.sqlite.secret'), 'wb') as f:
        f.write(SECRET)
    cluster = [dict(vmid=ct.vmid, name=ct.config.get('hostname'), node=ct.node, status=ct.status, pool=ct.pool,
                    template=bool(ct.config.get('template')), config=ct.config) for ct in fakepve.cts]
    with open(os.path.join(out, 'cluster.json'), 'w') as f:
        json.dump(cluster, f, indent=1, sort_keys=True)
    site.close()
