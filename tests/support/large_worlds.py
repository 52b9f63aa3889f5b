"""Envs with large observations and actions, for the shared-memory tests (importable by a ``serve`` subprocess:
``large_worlds:Camera``)."""
from __future__ import annotations

import os
import time

import gymnasium as gym
import numpy as np


class Camera(gym.Env):
    """Observations of every memory-kind dtype, large and small, values that change each step and depend on
    the action (a large float32 Box, which the env keeps: it must not change under it)."""

    def __init__(self, side: int = 256, act: int = 1 << 14, sleep: float = 0.0):
        self.observation_space = gym.spaces.Dict({
            "image": gym.spaces.Box(0, 255, (side, side, 3), np.uint8),
            "depth": gym.spaces.Box(-np.inf, np.inf, (side, side), np.float32),
            "mask": gym.spaces.MultiBinary([side, side]),
            "small": gym.spaces.Box(-1, 1, (3,), np.float64),
            "signed": gym.spaces.Box(-128, 127, (side * 128,), np.int8),
        })
        self.action_space = gym.spaces.Box(-1, 1, (act,), np.float32)
        self.sleep, self.t, self.kept = sleep, 0, []
        self.rng = np.random.default_rng(0)

    def _obs(self, action=None):
        rng, space = self.rng, self.observation_space
        side = space["image"].shape[0]
        obs = {"image": rng.integers(0, 256, (side, side, 3), dtype=np.uint8),
               "depth": rng.standard_normal((side, side)).astype(np.float32),
               "mask": rng.integers(0, 2, (side, side), dtype=np.int8),
               "small": rng.uniform(-1, 1, 3),
               "signed": rng.integers(-128, 128, side * 128, dtype=np.int8)}
        if action is not None:
            obs["depth"].reshape(-1)[:action.size] += action
        obs["depth"].reshape(-1)[0] = np.nan if self.t % 3 == 2 else obs["depth"].reshape(-1)[0]
        return obs

    def reset(self, seed=None, options=None):
        if seed is not None:
            self.rng = np.random.default_rng(seed)
        self.t = 0
        return self._obs(), {}

    def step(self, action):
        if self.sleep:
            time.sleep(self.sleep)
        self.t += 1
        self.kept.append((action, np.array(action, copy=True)))      # an env may keep its action
        for kept, copy in self.kept[-4:]:
            if not np.array_equal(kept, copy):
                raise AssertionError("an action the env kept changed under it")
        return self._obs(action), float(action[0]), self.t % 7 == 0, False, {"t": self.t}


class Frames(gym.Env):
    """A uint8 observation of ``nbytes`` bytes (trivial dynamics: the step number), a Discrete action;
    ``sleep`` seconds per step (a step to kill a peer in)."""

    def __init__(self, nbytes: int = 1 << 20, sleep: float = 0.0):
        self.observation_space = gym.spaces.Box(0, 255, (nbytes,), np.uint8)
        self.action_space = gym.spaces.Discrete(2)
        self.sleep = float(os.environ.get("LARGE_WORLDS_SLEEP", sleep))
        self.t = 0
        self.obs = np.zeros(nbytes, np.uint8)

    def reset(self, seed=None, options=None):
        self.t = 0
        self.obs[:] = 0
        return self.obs, {}

    def step(self, action):
        if self.sleep:
            time.sleep(self.sleep)
        self.t += 1
        self.obs[:] = self.t % 256
        return self.obs, 0.0, False, False, {}


class DiscreteCamera(Camera):
    """:class:`Camera` with a Discrete action (its steps can take the steady-state path): the action shifts
    the depth, and every 5th step is a NaN-free one of another episode."""

    def __init__(self, side: int = 128):
        super().__init__(side, 1)
        self.action_space = gym.spaces.Discrete(3)

    def step(self, action):
        self.t += 1
        obs = self._obs(np.full(1, float(action), np.float32))
        return obs, float(action), self.t % 5 == 0, False, {"t": self.t}


try:
    from pettingzoo.utils.env import ParallelEnv as _Parallel
except ImportError:                                   # (the tests that use it skip)
    _Parallel = object


class Cameras(_Parallel):
    """A PettingZoo ParallelEnv of two agents, each with a large uint8 image that depends on both actions
    (a factory: ``Cameras()``)."""

    metadata = {"name": "cameras_v0"}

    def __init__(self, side: int = 128):
        self.possible_agents = ["a", "b"]
        self.agents = []
        self.side = side
        self._space = gym.spaces.Box(0, 255, (side, side, 3), np.uint8)
        self.t = 0

    def observation_space(self, agent):
        return self._space

    def action_space(self, agent):
        return gym.spaces.Discrete(4)

    def _obs(self, actions):
        return {a: np.full((self.side, self.side, 3), (self.t * 7 + i + 10 * actions.get(a, 0)) % 256, np.uint8)
                for i, a in enumerate(self.possible_agents)}

    def reset(self, seed=None, options=None):
        self.agents, self.t = list(self.possible_agents), 0
        return self._obs({}), {a: {} for a in self.agents}

    def step(self, actions):
        self.t += 1
        done = self.t >= 6
        obs = self._obs(actions)
        rewards = {a: float(actions[a]) for a in self.agents}
        ends = {a: done for a in self.agents}
        infos = {a: {} for a in self.agents}
        agents = list(self.agents)
        if done:
            self.agents = []
        return obs, rewards, ends, {a: False for a in agents}, infos

    def close(self):
        pass
