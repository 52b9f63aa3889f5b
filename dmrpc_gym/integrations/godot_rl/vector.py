"""``GodotRLVectorEnv``: ``n_parallel`` Godot RL Agents games stepped at once, every agent of every game a sub-env.

The games start concurrently, each on its own OS-picked port. A step checks every
action, sends every game its ``action`` message and only then reads the answers, so the
games simulate in parallel. Sub-env ``k`` is agent ``k % n_agents`` of game ``k // n_agents``
(as Godot RL Agents' own vector wrappers lay them out), so every agent must have the same
spaces. The games reset their agents themselves: the observation that comes with ``done``
is the next episode's first (``autoreset_mode`` ``SAME_STEP``, with no terminal observation:
the protocol has none).
"""
from __future__ import annotations

import os
from typing import Any, Sequence

import numpy as np
from gymnasium.vector import AutoresetMode, VectorEnv
from gymnasium.vector.utils import batch_space, concatenate, create_empty_array

from dmrpc_gym.integrations.godot.vector import start_concurrently
from dmrpc_gym.integrations.godot_rl.game import GodotRLGame

__all__ = ["GodotRLVectorEnv"]


class GodotRLVectorEnv(VectorEnv):
    """``n_parallel`` games of ``path``, each agent a sub-env (``num_envs = n_parallel * n_agents``).

    Args:
        path: a Godot project folder or an exported game.
        n_parallel: how many game instances (processes).
        seed: game ``i`` is started with ``seed + i`` (None: the games' default).
        **kwargs: more :class:`~dmrpc_gym.integrations.godot_rl.game.GodotRLGame` arguments
            (``action_repeat``, ``speedup``, ``paced``, ``godot``, timeouts, ``extra_args``).

    Actions are a batch of the agents' ``Dict`` actions (a dict of arrays, as ``action_space``
    samples them). ``reset(seed=s)`` starts game ``i`` again with ``s + i`` (see
    :mod:`~dmrpc_gym.integrations.godot_rl.envs`).

    >>> from dmrpc_gym.integrations.godot_rl import WALKERS_PROJECT, godot_rl_available
    >>> if godot_rl_available():
    ...     envs = GodotRLVectorEnv(WALKERS_PROJECT, n_parallel=2, seed=0)
    ...     observations, infos = envs.reset()
    ...     observations, rewards, terminations, truncations, infos = envs.step(envs.action_space.sample())
    ...     envs.close(); print(envs.num_envs, rewards.shape)
    4 (4,)
    """

    metadata = {"autoreset_mode": AutoresetMode.SAME_STEP, "render_modes": []}

    def __init__(self, path: str | os.PathLike, n_parallel: int = 1, *, seed: int | None = None,
                 **kwargs: Any) -> None:
        if not isinstance(n_parallel, int) or n_parallel < 1:
            raise ValueError(f"n_parallel must be a positive int; got {n_parallel!r}")
        seeds = [None if seed is None else seed + i for i in range(n_parallel)]
        self.games: list[GodotRLGame] = start_concurrently(
            [lambda s=s: GodotRLGame(path, seed=s, **kwargs) for s in seeds])
        first = self.games[0]
        agents = first.agents
        for agent in agents[1:]:
            if (first.observation_spaces[agent] != first.observation_spaces[agents[0]]
                    or first.action_spaces[agent] != first.action_spaces[agents[0]]):
                self.close()
                raise ValueError(f"Godot RL Agents game {str(path)!r}: agent {agent!r} has other spaces than "
                                 f"{agents[0]!r}; one vector env needs one space (use GodotRLParallelEnv)")
        self.agents_per_game = len(agents)
        self.num_envs = n_parallel * self.agents_per_game
        self.single_observation_space = first.observation_spaces[agents[0]]
        self.single_action_space = first.action_spaces[agents[0]]
        self.observation_space = batch_space(self.single_observation_space, self.num_envs)
        self.action_space = batch_space(self.single_action_space, self.num_envs)
        self.render_mode = None
        self._observations = create_empty_array(self.single_observation_space, self.num_envs)

    @property
    def processes(self) -> list:
        """Every game's ``subprocess.Popen``."""
        return [game.process for game in self.games]

    def _batch(self, per_game: list[dict[str, dict]]) -> Any:
        flat = [observations[agent] for game, observations in zip(self.games, per_game) for agent in game.agents]
        return concatenate(self.single_observation_space, flat, self._observations)

    def reset(self, *, seed: int | Sequence[int | None] | None = None,
              options: dict | None = None) -> tuple[Any, dict]:
        super().reset(seed=seed)
        if seed is not None:
            seeds = [seed + i for i in range(len(self.games))] if isinstance(seed, int) else list(seed)
            if len(seeds) != len(self.games):
                raise ValueError(f"reset got {len(seeds)} seeds for {len(self.games)} games")
            restart = [(game, s) for game, s in zip(self.games, seeds)
                       if s is not None and not (game.fresh and game.seed == s)]
            start_concurrently([lambda game=game, s=s: game.restart(s) for game, s in restart])
        for game in self.games:
            game.send({"type": "reset"})
        return self._batch(_answers(self.games, GodotRLGame.reset_answer)), {}

    def _unbatch(self, actions: Any) -> list[dict[str, Any]]:
        """Sub-env ``k``'s action out of the batch (a dict of arrays, or a sequence of dicts)."""
        if isinstance(actions, dict):
            return [{key: value[k] for key, value in actions.items()} for k in range(self.num_envs)]
        actions = list(actions)
        if len(actions) != self.num_envs:
            raise ValueError(f"step got {len(actions)} actions for {self.num_envs} sub-envs")
        return actions

    def step(self, actions: Any) -> tuple[Any, np.ndarray, np.ndarray, np.ndarray, dict]:
        each = self._unbatch(actions)
        n = self.agents_per_game
        messages = [game.action_message(dict(zip(game.agents, each[i * n:(i + 1) * n])))
                    for i, game in enumerate(self.games)]           # every action checked before any is sent
        for game, message in zip(self.games, messages):
            game.send(message)
        answers = _answers(self.games, GodotRLGame.step_answer)
        rewards = np.array([answer[1][a] for game, answer in zip(self.games, answers) for a in game.agents], np.float64)
        dones = np.array([answer[2][a] for game, answer in zip(self.games, answers) for a in game.agents], bool)
        return (self._batch([answer[0] for answer in answers]), rewards, dones, np.zeros(self.num_envs, bool), {})

    def call(self, method: str) -> list:
        """The protocol's ``call`` on every game: one return per sub-env."""
        return [value for game in self.games for value in game.call(method)]

    def close_extras(self, **kwargs: Any) -> None:
        for game in getattr(self, "games", []):
            game.close()


def _answers(games: list[GodotRLGame], read: Any) -> list:
    """Every game's answer, read in order; the first failure is raised once all are read."""
    answers, error = [], None
    for game in games:
        try:
            answers.append(read(game))
        except Exception as exc:  # noqa: BLE001 - re-raised after the others are read
            answers.append(None)
            error = error or exc
    if error is not None:
        raise error
    return answers
