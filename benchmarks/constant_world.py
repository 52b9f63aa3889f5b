"""Envs of trivial dynamics for the benchmarks: the small step the count benchmarks serve, a gymnasium env
whose observation is 4 floats and whose action is a Discrete, doing no work of its own
(``bench_counts.py``, ``bench_metrics.py``); and a constant uint8 image of any size (``bench_host.py``).

Their server roles run in the tree they measure, with this folder on ``PYTHONPATH``; the env needs only
gymnasium and numpy, so every tree serves the same one.
"""
from __future__ import annotations

import gymnasium as gym
import numpy as np


class Constant(gym.Env):
    """The same observation every step, reward 1.0, never ending."""

    observation_space = gym.spaces.Box(-1, 1, (4,), np.float32)
    action_space = gym.spaces.Discrete(2)
    obs = np.zeros(4, np.float32)

    def reset(self, *, seed=None, options=None):
        return self.obs, {}

    def step(self, action):
        return self.obs, 1.0, False, False, {}


class ConstantImage(gym.Env):
    """A uint8 image of ``shape`` (the same every step: an env of trivial dynamics whose cost is its
    observation's size), a Discrete(2) action, reward 1.0, never ending (``bench_host.py``)."""

    action_space = gym.spaces.Discrete(2)

    def __init__(self, shape: tuple[int, ...] = (84, 84, 4)):
        shape = tuple(int(d) for d in shape)
        self.observation_space = gym.spaces.Box(0, 255, shape, np.uint8)
        self.obs = (np.arange(int(np.prod(shape))) % 251).astype(np.uint8).reshape(shape)

    def reset(self, *, seed=None, options=None):
        return self.obs, {}

    def step(self, action):
        return self.obs, 1.0, False, False, {}
