"""The demo job: PPO learns Catch over dm_env_rpc, end to end on one machine.

``dmrpc-gym demo`` (or :func:`run_demo`) starts the embedded Catch server,
measures a random policy, trains Stable-Baselines3's PPO through the
documented line::

    make_vec_env("dmrpc/Catch-v0", n_envs=4, wrapper_class=FlatSpaces)

measures the trained policy, and saves a learning curve. Needs the ``sb3``
extra (stable-baselines3, torch, matplotlib, tqdm).
"""
from __future__ import annotations

import contextlib
import copy
import time
from pathlib import Path
from typing import Any, Iterator

import numpy as np

from dmrpc_gym.integrations.flat_spaces import FlatSpaces

__all__ = ["ENV_ID", "catch_ppo_kwargs", "RandomPolicy", "make_sb3_env", "evaluate", "run_demo",
           "learning_curve"]

ENV_ID = "dmrpc/Catch-v0"

def catch_ppo_kwargs() -> dict[str, Any]:
    """PPO settings that learn Catch in ~20k steps on a 2-core CPU.

    A small ReLU MLP, short rollouts (128 steps x 4 envs) and 10 epochs over each.
    """
    import torch
    return dict(n_steps=128, batch_size=128, n_epochs=10, learning_rate=3e-3, gamma=0.99, device="cpu",
                policy_kwargs=dict(net_arch=[128], activation_fn=torch.nn.ReLU))


class RandomPolicy:
    """Uniformly random actions, with the ``predict`` interface SB3's ``evaluate_policy`` calls.

    >>> from gymnasium import spaces
    >>> policy = RandomPolicy(spaces.Discrete(3), seed=0)
    >>> actions, _ = policy.predict(np.zeros((4, 100)))
    >>> actions.shape, set(actions.tolist()) <= {0, 1, 2}
    ((4,), True)
    """

    def __init__(self, action_space, seed: int | None = None):
        self.action_space = copy.deepcopy(action_space)
        self.action_space.seed(seed)

    def predict(self, observation: Any, state: Any = None, episode_start: Any = None,
                deterministic: bool = False) -> tuple[np.ndarray, None]:
        first = next(iter(observation.values())) if isinstance(observation, dict) else observation
        return np.stack([self.action_space.sample() for _ in range(len(first))]), None


def make_sb3_env(n_envs: int = 4, seed: int = 0, env_id: str = ENV_ID, **env_kwargs: Any):
    """The documented SB3 line: ``make_vec_env(env_id, n_envs, wrapper_class=FlatSpaces)``."""
    from stable_baselines3.common.env_util import make_vec_env
    return make_vec_env(env_id, n_envs=n_envs, seed=seed, wrapper_class=FlatSpaces, env_kwargs=env_kwargs)


def evaluate(policy: Any, episodes: int = 100, seed: int = 10_000) -> float:
    """Mean episode reward of ``policy`` (an SB3 model or :class:`RandomPolicy`) on fresh Catch envs.

    The evaluation envs are seeded with ``seed``, so two policies evaluated with
    the same seed face the same ball drops.
    """
    from stable_baselines3.common.evaluation import evaluate_policy
    env = make_sb3_env(n_envs=1, seed=seed)
    try:
        mean, _ = evaluate_policy(policy, env, n_eval_episodes=episodes, deterministic=True)
    finally:
        env.close()
    return float(mean)


def learning_curve(vec_env) -> tuple[np.ndarray, np.ndarray]:
    """``(timesteps, rewards)`` of every training episode recorded by the envs' ``Monitor``, in order.

    The envs of a ``DummyVecEnv`` step together, so an episode ending after an
    env's ``k``-th step ended at timestep ``k * num_envs``.
    """
    ends, rewards = [], []
    lengths = vec_env.env_method("get_episode_lengths")
    for env_lengths, env_rewards in zip(lengths, vec_env.env_method("get_episode_rewards")):
        ends.extend(np.cumsum(env_lengths, dtype=np.int64) * vec_env.num_envs)
        rewards.extend(env_rewards)
    order = np.argsort(ends, kind="stable")
    return np.asarray(ends, np.int64)[order], np.asarray(rewards, np.float64)[order]


def _plot(steps: np.ndarray, rewards: np.ndarray, random_mean: float, trained_mean: float, out: Path) -> None:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    fig = Figure(figsize=(7, 4), dpi=100)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    window = max(1, min(200, len(rewards) // 10))
    if len(rewards):
        smooth = np.convolve(rewards, np.ones(window) / window, mode="valid")
        ax.plot(steps[window - 1:], smooth, color="tab:blue", label=f"training episodes (mean of {window})")
    ax.axhline(random_mean, color="tab:gray", linestyle="--", label=f"random policy ({random_mean:+.2f})")
    ax.axhline(trained_mean, color="tab:green", linestyle=":", label=f"trained policy ({trained_mean:+.2f})")
    ax.set(xlabel="timesteps", ylabel="episode reward", ylim=(-1.05, 1.05),
           title=f"PPO on {ENV_ID} over dm_env_rpc")
    ax.legend(loc="lower right")
    fig.tight_layout()
    fig.savefig(out)


@contextlib.contextmanager
def _torch_threads(n: int) -> Iterator[None]:
    """Small nets train faster on one thread than fighting the server's threads for 2 cores."""
    import torch
    before = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def run_demo(total_timesteps: int = 30_000, n_envs: int = 4, seed: int = 0,
             out: str | Path | None = "catch_learning_curve.png", progress: bool = True,
             eval_episodes: int = 100, verbose: bool = True) -> dict[str, Any]:
    """Measure a random policy, train PPO on Catch, measure again, plot; returns the numbers.

    ``progress`` shows SB3's progress bar; ``verbose`` prints the measurements as they come.

    Returns a dict with ``random_mean_reward``, ``trained_mean_reward``,
    ``total_timesteps``, ``n_envs``, ``train_episodes``, ``train_seconds`` and
    ``plot`` (the PNG's path, or ``None`` with ``out=None``).
    """
    from stable_baselines3 import PPO

    say = print if verbose else (lambda *a, **k: None)
    with _torch_threads(1):
        env = make_sb3_env(n_envs=n_envs, seed=seed)
        try:
            random_mean = evaluate(RandomPolicy(env.action_space, seed=seed), eval_episodes)
            say(f"random policy:  mean reward {random_mean:+.2f} over {eval_episodes} episodes")
            say(f"training PPO on {ENV_ID} ({n_envs} envs over dm_env_rpc) for {total_timesteps} steps")
            model = PPO("MlpPolicy", env, seed=seed, **catch_ppo_kwargs())
            start = time.perf_counter()
            model.learn(total_timesteps, progress_bar=progress)
            train_seconds = time.perf_counter() - start
            trained_mean = evaluate(model, eval_episodes)
            say(f"trained policy: mean reward {trained_mean:+.2f} over {eval_episodes} episodes "
                f"(training took {train_seconds:.0f} s)")
            steps, rewards = learning_curve(env)
        finally:
            env.close()
    plot = None
    if out is not None:
        plot = Path(out)
        _plot(steps, rewards, random_mean, trained_mean, plot)
        say(f"learning curve: {plot}")
    return {"random_mean_reward": random_mean, "trained_mean_reward": trained_mean,
            "total_timesteps": int(model.num_timesteps), "n_envs": n_envs, "train_episodes": int(len(rewards)),
            "train_seconds": train_seconds, "plot": None if plot is None else str(plot)}
