"""The small step the count benchmarks serve: a gymnasium env whose observation is 4 floats and whose
action is a Discrete, doing no work of its own (``bench_counts.py``, ``bench_metrics.py``).

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
