"""The echo world as a gymnasium env, for foreign gRPC clients of our server (the C++ and Go
interop tests): the same world as their own servers serve (tests/interop/cpp/common.h).

Observation ``obs``: ``obs_size`` uint8s, all equal to the last action ``act`` (Discrete(10)),
which is also the reward. With ``action_size`` > 0, action ``blob`` is that many uint8s and
observation ``blob_sum`` their sum. With ``episode`` > 0, every episode ends after that many steps.
With ``delay_ms`` > 0, each step takes that long.
Served by ``dmrpc-gym serve tests.support.echo_world:Echo`` or ``Server(Echo)``; the factory's keywords are
world settings.
"""
from __future__ import annotations

import time

import gymnasium as gym
import numpy as np
from gymnasium import spaces


class Echo(gym.Env):
    def __init__(self, obs_size: int = 4, action_size: int = 0, episode: int = 0, delay_ms: int = 0):
        self.obs_size, self.action_size, self.episode = int(obs_size), int(action_size), int(episode)
        self.delay = int(delay_ms) / 1000
        observations = {"obs": spaces.Box(0, 255, (self.obs_size,), np.uint8)}
        actions = {"act": spaces.Discrete(10)}
        if self.action_size:
            observations["blob_sum"] = spaces.Box(0, np.iinfo(np.int64).max, (), np.int64)
            actions["blob"] = spaces.Box(0, 255, (self.action_size,), np.uint8)
        self.observation_space, self.action_space = spaces.Dict(observations), spaces.Dict(actions)
        self.t = 0

    def _observe(self, value: int, blob: np.ndarray | None = None) -> dict:
        out = {"obs": np.full(self.obs_size, value, np.uint8)}
        if self.action_size:
            out["blob_sum"] = np.int64(0 if blob is None else int(np.asarray(blob).sum(dtype=np.int64)))
        return out

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return self._observe(0), {}

    def step(self, action):
        time.sleep(self.delay)
        self.t += 1
        value = int(action["act"])
        ended = bool(self.episode) and self.t >= self.episode
        return self._observe(value, action.get("blob")), float(value), ended, False, {}
