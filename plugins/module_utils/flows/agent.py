# -*- coding: utf-8 -*-
# Copyright: ephemera.workspaces contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
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

import contextlib
import time
from concurrent.futures import ThreadPoolExecutor

from ansible_collections.ephemera.workspaces.plugins.module_utils.core import lease as leasing
from ansible_collections.ephemera.workspaces.plugins.module_utils.core import waiter
from ansible_collections.ephemera.workspaces.plugins.module_utils.core.errors import (
    EphemeraError,
    JournalMissing,
    StaleGenerationError,
)
from ansible_collections.ephemera.workspaces.plugins.module_utils.core.journal import Journal
from ansible_collections.ephemera.workspaces.plugins.module_utils.flows.archive import guest_of, layout_of
from ansible_collections.ephemera.workspaces.plugins.module_utils.guest import agents as agent_defs
from ansible_collections.ephemera.workspaces.plugins.module_utils.guest import operations as guest_ops

ACTIVITIES = ('active', 'idle', 'blocked')
# What the journal keeps of the runner's answer (its events are already bounded by the runner).
KEPT = ('name', 'session', 'answered', 'error', 'waiting', 'briefs', 'running', 'exit', 'started_at', 'ended_at',
        'activity_since', 'events', 'events_seen', 'progress')
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
    out = {k: agent.get(k) for k in KEPT if k in agent}
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
    expired) *at the time it last made progress*: the activity is the agent's own word, so the lease is touched
    only as late as the last change of what the runner sees of it (its events, what it wrote, its processes' CPU
    time; ``progress_at``). An agent that says ``active`` and does nothing expires ``idle_timeout`` after it stopped
    doing anything. An event is written when the activity or the error changes, or when a look first finds no
    progress, not at every look. Returns ``(record, touched)``; a record that changed meanwhile is read again
    (``attempts`` times).
    """
    activity = answer.get('activity')
    now = time.time() if now is None else now
    ws = journal.get_workspace(name)
    touched = False
    for dummy in range(attempts):
        seen = observation(answer, now)
        fields = {}
        if activity in ACTIVITIES and activity != ws['activity']:
            fields['activity'] = activity
        before = (ws.get('facts') or {}).get('agent') or {}
        progress_at = now
        if seen is not None:
            progress_at = progressed_at(before, seen, activity == ws['activity'], now)
            seen['progress_at'] = progress_at
            fields['facts'] = dict(ws.get('facts') or {}, agent=seen)
        lease = ws.get('lease')
        stalled = False
        if touch_lease and lease and activity in ('active', 'blocked'):
            # Nothing changed since the last look: the lease counts the agent as of its last progress only.
            stalled = progress_at < now
            fresh = leasing.touch_from_activity(lease, activity, now, cleanup_started=leasing.cleanup_started(
                leasing.journal_record(ws, [])), at=progress_at)
            if fresh != lease:
                fields.update(lease=fresh, lease_expires_at=fresh['expires_at'])
        if seen is not None and stalled:
            seen['stalled'] = True
        if not fields or check_mode:
            return ws, False
        event = None
        error = (seen or {}).get('error')
        if 'activity' in fields or 'lease' in fields or (error or None) != (before.get('error') or None) or \
                (stalled and not before.get('stalled')):
            detail = {'activity': activity}
            if error:
                detail['error'] = error.get('kind')
            if 'lease' in fields:
                detail['expires_at'] = leasing.format_time(fields['lease']['expires_at'])
            if stalled:
                detail['no_progress_since'] = leasing.format_time(progress_at)
            event = {'kind': 'observed', 'action': 'activity', 'detail': detail}
        try:
            ws = journal.update_workspace(name, ws['generation'], event=event, claim=claim, **fields)
            touched = 'lease' in fields
            break
        except StaleGenerationError:
            ws = journal.get_workspace(name)
    return ws, touched


def progressed_at(before, seen, same_activity, now):
    """When the agent last made progress: ``now`` if what the runner saw of it (``progress``) or its activity changed
    since the last look (``before``), else the time recorded then. A runner that reports no progress (an older
    protocol) counts every look as progress."""
    progress = seen.get('progress')
    if progress is None or not same_activity or progress != before.get('progress') or \
            not isinstance(before.get('progress_at'), (int, float)):
        return now
    return min(float(before['progress_at']), now)


def wait_for_answer(call, timeout, sleep=time.sleep, first=None):
    """Poll the runner (``call()`` -> its ping answer) until the model answered the agent, the agent stopped, or
    ``timeout`` seconds passed. Returns the last answer and whether the wait ran out. ``first``: the runner's answer
    to the brief itself (it carries the same view of the agent), which ends the wait without a look when it says as
    much already (an agent without an event stream counts as answered at its start)."""
    if first is not None and 'agent' in first and _settled(first) is not None:
        return first, False

    def probe(remaining):
        answer = call()
        outcome = _settled(answer)
        return outcome(answer) if outcome is not None else waiter.pending(answer)

    result = waiter.wait_for(probe, timeout, waiter.Backoff(start=0.1, maximum=1.0), sleep=sleep,
                             what='the model to answer the agent')
    return result.value, result.outcome == waiter.TIMEOUT


def _settled(answer):
    """How a look at the runner ends the wait for the model's answer (waiter.failed or waiter.done), or None."""
    agent = answer.get('agent') or {}
    if answer.get('alive') is False:
        return waiter.failed
    if agent.get('error') or agent.get('answered') or agent.get('waiting') or not agent.get('running', True) \
            or 'agent' not in answer:
        return waiter.done
    return None


def check_briefed(answer, agent_name, what='brief'):
    """Raise AgentError with advice when the answer says the agent stopped on an error."""
    agent = answer.get('agent') or {}
    error = agent.get('error')
    if error and not agent.get('running'):
        raise AgentError('The agent %s stopped on an error after its %s (%s: %s); %s.'
                         % (agent_name, what, error.get('kind'), error.get('message'),
                            advice(error.get('kind'), agent_name)), agent=agent)


# What a follow-up message may be: the same limits as a purpose (it goes onto the agent's command line).
MESSAGE_MAX = 8000


def check_message(text):
    """Refuse a message the agent would read as an option, that no command line carries, or that is empty."""
    if not isinstance(text, str) or not text.strip():
        raise AgentError('The message is empty: say what the agent should do next.')
    if text.lstrip().startswith('-'):
        raise AgentError('The message starts with "-" (%r...): the agent would read it as an option of its command '
                         'line. Start it with a word.' % text[:20])
    if '\x00' in text:
        raise AgentError('The message holds a NUL character, which no command line can carry.')
    if len(text) > MESSAGE_MAX:
        raise AgentError('The message is %d characters long; at most %d go onto the agent\'s command line. Put the '
                         'details into a file of the repository and point the agent at it.' % (len(text), MESSAGE_MAX))


class AgentFlow:
    """Observations of agents, and follow-up briefs, for the ``workspace_agent`` module. ``params`` its options."""

    def __init__(self, journal, params, check_mode=False, sleep=time.sleep):
        self.journal = journal
        self.params = params
        self.check_mode = check_mode
        self.sleep = sleep

    @classmethod
    @contextlib.contextmanager
    def open(cls, params, check_mode=False):
        """The flow on the journal of ``params``; None when there is no journal yet (nothing to ask)."""
        # An existing journal only: asking about a workspace of another journal must not make an empty one.
        try:
            journal = Journal.open(params.get('journal_path'), create=False, url=params.get('journal_url'))
        except JournalMissing:
            yield None
            return
        with journal:
            yield cls(journal, params, check_mode=check_mode)

    def _ask(self, ws, request=None):
        return ask(ws, key_file=self.params.get('ssh_private_key'), timeout=self.params.get('activity_timeout') or 10,
                   request=request)

    # ---------------------------------------------------------------- observe

    def observe(self, name=None):
        """Ask one workspace's runner (or every ready workspace's) what its agent does; record the answers."""
        if name is not None:
            ws = self._workspace(name)
            if ws['status'] != 'ready':
                raise AgentError('Workspace %s is %s: its agent is briefed at the end of its create (status ready).'
                                 % (name, ws['status']))
            live = [ws]
        else:
            live = [ws for ws in self.journal.list_workspaces(status='ready') if ws['desired_state'] == 'present']
        answers = []
        if live:
            with ThreadPoolExecutor(max_workers=max(1, min(self.params.get('parallel') or 8, len(live)))) as pool:
                answers = list(pool.map(self._ask, live))
        seen = []
        for ws, answer in zip(live, answers):
            entry = {'name': ws['name'], 'activity': answer.get('activity') if answer.get('activity') in ACTIVITIES
                     else 'unknown', 'answered': 'activity' in answer}
            if 'activity' not in answer:
                entry['error'] = answer.get('error') or 'the runner did not say'
            else:
                record(self.journal, ws['name'], answer, check_mode=self.check_mode)
                entry['agent'] = observation(answer)
            seen.append(entry)
        result = {'changed': False, 'workspaces': seen}
        if name is not None:
            said = (agent_defs.describe({'activity': seen[0]['activity'], 'agent': seen[0].get('agent')})
                    if seen[0].get('agent') else 'the runner did not answer: %s' % seen[0].get('error'))
            result.update(activity=seen[0]['activity'], msg='%s: %s' % (name, said))
            if seen[0].get('agent'):
                result['agent'] = seen[0]['agent']
        else:
            result['msg'] = '%d ready workspace(s) asked, %d answered' % (len(seen), sum(1 for e in seen if e['answered']))
        return result

    def _workspace(self, name):
        ws = self.journal.get_workspace(name)
        if ws is None:
            raise AgentError('Workspace %s is not in the journal %s.' % (name, self.journal.path))
        if ws['desired_state'] == 'destroyed' or ws['status'] in ('destroying', 'destroyed'):
            raise AgentError('Workspace %s is %s; its agent takes no more briefs.' % (
                name, 'being destroyed' if ws['status'] != 'destroyed' else 'destroyed'))
        return ws

    # ---------------------------------------------------------------- brief

    def brief(self, name, text):
        """Continue the agent's session with ``text``; wait for the model's answer; record what the agent does."""
        check_message(text)
        ws = self._workspace(name)
        if ws['status'] != 'ready':
            raise AgentError('Workspace %s is %s: a follow-up brief needs a ready workspace. Finish its create first '
                             '(run the create again: it goes on where it stopped).' % (name, ws['status']))
        req = ws['params'] or {}
        try:
            agents = agent_defs.runner_agents(req.get('agent'), req.get('agents'), req.get('agent_base_urls'),
                                              req.get('agent_models'))
        except agent_defs.AgentError as err:
            raise AgentError(str(err))
        if self.check_mode:
            session = ((ws.get('facts') or {}).get('agent') or {}).get('session')
            return {'changed': True, 'workspaces': [], 'activity': ws['activity'],
                    'msg': 'brief: would continue %s%s with the message' % (
                        req.get('agent'), ' session %s' % session if session else '')}
        claim = self.params.get('claim')
        layout, ssh_user = layout_of(ws), req.get('ssh_user') or 'root'
        guest = guest_of(ws, key_file=self.params.get('ssh_private_key'))
        self.journal.append_event(name, 'dispatched', 'brief', {'message': text[:500], 'agent': req.get('agent')},
                                  claim=claim)
        with guest.connect() as g:
            if self.params.get('agent_credentials'):
                guest_ops.write_credentials(g, layout, self.params['agent_credentials'])
            answer = self._send(g, layout, ssh_user, text, agents)
            answer, slow = wait_for_answer(lambda: guest_ops.runner_call(g, layout, ssh_user, {'op': 'ping'},
                                                                         point=False),
                                           self.params.get('brief_timeout', 120), sleep=self.sleep, first=answer)
        ws, dummy = record(self.journal, name, answer, claim=claim)
        check_briefed(answer, req.get('agent'), what='follow-up brief')
        agent = observation(answer) or {}
        activity = answer.get('activity') if answer.get('activity') in ACTIVITIES else 'unknown'
        note = ('; the model has not answered within %d s: the agent waits for it' % self.params['brief_timeout']
                if slow else '')
        return {'changed': True, 'activity': activity, 'agent': agent,
                'workspaces': [{'name': name, 'activity': activity, 'answered': True, 'agent': agent}],
                'msg': 'brief: %s continues%s (%s)%s' % (
                    req.get('agent'), ' session %s' % agent['session'] if agent.get('session') else '', activity,
                    note)}

    def _send(self, g, layout, ssh_user, text, agents):
        """Send the message; an agent still working is waited for (``wait_idle``), or stopped (``interrupt``)."""
        wait = self.params.get('wait_idle', 300)

        def probe(remaining):
            answer = guest_ops.message(g, layout, ssh_user, text, agents, interrupt=self.params.get('interrupt'))
            if answer.get('ok'):
                return waiter.done(answer)
            if answer.get('busy'):
                return waiter.pending(answer)
            return waiter.failed(answer)

        def what(answer):
            return 'the agent to finish its work before the brief (wait_idle)', (answer or {}).get('activity')
        result = waiter.wait_for(probe, wait, waiter.Backoff(start=0.5, maximum=5.0), sleep=self.sleep, what=what)
        if result.ok:
            return result.value
        answer = result.value or {}
        if answer.get('busy'):
            raise AgentError('The agent is still working (%s) after %d s. Run the brief again later, or with '
                             'interrupt=true to stop it and continue its session now.'
                             % (answer.get('activity'), wait))
        raise AgentError('The agent runner refused the follow-up brief: %s' % answer.get('error'))
