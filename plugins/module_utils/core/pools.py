# -*- coding: utf-8 -*-
# Copyright: ephemera.workspaces contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Warm pools in the journal: which members a pool has and the one state each is in.

A pool member is a workspace record (the container, its marker, its lease) plus one membership record kept in the
journal's provider state under ``pool/<pool>/<member>``, written only by compare-and-set on its generation and fenced
by the queue claim like every other write. A member moves one way:

    filling -> warm -> claimed (by exactly one workspace)
    filling -> released,  warm -> released

``filling`` is written before the member's container is allocated (journal first), so a fill killed mid-way leaves a
record the next fill or sweep settles. ``claimed`` is set by compare-and-set from ``warm``: of two controllers that
claim the same member, one wins and the other takes the next member or creates cold. ``released`` members are never
given out; their containers go through the ordinary delete path.
"""

import re
import time

from ansible_collections.ephemera.workspaces.plugins.module_utils.core.errors import (
    ClaimLostError,
    EphemeraError,
    StaleGenerationError,
)

MEMBER_STATES = ('filling', 'warm', 'claimed', 'released')
PREFIX = 'pool/'
# A pool's places: ``poolslot/<pool>/<n>`` for n below its size, each naming the member that holds it.
SLOT_PREFIX = 'poolslot/'
POOL_NAME = re.compile(r'^[a-z0-9](?:[a-z0-9-]{0,22}[a-z0-9])?$')
# The provider of a declaration that names none, when the caller gives no other (its run's provider).
DEFAULT_PROVIDER = 'proxmox'
PROVIDER_NAME = re.compile(r'^[a-z][a-z0-9_]*$')
DEFAULT_LEASE = 5400
LEASE_CAP = 86400


class PoolError(EphemeraError):
    """A pool declaration or a membership change was refused; the message says why and what to do."""


def validate_pool(spec, provider=DEFAULT_PROVIDER):
    """The declaration ``spec`` (a dict: name, provider, location, template, size, maximum, lease, optional repo and
    refill) checked and completed with its defaults (``provider``: the provider of a declaration that names none, the
    run's); PoolError says what is wrong. Whether its provider keeps pools is the provider's to say
    (``pool_refusal``): the flows ask it."""
    if not isinstance(spec, dict):
        raise PoolError('A pool is a mapping of name, provider, location, template, size (and maximum, lease, repo, '
                        'refill); '
                        'got %r.' % (spec,))
    pool = dict(spec)
    name = pool.get('name')
    if not isinstance(name, str) or not POOL_NAME.match(name):
        raise PoolError('Invalid pool name %r: use 1 to 24 lower-case letters, digits and dashes, starting and ending '
                        'with a letter or digit.' % (name,))
    if not pool.get('provider'):
        pool['provider'] = provider or DEFAULT_PROVIDER
    if not isinstance(pool['provider'], str) or not PROVIDER_NAME.match(pool['provider']):
        raise PoolError('Pool %s: provider %r is not a provider name (proxmox, aws, hetzner, gcp, azure).'
                        % (name, pool['provider']))
    if not isinstance(pool.get('location'), str) or not pool['location']:
        raise PoolError('Pool %s has no location: say which location its members are made on.' % name)
    template = pool.get('template')
    # A template name, or the VMID of a prepared template (a number, or its digits).
    if isinstance(template, bool) or not (isinstance(template, str) and template or
                                          isinstance(template, int) and template > 0):
        raise PoolError('Pool %s has no template: say which template its members are made on (a template name or '
                        'VMID).' % name)
    pool.setdefault('repo', None)
    size = pool.get('size')
    if not isinstance(size, int) or isinstance(size, bool) or size < 0:
        raise PoolError('Pool %s: size must be a whole number of at least 0, got %r.' % (name, size))
    pool.setdefault('maximum', size)
    maximum = pool['maximum']
    if not isinstance(maximum, int) or isinstance(maximum, bool) or maximum < size:
        raise PoolError('Pool %s: maximum (%r) must be a whole number of at least its size (%d).' % (name, maximum, size))
    pool.setdefault('lease', DEFAULT_LEASE)
    lease = pool['lease']
    if not isinstance(lease, int) or isinstance(lease, bool) or not 60 <= lease <= LEASE_CAP:
        raise PoolError('Pool %s: lease (%r) must be between 60 and %d seconds: a member nobody takes expires then.'
                        % (name, lease, LEASE_CAP))
    pool.setdefault('refill', False)
    if not isinstance(pool['refill'], bool):
        raise PoolError('Pool %s: refill (%r) must be true or false: write refill: true for a create that takes a '
                        'member to fill the pool again, refill: false (the default) to leave it to pool_fill.'
                        % (name, pool['refill']))
    return pool


def matching_pool(pools, request):
    """The declared pool that serves ``request``, or None: its provider, location and template equal the request's
    (a template VMID given as a number or as digits is the same template), and its repository is the request's (its
    members have that repository fetched already), else it has none (its members have nothing fetched: the checkout
    clones the request's). A pool of the request's repository comes first; then the order of the declarations."""
    def same(pool):
        return (pool.get('provider', DEFAULT_PROVIDER) == request.get('provider', DEFAULT_PROVIDER)
                and pool.get('location') == request.get('location')
                and str(pool.get('template')) == str(request.get('template')))
    fitting = [pool for pool in pools or () if same(pool)]
    repo = request.get('repo') or None
    for pool in fitting:
        if repo is not None and (pool.get('repo') or None) == repo:
            return pool
    for pool in fitting:
        if not pool.get('repo'):
            return pool
    return None


def member_key(pool, member):
    return '%s%s/%s' % (PREFIX, pool, member)


def _record(key, value, generation):
    record = dict(value)
    record.update(key=key, generation=generation)
    return record


def members(journal, pool=None, state=None):
    """Every membership record (of ``pool``, in ``state``), oldest first: dicts with key, pool, member, state,
    workspace (the claimer), template, version, location, repo, created_at, generation."""
    prefix = PREFIX + (pool + '/' if pool else '')
    found = [_record(key, value, generation) for key, value, generation in journal.provider_states(prefix)]
    if state is not None:
        found = [m for m in found if m.get('state') == state]
    return sorted(found, key=lambda m: (m.get('created_at') or 0, m['key']))


def member(journal, pool, name):
    row = journal.provider_state(member_key(pool, name))
    return None if row is None else _record(member_key(pool, name), row[0], row[1])


def begin_member(journal, pool, name, version=None, claim=None):
    """Record member ``name`` of ``pool`` (a validated declaration) as ``filling`` before its container is allocated.
    A member already recorded is returned as it is (a rerun of a fill that died)."""
    found = member(journal, pool['name'], name)
    if found is not None:
        return found
    value = {'pool': pool['name'], 'member': name, 'state': 'filling', 'workspace': None,
             'template': pool['template'], 'version': version, 'location': pool['location'],
             'provider': pool.get('provider', 'proxmox'), 'repo': pool.get('repo'), 'created_at': time.time()}
    try:
        generation = journal.put_provider_state(member_key(pool['name'], name), value, claim=claim,
                                                point='pool_member')
    except ClaimLostError:
        raise
    except StaleGenerationError:
        return member(journal, pool['name'], name)
    return _record(member_key(pool['name'], name), value, generation)


def _move(journal, record, allowed, claim, point, **change):
    """Compare-and-set ``record`` to ``change`` if it is still at its generation and in one of ``allowed`` states;
    the record as written, or None when another run moved it first."""
    if record.get('state') not in allowed:
        return None
    value = {k: v for k, v in record.items() if k not in ('key', 'generation')}
    value.update(change)
    try:
        generation = journal.put_provider_state(record['key'], value, generation=record['generation'], claim=claim,
                                                point=point)
    except ClaimLostError:
        # A run that lost its queue claim writes nothing more: that is not "another run moved the member".
        raise
    except StaleGenerationError:
        return None
    return _record(record['key'], value, generation)


def mark_warm(journal, record, claim=None):
    """A filling member that went through every step that does not depend on a request becomes warm."""
    moved = _move(journal, record, ('filling',), claim, 'pool_warm', state='warm', warm_at=time.time())
    if moved is None and record.get('state') != 'warm':
        current = member(journal, record['pool'], record['member'])
        if current is None or current['state'] != 'warm':
            raise PoolError('Pool member %s of pool %s is %s, not filling: another run released or claimed it. It is '
                            'not made warm.' % (record['member'], record['pool'],
                                                current['state'] if current else 'gone'))
        return current
    return moved or record


def claim_member(journal, pool, workspace, claim=None, check=None, version=None, life=None):
    """Give workspace ``workspace`` one warm member of pool ``pool`` (a name), by compare-and-set: the member it has
    claimed already in this life (``life``: when its request was recorded; a rerun after a crash), else the oldest
    warm member not taken by another run first. A member made from another template version than ``version`` (the
    template's current one, when given) and one that fails ``check`` (member -> True, or False or a sentence saying
    why not: the claim check) are released, never given out: a controller that died between a template switch and
    its drain gives out no member of the old version. None when no member could be had: the caller creates cold."""
    for record in members(journal, pool, state='claimed'):
        if record.get('workspace') == workspace and record.get('life') == life:
            return record
    for record in members(journal, pool, state='warm'):
        if version is not None and record.get('version') != version:
            release(journal, record, 'made from template version %s, the template is at %s' % (
                record.get('version'), version), claim=claim)
            continue
        verdict = check(record) if check is not None else True
        if verdict is not True:
            release(journal, record, 'failed its claim check: %s' % (verdict or 'no reason given'), claim=claim)
            continue
        taken = _move(journal, record, ('warm',), claim, 'pool_claim', state='claimed', workspace=workspace,
                      life=life, claimed_at=time.time())
        if taken is not None:
            return taken
    return None


def release(journal, record, reason, claim=None):
    """Release a filling or warm member (never a claimed one: that is a workspace now). The record as written, or
    None when another run claimed or released it first."""
    return _move(journal, record, ('filling', 'warm'), claim, 'pool_release', state='released', reason=reason,
                 released_at=time.time())


def drain(journal, template, current_version, claim=None):
    """Release every filling or warm member made from another version of ``template`` than ``current_version``
    (a template switch): they are never given out. The records released."""
    released = []
    for record in members(journal):
        if record.get('template') == template and record.get('version') != current_version:
            moved = release(journal, record, 'template %s switched to version %s' % (template, current_version),
                            claim=claim)
            if moved is not None:
                released.append(moved)
    return released


def forget(journal, record, claim=None):
    """Remove the record of a released member whose container is confirmed gone."""
    if record.get('state') != 'released':
        raise PoolError('Pool member %s is %s: only a released member whose container is gone is forgotten.'
                        % (record.get('member'), record.get('state')))
    journal.delete_provider_state(record['key'], record['generation'], claim=claim, point='pool_forget')


def slot_key(pool, index):
    return '%s%s/%d' % (SLOT_PREFIX, pool, index)


def take_slot(journal, pool, record, claim=None):
    """One of the ``size`` places of ``pool`` (a validated declaration) for member ``record``, by compare-and-set:
    the index of the place it holds already, else of the first one that is free (never taken, or its member no longer
    waits: claimed, released or forgotten), now its. None when every place holds a member that waits: two fills that
    counted the same shortfall at once (each counts the other's members only once they are recorded) cannot both
    start a member for the same place, so together they never fill the pool beyond its size."""
    free = []
    for index in range(pool['size']):
        key = slot_key(pool['name'], index)
        row = journal.provider_state(key)
        if row is None:
            free.append((key, None))
            continue
        holder = row[0].get('member')
        if holder == record['member']:
            return index
        # Read after the place: a member is recorded before it takes a place, so a holder that waits is seen waiting.
        current = member(journal, pool['name'], holder) if holder else None
        if current is None or current['state'] not in ('filling', 'warm'):
            free.append((key, row[1]))
    for key, generation in free:
        try:
            journal.put_provider_state(key, {'pool': pool['name'], 'member': record['member'], 'at': time.time()},
                                       generation=generation, claim=claim, point='pool_slot')
        except ClaimLostError:
            raise
        except StaleGenerationError:
            continue
        return int(key.rsplit('/', 1)[1])
    return None


def shortfall(journal, pool):
    """How many members a fill of ``pool`` (a validated declaration) starts: up to its size counting warm and
    filling members, never beyond its maximum of members that are not yet claimed or released."""
    counts = state_counts(journal, pool['name'])
    waiting = counts['warm'] + counts['filling']
    return max(0, min(pool['size'] - waiting, pool['maximum'] - waiting))


def state_counts(journal, pool=None):
    counts = dict.fromkeys(MEMBER_STATES, 0)
    for record in members(journal, pool):
        counts[record.get('state')] = counts.get(record.get('state'), 0) + 1
    return counts


def violations(journal):
    """What breaks the pool invariants, as sentences (empty when none): each member in one known state, a claimed
    member claimed by exactly one workspace and no workspace holding two members."""
    problems = []
    holders = {}
    for record in members(journal):
        state = record.get('state')
        if state not in MEMBER_STATES:
            problems.append('member %s is in an unknown state %r' % (record['key'], state))
        if state == 'claimed':
            if not record.get('workspace'):
                problems.append('member %s is claimed by no workspace' % record['key'])
            else:
                # A name destroyed and requested again is another life of it, which may hold a member of its own.
                holders.setdefault((record['workspace'], record.get('life')), []).append(record['key'])
        elif record.get('workspace'):
            problems.append('member %s is %s but names workspace %s' % (record['key'], state, record['workspace']))
    for (workspace, dummy), keys in sorted(holders.items(), key=lambda item: (item[0][0], str(item[0][1]))):
        if len(keys) > 1:
            problems.append('workspace %s holds %d members: %s' % (workspace, len(keys), ', '.join(keys)))
    return problems
