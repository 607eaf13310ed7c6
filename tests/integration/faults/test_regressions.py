"""Collection bugs the crash-safety matrix found, each kept as a case of its own."""

import os
import signal

import pytest

from ansible_collections.ephemera.workspaces.plugins.module_utils.flows.reconcile import Reconciler
from ansible_collections.ephemera.workspaces.plugins.module_utils.guest.ssh import Guest, SshDropped
from tests.faults.site import Kill
from tests.localpve import system


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


def test_a_destroy_goes_on_when_the_session_asking_the_runner_for_its_status_is_cut(site):
    """Found by soak seed 1174: the archive before a destroy asks the runner what the agent is doing, for its
    metadata; a cut session there failed the archive, and so the destroy refused to go on."""
    name = 'reg-status'
    assert site.run([site.create_op(name)]).ok
    with site.journal() as journal:
        vmid = journal.get_workspace(name)['vmid']
    runner = [pid for pid in system.with_environment(
        ('LOCALPVE_GUEST_ROOT=' + site.guest_root(vmid)).encode())
        if 'agent_runner.py serve' in system.cmdline(pid) and 'setsid' not in system.cmdline(pid)]
    assert len(runner) == 1
    # The runner stops answering, so that its status call is still running when the session is cut.
    os.kill(runner[0], signal.SIGSTOP)
    try:
        site.cluster.guest_fault('drop', vmid=vmid, match='agent_runner.py call', times=1)
        destroyed = site.run([site.destroy_op(name)])
        cut = site.cluster.guest_faults()
    finally:
        try:
            os.kill(runner[0], signal.SIGCONT)
        except ProcessLookupError:
            pass  # the destroy stopped the container, and the runner with it
        site.clear_faults()
    assert [f['hits'] for f in cut if f['match'] == 'agent_runner.py call'][0], cut
    assert destroyed.ok, destroyed.explain()
    with site.journal() as journal:
        archived = [e for e in journal.events(name) if e['action'] == 'archived']
        assert journal.get_workspace(name)['status'] == 'destroyed'
    assert len(archived) == 1


def test_a_destroy_killed_after_its_delete_finishes_even_when_the_vmid_was_reused(site):
    """Found by the kill matrix (destroy.delete, reconcile first, while creates ran next to it): the delete went
    through, the run died before it heard so, PVE handed the VMID to a new container, and every later destroy
    refused because the container at "its" VMID was not the workspace's. The finished vzdestroy task proves ours
    is gone; the newcomer is left alone."""
    name = 'reg-reused-vmid'
    assert site.run([site.create_op(name)]).ok
    with site.journal() as journal:
        vmid = journal.get_workspace(name)['vmid']
    killed = site.run([site.destroy_op(name)], kill=Kill(name, 'destroy.delete pve DELETE /nodes/*/lxc/*'))
    assert killed.killed
    theirs = site.cluster.foreign_create(vmid=vmid, pool=site.info['pool'], hostname='newcomer', start=True)
    before = site.api.get('/nodes/%s/lxc/%d/config' % (theirs['node'], vmid))
    rerun = site.run([site.destroy_op(name)])
    assert rerun.ok, rerun.explain()
    with site.journal() as journal:
        assert journal.get_workspace(name)['status'] == 'destroyed'
        assert [e['detail']['vmid'] for e in journal.events(name) if e['action'] == 'vmid_reused'][:1] == [vmid]
    assert site.api.get('/nodes/%s/lxc/%d/config' % (theirs['node'], vmid)) == before
    assert site.api.get('/nodes/%s/lxc/%d/status/current' % (theirs['node'], vmid))['status'] == 'running'
