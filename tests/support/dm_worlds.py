"""A small dm_env of our own with everything dm_env can state: nested observations, per-element
bounds, kept dtypes, a DiscreteArray and a BoundedArray action, a string observation, and both
ends of a sequence (termination: discount 0; truncation at ``limit`` steps: discount 0.5)."""
from __future__ import annotations

import dm_env
import numpy as np
from dm_env import specs

TRUNCATION_DISCOUNT = 0.5


class Probe(dm_env.Environment):
    """Moves a point inside per-element bounds; ``move == 2`` when ``count`` is odd terminates."""

    def __init__(self, limit: int = 6):
        self._rng = np.random.default_rng()
        self.limit = limit
        self._t = 0
        self._pos = np.zeros(3)

    def seed(self, seed: int) -> None:
        """Seed the next sequences (what the server calls with a world's or a reset's seed)."""
        self._rng = np.random.default_rng(seed)

    def _observation(self) -> dict:
        return {"pos": self._pos.copy(),
                "inner": {"count": np.int32(self._t), "flags": (self._pos > 0).astype(np.uint8)},
                "text": f"step {self._t}"}

    def reset(self) -> dm_env.TimeStep:
        self._t = 0
        self._pos = self._rng.uniform([-1.0, 0.0, -5.0], [1.0, 2.0, 5.0])
        return dm_env.restart(self._observation())

    def step(self, action: dict) -> dm_env.TimeStep:
        move, force = int(action["move"]), np.asarray(action["force"], np.float64)
        self._t += 1
        self._pos = np.clip(self._pos + np.r_[force, move - 1.0] * 0.25, [-1.0, 0.0, -5.0], [1.0, 2.0, 5.0])
        reward = float(self._pos.sum()) + move
        if move == 2 and self._t % 2:
            return dm_env.termination(reward, self._observation())
        if self._t >= self.limit:
            return dm_env.truncation(reward, self._observation(), discount=TRUNCATION_DISCOUNT)
        return dm_env.transition(reward, self._observation(), discount=0.99)

    def observation_spec(self) -> dict:
        return {"pos": specs.BoundedArray((3,), np.float64, [-1.0, 0.0, -5.0], [1.0, 2.0, 5.0], name="pos"),
                "inner": {"count": specs.Array((), np.int32, name="count"),
                          "flags": specs.BoundedArray((3,), np.uint8, 0, 1, name="flags")},
                "text": specs.StringArray((), name="text")}

    def action_spec(self) -> dict:
        return {"move": specs.DiscreteArray(3, dtype=np.int32, name="move"),
                "force": specs.BoundedArray((2,), np.float32, [-1.0, -2.0], [1.0, 2.0], name="force")}


def probe(limit: int = 6) -> Probe:
    """The factory the tests serve (``tests.support.dm_worlds:probe``)."""
    return Probe(limit)


def not_an_env() -> object:
    """A factory that returns neither a gymnasium, a PettingZoo nor a dm_env env."""
    return object()
