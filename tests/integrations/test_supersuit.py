"""Stable-Baselines3 through SuperSuit on a dm_env_rpc multi-agent world (the bundled Tag)."""
from __future__ import annotations

import numpy as np
import pytest
# (imported by name: doctest collection trips over the supersuit module's __getattr__)
from supersuit import concat_vec_envs_v1, pettingzoo_env_to_vec_env_v1
from stable_baselines3 import PPO
from stable_baselines3.common.utils import set_random_seed

from dmrpc_gym import tag_env
from dmrpc_gym.worlds.tag import Tag

# SuperSuit's vector env wants every agent to share spaces and to finish together.
SHARED = dict(homogeneous=True, evaders=1, size=5, max_steps=20)


def test_vector_env_steps_like_the_local_world():
    remote = pettingzoo_env_to_vec_env_v1(tag_env(step_timeout=10.0, **SHARED))
    local = pettingzoo_env_to_vec_env_v1(Tag(**SHARED))
    assert remote.num_envs == local.num_envs == 3
    assert remote.observation_space == local.observation_space
    obs, _ = remote.reset(seed=7)
    expected, _ = local.reset(seed=7)
    assert np.array_equal(obs, expected)
    rng = np.random.default_rng(0)
    episodes_ended = 0
    for _ in range(50):                          # several episodes: SuperSuit resets by itself
        actions = rng.integers(5, size=3)
        got, want = remote.step(actions), local.step(actions)
        for mine, theirs in zip(got[:4], want[:4]):
            assert np.array_equal(mine, theirs)
        if got[2].any() or got[3].any():
            episodes_ended += 1
            assert (got[2] | got[3]).all()       # all agents finish on the same step
            assert all(np.array_equal(a["terminal_observation"], b["terminal_observation"])
                       for a, b in zip(got[4], want[4]))
    assert episodes_ended >= 2
    remote.close()


@pytest.mark.parametrize("num_cpus", [0, 1])
def test_concat_vec_envs_for_sb3(num_cpus):
    env = tag_env(step_timeout=10.0, **SHARED)
    venv = pettingzoo_env_to_vec_env_v1(env)
    venv = concat_vec_envs_v1(venv, num_vec_envs=2, num_cpus=num_cpus, base_class="stable_baselines3")
    env.close()                                  # the copies are new envs (pickled from its arguments)
    try:
        assert venv.num_envs == 6
        if num_cpus == 0:                        # in this process: each copy made its own world
            worlds = {copy.par_env.world_name for copy in venv.venv.vec_envs}
            assert len(worlds) == 2 and env.world_name not in worlds
        obs = venv.reset()
        assert obs.shape == (6, 10) and obs.dtype == np.float32
        assert venv.observation_space.contains(obs[0])
        dones_seen = np.zeros(6, bool)
        for _ in range(40):
            obs, rewards, dones, infos = venv.step(np.random.default_rng(1).integers(5, size=6))
            assert obs.shape == (6, 10) and rewards.shape == (6,) and dones.shape == (6,) and len(infos) == 6
            for i in np.flatnonzero(dones):
                assert infos[i]["terminal_observation"].shape == (10,)
            dones_seen |= dones.astype(bool)
        assert dones_seen.all()
        # Copy 0 plays agents 0-2, copy 1 agents 3-5: two worlds, each the same game.
        assert obs[:3, 3].tolist() == [0.0, 0.0, 1.0] == obs[3:, 3].tolist()   # the role flags
    finally:
        venv.close()


def test_ppo_learns_for_a_few_hundred_steps():
    env = tag_env(step_timeout=10.0, **SHARED)
    venv = concat_vec_envs_v1(pettingzoo_env_to_vec_env_v1(env), num_vec_envs=2, num_cpus=0,
                                 base_class="stable_baselines3")
    env.close()
    try:
        # No seed= for PPO: it would call venv.seed(), which SuperSuit's ConcatVecEnv lacks.
        set_random_seed(0)
        model = PPO("MlpPolicy", venv, n_steps=32, batch_size=64, n_epochs=2, device="cpu")
        model.learn(total_timesteps=384)
        assert model.num_timesteps >= 384
        actions, _ = model.predict(venv.reset(), deterministic=True)
        assert actions.shape == (6,) and all(venv.action_space.contains(a) for a in actions)
    finally:
        venv.close()


def test_heterogeneous_agents_need_the_homogeneous_setting():
    env = tag_env(size=5)                        # pursuers and evaders observe differently
    with pytest.raises(AssertionError, match="observation spaces not consistent"):
        pettingzoo_env_to_vec_env_v1(env)
    env.close()
