"""Godot RL Agents games as a PettingZoo ``ParallelEnv`` and, with one agent, a gymnasium ``Env``.

Both drive a :class:`~dmrpc_gym.integrations.godot_rl.game.GodotRLGame` directly, with no
server. Episodes follow the protocol (said by name, once per game, as a
:class:`~dmrpc_gym.integrations.godot_rl.game.GodotRLWarning`): the step that carries an
agent's ``done`` ends its episode (``terminated``; ``truncated`` is always False) with the
observation the game sent, which already belongs to the agent's next episode. In the
``ParallelEnv`` the agent then leaves ``agents`` (PettingZoo's rule); the game still gets an
action for it each step, a neutral one (zeros, the first discrete value), and what comes
back for it is dropped; the episode ends when no agent is left. ``reset()`` sends the
protocol's ``reset``.

Seeds: a Godot RL Agents game reads its seed when it starts (``--env_seed``). ``reset(seed=s)``
therefore starts the game again with ``s``, unless it was just started with ``s`` and has
not been sent anything since; either way the episode is the one a new game seeded ``s`` plays.
"""
from __future__ import annotations

import json
import os
from typing import Any, Sequence

import gymnasium as gym
from pettingzoo import ParallelEnv

from dmrpc_gym.integrations.godot_rl.game import GodotRLGame
from dmrpc_gym.integrations.godot_rl.spaces import neutral_action

__all__ = ["GodotRLParallelEnv", "GodotRLEnv", "start_game", "seeded_reset"]


def start_game(game: GodotRLGame | str | os.PathLike, options: dict) -> GodotRLGame:
    """``game`` if it is a started game, else the game at that path started with ``options``."""
    if isinstance(game, GodotRLGame):
        if any(value is not None for key, value in options.items() if key in ("seed", "action_repeat", "speedup")):
            raise ValueError("seed, action_repeat and speedup are the started game's; pass a path to set them")
        return game
    return GodotRLGame(game, **options)


def seeded_reset(game: GodotRLGame, seed: int | None) -> dict[str, dict]:
    """The protocol's ``reset``; with ``seed``, of a game started with that seed (see the module doc)."""
    if seed is not None and not (game.fresh and game.seed == seed):
        game.restart(seed)
    return game.reset()


def _call_property(game: GodotRLGame) -> list:
    """The read-only property family ``call.METHOD`` (each agent's return, as JSON text)."""
    from dmrpc_gym.protocol.wire import pb          # the server's property type: imported when served
    from dmrpc_gym.server.worlds.properties import Property

    def resolve(key: str) -> Property | None:
        method = key[len("call."):] if key.startswith("call.") else ""
        if not method:
            return None
        return Property(key, pb.STRING, f"the game's call of {method!r}",
                        read=lambda: [json.dumps(value) for value in game.call(method)], shape=(-1,))

    return [Property("call.METHOD", pb.STRING,
                     "read call.METHOD: the protocol's call of METHOD on every agent in the game, "
                     "each agent's return as JSON text (a per-agent list)", shape=(-1,), resolve=resolve)]


class _GameEnv:
    """What both envs do with their game (``self.game``): start it (or take a started one), then
    :meth:`_took` (each env's own setting up); the protocol's ``call``, the served property
    ``call.METHOD``, and closing."""

    def __init__(self, game: GodotRLGame | str | os.PathLike, *, seed: int | None = None,
                 action_repeat: int | None = None, speedup: float | None = None,
                 godot: str | os.PathLike | Sequence[str] | None = None, host: str = "127.0.0.1",
                 connect_timeout: float = 60.0, step_timeout: float | None = 60.0,
                 extra_args: Sequence[str] = ()) -> None:
        self.game = start_game(game, dict(seed=seed, action_repeat=action_repeat, speedup=speedup, godot=godot,
                                          host=host, connect_timeout=connect_timeout,
                                          step_timeout=step_timeout, extra_args=extra_args))
        self._took()

    def _took(self) -> None:
        """Set up the env for ``self.game`` (a subclass's)."""
        raise NotImplementedError

    def call(self, method: str) -> list:
        """The protocol's ``call``: ``method`` called on every agent in the game; their returns, in agent
        order (a one-agent game's: a one-element list)."""
        return self.game.call(method)

    def dmrpc_properties(self) -> list:
        """Served, this env offers the read-only property ``call.METHOD`` (see :meth:`call`)."""
        return _call_property(self.game)

    def close(self) -> None:
        """Send ``close`` and end the game's process; idempotent, always returns."""
        self.game.close()


class GodotRLParallelEnv(_GameEnv, ParallelEnv):
    """A Godot RL Agents game as a PettingZoo ``ParallelEnv``: one agent per ``AIController``.

    Args:
        game: a Godot project folder or an exported game (started here), or a started
            :class:`~dmrpc_gym.integrations.godot_rl.game.GodotRLGame`.
        seed, action_repeat, speedup, godot, host, connect_timeout, step_timeout, extra_args:
            as :class:`~dmrpc_gym.integrations.godot_rl.game.GodotRLGame` takes them.

    Agents are named ``f"{policy}_{i}"`` (``agent_{i}`` when the game sends no policy names);
    each one's spaces are a ``Dict`` of the game's entries. :meth:`call` is the protocol's call.

    >>> from dmrpc_gym.integrations.godot_rl import WALKERS_PROJECT, godot_rl_available
    >>> if godot_rl_available():
    ...     env = GodotRLParallelEnv(WALKERS_PROJECT, seed=1)
    ...     observations, infos = env.reset()
    ...     actions = {agent: env.action_space(agent).sample() for agent in env.agents}
    ...     observations, rewards, terminations, truncations, infos = env.step(actions)
    ...     env.close()
    """

    metadata = {"name": "godot_rl", "render_modes": [], "is_parallelizable": True}

    def _took(self) -> None:
        self.possible_agents = list(self.game.agents)
        self.agents: list[str] = []
        self.observation_spaces = dict(self.game.observation_spaces)
        self.action_spaces = dict(self.game.action_spaces)
        self._neutral = {agent: neutral_action(space) for agent, space in self.action_spaces.items()}
        self.render_mode = None

    def observation_space(self, agent: str) -> gym.spaces.Dict:
        return self.observation_spaces[agent]

    def action_space(self, agent: str) -> gym.spaces.Dict:
        return self.action_spaces[agent]

    def reset(self, seed: int | None = None, options: dict | None = None) -> tuple[dict, dict]:
        observations = seeded_reset(self.game, seed)
        self.agents = list(self.possible_agents)
        return observations, {agent: {} for agent in self.agents}

    def step(self, actions: dict[str, Any]) -> tuple[dict, dict, dict, dict, dict]:
        live = self.agents
        if not live:
            raise RuntimeError("the episode has ended (no agent is left): call reset()")
        if len(actions) != len(live) or actions.keys() != set(live):
            unknown = [agent for agent in actions if agent not in live]
            if unknown:
                raise ValueError(f"actions for agent(s) {', '.join(map(str, unknown))} not in this episode's "
                                 f"agents ({', '.join(live)})")
            raise ValueError(f"no action for agent(s) {', '.join(agent for agent in live if agent not in actions)}")
        everyone = len(live) == len(self.possible_agents)
        observations, rewards, dones, infos = self.game.step(
            actions if everyone else {agent: actions[agent] if agent in actions else self._neutral[agent]
                                      for agent in self.possible_agents})
        self.agents = [agent for agent in live if not dones[agent]]
        if everyone:                 # the game's answer is every live agent's: no copies
            return observations, rewards, dones, dict.fromkeys(live, False), infos
        return ({a: observations[a] for a in live}, {a: rewards[a] for a in live}, {a: dones[a] for a in live},
                dict.fromkeys(live, False), {a: infos[a] for a in live})


class GodotRLEnv(_GameEnv, gym.Env):
    """A one-agent Godot RL Agents game as a gymnasium ``Env`` (a ``Dict`` observation and action).

    Takes the arguments of :class:`GodotRLParallelEnv`; a game with more agents is a ``ValueError``
    (drive it with :class:`GodotRLParallelEnv`, or as one sub-env per agent with
    :class:`~dmrpc_gym.integrations.godot_rl.vector.GodotRLVectorEnv`). After ``terminated`` call
    ``reset()``: it sends the protocol's ``reset``.

    >>> from dmrpc_gym.integrations.godot_rl import WALKERS_PROJECT, godot_rl_available
    >>> if godot_rl_available():
    ...     GodotRLEnv(WALKERS_PROJECT)
    Traceback (most recent call last):
    ...
    ValueError: Godot RL Agents game ... has 2 agents (walker_0, walker_1); a gymnasium Env drives one: use GodotRLParallelEnv or GodotRLVectorEnv
    """

    metadata = {"render_modes": []}

    def _took(self) -> None:
        if len(self.game.agents) != 1:
            self.game.close()
            raise ValueError(f"Godot RL Agents game {self.game.path!r} has {len(self.game.agents)} agents "
                             f"({', '.join(self.game.agents)}); a gymnasium Env drives one: use "
                             "GodotRLParallelEnv or GodotRLVectorEnv")
        self.agent = self.game.agents[0]
        self.observation_space = self.game.observation_spaces[self.agent]
        self.action_space = self.game.action_spaces[self.agent]
        self.render_mode = None

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[dict, dict]:
        super().reset(seed=seed)
        return seeded_reset(self.game, seed)[self.agent], {}

    def step(self, action: Any) -> tuple[dict, float, bool, bool, dict]:
        observations, rewards, dones, infos = self.game.step({self.agent: action})
        a = self.agent
        return observations[a], rewards[a], dones[a], False, infos[a]

