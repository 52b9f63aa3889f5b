"""What a dashboard sees of a server's worlds beyond its status (returns, the episode's step, frames): only while one watches.

``dmrpc-gym dashboard`` reaches a server as a client does and, on its connection, writes the
:data:`WATCH_PROPERTY` (JSON: ``{"world": NAME, "fps": RATE}``, the world whose frames it shows and
how many a second at most). That starts a *lease*: until :data:`LEASE` seconds pass without the
dashboard reading or writing it, or its stream ends, every world of the server carries a
:class:`WorldWatch` as ``world.watch`` (None otherwise, the class attribute), and the step that
ends an episode adds the episode's return to it. A running step makes no call more than it did
before: the numbers read here (the episode's step and return, the steps and resets of
:class:`~dmrpc_gym.server.serving.stats.WorldCounts`) are kept by every step anyway, and the last reward is
one attribute an agent sets. Leases end by a thread's tick (every ``LEASE / 4`` s while anyone
watches), not a timer of the event loop's: with one scheduled, every turn of the loop would read
the clock, on every step.

Reading :data:`WATCH_PROPERTY` gives every world's numbers as JSON (:meth:`Watches.numbers`);
reading :data:`WATCH_FRAME_PROPERTY` gives the chosen world's frame, as PNG. It is rendered only then, at
most ``fps`` times a second and only after the world stepped (else the frame before is sent
again), on the env's lane (after the step in progress, before the next) and on its own render
thread (:mod:`~dmrpc_gym.server.running.render_threads`): never on a step's path; it is encoded off the
event loop (:mod:`~dmrpc_gym.server.worlds.png`). A world whose env renders
no frames says why and how to get them (:func:`no_frames`).

>>> from dmrpc_gym.server.envs.factories import Factory
>>> from dmrpc_gym.server.worlds.registry import WorldRegistry
>>> from dmrpc_gym.worlds.catch import Catch
>>> registry = WorldRegistry(Factory(Catch))
>>> watches = registry.watches
>>> watches.watching, [p.key for p in watches.properties(object())]
(False, ['dmrpc_gym.watch', 'dmrpc_gym.watch_frame'])
"""
from __future__ import annotations

import asyncio
import collections
import json
import threading
import time
from typing import Any

import numpy as np

from dmrpc_gym.protocol.wire import pb
from dmrpc_gym.server.serving import status
from dmrpc_gym.server.envs.factories import RENDER_MODE
from dmrpc_gym.server.worlds.png import encode_png
from dmrpc_gym.server.worlds.properties import Property
from dmrpc_gym.server.worlds.rendering import current_frame

__all__ = ["Watches", "WorldWatch", "WATCH_PROPERTY", "WATCH_FRAME_PROPERTY", "LEASE", "RETURNS_KEPT", "no_frames"]

#: Written (JSON ``{"world": NAME or "", "fps": RATE}``) to begin or change a watch; read: every world's numbers.
WATCH_PROPERTY = "dmrpc_gym.watch"
#: The watched world's frame as PNG (uint8 bytes), rendered when read (at most ``fps`` a second).
WATCH_FRAME_PROPERTY = "dmrpc_gym.watch_frame"
#: Seconds a watch lasts without a read or write of its properties.
LEASE = 10.0
#: Finished episodes' returns kept per world while watched.
RETURNS_KEPT = 200
_MAX_FPS = 30.0


class WorldWatch:
    """What a watched world keeps beyond its counts: the returns of its episodes that ended while watched.

    >>> watch = WorldWatch()
    >>> watch.ended(3.5, 12); [(r, n) for _, r, n in watch.returns]
    [(3.5, 12)]
    """

    __slots__ = ("returns",)

    def __init__(self) -> None:
        #: ``(time.time(), return, length)`` of each episode that ended, the latest last.
        self.returns: collections.deque = collections.deque(maxlen=RETURNS_KEPT)

    def ended(self, episode_return: float, length: int) -> None:
        """An episode ended with ``episode_return`` after ``length`` steps."""
        self.returns.append((time.time(), float(episode_return), int(length)))


class _Lease:
    __slots__ = ("world", "fps", "until", "frame", "frame_at", "frame_steps", "frame_env")

    def __init__(self) -> None:
        self.world, self.fps = "", 1.0
        self.until = 0.0                     # time.monotonic() when it runs out
        self.frame: np.ndarray | None = None
        self.frame_at = 0.0
        self.frame_steps = -1
        self.frame_env: Any = None


def _frame_source(world: Any) -> tuple[Any, Any, Any] | None:
    """The env a world's frames come from, its lane and its recipe: a gym world's first agent's, a
    PettingZoo world's own."""
    agents = getattr(world, "agents", {})
    if world.kind in ("gym", "dm_env"):
        joined = [agents[slot] for slot in sorted(agents) if agents[slot] is not None]
        return (joined[0].env, joined[0].lane, joined[0].env_kwargs) if joined else None
    return world.env, world.lane, world.kwargs


def no_frames(world: Any) -> str | None:
    """Why ``world`` has no frame to show and how to get one, or None when it renders ``rgb_array``."""
    source = _frame_source(world)
    if source is None:
        return f"world {world.name!r} has no agent joined: no env steps, so there is nothing to show"
    env, _, recipe = source
    mode = getattr(env, "render_mode", None)
    if mode == "rgb_array":
        return None
    failure = world.factory.render_failure
    asked = getattr(recipe.get(RENDER_MODE), "mode", None)
    if asked == "rgb_array":      # asked for, and the env does not render (a dm_env without a physics...)
        return (f"world {world.name!r} renders no frames: its env ({type(env).__name__}) was asked for "
                f"render_mode='rgb_array' and renders with render_mode={mode!r}" + (f" ({failure})" if failure else ""))
    return (f"world {world.name!r} renders no frames: its env was made with render_mode={mode!r}"
            + (f" ({failure})" if failure else "") + ". A dmrpc_gym client asks for frames with "
            "render_mode=\"rgb_array\" (e.g. gym.make(\"dmrpc/Remote-v0\", address=..., render_mode=\"rgb_array\")); "
            "a foreign dm_env_rpc client's worlds render as `dmrpc-gym serve --render` says (rgb_array by default)")


def _agent_numbers(world: Any) -> tuple[int | None, float | None, float | None]:
    """``(episode step, episode return, last reward)``: a gym world's first agent's; a PettingZoo world's
    rounds and the sums over its agents."""
    agents = [a for _, a in sorted(world.agents.items()) if a is not None]
    if world.kind in ("gym", "dm_env"):
        if not agents:
            return None, None, None
        first = agents[0]
        return first.episode_step, first.episode_return, getattr(first, "last_reward", None)
    last = [a.last_reward for a in agents if getattr(a, "last_reward", None) is not None]
    return (world.rounds, sum(a.episode_return for a in agents) if agents else None,
            sum(last) if last else None)


class Watches:
    """The dashboards watching one server's worlds (see the module doc); ``registry``: its
    :class:`~dmrpc_gym.server.worlds.registry.WorldRegistry`, which makes one as ``registry.watches``."""

    def __init__(self, registry: Any):
        self.registry = registry
        self._leases: dict[Any, _Lease] = {}
        self._clock: threading.Event | None = None    # set: the thread that ends leases stops

    @property
    def watching(self) -> bool:
        """Whether a dashboard watches now."""
        return bool(self._leases)

    def properties(self, session: Any) -> list[Property]:
        """The two properties of ``session``'s connection (a dashboard's)."""
        return [
            Property(WATCH_PROPERTY, pb.STRING,
                     "a dashboard's watch: write {\"world\": NAME, \"fps\": RATE} (JSON) to begin it (it lasts "
                     f"{LEASE:g} s after each read or write, or until the stream ends); read: every world's "
                     "episodes, the episode's step and return, the last reward, returns of the episodes that ended",
                     read=lambda: self.numbers(session), write=lambda value: self.watch(session, str(value.item()))),
            Property(WATCH_FRAME_PROPERTY, pb.UINT8, "the watched world's frame as PNG (its bytes), rendered when "
                     "read, at most at the watch's rate and only after the world stepped",
                     read=lambda: self.frame(session), shape=(-1,)),
        ]

    # -- leases ----------------------------------------------------------------------------
    def watch(self, session: Any, text: str) -> None:
        """Begin or change ``session``'s watch: ``text`` is JSON ``{"world": NAME or "", "fps": RATE}``."""
        try:
            asked = json.loads(text)
            if not isinstance(asked, dict):
                raise ValueError("not a JSON object")
            world, fps = str(asked.get("world") or ""), float(asked.get("fps", 1.0))
        except (ValueError, TypeError) as exc:
            raise status.invalid_argument(f"property {WATCH_PROPERTY!r} takes JSON "
                                          f"{{\"world\": NAME, \"fps\": RATE}}, got {text[:80]!r} ({exc})") from None
        if not 0 < fps <= _MAX_FPS:
            raise status.invalid_argument(f"property {WATCH_PROPERTY!r}: fps must be in (0, {_MAX_FPS:g}], got {fps}")
        lease = self._renew(session)
        if world != lease.world:
            lease.frame, lease.frame_steps, lease.frame_env = None, -1, None
        lease.world, lease.fps = world, fps

    def _renew(self, session: Any) -> _Lease:
        lease = self._leases.get(session)
        if lease is None:
            lease = self._leases[session] = _Lease()
            if len(self._leases) == 1:
                self.registry.watchers.append(self._attach)
                self._attach()
                self._start_clock()
        lease.until = time.monotonic() + LEASE
        return lease

    def _start_clock(self) -> None:
        """A thread that, while anyone watches, has the event loop end the leases run out every
        ``LEASE / 4`` seconds. Not a timer of the loop's: with one scheduled, every turn of the loop
        reads the clock to compute its wait, a cost on every step."""
        stop = self._clock = threading.Event()
        loop = asyncio.get_running_loop()

        def tick() -> None:
            while not stop.wait(LEASE / 4):
                try:
                    loop.call_soon_threadsafe(self._expire)
                except RuntimeError:         # the loop closed: the server stopped
                    return
        threading.Thread(target=tick, name="dmrpc-gym-watch-leases", daemon=True).start()

    def _expire(self) -> None:
        """End the leases that ran out (on the event loop)."""
        now = time.monotonic()
        for session in [s for s, lease in self._leases.items() if lease.until <= now]:
            self.end(session)

    def _lease(self, session: Any) -> _Lease:
        if session not in self._leases:
            raise status.failed_precondition(f"no watch on this connection: write {WATCH_PROPERTY!r} first "
                                             f"(a watch ends {LEASE:g} s after its last read)")
        return self._renew(session)

    def _attach(self) -> None:
        """Give every world a :class:`WorldWatch` (called again whenever the worlds change)."""
        for world in self.registry.worlds():
            if world.watch is None:
                world.watch = WorldWatch()

    def end(self, session: Any) -> None:
        """``session``'s watch ends (its lease ran out, or its stream ended); the last one's takes the
        worlds' watches away."""
        if self._leases.pop(session, None) is None:
            return
        if not self._leases:
            if self._clock is not None:
                self._clock.set()
                self._clock = None
            if self._attach in self.registry.watchers:
                self.registry.watchers.remove(self._attach)
            for world in self.registry.worlds():
                world.watch = None

    # -- reading ---------------------------------------------------------------------------
    def numbers(self, session: Any) -> str:
        """Every world's numbers as JSON: a list of ``{"name", "kind", "episodes", "step", "return",
        "last_reward", "returns": [[time, return, length], ...], "frames": null or why none}``."""
        self._lease(session)
        worlds = []
        for world in self.registry.worlds():
            watch = world.watch
            step, total, last = _agent_numbers(world)
            worlds.append({"name": world.name, "kind": world.counts.kind, "episodes": world.counts.resets,
                           "step": step, "return": total, "last_reward": last,
                           "returns": list(watch.returns) if watch is not None else [],
                           "no_frames": no_frames(world)})
        return json.dumps({"worlds": worlds, "lease": LEASE}, separators=(",", ":"))

    async def frame(self, session: Any) -> np.ndarray:
        """The watched world's frame as PNG bytes (a uint8 array): rendered now when the world stepped
        since the last one and ``1 / fps`` seconds passed, else the last one again."""
        lease = self._lease(session)
        if not lease.world:
            raise status.failed_precondition(f"this watch names no world: write {WATCH_PROPERTY!r} with one")
        world = next((w for w in self.registry.worlds() if w.name == lease.world), None)
        if world is None:
            known = ", ".join(repr(n) for n in self.registry.names()) or "none"
            raise status.not_found(f"no world {lease.world!r} (worlds: {known})")
        why = no_frames(world)
        if why is not None:
            raise status.failed_precondition(why)
        env, lane, _ = _frame_source(world)  # type: ignore[misc]
        now = time.monotonic()
        fresh = lease.frame is not None and lease.frame_env is env
        if fresh and (world.counts.steps == lease.frame_steps or now - lease.frame_at < 1.0 / lease.fps):
            return lease.frame  # type: ignore[return-value]
        steps = world.counts.steps
        frame = await current_frame(env, lane, world.factory.name, world.factory.render_failure)
        png = await asyncio.get_running_loop().run_in_executor(None, encode_png, frame)
        lease.frame = np.frombuffer(png, np.uint8)
        lease.frame_at, lease.frame_steps, lease.frame_env = now, steps, env
        return lease.frame
