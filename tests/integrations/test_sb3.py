"""Stable-Baselines3 PPO learns Catch through the documented line, over real gRPC."""
from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("stable_baselines3")
torch = pytest.importorskip("torch")

from stable_baselines3 import PPO  # noqa: E402
from stable_baselines3.common.env_util import make_vec_env  # noqa: E402
from stable_baselines3.common.vec_env import DummyVecEnv  # noqa: E402

import dmrpc_gym  # noqa: E402,F401
from dmrpc_gym.app.demo import RandomPolicy, catch_ppo_kwargs, evaluate  # noqa: E402
from dmrpc_gym.integrations.sb3 import FlatSpaces  # noqa: E402

SEED = 0
STEPS = 20_000
EVAL_EPISODES = 100


@pytest.fixture
def one_torch_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def test_the_documented_line_builds_an_sb3_vec_env():
    env = make_vec_env("dmrpc/Catch-v0", n_envs=4, wrapper_class=FlatSpaces)
    try:
        assert isinstance(env, DummyVecEnv) and env.num_envs == 4
        assert env.observation_space.shape == (100,) and env.action_space.n == 3
        obs = env.reset()
        assert obs.shape == (4, 100) and obs.dtype == np.float32
        obs, rewards, dones, infos = env.step(np.array([0, 1, 2, 1]))
        assert rewards.shape == (4,) and not dones.any()
    finally:
        env.close()


def test_ppo_learns_catch(one_torch_thread):
    env = make_vec_env("dmrpc/Catch-v0", n_envs=4, seed=SEED, wrapper_class=FlatSpaces)
    try:
        random_mean = evaluate(RandomPolicy(env.action_space, seed=SEED), EVAL_EPISODES)
        model = PPO("MlpPolicy", env, seed=SEED, **catch_ppo_kwargs())
        model.learn(STEPS)
    finally:
        env.close()
    trained_mean = evaluate(model, EVAL_EPISODES)   # the same seeded ball drops as the random policy
    print(f"random {random_mean:+.2f} -> trained {trained_mean:+.2f}")
    assert random_mean < 0.0
    assert trained_mean > 0.5
    assert trained_mean > random_mean + 1.0
