# -*- coding: utf-8 -*-
# Copyright: ephemera.workspaces contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Keeping a queued operation's claim while one of its steps runs.

A claim's lease (queue.py) is renewed by every journal write under the claim. A step that waits a long time without
writing (a template's provisioning, a slow clone, a bootstrap over SSH) would let its lease run out, and another
controller that shares the journal would take the operation over while this one still works on it. So while a step
runs, a :class:`ClaimKeeper` renews the claim from a thread of its own, on a connection of its own, three times per
lease (as a waiting request marks itself).

A renewal is fenced like any write under the claim: if the claim was taken over or cancelled meanwhile, it is
refused, and the keeper records why. If the journal cannot be reached for so long that the lease may have run out
(two thirds of it since the last renewal that went through), the keeper gives the claim up too: another controller
may have taken the operation over by then. From then on the step does nothing more: :func:`check`, which the
waiting helper calls before every look, the API clients before every call that acts, the SSH session before every
command and the journal before every write under the claim, raises the :class:`ClaimLostError` that says why. The
step then fails as any step that lost its claim does, with nothing more done, and the run that holds the claim goes
on from the journal.
"""

import threading
import time

from ansible_collections.ephemera.workspaces.plugins.module_utils.core.errors import ClaimLostError, EphemeraError

# Renewals per lease, as a waiting request marks itself (queue.py).
PER_LEASE = 3.0
# The keepers of the steps this process runs now, by the thread that runs each (a task's worker runs one step at a
# time; the expiry sweep releases several workspaces at once, each step in a thread of its own).
_running = {}
_lock = threading.Lock()


def current():
    """The keeper of the step the calling thread runs; for a thread that runs no step itself (one a step started),
    the keeper of the only step running, if only one is."""
    with _lock:
        own = _running.get(threading.get_ident())
        if own is not None:
            return own
        running = list(_running.values())
    return running[0] if len(running) == 1 else None


def check(claim=None):
    """Raise the ClaimLostError of the running step's keeper if its claim was lost (for ``claim``: only if that is
    the keeper's claim); nothing without a keeper."""
    keeper = current()
    if keeper is not None and (claim is None or keeper.holds(claim)):
        keeper.check()


class ClaimKeeper:
    """Renews ``claim`` every ``lease / PER_LEASE`` seconds while a step runs.

    ``renew()`` is one fenced renewal on a connection the keeper owns, returning the claim's lease in seconds (it
    raises ClaimLostError when the claim is gone); ``close()`` closes that connection. Use as a context manager
    around the step: the first renewal happens at once (so the lease is known), the thread stops and the connection
    closes when the step ends.
    """

    def __init__(self, renew, claim, close=None, clock=time.monotonic):
        self._renew = renew
        self._close = close
        self.claim = claim
        self._clock = clock
        self._stop = threading.Event()
        self._thread = None
        self.lost = None
        self.renewals = 0
        self.lease = None
        self.last_renewed = None
        self._previous = None
        self._thread_id = None

    def holds(self, claim):
        return isinstance(claim, dict) and claim.get('entry_id') == self.claim.get('entry_id') \
            and claim.get('fence') == self.claim.get('fence')

    @property
    def interval(self):
        return self.lease / PER_LEASE

    def check(self):
        if self.lost is not None:
            raise self.lost

    def renew_now(self):
        """One renewal; records a loss instead of raising it."""
        try:
            self.lease = float(self._renew())
        except ClaimLostError as err:
            self.lost = err
            return
        self.renewals += 1
        self.last_renewed = self._clock()

    def _run(self):
        failing = False
        while not self._stop.wait(min(self.interval / PER_LEASE, 5.0) if failing else self.interval):
            try:
                self.renew_now()
                failing = False
            except (EphemeraError, OSError, RuntimeError) as err:  # the journal could not be reached this time
                failing = True
                silent = self._clock() - self.last_renewed
                if silent >= self.lease * (PER_LEASE - 1) / PER_LEASE:
                    self.lost = ClaimLostError(
                        'This run could not renew its claim on queued operation #%s for %d s (last error: %s): its '
                        'lease (%d s) may have run out, and another controller may have taken the operation over. '
                        'Nothing more was done; run the operation again once the journal answers, and it resumes '
                        'from the journal.' % (self.claim.get('entry_id'), silent, err, self.lease),
                        entry_id=self.claim.get('entry_id'))
            if self.lost is not None:
                return

    def __enter__(self):
        try:
            self.renew_now()
            self.check()
        except BaseException:
            # The step does not start: its claim is gone, or the journal does not answer.
            if self._close is not None:
                self._close()
            raise
        self._thread = threading.Thread(target=self._run, name='claim-keeper', daemon=True)
        self._thread.start()
        with _lock:
            self._thread_id = threading.get_ident()
            self._previous = _running.get(self._thread_id)
            _running[self._thread_id] = self
        return self

    def __exit__(self, *exc):
        with _lock:
            if self._previous is None:
                _running.pop(self._thread_id, None)
            else:
                _running[self._thread_id] = self._previous
        self._stop.set()
        self._thread.join()
        if self._close is not None:
            self._close()
        return False
