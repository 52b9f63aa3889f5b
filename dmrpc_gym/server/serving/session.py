"""The per-stream state machine behind the dm_env_rpc method.

Every stream is one :class:`Session`: not joined, or joined to one world as
one agent. Requests arrive as bytes and are parsed here, so bytes that
are no ``EnvironmentRequest`` get an error
response like any other bad request. Every failure is answered with a
``google.rpc.Status`` (code and a message naming what was wrong) and leaves
the stream open and the session's state unchanged: only the client ends a
stream. A stream that ends for any reason (the client closes it, cancels it
or disappears) leaves its world. The one exception: while the server drains,
a request that would start a new sequence (Reset, ResetWorld, the step that
calls ``env.reset``) ends the stream UNAVAILABLE, saying so, and so leaves the
world: the drain waits only for episodes that run.

Requests, by state:

- CreateWorld, ResetWorld, DestroyWorld, extension (properties): any time.
  DestroyWorld is refused for the world the caller is joined to, and for a
  world other connections are joined to.
- JoinWorld: only when not joined (else FAILED_PRECONDITION).
- Step, Reset: only when joined (else FAILED_PRECONDITION).
- LeaveWorld: a no-op when not joined.

Handlers that call envs await them (they run on worker threads): the stream's
next request is read only after the answer, so one stream's requests are
answered strictly in order while other streams go on.
"""
from __future__ import annotations

import logging
from time import perf_counter
from typing import Any, Mapping

import grpc
import numpy as np

from dmrpc_gym.protocol import large_tensors
from dmrpc_gym.protocol.errors import DmRpcError
from dmrpc_gym.protocol.fidelity import LISTS_METADATA, RENDER_METADATA, listed_settings
from dmrpc_gym.server.worlds import properties
from dmrpc_gym.server.serving import status
from dmrpc_gym.server.worlds.interface import StepAnswer
from dmrpc_gym.server.worlds.properties import Property
from dmrpc_gym.server.worlds.registry import WorldRegistry
from dmrpc_gym.server.serving.stats import STATUS_PROPERTY
from dmrpc_gym.server.serving.steady import SteadyServe
from dmrpc_gym.protocol.wire import pb
from dmrpc_gym.transport import RegionLink, SharedMemoryHost, StreamError

__all__ = ["Session"]

log = logging.getLogger("dmrpc_gym.server")

_parse = pb.EnvironmentRequest.FromString
#: The requests that start new sequences, refused while the server drains.
_STARTS = ("reset", "reset_world")


def error_response(code: int, message: str) -> bytes:
    """A serialized ``EnvironmentResponse`` carrying only ``error``."""
    response = pb.EnvironmentResponse()
    response.error.code = code
    response.error.message = message
    return response.SerializeToString()


class Session:
    """One connection's state (joined agent or not) and the handling of its requests; ``headers``:
    the stream's request headers (a dmrpc_gym client names its render_mode there).

    >>> from dmrpc_gym.server.envs.factories import Factory
    >>> from dmrpc_gym.worlds.catch import Catch
    >>> import asyncio
    >>> session = Session(WorldRegistry(Factory(Catch)))
    >>> raw = pb.EnvironmentRequest(step=pb.StepRequest()).SerializeToString()
    >>> pb.EnvironmentResponse.FromString(asyncio.run(session.handle(raw))).error.message
    'step needs a joined world: send JoinWorldRequest first'
    """

    def __init__(self, registry: WorldRegistry, headers: Mapping[str, str] | None = None,
                 shared_memory: SharedMemoryHost | None = None):
        self.registry = registry
        #: The stream's shared memory, where the server offers it and the client asked (:mod:`~dmrpc_gym.transport.shared_memory`).
        self._shared = shared_memory
        self.regions: RegionLink | None = None if shared_memory is None else shared_memory.link(headers or {})
        #: The render_mode a dmrpc_gym client named in its request headers (None: a foreign client).
        self.render_asked = (headers or {}).get(RENDER_METADATA)
        #: The world settings a dmrpc_gym client was given as Python lists (protocol.fidelity.lists_header).
        self.lists = listed_settings((headers or {}).get(LISTS_METADATA))
        self.agent: Any = None
        #: The steady-state answer of the joined agent (:mod:`~dmrpc_gym.server.serving.steady`), or None.
        self.steady: Any = None
        self._steady: SteadyServe | None = None
        self._handlers = {
            "create_world": self._create_world, "join_world": self._join_world,
            "reset": self._reset, "reset_world": self._reset_world,
            "leave_world": self._leave_world, "destroy_world": self._destroy_world,
            "extension": self._extension,
        }

    async def handle(self, raw: bytes) -> bytes | list:
        """Answer one serialized request with one serialized response.

        A step's answer is written by hand and comes as a list of pieces, to send
        unjoined (:class:`~dmrpc_gym.server.worlds.interface.StepAnswer`); large actions
        are read in place (:func:`~dmrpc_gym.protocol.large_tensors.split`).
        """
        try:                                # (a steady answer was asked for once by the transport: none came)
            large, asked = None, raw             # (asked: the request as it came, targets and all)
            regions = self.regions
            if regions is not None and regions.region is not None:    # references into the region: copied out
                raw, large = regions.resolve(raw, large_tensors.ACTIONS)
                large = large or None
            if len(raw) >= large_tensors.LARGE:
                raw, found = large_tensors.split(raw, large_tensors.ACTIONS, large_tensors.NO_SPECS if self.agent is None else self.agent.specs)
                large = {**large, **found} if large else found
            request = _parse(raw)
        except Exception as exc:  # noqa: BLE001 - any parse failure is the client's
            return error_response(status.code(grpc.StatusCode.INVALID_ARGUMENT),
                                  f"the request is not a valid EnvironmentRequest ({len(raw)} bytes): {exc}")
        which = request.WhichOneof("payload")
        try:
            if which in _STARTS and self.registry.draining:   # the worlds refuse a step that would start one
                raise status.draining(f"episodes (this {which} request would start one)")
            if which == "step":
                agent = self.agent
                if agent is None:
                    raise status.failed_precondition("step needs a joined world: send JoinWorldRequest first")
                out = StepAnswer()
                if regions is not None and regions.writes:       # the large observations: into the region
                    out.regions = regions
                lane = agent.lane
                spent, start = lane.spent, perf_counter()
                await agent.step(request.step, out, large)
                agent.world.counts.record(perf_counter() - start, lane.spent - spent)
                if self.steady is not None and large is None:   # its layout, for the steady path
                    return self._steady.learn(asked, request.step, out.message())
                return out.message()
            handler = self._handlers.get(which)
            if handler is None:
                if raw:
                    raise status.unimplemented("the request's payload is not one this server knows "
                                               "(dm_env_rpc v1 requests and the properties extension)")
                raise status.invalid_argument("the request is empty (no payload is set)")
            response = pb.EnvironmentResponse()
            await handler(getattr(request, which), response)
        except StreamError as exc:     # the request ends the stream (the server drains)
            log.info("%s refused, its stream ended: %s", which, exc)
            raise                      # (the transport counts the status it ends with)
        except Exception as exc:  # noqa: BLE001 - a refusal, or a server bug: it must not end the stream
            return self._failure(which, exc)
        return response.SerializeToString()

    def _failure(self, which: str | None, exc: Exception) -> bytes:
        """The answer to a ``which`` request that raised ``exc``: its status (a ``DmRpcError``), else
        INTERNAL; counted in the server's stats."""
        if isinstance(exc, DmRpcError):
            log.info("%s refused: %s: %s", which, exc.code_name, exc.message)
            self.registry.stats.error(exc.code)
            return error_response(exc.code, exc.message)
        log.exception("%s request failed", which)
        self.registry.stats.error(status.code(grpc.StatusCode.INTERNAL))
        return error_response(status.code(grpc.StatusCode.INTERNAL), f"{which} failed: {type(exc).__name__}: {exc}")

    def _joined(self, what: str) -> Any:
        if self.agent is None:
            raise status.failed_precondition(f"{what} needs a joined world: send JoinWorldRequest first")
        return self.agent

    async def _create_world(self, request: pb.CreateWorldRequest, response: pb.EnvironmentResponse) -> None:
        response.create_world.world_name = await self.registry.create(request.settings, creator=self,
                                                                      asked=self.render_asked, lists=self.lists)

    async def _join_world(self, request: pb.JoinWorldRequest, response: pb.EnvironmentResponse) -> None:
        if self.agent is not None:
            raise status.failed_precondition(
                f"this connection is already joined to world {self.agent.world.name!r}; "
                f"send LeaveWorld first (one world per connection)")
        world = await self.registry.get(request.world_name, self.render_asked)
        self.agent = await world.join(request.settings, self.render_asked)
        self._steady = SteadyServe.of(self.agent, self._failure, self.regions)
        self.steady = None if self._steady is None else self._steady.answer
        log.info("joined world %r%s", world.name, f" as {self.agent.name!r}" if hasattr(self.agent, "name") else "")
        response.join_world.specs.CopyFrom(self.agent.specs)

    async def _reset(self, request: pb.ResetRequest, response: pb.EnvironmentResponse) -> None:
        specs = await self._joined("reset").reset(request.settings)
        response.reset.specs.CopyFrom(specs)

    async def _reset_world(self, request: pb.ResetWorldRequest, response: pb.EnvironmentResponse) -> None:
        world = await self.registry.get(request.world_name)
        await world.reset_world(request.settings, self.agent)
        response.reset_world.SetInParent()

    async def _leave_world(self, request: pb.LeaveWorldRequest, response: pb.EnvironmentResponse) -> None:
        self.leave()
        response.leave_world.SetInParent()

    async def _destroy_world(self, request: pb.DestroyWorldRequest, response: pb.EnvironmentResponse) -> None:
        self.registry.destroy(request.world_name, None if self.agent is None else self.agent.world)
        response.destroy_world.SetInParent()

    async def _extension(self, request: Any, response: pb.EnvironmentResponse) -> None:
        table = {prop.key: prop for prop in self.properties()}
        response.extension.CopyFrom(await properties.handle(request, table))

    def properties(self) -> list[Property]:
        """The server's properties, plus the joined agent's and its world's."""
        registry = self.registry
        props = [
            Property("env_id", pb.STRING, "what the server builds worlds from (an env id or module:factory)",
                     read=lambda: registry.factory.name),
            Property("worlds", pb.STRING, "the names of the server's worlds",
                     read=lambda: np.array(registry.names(), dtype=np.str_), shape=(-1,)),
            Property("server_instance", pb.STRING, "this run of the server (a restarted server has another)",
                     read=lambda: registry.instance),
            Property("render_failure", pb.STRING,
                     "why the server offers no RGB observation ('' when rendering works or was not tried)",
                     read=lambda: registry.factory.render_failure or ""),
            Property(STATUS_PROPERTY, pb.STRING, "the server's health, worlds, connections and counts, as JSON "
                     "(what `dmrpc-gym status` shows)", read=registry.stats.status_json),
            *registry.watches.properties(self),
        ]
        if self.agent is not None:
            props.extend(self.agent.properties())
        return props

    def leave(self) -> None:
        """Leave the joined world, if any."""
        agent, self.agent = self.agent, None
        self.steady = self._steady = None
        if agent is not None:
            agent.leave()
            log.info("left world %r", agent.world.name)
            self.registry.vacated(agent.world.name)

    def close(self) -> None:
        """The stream ended: leave (never raises)."""
        try:
            self.leave()
        except Exception:  # noqa: BLE001 - a closing stream has no one to answer
            log.exception("leaving the world of a closed stream failed")
        self.registry.creator_left(self)
        self.registry.watches.end(self)
        if self._shared is not None:
            self._shared.drop(self.regions)
