"""What the dashboard knows of a server: read over one client connection, again and again, by a thread of its own.

:class:`Feed` keeps a :class:`~dmrpc_gym.app.status.StatusReader` to the server and, every
``interval`` seconds, reads its status (health, worlds, rates: the ``status`` command's numbers)
and its watched numbers (:mod:`dmrpc_gym.server.serving.watching`: episodes, the episode's step and return,
the last reward, the returns of ended episodes); between readings, the chosen world's frame at the
chosen rate (PNG, as the server sends it). The last :data:`HISTORY_SECONDS` of readings feed the plots.
When the server cannot be reached (it restarts, the network drops), the feed says why and tries
again every ``interval``; a restarted server is watched again as soon as it answers.

The page never sees the connection or its token: it reads :meth:`Feed.state` and :meth:`Feed.frame`.

>>> feed = Feed("127.0.0.1:1", connect_timeout=0.1)
>>> feed.choose("world-1", 2.0)
>>> feed.state()["connected"], feed.state()["watch"]
(False, {'world': 'world-1', 'fps': 2.0})
"""
from __future__ import annotations

import collections
import json
import threading
import time
from typing import Any, Callable

from dmrpc_gym.app.status import StatusReader, with_rates
from dmrpc_gym.server.serving.watching import WATCH_FRAME_PROPERTY, WATCH_PROPERTY

__all__ = ["Feed", "HISTORY_SECONDS", "MAX_FPS", "PAGE_GONE"]

#: Seconds of history the plots show.
HISTORY_SECONDS = 600.0
#: The most frames a second a page may ask for.
MAX_FPS = 10.0
#: Seconds after a page's last look (:meth:`Feed.state`) that the feed stops watching: the server then
#: collects nothing beyond its status for it (its watch's lease runs out) until a page looks again.
PAGE_GONE = 5.0


#: The feed's error before its first reading.
NOT_READ = "not read yet"


class Feed:
    """The server's state as the page shows it, refreshed on a thread (see the module doc).

    ``connection``: the keywords of :class:`~dmrpc_gym.client.connection.Connection` (``token``,
    ``tls``, ``connect_timeout``...), as every client command takes them. ``say``: told a line each
    time the server becomes reachable or unreachable (the command prints it), once per change.
    """

    def __init__(self, address: str, *, interval: float = 1.0, say: Callable[[str], None] | None = None,
                 **connection: Any):
        self.address, self.interval, self._say = address, interval, say
        self._connection = dict(connection)
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._reader: StatusReader | None = None
        self._status: dict[str, Any] | None = None     # the latest reading with rates
        self._before: dict[str, Any] | None = None
        self._numbers: dict[str, Any] = {}             # world name -> its watched numbers
        self._history: collections.deque = collections.deque()   # [time, steps/s, step ms, env ms]
        self._watch = {"world": "", "fps": 1.0}
        self._watched: dict[str, Any] | None = None    # what the server was last told
        self._frame: tuple[bytes, float, str] | None = None   # (PNG, when, world)
        self._frame_error: str | None = None
        self._error: str | None = NOT_READ
        self._since = time.time()
        self._looked = time.monotonic()                 # when a page last asked for the state

    # -- the page's side ---------------------------------------------------------------------
    def choose(self, world: str, fps: float) -> None:
        """Show ``world``'s frames (``""``: none) at most ``fps`` a second."""
        if not 0 < fps <= MAX_FPS:
            raise ValueError(f"fps must be in (0, {MAX_FPS:g}], got {fps}")
        with self._lock:
            self._watch = {"world": world, "fps": float(fps)}
            if self._frame is not None and self._frame[2] != world:
                self._frame = None
            self._frame_error = None
        self._wake.set()

    def state(self) -> dict[str, Any]:
        """Everything the page shows but the frame, JSON-ready (a page looks: the feed watches)."""
        with self._lock:
            if time.monotonic() - self._looked > PAGE_GONE:
                self._wake.set()                         # back from nobody looking: watch again now
            self._looked = time.monotonic()
            status = self._status
            worlds = []
            for world in (status or {}).get("worlds", []):
                watched = self._numbers.get(world["name"], {})
                worlds.append({**world, **{k: v for k, v in watched.items() if k != "name"}})
            frame = self._frame
            return {
                "address": self.address, "connected": self._error is None, "error": self._error,
                "since": self._since, "now": time.time(),
                "server": None if status is None else {k: v for k, v in status.items() if k not in ("worlds", "clock")},
                "worlds": worlds, "history": list(self._history), "watch": dict(self._watch),
                "frame": None if frame is None else {"at": frame[1], "world": frame[2]},
                "frame_error": self._frame_error,
            }

    def frame(self) -> bytes | None:
        """The latest frame of the chosen world, as PNG."""
        with self._lock:
            return None if self._frame is None else self._frame[0]

    # -- the thread ---------------------------------------------------------------------------
    def start(self) -> "Feed":
        """Begin reading (a daemon thread)."""
        self._thread = threading.Thread(target=self._run, name="dmrpc-gym-dashboard-feed", daemon=True)
        self._thread.start()
        return self

    def close(self) -> None:
        """Stop reading and close the connection (the server's watch ends with it)."""
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(10)
        self._drop(None)

    def _run(self) -> None:
        next_status = 0.0
        while not self._stop.is_set():
            now = time.monotonic()
            try:
                if now >= next_status:
                    next_status = now + self.interval
                    self._read()
                self._read_frame()
            except Exception as exc:  # noqa: BLE001 - any failure is shown, and the feed tries again
                self._drop(f"{type(exc).__name__}: {exc}")
                next_status = time.monotonic() + self.interval
            with self._lock:
                world, fps = self._watch["world"], self._watch["fps"]
            wait = next_status - time.monotonic()
            if world and self._error is None:
                wait = min(wait, 1.0 / fps)
            self._wake.wait(max(wait, 0.0))
            self._wake.clear()

    def _reader_now(self) -> StatusReader:
        if self._reader is None:
            self._reader = StatusReader(self.address, **self._connection)
            self._watched = None
        return self._reader

    def _tell(self, reader: StatusReader) -> None:
        """Tell the server what to watch, when it changed (or the connection is new)."""
        with self._lock:
            watch = dict(self._watch)
        if watch != self._watched:
            reader.write_value(WATCH_PROPERTY, json.dumps(watch))
            self._watched = watch

    def _looking(self) -> bool:
        """Whether a page looked lately (:data:`PAGE_GONE`)."""
        with self._lock:
            return time.monotonic() - self._looked <= PAGE_GONE

    def _read(self) -> None:
        reader = self._reader_now()
        now = reader.read()
        if self._looking():
            self._tell(reader)
            numbers = reader.read_json(WATCH_PROPERTY)
        else:                                # nobody looks: no watch (its lease runs out on the server)
            self._watched, numbers = None, {"worlds": []}
        rated = with_rates(now, self._before)
        self._before = now
        worlds = rated["worlds"]
        steps = [w for w in worlds if w["steps_per_second"] is not None]
        timed = [w for w in worlds if w["step_ms"] is not None]
        point = [time.time(), round(sum(w["steps_per_second"] for w in steps), 1) if rated["interval"] else None,
                 _mean(timed, "step_ms"), _mean(timed, "env_ms")]
        with self._lock:
            changed = self._error is not None
            if changed:
                self._since = time.time()
            self._status, self._error = rated, None
            self._numbers = {w["name"]: w for w in numbers["worlds"]}
            self._history.append(point)
            while self._history and self._history[0][0] < point[0] - HISTORY_SECONDS:
                self._history.popleft()
        if changed and self._say is not None:
            self._say(f"reading {self.address}")

    def _read_frame(self) -> None:
        with self._lock:
            world, fps, last = self._watch["world"], self._watch["fps"], self._frame
        if not world or self._reader is None or not self._looking() or (
                last is not None and last[2] == world and time.time() - last[1] < 1.0 / fps * 0.9):
            return
        numbers = self._numbers.get(world)
        if numbers is None or numbers.get("no_frames"):
            with self._lock:
                self._frame_error = None if numbers is None else numbers["no_frames"]
            return
        self._tell(self._reader)
        from dmrpc_gym.protocol.errors import DmRpcError
        try:
            frame = self._reader.read_value(WATCH_FRAME_PROPERTY)
        except DmRpcError as err:            # the world went, or cannot render: said on the page
            with self._lock:
                self._frame_error = err.message
            return
        png = frame.tobytes()                # the server sends it as PNG
        with self._lock:
            if self._watch["world"] == world:
                self._frame, self._frame_error = (png, time.time(), world), None

    def _drop(self, error: str | None) -> None:
        """Close the connection (after ``error``: shown until the server answers again)."""
        reader, self._reader = self._reader, None
        if reader is not None:
            try:
                reader.close()
            except Exception:  # noqa: BLE001 - closing a broken connection
                pass
        with self._lock:
            changed = error is not None and (self._error is None or self._error == NOT_READ)
            if error is not None:
                if self._error is None:
                    self._since = time.time()
                self._error = error
                self._before = None
        if changed and self._say is not None:
            self._say(f"cannot reach {self.address}: {error} (trying again every {self.interval:g} s)")


def _mean(worlds: list[dict[str, Any]], key: str) -> float | None:
    """The step-weighted mean of ``key`` (a per-step time) over ``worlds``."""
    steps = sum(w["steps_per_second"] or 0.0 for w in worlds)
    if not worlds:
        return None
    if steps <= 0:
        return round(sum(w[key] for w in worlds) / len(worlds), 3)
    return round(sum(w[key] * (w["steps_per_second"] or 0.0) for w in worlds) / steps, 3)
