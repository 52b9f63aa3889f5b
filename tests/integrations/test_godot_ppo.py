"""PPO (Stable-Baselines3) learns the bundled Godot Catch world, played by the real headless engine."""
from __future__ import annotations

import numpy as np
import pytest

from dmrpc_gym.integrations.godot import make_godot_catch
from godot_support import no_games_left, require_godot  # noqa: F401

require_godot()
pytestmark = pytest.mark.usefixtures("no_games_left")


def _mean_return(env, policy, episodes=40):
    total = 0.0
    for episode in range(episodes):
        obs, _ = env.reset(seed=1000 + episode)
        while True:
            obs, reward, terminated, truncated, _ = env.step(policy(obs))
            if terminated or truncated:
                total += reward
                break
    return total / episodes


def test_ppo_learns_godot_catch_clearly_above_random():
    torch = pytest.importorskip("torch")
    from stable_baselines3 import PPO
    from stable_baselines3.common.env_util import make_vec_env

    threads = torch.get_num_threads()
    torch.set_num_threads(1)                     # tiny network: threads only contend with the games
    venv = make_vec_env(make_godot_catch, n_envs=4, seed=0)
    try:
        model = PPO("MlpPolicy", venv, n_steps=64, batch_size=64, n_epochs=8, learning_rate=3e-3, gamma=0.95,
                    ent_coef=0.01, policy_kwargs=dict(net_arch=[32, 32]), seed=0, device="cpu")
        model.learn(total_timesteps=4096)
    finally:
        venv.close()
        torch.set_num_threads(threads)
    env = make_godot_catch()
    try:
        rng = np.random.default_rng(0)
        random = _mean_return(env, lambda obs: int(rng.integers(3)))
        trained = _mean_return(env, lambda obs: int(model.predict(obs, deterministic=True)[0]))
    finally:
        env.close()
    print(f"mean return over 40 episodes: random {random:+.2f}, PPO after 4096 steps {trained:+.2f}")
    assert random < 0.0                          # a random paddle misses most balls (-1 each)
    assert trained > 0.5 and trained > random + 1.0
