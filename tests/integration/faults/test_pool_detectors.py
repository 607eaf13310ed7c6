"""The pools part's checks (tests/faults/pools.py) see a pool broken on purpose: a member claimed by a workspace that
does not hold it, a member left released, a container of a member the journal forgot, a workspace that is not
ready. The pools rows report zeros; this shows that those zeros are measured."""

from ansible_collections.ephemera.workspaces.plugins.module_utils.core import pools
from tests.faults import invariants
from tests.faults.pools import PoolMatrix


def test_the_pools_checks_see_a_pool_broken_on_purpose(site):
    matrix = PoolMatrix(site)
    pool = matrix.declared('pd', 1)
    site.clear_faults()
    filled = site.run([site.fill_op([pool])])
    assert filled.ok, filled.explain()
    secret = site.secret()

    def problems(workspaces=(), size=1):
        return matrix.pool_problems(invariants.ClusterView(site, secret), pool, list(workspaces), size)

    assert problems() == []
    with site.journal() as journal:
        record = pools.members(journal, 'pd')[0]
    member = record['member']
    value = {k: v for k, v in record.items() if k not in ('key', 'generation')}

    # Claimed by a workspace that never took it: its record still names its container.
    with site.journal() as journal:
        generation = journal.put_provider_state(record['key'], dict(value, state='claimed', workspace='nobody'),
                                                generation=record['generation'])
    found = problems()
    assert 'member %s is claimed by nobody, which does not hold it' % member in found
    assert any(p.startswith('claimed member %s: its record is registering' % member) for p in found)
    assert 'pool pd has 0 warm members, not 1' in found
    # A workspace of the row that is not ready.
    assert 'nobody is None, not ready' in problems(['nobody'])

    # Left released: never given out, and its container is still there.
    with site.journal() as journal:
        generation = journal.put_provider_state(record['key'], dict(value, state='released'), generation=generation)
    found = problems()
    assert 'member %s was left released' % member in found
    assert any(p.endswith('carries the marker of member %s, which is released' % member) for p in found)

    # Forgotten while its container is there: no record accounts for it.
    with site.journal() as journal:
        journal.delete_provider_state(record['key'], generation)
    assert any(p.endswith('carries the marker of member %s, which is forgotten' % member) for p in problems())
