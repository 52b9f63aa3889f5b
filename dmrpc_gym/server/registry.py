"""The worlds of one server, by name: CreateWorld, lookup, DestroyWorld.

The **default world** (world name ``""``) is created on first use with no
settings, so that clients may join without CreateWorld. Worlds are built on a
worker thread of the server's :class:`~dmrpc_gym.server.workers.WorkerPool`, so
a slow env constructor blocks no other request.
"""
from __future__ import annotations

import asyncio
import itertools
import uuid
import logging
from typing import Any, Mapping

from dmrpc_gym.protocol.wire import pb
from dmrpc_gym.server import status
from dmrpc_gym.server.factories import Factory, close_quietly
from dmrpc_gym.server.dm_env_world import DmEnvWorld
from dmrpc_gym.server.gym_world import GymWorld
from dmrpc_gym.server.parallel_world import ParallelWorld
from dmrpc_gym.server.settings import describe, pop_seed, unpack_settings
from dmrpc_gym.server.workers import Lane, WorkerPool

__all__ = ["WorldRegistry", "DEFAULT_WORLD"]

log = logging.getLogger("dmrpc_gym.server")

#: The name of the world clients join without creating one.
DEFAULT_WORLD = ""


class WorldRegistry:
    """The worlds of one server, by name: CreateWorld, lookup, DestroyWorld.

    Args:
        factory: the resolved env factory.
        default_world: whether world name ``""`` names a world created on first use.
        timeout: seconds a multi-agent wait may see no progress before it fails.
        pool: where env calls run (None: inline, on the caller's thread).

    >>> import asyncio
    >>> from dmrpc_gym.protocol import tensors
    >>> from dmrpc_gym.worlds.catch import Catch
    >>> from dmrpc_gym.server.interface import StepAnswer
    >>> registry = WorldRegistry(Factory(Catch))
    >>> async def demo():
    ...     name = await registry.create({"rows": tensors.pack(4), "seed": tensors.pack(1)})
    ...     agent = await (await registry.get(name)).join({})
    ...     out = StepAnswer()
    ...     await agent.step(pb.StepRequest(), out)   # the first step starts a sequence
    ...     agent.leave(); registry.destroy(name, joined=None)
    ...     return pb.EnvironmentStateType.Name(out.state), agent.episode_step, registry.names()
    >>> asyncio.run(demo())
    ('RUNNING', 0, [])
    """

    def __init__(self, factory: Factory, default_world: bool = True, timeout: float = 30.0,
                 pool: WorkerPool | None = None):
        self.factory = factory
        self.default_world = default_world
        self.timeout = timeout
        self.pool = pool
        self._worlds: dict[str, Any] = {}
        self._numbers = itertools.count(1)
        #: Names this run of the server: a client that lost its connection rejoins its world by
        #: name only if the server it reaches again has the same instance (names restart at world-1).
        self.instance = uuid.uuid4().hex
        self._default: asyncio.Future | None = None   # the default world being built

    def names(self) -> list[str]:
        return list(self._worlds)

    def _build(self, name: str, kwargs: dict[str, Any], seed: int | None, lane: Lane) -> Any:
        """Build a world and its first env (on a worker thread)."""
        env, kind = self.factory.make(kwargs)
        try:
            if kind in ("gym", "dm_env"):
                return (GymWorld if kind == "gym" else DmEnvWorld)(name, self.factory, kwargs, seed, env, lane, self.pool)
            return ParallelWorld(name, self.factory, kwargs, seed, env, self.timeout, lane)
        except BaseException:
            close_quietly(env)
            raise

    async def _make(self, name: str, kwargs: dict[str, Any], seed: int | None) -> Any:
        self.factory.check(kwargs, "world")
        lane = self.pool.lane() if self.pool is not None else Lane(None)
        world = await lane.build(lambda world: world.close(), self._build, name, kwargs, seed, lane)
        self._worlds[name] = world
        log.info("created world %r (%s) with %s", name, world.kind, describe(kwargs))
        return world

    async def create(self, settings: Mapping[str, pb.Tensor]) -> str:
        """CreateWorld: build a world from the settings; returns its unique name."""
        kwargs = unpack_settings(settings, "world")
        seed = pop_seed(kwargs, "world")
        name = f"world-{next(self._numbers)}"
        await self._make(name, kwargs, seed)
        return name

    async def get(self, name: str) -> Any:
        """The world named ``name`` (the default world is created here on first use)."""
        world = self._worlds.get(name)
        if world is not None:
            return world
        if name == DEFAULT_WORLD and self.default_world:
            if self._default is None:   # one build, however many join at once
                self._default = asyncio.ensure_future(self._make(name, {}, None))
                self._default.add_done_callback(self._built_default)
            return await asyncio.shield(self._default)
        if name == DEFAULT_WORLD:
            raise status.not_found("this server has no default world: create one with "
                                   "CreateWorld and join it by its name")
        known = ", ".join(repr(n) for n in self._worlds) or "none"
        raise status.not_found(f"no world named {name!r} (worlds: {known})")

    def _built_default(self, future: asyncio.Future) -> None:
        self._default = None
        if not future.cancelled():
            future.exception()  # retrieved: each waiter got it

    def destroy(self, name: str, joined: Any) -> None:
        """DestroyWorld: refused while any connection (``joined`` is the caller's world) is joined."""
        world = self._worlds.get(name)
        if world is None:
            known = ", ".join(repr(n) for n in self._worlds) or "none"
            raise status.not_found(f"no world named {name!r} to destroy (worlds: {known})")
        if world is joined:
            raise status.failed_precondition(
                f"cannot destroy world {name!r}: this connection is joined to it; send LeaveWorld first")
        if world.agents:
            raise status.failed_precondition(
                f"cannot destroy world {name!r}: {len(world.agents)} agent(s) are joined to it")
        del self._worlds[name]
        world.close()
        log.info("destroyed world %r", name)

    def close(self) -> None:
        """Close every world (the server is stopping)."""
        worlds, self._worlds = list(self._worlds.values()), {}
        for world in worlds:
            try:
                world.close()
            except Exception:  # noqa: BLE001 - stopping is best effort
                log.exception("closing a world failed")
