"""The waiting helper's logic, on a simulated clock: deadline by elapsed time, backoff, outcomes."""

import ast
import os
import random

import pytest

from ansible_collections.ephemera.workspaces.plugins.module_utils.core import waiter
from ansible_collections.ephemera.workspaces.plugins.module_utils.core.waiter import (
    DONE, FAILED, TIMEOUT, Backoff, Poll, done, failed, pending, wait_for)


class Clock:
    """A monotonic clock that moves only when the code under test sleeps or a probe takes time."""

    def __init__(self):
        self.now = 100.0
        self.sleeps = []

    def __call__(self):
        return self.now

    def sleep(self, secs):
        assert secs >= 0
        self.sleeps.append(secs)
        self.now += secs


def run(probe, timeout, clock, **kwargs):
    return wait_for(probe, timeout, clock=clock, sleep=clock.sleep, **kwargs)


def test_done_at_first_look_does_not_sleep():
    clock = Clock()
    result = run(lambda remaining: done('ready'), 10, clock)
    assert (result.outcome, result.value, result.attempts, result.ok) == (DONE, 'ready', 1, True)
    assert clock.sleeps == []


def test_failed_stops_at_once_with_the_value():
    clock = Clock()
    looks = iter([pending(1), pending(2), failed('broken')])
    result = run(lambda remaining: next(looks), 60, clock)
    assert (result.outcome, result.value, result.attempts, result.ok) == (FAILED, 'broken', 3, False)
    assert len(clock.sleeps) == 2


def test_pauses_grow_by_the_factor_up_to_the_maximum():
    clock = Clock()
    result = run(lambda remaining: pending(), 100, clock, backoff=Backoff(start=0.1, maximum=0.5, factor=2))
    assert result.outcome == TIMEOUT
    assert clock.sleeps[:5] == pytest.approx([0.1, 0.2, 0.4, 0.5, 0.5])
    assert max(clock.sleeps) == pytest.approx(0.5)


def test_deadline_counts_time_spent_in_slow_looks():
    # Each look takes 3 s (a slow network); with a 10 s deadline only a few looks fit, whatever the pauses.
    clock = Clock()

    def slow(remaining):
        clock.now += 3
        return pending('still running')
    result = run(slow, 10, clock)
    assert result.outcome == TIMEOUT
    assert result.value == 'still running'
    assert result.attempts == 4
    assert result.elapsed >= 10


def test_last_look_happens_at_the_deadline_and_no_sleep_passes_it():
    clock = Clock()
    seen = []

    def probe(remaining):
        seen.append(remaining)
        return pending()
    result = run(probe, 1.0, clock, backoff=Backoff(start=0.3, maximum=0.3))
    assert result.outcome == TIMEOUT
    assert result.elapsed == pytest.approx(1.0)
    assert sum(clock.sleeps) == pytest.approx(1.0)
    assert seen[0] == pytest.approx(1.0)
    assert seen[-1] == pytest.approx(0.0)


def test_condition_met_at_the_last_look_is_success():
    clock = Clock()

    def probe(remaining):
        return done('late') if clock.now >= 101.0 else pending()
    result = run(probe, 1.0, clock, backoff=Backoff(start=0.4, maximum=0.4))
    assert (result.outcome, result.value) == (DONE, 'late')


def test_probe_is_told_the_time_left():
    clock = Clock()
    seen = []

    def probe(remaining):
        seen.append(remaining)
        return pending() if len(seen) < 3 else done()
    run(probe, 5, clock, backoff=Backoff(start=1, maximum=1))
    assert seen == pytest.approx([5, 4, 3])


def test_zero_timeout_looks_once():
    clock = Clock()
    result = run(lambda remaining: pending('x'), 0, clock)
    assert (result.outcome, result.attempts, result.value) == (TIMEOUT, 1, 'x')
    assert clock.sleeps == []


def test_probe_errors_propagate():
    clock = Clock()

    def probe(remaining):
        raise KeyError('no such thing')
    with pytest.raises(KeyError):
        run(probe, 5, clock)


def test_probe_must_report_a_poll():
    with pytest.raises(TypeError, match='returns done'):
        run(lambda remaining: True, 5, Clock())


def test_bad_arguments_are_refused():
    with pytest.raises(ValueError):
        run(lambda remaining: done(), -1, Clock())
    with pytest.raises(ValueError):
        Backoff(start=0)
    with pytest.raises(ValueError):
        Backoff(start=2, maximum=1)
    with pytest.raises(ValueError):
        Poll('maybe')


def test_jitter_spreads_pauses_within_bounds():
    backoff = Backoff(start=1, maximum=1, factor=1, jitter=0.25, rng=random.Random(7))
    delays = [backoff.next_delay() for dummy in range(200)]
    assert all(0.75 <= d <= 1.25 for d in delays)
    assert len(set(round(d, 6) for d in delays)) > 100


def test_real_clock_default_works():
    looks = iter([pending(), done('ok')])
    result = wait_for(lambda remaining: next(looks), 5, backoff=Backoff(start=0.001, maximum=0.001))
    assert result.ok and result.attempts == 2


def test_a_long_wait_says_what_it_waits_for_at_intervals_and_only_inside_reporting(monkeypatch):
    monkeypatch.setenv('EPHEMERA_PROGRESS_INTERVAL', '10')
    said = []
    looks = iter(range(100))

    def probe(remaining):
        return pending('look %d' % next(looks))
    clock = Clock()
    with waiter.reporting(said.append):
        result = run(probe, 35, clock, backoff=Backoff(start=1, maximum=1, jitter=0), what=lambda v: 'it [%s]' % v)
    assert result.outcome == TIMEOUT
    assert said == ['waiting for it [look %d] (%d s of 35 s)' % (n, n) for n in (10, 20, 30)]
    # Outside reporting, or without what, nothing is said.
    said.clear()
    run(probe, 15, Clock(), backoff=Backoff(start=1, maximum=1, jitter=0), what='it')
    with waiter.reporting(said.append):
        run(probe, 15, Clock(), backoff=Backoff(start=1, maximum=1, jitter=0))
    assert said == []


def test_a_wait_says_what_the_last_look_saw_and_the_default_interval_is_15_s(monkeypatch):
    monkeypatch.delenv('EPHEMERA_PROGRESS_INTERVAL', raising=False)
    said = []
    seen = iter(['connection refused', None] * 100)

    def what(_value):
        return 'SSH at 10.0.0.5:22', next(seen)
    with waiter.reporting(said.append):
        result = run(lambda remaining: pending(), 120, Clock(), backoff=Backoff(start=1, maximum=1, jitter=0),
                     what=what)
    assert result.outcome == TIMEOUT
    # Every 15 s (the first line once the wait has lasted 15 s); a last look that saw nothing is left out.
    assert said[:3] == ['waiting for SSH at 10.0.0.5:22 (15 s of 120 s; last: connection refused)',
                        'waiting for SSH at 10.0.0.5:22 (30 s of 120 s)',
                        'waiting for SSH at 10.0.0.5:22 (45 s of 120 s; last: connection refused)']
    assert len(said) == 7


def test_a_wait_that_ends_before_the_interval_says_nothing_and_a_bad_interval_falls_back(monkeypatch):
    monkeypatch.setenv('EPHEMERA_PROGRESS_INTERVAL', 'soon')
    said = []
    looks = iter([pending()] * 14 + [done('up')])
    with waiter.reporting(said.append):
        result = run(lambda remaining: next(looks), 120, Clock(), backoff=Backoff(start=1, maximum=1, jitter=0),
                     what='SSH')
    assert result.ok and said == []


def test_every_wait_of_the_collection_names_what_it_waits_for():
    # A wait without ``what`` is silent for its whole length: a run that waits looks stuck. Every call names it.
    plugins = os.path.join(os.path.dirname(os.path.abspath(waiter.__file__)), '..', '..')
    silent = []
    for folder, _dirs, files in os.walk(plugins):
        for name in files:
            if not name.endswith('.py'):
                continue
            path = os.path.join(folder, name)
            with open(path) as src:
                tree = ast.parse(src.read())
            for node in ast.walk(tree):
                if isinstance(node, ast.Call) and getattr(node.func, 'attr', getattr(node.func, 'id', None)) == \
                        'wait_for' and not any(k.arg == 'what' for k in node.keywords):
                    silent.append('%s:%d' % (os.path.relpath(path, plugins), node.lineno))
    assert not silent, silent
