# -*- coding: utf-8 -*-
# Copyright: ephemera.workspaces contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A create that takes a warm pool member (docs/pools.md): the pool its request matches, the member it claims by
compare-and-set, and the member's resource made the workspace's. CreateFlow (flows/create.py) mixes WarmPoolSteps in."""

import time

from ansible_collections.ephemera.workspaces.plugins.module_utils.core import lease as leasing
from ansible_collections.ephemera.workspaces.plugins.module_utils.core import pools as pooling
from ansible_collections.ephemera.workspaces.plugins.module_utils.core import ownership
from ansible_collections.ephemera.workspaces.plugins.module_utils.flows.base import (
    LOCATION,
    RESOURCE_ID,
    StepResult,
)
from ansible_collections.ephemera.workspaces.plugins.module_utils.providers.base import (
    ProviderError,
    provider_of,
)
from ansible_collections.ephemera.workspaces.plugins.module_utils.flows import agent as agent_flow
from ansible_collections.ephemera.workspaces.plugins.module_utils.flows.create_request import (
    CreateError,
    declared_pools,
    template_value,
)

# The steps a warm pool member did that a workspace taking it does not repeat, and what it takes of the member's facts
# (the host key the member's first connection pinned and its bootstrap renewed). The configure step runs (the request's
# settings), the bootstrap only writes the request's credentials, then the checkout, the brief and ready.
POOLED_STEPS = ('vmid', 'clone', 'wait_clone', 'start', 'address', 'ssh', 'runner')
MEMBER_FACTS = ('host_key', 'host_keys_published', 'pool_fetched')


class WarmPoolSteps:
    """What CreateFlow does with warm pools: record a member (for the pool's fill), and in the candidate step (2)
    take one for the workspace."""

    # ------------------------------------------------------------ warm pools

    def record_member(self, pool, version=None):
        """Record this workspace as a member of warm pool ``pool`` (a validated declaration): a request that is the
        pool's (its template, location and repository; the run's sizes and guest settings) with no purpose, ref or
        secrets, so that every create step before the checkout of a ref and the brief can run for it."""
        if self.ws is not None:
            return StepResult(False, 'pool member %s: already recorded (%s)' % (self.name, self.ws['status']))
        req = self._settings_of_request()
        req.update(template=template_value(pool['template']), node=pool['location'], repo=pool.get('repo'), ref=None,
                   purpose=None, requester={'by': 'pool_fill', 'job_id': self.params.get('job_id') or None},
                   inputs={'agent_env': [], 'git_login': False}, pool_member={'pool': pool['name']})
        if req['address_mode'] == 'static':
            raise CreateError('Pool %s: a member takes its address by DHCP (a static address is leased to a '
                              'workspace by name); set address_mode dhcp for the pool fill.' % pool['name'],
                              step='request')
        self._check_agent_user(req)
        self._check_agent(req)
        self._check_key()
        node = self._resolve_source_of(req)
        if version is not None and (req.get('template_version') or {}).get('version') not in (None, version):
            raise CreateError('Pool %s: template %s moved to version %s while the member was recorded for version '
                              '%s; the next fill makes members of the new one.'
                              % (pool['name'], pool['template'], req['template_version']['version'], version),
                              step='request')
        if self.check_mode:
            return StepResult(True, 'pool member %s: would record it' % self.name)
        now = time.time()
        # A member nobody takes is given up at the end of its lease, however idle it is meanwhile.
        terms = leasing.new_lease(now, ttl=pool['lease'], idle_timeout=pool['lease'], keep=False)
        self.ws = self.journal.create_workspace(
            self.name, claim=self.claim, status='requested', desired_state='present', repo=req['repo'], ref=None,
            purpose=None, params=req, progress={'request': now}, lease=terms, lease_expires_at=terms['expires_at'],
            cleanup={}, **self.resource_fields(provider=self.provider.name, location=node))
        return StepResult(True, 'pool member %s: recorded for pool %s' % (self.name, pool['name']))

    def _declared_pools(self, step=None):
        """The ``pools`` option, each declaration checked (CreateError saying what to correct)."""
        try:
            return declared_pools(self.params.get('pools'), self.provider.name if self.provider is not None
                                  else provider_of(self.params))
        except pooling.PoolError as err:
            raise CreateError('%s Correct ephemera_pools and run again.' % err, step=step)

    def _pool_request(self):
        """What a pool must match for this workspace: provider, location, template and repository."""
        req = self.request
        return {'provider': self.provider.name, 'location': req.get('node'), 'template': req.get('template'),
                'repo': req.get('repo')}

    def _pool_for_check(self, req, node):
        """The declared pool whose member a new request ``req`` (at ``node``) would try to take, for check mode to
        say (and the create playbook's refill to report what it would fill); None when it would go cold."""
        if (not self.params.get('pools') or self.provider is None or req.get('fork')
                or req.get('address_mode') == 'static'):
            return None
        return pooling.matching_pool(self._declared_pools(step='request'), {
            'provider': self.provider.name, 'location': req.get('node') or node, 'template': req.get('template'),
            'repo': req.get('repo')})

    def _from_pool(self):
        """The vmid step's result when a warm member of a pool that matches the request became this workspace, else
        None (no pool declared or matching, none warm, each failing its claim check): the create goes on cold."""
        req = self.request
        declared = self.params.get('pools') or []
        if (not declared or self.check_mode or req.get('fork') or req.get('pool_member') or self.provider is None
                or req.get('address_mode') == 'static' or self.ws['facts'].get('cold')):
            return None
        pool = pooling.matching_pool(self._declared_pools(), self._pool_request())
        if pool is None:
            return None
        version = (req.get('template_version') or {}).get('version')
        life = (self.ws['progress'] or {}).get('request')
        record = pooling.claim_member(self.journal, pool['name'], self.name, claim=self.claim, check=self._claim_check,
                                      version=version, life=life)
        if record is None:
            # Noted, so that a rerun of this step does not look again and take a member after a cold clone began.
            self.save('pool_empty', kind='observed', detail={'pool': pool['name']},
                      facts=dict(self.ws['facts'], cold='pool %s had no warm member that passed its claim check'
                                 % pool['name']))
            return None
        return self._take_member(pool, record)

    def _claim_check(self, record):
        """True when member ``record`` may be given out: its record names a resource that carries its marker, runs,
        and whose agent runner answers; else why not (the member is then released)."""
        member = self.journal.get_workspace(record['member'])
        noun = self.provider.noun
        if member is None or member['status'] == 'destroyed' or not member[RESOURCE_ID]:
            return 'its workspace record names no %s' % noun
        if member['desired_state'] != 'present' or (member.get('lease') and
                                                    leasing.is_expired(member['lease'], time.time())):
            return 'its lease expired: the expiry sweep deletes it'
        try:
            resource = self.provider.find(member[RESOURCE_ID], member[LOCATION])
            if resource is None:
                return 'its %s %s is gone' % (noun, self.provider.label(member[RESOURCE_ID]))
            verdict = self.provider.verify(resource, member['name'], ownership.record_nonce(member))
            if verdict != ownership.VERIFIED:
                return 'its %s does not carry its marker (%s)' % (noun, verdict)
            if not self.provider.power(resource).running:
                return 'its %s %s is not running' % (noun, self.provider.label(resource.id))
        except ProviderError as err:
            return 'its %s could not be looked at: %s' % (noun, err)
        answer = agent_flow.ask(member, key_file=self.params.get('ssh_private_key'),
                                timeout=min(10, self.params.get('ssh_timeout') or 10))
        if not answer.get('alive'):
            return 'its agent runner does not answer: %s' % (answer.get('error') or answer)
        return True

    def _close_member(self, member, vmid):
        """End the life of claimed member record ``member``: its container (``vmid``, None when it vanished) is this
        workspace's now; the record stays, for audit."""
        if member is None or member['status'] == 'destroyed':
            return
        self.journal.update_workspace(
            member['name'], member['generation'], claim=self.claim,
            event={'kind': 'observed', 'action': 'pool_claimed', 'detail': {'by': self.name, 'vmid': vmid}},
            status='destroyed', desired_state='destroyed', facts=dict(member['facts'] or {}, claimed_by=self.name),
            **self.resource_fields(resource_id=None, candidate_id=None))

    def _take_member(self, pool, record):
        """Make the claimed member ``record`` this workspace: its container re-signed with this workspace's marker,
        host name and lease labels, its record's container, address and host key taken over, the member's record
        closed. Every part is done again or found done by a rerun (the claim stays this workspace's)."""
        member = self.journal.get_workspace(record['member'])
        facts = self.ws['facts']
        nonce = ownership.record_nonce(self.ws) or ownership.new_nonce()
        if facts.get('from_pool') != pool['name'] or facts.get('marker_nonce') != nonce:
            # The nonce the container's new marker carries, recorded before it is written (journal first).
            self.save('pool_claim', kind='dispatched', detail={'pool': pool['name'], 'member': record['member']},
                      facts=dict(facts, from_pool=pool['name'], pool_member=record['member'], marker_nonce=nonce))
        if self.resource_id is None:
            resource = None
            if member is not None and member[RESOURCE_ID]:
                resource = self.provider.find(member[RESOURCE_ID], member[LOCATION])
            if resource is None:
                # Gone between its claim check and now: this workspace goes on cold, the member's life ends here.
                self._close_member(member, None)
                self.save('pool_member_gone', kind='observed', detail={'member': record['member']},
                          facts=dict(self.ws['facts'], from_pool=None, cold='pool member %s vanished after its claim'
                                     % record['member']))
                return None
            mine = self.provider.verify(resource, self.name, nonce)
            if mine != ownership.VERIFIED:
                if self.provider.verify(resource, member['name'], ownership.record_nonce(member)) != ownership.VERIFIED:
                    raise CreateError('%s, the %s of pool member %s, carries neither its marker nor this '
                                      'workspace\'s; refusing to touch it. Reconcile reports it; destroy this '
                                      'workspace and create it again.' % (self.provider.label(resource.id),
                                                                          self.provider.noun, record['member']))
                self.provider.remark(resource, self.name, nonce, 'agent-%s' % self.name, self._labels('provisioning'),
                                     created_by=self.request.get('created_by'))
            mfacts = dict(member['facts'] or {})
            if member['params'].get('repo') and member['params'].get('repo') == self.request.get('repo'):
                mfacts['pool_fetched'] = True
            now = time.time()
            # The candidate step itself is done once the member's record is closed below: a run killed in between
            # closes it on its rerun (step_vmid), so that no two live records name the container.
            done = {step: now for step in POOLED_STEPS if step != 'vmid'}
            self.save('pool_member_taken', detail={'pool': pool['name'], 'member': record['member'],
                                                   'vmid': member[RESOURCE_ID]},
                      address=member['address'], progress=dict(self.ws['progress'], **done),
                      facts=dict(self.ws['facts'], **{k: mfacts[k] for k in MEMBER_FACTS if k in mfacts}),
                      **self.resource_fields(resource_id=member[RESOURCE_ID], candidate_id=member[RESOURCE_ID],
                                             location=member[LOCATION]))
        self._close_member(member, member[RESOURCE_ID] if member else None)
        self.done('vmid')
        return StepResult(True, '%s: %s taken from warm pool %s (member %s)'
                          % (self.labels['vmid'], self.provider.label(self.resource_id), pool['name'], record['member']),
                          vmid=self.resource_id, from_pool=pool['name'], refill=bool(pool.get('refill')))
