"""What each part of the server's protocol needs of the protocol it is mixed into.

:class:`~dmrpc_gym.transport.server.protocol.GrpcProtocol` is assembled from parts: what comes in
(``Requests``), what goes out (``Replies``), the answering of requests (``Answering``) and the watch over a stalled peer (``Watching``). A part
uses state that ``GrpcProtocol.__init__`` sets and methods that the other parts define; these
protocols write that down, one per part. ``tests/transport/test_contracts.py`` holds each part to
its protocol: every name the part uses and does not define itself is in it, and ``GrpcProtocol``
provides every name.

>>> sorted(set(RequestsHost.__annotations__) & set(RepliesHost.__annotations__))
['_streams']
"""
from __future__ import annotations

import asyncio
from typing import Protocol

import hpack

from dmrpc_gym.transport.flow import PeerSettings
from dmrpc_gym.transport.frames import StreamError
from dmrpc_gym.transport.headers import HeaderBlock
from dmrpc_gym.transport.server.conduct import Conduct
from dmrpc_gym.transport.server.stream import Stream
from dmrpc_gym.transport.server.traffic import Traffic

__all__ = ["RequestsHost", "RepliesHost", "AnsweringHost", "WatchingHost"]


class RequestsHost(Protocol):
    """What ``Requests`` (DATA under flow control, requests queued and inflated) needs."""

    _streams: dict[int, Stream]
    _last_stream: int
    _max_message: int
    _recv_window: int
    _credit: int

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
    _peer: PeerSettings
    _send_conn: int
    _closed: bool
    _held: list[bytes] | None
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
    async def _send(self, stream: Stream, message: bytes | list) -> None: ...
    def _trailers(self, stream: Stream, code: int, message: str, extra: tuple = ()) -> None: ...
    def _refuse(self, stream: Stream, err: StreamError, client_done: bool) -> None: ...
    def _finish(self, stream: Stream) -> None: ...


class WatchingHost(Protocol):
    """What ``Watching`` (the deadline of a frame or header block begun, idle connections) needs."""

    _streams: dict[int, Stream]
    _transport: asyncio.Transport | None
    _buf: bytearray
    _closed: bool
    _conduct: Conduct | None
    _headers_in: HeaderBlock
    _preface: bool
    _frames_done: int
    _blocks_done: int
    _tick: asyncio.TimerHandle | None

    def abort(self, code: int = 0, debug: str = "", linger: bool = False) -> None: ...
