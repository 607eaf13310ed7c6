# -*- coding: utf-8 -*-
# Copyright: ephemera.workspaces contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What every flow shares: one workspace's record, the provider it acts through, and how a step writes to the journal.

A step reads the record, acts through the provider, and writes what it observed with :meth:`Flow.save`:
a compare-and-set on the record's generation, with the event that explains it in the same
transaction, carrying the run's queue claim. :meth:`Flow.done` marks a step finished (a rerun skips
it), :meth:`Flow.fail` records a step's failure on the workspace. The workspace's resource is named
by the provider-neutral fields of the record (its id, the candidate id, its location, task handles).
"""

import time

from ansible_collections.ephemera.workspaces.plugins.module_utils.providers import registry
from ansible_collections.ephemera.workspaces.plugins.module_utils.core.errors import EphemeraError

# The record's fields that name the workspace's resource.
PROVIDER = 'provider'
RESOURCE_ID = 'resource_id'
CANDIDATE_ID = 'candidate_id'
LOCATION = 'location'
TASKS = 'provider_tasks'


def unadopted_fork(journal, ws):
    """The parent's name when ``ws`` is a child of a fork that was not adopted yet (docs/fork.md): only that fork
    may take it on (or abandon it). None for any other workspace."""
    mine = ((ws or {}).get('facts') or {}).get('fork') or {}
    if not mine.get('parent') or journal is None:
        return None
    parent = journal.get_workspace(mine['parent'])
    fork = ((parent or {}).get('facts') or {}).get('fork') or {}
    if fork.get('id') == mine.get('id') and fork.get('state') in ('started', 'snapshotted', 'copied'):
        return mine['parent']
    return None


class ProviderMismatch(EphemeraError):
    """A run talks to another provider than the one the workspace lives on; nothing was done."""


class StepResult:
    """What a step did: ``changed``, a one-line ``msg``, step-specific ``extra`` facts, and (when the run asked
    for one) a ``diff`` of what it changed: ``{'before': {...}, 'after': {...}}``."""

    def __init__(self, changed, msg, diff=None, **extra):
        self.changed = changed
        self.msg = msg
        self.diff = diff
        self.extra = extra


class Flow:
    """The steps of one operation on one workspace.

    ``journal`` is an open Journal (None only in check mode before anything was recorded); ``provider`` a
    Provider, or the API client of one (None for steps that do not need it), signing markers with
    ``secret``; ``params`` the module's options (``name`` the workspace); ``claim`` the queue claim every
    journal write carries; ``diff``: the run asked for the changes a step makes (``--diff``).
    """

    # The status a workspace shows while a step runs (the failure's ``phase``); empty where steps set none.
    STEP_STATUS = {}

    def __init__(self, journal, provider, params, secret, claim=None, check_mode=False, sleep=time.sleep, diff=False):
        self.journal = journal
        self.provider = registry.bind(provider, secret)
        self.params = params
        self.secret = secret
        self.claim = claim
        self.check_mode = check_mode
        self.diff = diff
        self.sleep = sleep
        self.name = params['name']
        if self.provider is not None and journal is not None:
            self.provider.use_journal(journal, claim, self.name)
        self.ws = journal.get_workspace(self.name) if journal is not None else None
        recorded = (self.ws or {}).get(PROVIDER)
        if self.provider is not None and recorded and recorded != self.provider.name:
            raise ProviderMismatch('Workspace %s lives on %s, and this run talks to %s. Run with provider: %s (and its '
                                   'connection options).' % (self.name, recorded, self.provider.name, recorded))

    # ---------------------------------------------------------------- the record's resource

    @property
    def resource_id(self):
        """The id of the workspace's resource once its allocation was confirmed, else None."""
        return self.ws[RESOURCE_ID]

    @property
    def candidate_id(self):
        """The id recorded before the allocation (the allocation's idempotency token), else None."""
        return self.ws[CANDIDATE_ID]

    @property
    def location(self):
        """Where the resource lives (recorded once the allocation was confirmed, else the request's)."""
        return self.ws[LOCATION] or self.ws['params'].get('node')

    @property
    def naming(self):
        """What names the workspace's resource (labels, cleanup-debt keys): the provider, or in a step that has
        none (a guest step), its class."""
        if self.provider is not None:
            return self.provider
        return registry.provider_class(registry.provider_of(self.ws))

    @property
    def tasks(self):
        """The provider's task handles, by step."""
        return self.ws[TASKS]

    @staticmethod
    def resource_fields(**values):
        """The record's fields for ``values`` of provider, resource_id, candidate_id, location and tasks (None clears
        one)."""
        columns = {'provider': PROVIDER, 'resource_id': RESOURCE_ID, 'candidate_id': CANDIDATE_ID, 'location': LOCATION,
                   'tasks': TASKS}
        return {columns[k]: v for k, v in values.items()}

    def with_task(self, step, handle):
        """The record's fields that add ``handle`` as the task of ``step``."""
        return {TASKS: dict(self.tasks, **{step: handle})}

    def without_tasks(self, *steps):
        return {TASKS: {k: v for k, v in self.tasks.items() if k not in steps}}

    # ---------------------------------------------------------------- writing

    def save(self, action, kind='observed', detail=None, **fields):
        """Apply ``fields`` to the record (compare-and-set on its generation), with the event that explains it."""
        self.ws = self.journal.update_workspace(self.name, self.ws['generation'], claim=self.claim,
                                                event={'kind': kind, 'action': action, 'detail': detail or fields},
                                                **fields)
        return self.ws

    def event(self, kind, action, detail):
        """Append an event to the workspace's log without changing the record."""
        self.journal.append_event(self.name, kind, action, detail, claim=self.claim)

    def done(self, step, **fields):
        """Mark ``step`` finished (a rerun skips it), with ``fields``."""
        progress = dict(self.ws['progress'], **{step: time.time()})
        return self.save('step_done', detail={'step': step}, progress=progress, **fields)

    def failure(self, step, err):
        """The record's ``failure`` for ``err`` at ``step``: the step, the status it failed in (``phase``), the
        message, and for a failed provider task its log's tail and its handle."""
        failure = {'step': step}
        if step in self.STEP_STATUS:
            failure['phase'] = self.STEP_STATUS[step]
        failure['message'] = str(err)
        details = err.details if isinstance(err, EphemeraError) else {}
        log_tail = getattr(err, 'log_tail', None) or details.get('log_tail')
        if log_tail:
            failure['log_tail'] = list(log_tail)
        if getattr(err, 'task_id', None):
            failure['upid'] = str(err.task_id)
        return failure

    def fail(self, step, err, **fields):
        """Record ``err`` as the workspace's failure at ``step`` (status failed, with ``fields``); returns it to be
        raised."""
        failure = self.failure(step, err)
        if not self.check_mode and self.ws is not None:
            self.save('step_failed', detail=failure, status='failed', failure=failure, **fields)
        err.recorded = True
        return err
