"""A gymnasium env whose episodes last exactly ``LENGTH`` steps, and a client that plays whole episodes of
it: what a server counts (steps, resets) is then known in advance (tests/server/test_metrics.py,
test_prometheus.py)."""
from __future__ import annotations

import gymnasium as gym
import numpy as np

import dmrpc_gym  # noqa: F401 - registers dmrpc/Remote-v0

LENGTH = 3        # steps of every episode of Fixed


class Fixed(gym.Env):
    """Episodes of exactly ``LENGTH`` steps."""

    observation_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return np.zeros(2, np.float32), {}

    def step(self, action):
        self.t += 1
        return np.zeros(2, np.float32), 1.0, self.t >= LENGTH, False, {}


def play(address: str, episodes: int, **kwargs) -> None:
    """Play ``episodes`` whole episodes of the world at ``address`` with ``dmrpc/Remote-v0``: each is
    ``LENGTH + 1`` StepRequests (the one that starts the sequence, then ``LENGTH``) and one env reset."""
    env = gym.make("dmrpc/Remote-v0", address=address, **kwargs)
    try:
        for episode in range(episodes):
            env.reset(seed=episode)
            done = False
            while not done:
                _, _, terminated, truncated, _ = env.step(0)
                done = terminated or truncated
    finally:
        env.close()
