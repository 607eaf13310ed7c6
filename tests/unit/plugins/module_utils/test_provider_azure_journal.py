"""An Azure set's progress in the journal (a real SQLite journal; the ARM double of test_provider_azure.py): one
record under azure/set/<base>, every write a named commit point, compare-and-set on its generation and fenced by the
workspace's claim; a write that fails stops the work before the next request. The same path through the shipped
playbooks, and on PostgreSQL, runs in tests/integration/azure/test_azure_playbooks.py."""

import os
import threading

import pytest

from ansible_collections.ephemera.workspaces.plugins.module_utils.core.errors import ClaimLostError
from ansible_collections.ephemera.workspaces.plugins.module_utils.core.journal import Journal
from ansible_collections.ephemera.workspaces.plugins.module_utils.core.queue import Queue
from ansible_collections.ephemera.workspaces.plugins.module_utils.providers import base
from ansible_collections.ephemera.workspaces.plugins.module_utils.providers.azure import provider as azprovider
from tests.threads import side_by_side
from tests.unit.plugins.module_utils.test_provider_azure import GROUP, OPTIONS, SUBNET, ArmDouble

IMAGE = 'Debian:debian-12:12-gen2:latest'
CREATE_POINTS = ['azure planned', 'azure pip dispatched', 'azure pip id', 'azure nic dispatched', 'azure nic id',
                 'azure vm dispatched', 'azure vm id', 'azure disk id', 'azure binding']
DELETE_POINTS = ['azure vm deleting', 'azure vm claimed', 'azure nic deleting', 'azure nic claimed',
                 'azure pip deleting', 'azure pip claimed', 'azure disk deleting', 'azure disk claimed']


@pytest.fixture
def journal(tmp_path):
    with Journal.open(str(tmp_path / 'journal.sqlite')) as j:
        yield j


def make(journal, double=None):
    launch = {'resource_group': GROUP, 'location': 'westeurope', 'subnet_id': SUBNET, 'vm_size': 'Standard_B1s',
              'ssh_public_key': OPTIONS['ssh_public_key']}
    return azprovider.AzureProvider(double or ArmDouble(), b's' * 32, launch, azprovider.SetStore(journal),
                                    lost_window=1, sleep=lambda s: None)


def allocate(p, workspace='ws1', nonce=None):
    base_name = p.candidate_for(workspace, 'stamp')
    handle = p.allocate(base.Allocation(base_name, workspace, IMAGE, 'westeurope', workspace, 'scope',
                                        labels={'keep': 'false'}, nonce=nonce))
    p.wait(handle, 60)
    return base_name


def commits(trace):
    with open(trace) as f:
        return [line.rstrip('\n').split(' journal ', 1)[1] for line in f if ' journal azure' in line]


def test_the_set_progress_is_one_journal_record_written_at_named_points(journal, tmp_path, monkeypatch):
    trace = str(tmp_path / 'trace')
    open(trace, 'w').close()
    monkeypatch.setenv('EPHEMERA_FAILPOINT_TRACE', trace)
    p = make(journal)
    base_name = allocate(p)
    record, generation = journal.provider_state('azure/set/' + base_name)
    assert sorted(record['ids']) == ['disk', 'nic', 'pip', 'vm'] and record['binding']['vm_id'] == record['ids']['vm']
    assert commits(trace) == CREATE_POINTS
    assert generation == len(CREATE_POINTS)
    resource = p.find(record['ids']['vm'])
    p.wait(p.delete(resource), 60)
    assert p.find(record['ids']['vm']) is None and not p.arm.docs
    assert commits(trace) == CREATE_POINTS + DELETE_POINTS
    held = journal.provider_states('azure/set/')
    assert [k for k, v, g in held] == ['azure/set/' + base_name] and sorted(held[0][1]['claims']) == sorted(record['ids'])
    assert sorted(os.listdir(str(tmp_path))) == ['journal.sqlite', 'journal.sqlite-shm', 'journal.sqlite-wal', 'trace']


def test_a_run_that_lost_the_workspace_claim_sends_nothing_more(journal):
    journal.create_workspace('ws1')
    queue = Queue(journal)
    claim = queue.poll(queue.enqueue('create', 'ws1').request_id).claim
    p = make(journal)
    p.use_journal(journal, claim, 'ws1')
    base_name = allocate(p)
    before = journal.provider_state('azure/set/' + base_name)
    queue.cancel(claim['entry_id'], reason='operator stop', force=True)
    with pytest.raises(ClaimLostError):
        p.wait(p.delete(p.find(before[0]['ids']['vm'])), 60)
    assert p.arm.deletes() == [] and len(p.arm.docs) == 4
    assert journal.provider_state('azure/set/' + base_name) == before


class Overtaken(ArmDouble):
    """Another run writes the set's record while this one reads a member (after this run read the record)."""

    meddle = None

    def get(self, path, version):
        if self.meddle is not None:
            meddle, self.meddle = self.meddle, None
            meddle()
        return super().get(path, version)


def test_a_failed_progress_write_stops_the_cleanup_as_a_failed_task_before_the_next_request(journal):
    p = make(journal, Overtaken())
    base_name = allocate(p)
    record, generation = journal.provider_state('azure/set/' + base_name)
    resource = p.find(record['ids']['vm'])
    # Another run writes the set's record after this one read it: this run's next write is refused.
    p.arm.meddle = lambda: journal.put_provider_state('azure/set/' + base_name, dict(record, note='another run'),
                                                      generation=generation)
    with pytest.raises(azprovider.ProgressNotWritten) as err:
        p.wait(p.delete(resource), 60)
    # A failed task: the destroy flow records it as cleanup debt (flows/destroy.py, step_delete).
    assert isinstance(err.value, base.TaskFailed)
    assert 'could not be written to the journal' in str(err.value) and 'cleanup debt' in str(err.value)
    assert p.arm.deletes() == [] and len(p.arm.docs) == 4
    assert journal.provider_state('azure/set/' + base_name)[0]['note'] == 'another run'


def test_each_change_of_a_record_names_its_point():
    point = azprovider.progress_point
    planned = {'plan': {}, 'dispatched': {}, 'ids': {}, 'claims': {}, 'ops': {}, 'debt': []}
    assert point(None, planned) == 'azure planned'
    assert point(planned, dict(planned, dispatched={'nic': 1})) == 'azure nic dispatched'
    assert point(dict(planned, dispatched={'nic': 1}), planned) == 'azure nic not sent'
    assert point(planned, dict(planned, ops={'vm': {}})) == 'azure vm operation'
    deleting = dict(planned, deleting={'member': 'nic', 'id': 'x'})
    assert point(planned, deleting) == 'azure nic deleting'
    assert point(deleting, planned) == 'azure nic not deleted'
    assert point(deleting, dict(planned, accepted={'member': 'nic', 'id': 'x'})) == 'azure nic delete accepted'
    assert point(deleting, dict(planned, claims={'nic': {}})) == 'azure nic claimed'
    assert point(planned, dict(planned, debt=['why'])) == 'azure debt'
    assert point(planned, dict(planned, contradiction='why')) == 'azure contradiction'


def test_a_destroy_whose_progress_write_fails_keeps_cleanup_debt_and_deletes_nothing_more(journal):
    """The destroy flow over the provider: the set's progress cannot be written (another run wrote it first), so the
    delete step stops before its next request and the workspace keeps cleanup debt naming the set."""
    from ansible_collections.ephemera.workspaces.plugins.module_utils.flows.destroy import DestroyFlow
    from ansible_collections.ephemera.workspaces.plugins.modules import workspace_destroy
    from ansible_collections.ephemera.workspaces.plugins.module_utils.core import ownership
    p = make(journal, Overtaken())
    nonce = ownership.new_nonce()
    base_name = allocate(p, nonce=nonce)
    record, generation = journal.provider_state('azure/set/' + base_name)
    vm_id = record['ids']['vm']
    journal.create_workspace('ws1', status='ready', desired_state='present', provider='azure', location='westeurope',
                             candidate_id=base_name, resource_id=vm_id, params={'pool': 'scope'},
                             facts={'marker_nonce': nonce},
                             progress={'request': 1, 'clone': 2})
    params = {k: v.get('default') for k, v in workspace_destroy.argument_spec().items()}
    params.update(name='ws1', shutdown_timeout=5, task_timeout=30, lock_timeout=2)

    def flow():
        return DestroyFlow(journal, p, params, b's' * 32, sleep=lambda s: None)
    for step in ('mark', 'shutdown', 'stop'):
        flow().run(step)
    reads = []

    def meddle():
        # The step's first read finds the VM; by its second (inside the provider's delete, after it loaded the set's
        # record) another run has written the record.
        reads.append(1)
        if len(reads) == 2:
            journal.put_provider_state('azure/set/' + base_name, dict(record, note='another run'),
                                       generation=journal.provider_state('azure/set/' + base_name)[1])
        else:
            p.arm.meddle = meddle
    p.arm.meddle = meddle
    with pytest.raises(azprovider.ProgressNotWritten) as err:
        flow().run('delete')
    assert 'could not be written to the journal' in str(err.value)
    [debt] = journal.cleanup_debts('ws1')
    assert debt['resource'] == p.resource_key(vm_id, 'westeurope') and 'could not be written' in debt['last_error']
    ws = journal.get_workspace('ws1')
    assert ws['status'] != 'destroyed' and ws['failure']['step'] == 'delete'
    # Nothing was deleted: the VM's DELETE never went out.
    assert p.arm.deletes() == [] and len(p.arm.docs) == 4


def test_a_warm_members_set_is_given_to_the_claiming_workspace_record_first_and_its_destroy_takes_all_four(journal):
    from ansible_collections.ephemera.workspaces.plugins.module_utils.core import ownership
    from ansible_collections.ephemera.workspaces.plugins.module_utils.providers.azure import orphans
    p = make(journal)
    assert p.pool_refusal is None
    base_name = allocate(p, 'az-member', nonce='ab' * 16)
    member = p.find(journal.provider_state('azure/set/' + base_name)[0]['ids']['vm'])
    assert p.verify(member, 'az-member', 'ab' * 16) == ownership.VERIFIED
    made = len(p.arm.calls)
    p.remark(member, 'az-claimer', 'cd' * 16, 'agent-az-claimer', {'state': 'provisioning', 'expires_at': '99'})
    taken = p.find(member.id)
    assert taken.id == member.id
    assert p.verify(taken, 'az-claimer', 'cd' * 16) == ownership.VERIFIED
    assert p.verify(taken, 'az-member', 'ab' * 16) == ownership.MISMATCH
    # The lease's tags are the claimer's (the member's keep is gone), on all four members, as the record plans them.
    assert p.labels(taken) == {'state': 'provisioning', 'expires_at': '99'}
    record = journal.provider_state('azure/set/' + base_name)[0]
    assert len(p.arm.docs) == 4
    for doc in p.arm.docs.values():
        tags = doc['tags']
        assert tags['ephemera:marker'] == taken.marker_text and tags['ephemera:workspace'] == 'az-claimer'
        assert 'ephemera:keep' not in tags and tags['ephemera:state'] == 'provisioning'
        member_kind = tags['ephemera:member']
        assert {k: v for k, v in tags.items() if k.startswith('ephemera:')} == record['plan']['tags'][member_kind]
    assert record['binding']['tags']['ephemera:workspace'] == 'az-claimer'
    # The claimer's journal record (its candidate: the VM's id) accounts for the set in the sweep.
    assert orphans.set_base({'candidate_id': member.id, 'resource_id': member.id}) == base_name
    assert orphans.set_base({'candidate_id': base_name, 'resource_id': None}) == base_name
    # A stale read is not written over; a rerun on the claimed set writes nothing more.
    with pytest.raises(base.Conflict, match='changed since it was read'):
        p.remark(member, 'az-third', 'ef' * 16, 'agent-az-third')
    patches = [c for c in p.arm.calls[made:] if c[0] == 'PATCH']
    assert [c[1].rsplit('-', 1)[1] for c in patches] == ['osdisk', 'pip', 'nic', 'vm']  # the VM last
    p.remark(taken, 'az-claimer', 'cd' * 16, 'agent-az-claimer', {'state': 'provisioning', 'expires_at': '99'})
    assert [c for c in p.arm.calls[made:] if c[0] == 'PATCH'] == patches
    # The destroy of the claiming workspace deletes the four members (their bound tags are what the record holds).
    p.wait(p.delete(taken), 60)
    assert p.find(member.id) is None and not p.arm.docs


def test_a_set_whose_member_carries_another_marker_is_not_given_and_nothing_is_written(journal):
    p = make(journal)
    base_name = allocate(p, 'az-member', nonce='ab' * 16)
    before = journal.provider_state('azure/set/' + base_name)
    nic = [doc for doc in p.arm.docs.values() if doc['tags'].get('ephemera:member') == 'nic'][0]
    nic['tags']['ephemera:marker'] = 'someone else'
    member = p.find(before[0]['ids']['vm'])
    made = len(p.arm.calls)
    with pytest.raises(base.Conflict, match='carries another marker'):
        p.remark(member, 'az-claimer', 'cd' * 16, 'agent-az-claimer', {'state': 'provisioning'})
    assert journal.provider_state('azure/set/' + base_name) == before
    assert [c for c in p.arm.calls[made:] if c[0] != 'GET'] == []


def test_threads_that_share_the_provider_each_write_through_their_own_journal_connection(journal):
    """The expiry sweep releases side by side through one provider, each release in a thread with a connection of its
    own (flows/expire.py); a connection serves one thread at a time. Each thread's set progress goes through the
    connection that thread gave, even when another thread gave its own after it."""
    p = make(journal)
    used = {}

    def spied(connection):
        for method in ('provider_state', 'put_provider_state'):
            def call(*args, _real=getattr(connection, method), **kwargs):
                used.setdefault(id(connection), set()).add(threading.get_ident())
                return _real(*args, **kwargs)
            setattr(connection, method, call)
        return connection

    connections = [spied(journal.reopen()), spied(journal.reopen())]
    bound, first_done = threading.Barrier(2), threading.Event()
    made, failures = {}, []

    def work(index):
        try:
            p.use_journal(connections[index], None, 'ws%d' % index)
            bound.wait(10)
            if index == 1:
                first_done.wait(30)
            made[index] = (threading.get_ident(), allocate(p, 'ws%d' % index))
        except Exception as err:  # pylint: disable=broad-except
            failures.append(err)
        finally:
            first_done.set()
    try:
        ended = side_by_side(lambda: work(0), lambda: work(1))
    finally:
        for connection in connections:
            connection.close()
    assert ended and failures == [] and sorted(made) == [0, 1]
    assert [used.get(id(c)) for c in connections] == [{made[0][0]}, {made[1][0]}]
    assert sorted(k for k, v, g in journal.provider_states('azure/set/')) == sorted(
        'azure/set/' + made[index][1] for index in (0, 1))
