# -*- coding: utf-8 -*-
# Copyright: ephemera.workspaces contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The agent of a ready workspace: what it does (observed and recorded), and follow-up briefs.

The runner in the guest reads the agent's own event stream; the controller asks it (one SSH round trip) and
records the answer on the workspace: ``activity`` (active, blocked, idle), and under ``facts.agent`` the agent's
session, the error it stopped on, what it waits for, and its last events. Every reader of the journal (the
inventory, ``workspace_info``, the status playbook, the expiry sweep) then sees the same observation, with the
time it was made (``observed_at``).

A follow-up brief continues the agent's session with a message, through the workspace's queue: the runner starts
the agent's ``continue`` command line with the session its events named, and the controller waits until the
model answered, the agent stopped on an error, or ``brief_timeout`` passed.
"""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import time

from ansible_collections.ephemera.workspaces.plugins.module_utils.core import lease as leasing
from ansible_collections.ephemera.workspaces.plugins.module_utils.core import waiter
from ansible_collections.ephemera.workspaces.plugins.module_utils.core.errors import EphemeraError, StaleGenerationError
from ansible_collections.ephemera.workspaces.plugins.module_utils.flows.archive import guest_of, layout_of
from ansible_collections.ephemera.workspaces.plugins.module_utils.guest import agents as agent_defs
from ansible_collections.ephemera.workspaces.plugins.module_utils.guest import operations as guest_ops

ACTIVITIES = ('active', 'idle', 'blocked')
# What the journal keeps of the runner's answer (its events are already bounded by the runner).
KEPT = ('name', 'session', 'answered', 'error', 'waiting', 'briefs', 'running', 'exit', 'started_at', 'ended_at',
        'activity_since', 'events', 'events_seen')
EVENTS_RECORDED = 10
# What to do about each kind of error an agent stops on.
ADVICE = {
    'auth': 'the model endpoint refused the agent\'s key: check agent_credentials ({keys}) and, for a gateway, '
            'agent_base_urls, then run the same create again with the right agent_credentials: it goes on at the '
            'brief (or brief the agent again with playbooks/brief.yml)',
    'rate_limit': 'the model endpoint rate-limited the agent: wait, or raise the key\'s limit, then brief it again',
    'overloaded': 'the model endpoint is overloaded: brief the agent again later',
    'server': 'the model endpoint failed: brief the agent again later, or check the gateway',
    'network': 'the agent could not reach its model endpoint: check agent_base_urls and the guest\'s network',
    'agent': 'the agent stopped on its own error: see its events and log (workspace_info, '
             '/var/lib/ephemera/runner/agent.log in the guest)',
}


class AgentError(EphemeraError):
    """The agent refused or failed a brief; the message says why and what to do."""


def advice(kind, agent=None):
    keys = ', '.join((agent_defs.BUILTIN.get(agent) or {}).get('key_variables') or ['the agent\'s key'])
    return ADVICE.get(kind, ADVICE['agent']).format(keys=keys)


def observation(answer, now=None):
    """``facts.agent`` for a runner's answer (a ping, a brief), or None when the runner said nothing of its agent."""
    agent = answer.get('agent')
    if not isinstance(agent, dict):
        return None
    out = dict((k, agent.get(k)) for k in KEPT if k in agent)
    if isinstance(out.get('events'), list):
        out['events'] = [e for e in out['events'] if isinstance(e, dict)][-EVENTS_RECORDED:]
    out['observed_at'] = time.time() if now is None else now
    return out


def ask(ws, key_file=None, timeout=10, request=None):
    """The runner's answer to ``request`` (a ping by default), or ``{'error': ...}``; one bounded round trip."""
    try:
        guest = guest_of(ws, key_file=key_file)
        guest.connect_timeout = float(timeout)
        with guest.connect() as connected:
            return guest_ops.runner_call(connected, layout_of(ws), (ws['params'] or {}).get('ssh_user') or 'root',
                                         request or {'op': 'ping'}, timeout=timeout)
    except EphemeraError as err:
        return {'error': str(err)}


def record(journal, name, answer, now=None, claim=None, touch_lease=False, check_mode=False, attempts=3):
    """Record what the runner answered of the agent on workspace ``name``: its activity, and ``facts.agent``.

    With ``touch_lease``, an ``active`` or ``blocked`` agent counts as a heartbeat (never past the ttl, never once
    expired). An event is written when the activity or the error changes, not at every look. Returns
    ``(record, touched)``; a record that changed meanwhile is read again (``attempts`` times).
    """
    activity = answer.get('activity')
    now = time.time() if now is None else now
    seen = observation(answer, now)
    ws = journal.get_workspace(name)
    touched = False
    for dummy in range(attempts):
        fields = {}
        if activity in ACTIVITIES and activity != ws['activity']:
            fields['activity'] = activity
        before = (ws.get('facts') or {}).get('agent') or {}
        if seen is not None:
            fields['facts'] = dict(ws.get('facts') or {}, agent=seen)
        lease = ws.get('lease')
        if touch_lease and lease and activity in ('active', 'blocked'):
            fresh = leasing.touch_from_activity(lease, activity, now, cleanup_started=leasing.cleanup_started(
                leasing.journal_record(ws, [])))
            if fresh is not lease:
                fields.update(lease=fresh, lease_expires_at=fresh['expires_at'])
        if not fields or check_mode:
            return ws, False
        event = None
        error = (seen or {}).get('error')
        if 'activity' in fields or 'lease' in fields or (error or None) != (before.get('error') or None):
            detail = {'activity': activity}
            if error:
                detail['error'] = error.get('kind')
            if 'lease' in fields:
                detail['expires_at'] = leasing.format_time(fields['lease']['expires_at'])
            event = {'kind': 'observed', 'action': 'activity', 'detail': detail}
        try:
            ws = journal.update_workspace(name, ws['generation'], event=event, claim=claim, **fields)
            touched = 'lease' in fields
            break
        except StaleGenerationError:
            ws = journal.get_workspace(name)
    return ws, touched


def summary(agent):
    """One line of what the agent did last, for messages."""
    if not agent:
        return 'the runner said nothing of its agent'
    parts = []
    if agent.get('error'):
        parts.append('stopped on %s: %s' % (agent['error'].get('kind'), agent['error'].get('message')))
    if agent.get('waiting'):
        parts.append('waits for %s' % '; '.join(agent['waiting']))
    events = [e for e in agent.get('events') or [] if e.get('type') not in ('session',)]
    if events:
        parts.append('last event: %s' % events[-1].get('text'))
    return '; '.join(parts) or 'no events yet'


def wait_for_answer(call, timeout, sleep=time.sleep):
    """Poll the runner (``call()`` -> its ping answer) until the model answered the agent, the agent stopped, or
    ``timeout`` seconds passed. Returns the last answer and whether the wait ran out."""
    def probe(remaining):
        answer = call()
        agent = answer.get('agent') or {}
        if answer.get('alive') is False:
            return waiter.failed(answer)
        if agent.get('error') or agent.get('answered') or agent.get('waiting') or not agent.get('running', True) \
                or 'agent' not in answer:
            return waiter.done(answer)
        return waiter.pending(answer)

    result = waiter.wait_for(probe, timeout, waiter.Backoff(start=0.1, maximum=1.0), sleep=sleep)
    return result.value, result.outcome == waiter.TIMEOUT


def check_briefed(answer, agent_name, what='brief'):
    """Raise AgentError with advice when the answer says the agent stopped on an error."""
    agent = answer.get('agent') or {}
    error = agent.get('error')
    if error and not agent.get('running'):
        raise AgentError('The agent %s stopped on an error after its %s (%s: %s); %s.'
                         % (agent_name, what, error.get('kind'), error.get('message'),
                            advice(error.get('kind'), agent_name)), agent=agent)
