"""Where env calls run: a bounded pool of worker threads, and lanes that keep each env's calls in order.

Each env (a gym agent's env, a PettingZoo world's env) has a :class:`Lane`: its
calls (construction, ``reset``, ``step``, ``render``, ``close``) run one at a
time, in the order they were made, on one of the :class:`WorkerPool`'s
threads, so an env is never called from two threads at once while different
envs' calls overlap (envs that release the GIL, simulators in C or in another
process, step in parallel), and a slow env delays nobody else. The event loop
awaits a call's result like any I/O.

Handing a call to a thread costs a few tens of microseconds on an idle
machine (far more on a loaded one), more than a trivial env's whole step. So
:meth:`Lane.quick` (used for ``step`` and ``reset``) runs the call inline, on
the event loop, once a streak of the env's quick calls were each shorter than
the pool's ``inline_below`` (default 100 us), until one is slower. The streak
is 8 calls at first; after a slow call that ran inline, it is as many calls as
that one blocked the loop for, in units of ``inline_below`` (a 10 ms stall:
100, a 1 s stall: 4096, the most), so that what running inline saves pays
for what the surprise cost the other worlds. An env that steps alone (no other
env of the pool made a quick call in the last 0.1 s) has nobody to delay, so
for it "short" means below :data:`ALONE_BELOW` (10 ms) instead: a one-world
server saves the hand-off on every step of a 100 us - 10 ms env; once a second
env steps too, the first one's next slow call sends it back to the workers.
What it saves is more than the thread switch: a step that waits on another
process (a Godot game over TCP, 2.2 ms a step) cost the server 0.27 ms more CPU
on a worker than inline (the GIL and the loop's wake-up passed back and forth)
and its client 0.12 ms more (``benchmarks/profile_godot_rl.py --cpu --heavy``);
what it costs is a health check or another client's request waiting behind
the one env's step, at most 10 ms, and only while that env steps alone.
The first calls of an env, and building, ``render`` and ``close``, always go to
a worker; ``inline_below=0`` sends every call to a worker.

Worker threads are daemon threads and ``close()`` does not wait for them: a
server can stop while an env is stuck in ``step`` (the stuck call's result is
dropped). A pool of size 0 runs every call inline, on the caller's thread.

>>> import asyncio
>>> pool = WorkerPool(2)
>>> lane = pool.lane()
>>> async def demo():
...     return await asyncio.gather(*(lane.call(pow, 2, k) for k in range(4)))
>>> asyncio.run(demo())
[1, 2, 4, 8]
>>> pool.close()
"""
from __future__ import annotations

import asyncio
import collections
import functools
import logging
import queue
import threading
import time
from typing import Any, Callable

__all__ = ["WorkerPool", "Lane", "NOT_NOW", "default_workers", "rendered", "INLINE_BELOW", "ALONE_BELOW", "DEFAULT_WORKERS"]

#: Steps shorter than this (seconds), every one of a streak, run on the event loop.
INLINE_BELOW = 100e-6
#: The same for an env that steps alone on its pool (never below the pool's ``inline_below``).
ALONE_BELOW = 10e-3
_ALONE_AFTER = 0.1      # seconds without another env's quick call before an env steps alone
_FIRST_STREAK, _LONGEST_STREAK = 8, 4096
#: What :meth:`Lane.inline` returns for a call it did not make.
NOT_NOW = object()

log = logging.getLogger("dmrpc_gym.server")


#: The default number of worker threads.
DEFAULT_WORKERS = 64


def default_workers() -> int:
    """The default pool size, :data:`DEFAULT_WORKERS` whatever the number of cores.

    The threads mostly wait (in the GIL-free part of an env, or on a worker
    process), so the bound is about how many worlds step at once, not about
    cores: with fewer threads than the worlds a vector env steps together, the
    last worlds wait for a second wave (8 worlds on ``cpu_count + 4`` = 6
    threads took two step times). Threads start only when needed, so a server
    with a few worlds has a few; the bound keeps thousands of worlds from
    holding a thread each.
    """
    return DEFAULT_WORKERS


def _deliver(future: asyncio.Future, ok: bool, value: Any, orphan: Callable[[Any], None] | None) -> None:
    if not future.done():
        if ok:
            future.set_result(value)
        else:
            future.set_exception(value)
    elif ok and orphan is not None:      # built for a task that was cancelled meanwhile
        orphan(value)


class Lane:
    """One env's calls, run one at a time and in order on a :class:`WorkerPool` (inline without one)."""

    __slots__ = ("_pool", "_items", "_lock", "_busy", "_fast", "_streak", "inline_calls", "spent", "started")

    def __init__(self, pool: "WorkerPool | None"):
        self._pool = pool
        self._items: collections.deque = collections.deque()
        self._lock = threading.Lock()
        self._busy = False
        self._fast = 0                  # quick calls in a row shorter than the pool's inline_below
        self._streak = _FIRST_STREAK    # how many it takes to run inline
        self.inline_calls = 0           # quick calls run on the caller's thread
        #: Seconds spent in the env's calls that someone awaited (quick, call, build), in all:
        #: a server reads it before and after a step to tell the env's time from its own.
        self.spent = 0.0
        #: When the latest inline call began (``time.perf_counter``).
        self.started = 0.0

    async def quick(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """As :meth:`call`, but inline while this lane's recent quick calls were all short (see the module doc)."""
        if kwargs:
            return await self.quick(functools.partial(fn, **kwargs), *args)
        done = self.inline(fn, *args)
        if done is not NOT_NOW:
            return done
        self._pool._seen(self, time.perf_counter())  # type: ignore[union-attr]
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        self._put((fn, args, loop, future, True, None))
        return await future

    def inline(self, fn: Callable[..., Any], *args: Any) -> Any:
        """``fn(*args)`` on the caller's thread, now, where :meth:`quick` would run it inline (always without
        a pool), counted and timed as its calls are; else :data:`NOT_NOW`, and ``fn`` is not called.

        One call on the steady path of a step (:mod:`dmrpc_gym.server.serving.steady`): the common case (the
        same env as the last quick call, stepping alone, short) takes no other call than the clock's.
        """
        pool = self._pool
        if pool is None:
            start = self.started = time.perf_counter()
            try:
                return fn(*args)
            finally:
                self.spent += time.perf_counter() - start
        if self._fast < self._streak or self._busy:
            return NOT_NOW
        start = self.started = time.perf_counter()
        if self is pool._last_lane and pool._alone:
            pool._last_at = start                # what _seen would do: nothing else changes
        else:
            pool._seen(self, start)
        self.inline_calls += 1
        try:
            return fn(*args)
        finally:
            took = time.perf_counter() - start
            self.spent += took
            if took < pool.short:
                self._fast += 1
            else:
                self._slow(took)

    def _slow(self, seconds: float) -> None:
        """A quick call took ``seconds``, not short: the streak starts again (longer after a stall inline)."""
        if self._fast >= self._streak:      # it ran inline: earn back what it cost the loop
            below = self._pool.short  # type: ignore[union-attr]
            self._streak = max(_FIRST_STREAK, min(int(seconds / below), _LONGEST_STREAK))
        self._fast = 0

    async def call(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """``fn(*args, **kwargs)`` on a worker thread, after this lane's earlier calls; its result or exception.

        Cancelling the awaiting task drops the result; a call not started yet is skipped.
        """
        if kwargs:
            return await self.call(functools.partial(fn, **kwargs), *args)
        if self._pool is None:
            start = time.perf_counter()
            try:
                return fn(*args)
            finally:
                self.spent += time.perf_counter() - start
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        self._put((fn, args, loop, future, False, None))
        return await future

    async def build(self, dispose: Callable[[Any], Any], fn: Callable[..., Any], *args: Any) -> Any:
        """As :meth:`call` for something to own (an env, a world). Should the awaiting task be
        cancelled (its stream ended) before the call starts, it never runs: a client that opens
        and resets streams queues no work. Once started, what ``fn`` returns is handed to
        ``dispose`` on this lane."""
        if self._pool is None:
            return fn(*args)
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        self._put((fn, args, loop, future, False, lambda built: self.post(dispose, built)))
        try:
            return await future
        except asyncio.CancelledError:
            future.cancel()              # not started: skipped; started: its result is disposed of
            raise

    def post(self, fn: Callable[..., Any], *args: Any) -> None:
        """Run ``fn(*args)`` after this lane's earlier calls without waiting (errors are logged)."""
        if self._pool is None:
            _run_logged(fn, args)
        else:
            self._put((fn, args, None, None, False, None))

    def _put(self, item: tuple) -> None:
        self._pool._pending_change(1)  # type: ignore[union-attr]
        with self._lock:
            self._items.append(item)
            if self._busy:
                return
            self._busy = True
        self._pool._ready(self)  # type: ignore[union-attr]

    def _run_one(self) -> None:
        """Run the next call (on a worker thread); hand the lane back to the pool if more are waiting."""
        with self._lock:
            item = self._items.popleft()
        try:
            self._run_item(*item)
        finally:
            self._pool._pending_change(-1)  # type: ignore[union-attr]
        self._next()

    def _run_item(self, fn: Callable[..., Any], args: tuple, loop: Any, future: Any, timed: bool,
                  orphan: Callable[[Any], None] | None) -> None:
        if future is None:
            _run_logged(fn, args)
        elif not future.cancelled():
            start = time.perf_counter()
            try:
                ok, value = True, fn(*args)
            except BaseException as exc:  # noqa: BLE001 - handed to the awaiting task
                ok, value = False, exc
            took = time.perf_counter() - start
            self.spent += took
            if timed:
                if took < self._pool.short:  # type: ignore[union-attr]
                    self._fast += 1
                else:
                    self._slow(took)
            try:
                loop.call_soon_threadsafe(_deliver, future, ok, value, orphan)
            except RuntimeError:
                pass  # the loop is closed: the server stopped while the env was busy

    def _next(self) -> None:
        """Hand the lane back to the pool when more calls are waiting, else mark it idle."""
        with self._lock:
            if not self._items:
                self._busy = False
                return
        self._pool._ready(self)  # type: ignore[union-attr]


async def rendered(lane: Lane, render: Callable[[], Any] | None) -> Callable[[], Any] | None:
    """Render now on ``lane``; a callable that gives the frame (or raises render's error) to encode with."""
    if render is None:
        return None
    try:
        frame = await lane.call(render)
    except Exception as exc:  # noqa: BLE001 - raised again where the frame is used
        error = exc

        def fail() -> Any:
            raise error
        return fail
    return lambda: frame


def _run_logged(fn: Callable[..., Any], args: tuple) -> None:
    try:
        fn(*args)
    except Exception:  # noqa: BLE001 - nobody waits for a posted call
        log.exception("%s failed", getattr(fn, "__qualname__", fn))


class WorkerPool:
    """Up to ``size`` daemon threads that run the calls of many :class:`Lane` s (``size=0``: inline).

    Threads start on demand and stay for the pool's life. ``inline_below``:
    see the module doc.
    """

    def __init__(self, size: int, name: str = "dmrpc-gym-env", inline_below: float = INLINE_BELOW):
        if not isinstance(size, int) or isinstance(size, bool) or size < 0:
            raise ValueError(f"workers must be a whole number >= 0 (0 runs envs on the event loop), got {size!r}")
        if not isinstance(inline_below, (int, float)) or not 0 <= inline_below < 1:
            raise ValueError(f"inline_below must be a number of seconds in [0, 1), got {inline_below!r}")
        self.size, self.name, self.inline_below = size, name, float(inline_below)
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self._idle = threading.Semaphore(0)
        self._threads: list[threading.Thread] = []
        self._lock = threading.Lock()
        self._closed = False
        self._pending = 0                  # calls posted to lanes and not yet run
        self._last_lane: Lane | None = None   # the lane of the latest quick call, and when
        self._last_at = float("-inf")
        self._shared_until = 0.0           # no env steps alone before this (perf_counter)
        self._alone = False                # the last quick call's env stepped alone (short can change
                                           # only with another env's call)
        #: Seconds below which a quick call counts as short now (more for an env stepping alone).
        self.short = self.inline_below

    def lane(self) -> Lane:
        """A new lane (inline when the pool has no threads)."""
        return Lane(self if self.size else None)

    def _seen(self, lane: Lane, now: float) -> None:
        """Note a quick call of ``lane`` (on the event loop): a second env stepping ends "alone",
        and :attr:`short` says what counts as a short call from now."""
        if lane is not self._last_lane:
            if now - self._last_at < _ALONE_AFTER:
                self._shared_until = now + _ALONE_AFTER
            self._last_lane = lane
        self._last_at = now
        below = self.inline_below
        self._alone = now >= self._shared_until
        self.short = max(below, ALONE_BELOW) if below and self._alone else below

    def _ready(self, lane: Lane) -> None:
        if not self._idle.acquire(blocking=False):
            with self._lock:
                if not self._closed and len(self._threads) < self.size:
                    thread = threading.Thread(target=self._work, daemon=True,
                                              name=f"{self.name}-{len(self._threads)}")
                    self._threads.append(thread)
                    thread.start()
        self._queue.put(lane)

    def _work(self) -> None:
        get, idle = self._queue.get, self._idle
        while True:
            lane = get()
            if lane is None:
                return
            try:
                lane._run_one()
            except BaseException:  # noqa: BLE001 - a worker must survive anything
                log.exception("an env worker call failed")
            idle.release()

    def _pending_change(self, delta: int) -> None:
        with self._lock:
            self._pending += delta

    @property
    def threads(self) -> int:
        """Threads started so far."""
        return len(self._threads)

    def close(self, timeout: float = 0.0) -> None:
        """End the threads once the calls already posted (env closes, say) have run.

        Waits at most ``timeout`` seconds in all: a thread stuck in an env call
        is left to end with the process (its threads are daemons).
        """
        deadline = time.monotonic() + timeout
        while self._pending and time.monotonic() < deadline:     # the posted calls run first
            time.sleep(0.01)
        with self._lock:
            self._closed = True
            threads = list(self._threads)
        for _ in threads:
            self._queue.put(None)
        for thread in threads:
            left = deadline - time.monotonic()
            if left <= 0:
                break
            if thread is not threading.current_thread():
                thread.join(left)
