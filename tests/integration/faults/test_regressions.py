"""Collection bugs the crash-safety matrix found, each kept as a case of its own."""

import pytest

from ansible_collections.ephemera.workspaces.plugins.module_utils.reconcile import Reconciler
from ansible_collections.ephemera.workspaces.plugins.module_utils.ssh import Guest, SshDropped


def test_a_foreign_container_at_the_vmid_of_a_destroyed_workspace_is_reported(site):
    """Found by the race rows and seeds 1-5 of make faults: reconcile counted the VMIDs of destroyed records as
    known, so another user's container that later got such a VMID, in our pool, was reported by nobody."""
    name = 'reg-reused'
    assert site.run([site.create_op(name)]).ok
    with site.journal() as journal:
        vmid = journal.get_workspace(name)['vmid']
    assert site.run([site.destroy_op(name)]).ok
    theirs = site.cluster.foreign_create(vmid=vmid, pool=site.info['pool'], hostname='theirs-at-a-reused-vmid')
    assert int(theirs['vmid']) == vmid
    with site.journal() as journal:
        assert journal.get_workspace(name)['status'] == 'destroyed'
        report = Reconciler(journal, site.api, site.secret(), {'pool': site.info['pool']}, check_mode=True).run()
    found = [f for f in report['findings'] if f['vmid'] == vmid]
    assert [(f['kind'], f['workspace']) for f in found] == [('foreign', None)], report['report']


def test_a_session_cut_while_its_command_runs_is_a_dropped_one_not_a_failed_command(site):
    """Found by seed 3 of make faults (a cut SSH session during bootstrap): paramiko reports exit status -1 for a
    channel that closed without one, and the step said the command "failed with exit status -1"; its outcome is in
    fact unknown."""
    name = 'reg-cut'
    assert site.run([site.create_op(name)]).ok
    with site.journal() as journal:
        ws = journal.get_workspace(name)
    req = ws['params']
    with Guest(ws['address'], port=req['ssh_port'], user=req['ssh_user'], key_file=req['ssh_key_path'],
               host_key=ws['facts']['host_key']).connect() as guest:
        # The command kills the sshd process of its own session, as a cut connection does.
        with pytest.raises(SshDropped) as dropped:
            guest.run('kill -9 $PPID; sleep 5', what='cut my own session')
    assert 'its outcome is unknown' in str(dropped.value)
