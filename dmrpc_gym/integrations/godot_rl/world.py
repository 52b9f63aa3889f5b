"""What ``dmrpc-gym serve godot-rl:PATH`` serves: a factory that starts one game per world.

A world's settings are the game's: ``seed`` (``--env_seed``), ``action_repeat``, ``speedup``
and ``paced`` (see :class:`~dmrpc_gym.integrations.godot_rl.game.GodotRLGame`; the factory's
``paced`` when a world does not say). The factory returns a
:class:`~dmrpc_gym.integrations.godot_rl.envs.GodotRLEnv`
(a gymnasium world) for a one-agent game, else a
:class:`~dmrpc_gym.integrations.godot_rl.envs.GodotRLParallelEnv` (a PettingZoo world); either
offers the read-only property ``call.METHOD``. Destroying the world closes the game.
"""
from __future__ import annotations

import os
from typing import Any, Sequence

from dmrpc_gym.integrations.godot_rl.envs import GodotRLEnv, GodotRLParallelEnv
from dmrpc_gym.integrations.godot_rl.game import GodotRLGame, game_command

__all__ = ["GodotRLWorlds", "PREFIX"]

#: How ``dmrpc-gym serve`` names a Godot RL Agents game: ``godot-rl:PATH``.
PREFIX = "godot-rl:"


class GodotRLWorlds:
    """The factory of a served Godot RL Agents game: ``Server(GodotRLWorlds(PATH))``.

    Args:
        path: a Godot project folder or an exported game (checked now).
        paced: whether a world's game runs paced when its settings do not say (``paced``).
        godot, host, connect_timeout, step_timeout, extra_args: as
            :class:`~dmrpc_gym.integrations.godot_rl.game.GodotRLGame` takes them, for every world.

    >>> from dmrpc_gym.integrations.godot_rl import WALKERS_PROJECT, godot_rl_available
    >>> from dmrpc_gym.server import Server
    >>> if godot_rl_available():
    ...     import dmrpc_gym
    ...     with Server(GodotRLWorlds(WALKERS_PROJECT)) as server:
    ...         env = dmrpc_gym.parallel_env(server.address, world_settings={"seed": 3})
    ...         observations, infos = env.reset()
    ...         env.close()
    """

    #: The server builds a world's env with the world's ``seed`` (the game reads it when it starts).
    seeded_when_built = True

    def __init__(self, path: str | os.PathLike, *, paced: bool = False,
                 godot: str | os.PathLike | Sequence[str] | None = None, host: str = "127.0.0.1",
                 connect_timeout: float = 60.0, step_timeout: float | None = 60.0,
                 extra_args: Sequence[str] = ()) -> None:
        game_command(path, godot)              # a missing game or engine is said now, not at the first world
        if not isinstance(paced, bool):
            raise ValueError(f"paced must be True or False; got {paced!r}")
        self.path = os.fspath(path)
        self.paced = paced
        self.options = dict(godot=godot, host=host, connect_timeout=connect_timeout, step_timeout=step_timeout,
                            extra_args=tuple(extra_args))
        # The name the server shows (`serving godot-rl:PATH on ...`).
        self.__qualname__ = f"{PREFIX}{self.path}"
        self.__module__ = ""

    def __call__(self, seed: int | None = None, action_repeat: int | None = None,
                 speedup: float | None = None, paced: bool | None = None) -> Any:
        if paced is not None and type(paced).__name__ not in ("bool", "bool_"):     # a setting: maybe numpy's
            raise ValueError(f"world setting paced must be true or false; got {paced!r}")
        game = GodotRLGame(self.path, seed=seed, action_repeat=action_repeat, speedup=speedup,
                           paced=self.paced if paced is None else bool(paced), **self.options)
        if len(game.agents) == 1:
            return GodotRLEnv(game)
        return GodotRLParallelEnv(game)

    def __repr__(self) -> str:
        return f"GodotRLWorlds({self.path!r})"
