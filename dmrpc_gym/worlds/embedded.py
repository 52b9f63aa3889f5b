"""The embedded default: bundled worlds served in-process, so nothing external is needed.

One server per world kind is started on a free loopback port the first time
it is asked for and lives as long as the process (re-running a notebook cell
makes a new connection, never a second server or a port clash).
"""
from __future__ import annotations

import atexit
import inspect
import threading
from typing import Any, Callable, Mapping, Sequence

from dmrpc_gym.client.env import DmRpcEnv
from dmrpc_gym.client.parallel import AgentsArg, DmRpcParallelEnv

__all__ = ["embedded_server", "resolve_address", "make_catch_env", "make_catch_vector_env", "parallel_env", "tag_env", "WORLDS"]

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


def resolve_address(address: str | Sequence[str]) -> str | list[str]:
    """``address`` itself, or the embedded server's address when it names a bundled world (``"catch"``, ``"tag"``);
    for a list of addresses to fail over along, each entry so.

    >>> resolve_address("localhost:10000"), resolve_address(["h1:1", "h2:1"])
    ('localhost:10000', ['h1:1', 'h2:1'])
    >>> resolve_address("catch").startswith("127.0.0.1:")
    True
    """
    if not isinstance(address, str):
        return [resolve_address(entry) if isinstance(entry, str) else entry for entry in address]
    return embedded_server(address).address if address in WORLDS else address


def _stop_all() -> None:
    with _lock:
        for server in _servers.values():
            server.stop(grace=0)
        _servers.clear()


def make_catch_env(**kwargs: Any) -> DmRpcEnv:
    """``dmrpc/Catch-v0``: Catch on the embedded server, seeded through the ``seed`` reset setting."""
    return DmRpcEnv(embedded_server("catch").address, **kwargs)


# gymnasium.make reads the render modes from the entry point: with them, render_mode="human"
# is served by its HumanRendering wrapper over our rgb_array frames.
make_catch_env.metadata = DmRpcEnv.metadata


def make_catch_vector_env(num_envs: int = 1, **kwargs: Any):
    """``dmrpc/Catch-v0``'s vector entry point: ``num_envs`` connections to the embedded server."""
    from dmrpc_gym.client.vector import DmRpcVectorEnv
    return DmRpcVectorEnv(num_envs=num_envs, address=embedded_server("catch").address, **kwargs)


def parallel_env(address: str | None = None, *, world_settings: Mapping[str, Any] | None = None,
                 world_name: str | None = None, agents: AgentsArg = None,
                 **kwargs: Any) -> DmRpcParallelEnv:
    """A dm_env_rpc world as a PettingZoo ``ParallelEnv`` (see :class:`DmRpcParallelEnv`).

    ``agents`` defaults to the world's own agents (a dmrpc_gym server names them). Without
    ``address`` it is the bundled Tag world on the embedded in-process server (:func:`tag_env`).

    >>> import dmrpc_gym
    >>> env = dmrpc_gym.parallel_env(world_settings={"pursuers": 1, "evaders": 1})
    >>> env.possible_agents
    ['pursuer_0', 'evader_0']
    >>> env.close()
    """
    if address is None and world_name is None:
        if agents is not None:
            kwargs["agents"] = agents
        return tag_env(world_settings=world_settings, **kwargs)
    return DmRpcParallelEnv(address, world_settings=world_settings, world_name=world_name,
                            agents=agents, **kwargs)


def tag_env(*, world_settings: Mapping[str, Any] | None = None, **kwargs: Any) -> DmRpcParallelEnv:
    """The bundled Tag world (:mod:`dmrpc_gym.worlds.tag`) on the embedded server.

    Tag settings may be keywords (``size=5, homogeneous=True``) or ``world_settings``;
    the other keywords go to :class:`DmRpcParallelEnv`. The agents are named as the
    world names them, and ``reset(seed=...)`` seeds the world.

    >>> env = tag_env(pursuers=1, evaders=1, size=4, max_steps=3)
    >>> observations, infos = env.reset(seed=0)
    >>> for _ in range(3):
    ...     _, rewards, terminations, truncations, _ = env.step({a: 0 for a in env.agents})
    >>> truncations, env.agents
    ({'pursuer_0': True, 'evader_0': True}, [])
    >>> env.close()
    """
    from dmrpc_gym.worlds.tag import Tag, agents_of

    names = set(inspect.signature(Tag).parameters) - {"render_mode"}
    settings = dict(world_settings or {})
    for key in [k for k in kwargs if k in names]:
        settings[key] = kwargs.pop(key)
    if "agents" not in kwargs:
        kwargs["agents"] = agents_of(settings)
    return DmRpcParallelEnv(embedded_server("tag").address, world_settings=settings, **kwargs)
