"""Two controllers on different (simulated) hosts work one PostgreSQL journal at once, through the shipped playbooks
against the try-out cluster.

Controller A and controller B are ansible-playbook runs whose run identities name different hosts
(EPHEMERA_CONTROLLER_HOST), so neither can judge the other's pid: each sees the other only through the journal
(a real PostgreSQL server) and its claim leases. A is SIGKILLed mid-create, right after the cluster answered its
clone; B asks for the same create at once, waits until A's lease expired, takes A's claim over and converges, while
A (a new run) destroys another workspace; then both reconcile at once. Nothing is lost, nothing is cloned twice,
nothing foreign is touched, and no journal file ever exists.

A step that takes longer than the claim lease (the clone's answer held back for three leases) keeps its claim: its
run renews it in the background while the step waits, so the other controller, asking for the same create meanwhile,
waits behind it instead of taking it over.
"""

import time

import pytest

from ansible_collections.ephemera.workspaces.plugins.module_utils.core.journal import epoch
from ansible_collections.ephemera.workspaces.plugins.module_utils.core.queue import Queue
from tests.faults import invariants
from tests.faults.pgsite import PgFaultSite
from tests.faults.site import Kill
from tests.pgserver import PgServer

LEASE = 12.0
# The claim lease of the long-step test: the clone's answer is held back for several of them.
SHORT_LEASE = 3.0
KILL_POINT = 'create.clone pve POST /nodes/*/lxc/*/clone'


@pytest.fixture(scope='module')
def site(tmp_path_factory):
    with PgServer(durable=False) as pg:
        site = PgFaultSite.start(str(tmp_path_factory.mktemp('two-controllers')), url=pg.url, lease=LEASE)
        try:
            yield site
        finally:
            site.stop()


def op(site, kind, name=None, host=None):
    made = {'create': site.create_op, 'destroy': site.destroy_op}[kind](name) if name else site.reconcile_op()
    made['host'] = host
    return made


def at_once(site, *ops):
    """Run the operations at the same time, each as its own ansible-playbook; their outcomes in order."""
    handles = [site.start_run([one]) for one in ops]
    return [site.finish(handle) for handle in handles]


def entries_of(journal, target):
    return Queue(journal).entries(target=target, recent=50)


def queue_entries(site, target):
    with site.journal() as journal:
        return entries_of(journal, target), journal.events(target)


def test_two_controllers_share_one_postgresql_journal(site):
    foreign_before = invariants.ClusterView(site, site.secret()).foreign
    site.clear_faults()
    site.log_requests()

    # 1. Both create at once, one workspace each.
    created = at_once(site, op(site, 'create', 'two-a1', 'controller-a'), op(site, 'create', 'two-b1', 'controller-b'))
    assert all(outcome.ok for outcome in created), [outcome.explain() for outcome in created]

    # 2. A dies mid-create: the cluster cloned, the journal has not heard the answer, A's claim stays behind.
    killed = site.run([op(site, 'create', 'two-k', 'controller-a')], kill=Kill('two-k', KILL_POINT))
    assert killed.killed, killed.explain()
    (entry,), dummy = queue_entries(site, 'two-k')
    assert entry['state'] == 'running' and entry['owner']['host'] == 'controller-a'
    a_lease_expires = epoch(entry['lease_expires'])
    assert a_lease_expires > time.time()  # the lease still runs: B may not take over yet

    # 3. At once: B asks for the same create (it must wait for A's lease, then take the claim over and finish it);
    #    A, a new run on its host, destroys its first workspace.
    b_started = time.time()
    takeover, destroy = at_once(site, op(site, 'create', 'two-k', 'controller-b'),
                                op(site, 'destroy', 'two-a1', 'controller-a'))
    assert takeover.ok, takeover.explain()
    assert destroy.ok, destroy.explain()
    entries, events = queue_entries(site, 'two-k')
    (entry,) = [e for e in entries if e['kind'] == 'create' and e['state'] == 'done']
    assert entry['claims'] == 2 and entry['owner']['host'] == 'controller-b'
    resumed = [e for e in events if e['action'] == 'resumed' and e['detail'].get('entry') == entry['id']]
    assert len(resumed) == 1 and resumed[0]['detail']['runner']['host'] == 'controller-b'
    # Taken over only once A's lease had run out (B had been waiting since b_started).
    assert b_started < a_lease_expires <= epoch(resumed[0]['at']) + 0.5
    lost = [e for e in events if e['action'] == 'runner_lost']
    assert len(lost) == 1 and lost[0]['detail']['runner']['host'] == 'controller-a'

    # 4. Both reconcile at once.
    reconciled = at_once(site, op(site, 'reconcile', host='controller-a'), op(site, 'reconcile', host='controller-b'))
    assert all(outcome.ok for outcome in reconciled), [outcome.explain() for outcome in reconciled]

    # No double clone: the clone the killed create sent is the only one of two-k (B adopted it instead of cloning
    # again); every workspace has one container (invariants.check_ready). Two creates at once may each be offered
    # the same free VMID, and the one refused clones again under another: that is not a second container.
    clones = site.clones()
    assert clones.count('agent-two-k') == 1, clones
    # No lost update: every record is what the runs did, every queue entry ended, the cluster agrees.
    names = ['two-a1', 'two-b1', 'two-k']
    with site.journal() as journal:
        records = {name: journal.get_workspace(name) for name in names}
        running = [e for name in names for e in entries_of(journal, name) if e['state'] in ('queued', 'running')]
    assert [records[name]['status'] for name in names] == ['destroyed', 'ready', 'ready']
    assert running == []
    found, leaks, view = invariants.check(site, names, foreign_before, site.requests(), site.secret(), clones,
                                          site.since)
    assert found == {key: [] for key in invariants.NAMES}, found
    assert leaks == {}
    assert sorted(name for name in view.ours.values() if name in names) == ['two-b1', 'two-k']
    # The journal lives in the database only.
    assert site.files_of_the_journal() == []


def wait_for_step(site, name, label, timeout=120):
    deadline = time.time() + timeout
    while time.time() < deadline:
        with site.journal() as journal:
            running = [e for e in entries_of(journal, name) if e['state'] == 'running']
        if running and running[0]['step'] == label:
            return running[0]
        time.sleep(0.2)
    raise AssertionError('%s never reached step %s' % (name, label))


def test_a_step_longer_than_the_lease_keeps_its_claim_while_the_other_controller_waits(site):
    site.clear_faults()
    # One step that writes nothing for three leases: the clone's answer, held back by the proxy.
    site.cluster.proxy_add('delay', 'POST', '/nodes/*/lxc/*/clone', seconds=3 * SHORT_LEASE, times=1)
    site.log_requests()
    a_op, b_op = op(site, 'create', 'two-long', 'controller-a'), op(site, 'create', 'two-long', 'controller-b')
    a_op['lease_seconds'] = b_op['lease_seconds'] = SHORT_LEASE
    a_run = site.start_run([a_op])
    first = wait_for_step(site, 'two-long', 'clone')
    b_run = site.start_run([b_op])
    a_outcome, b_outcome = site.finish(a_run), site.finish(b_run)
    assert a_outcome.ok, a_outcome.explain()
    assert b_outcome.ok, b_outcome.explain()
    entries, events = queue_entries(site, 'two-long')
    (a_entry,) = [e for e in entries if e['id'] == first['id']]
    # A ran its create to the end under its one claim; B waited behind it, then found the workspace ready.
    assert a_entry['state'] == 'done' and a_entry['claims'] == 1 and a_entry['owner']['host'] == 'controller-a'
    assert [e for e in events if e['action'] in ('runner_lost', 'resumed', 'interrupted')] == []
    b_entries = [e for e in entries if e['id'] != first['id'] and e['kind'] == 'create']
    assert [(e['state'], e['owner']['host']) for e in b_entries] == [('done', 'controller-b')]
    assert epoch(b_entries[0]['started_at']) >= epoch(a_entry['ended_at'])
    assert site.clones().count('agent-two-long') == 1
    with site.journal() as journal:
        assert journal.get_workspace('two-long')['status'] == 'ready'
