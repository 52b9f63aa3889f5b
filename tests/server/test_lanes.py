"""Lane.inline's rules on a clock of our own: when a call runs on the caller's thread, and what counts as short.

The steady-state step (server/serving/steady.py) runs an env's step through ``Lane.inline`` alone, with a
shortcut for the common case (the same env as the last quick call, stepping alone); these pin that the
shortcut says what the full rule (``WorkerPool._seen``) says.
"""
from __future__ import annotations

import time
import types

import pytest

from dmrpc_gym.server.running import workers
from dmrpc_gym.server.running.workers import ALONE_BELOW, INLINE_BELOW, NOT_NOW, WorkerPool


@pytest.fixture
def clock(monkeypatch):
    """``workers``' clock, set by hand: ``now[0]`` is the time; a call can move it (its duration)."""
    now = [100.0]
    monkeypatch.setattr(workers, "time", types.SimpleNamespace(perf_counter=lambda: now[0], monotonic=time.monotonic))
    return now


def _ready(lane):
    lane._fast = lane._streak           # a streak of short calls seen: the next runs inline
    return lane


def _call(lane, clock, at: float, took: float):
    clock[0] = at

    def step():
        clock[0] += took
        return "stepped"
    return lane.inline(step)


def test_a_lane_without_its_streak_runs_nothing_inline():
    pool = WorkerPool(1)
    lane = pool.lane()
    called = []
    assert lane.inline(called.append, 1) is NOT_NOW and called == [] and lane.inline_calls == 0
    assert WorkerPool(0).lane().inline(called.append, 2) is None and called == [2]   # no pool: always inline
    pool.close()


def test_short_follows_the_envs_stepping_and_the_shortcut_agrees(clock):
    pool = WorkerPool(1)
    a, b = _ready(pool.lane()), _ready(pool.lane())
    assert _call(a, clock, 100.0, 0.001) == "stepped"     # alone: 1 ms is short (ALONE_BELOW, 10 ms)
    assert pool.short == ALONE_BELOW and a._fast == a._streak + 1 and a.started == 100.0
    _call(b, clock, 100.01, 0.00001)                       # a second env within 0.1 s: shared from now
    assert pool.short == INLINE_BELOW
    streak = a._fast
    _call(a, clock, 100.02, 0.00001)                       # back to a, still shared
    assert pool.short == INLINE_BELOW and a._fast == streak + 1
    _call(a, clock, 100.05, 0.00001)                       # the same env, not alone yet: the full rule
    assert pool.short == INLINE_BELOW
    _call(a, clock, 100.2, 0.00001)                        # 0.1 s since b: alone again
    assert pool.short == ALONE_BELOW
    _call(a, clock, 100.3, 0.001)                          # the shortcut: 1 ms is still short
    assert pool.short == ALONE_BELOW and a._fast > a._streak
    assert _call(a, clock, 100.4, 2 * ALONE_BELOW) == "stepped"   # slow even alone: the next call goes to a thread
    assert a._fast == 0 and a.inline(print) is NOT_NOW
    assert a.spent == pytest.approx(0.001 + 3 * 0.00001 + 0.001 + 2 * ALONE_BELOW)
    pool.close()


def test_a_slow_call_while_shared_is_slow_that_would_be_short_alone(clock):
    pool = WorkerPool(1)
    a, b = _ready(pool.lane()), _ready(pool.lane())
    _call(a, clock, 100.0, 0.00001)
    _call(b, clock, 100.01, 0.00001)
    _call(a, clock, 100.02, 0.001)                         # 1 ms with another env stepping: slow
    assert a._fast == 0
    assert a._streak == int(0.001 / INLINE_BELOW) > workers._FIRST_STREAK   # earned back: 1 ms / 0.1 ms calls
    pool.close()
