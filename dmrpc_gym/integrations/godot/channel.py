"""The websocket a game connects to: JSON commands out, JSON answers in, with timeouts.

The Python side of the GymGodot protocol is the websocket *server* and the game the
client. :class:`Channel` listens on a free loopback port with ``websockets``' blocking
(threaded) server, so there is no event loop of ours; it accepts exactly one game,
and turns every way the conversation can fail into a clear error:

- the game closes the connection (it quit, crashed or was killed): ``ConnectionError``;
- no answer within the timeout: ``TimeoutError``;
- an answer that is not a JSON object: :class:`GodotProtocolError` (a ``ValueError``).

>>> from websockets.sync.client import connect
>>> channel = Channel()
>>> with connect(f"ws://127.0.0.1:{channel.port}") as game:     # what a game does
...     channel.accept(timeout=10)
...     channel.send({"cmd": "reset"})
...     print(game.recv(timeout=10))
...     game.send('{"init_observation": [0.5]}')
...     print(channel.receive(timeout=10))
{"cmd": "reset"}
{'init_observation': [0.5]}
>>> channel.close()
"""
from __future__ import annotations

import json
import queue
import threading
import time
from typing import Any, Callable

from dmrpc_gym._extras import install_hint

__all__ = ["Channel", "GodotProtocolError"]


class GodotProtocolError(ValueError):
    """The game sent something the GymGodot protocol does not allow (malformed JSON, missing keys)."""


def _shown(text: Any, limit: int = 200) -> str:
    text = text if isinstance(text, str) else repr(text)
    return repr(text) if len(text) <= limit else repr(text[:limit]) + f"... ({len(text)} characters)"


class Channel:
    """A one-game websocket server on ``host`` (default loopback) and an OS-picked port.

    ``port`` is where the game must connect. :meth:`accept` waits for the game,
    :meth:`send` / :meth:`receive` exchange JSON messages, :meth:`close` always returns.
    """

    def __init__(self, host: str = "127.0.0.1") -> None:
        try:                                       # optional dependency: imported when used
            from websockets.exceptions import ConnectionClosed
            from websockets.sync.server import serve
        except ImportError as exc:
            raise ImportError(f"Godot games need websockets>=14 ({exc}): {install_hint('godot')}") from None

        self._closed = ConnectionClosed
        self.host = host
        self._connections: queue.Queue = queue.Queue()
        self._release = threading.Event()
        self._connection: Any = None
        self._pending = 0                          # commands sent whose answers are not read yet
        # No compression (the game does not offer it), no size limit (large observations).
        self._server = serve(self._handle, host, 0, compression=None, max_size=None, close_timeout=1)
        self.port: int = self._server.socket.getsockname()[1]
        self._thread = threading.Thread(target=self._server.serve_forever, name=f"godot-ws-{self.port}", daemon=True)
        self._thread.start()

    def _handle(self, connection: Any) -> None:
        # Runs in the server's thread for this connection; the connection lives while this runs.
        if self._release.is_set() or self._connection is not None or not self._connections.empty():
            connection.close(1013, "this port already serves a game")
            return
        self._connections.put(connection)
        # websockets runs handlers in non-daemon threads, which the interpreter joins at exit
        # before atexit handlers run: stop waiting when the main thread has finished.
        while not self._release.wait(0.1) and threading.main_thread().is_alive():
            pass

    def accept(self, timeout: float, alive: Callable[[], bool] | None = None) -> None:
        """Wait for the game to connect: ``TimeoutError`` after ``timeout`` seconds, ``ConnectionError``
        as soon as ``alive()`` turns False (the game exited before connecting)."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                self._connection = self._connections.get(timeout=min(0.05, max(deadline - time.monotonic(), 0)))
                return
            except queue.Empty:
                pass
            if alive is not None and not alive():
                raise ConnectionError(f"the game exited before connecting to ws://{self.host}:{self.port}")
            if time.monotonic() >= deadline:
                raise TimeoutError(f"no game connected to ws://{self.host}:{self.port} within {timeout:g} s")

    @property
    def connected(self) -> bool:
        return self._connection is not None

    def send(self, message: dict, answered: bool = True) -> None:
        """Send one command (``answered``: the game will answer it); ``ConnectionError`` if the game has gone."""
        if self._connection is None:
            raise ConnectionError("no game is connected")
        try:
            self._connection.send(json.dumps(message))
            self._pending += answered
        except self._closed as exc:
            raise ConnectionError(f"the game closed the connection ({exc})") from None

    def receive(self, timeout: float | None) -> dict:
        """The next answer as a dict: ``TimeoutError``, ``ConnectionError`` or :class:`GodotProtocolError`."""
        if self._connection is None:
            raise ConnectionError("no game is connected")
        try:
            while self._pending > 1:             # answers left unread by an interrupted receive
                self._connection.recv(timeout=timeout)
                self._pending -= 1
            text = self._connection.recv(timeout=timeout)
            self._pending = 0
        except TimeoutError:
            raise TimeoutError(f"the game sent no answer within {timeout:g} s") from None
        except self._closed as exc:
            raise ConnectionError(f"the game closed the connection ({exc})") from None
        try:
            answer = json.loads(text)
        except (ValueError, TypeError) as exc:
            raise GodotProtocolError(f"the game's answer is not valid JSON ({exc}): {_shown(text)}") from None
        if not isinstance(answer, dict):
            raise GodotProtocolError(f"the game's answer is not a JSON object: {_shown(text)}")
        return answer

    def close(self) -> None:
        """Close the connection and stop listening; idempotent, always returns."""
        self._release.set()
        connection, self._connection = self._connection, None
        if connection is not None:
            try:
                connection.close()
            except Exception:  # noqa: BLE001 - closing must not fail
                pass
        while True:                                     # a game that connected but was never accepted
            try:
                self._connections.get_nowait().close()
            except queue.Empty:
                break
            except Exception:  # noqa: BLE001
                pass
        self._server.shutdown()
        self._thread.join(timeout=5.0)
