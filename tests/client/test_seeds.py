"""Seeds reach the world: by default on our servers, by name elsewhere, and never silently lost.

The worlds' own randomness is what is checked (CartPole's random start, Tag's
random positions): the same seed gives the same episode, run after run, on
every env kind, and a local env with the same seed gives the same start.
"""
from __future__ import annotations

import warnings

import gymnasium as gym
import numpy as np
import pytest

import dmrpc_gym
from dmrpc_gym import DmRpcEnv
from dmrpc_gym.client.vector import DmRpcVectorEnv
from dmrpc_gym.integrations.sb3 import DmRpcSB3VecEnv
from dmrpc_gym.worlds.embedded import embedded_server
from dmrpc_gym.worlds.tag import agents_of
from official_servers import start_official_server
from servers import start

UNSENT = "seeds only this client's RNG"


@pytest.fixture(scope="module")
def cartpole():
    with start("CartPole-v1") as server:
        yield server


def local_start(seed: int) -> np.ndarray:
    obs, _ = gym.make("CartPole-v1").reset(seed=seed)
    return obs


def play(env, seed: int, steps: int = 30) -> list[bytes]:
    """One seeded episode with a fixed action pattern, as comparable bytes."""
    obs, _ = env.reset(seed=seed)
    seen = [np.asarray(obs).tobytes()]
    for t in range(steps):
        obs, reward, terminated, truncated, _ = env.step(t % 2)
        seen.append(np.asarray(obs).tobytes() + bytes([terminated, truncated]))
        if terminated or truncated:
            break
    return seen


def test_remote_v0_sends_the_seed_to_our_server_by_default(cartpole):
    with warnings.catch_warnings():
        warnings.simplefilter("error")        # nothing to say: the seed is delivered
        env = gym.make("dmrpc/Remote-v0", address=cartpole.address)
        try:
            assert env.unwrapped.seed_setting == "seed"
            obs, _ = env.reset(seed=5)
            np.testing.assert_array_equal(obs, local_start(5))
            first = play(env, 11)
            assert play(env, 11) == first and play(env, 12) != first
        finally:
            env.close()


def test_vector_env_seeds_every_world(cartpole):
    runs = []
    for _ in range(2):
        envs = DmRpcVectorEnv(3, cartpole.address)
        try:
            obs, _ = envs.reset(seed=7)
            for i in range(3):
                np.testing.assert_array_equal(obs[i], local_start(7 + i))
            trajectory = [obs.tobytes()]
            for t in range(20):
                obs, *_ = envs.step(np.array([t % 2] * 3))
                trajectory.append(obs.tobytes())
            runs.append(trajectory)
        finally:
            envs.close()
    assert runs[0] == runs[1]


def test_sb3_vec_env_seeds_every_world(cartpole):
    venv = DmRpcSB3VecEnv(2, cartpole.address)
    try:
        venv.seed(3)
        obs = venv.reset()
        np.testing.assert_array_equal(obs[0], local_start(3))
        np.testing.assert_array_equal(obs[1], local_start(4))
    finally:
        venv.close()


def tag_trajectory(address: str, seed: int) -> list[bytes]:
    env = dmrpc_gym.parallel_env(address, agents=agents_of({}), world_settings={"size": 6})
    try:
        observations, _ = env.reset(seed=seed)
        seen = [b"".join(np.asarray(observations[a]).tobytes() for a in sorted(observations))]
        rng = np.random.default_rng(0)
        for _ in range(15):
            actions = {a: int(rng.integers(env.action_space(a).n)) for a in env.agents}
            observations, *_ = env.step(actions)
            seen.append(b"".join(np.asarray(observations[a]).tobytes() for a in sorted(observations)))
            if not env.agents:
                break
        return seen
    finally:
        env.close()


def test_parallel_env_sends_the_seed_to_our_server_by_default():
    address = embedded_server("tag").address
    first = tag_trajectory(address, 4)
    assert tag_trajectory(address, 4) == first
    assert tag_trajectory(address, 5)[0] != first[0]      # Tag's start positions are the seed's


def test_a_foreign_server_gets_no_seed_and_the_first_seeded_reset_says_so():
    with start_official_server() as official:
        env = DmRpcEnv(official.address)
        try:
            assert env.seed_setting is None
            with pytest.warns(UserWarning, match=UNSENT) as record:
                env.reset(seed=1)
            assert "seed_setting=" in str(record[0].message) and official.address in str(record[0].message)
            with warnings.catch_warnings():
                warnings.simplefilter("error")    # said once per env
                env.reset(seed=2)
                env.reset()
        finally:
            env.close()
        for choice in (None, "seed"):      # an explicit choice is obeyed without a word
            env = DmRpcEnv(official.address, seed_setting=choice)
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("error")
                    env.reset(seed=1)
            finally:
                env.close()


def test_bad_seed_setting_is_refused(cartpole):
    with pytest.raises(TypeError, match="seed_setting must be"):
        DmRpcEnv(cartpole.address, seed_setting=3)
