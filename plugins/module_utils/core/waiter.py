# -*- coding: utf-8 -*-
# Copyright: ephemera.workspaces contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The collection's one waiting helper: look until a condition holds, by wall clock, with backoff.

A wait is bounded by a monotonic deadline, never by a count of sleeps: a slow look (a slow network,
a busy API) uses up the time it takes. The probe is told how much time is left so that it can bound
its own I/O, and it reports one of three states::

    def probe(remaining):
        status = api.get(..., timeout=remaining)
        if status['status'] == 'running':
            return pending(status)
        return done(status) if status['exitstatus'] == 'OK' else failed(status)

    result = wait_for(probe, timeout=300)
    if result.outcome == TIMEOUT: ...

The first look happens at once, the next ones after growing pauses (Backoff), and the last one at
the deadline. Exceptions from the probe propagate: the probe decides which errors mean "look again".
"""

import contextlib
import os
import random
import time

from ansible_collections.ephemera.workspaces.plugins.module_utils.core import renewal

DONE = 'done'
FAILED = 'failed'
PENDING = 'pending'
TIMEOUT = 'timeout'

# How often a long wait says what it waits for, in seconds (EPHEMERA_PROGRESS_INTERVAL overrides it).
PROGRESS_INTERVAL = 15.0
PROGRESS_ENV = 'EPHEMERA_PROGRESS_INTERVAL'
# Where a wait that names what it waits for (wait_for's ``what``) says so: set by the module layer for the length of
# a task (plugin_utils/in_process.py writes it through Ansible's display), None elsewhere.
_report = None


@contextlib.contextmanager
def reporting(report):
    """Let the waits of this block say what they wait for, through ``report(text)``, every PROGRESS_INTERVAL
    seconds (or ``EPHEMERA_PROGRESS_INTERVAL``)."""
    global _report  # pylint: disable=global-statement
    saved, _report = _report, report
    try:
        yield
    finally:
        _report = saved


def _interval():
    try:
        return max(float(os.environ.get(PROGRESS_ENV) or PROGRESS_INTERVAL), 0.1)
    except ValueError:
        return PROGRESS_INTERVAL


def progress_line(said, elapsed, timeout):
    """The line a long wait says: "waiting for <what> (N s of T s[; last: <last>])"; ``said`` is a text or a pair
    (what, last)."""
    what, last = said if isinstance(said, tuple) else (said, None)
    return 'waiting for %s (%d s of %d s%s)' % (what, elapsed, timeout, '; last: %s' % last if last else '')


class Poll:
    """What one look saw: a state (DONE, FAILED or PENDING) and the value it saw."""

    __slots__ = ('state', 'value')

    def __init__(self, state, value=None):
        if state not in (DONE, FAILED, PENDING):
            raise ValueError('a poll state is done, failed or pending, not {0!r}'.format(state))
        self.state = state
        self.value = value

    def __repr__(self):
        return 'Poll({0!r}, {1!r})'.format(self.state, self.value)


def done(value=None):
    """The condition holds: stop waiting, with success."""
    return Poll(DONE, value)


def failed(value=None):
    """The condition can no longer hold: stop waiting, with failure."""
    return Poll(FAILED, value)


def pending(value=None):
    """Not yet: look again later (if the deadline allows)."""
    return Poll(PENDING, value)


class WaitResult:
    """How a wait ended: outcome (DONE, FAILED or TIMEOUT), the last value seen, seconds and looks it took."""

    __slots__ = ('outcome', 'value', 'elapsed', 'attempts')

    def __init__(self, outcome, value, elapsed, attempts):
        self.outcome = outcome
        self.value = value
        self.elapsed = elapsed
        self.attempts = attempts

    @property
    def ok(self):
        """True when the condition held."""
        return self.outcome == DONE

    def __repr__(self):
        return 'WaitResult(outcome={0!r}, elapsed={1:.3f}, attempts={2})'.format(self.outcome, self.elapsed, self.attempts)


class Backoff:
    """Pauses that grow from start by factor up to maximum; jitter spreads each by up to that share.

    Jitter keeps many waiters that started together (parallel clones of one template, say) from
    knocking at the same instant.
    """

    def __init__(self, start=0.05, maximum=2.0, factor=1.5, jitter=0.0, rng=None):
        if start <= 0 or maximum < start or factor < 1 or not 0 <= jitter <= 1:
            raise ValueError('backoff needs 0 < start <= maximum, factor >= 1 and 0 <= jitter <= 1')
        self.start = start
        self.maximum = maximum
        self.factor = factor
        self.jitter = jitter
        self._rng = rng or random.Random()
        self._next = start

    def next_delay(self):
        """The next pause in seconds."""
        delay = self._next
        self._next = min(self._next * self.factor, self.maximum)
        if self.jitter:
            delay *= 1 + self._rng.uniform(-self.jitter, self.jitter)
        return delay


def wait_for(probe, timeout, backoff=None, clock=time.monotonic, sleep=time.sleep, what=None):
    """Call probe(remaining_seconds) until it returns done() or failed(), or the deadline passes.

    timeout is in seconds (0: look once). Returns a WaitResult; outcome is TIMEOUT when the last
    look, at or after the deadline, was still pending. clock and sleep are for tests.

    ``what`` (a text, or a function of the last pending look's value that gives one) names what is waited for:
    inside :func:`reporting`, a wait that goes on says "waiting for <what> (N s of T s)" at intervals, so that a
    long wait never looks stuck. A function may give a pair (what, last): then the line is "waiting for <what>
    (N s of T s; last: <last>)", for what the last look saw (a refusal, a task's status); a falsy last is left out.
    """
    if timeout < 0:
        raise ValueError('timeout must be >= 0, not {0!r}'.format(timeout))
    backoff = backoff or Backoff()
    start = clock()
    deadline = start + timeout
    attempts = 0
    report = _report if what is not None else None
    interval = _interval() if report is not None else None
    next_report = start + interval if report is not None else None
    while True:
        attempts += 1
        # A step whose claim was lost (core/renewal.py) stops waiting, and acting, here.
        renewal.check()
        poll = probe(max(deadline - clock(), 0.0))
        if not isinstance(poll, Poll):
            raise TypeError('a probe returns done(), failed() or pending(), not {0!r}'.format(poll))
        now = clock()
        if poll.state != PENDING:
            return WaitResult(poll.state, poll.value, now - start, attempts)
        remaining = deadline - now
        if remaining <= 0:
            return WaitResult(TIMEOUT, poll.value, now - start, attempts)
        if report is not None and now >= next_report:
            report(progress_line(what(poll.value) if callable(what) else what, now - start, timeout))
            next_report = now + interval
        sleep(min(backoff.next_delay(), remaining))
