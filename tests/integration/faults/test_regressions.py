"""Collection bugs the crash-safety matrix found, each kept as a case of its own."""

from ansible_collections.ephemera.workspaces.plugins.module_utils.reconcile import Reconciler


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
