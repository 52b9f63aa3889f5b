"""The Godot RL Agents wire: one TCP connection, each message a 4-byte little-endian length and UTF-8 JSON.

The Python side listens and the game connects. :class:`Listener` binds a port the
OS picks (so several games never collide) and accepts one game, giving up as soon as
the game's process has exited or after a timeout; :class:`Link` sends and receives
whole messages, and turns every way the conversation can fail into a clear error:
the game gone (``ConnectionError``), no answer in time (``TimeoutError``), an answer
that is not a JSON object (:class:`GodotRLProtocolError`).

>>> listener = Listener()
>>> game = socket.create_connection(("127.0.0.1", listener.port))      # what a game does
>>> link = listener.accept(timeout=10)
>>> link.send({"type": "env_info"})
>>> data = game.recv(4096); int.from_bytes(data[:4], "little"), data[4:]
(20, b'{"type": "env_info"}')
>>> game.sendall(frame({"type": "env_info", "n_agents": 1}))
>>> link.receive(timeout=10)
{'type': 'env_info', 'n_agents': 1}
>>> link.close(); listener.close(); game.close()
"""
from __future__ import annotations

import json
import socket
import struct
import time
from typing import Any, Callable

__all__ = ["Listener", "Link", "GodotRLProtocolError", "frame", "MAX_MESSAGE"]

#: The largest message accepted (a game's images are hex text: 2 bytes a pixel channel).
MAX_MESSAGE = 1 << 30
_LENGTH = struct.Struct("<I")


class GodotRLProtocolError(ValueError):
    """The game sent something the Godot RL Agents protocol does not allow (bad framing, JSON, keys)."""


def frame(message: Any) -> bytes:
    """One message as it travels: its length (uint32, little-endian), then its compact JSON."""
    data = json.dumps(message, separators=(", ", ": ")).encode()
    return _LENGTH.pack(len(data)) + data


def _shown(data: bytes, limit: int = 200) -> str:
    text = data.decode("utf-8", "replace")
    return repr(text) if len(text) <= limit else repr(text[:limit]) + f"... ({len(text)} characters)"


class Listener:
    """A listening socket on ``host`` (default loopback) and a port the OS picked: ``port``.

    ``host="0.0.0.0"`` listens on every interface (a game in another container).
    """

    def __init__(self, host: str = "127.0.0.1") -> None:
        self.host = host
        self._socket = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            self._socket.bind((host, 0))
            self._socket.listen(1)
        except OSError:
            self._socket.close()
            raise
        self.port: int = self._socket.getsockname()[1]

    def accept(self, timeout: float, alive: Callable[[], bool] | None = None) -> "Link":
        """The game's connection: ``TimeoutError`` after ``timeout`` seconds, ``ConnectionError`` as soon as
        ``alive()`` turns False (the game exited before connecting)."""
        deadline = time.monotonic() + timeout
        while True:
            self._socket.settimeout(max(min(0.05, deadline - time.monotonic()), 0.001))
            try:
                connection, _ = self._socket.accept()
                return Link(connection)
            except socket.timeout:
                pass
            if alive is not None and not alive():
                raise ConnectionError(f"the game exited before connecting to {self.host}:{self.port}")
            if time.monotonic() >= deadline:
                raise TimeoutError(f"no game connected to {self.host}:{self.port} within {timeout:g} s")

    def close(self) -> None:
        """Stop listening; idempotent."""
        self._socket.close()


#: Seconds a send may wait for the game to take the bytes.
SEND_TIMEOUT = 30.0


def _kernel_timeout(connection: socket.socket, option: int, seconds: float | None) -> None:
    """Bound a blocking socket's reads or writes (``option``) by ``seconds`` (None: unbounded)."""
    whole = 0 if seconds is None else int(max(seconds, 0.001))
    micro = 0 if seconds is None else int((max(seconds, 0.001) - whole) * 1e6)
    connection.setsockopt(socket.SOL_SOCKET, option, struct.pack("ll", whole, micro))


class Link:
    """One game's connection: whole JSON messages both ways; :meth:`close` always returns."""

    def __init__(self, connection: socket.socket) -> None:
        connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        # A blocking socket whose waits the kernel bounds (SO_RCVTIMEO / SO_SNDTIMEO): one system call a
        # read, where a Python socket timeout polls before each read and write.
        connection.settimeout(None)
        self._socket: socket.socket | None = connection
        self._buffer = bytearray()
        self._timeout: float | None = -1.0
        _kernel_timeout(connection, socket.SO_SNDTIMEO, SEND_TIMEOUT)

    def send(self, message: dict) -> None:
        """Send one message; ``ConnectionError`` if the game has gone (or takes none for SEND_TIMEOUT s)."""
        if self._socket is None:
            raise ConnectionError("the connection to the game is closed")
        try:
            self._socket.sendall(frame(message))
        except OSError as exc:
            raise ConnectionError(f"the game closed the connection ({exc})") from None

    def _fill(self, size: int, deadline: float | None) -> None:
        assert self._socket is not None
        while len(self._buffer) < size:
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                raise socket.timeout
            if left is None or self._timeout is None or abs(left - self._timeout) > 0.5:
                _kernel_timeout(self._socket, socket.SO_RCVTIMEO, left)   # set again only when far off
                self._timeout = left
            try:
                chunk = self._socket.recv(max(size - len(self._buffer), 1 << 16))
            except BlockingIOError:                   # the kernel's timeout: EAGAIN
                raise socket.timeout from None
            if not chunk:
                raise ConnectionError("the game closed the connection")
            self._buffer += chunk

    def receive(self, timeout: float | None) -> dict:
        """The next message as a dict: ``TimeoutError``, ``ConnectionError`` or :class:`GodotRLProtocolError`."""
        if self._socket is None:
            raise ConnectionError("the connection to the game is closed")
        deadline = None if timeout is None else time.monotonic() + timeout
        try:
            self._fill(4, deadline)
            (size,) = _LENGTH.unpack_from(self._buffer)
            if size > MAX_MESSAGE:
                raise GodotRLProtocolError(f"the game announced a message of {size} bytes, more than "
                                           f"{MAX_MESSAGE}: not the protocol's framing (4-byte little-endian "
                                           f"length, then JSON); its first bytes: {_shown(bytes(self._buffer[:64]))}")
            self._fill(4 + size, deadline)
        except socket.timeout:
            raise TimeoutError(f"the game sent no answer within {timeout:g} s") from None
        except OSError as exc:
            raise ConnectionError(f"the game closed the connection ({exc})") from None
        data = bytes(self._buffer[4:4 + size])
        del self._buffer[:4 + size]
        try:
            message = json.loads(data)
        except ValueError as exc:
            raise GodotRLProtocolError(f"the game's message is not valid JSON ({exc}): {_shown(data)}") from None
        if not isinstance(message, dict):
            raise GodotRLProtocolError(f"the game's message is not a JSON object: {_shown(data)}")
        return message

    def close(self) -> None:
        """Close the connection; idempotent."""
        connection, self._socket = self._socket, None
        if connection is not None:
            try:
                connection.close()
            except OSError:
                pass
