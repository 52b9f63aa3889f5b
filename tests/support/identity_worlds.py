"""Envs for the identity tests: each shows one way a bridge could change an env without saying so."""
from __future__ import annotations

import dm_env
import gymnasium as gym
import numpy as np
from dm_env import specs
from gymnasium import spaces


class Counted(gym.Env):
    """Counts its ``render()`` calls (``renders``, shared by every instance); its observation says
    which ``render_mode`` it was built with (as pistonball's does), and ``render()`` draws the step."""

    metadata = {"render_modes": ["rgb_array"]}
    renders = 0

    def __init__(self, render_mode: str | None = None):
        self.render_mode = render_mode
        self.observation_space = spaces.Box(0, 255, (2,), np.uint8)
        self.action_space = spaces.Discrete(2)
        self.t = 0

    def _obs(self) -> np.ndarray:
        return np.array([self.t, 1 if self.render_mode == "rgb_array" else 0], np.uint8)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = int(self.np_random.integers(0, 100))
        return self._obs(), {}

    def step(self, action):
        self.t += 1
        return self._obs(), 1.0, False, self.t % 7 == 0, {}

    def render(self) -> np.ndarray:
        type(self).renders += 1
        return np.full((3, 4, 3), self.t % 256, np.uint8)


class Blind(Counted):
    """Takes ``render_mode="rgb_array"`` but cannot render (as CartPole without pygame)."""

    def render(self) -> np.ndarray:
        type(self).renders += 1
        raise gym.error.DependencyNotInstalled("pygame is not installed (a stand-in for the real reason)")


class Composite(gym.Env):
    """Spaces a TensorSpec cannot state: a Tuple, 16-bit dtypes, a Discrete start, nested Dicts, Text."""

    def __init__(self):
        self.observation_space = spaces.Tuple((
            spaces.Discrete(5, start=-2),
            spaces.Box(-1.0, 1.0, (2,), np.float16),
            spaces.Dict({"hp": spaces.Box(0, 60000, (), np.uint16),
                         "inner": spaces.Dict({"temp": spaces.Box(-50, 50, (3,), np.int16)})}),
            spaces.Text(8, charset="abc"),
        ))
        self.action_space = spaces.Tuple((spaces.Discrete(3, start=1), spaces.Box(0, 9, (2,), np.uint16)))

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return self.observation_space.sample(), {"where": "reset", "seed": seed}

    def step(self, action):
        obs = self.observation_space.sample()
        return obs, float(action[0]), False, False, {"action": np.asarray(action[1]), "kind": (1, "a")}


class Shapes(dm_env.Environment):
    """A dm_env with specs a TensorSpec blurs: a bare action named ``act`` with per-element bounds that
    are equal, a uint8 BoundedArray over [0, 255], an int32 BoundedArray, uint16 and float16 arrays;
    its first reset draws from its random state (a probe reset would be seen)."""

    def __init__(self, seed: int = 7):
        self._random = np.random.RandomState(seed)
        self._t = 0

    def _observation(self, start: float) -> dict:
        return {"pixels": np.full((2, 2), int(start * 255), np.uint8), "level": np.int32(self._t % 4),
                "ids": np.array([self._t, 2], np.uint16), "half": np.array([start], np.float16)}

    def reset(self) -> dm_env.TimeStep:
        self._t = 0
        return dm_env.restart(self._observation(self._random.uniform()))

    def step(self, action) -> dm_env.TimeStep:
        self._t += 1
        obs = self._observation(float(np.asarray(action).reshape(-1)[0]) * 0.5 + 0.5)
        return dm_env.termination(1.0, obs) if self._t >= 3 else dm_env.transition(0.5, obs)

    def observation_spec(self) -> dict:
        return {"pixels": specs.BoundedArray((2, 2), np.uint8, 0, 255, name="pixels"),
                "level": specs.BoundedArray((), np.int32, 0, 3, name="level"),
                "ids": specs.Array((2,), np.uint16, name="ids"),
                "half": specs.Array((1,), np.float16, name="half")}

    def action_spec(self) -> specs.BoundedArray:
        return specs.BoundedArray((1,), np.float64, [-1.0], [1.0], name="act")


class Tally(gym.Env):
    """Rewards of an env's own types (an int, then a float32) and a last step that is both terminated
    and truncated: dm_env_rpc's DOUBLE reward and single end state say neither."""

    def __init__(self):
        self.observation_space = spaces.Discrete(10)
        self.action_space = spaces.Discrete(2)
        self.t = 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return self.t, {}

    def step(self, action):
        self.t += 1
        reward = int(action) if self.t % 2 else np.float32(0.5 * int(action))
        return self.t, reward, self.t == 3, self.t == 3, {}
