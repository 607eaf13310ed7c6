"""The Azure orphan sweep at unit level: the quarantine kept in the journal's provider state (SQLite and PostgreSQL,
compare-and-set), which groups are bound to a retained record and which are report-only, a replaced member counting
as a change, a listing that breaks off counting as no inventory, and a report that writes nothing. The in-memory ARM
double is the one of test_provider_azure.py; the same paths run through the shipped playbooks against the try-out
cloud's ARM fake in tests/integration/azure/test_azure_sweeps.py."""

import copy

import pytest

from ansible_collections.ephemera.workspaces.plugins.module_utils.core import ownership
from ansible_collections.ephemera.workspaces.plugins.module_utils.core.errors import StaleGenerationError
from ansible_collections.ephemera.workspaces.plugins.module_utils.providers.azure import orphans
from ansible_collections.ephemera.workspaces.plugins.module_utils.providers import base
from ansible_collections.ephemera.workspaces.plugins.module_utils.providers.azure import members as azset
from ansible_collections.ephemera.workspaces.plugins.module_utils.providers.azure import plan as azplan
from ansible_collections.ephemera.workspaces.plugins.module_utils.providers.azure.plan import NIC, PIP, VM
from ansible_collections.ephemera.workspaces.plugins.module_utils.providers.azure.provider import AzureProvider

from test_provider_azure import GROUP, OPTIONS, SUB, ArmDouble, lower

SECRET = b's' * 32


class Sets:
    """A store of set records in memory (the provider keeps them in the journal; here only what the sweep reads)."""

    def __init__(self):
        self.records = {}

    def load(self, base_):
        return copy.deepcopy(self.records.get(base_))

    def save(self, record):
        self.records[record['plan']['base']] = copy.deepcopy(record)

    def use(self, journal, claim=None, workspace=None):
        pass


def made(double, provider, workspace, base_, nonce):
    """A complete set of ``workspace`` in the double, with its marker; its record."""
    record = {'plan': azplan.plan(workspace, base_, GROUP, 'westeurope', provider.marker(workspace, base_, nonce),
                                  'scope', labels={'keep': 'false'}, subscription=SUB)}
    ws = azset.WorkspaceSet(double, record, provider.store.save, OPTIONS, sleep=lambda s: None, interval=0.0)
    ws.create()
    return ws.record


def destroyed(name, base_, vm_id, nonce):
    return {'name': name, 'provider': 'azure', 'status': 'destroyed', 'desired_state': 'destroyed',
            'candidate_id': base_, 'resource_id': vm_id, 'facts': {'marker_nonce': nonce}}


@pytest.fixture
def world():
    double = ArmDouble()
    provider = AzureProvider(double, SECRET, {'resource_group': GROUP, 'location': 'westeurope'}, store=Sets())
    nonce = ownership.new_nonce()
    record = made(double, provider, 'ws1', 'ws1-abc', nonce)
    return double, provider, record, nonce


def verdicts(groups):
    return {g.base: (g.verdict, g.why) for g in groups}


# ------------------------------------------------------------------------------ the quarantine in the journal

@pytest.fixture
def journal(store):
    with store.open() as j:
        yield j


def test_the_quarantine_is_durable_per_set_and_written_by_compare_and_set(journal):
    a = azset.QuarantineStore(journal, SUB, GROUP)
    assert a.load() == {}
    a.save({'ws1-abc': {'fingerprint': 'f1', 'since': 10.0, 'inventories': 1}})
    assert journal.provider_states(azset.QUARANTINE_PREFIX) == [
        ('azure/quarantine/%s/%s/ws1-abc' % (SUB, GROUP), {'fingerprint': 'f1', 'since': 10.0, 'inventories': 1}, 1)]
    # Two sweeps at once: the one that writes second was overtaken, writes nothing, and so may delete nothing.
    first, second = azset.QuarantineStore(journal, SUB, GROUP), azset.QuarantineStore(journal, SUB, GROUP)
    one, two = first.load(), second.load()
    one['ws1-abc']['inventories'] = two['ws1-abc']['inventories'] = 2
    first.save(one)
    with pytest.raises(StaleGenerationError):
        second.save(two)
    assert journal.provider_state('azure/quarantine/%s/%s/ws1-abc' % (SUB, GROUP))[0]['inventories'] == 2
    # Another resource group's quarantine is its own.
    azset.QuarantineStore(journal, SUB, 'other').save({'ws1-abc': {'fingerprint': 'x', 'since': 0, 'inventories': 1}})
    gone = azset.QuarantineStore(journal, SUB, GROUP)
    gone.load()
    gone.save({})
    assert [k for k, v, g in journal.provider_states(azset.QUARANTINE_PREFIX)] == [
        'azure/quarantine/%s/other/ws1-abc' % SUB]


# ------------------------------------------------------------------------------ binding and verdicts

def test_a_set_bound_to_its_destroyed_record_is_quarantined_then_a_candidate(world, tmp_path):
    from ansible_collections.ephemera.workspaces.plugins.module_utils.core.journal import Journal
    double, provider, record, nonce = world
    records = [destroyed('ws1', 'ws1-abc', record['ids'][VM], nonce)]
    with Journal.open(str(tmp_path / 'j.sqlite')) as journal:
        first = orphans.AzureOrphans(journal, provider, grace=900, counting=True, now=1000.0)
        assert verdicts(first.run(records))['ws1-abc'][0] == azset.QUARANTINED
        assert '1 of 2 inventories' in first.groups[0].why
        later = orphans.AzureOrphans(journal, provider, grace=900, counting=True, now=1900.0)
        group = later.run(records)[0]
        assert group.verdict == azset.CANDIDATE and group.holder == 'ws1'
        assert later.unchanged(group)
        # A tag changed between the inventory and the deletion: not deleted, and the quarantine starts again.
        double.docs[lower(record['ids'][NIC])]['tags']['note'] = 'x'
        assert not later.unchanged(group)
        held = journal.provider_states(azset.QUARANTINE_PREFIX)[0][1]
        assert held['inventories'] == 1 and held['since'] > 1900.0


def test_the_provider_gives_its_set_sweep_with_the_grace_of_its_option(world, tmp_path):
    """What the reconcile and cleanup passes reach through Provider.set_sweep, without naming Azure."""
    from ansible_collections.ephemera.workspaces.plugins.module_utils.core.journal import Journal
    double, provider, record, nonce = world
    records = [destroyed('ws1', 'ws1-abc', record['ids'][VM], nonce)]
    with Journal.open(str(tmp_path / 'j.sqlite')) as journal:
        first = provider.set_sweep(journal, {'azure_orphan_grace': 900}, counting=True, now=1000.0)
        assert isinstance(first, orphans.AzureOrphans) and first.grace == 900 and first.counting
        group = first.run(records)[0]
        assert group.quarantined and not group.deletable
        later = provider.set_sweep(journal, {'azure_orphan_grace': 900}, counting=True, now=1900.0)
        group = later.run(records)[0]
        assert group.deletable and not group.quarantined
    assert provider.set_sweep(None, {}).grace == orphans.DEFAULT_GRACE


def test_a_report_counts_no_inventory_and_writes_nothing(world, tmp_path):
    from ansible_collections.ephemera.workspaces.plugins.module_utils.core.journal import Journal
    double, provider, record, nonce = world
    records = [destroyed('ws1', 'ws1-abc', record['ids'][VM], nonce)]
    with Journal.open(str(tmp_path / 'j.sqlite')) as journal:
        for now in (0.0, 5000.0):
            groups = orphans.AzureOrphans(journal, provider, grace=1, counting=False, now=now).run(records)
            assert groups[0].verdict == azset.QUARANTINED
        assert journal.provider_states(azset.QUARANTINE_PREFIX) == []


@pytest.mark.parametrize('change,words', [
    ('live', 'belongs to workspace ws1, which the journal holds as ready'),
    ('no record', 'bound to no retained record'),
    ('set record gone', 'the record of its set is gone'),
    ('another life', 'does not verify for that life of workspace ws1'),
    ('other vm', 'names VM /x/other-vm'),
])
def test_groups_not_bound_exactly_are_report_only(world, change, words):
    double, provider, record, nonce = world
    ws = destroyed('ws1', 'ws1-abc', record['ids'][VM], nonce)
    if change == 'live':
        ws.update(status='ready', desired_state='present')
    elif change == 'set record gone':
        provider.store.records.clear()
    elif change == 'another life':
        ws['facts']['marker_nonce'] = ownership.new_nonce()
    elif change == 'other vm':
        ws['resource_id'] = '/x/other-vm'
    records = [] if change == 'no record' else [ws]
    state = {'ws1-abc': {'fingerprint': 'old', 'since': 0, 'inventories': 1}}
    bind = orphans.AzureOrphans(None, provider)._bind(records)[0]
    judged = azset.survey(azset.inventory(double, SUB, GROUP), state, bind, 5000, 900, 'westeurope')
    assert judged['ws1-abc']['verdict'] == azset.REPORT_ONLY and words in judged['ws1-abc']['why'], judged
    assert state == {}  # a report-only group keeps no quarantine


def test_a_member_replaced_under_the_same_id_counts_as_a_change(world):
    double, provider, record, nonce = world
    bind = orphans.AzureOrphans(None, provider)._bind([destroyed('ws1', 'ws1-abc', record['ids'][VM], nonce)])[0]
    state = {}
    assert azset.survey(azset.inventory(double, SUB, GROUP), state, bind, 0, 900)['ws1-abc']['verdict'] == \
        azset.QUARANTINED
    # Same ARM id, name, tags and attachments; a new public IP behind them (its resourceGuid).
    double.docs[lower(record['ids'][PIP])]['properties']['resourceGuid'] = 'new'
    judged = azset.survey(azset.inventory(double, SUB, GROUP), state, bind, 1000, 900)['ws1-abc']
    assert judged['verdict'] == azset.QUARANTINED and 'started again' in judged['why']


def test_a_listing_that_breaks_off_is_incomplete_and_counts_nothing(world, tmp_path):
    from ansible_collections.ephemera.workspaces.plugins.module_utils.core.journal import Journal
    double, provider, record, nonce = world
    real = double.list

    def failing_disks(path, version):
        if 'disks' in path.lower():
            raise base.Transient('HTTP 500 InternalServerError')
        return real(path, version)

    double.list = failing_disks
    with Journal.open(str(tmp_path / 'j.sqlite')) as journal:
        sweep = orphans.AzureOrphans(journal, provider, counting=True)
        with pytest.raises(azset.Incomplete, match='incomplete'):
            sweep.run([destroyed('ws1', 'ws1-abc', record['ids'][VM], nonce)])
        assert journal.provider_states(azset.QUARANTINE_PREFIX) == []
    # Refused credentials say so as they came.

    def refused(path, version):
        raise base.Refused('HTTP 403 AuthorizationFailed')

    double.list = refused
    with pytest.raises(base.Refused) as err:
        azset.inventory(double, SUB, GROUP)
    assert not isinstance(err.value, azset.Incomplete)


def test_listed_sets_show_each_group_with_its_address_members_and_problem(world):
    double, provider, record, nonce = world
    double.docs[lower(record['ids'][PIP])]['properties']['ipAddress'] = '203.0.113.7'
    foreign = '/subscriptions/%s/resourceGroups/%s/providers/Microsoft.Network/publicIPAddresses/their-pip' % (SUB, GROUP)
    double.docs[lower(foreign)] = {'id': foreign, 'name': 'their-pip', 'type': azplan.TYPES[PIP], 'location': 'westeurope',
                                   'tags': {azplan.TAG_SET: 'their-set', azplan.TAG_MEMBER: PIP}, 'properties': {}}
    entries = {e['set']: e for e in azset.listed_sets(azset.inventory(double, SUB, GROUP))}
    ours = entries['ws1-abc']
    assert (ours['id'], ours['status'], ours['address'], ours['members']) == (
        record['ids'][VM], 'complete', '203.0.113.7', sorted(azplan.MEMBERS))
    resource = base.Resource(ours['id'], ours['location'], marker_text=ours['marker_text'])
    assert provider.verify(resource, 'ws1', nonce) == ownership.VERIFIED
    theirs = entries['their-set']
    assert (theirs['id'], theirs['status'], theirs['members']) == ('their-set', 'incomplete', [PIP])
    assert 'incomplete' in theirs['problem']


# ------------------------------------------------------------------------------ the inventory's listings

def test_a_resource_group_that_cannot_be_read_leaves_its_locations_unknown():
    from ansible_collections.ephemera.workspaces.plugins.inventory.workspaces import set_listings
    from ansible_collections.ephemera.workspaces.plugins.module_utils.providers.azure.inventory import HOOK

    def record(name, group, location):
        return {'name': name, 'location': location, 'params': {'launch': {'resource_group': group}}}
    records = [record('a', 'rg1', 'westeurope'), record('b', 'rg2', 'northeurope'), record('c', 'rg1', 'eastus')]

    def read(group):
        if group == 'rg2':
            raise azset.Incomplete('incomplete')
        return [{'id': '/x/a-vm', 'location': 'westeurope'}]
    listings, states = set_listings(records, {'rg1', 'rg2'}, read, HOOK.record_scope)
    assert listings == {'westeurope': [{'id': '/x/a-vm', 'location': 'westeurope', 'resource_group': 'rg1'}],
                        'eastus': [], 'northeurope': None}
    assert states['rg1'] == 'ok' and isinstance(states['rg2'], azset.Incomplete)
