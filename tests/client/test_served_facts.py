"""What the served env says of itself reaches the client (issue 42 items 1-5): its metadata and
``spec.max_episode_steps``, a parallel env's rewards container and shared space objects, the
settings as the user gave them, ``grpc_metadata=`` as call metadata, and gymnasium's order."""
from __future__ import annotations

import collections

import gymnasium as gym
import numpy as np
import pytest
from pettingzoo.butterfly import pistonball_v6

import dmrpc_gym
from dmrpc_gym.server import Server

DESC = ["SFFF", "FHFH", "FFFH", "HFFG"]


@pytest.fixture(scope="module")
def cartpole():
    with Server("CartPole-v1") as server:
        yield server.address


def test_metadata_and_max_episode_steps_are_the_served_envs(cartpole):
    local = gym.make("CartPole-v1")
    env = gym.make("dmrpc/Remote-v0", address=cartpole)
    try:
        assert env.metadata["render_fps"] == local.metadata["render_fps"] == 50
        assert env.metadata["render_modes"] == ["human", "rgb_array"]
        assert env.spec.max_episode_steps == local.spec.max_episode_steps == 500
    finally:
        env.close()
        local.close()


def test_a_step_before_reset_fails_as_a_local_env_does(cartpole):
    env = dmrpc_gym.DmRpcEnv(cartpole)
    try:
        with pytest.raises(gym.error.ResetNeeded, match="before calling env.reset"):
            env.step(0)
        env.reset(seed=1)
        env.step(0)
    finally:
        env.close()


def test_an_sb3_vec_env_steps_only_after_reset_as_dummy_vec_env_does(cartpole):
    from stable_baselines3.common.vec_env import DummyVecEnv

    from dmrpc_gym.integrations.sb3 import DmRpcSB3VecEnv
    local = DummyVecEnv([lambda: gym.make("CartPole-v1")] * 2)
    venv = DmRpcSB3VecEnv(2, cartpole)
    try:
        for vec in (local, venv):
            with pytest.raises(gym.error.ResetNeeded):
                vec.step(np.zeros(2, dtype=np.int64))
        venv.reset()
        assert venv.step(np.zeros(2, dtype=np.int64))[0].shape == (2, 4)
    finally:
        venv.close()
        local.close()


def test_grpc_metadata_is_call_metadata_and_metadata_is_gymnasiums(cartpole):
    env = dmrpc_gym.DmRpcEnv(cartpole, grpc_metadata=[("x-trace", "42")])
    try:
        assert isinstance(env.metadata, dict) and "render_modes" in env.metadata
    finally:
        env.close()
    with pytest.raises(TypeError, match="metadata"):
        dmrpc_gym.DmRpcEnv(cartpole, metadata=[("x-trace", "42")])


def test_list_world_settings_reach_the_env_as_lists():
    local = gym.make("FrozenLake-v1", desc=DESC)
    with Server("FrozenLake-v1") as server:
        env = gym.make("dmrpc/Remote-v0", address=server.address, world_settings={"desc": DESC})
        try:
            assert env.reset(seed=3) == local.reset(seed=3)
            assert env.step(1)[:4] == local.step(1)[:4]
        finally:
            env.close()
            local.close()


def test_parallel_rewards_and_shared_spaces_are_the_local_envs():
    local = pistonball_v6.parallel_env()
    with Server("pettingzoo.butterfly.pistonball_v6") as server:
        env = dmrpc_gym.parallel_env(server.address)
        try:
            a, b = local.possible_agents[:2]
            assert (env.action_space(a) is env.action_space(b)) == (local.action_space(a) is local.action_space(b))
            env.reset(seed=1)
            rewards = env.step({agent: np.zeros(1, np.float32) for agent in env.agents})[1]
            assert type(rewards) is collections.defaultdict and rewards["gone"] == 0
            assert env.metadata["render_fps"] == local.metadata["render_fps"]
            assert env.metadata["name"] == local.metadata["name"]
        finally:
            env.close()
            local.close()
