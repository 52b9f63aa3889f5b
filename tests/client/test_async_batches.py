"""Async batches on DmRpcVectorEnv (issue 22, item 1): EnvPool's send / recv over real servers.

The world below knows which sub-env it is (its observation is its number, in the order the
vector env created them), sleeps as long as that sub-env is told to, and fails on demand, so
the tests can tell which answers came first and that each row is the sub-env its id says.
"""
from __future__ import annotations

import itertools
import time

import gymnasium as gym
import numpy as np
import pytest

from dmrpc_gym import DmRpcError, DmRpcVectorEnv
from dmrpc_gym.server import Server


class Numbered(gym.Env):
    """Observation: [its number, steps taken]; a step sleeps ``DELAYS[number]`` seconds; the
    episode ends after ``length`` steps; action 9 makes the step raise."""

    observation_space = gym.spaces.Box(0, 10_000, (2,), np.int64)
    action_space = gym.spaces.Discrete(10)
    numbers = itertools.count()
    DELAYS: dict[int, float] = {}

    def __init__(self, length: int = 1000):
        self.number, self.length, self.t = next(Numbered.numbers), length, 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return np.array([self.number, 0]), {}

    def step(self, action):
        if int(action) == 9:
            raise RuntimeError(f"world {self.number} was told to fail")
        time.sleep(self.DELAYS.get(self.number, 0.0))
        self.t += 1
        return np.array([self.number, self.t]), 1.0, self.t >= self.length, False, {"t": self.t}


@pytest.fixture
def numbered():
    Numbered.numbers = itertools.count()
    Numbered.DELAYS = {}
    with Server(Numbered, inline_below=0) as server:      # every step on a worker thread: they overlap
        yield server


def test_recv_returns_the_first_answers_with_their_ids(numbered):
    envs = DmRpcVectorEnv(4, numbered.address, batch_size=2)
    try:
        obs, _ = envs.reset(seed=0)
        numbers = obs[:, 0].tolist()                       # sub-env i is world numbers[i]
        Numbered.DELAYS[numbers[0]] = 0.5                  # sub-env 0 is slow
        envs.send(np.zeros(4, np.int64))
        obs, rewards, terminated, truncated, infos, ids = envs.recv()
        assert len(ids) == 2 and 0 not in ids.tolist()     # the slow one does not hold up the batch
        assert obs[:, 0].tolist() == [numbers[i] for i in ids]   # row k is sub-env ids[k]
        assert rewards.tolist() == [1.0, 1.0] and infos["t"].tolist() == [1, 1]
        envs.send(np.zeros(2, np.int64), ids)              # the fast ones go again
        *_, second = envs.recv()
        *_, third = envs.recv()
        assert 0 not in second.tolist() and 0 in third.tolist()     # the slow one comes last
        assert sorted(second.tolist() + third.tolist()) == [0, 1, 2, 3]
        envs.send(np.zeros(1, np.int64), [3])
        *_, alone = envs.recv()
        assert alone.tolist() == [3]                       # fewer in flight than batch_size: all of them
        with pytest.raises(RuntimeError, match="no step in flight"):
            envs.recv()
    finally:
        envs.close()


def test_autoreset_inside_async_batches(numbered):
    envs = DmRpcVectorEnv(3, numbered.address, batch_size=3, world_settings={"length": 2})
    try:
        envs.reset(seed=0)
        for step in (1, 2):
            envs.send(np.zeros(3, np.int64))
            obs, rewards, terminated, truncated, infos, ids = envs.recv()
            assert obs[:, 1].tolist() == [step] * 3
        assert terminated.all()
        envs.send(np.zeros(3, np.int64), [2, 0, 1])
        obs, rewards, terminated, truncated, infos, ids = envs.recv()
        assert sorted(ids.tolist()) == [0, 1, 2]
        assert obs[:, 1].tolist() == [0, 0, 0]             # the next episodes' first observations
        assert rewards.tolist() == [0.0] * 3 and not terminated.any() and not truncated.any()
    finally:
        envs.close()


def test_misuse_is_refused_by_name(numbered):
    with pytest.raises(ValueError, match="batch_size must be within 1..num_envs"):
        DmRpcVectorEnv(2, numbered.address, batch_size=3)
    envs = DmRpcVectorEnv(2, numbered.address, batch_size=1)
    try:
        with pytest.raises(RuntimeError, match="send\\(\\) before reset\\(\\)"):
            envs.send(np.zeros(2, np.int64))
        envs.reset(seed=0)
        envs.send(np.zeros(1, np.int64), [1])
        with pytest.raises(RuntimeError, match=r"sub-envs \[1\] already have a step in flight"):
            envs.send(np.zeros(1, np.int64), [1])
        with pytest.raises(RuntimeError, match="steps in flight from send"):
            envs.step(np.zeros(2, np.int64))
        with pytest.raises(ValueError, match="env_ids must be distinct"):
            envs.send(np.zeros(2, np.int64), [0, 0])
        with pytest.raises(ValueError, match="2 actions given for 1 env_ids"):
            envs.send(np.zeros(2, np.int64), [0])
        *_, ids = envs.recv()
        assert ids.tolist() == [1]
        envs.step(np.zeros(2, np.int64))                   # nothing in flight: the sync API again
    finally:
        envs.close()


def test_a_failing_sub_env_is_named_and_the_others_go_on(numbered):
    envs = DmRpcVectorEnv(3, numbered.address, batch_size=3)
    try:
        envs.reset(seed=0)
        envs.send(np.array([0, 9, 0]))
        with pytest.raises(DmRpcError, match="sub-env 1") as failed:
            envs.recv()
        assert "told to fail" in str(failed.value)
        assert envs.in_flight == []
        envs.send(np.zeros(3, np.int64))
        *_, ids = envs.recv()
        assert sorted(ids.tolist()) == [0, 1, 2]
    finally:
        envs.close()
