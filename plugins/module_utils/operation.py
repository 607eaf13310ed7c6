# -*- coding: utf-8 -*-
# Copyright: ephemera.workspaces contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The one runner of a queued operation: claim a turn, run the steps under the claim, record the outcome.

An operation (a create, destroy or archive of one workspace) runs only while it holds the claim on its
target's queue (core/queue.py): two runs never work on one workspace at once, and a run that lost its
claim writes nothing. Every caller goes through this runner:

- the roles, through the modules: the ``queue`` module claims (``state=claimed``) and records success
  (``state=finished``); each step module records its step under the claim before it acts
  (:func:`record_step`), and a step that fails records the operation's failure itself
  (:func:`record_failure`), so the role fails once, at that step, with no rescue to say it again;
- reconcile, in Python: it claims only a free target (it never waits behind a run) and runs the
  destroy steps with :meth:`Operation.run`, which records the failure before it re-raises it.
"""

import contextlib

from ansible_collections.ephemera.workspaces.plugins.module_utils.core import renewal
from ansible_collections.ephemera.workspaces.plugins.module_utils.core.errors import EphemeraError
from ansible_collections.ephemera.workspaces.plugins.module_utils.core.queue import CLAIMED, Queue


class Operation:
    """A claimed operation. ``claim`` is what the queue handed the run that holds it."""

    def __init__(self, journal, claim, queue=None):
        self.journal = journal
        self.claim = claim
        self.queue = queue or Queue(journal)

    @classmethod
    def claim_if_free(cls, journal, kind, target, busy_reason, **request):
        """Claim ``kind`` on ``target`` now or not at all: the Operation, or None when another run is ahead (its
        request is then withdrawn with ``busy_reason``)."""
        queue = Queue(journal)
        request_id = queue.enqueue(kind, target, **request).request_id
        turn = queue.poll(request_id)
        if turn.outcome != CLAIMED:
            queue.withdraw(request_id, busy_reason)
            return None
        return cls(journal, turn.claim, queue)

    def step(self, label, detail=None):
        """Record that the run is at step ``label`` now (and renew its claim)."""
        return self.queue.step(self.claim, label, detail)

    def succeeded(self, result=None):
        return self.queue.finish(self.claim, 'done', result)

    def failed(self, msg, result=None):
        return self.queue.finish(self.claim, 'failed', dict(result or {}, msg=msg))

    def run(self, steps, result=None):
        """Run ``steps`` ((label, callable) pairs) in order under the claim, the claim kept while each runs
        (:func:`keeping`), and record the outcome; a failure is recorded as the operation's and raised again."""
        try:
            for label, act in steps:
                self.step(label)
                with keeping(self.journal, self.claim):
                    act()
        except EphemeraError as err:
            self.failed(str(err))
            raise
        return self.succeeded(result)


def record_step(journal, claim, label, workspace, check_mode=False):
    """A step module's first write: the step it runs, under the run's claim (nothing without a claim, or in check
    mode)."""
    if claim and not check_mode:
        Operation(journal, claim).step(label, detail={'workspace': workspace})


@contextlib.contextmanager
def running_step(journal, claim, label, workspace, check_mode=False):
    """A step module's step: recorded under the run's claim (:func:`record_step`), and the claim kept for as long as
    the step runs, however long it waits without writing (core/renewal.py): a renewal that is refused, or that cannot
    reach the journal until the lease may have run out, stops the step at its next wait, call, command or write."""
    record_step(journal, claim, label, workspace, check_mode)
    if not claim or check_mode:
        yield None
        return
    with keeping(journal, claim) as keeper:
        yield keeper


@contextlib.contextmanager
def running_steps(journal, claim, workspace, check_mode=False):
    """Several steps of one step module in a row: the claim kept for them all (:func:`running_step`'s keeping, on one
    connection of its own); the block is given a function that records each step, as running_step records its one,
    to be called before the step acts."""
    def record(label):
        record_step(journal, claim, label, workspace, check_mode)
    if not claim or check_mode:
        yield record
        return
    with keeping(journal, claim):
        yield record


@contextlib.contextmanager
def keeping(journal, claim):
    """``claim`` renewed in the background for the length of the block, on a connection of its own to ``journal``
    (core/renewal.py)."""
    other = journal.reopen()
    try:
        queue = Queue(other)
        keeper = renewal.ClaimKeeper(lambda: queue.renew(claim), claim, close=other.close)
    except BaseException:
        other.close()
        raise
    with keeper:
        yield keeper


def record_failure(journal, claim, msg, check_mode=False):
    """A failed step module's last write: its operation failed with ``msg`` (nothing without a claim, or in check
    mode). A claim the run no longer holds is left alone: the step's own error is what the run reports."""
    if not claim or check_mode or journal is None:
        return
    try:
        Operation(journal, claim).failed(msg)
    except EphemeraError:
        pass


def fail_step(module, msg, journal=None, claim=None, name=None, **result):
    """End a step module whose step failed, once: ``msg`` names the workspace and the step and says what happened
    and what to do; the queued operation is recorded as failed (the role has no rescue to say it again); the result
    keeps the step's facts. The workspace's whole record is added from ``-v`` on: a failure is read in a plain log
    (AWX shows one), where the record on the same line would bury the message."""
    record_failure(journal, claim, msg, module.check_mode)
    if name and journal is not None and getattr(module, '_verbosity', 0) >= 1:
        result['workspace'] = journal.get_workspace(name)
    module.fail_json(msg=msg, **result)
