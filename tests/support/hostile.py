"""What the hostile-input tests measure (issue 23): resident memory, and an honest client stepping beside an attack;
and :class:`Slow`, a world whose steps and builds take the time a test asks."""
from __future__ import annotations

import os
import threading
import time

import gymnasium as gym
import numpy as np

from dmrpc_gym import DmRpcEnv

MB = 1 << 20
#: What an attack may add to the resident memory: far under what it cost before (>= 1 GB).
BOUND = 96 * MB


def resident() -> int:
    """This process's resident memory in bytes (the servers under test run in it)."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


class Honest(threading.Thread):
    """A client stepping Catch beside the attack: its 100 steps must all complete.

    ``elapsed``: seconds its 100 steps took (from its first reset).
    """

    def __init__(self, address: str, steps: int = 100, **options):
        super().__init__(daemon=True)
        self.address, self.wanted, self.options = address, steps, {"step_timeout": 30, **options}
        self.steps, self.error, self.elapsed = 0, None, None

    def run(self):
        try:
            env = DmRpcEnv(self.address, **self.options)
            try:
                start = time.monotonic()
                env.reset(seed=0)
                for _ in range(self.wanted):
                    _, _, terminated, truncated, _ = env.step(env.action_space.sample())
                    self.steps += 1
                    if terminated or truncated:
                        env.reset()
                self.elapsed = time.monotonic() - start
            finally:
                env.close()
        except Exception as exc:  # noqa: BLE001 - reported by the test
            self.error = exc

    def finished(self, timeout: float = 60) -> bool:
        """Wait for it; True when all its steps completed without an error."""
        self.join(timeout)
        return self.error is None and self.steps == self.wanted


def stepped_beside(address: str, **options) -> Honest:
    """An honest client's steps, made now; ``AssertionError`` unless every one completed."""
    honest = Honest(address, **options)
    honest.start()
    assert honest.finished(), honest.error
    return honest


def measured(attack: str, figure: str, honest: "Honest | None" = None) -> None:
    """Print one line of what an attack cost (``pytest -s tests/test_hostile_*.py`` gives the
    figures of ``benchmarks/attacks.md``), with the honest client's time for its 100 steps."""
    beside = f"; honest client's 100 steps: {honest.elapsed:.2f} s" if honest is not None and honest.elapsed else ""
    print(f"\nattack | {attack} | {figure}{beside}")


def _high_water() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmHWM in /proc/self/status")


class Peak:
    """What a block adds at its peak to this process's resident memory: the high-water mark
    (``VmHWM``, reset on entry by writing 5 to ``/proc/self/clear_refs``) less the resident memory
    on entry. ``grown``: that, in bytes, once the block is over."""

    def __enter__(self) -> "Peak":
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        self.start, self.grown = resident(), 0
        return self

    def __exit__(self, *exc) -> None:
        self.grown = _high_water() - self.start


class LoopLag:
    """How late a server's event loop runs a callback that asks to run every ``every`` seconds:
    what one request may hold every other client up by. ``worst``: the longest delay seen, in
    seconds, between ``start()`` and ``stop()``."""

    def __init__(self, loop, every: float = 0.005):
        self.loop, self.every, self.worst = loop, every, 0.0
        self._running = False

    def _tick(self, due: float) -> None:
        now = self.loop.time()
        self.worst = max(self.worst, now - due)
        if self._running:
            self.loop.call_at(now + self.every, self._tick, now + self.every)

    def start(self) -> "LoopLag":
        self._running = True
        self.loop.call_soon_threadsafe(lambda: self._tick(self.loop.time()))
        return self

    def stop(self) -> float:
        self._running = False
        return self.worst


class Slow(gym.Env):
    """A world whose steps take ``delay`` seconds (on a worker thread) and whose observation is ``size`` floats."""

    metadata = {"render_modes": []}
    BUILT: list[float] = []

    def __init__(self, delay: float = 0.0, size: int = 1, build: float = 0.0):
        Slow.BUILT.append(build)
        time.sleep(build)
        self.delay = float(delay)
        self.observation_space = gym.spaces.Box(0.0, 1.0, (int(size),), np.float32)
        self.action_space = gym.spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return np.zeros(self.observation_space.shape, np.float32), {}

    def step(self, action):
        time.sleep(self.delay)
        return np.zeros(self.observation_space.shape, np.float32), 0.0, False, False, {}
