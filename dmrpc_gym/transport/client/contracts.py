"""What each part of the client connection needs of the connection it is mixed into.

:class:`~dmrpc_gym.transport.client.connection.GrpcConnection` is assembled from parts, each a
mixin in a module of its own: the control frames (``ControlFrames``), large messages
(``LargeMessages``), the clock (``CallClock``), the connection between calls (``IdleConnection``) and the
steady path (``SteadyTrips``). A part
uses state that the connection's ``__init__`` sets and methods that other parts define; the
protocols here write that down, one per part, so that a part can be read (and changed) without
reading the whole. ``tests/transport/test_contracts.py`` holds each part to its protocol: every
name the part uses and does not define itself is in it, and the connection provides every name.

>>> sorted(set(ControlHost.__annotations__) & set(IdleHost.__annotations__))
['_dead', '_goaway', '_kernel', '_sock', '_unsent', 'state', 'streams']
"""
from __future__ import annotations

import socket
import threading
from typing import TYPE_CHECKING, Any, Callable, Protocol

from dmrpc_gym.transport.client.state import ClientState
from dmrpc_gym.transport.frames import ProtocolError
from dmrpc_gym.transport.headers import HeaderBlock

if TYPE_CHECKING:   # the stream module imports nothing of these; typing only
    from dmrpc_gym.transport.client.stream import GrpcStream

__all__ = ["ControlHost", "LargeMessagesHost", "ClockHost", "IdleHost", "SteadyHost", "SteadyState"]


class ControlHost(Protocol):
    """What ``ControlFrames`` (SETTINGS, WINDOW_UPDATE, GOAWAY, PING; the handshake) needs."""

    streams: dict[int, GrpcStream]
    _sock: socket.socket
    _dead: Exception | None
    _goaway: str | None
    state: ClientState
    _ping_every: float | None
    _settled: bool
    _unsent: bytes
    _kernel: bool

    def _at_once(self, call: Callable[[int], int]) -> int | None: ...
    def _read_frame(self, one: bool = False) -> None: ...
    def _begin(self) -> None: ...
    def _end_call(self) -> None: ...
    def _pong(self) -> None: ...


class LargeMessagesHost(Protocol):
    """What ``LargeMessages`` (messages past one DATA frame, both ways) needs."""

    _sock: socket.socket
    _dead: Exception | None
    _deadline: float | None
    _kernel: bool
    _header_alone: bool
    state: ClientState
    _ping_every: float | None
    _timeout: float | None
    _timeout_by_select: bool
    _unsent: bytes
    messages_sent: int

    def send(self, data: bytes, stream: GrpcStream | None = None) -> None: ...
    def _read_frame(self, one: bool = False) -> None: ...
    def _arm(self) -> None: ...
    def _await_peer(self) -> None: ...
    def _heard_nothing(self, silent_from: float | None) -> float: ...
    def _fail(self, err: ProtocolError) -> None: ...
    def _owe(self, control: bytes) -> None: ...


class ClockHost(Protocol):
    """What ``CallClock`` (a call's deadline over all its socket operations) needs."""

    _sock: socket.socket
    _timeout: float | None
    _per_call: float | None


class IdleHost(Protocol):
    """What ``IdleConnection`` (the idle watcher's reads, keepalive PINGs, non-blocking looks) needs."""

    lock: threading.Lock
    streams: dict[int, GrpcStream]
    state: ClientState
    _sock: socket.socket
    _rbuf: bytearray
    _rview: memoryview
    _dead: Exception | None
    _goaway: str | None
    _kernel: bool
    _unsent: bytes
    messages_sent: int

    def send(self, data: bytes, stream: GrpcStream | None = None) -> None: ...
    def _take_frames(self, one: bool = False, whole: bool = False) -> None: ...
    def _at_once(self, call: Callable[[int], int]) -> int | None: ...
    def _set_timeout(self, seconds: float | None) -> None: ...


class SteadyHost(Protocol):
    """What ``SteadyTrips`` (the steady path: one frame out, one answer of a known layout in) needs.

    Of the connection it reads, before it sends, only what says the general ``write`` would send the
    frame at once (alive, nothing unsent or corked, no Jupyter kernel), and before it receives, only
    what says the general ``read`` would read the answer from a fresh ``recv`` (no timeout). Of the
    connection's state it requires :class:`SteadyState` (one call each way). It moves the rest only as
    the general path does: ``send`` for the WINDOW_UPDATEs owed, the counter ``messages_sent``.
    ``tests/transport/test_steady_state.py`` holds the two paths to the same state after N steps.
    """

    lock: threading.Lock
    state: ClientState
    messages_sent: int
    _sock: socket.socket
    _rbuf: bytearray
    _rview: memoryview
    _dead: Exception | None
    _unsent: bytes
    _corked: float
    _kernel: bool
    _per_call: float | None
    _timeout: float | None
    _timeout_by_select: bool
    recv_answer: Callable[[Any], int]

    def send(self, data: bytes, stream: GrpcStream | None = None) -> None: ...


class SteadyState(Protocol):
    """What the client's steady path requires of the connection's state
    (:class:`~dmrpc_gym.transport.client.state.ClientState`): one call per direction of a step, the
    calls the general path's bookkeeping makes: ``take`` (the request's send windows, as ``write``
    takes them; ``take_all`` for a vector step's requests, one per stream, all or none) and ``received``
    (the answer's DATA frame admitted and credited, as ``GrpcStream.on_data`` does: the WINDOW_UPDATEs
    owed); before it reads, nothing in ``buf``, no large frame ``part`` way, no
    header block open in ``headers_in``; an answer it does not take it leaves in ``buf`` for the general read,
    one it takes it counts in ``frames``, as the general read counts it.
    """

    buf: bytearray
    frames: int
    part: list | None
    headers_in: HeaderBlock

    def take(self, stream: GrpcStream, n: int) -> bool: ...
    def take_all(self, streams: list[GrpcStream], sizes: list[int]) -> bool: ...
    def received(self, stream: GrpcStream, n: int) -> bytes: ...
