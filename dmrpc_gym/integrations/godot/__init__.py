"""Godot games as gymnasium envs: the GymGodot JSON protocol, with a real engine.

:class:`GodotEnv` starts a Godot game that speaks the protocol and drives it as a
gymnasium Env; :class:`GodotVectorEnv` steps N games at once; the bundled Catch
world (:func:`make_godot_catch`, ``gym.make("dmrpc/GodotCatch-v0")``) is a small Godot 3
project shipped in the package. Registered ids: ``dmrpc/Godot-v0`` (your own game) and
``dmrpc/GodotCatch-v0``. Needs a Godot 3 executable (``apt-get install godot3-server``)
and ``websockets`` (the ``godot`` extra).

>>> import gymnasium as gym, dmrpc_gym
>>> if godot_available():
...     env = gym.make("dmrpc/GodotCatch-v0")
...     obs, info = env.reset(seed=0)
...     env.close()
"""
from __future__ import annotations

from dmrpc_gym.integrations.godot.catch import CATCH_PROJECT, make_godot_catch, make_godot_catch_vector
from dmrpc_gym.integrations.godot.channel import GodotProtocolError
from dmrpc_gym.integrations.godot.env import GodotEnv
from dmrpc_gym.integrations.godot.launch import find_godot
from dmrpc_gym.integrations.godot.vector import GodotVectorEnv

__all__ = ["GodotEnv", "GodotVectorEnv", "GodotProtocolError", "CATCH_PROJECT", "make_godot_catch",
           "make_godot_catch_vector", "find_godot", "godot_available"]


def godot_available() -> bool:
    """Whether a Godot executable is found (see :func:`find_godot`) and ``websockets`` is installed."""
    try:
        import websockets.sync.server  # noqa: F401
        find_godot()
    except (ImportError, FileNotFoundError):
        return False
    return True
