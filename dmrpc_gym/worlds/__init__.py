"""Bundled example worlds: :class:`Catch` (a gymnasium Env) and ``Tag`` (a PettingZoo ParallelEnv).

Both run with numpy only, so every feature can be shown end to end on one
machine: ``dmrpc-gym serve dmrpc_gym.worlds:Catch`` serves Catch over dm_env_rpc.

>>> Catch().action_space
Discrete(3, start=-1, dtype=int8)
"""
from __future__ import annotations

from typing import Any

from dmrpc_gym.worlds.catch import Catch, make_catch

__all__ = ["Catch", "make_catch", "Tag", "SERVE_TARGETS"]

#: The bundled worlds by the names the client commands give them (``dmrpc-gym inspect catch``),
#: as the ``module:factory`` targets ``dmrpc-gym serve catch`` serves.
SERVE_TARGETS = {"catch": "dmrpc_gym.worlds:Catch", "tag": "dmrpc_gym.worlds:Tag"}


def __getattr__(name: str) -> Any:
    # Tag imports pettingzoo: loaded on first use only.
    if name == "Tag":
        from dmrpc_gym.worlds.tag import Tag
        return Tag
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
