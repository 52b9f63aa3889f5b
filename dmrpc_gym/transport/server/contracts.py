"""What each part of the server's protocol needs of the protocol it is mixed into.

:class:`~dmrpc_gym.transport.server.protocol.GrpcProtocol` is assembled from parts: what comes in
(``Requests``), what goes out (``Replies``), the answering of requests (``Answering``), the watch over a stalled peer (``Watching``)
and the steady path (``Steady``). A part
uses state that ``GrpcProtocol.__init__`` sets and methods that the other parts define; these
protocols write that down, one per part. ``tests/transport/test_contracts.py`` holds each part to
its protocol: every name the part uses and does not define itself is in it, and ``GrpcProtocol``
provides every name.

>>> sorted(set(RequestsHost.__annotations__) & set(RepliesHost.__annotations__))
['_flow', '_streams']
"""
from __future__ import annotations

import asyncio
from typing import Protocol

import hpack

from dmrpc_gym.transport.flow import Flow
from dmrpc_gym.transport.frames import StreamError
from dmrpc_gym.transport.headers import HeaderBlock
from dmrpc_gym.transport.server.conduct import Conduct
from dmrpc_gym.transport.server.stream import Stream
from dmrpc_gym.transport.server.traffic import Traffic

__all__ = ["RequestsHost", "RepliesHost", "AnsweringHost", "WatchingHost", "SteadyHost"]


class RequestsHost(Protocol):
    """What ``Requests`` (DATA under flow control, requests queued and inflated) needs."""

    _streams: dict[int, Stream]
    _last_stream: int
    _max_message: int
    _flow: Flow
    _part: list | None
    _frames_done: int

    def _write(self, data: bytes) -> None: ...
    def _run(self, stream: Stream) -> None: ...
    def _refuse(self, stream: Stream, err: StreamError, client_done: bool) -> None: ...
    def _reset(self, stream: Stream, code: int) -> None: ...


class RepliesHost(Protocol):
    """What ``Replies`` (answers, trailers and resets, under the peer's flow control) needs."""

    _streams: dict[int, Stream]
    _transport: asyncio.Transport | None
    _app_headers: tuple[tuple[str, str], ...]
    _conduct: Conduct | None
    _encoder: hpack.Encoder
    _flow: Flow
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
    """What ``Watching`` (the deadline of a frame or header block begun, idle connections) needs."""

    _streams: dict[int, Stream]
    _transport: asyncio.Transport | None
    _buf: bytearray
    _part: list | None
    _closed: bool
    _conduct: Conduct | None
    _headers_in: HeaderBlock
    _preface: bool
    _frames_done: int
    _blocks_done: int
    _tick: asyncio.TimerHandle | None

    def abort(self, code: int = 0, debug: str = "", linger: bool = False) -> None: ...


class SteadyHost(Protocol):
    """What ``Steady`` (the steady path: whole small requests answered as they are read) needs.

    Of the connection's state it reads, before it takes a frame, only what says the general path
    would do the same with it: nothing buffered (``_buf``), the preface read, no header block open,
    not lingering, the socket writable; and of the stream, its states, its splitter idle, no queue,
    no compression. It moves that state only through the calls the general path makes: the flow
    state's ``received`` (or ``refund``, declining) and ``take`` (:class:`~dmrpc_gym.transport.flow.Flow`),
    ``_write`` / ``_hold`` / ``_flush_held``, and the counters ``_frames_done`` and ``_traffic``;
    an answer past the windows goes by ``_send``, and ``_serve`` takes the requests that came meanwhile.
    ``tests/transport/test_steady_state.py`` holds the two paths to the same state after N requests.
    """

    _streams: dict[int, Stream]
    _transport: asyncio.Transport | None
    _buf: bytearray
    _part: list | None
    _flow: Flow
    _preface: bool
    _lingering: bool
    _headers_in: HeaderBlock
    _writable: bool
    _held: list[bytes] | None
    _closed: bool
    _conduct: Conduct | None
    _frames_done: int
    _traffic: Traffic

    def _frames_received(self, data: bytes) -> None: ...
    def _write(self, data: bytes) -> None: ...
    def _hold(self) -> None: ...
    def _flush_held(self) -> None: ...
    async def _send(self, stream: Stream, message: bytes | list) -> None: ...
    async def _serve(self, stream: Stream) -> None: ...
    def _failed(self, stream: Stream, exc: BaseException) -> None: ...
    def _served(self, stream: Stream, over: bool) -> None: ...
