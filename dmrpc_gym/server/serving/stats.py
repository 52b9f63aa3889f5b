"""What a running server has done, in one place: behind ``dmrpc-gym status`` and the Prometheus metrics alike.

The server updates plain numbers as it goes, all on its event loop, so that
counting costs an addition: every world has a :class:`WorldCounts` (steps
answered, env resets, seconds in its steps and the env's part of them), the
connections share a :class:`~dmrpc_gym.transport.Traffic` (bytes, refusals,
failed statuses), and :class:`ServerStats` holds the rest (worlds made and
gone, error answers, the totals of worlds destroyed). Nothing is computed until
someone asks: :meth:`ServerStats.snapshot` reads it all, on the loop, into one
document, which the ``dmrpc_gym.server_status`` property sends as JSON
(:mod:`~dmrpc_gym.server.serving.session`) and the metrics endpoint turns into series
(:mod:`~dmrpc_gym.server.serving.metrics`).

A step's time is split in two: the env's (its calls on the world's
:class:`~dmrpc_gym.server.running.workers.Lane`: ``step``, and ``reset`` and ``render``
when the step made them) and the server's (the rest of the request, from its
parse to its answer; in a multi-agent world the wait for the other agents'
actions is in it). Histograms of both are kept only when the server serves
metrics (``timed``): then two bucket counts go up per step.

>>> stats = ServerStats(timed=True)
>>> counts = WorldCounts("gym")
>>> stats.world_made(counts)
>>> counts.record(0.002, 0.0015)
>>> stats.totals()["gym"]["steps"], stats.timings["gym"].env[bucket(0.0015)]
(1, 1)
"""
from __future__ import annotations

import asyncio
import bisect
import concurrent.futures
import json
import time
from typing import Any, Iterable

from dmrpc_gym._version import __version__
from dmrpc_gym.protocol.errors import status_name
from dmrpc_gym.server.envs.factories import RENDER_MODE
from dmrpc_gym.server.worlds.settings import shown
from dmrpc_gym.transport import Traffic

__all__ = ["ServerStats", "WorldCounts", "Timings", "KINDS", "BUCKETS", "bucket", "STATUS_PROPERTY"]

#: The property ``dmrpc-gym status`` reads: the server's :meth:`ServerStats.snapshot`, as a JSON string.
STATUS_PROPERTY = "dmrpc_gym.server_status"
#: World kinds as the stats name them (a world's ``kind`` -> its label).
KINDS = {"gym": "gym", "pettingzoo": "parallel", "aec": "aec", "dm_env": "dm_env"}
#: Upper bounds (seconds) of the step-time histograms' buckets, from 10 us to 10 s; +Inf follows.
BUCKETS = (1e-5, 2.5e-5, 5e-5, 1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 5e-3, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
           1.0, 2.5, 5.0, 10.0)
_READ_WAIT = 5.0     # seconds a read from another thread waits for the event loop


def bucket(seconds: float) -> int:
    """The index of the histogram bucket ``seconds`` falls in (Prometheus' ``le``: bound included)."""
    return bisect.bisect_left(BUCKETS, seconds)


class Timings:
    """The step-time histograms of one kind of world: bucket counts, each bucket on its own (last: +Inf)."""

    __slots__ = ("env", "server")

    def __init__(self) -> None:
        self.env = [0] * (len(BUCKETS) + 1)
        self.server = [0] * (len(BUCKETS) + 1)


class WorldCounts:
    """One world's counts: steps answered, env resets (episodes begun), seconds in the steps, the env's share."""

    __slots__ = ("kind", "steps", "resets", "seconds", "env_seconds", "timings", "born")

    def __init__(self, kind: str) -> None:
        self.kind = KINDS.get(kind, kind)
        self.steps = self.resets = 0
        self.seconds = self.env_seconds = 0.0
        self.timings: Timings | None = None    # the kind's histograms, when the server keeps them
        self.born = time.monotonic()

    def record(self, seconds: float, env_seconds: float) -> None:
        """Count one step that took ``seconds``, ``env_seconds`` of them in the env."""
        self.steps += 1
        self.seconds += seconds
        self.env_seconds += env_seconds
        timings = self.timings
        if timings is not None:
            timings.env[bisect.bisect_left(BUCKETS, env_seconds)] += 1
            timings.server[bisect.bisect_left(BUCKETS, seconds - env_seconds)] += 1

    def add(self, other: "WorldCounts") -> None:
        self.steps += other.steps
        self.resets += other.resets
        self.seconds += other.seconds
        self.env_seconds += other.env_seconds


class ServerStats:
    """Everything a server counts (see the module doc); ``timed``: keep the step-time histograms too.

    The server sets :attr:`registry`, :attr:`connections` and :attr:`loop` once it listens.
    """

    def __init__(self, timed: bool = False) -> None:
        self.traffic = Traffic()
        self.started = time.time()
        self._started = time.monotonic()
        self.created = dict.fromkeys(KINDS.values(), 0)
        self.destroyed = dict.fromkeys(KINDS.values(), 0)
        self._gone = {kind: WorldCounts(kind) for kind in KINDS.values()}   # the sums of worlds destroyed
        self._live: dict[int, WorldCounts] = {}
        self.errors: dict[int, int] = {}         # error answers by status code (the transport's are in traffic)
        self.timings = {kind: Timings() for kind in KINDS.values()} if timed else None
        self.registry: Any = None
        self.connections: Iterable[Any] = ()
        self.loop: asyncio.AbstractEventLoop | None = None
        self.max_connections: int | None = None
        self.shared_memory: Any = None           # the server's SharedMemoryHost, where it offers shared memory

    # -- counting (on the event loop) ------------------------------------------------------
    def world_made(self, counts: WorldCounts) -> None:
        """A world with ``counts`` was created."""
        self.created[counts.kind] = self.created.get(counts.kind, 0) + 1
        if self.timings is not None:
            counts.timings = self.timings.setdefault(counts.kind, Timings())
        self._live[id(counts)] = counts

    def world_gone(self, counts: WorldCounts) -> None:
        """The world with ``counts`` was destroyed: its counts stay in the totals."""
        if self._live.pop(id(counts), None) is None:
            return
        self.destroyed[counts.kind] = self.destroyed.get(counts.kind, 0) + 1
        self._gone.setdefault(counts.kind, WorldCounts(counts.kind)).add(counts)

    def error(self, code: int) -> None:
        """Count one request answered with error ``code``."""
        self.errors[code] = self.errors.get(code, 0) + 1

    def refuse(self, limit: str) -> None:
        """Count one refusal under ``limit`` (``"max_worlds"``...), with the transport's."""
        self.traffic.refuse(limit)

    # -- reading ---------------------------------------------------------------------------
    def totals(self) -> dict[str, dict[str, Any]]:
        """Per kind: steps, resets, seconds and env seconds of every world ever made, worlds made and gone."""
        sums = {kind: WorldCounts(kind) for kind in self._gone}
        for kind, gone in self._gone.items():
            sums[kind].add(gone)
        for counts in self._live.values():
            sums.setdefault(counts.kind, WorldCounts(counts.kind)).add(counts)
        return {kind: {"steps": t.steps, "resets": t.resets, "step_seconds": t.seconds,
                       "env_seconds": t.env_seconds, "created": self.created.get(kind, 0),
                       "destroyed": self.destroyed.get(kind, 0)} for kind, t in sums.items()}

    def health(self) -> tuple[bool, bool, str]:
        """``(serving, draining, why not serving)``, as the health service reports it: the registry's
        :meth:`~dmrpc_gym.server.worlds.registry.WorldRegistry.room` (not while draining, nor at ``max_worlds``)."""
        registry = self.registry
        if registry is None:
            return True, False, ""
        why = registry.room()
        return why is None, registry.draining, why or ""

    def snapshot(self, histograms: bool = False) -> dict[str, Any]:
        """The server's state and counts as one JSON-ready document (on the event loop: see :meth:`read`)."""
        now = time.monotonic()
        registry = self.registry
        serving, draining, why = self.health()
        connections = list(self.connections)
        traffic = self.traffic
        errors: dict[str, int] = {}
        for code, count in (*self.errors.items(), *traffic.statuses.items()):
            errors[status_name(code)] = errors.get(status_name(code), 0) + count
        document: dict[str, Any] = {
            "server": f"dmrpc-gym/{__version__}",
            "env": registry.factory.name if registry is not None else None,
            "instance": registry.instance if registry is not None else None,
            "uptime": now - self._started, "started": self.started,
            "health": {"serving": serving, "draining": draining, "why": why},
            "connections": len(connections), "streams": sum(c.open_streams for c in connections),
            "bytes_in": traffic.bytes_in, "bytes_out": traffic.bytes_out,
            "limits": {"max_worlds": registry.max_worlds if registry is not None else None,
                       "max_connections": self.max_connections},
            "shared_memory": self._shared_memory(),
            "totals": self.totals(), "errors": errors, "refused": dict(traffic.refused),
            "worlds": [_world(world, now) for world in (registry.worlds() if registry is not None else ())],
        }
        if histograms and self.timings is not None:
            document["histograms"] = {"buckets": list(BUCKETS), "kinds": {
                kind: {"env": list(t.env), "server": list(t.server)} for kind, t in self.timings.items()}}
        return document

    def _shared_memory(self) -> dict[str, Any]:
        """Whether shared memory is offered, and how many streams use it (and their regions' bytes)."""
        host = self.shared_memory
        if host is None:
            return {"offered": False, "streams": 0, "bytes": 0}
        streams, size = host.in_use()
        return {"offered": True, "streams": streams, "bytes": size}

    def read(self, histograms: bool = False, timeout: float = _READ_WAIT) -> dict[str, Any]:
        """:meth:`snapshot` from any thread: taken on the server's event loop, where the numbers
        change, so that it is consistent (``TimeoutError`` if the loop does not answer in ``timeout``)."""
        loop = self.loop
        if loop is None or not loop.is_running() or _running_loop() is loop:
            return self.snapshot(histograms)
        answer: concurrent.futures.Future = concurrent.futures.Future()

        def take() -> None:
            try:
                answer.set_result(self.snapshot(histograms))
            except BaseException as exc:  # noqa: BLE001 - handed to the reader
                answer.set_exception(exc)
        loop.call_soon_threadsafe(take)
        try:
            return answer.result(timeout)
        except concurrent.futures.TimeoutError:
            raise TimeoutError(f"the server's event loop did not answer within {timeout:g} s") from None

    def status_json(self) -> str:
        """The :data:`STATUS_PROPERTY` value: :meth:`snapshot` as JSON."""
        return json.dumps(self.snapshot(), separators=(",", ":"))


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


def _world(world: Any, now: float) -> dict[str, Any]:
    """One world's line of the status document."""
    counts: WorldCounts = world.counts
    return {"name": world.name, "kind": counts.kind, "agents": sum(1 for a in world.agents.values() if a is not None),
            "settings": {k: shown(v) for k, v in world.kwargs.items() if k != RENDER_MODE},
            "steps": counts.steps, "resets": counts.resets, "step_seconds": counts.seconds,
            "env_seconds": counts.env_seconds, "age": now - counts.born}
