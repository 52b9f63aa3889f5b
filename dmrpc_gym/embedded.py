"""The embedded default: bundled worlds served in-process, so nothing external is needed.

One server per world kind is started on a free loopback port the first time
it is asked for and lives as long as the process (re-running a notebook cell
makes a new connection, never a second server or a port clash).
"""
from __future__ import annotations

import atexit
import threading
from typing import Any, Callable

from dmrpc_gym.env import DmRpcEnv

__all__ = ["embedded_server", "make_catch_env", "make_catch_vector_env", "WORLDS"]

_lock = threading.Lock()
_servers: dict[str, Any] = {}


def _catch_factory() -> Callable:
    from dmrpc_gym.worlds.catch import Catch
    return Catch


def _tag_factory() -> Callable:
    from dmrpc_gym.worlds.tag import Tag
    return Tag


#: Bundled world name -> a function returning its env factory.
WORLDS: dict[str, Callable[[], Callable]] = {"catch": _catch_factory, "tag": _tag_factory}


def embedded_server(world: str = "catch"):
    """The in-process server of a bundled world, started on first use."""
    with _lock:
        server = _servers.get(world)
        if server is None:
            from dmrpc_gym.server import Server
            if world not in WORLDS:
                raise ValueError(f"unknown bundled world {world!r}; expected one of {sorted(WORLDS)}")
            server = Server(WORLDS[world]()).start()
            _servers[world] = server
            if len(_servers) == 1:
                atexit.register(_stop_all)
        return server


def _stop_all() -> None:
    with _lock:
        for server in _servers.values():
            server.stop(grace=0)
        _servers.clear()


def make_catch_env(**kwargs: Any) -> DmRpcEnv:
    """``dmrpc/Catch-v0``: Catch on the embedded server, seeded through the ``seed`` reset setting."""
    kwargs.setdefault("seed_setting", "seed")
    return DmRpcEnv(embedded_server("catch").address, **kwargs)


def make_catch_vector_env(num_envs: int = 1, **kwargs: Any):
    """``dmrpc/Catch-v0``'s vector entry point: ``num_envs`` connections to the embedded server."""
    from dmrpc_gym.vector import DmRpcVectorEnv
    kwargs.setdefault("seed_setting", "seed")
    return DmRpcVectorEnv(num_envs=num_envs, address=embedded_server("catch").address, **kwargs)
