# -*- coding: utf-8 -*-
# Copyright: ephemera.workspaces contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filling warm pools: members made ahead of demand through the create flow's own steps, and released ones deleted.

For each declared pool (core/pools.py), a fill

1. deletes the containers of released members (a failed fill, a failed claim check, a template switch, an expired
   lease) through the destroy flow, ownership-checked like any destroy, and forgets their membership once the
   container is confirmed gone;
2. goes on with members a killed fill left ``filling``;
3. starts as many new members as the pool lacks of its size (never beyond its maximum): each is recorded
   ``filling`` in the journal before anything is allocated, then recorded as a workspace whose request is the
   pool's, then taken through the create steps that do not depend on a request (candidate, clone, configure, start,
   address, SSH, bootstrap with host keys of its own, the repository's fetch for a pool with one, the agent runner
   answering) under its own queue claim, then marked ``warm``. A member that fails a step is released, and its
   container deleted.
"""

import binascii
import os

from ansible_collections.ephemera.workspaces.plugins.module_utils.core import failpoint
from ansible_collections.ephemera.workspaces.plugins.module_utils.core import pools as pooling
from ansible_collections.ephemera.workspaces.plugins.module_utils.core.errors import (
    EphemeraError,
    StaleGenerationError,
)
from ansible_collections.ephemera.workspaces.plugins.module_utils.flows import lease as lease_flow
from ansible_collections.ephemera.workspaces.plugins.module_utils.flows.create import (
    CreateError,
    CreateFlow,
    declared_pools,
    template_value,
)
from ansible_collections.ephemera.workspaces.plugins.module_utils.flows.destroy import STEPS as DESTROY_STEPS, DestroyFlow
from ansible_collections.ephemera.workspaces.plugins.module_utils.operation import Operation
from ansible_collections.ephemera.workspaces.plugins.module_utils.providers import registry

# The create steps a member goes through (the checkout only in a pool with a repository: its fetch).
MEMBER_STEPS = ('vmid', 'clone', 'wait_clone', 'configure', 'start', 'address', 'ssh', 'bootstrap', 'checkout',
                'runner')


def member_steps(pool):
    return [step for step in MEMBER_STEPS if step != 'checkout' or pool.get('repo')]


def new_member_name(pool):
    """A fresh member name: the pool's name and 8 hex digits (at most 33 characters, a valid workspace name)."""
    return '%s-%s' % (pool['name'], binascii.hexlify(os.urandom(4)).decode('ascii'))


def template_version(journal, pool):
    """The version a template name stands for now (None for a template given by VMID, or one never built)."""
    template = template_value(pool['template'])
    if not isinstance(template, str):
        return None
    pointer = journal.template(template)
    return pointer['current'] if pointer else None


def is_member(ws):
    """The pool of a pool member's workspace record that no workspace took, else None."""
    if (ws.get('facts') or {}).get('claimed_by'):
        return None
    return ((ws.get('params') or {}).get('pool_member') or {}).get('pool')


def release_member(journal, ws, reason, claim=None):
    """Release the membership of member record ``ws`` (filling or warm) with ``reason``; True when it is released
    now or was already (or has none), False when a create claimed it first."""
    pool = is_member(ws)
    record = pooling.member(journal, pool, ws['name']) if pool else None
    if record is None or record['state'] == 'released':
        return True
    return pooling.release(journal, record, reason, claim=claim) is not None


def forget_member(journal, ws):
    """Forget the released membership of ``ws``, whose container is confirmed gone."""
    pool = is_member(ws)
    record = pooling.member(journal, pool, ws['name']) if pool else None
    if record is not None and record['state'] == 'released':
        pooling.forget(journal, record)


class PoolFill:
    """One fill of every declared pool. ``provider`` a Provider or its API client, signing with ``secret``;
    ``params`` the module's options (``pools``, the create steps' settings, the destroy's waits)."""

    def __init__(self, journal, provider, params, secret, check_mode=False):
        self.journal = journal
        self.provider = registry.bind(provider, secret)
        self.params = params
        self.secret = secret
        self.check_mode = check_mode
        self.entries = []
        self.changed = False
        # The provider this fill makes members on (the module's provider option): it fills the pools declared for it.
        self.provider_name = self.provider.name if self.provider is not None else registry.provider_of(params)

    def _add(self, pool, member, action, detail):
        self.entries.append({'pool': pool, 'member': member, 'action': action, 'detail': detail})
        if action.startswith('would_'):
            # Check mode says what a run would change.
            self.changed = True

    def declared(self):
        """The validated declarations; PoolError (naming the pool and what is wrong) before anything is done."""
        pools = declared_pools(self.params.get('pools'), self.provider_name)
        names = [pool['name'] for pool in pools]
        twice = sorted(set(name for name in names if names.count(name) > 1))
        if twice:
            raise pooling.PoolError('Pool %s is declared twice in ephemera_pools: give each pool one declaration.'
                                    % ', '.join(twice))
        return pools

    def run(self):
        pools = self.declared()
        if self.params.get('refill'):
            return self.refill(pools, self.params['refill'])
        self.delete_released()
        for pool in pools:
            if pool['provider'] != self.provider_name:
                self._add(pool['name'], None, 'skipped', 'declared for provider %s, and this fill runs with provider '
                          '%s: a fill with provider %s (ephemera_provider and its options) fills it'
                          % (pool['provider'], self.provider_name, pool['provider']))
                continue
            self.fill(pool)
        return self.summary(pools)

    def refill(self, pools, name):
        """Bring pool ``name`` alone back to its size after a create took one of its members: only a pool declared
        with ``refill: true``, through the same places and steps as any fill (a refill beside a scheduled fill never
        fills it beyond its size). Released members of other pools are left to pool_fill."""
        pool = next((each for each in pools if each['name'] == name), None)
        if pool is None:
            self._add(name, None, 'skipped', 'not declared in ephemera_pools: nothing to refill')
            return {}
        if not pool['refill']:
            self._add(name, None, 'skipped', 'declared without refill: true; the next pool_fill fills it')
            return self.summary([pool])
        if pool['provider'] != self.provider_name:
            self._add(name, None, 'skipped', 'declared for provider %s, and this refill runs with provider %s'
                      % (pool['provider'], self.provider_name))
            return self.summary([pool])
        if self.check_mode:
            self.would_refill(pool)
            return self.summary([pool])
        for record in pooling.members(self.journal, name, state='released'):
            self.delete_member(self.journal.get_workspace(record['member']), name, record['member'])
        self.fill(pool)
        return self.summary([pool])

    def would_refill(self, pool):
        """Check mode of a refill, whose create took nothing yet: the members a refill after it would start (the
        pool's shortfall, and one more for the member the create would take)."""
        name = pool['name']
        if self.journal is None:
            if pool['size']:
                self._add(name, None, 'would_fill', 'would start 1 member(s) after the create takes one')
            return
        counts = pooling.state_counts(self.journal, name)
        if not counts['warm']:
            self._add(name, None, 'skipped', 'no warm member: the create would go on cold and not refill the pool')
            return
        waiting = counts['warm'] + counts['filling'] - 1
        missing = max(0, min(pool['size'] - waiting, pool['maximum'] - waiting))
        if missing:
            self._add(name, None, 'would_fill', 'would start %d member(s) after the create takes one' % missing)
        else:
            self._add(name, None, 'full', 'would keep its %d member(s) after the create takes one' % pool['size'])

    def summary(self, pools):
        """{pool: {state: count}} after the fill."""
        return {pool['name']: pooling.state_counts(self.journal, pool['name']) if self.journal is not None
                else dict.fromkeys(pooling.MEMBER_STATES, 0) for pool in pools}

    # ------------------------------------------------------------------ filling

    def fill(self, pool):
        name = pool['name']
        if self.journal is None:
            if pool['size']:
                self._add(name, None, 'would_fill', 'would start %d member(s)' % pool['size'])
            return
        version = template_version(self.journal, pool)
        for record in pooling.members(self.journal, name, state='filling'):
            self.build(pool, record, version)
        missing = pooling.shortfall(self.journal, pool)
        if self.check_mode:
            if missing:
                self._add(name, None, 'would_fill', 'would start %d member(s)' % missing)
            return
        for dummy in range(missing):
            member = new_member_name(pool)
            failpoint.enter(member, 'pool.begin')
            record = pooling.begin_member(self.journal, pool, member, version=version)
            self.changed = True
            self.build(pool, record, version)
        if not missing:
            self._add(name, None, 'full', 'has its %d member(s)' % pool['size'])

    def build(self, pool, record, version):
        """Take member ``record`` through the member steps under its own queue claim, then make it warm; a failure
        releases it (its container is deleted by :meth:`delete_released`)."""
        member = record['member']
        if self.check_mode:
            self._add(pool['name'], member, 'would_fill', 'a killed fill left it filling; would go on with it')
            return
        if pooling.take_slot(self.journal, pool, record) is None:
            self.give_up(pool, record)
            return
        operation = Operation.claim_if_free(self.journal, 'create', member, 'another run fills this pool member',
                                            source='schedule', requested_by='pool_fill')
        if operation is None:
            self._add(pool['name'], member, 'busy', 'another run works on it; left to it')
            return
        self.changed = True
        flow = CreateFlow(self.journal, self.provider, dict(self.params, name=member, claim=operation.claim),
                          self.secret, claim=operation.claim)

        def record_it():
            failpoint.enter(member, 'pool.record')
            flow.record_member(pool, version)

        def step(each):
            def act():
                flow.run(each)
            return 'pool member: ' + flow.labels[each], act

        def warm():
            # The labels first: a sweep by labels (no journal) reads a warm member as one whose lease is its own.
            note = lease_flow.write_labels(self.journal, flow.provider, flow.ws, state='warm', claim=operation.claim)
            if note:
                raise CreateError('Pool member %s: %s; the next fill goes on with it.' % (member, note))
            pooling.mark_warm(self.journal, pooling.member(self.journal, pool['name'], member), claim=operation.claim)

        try:
            operation.run([('pool member: record', record_it)] + [step(each) for each in member_steps(pool)]
                          + [('pool member: warm', warm)], {'pool': pool['name'], 'member': member, 'state': 'warm'})
        except EphemeraError as err:
            reason = 'its fill failed: %s' % err
            current = pooling.member(self.journal, pool['name'], member)
            if current is not None and current['state'] in ('filling', 'warm'):
                pooling.release(self.journal, current, reason)
            self._add(pool['name'], member, 'failed', '%s; released, its container is deleted' % err)
            self.delete_member(self.journal.get_workspace(member), pool['name'], member)
            return
        self._add(pool['name'], member, 'warm', 'warm: %s at %s' % (
            flow.provider.label(flow.resource_id), flow.ws['address']))

    def give_up(self, pool, record):
        """Member ``record`` found every place of its pool held by members that wait (another fill started them
        first): released, and forgotten at once when nothing was made for it (else deleted like any released one)."""
        member = record['member']
        current = pooling.member(self.journal, pool['name'], member)
        if current is not None and current['state'] == 'filling':
            pooling.release(self.journal, current, 'the pool was full: another fill started its members first')
        self.changed = True
        ws = self.journal.get_workspace(member)
        current = pooling.member(self.journal, pool['name'], member)
        if ws is None and current is not None and current['state'] == 'released':
            try:
                pooling.forget(self.journal, current)
            except StaleGenerationError:
                pass  # the other fill, which found no place for it either, forgot it first
            self._add(pool['name'], member, 'full', 'another fill started the pool\'s members first; none made')
        else:
            self.delete_member(ws, pool['name'], member)

    # ------------------------------------------------------------------ released members

    def delete_released(self):
        """Delete the container of every released member (of any pool: a pool no longer declared too) and forget the
        membership once it is confirmed gone."""
        for record in pooling.members(self.journal, state='released') if self.journal is not None else ():
            ws = self.journal.get_workspace(record['member'])
            if ws is not None and registry.provider_of(ws) != self.provider_name:
                # Another provider's member: a fill with that provider deletes it.
                continue
            self.delete_member(ws, record['pool'], record['member'])

    def delete_member(self, ws, pool, member):
        """The ownership-checked destroy of released member ``ws`` (None: never recorded), then its membership
        forgotten."""
        record = pooling.member(self.journal, pool, member)
        if record is None or record['state'] != 'released':
            return
        if self.check_mode:
            self._add(pool, member, 'would_delete', 'released (%s); would delete its container' % record.get('reason'))
            return
        if ws is not None and ws['status'] != 'destroyed':
            failpoint.enter(member, 'pool.delete')
            if not destroy_member(self.journal, self.provider, self.params, self.secret, member,
                                  lambda err: self._add(pool, member, 'delete_failed', str(err))):
                return
        self.changed = True
        pooling.forget(self.journal, pooling.member(self.journal, pool, member))
        self._add(pool, member, 'deleted', 'released (%s); its container deleted' % record.get('reason'))


def destroy_member(journal, provider, params, secret, name, failed):
    """Destroy the record ``name`` of a released member through the destroy steps under its own queue claim (its
    container deleted only when its marker verifies); False (``failed(err)`` told) when it could not be."""
    operation = Operation.claim_if_free(journal, 'destroy', name, 'another run works on this pool member',
                                        source='schedule', requested_by='pool_fill')
    if operation is None:
        failed('another run works on it; the next fill deletes it')
        return False
    flow = DestroyFlow(journal, provider, dict(params, name=name, claim=operation.claim, archive=False),
                       secret, claim=operation.claim)

    def step(each):
        def act():
            flow.ws = journal.get_workspace(name)
            flow.run(each)
        return 'pool member: ' + each, act
    try:
        operation.run([step(each) for each in DESTROY_STEPS], {'workspace': name, 'status': 'destroyed'})
    except EphemeraError as err:
        failed(err)
        return False
    return True
