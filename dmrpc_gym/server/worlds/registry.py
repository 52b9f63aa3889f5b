"""The worlds of one server, by name: CreateWorld, lookup, DestroyWorld.

The **default world** (world name ``""``) is created on first use with no
settings, so that clients may join without CreateWorld. Worlds are built on a
worker thread of the server's :class:`~dmrpc_gym.server.running.workers.WorkerPool`, so
a slow env constructor blocks no other request.

Worlds are bounded, as everything a peer can make the server hold:

- at most ``max_worlds`` in all and ``max_worlds_per_connection`` made by one
  connection (stream) that still has them; CreateWorld past either is answered
  RESOURCE_EXHAUSTED, naming the limit;
- a world whose creator has gone is an **orphan**. dm_env_rpc lets any
  connection join a world by name, so an orphan stays for ``orphan_lifetime``
  seconds with no agent joined (counted again from each time its last agent
  leaves), then is destroyed. DestroyWorld ends a world at any time; the
  default world is never an orphan.

While the server **drains** (:meth:`WorldRegistry.drain`) no world is created,
the default world included: CreateWorld is answered UNAVAILABLE, saying so;
the worlds held go on, but start no new sequence: the step that would (``env.reset``),
ResetRequest and ResetWorldRequest end their stream UNAVAILABLE (:func:`~dmrpc_gym.server.serving.status.draining`),
so that the drain is over once every running episode has ended. :meth:`room` says why no world can be created now, and
the callables in ``watchers`` are called whenever that may have changed (the
health service reports it).
"""
from __future__ import annotations

import asyncio
import itertools
import uuid
import logging
from typing import Any, Callable, Mapping

from dmrpc_gym.protocol.wire import pb
from dmrpc_gym.server.serving import status
from dmrpc_gym.server.worlds.aec_world import AECWorld
from dmrpc_gym.server.envs.factories import RENDER_MODE, Factory, close_quietly
from dmrpc_gym.server.worlds.dm_env_world import DmEnvWorld
from dmrpc_gym.server.worlds.gym_world import GymWorld
from dmrpc_gym.server.worlds.parallel_world import ParallelWorld
from dmrpc_gym.server.worlds.settings import describe, pop_seed, unpack_settings
from dmrpc_gym.server.serving.stats import ServerStats
from dmrpc_gym.server.serving.watching import Watches
from dmrpc_gym.server.running.workers import Lane, WorkerPool

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
        max_worlds: worlds the server holds at most (CreateWorld past it: RESOURCE_EXHAUSTED).
        max_worlds_per_connection: worlds one connection may have made and not destroyed.
        orphan_lifetime: seconds an orphan world (its creator gone) lives with no agent joined.
        stats: where worlds made, destroyed and refused are counted (None: its own).

    >>> import asyncio
    >>> from dmrpc_gym.protocol import tensors
    >>> from dmrpc_gym.worlds.catch import Catch
    >>> from dmrpc_gym.server.worlds.interface import StepAnswer
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
                 pool: WorkerPool | None = None, max_worlds: int = 1024, max_worlds_per_connection: int = 64,
                 orphan_lifetime: float = 60.0, stats: ServerStats | None = None):
        self.factory = factory
        self.stats = stats if stats is not None else ServerStats()
        self.max_worlds = max_worlds
        self.max_worlds_per_connection = max_worlds_per_connection
        self.orphan_lifetime = orphan_lifetime
        self._creators: dict[str, object] = {}        # world name -> the connection that made it
        self._orphans: dict[str, asyncio.TimerHandle | None] = {}   # name -> its expiry, when unjoined
        self._building = 0
        self.default_world = default_world
        self.timeout = timeout
        self.pool = pool
        self._worlds: dict[str, Any] = {}
        self._numbers = itertools.count(1)
        #: Names this run of the server: a client that lost its connection rejoins its world by
        #: name only if the server it reaches again has the same instance (names restart at world-1).
        self.instance = uuid.uuid4().hex
        self._default: asyncio.Future | None = None   # the default world being built
        self.draining = False
        #: Called (no arguments) whenever the worlds held, or whether one can be created, may have changed.
        self.watchers: list[Callable[[], None]] = []
        #: The dashboards watching the worlds (:mod:`~dmrpc_gym.server.serving.watching`).
        self.watches = Watches(self)

    def _changed(self) -> None:
        for watcher in self.watchers:
            watcher()

    def drain(self) -> None:
        """The server drains: no world is created from now on; those held go on, and start no new
        sequence (each world's ``drain()``: the step that would start one ends its stream)."""
        self.draining = True
        for world in self._worlds.values():
            world.drain()
        self._changed()

    def room(self) -> str | None:
        """Why no world can be created now (the server drains, or holds ``max_worlds``), else None."""
        if self.draining:
            return status.drain_notice("worlds")
        if len(self._worlds) + self._building >= self.max_worlds:
            return (f"this server holds {self.max_worlds} worlds, its limit (max_worlds): "
                    f"destroy one with DestroyWorld first")
        return None

    def playing(self) -> int:
        """How many agents are in an episode that runs (or starts): what a drain waits for. An agent
        joined between episodes is not: the next one it asks for would be refused."""
        return sum(world.playing() for world in self._worlds.values())

    def names(self) -> list[str]:
        return list(self._worlds)

    def worlds(self) -> list[Any]:
        """The worlds held now."""
        return list(self._worlds.values())

    def _build(self, name: str, kwargs: dict[str, Any], seed: int | None, lane: Lane) -> Any:
        """Build a world and its first env (on a worker thread)."""
        env, kind = self.factory.make(kwargs, seed)
        try:
            if kind in ("gym", "dm_env"):
                return (GymWorld if kind == "gym" else DmEnvWorld)(name, self.factory, kwargs, seed, env, lane, self.pool)
            world = AECWorld if kind == "aec" else ParallelWorld     # turn-based, or in rounds
            return world(name, self.factory, kwargs, seed, env, self.timeout, lane)
        except BaseException:
            close_quietly(env)
            raise

    async def _make(self, name: str, kwargs: dict[str, Any], seed: int | None, asked: str | None) -> Any:
        self.factory.check(kwargs, "world")
        recipe = {**kwargs, RENDER_MODE: self.factory.rendering(asked)}
        lane = self.pool.lane() if self.pool is not None else Lane(None)
        world = await lane.build(lambda world: world.close(), self._build, name, recipe, seed, lane)
        self._worlds[name] = world
        if self.draining:            # built while the drain began
            world.drain()
        self.stats.world_made(world.counts)
        self._changed()
        log.info("created world %r (%s) with %s (render_mode=%r)", name, world.kind, describe(kwargs),
                 recipe[RENDER_MODE].mode)
        return world

    async def create(self, settings: Mapping[str, pb.Tensor], creator: object = None,
                     asked: str | None = None, lists: Any = ()) -> str:
        """CreateWorld: build a world from the settings; returns its unique name.

        ``creator``: the connection asking (its worlds count toward
        ``max_worlds_per_connection``, and become orphans when it calls :meth:`creator_left`);
        ``asked``: the render_mode its client named (None: a foreign client; see
        :meth:`~dmrpc_gym.server.envs.factories.Factory.rendering`).
        """
        why = self.room()
        if why is not None:
            if not self.draining:
                self.stats.refuse("max_worlds")
            raise (status.unavailable if self.draining else status.resource_exhausted)(why)
        if creator is not None:
            made = sum(1 for who in self._creators.values() if who is creator)
            if made >= self.max_worlds_per_connection:
                self.stats.refuse("max_worlds_per_connection")
                raise status.resource_exhausted(
                    f"this connection has made {made} worlds, the limit per connection "
                    f"(max_worlds_per_connection): destroy one with DestroyWorld first")
        kwargs = unpack_settings(settings, "world", lists)    # lists: those the client was given as lists
        seed = pop_seed(kwargs, "world")
        name = f"world-{next(self._numbers)}"
        self._building += 1
        self._changed()
        try:
            await self._make(name, kwargs, seed, asked)
        finally:
            self._building -= 1
            self._changed()
        if creator is not None:
            self._creators[name] = creator
        return name

    def creator_left(self, creator: object) -> None:
        """The connection ``creator`` has ended: the worlds it made become orphans."""
        for name in [name for name, who in self._creators.items() if who is creator]:
            del self._creators[name]
            self._orphans[name] = None
            self.vacated(name)

    def vacated(self, name: str) -> None:
        """An agent left world ``name``: an orphan with no agent left expires after ``orphan_lifetime``."""
        world = self._worlds.get(name)
        if name not in self._orphans or world is None or world.agents:
            return
        timer = self._orphans[name]
        if timer is not None:
            timer.cancel()
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:          # the server is stopping: close() ends every world
            return
        self._orphans[name] = loop.call_later(self.orphan_lifetime, self._expire, name, world)

    def _expire(self, name: str, world: Any) -> None:
        self._orphans[name] = None
        if self._worlds.get(name) is world and not world.agents:
            self._forget(name).close()
            log.info("destroyed world %r: no agent joined it within %g s after its creator left",
                     name, self.orphan_lifetime)

    def _forget(self, name: str) -> Any:
        """Remove world ``name`` (and its bookkeeping); the world, to close."""
        timer = self._orphans.pop(name, None)
        if timer is not None:
            timer.cancel()
        self._creators.pop(name, None)
        world = self._worlds.pop(name)
        self.stats.world_gone(world.counts)
        self._changed()
        return world

    async def get(self, name: str, asked: str | None = None) -> Any:
        """The world named ``name`` (the default world is created here on first use, rendering as
        ``asked``, the first joiner's render_mode, asks)."""
        world = self._worlds.get(name)
        if world is not None:
            return world
        if name == DEFAULT_WORLD and self.default_world:
            if self.draining:
                raise status.unavailable(f"there is no default world yet, and {self.room()}")
            if self._default is None:   # one build, however many join at once
                self._default = asyncio.ensure_future(self._make(name, {}, None, asked))
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
        self._forget(name).close()
        log.info("destroyed world %r", name)

    def close(self) -> None:
        """Close every world (the server is stopping)."""
        for timer in self._orphans.values():
            if timer is not None:
                timer.cancel()
        worlds, self._worlds, self._orphans, self._creators = list(self._worlds.values()), {}, {}, {}
        for world in worlds:
            self.stats.world_gone(world.counts)
            try:
                world.close()
            except Exception:  # noqa: BLE001 - stopping is best effort
                log.exception("closing a world failed")
