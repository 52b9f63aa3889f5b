"""What each part of the server's protocol needs of the protocol it is mixed into.

:class:`~dmrpc_gym.transport.server.protocol.GrpcProtocol` is assembled from parts: what comes in
(``Requests``), what goes out (``Replies``), the answering of requests (``Answering``), the watch over a stalled peer (``Watching``)
and the steady path (``Steady``). A part
uses state that ``GrpcProtocol.__init__`` sets and methods that the other parts define; these
protocols write that down, one per part. ``tests/transport/test_contracts.py`` holds each part to
its protocol: every name the part uses and does not define itself is in it, and ``GrpcProtocol``
provides every name.

>>> sorted(set(RequestsHost.__annotations__) & set(RepliesHost.__annotations__))
['state']

What the steady path requires of the connection's state (not of the protocol) is :class:`SteadyState`:
the few names of :class:`~dmrpc_gym.transport.server.state.ServerState` it reads and the two calls it
makes, once per direction of a step.
"""
from __future__ import annotations

import asyncio
from typing import Protocol

from dmrpc_gym.transport.headers import HeaderBlock
from dmrpc_gym.transport.frames import StreamError
from dmrpc_gym.transport.server.state import ServerState
from dmrpc_gym.transport.server.stream import Stream
from dmrpc_gym.transport.server.traffic import Traffic

__all__ = ["RequestsHost", "RepliesHost", "AnsweringHost", "WatchingHost", "SteadyHost", "SteadyState"]


class RequestsHost(Protocol):
    """What ``Requests`` (requests queued from admitted DATA, inflated as taken) needs."""

    state: ServerState
    _max_message: int

    def _write(self, data: bytes) -> None: ...
    def _run(self, stream: Stream) -> None: ...
    def _refuse(self, stream: Stream, err: StreamError, client_done: bool) -> None: ...
    def _reset(self, stream: Stream, code: int) -> None: ...


class RepliesHost(Protocol):
    """What ``Replies`` (answers, trailers and resets, under the peer's flow control) needs."""

    state: ServerState
    _transport: asyncio.Transport | None
    _app_headers: tuple[tuple[str, str], ...]
    _closed: bool
    _held: list[bytes] | None
    _fd: int | None
    _writable: bool
    _can_write: asyncio.Event
    _window_open: asyncio.Event
    _traffic: Traffic

    def _finish(self, stream: Stream) -> None: ...


class AnsweringHost(Protocol):
    """What ``Answering`` (a stream's requests answered in order; how its answering ends) needs."""

    _closed: bool

    def _consumed(self, stream: Stream, n: int) -> None: ...
    async def _inflate(self, stream: Stream, raw: bytes) -> bytes | bytearray: ...
    def _steady_answer(self, stream: Stream, raw: bytes) -> bytes | None: ...
    async def _send(self, stream: Stream, message: bytes | list) -> None: ...
    def _trailers(self, stream: Stream, code: int, message: str, extra: tuple = ()) -> None: ...
    def _refuse(self, stream: Stream, err: StreamError, client_done: bool) -> None: ...
    def _finish(self, stream: Stream) -> None: ...


class WatchingHost(Protocol):
    """What ``Watching`` (the deadlines: a timer asking the state whether one has passed) needs."""

    state: ServerState
    _transport: asyncio.Transport | None
    _closed: bool
    _tick: asyncio.TimerHandle | None

    def abort(self, code: int = 0, debug: str = "", linger: bool = False) -> None: ...


class SteadyHost(Protocol):
    """What ``Steady`` (the steady path: whole small requests answered as they are read) needs of the protocol.

    Of the connection it reads only its state (:class:`SteadyState`), whether it lingers and whether
    the socket is writable. It writes as the general path writes (``_write`` / ``_hold`` /
    ``_flush_held``, ``_traffic``'s byte counters); an answer past the windows goes by ``_send``, and
    ``_serve`` takes the requests that came meanwhile.
    ``tests/transport/test_steady_state.py`` holds the two paths to the same state after N requests.
    """

    state: ServerState
    _transport: asyncio.Transport | None
    _lingering: bool
    _writable: bool
    _held: list[bytes] | None
    _held_since: float
    _closed: bool
    _traffic: Traffic

    def _frames_received(self, data: bytes) -> None: ...
    def _write(self, data: bytes) -> None: ...
    def _hold(self) -> None: ...
    def _flush_held(self) -> None: ...
    async def _send(self, stream: Stream, message: bytes | list) -> None: ...
    async def _serve(self, stream: Stream) -> None: ...
    def _failed(self, stream: Stream, exc: BaseException) -> None: ...
    def _served(self, stream: Stream, over: bool) -> None: ...


class SteadyState(Protocol):
    """What the steady path requires of the connection's state (:class:`~dmrpc_gym.transport.server.state.ServerState`).

    It takes a frame only where the state holds nothing begun (``buf`` empty, no ``part``, no header
    block open in ``headers_in``) once ``started`` (the preface came), on a stream of ``streams``; it moves the
    state with one call per direction of a step, the calls the general path's bookkeeping makes:
    ``received`` (the DATA frame admitted by both receive windows and consumed: the WINDOW_UPDATEs
    owed), ``refund`` where the handler declines (the general path then admits it), and ``take``
    (the answer's send window, and DATA out for the PING policing); and it counts the frame in
    ``frames`` as the general path's loop does.
    """

    buf: bytearray
    part: list | None
    started: bool
    headers_in: HeaderBlock
    streams: dict[int, Stream]
    frames: int

    def received(self, stream: Stream, n: int) -> bytes: ...
    def refund(self, stream: Stream, n: int) -> None: ...
    def take(self, stream: Stream, n: int) -> bool: ...
