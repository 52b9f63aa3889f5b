"""A served env's ``info`` reaches our client on every env kind, as gymnasium / PettingZoo give it
locally; a foreign client never sees the extra observation; what cannot cross is said once."""
from __future__ import annotations

import logging
import warnings

import gymnasium as gym
import numpy as np
import pytest
from dm_env_rpc.v1 import dm_env_adaptor
from gymnasium.vector import AutoresetMode, SyncVectorEnv
from pettingzoo import ParallelEnv

import dmrpc_gym
from dmrpc_gym import DmRpcEnv
from dmrpc_gym.client.vector import DmRpcVectorEnv
from dmrpc_gym.integrations.sb3 import DmRpcSB3VecEnv
from servers import OfficialClient, start


class Chatty(gym.Env):
    """Infos of every kind that crosses: numbers, strings, arrays, numpy scalars, nested dicts,
    lists and tuples; a key only on some steps (for the vector env's masks)."""

    observation_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def __init__(self, length: int = 4):
        self.length = length

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return np.zeros(2, np.float32), {"start": self.np_random.uniform(size=3), "seed": seed}

    def step(self, action):
        self.t += 1
        info = {"t": self.t, "name": f"step {self.t}", "lives": np.int8(3 - self.t % 2),
                "pos": np.arange(4, dtype=np.float32).reshape(2, 2) * self.t,
                "nested": {"action": int(action), "history": [self.t, "x", np.float64(0.5)], "pair": (1, "b")}}
        if self.t % 2 == 0:
            info["even"] = True
        return np.full(2, self.t / 10, np.float32), float(self.t), self.t >= self.length, False, info


class Opaque(Chatty):
    def step(self, action):
        obs, reward, terminated, truncated, info = super().step(action)
        return obs, reward, terminated, truncated, {**info, "handle": object(), "blob": b"raw"}


def assert_same(a, b, where="info"):
    assert type(a) is type(b) or (isinstance(a, float) and isinstance(b, float)), (where, a, b)
    if isinstance(a, dict):
        assert a.keys() == b.keys(), (where, sorted(a), sorted(b))
        for k in a:
            assert_same(a[k], b[k], f"{where}[{k!r}]")
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b)):
            assert_same(x, y, f"{where}[{i}]")
    elif isinstance(a, (np.ndarray, np.generic)):
        assert a.dtype == b.dtype and np.shape(a) == np.shape(b), (where, a, b)
        np.testing.assert_array_equal(a, b)
    else:
        assert a == b, (where, a, b)


@pytest.fixture(scope="module")
def chatty():
    with start(Chatty) as server:
        yield server


def test_info_crosses_as_the_env_returns_it(chatty):
    local = Chatty()
    env = DmRpcEnv(chatty.address)
    try:
        _, info = env.reset(seed=4)
        _, expected = local.reset(seed=4)
        assert_same(info, expected)
        for action in (1, 0, 1, 0):
            *_, info = env.step(action)
            *_, expected = local.step(action)
            assert_same(info, expected)
        assert env.unwrapped.last_discount == 0.0   # the bridge's own view, kept apart from info
    finally:
        env.close()


def test_vector_env_infos_merge_as_gymnasiums_own_vector_env(chatty):
    """Same keys, values and ``_key`` masks as SyncVectorEnv over the local env (NEXT_STEP
    autoreset), through episode ends and autoresets."""
    n = 3
    local = SyncVectorEnv([lambda i=i: Chatty(length=3 + i) for i in range(n)],
                          autoreset_mode=AutoresetMode.NEXT_STEP)
    envs = DmRpcVectorEnv(n, chatty.address)
    try:
        for i, sub in enumerate(envs.envs):        # the lengths of the local sub-envs
            sub.reset(options={"world_settings": {"length": 3 + i}})
        _, infos = envs.reset(seed=1)
        _, expected = local.reset(seed=1)
        assert_same(infos, expected)
        for t in range(9):
            actions = np.array([(t + i) % 2 for i in range(n)])
            *_, infos = envs.step(actions)
            *_, expected = local.step(actions)
            assert_same(infos,
                        expected, f"step {t}")
    finally:
        envs.close()
        local.close()


def test_sb3_vec_env_infos_carry_the_envs_keys(chatty):
    venv = DmRpcSB3VecEnv(2, chatty.address)
    try:
        venv.reset()
        venv.step_async(np.array([0, 1]))
        _, _, _, infos = venv.step_wait()
        assert [info["t"] for info in infos] == [1, 1]
        assert infos[1]["nested"]["action"] == 1
        assert infos[0]["pos"].dtype == np.float32
    finally:
        venv.close()


def test_worker_processes_carry_info_too():
    with start(Chatty, processes=1) as server:
        env = DmRpcEnv(server.address)
        try:
            _, info = env.reset(seed=2)
            assert_same(info, Chatty().reset(seed=2)[1])
            *_, info = env.step(1)
            assert info["nested"]["pair"] == (1, "b") and info["lives"] == np.int8(2)
        finally:
            env.close()


def test_a_value_that_cannot_cross_is_said_once_by_its_key(caplog):
    with start(Opaque) as server:
        env = DmRpcEnv(server.address)
        try:
            env.reset(seed=0)
            with caplog.at_level(logging.WARNING, logger="dmrpc_gym.server"):
                with pytest.warns(UserWarning) as record:
                    *_, info = env.step(0)
                with warnings.catch_warnings():
                    warnings.simplefilter("error")     # said once, not every step
                    *_, again = env.step(1)
            said = sorted(str(w.message) for w in record if "cannot cross" in str(w.message))
            assert len(said) == 2 and "info['blob']" in said[0] and "info['handle']" in said[1]
            assert "handle" not in info and "blob" not in info and info["t"] == 1 and again["t"] == 2
            assert sum("cannot cross" in r.getMessage() for r in caplog.records) == 2   # the server's log
        finally:
            env.close()


class Scouts(ParallelEnv):
    """Two agents with per-agent infos."""

    metadata = {"name": "scouts_v0"}

    def __init__(self):
        self.possible_agents = ["a", "b"]
        self.agents = []

    def observation_space(self, agent):
        return gym.spaces.Discrete(10)

    def action_space(self, agent):
        return gym.spaces.Discrete(2)

    def reset(self, seed=None, options=None):
        self.agents, self.t = list(self.possible_agents), 0
        return {a: 0 for a in self.agents}, {a: {"role": a.upper(), "seed": seed} for a in self.agents}

    def step(self, actions):
        self.t += 1
        done = self.t >= 3
        infos = {a: {"moved": int(actions[a]), "score": np.float32(self.t * (i + 1))}
                 for i, a in enumerate(self.agents)}
        obs = {a: self.t for a in self.agents}
        flags = {a: done for a in self.agents}
        if done:
            self.agents = []
        return obs, {a: 1.0 for a in obs}, flags, {a: False for a in obs}, infos


def test_parallel_env_gets_each_agents_info():
    with start(Scouts) as server:
        env = dmrpc_gym.parallel_env(server.address, agents=["a", "b"])
        try:
            _, infos = env.reset(seed=5)
            assert infos == {"a": {"role": "A", "seed": 5},
                                                               "b": {"role": "B", "seed": 5}}
            _, _, _, _, infos = env.step({"a": 1, "b": 0})
            assert infos["a"] == {"moved": 1, "score": np.float32(1.0)}
            assert infos["b"] == {"moved": 0, "score": np.float32(2.0)}
            assert type(infos["b"]["score"]) is np.float32
        finally:
            env.close()


def test_foreign_clients_never_see_the_info_observation(chatty):
    """The official client asks for every observation in the specs: no info among them."""
    with OfficialClient(chatty.address) as client:
        env, world = dm_env_adaptor.create_and_join_world(client.connection, {}, {})
        try:
            first = env.reset()
            step = env.step({"action": np.int64(1)})
            assert set(step.observation) == set(first.observation) == {"observation"}
        finally:
            env.close()
