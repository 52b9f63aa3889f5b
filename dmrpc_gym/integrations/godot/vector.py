"""``GodotVectorEnv``: N Godot games, each its own process, stepped at once as one gymnasium VectorEnv.

A step checks every action first, sends every game its command, and only then
awaits the answers, so the games simulate in parallel (one per core) and N games
cost about one round trip of latency. A game whose episode ended gets a reset
instead of a step on the next call: gymnasium's ``NEXT_STEP`` autoreset.
"""
from __future__ import annotations

import functools
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, Sequence

import numpy as np
from gymnasium.vector import AutoresetMode, VectorEnv
from gymnasium.vector.utils import batch_space

from dmrpc_gym.integrations.godot.env import GodotEnv

__all__ = ["GodotVectorEnv", "start_concurrently"]

_STEP_KEYS = ("observation", "reward", "done")


class GodotVectorEnv(VectorEnv):
    """``num_envs`` games made by ``make_env(**kwargs)`` (default :class:`GodotEnv`), stepped at once.

    Args:
        num_envs: how many games (each its own process, started concurrently).
        max_episode_steps: steps after which an episode is truncated (None: only the game ends it).
        make_env: builds one :class:`GodotEnv` from ``kwargs``.
        **kwargs: :class:`GodotEnv` arguments shared by every game.

    >>> from dmrpc_gym.integrations.godot import godot_available, make_godot_catch
    >>> if godot_available():
    ...     envs = GodotVectorEnv(2, make_env=make_godot_catch)
    ...     obs, infos = envs.reset(seed=0)
    ...     obs, rewards, terminated, truncated, infos = envs.step(np.array([0, 2]))
    ...     envs.close()
    """

    metadata = {"autoreset_mode": AutoresetMode.NEXT_STEP, "render_modes": ["rgb_array"]}

    def __init__(self, num_envs: int = 1, *, max_episode_steps: int | None = None,
                 make_env: Callable[..., GodotEnv] = GodotEnv, **kwargs: Any) -> None:
        if not isinstance(num_envs, int) or num_envs < 1:
            raise ValueError(f"num_envs must be a positive int; got {num_envs!r}")
        if max_episode_steps is not None and max_episode_steps < 1:
            raise ValueError(f"max_episode_steps must be None or >= 1; got {max_episode_steps!r}")
        self.envs: list[GodotEnv] = start_concurrently([functools.partial(make_env, **kwargs)] * num_envs)
        first = self.envs[0]
        self.num_envs = num_envs
        self.max_episode_steps = max_episode_steps
        self.render_mode = first.render_mode
        self.single_observation_space = first.observation_space
        self.single_action_space = first.action_space
        self.observation_space = batch_space(self.single_observation_space, num_envs)
        self.action_space = batch_space(self.single_action_space, num_envs)
        self._steps = np.zeros(num_envs, np.int64)
        self._restart = np.zeros(num_envs, bool)

    @property
    def processes(self) -> list:
        """Every game's ``subprocess.Popen``."""
        return [env.process for env in self.envs]

    def _exchange(self, messages: Sequence[dict], keys: Sequence[Sequence[str]], doing: Sequence[str]) -> list[dict]:
        """Send every message, then await every answer; the first failure is raised after all are read."""
        for env, message, what in zip(self.envs, messages, doing):
            env.send(message, what)
        answers, error = [], None
        for env, want, what in zip(self.envs, keys, doing):
            try:
                answers.append(env.receive(want, what))
            except Exception as exc:  # noqa: BLE001 - re-raised below, after the others are drained
                answers.append(None)
                error = error or exc
        if error is not None:
            raise error
        return answers

    def reset(self, *, seed: int | Sequence[int | None] | None = None,
              options: dict | None = None) -> tuple[np.ndarray, dict]:
        super().reset(seed=seed)
        seeds = [seed + i for i in range(self.num_envs)] if isinstance(seed, int) else (seed or [None] * self.num_envs)
        if len(seeds) != self.num_envs:
            raise ValueError(f"reset got {len(seeds)} seeds for {self.num_envs} envs")
        messages = [env.reset_message(s) for env, s in zip(self.envs, seeds)]
        answers = self._exchange(messages, [("init_observation",)] * self.num_envs, ["reset"] * self.num_envs)
        self._steps[:] = 0
        self._restart[:] = False
        return self._stack([env.reset_answer(a) for env, a in zip(self.envs, answers)]), {}

    def step(self, actions: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, dict]:
        actions = list(actions) if not isinstance(actions, np.ndarray) else actions
        if len(actions) != self.num_envs:
            raise ValueError(f"step got {len(actions)} actions for {self.num_envs} envs")
        messages, keys, doing = [], [], []
        for i, env in enumerate(self.envs):
            if self._restart[i]:
                messages.append(env.reset_message())
                keys.append(("init_observation",))
                doing.append("reset")
            else:
                try:
                    messages.append(env.step_message(actions[i]))     # every action checked before any is sent
                except ValueError as exc:
                    raise ValueError(f"env {i}: {exc}") from None
                keys.append(_STEP_KEYS)
                doing.append("step")
        answers = self._exchange(messages, keys, doing)
        observations = []
        rewards = np.zeros(self.num_envs, np.float64)
        terminated = np.zeros(self.num_envs, bool)
        truncated = np.zeros(self.num_envs, bool)
        for i, (env, answer) in enumerate(zip(self.envs, answers)):
            if self._restart[i]:
                observations.append(env.reset_answer(answer))
                self._restart[i] = False
                self._steps[i] = 0
                continue
            obs, rewards[i], terminated[i], _, _ = env.step_answer(answer)
            observations.append(obs)
            self._steps[i] += 1
            truncated[i] = (not terminated[i] and self.max_episode_steps is not None
                            and self._steps[i] >= self.max_episode_steps)
            self._restart[i] = terminated[i] or truncated[i]
        return self._stack(observations), rewards, terminated, truncated, {}

    def _stack(self, observations: list) -> np.ndarray:
        return np.stack(observations).astype(self.single_observation_space.dtype, copy=False)

    def render(self) -> tuple | None:
        """Every game's frame (``render_mode="rgb_array"``), else None."""
        if self.render_mode != "rgb_array":
            return None
        return tuple(env.render() for env in self.envs)

    def close_extras(self, **kwargs: Any) -> None:
        for env in self.envs:
            env.close()


def start_concurrently(makers: Sequence[Callable[[], Any]]) -> list:
    """Call every maker at once (each waits for its own game to start): their results, in order.
    On any failure the results that have a ``close`` are closed and the first error is raised."""
    if not makers:
        return []
    with ThreadPoolExecutor(max_workers=min(len(makers), 16)) as pool:
        futures = [pool.submit(make) for make in makers]
    made, error = [], None
    for future in futures:
        try:
            made.append(future.result())
        except Exception as exc:  # noqa: BLE001 - re-raised after cleanup
            error = error or exc
    if error is not None:
        for item in made:
            if callable(getattr(item, "close", None)):
                item.close()
        raise error
    return made
