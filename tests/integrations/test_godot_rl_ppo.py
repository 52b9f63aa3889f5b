"""PPO (Stable-Baselines3) trains on a one-agent Godot RL Agents game (Walkers with ``--agents=1``) played by the
real headless engine. SB3 takes one action array, and Walkers' action mixes a Box (``move``) and a Discrete
(``run``): :class:`OneBox` makes it one ``Box(-1, 1, (2,))`` (``run`` when the second value is positive), and the
flat-spaces view does the rest; :class:`FlatLine` gives the tiny image to the MLP."""
from __future__ import annotations

import warnings

import gymnasium as gym
import numpy as np
import pytest

from dmrpc_gym.integrations.flat_spaces import FlatSpaces
from dmrpc_gym.integrations.godot_rl import WALKERS_PROJECT, GodotRLEnv, GodotRLWarning
from godot_support import no_games_left, require_godot  # noqa: F401

require_godot()
pytestmark = [pytest.mark.usefixtures("no_games_left"),
              pytest.mark.filterwarnings("ignore::dmrpc_gym.integrations.godot_rl.GodotRLWarning")]


class OneBox(gym.ActionWrapper):
    """Walkers' Dict action as one Box: ``[move, run]``, ``run`` when positive."""

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        self.action_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)

    def action(self, action: np.ndarray) -> dict:
        return {"move": np.asarray(action[:1], np.float32), "run": int(action[1] > 0)}


class FlatLine(gym.ObservationWrapper):
    """The 2 x 10 ``line_2d`` image as 20 floats in [0, 1] (SB3's CNN needs images of 36 x 36 at least)."""

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        self.observation_space = gym.spaces.Dict({**env.observation_space.spaces,
                                                  "line_2d": gym.spaces.Box(0.0, 1.0, (20,), np.float32)})

    def observation(self, observation: dict) -> dict:
        return {**observation, "line_2d": observation["line_2d"].reshape(20).astype(np.float32) / 255.0}


def one_walker() -> FlatSpaces:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", GodotRLWarning)
        return FlatSpaces(FlatLine(OneBox(GodotRLEnv(WALKERS_PROJECT, action_repeat=8, extra_args=["--agents=1"]))))


def mean_return(env, policy, episodes=8):
    total = 0.0
    for episode in range(episodes):
        obs, _ = env.reset(seed=100 + episode)
        while True:
            obs, reward, terminated, truncated, _ = env.step(policy(obs))
            total += reward
            if terminated or truncated:
                break
    return total / episodes


def test_ppo_trains_on_a_one_agent_game():
    torch = pytest.importorskip("torch")
    from stable_baselines3 import PPO
    from stable_baselines3.common.env_util import make_vec_env

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    venv = make_vec_env(one_walker, n_envs=2, seed=0)
    try:
        model = PPO("MultiInputPolicy", venv, n_steps=128, batch_size=64, n_epochs=4, learning_rate=3e-3,
                    policy_kwargs=dict(net_arch=[32, 32]), seed=0, device="cpu")
        model.learn(total_timesteps=1024)           # 4 iterations of 2 x 128 steps
        assert model.num_timesteps >= 1024 and model._n_updates == 16
    finally:
        venv.close()
        torch.set_num_threads(threads)
    env = one_walker()
    try:
        rng = np.random.default_rng(0)
        random = mean_return(env, lambda obs: env.action_space.sample())
        trained = mean_return(env, lambda obs: model.predict(obs, deterministic=True)[0])
    finally:
        env.close()
    print(f"mean return over 8 episodes: random {random:+.2f}, PPO after 1024 steps {trained:+.2f}")
    assert np.isfinite(trained)
