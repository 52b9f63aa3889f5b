"""Godot RL Agents games as gymnasium, PettingZoo and dm_env_rpc worlds.

Godot RL Agents (the ``godot-rl`` Python package and its Godot plugin) connects a game to
Python over TCP (:mod:`~dmrpc_gym.integrations.godot_rl.wire`). This package is the Python
side of that protocol, its own: :class:`GodotRLGame` launches a game (a Godot project
folder run by ``godot3-server``, or an exported game) on a port the OS picked and drives it;
:class:`GodotRLParallelEnv` (PettingZoo), :class:`GodotRLEnv` (gymnasium, one agent) and
:class:`GodotRLVectorEnv` (``n_parallel`` games) drive it directly; :class:`GodotRLWorlds`
serves it (``dmrpc-gym serve godot-rl:PATH``). What the protocol cannot say is said once per
game as a :class:`GodotRLWarning`. ``WALKERS_PROJECT`` is the bundled two-agent game.

>>> if godot_rl_available():
...     env = GodotRLParallelEnv(WALKERS_PROJECT, seed=0)
...     print(env.possible_agents, env.call("get_episodes"))
...     env.close()
['walker_0', 'walker_1'] [1, 1]
"""
from __future__ import annotations

from pathlib import Path

import dmrpc_gym.worlds
from dmrpc_gym.integrations.godot.launch import find_godot
from dmrpc_gym.integrations.godot_rl.envs import GodotRLEnv, GodotRLParallelEnv
from dmrpc_gym.integrations.godot_rl.game import LOSSES, GodotRLGame, GodotRLWarning
from dmrpc_gym.integrations.godot_rl.vector import GodotRLVectorEnv
from dmrpc_gym.integrations.godot_rl.wire import GodotRLProtocolError
from dmrpc_gym.integrations.godot_rl.world import PREFIX, GodotRLWorlds

__all__ = ["GodotRLGame", "GodotRLParallelEnv", "GodotRLEnv", "GodotRLVectorEnv", "GodotRLWorlds",
           "GodotRLWarning", "GodotRLProtocolError", "LOSSES", "PREFIX", "WALKERS_PROJECT", "godot_rl_available"]

#: The Godot project folder of the bundled Walkers game (two agents, its own game side of the protocol).
WALKERS_PROJECT = Path(dmrpc_gym.worlds.__file__).resolve().parent / "godot_rl_walkers"


def godot_rl_available() -> bool:
    """Whether a Godot executable is found to run a project folder (see ``find_godot``)."""
    try:
        find_godot()
    except FileNotFoundError:
        return False
    return True
