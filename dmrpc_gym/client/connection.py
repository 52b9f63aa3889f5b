"""One dm_env_rpc connection: a gRPC stream of requests and in-order answers.

``Connection`` wraps each request in an ``EnvironmentRequest``, sends it, and
turns each answer into the matching response message or a ``DmRpcError``.
Requests may be pipelined: ``submit`` several, then ``receive`` their answers
in order. The stream is a :class:`~dmrpc_gym.transport.base.Transport`: our own
HTTP/2 client for an address (one thread, one socket, the fastest path), or
grpcio's stream for a caller's ``grpc.Channel`` or ``grpc.ChannelCredentials``.
"""
from __future__ import annotations

import os
import socket
from collections import deque
from typing import Any, Callable, Iterable, Mapping, Sequence

import grpc
from google.protobuf.message import DecodeError

from dmrpc_gym.protocol import tensors
from dmrpc_gym.protocol import large_tensors
from dmrpc_gym.protocol.errors import DmRpcError, status_name
from dmrpc_gym.protocol.wire import FEATURES_METADATA, SERVER_METADATA, pb
from dmrpc_gym.client.addresses import address_list
from dmrpc_gym.client.lifecycle import ConnectRetries, Patience
from dmrpc_gym.client.pending import Answer, Pending
from dmrpc_gym.protocol.region_refs import OFFER_HEADER
from dmrpc_gym.transport import (DEFAULT_MAX_MESSAGE, MIN_KEEPALIVE, NOT_SENT, TAKEN, TOKEN_ENV, GrpcioTransport,
                                 GrpcStatus, H2Transport, RegionLink, SharedConnections, StreamEnded, Transport,
                                 parse_address, request_header, token_metadata)

__all__ = ["Connection", "parse_address", "settings_tensors", "transport_options"]

# Request class -> (envelope field name, the envelope's tag bytes for that field).
_FIELDS = {
    pb.CreateWorldRequest: "create_world", pb.JoinWorldRequest: "join_world",
    pb.StepRequest: "step", pb.ResetRequest: "reset", pb.ResetWorldRequest: "reset_world",
    pb.LeaveWorldRequest: "leave_world", pb.DestroyWorldRequest: "destroy_world",
}
_EXTENSION = "extension"
# Stream endings that mean the server went away rather than refused something.
_GONE = (None, GrpcStatus.OK, GrpcStatus.UNAVAILABLE, GrpcStatus.CANCELLED)
REQUEST_TAGS = {name: bytes([(pb.EnvironmentRequest.DESCRIPTOR.fields_by_name[name].number << 3) | 2])
         for name in (*_FIELDS.values(), _EXTENSION)}


class Connection(ConnectRetries):
    """A dm_env_rpc client connection (one gRPC stream).

    Args:
        address: ``"host:port"`` (``"[IPv6]:port"``) of the server (plain TCP unless ``tls``), or
            ``"unix:PATH"``; with ``credentials``, gRPC's ``dns:``-style targets too. Anything else
            (a scheme such as ``http://``) is a ``ValueError`` at once, naming these forms. Or an
            ordered list of them: the stream goes to the first that serves it (one refusing the
            connection, or answering the first request UNAVAILABLE, is passed over for the next,
            round after round within ``connect_timeout``); :attr:`address` says which
            (:mod:`~dmrpc_gym.client.addresses`).
        channel: an existing ``grpc.Channel`` to use instead of ``address``.
        credentials: ``grpc.ChannelCredentials`` for a secure channel to ``address`` (through grpcio).
        tls: TLS on our own transport: True (the system's CA store), a CA bundle path, or
            an ``ssl.SSLContext``.
        token: a shared secret the server requires (sent as ``authorization: Bearer <token>``);
            default: the ``DMRPC_GYM_TOKEN`` environment variable when set (``""``: none).
        compression: ``"gzip"`` or ``"deflate"`` to compress requests (answers are decoded either way).
        max_message_size: the largest answer accepted, in bytes (default 64 MiB).
        metadata: call metadata, a sequence of ``(key, value)`` pairs.
        connect_timeout: seconds to wait for the server, retrying with backoff while it is not
            listening yet or answers UNAVAILABLE before its first answer; then ``ConnectionError``
            naming the address and the last cause. ``None``: one attempt, no time limit.
        timeout: seconds to wait for each answer, however it trickles in (``None``: no
            limit); then ``TimeoutError``.
        keepalive: seconds (at least 10) of quiet after which the connection PINGs the server
            (idle, or waiting for an answer), so that a dead or frozen peer is found
            (``ConnectionError`` naming the PING unanswered for 20 s); False: no PINGs. None
            (the default): every 10 s toward our own servers (known from their first answer,
            :attr:`server_software`), which permit that, so a call fails 30 s (at most 32) after
            the server's last word; none toward any other server. grpc servers by default allow
            one PING per 5 minutes on a connection that carries no data: give them at least
            300 for the same.
        shared: a :class:`~dmrpc_gym.transport.client.pool.SharedConnections`: the stream goes on
            the HTTP/2 connection it keeps for this server, with every other given the same.
        shared_memory: ask the server for shared memory (True, the default): a dmrpc_gym server on the
            same host then takes large tensors through a region both map
            (:mod:`~dmrpc_gym.transport.shared_memory`; :attr:`shared_memory` says whether it is used), and a
            plain TCP connection to it moves to its Unix socket (:mod:`~dmrpc_gym.transport.same_host`).
            False: plain dm_env_rpc messages only, over the address given.

    >>> from dmrpc_gym.server import Server
    >>> from dmrpc_gym.worlds.catch import Catch
    >>> with Server(Catch) as server, Connection(server.address) as conn:
    ...     world = conn.send(pb.CreateWorldRequest()).world_name
    ...     specs = conn.send(pb.JoinWorldRequest(world_name=world)).specs
    ...     sorted(spec.name for spec in specs.actions.values())
    ['paddle']
    """

    def __init__(self, address: str | Sequence[str] | None = None, *, channel: grpc.Channel | None = None,
                 credentials: grpc.ChannelCredentials | None = None,
                 metadata: Iterable[tuple[str, str]] | None = None,
                 connect_timeout: float | None = 10.0, timeout: float | None = None,
                 tls: Any = None, token: str | None = None, compression: str | None = None,
                 max_message_size: int = DEFAULT_MAX_MESSAGE, keepalive: float | bool | None = None,
                 shared: SharedConnections | None = None, shared_memory: bool = True):
        if (address is None) == (channel is None):
            raise ValueError("give exactly one of address= or channel=")
        if address is not None:      # a malformed one: at once
            addresses = address_list(address, grpc_targets=credentials is not None)
        else:
            target = getattr(channel, "_target", "<channel>")
            addresses = (target.decode() if isinstance(target, bytes) else target,)
        if tls not in (None, False) and (channel is not None or credentials is not None):
            raise ValueError("tls= is for our own client; with channel= or credentials= grpcio does TLS")
        check_keepalive(keepalive, channel)
        # None: PINGs every MIN_KEEPALIVE s once the server's first answer says it is one of ours.
        self._auto_keepalive = keepalive is None and channel is None and credentials is None
        keepalive = keepalive or None
        #: The addresses to try, in order; :attr:`address` is the one this stream went to.
        self.addresses = addresses
        self.address = addresses[0]
        self.timeout = timeout
        self.max_message_size = max_message_size
        metadata = tuple(metadata or ()) + token_metadata(os.environ.get(TOKEN_ENV) if token is None else token or None)
        nonce = None
        if shared_memory:
            nonce, header = request_header()
            metadata += (header,)
        #: This connection's shared memory (:class:`~dmrpc_gym.transport.shared_memory.RegionLink`).
        self.regions = RegionLink(nonce)
        self._own_channels: dict[str, grpc.Channel] = {}    # credentials=: one per address, as tried
        if channel is None and credentials is None:
            def open_transport(target: str, seconds: float | None) -> Transport:
                return H2Transport(target, metadata, seconds, tls=tls, compression=compression,
                                   max_message_size=max_message_size, ping_every=keepalive, shared=shared,
                                   same_host=shared_memory)
        else:
            def open_transport(target: str, seconds: float | None) -> Transport:
                used = channel
                if used is None:
                    used = self._own_channels.get(target)
                    if used is None:
                        options = [("grpc.keepalive_time_ms", int(keepalive * 1000))] if keepalive else []
                        used = self._own_channels[target] = grpc.secure_channel(target, credentials, options=options)
                return GrpcioTransport(used, metadata, seconds, target, wait_ready=not hasattr(self, "_transport"))
        self._open = open_transport
        self._patience = Patience(connect_timeout, addresses)
        try:
            self._transport: Transport = self._connect()
        except BaseException:
            self._close_channels()
            raise
        # The requests written before the first answer: sent again if the server goes away
        # (UNAVAILABLE, reset) before answering; None once an answer has come.
        self._first: list[tuple] | None = []
        self._pending: deque[Pending] = deque()  # the requests whose answers are still to come, in order
        self._entries = 0                     # requests written so far (the number of the latest)
        self._broken: str | None = None
        self._closed = False

    # -- requests --------------------------------------------------------------
    def submit(self, request: Any, pieces: large_tensors.Pieces | None = None) -> None:
        """Send ``request`` (e.g. ``pb.StepRequest``) without waiting for its answer.

        ``pieces``: large actions that follow the request's own (:mod:`~dmrpc_gym.protocol.large_tensors`).
        """
        field = _FIELDS.get(type(request))
        if field is None:
            raise TypeError(f"{type(request).__name__} is not a dm_env_rpc request")
        self._write(field, request.SerializeToString(), pieces)

    def submit_extension(self, payload: Any) -> None:
        """Send a ``google.protobuf.Any`` in the envelope's ``extension`` slot."""
        self._write(_EXTENSION, payload.SerializeToString())

    def _write(self, field: str, body: bytes, pieces: large_tensors.Pieces | None = None, parts: Any = None) -> None:
        """Send one request (``parts``: its message already framed, as recorded for a resend)."""
        self._check_usable()
        if field == "step" and self.regions.region is not None and self._pending and any(
                entry.field == "step" and entry.answer is Answer.OWED for entry in self._pending):
            raise RuntimeError("a step through shared memory while another step's answer is owed: one step at a "
                               "time per connection (its region holds one step's tensors)")
        transport = self._transport
        before = transport.messages_sent
        if parts is None:
            parts = pieces.envelope(REQUEST_TAGS[field], body) if pieces else (REQUEST_TAGS[field] + tensors.varint(len(body)), body)
        self._entries += 1
        entry = Pending(field, self._entries)
        pending = self._pending
        try:
            transport.write(*parts)
            if self._first is not None:
                self._first.append(parts)
            pending.append(entry)
        except StreamEnded as ended:
            if not self._retry_first(ended, parts):
                raise self._ended_error(ended, field) from None
            pending.append(entry)
        except OSError as err:
            if not self._retry_first(err, parts):
                raise self.send_failed(err) from None
            pending.append(entry)
        except BaseException:
            # Interrupted (Ctrl-C), wherever after the write began: a request committed to the
            # stream will be answered, and that answer is dropped when it comes.
            if transport.broken:
                self._broken = "a send was interrupted half-way through a message"
            elif transport.messages_sent != before:
                entry.drop()
                if not pending or pending[-1] is not entry:
                    pending.append(entry)
            raise

    def answer_ready(self) -> bool:
        """Whether an answer can be read now without waiting (what arrived is taken in first;
        True where it cannot be told, over a grpcio channel: reading then waits)."""
        ready = getattr(self._transport, "answer_ready", None)
        return True if ready is None or self._broken else ready()

    def fileno(self) -> int | None:
        """The socket to wait on for answers (``select`` / ``poll``); None over a grpcio channel."""
        fileno = getattr(self._transport, "fileno", None)
        return None if fileno is None or self._broken else fileno()

    def receive(self) -> Any:
        """The answer to the oldest submitted request; raises ``DmRpcError`` for an error answer."""
        return self._receive(0)[0]

    def receive_step(self, steady: Callable[[bytes], Any] | None = None) -> tuple[Any, dict[int, large_tensors.Decoded] | None]:
        """The answer to the oldest request, a StepRequest: the response and, apart, its large
        observations by UID (:func:`~dmrpc_gym.protocol.large_tensors.split`). ``steady``: a decoder of answers
        of a known layout (:mod:`~dmrpc_gym.client.steady_step`); what it returns comes with None."""
        return self._receive(large_tensors.OBSERVATIONS, steady)

    def _receive(self, map_field: int, steady: Callable[[bytes], Any] | None = None) -> tuple[Any, Any]:
        pending = self._pending
        current = pending[0] if pending and pending[0].answer is Answer.OWED else next(
            (entry for entry in pending if entry.answer is Answer.OWED), None)
        if current is None:
            raise RuntimeError("receive() without a submitted request")
        try:
            while pending[0] is not current:   # answers to interrupted calls: read and drop
                self._read_one(pending[0].field)
                pending.popleft()
            response, large = self._read_one(current.field, map_field, steady if self._first is None else None)
        except BaseException:
            current.drop()           # its answer, if it comes, is dropped later too
            raise
        pending.popleft()
        if large is None:                        # the steady decoder's result
            return response, None
        field = current.field
        which = response.WhichOneof("payload")
        if self._first is not None:             # the first answer: the server is up
            first, self._first = self._first, None
            if which == "error" and response.error.code == GrpcStatus.UNAVAILABLE and len(first) == 1 and not pending:
                self._ask_again(first, field, response.error)
                return self._receive(map_field)
            if self._auto_keepalive and self.server_software is not None:
                self._transport.keep_pinging(MIN_KEEPALIVE)     # our server permits it at this floor
        if which == field:
            return getattr(response, which), large
        if which == "error":
            raise DmRpcError.from_status(response.error, request=field)
        raise DmRpcError(13, f"the server answered a {field} request with {which!r}", request=field)

    def _read_one(self, field: str, map_field: int = 0, steady: Callable[[bytes], Any] | None = None) -> tuple:
        self._check_usable()
        while True:
            try:
                message = self._transport.read(self.timeout)
                if steady is not None:           # (a steady step's decoder: it also learns from them)
                    result = steady(message)
                    if result is not None:
                        return result, None
                try:
                    message, large = large_tensors.split(message, map_field)
                    if map_field and self.regions.region is not None:    # references into the region
                        message, placed = self.regions.resolve(message, map_field)
                        if placed:
                            large = {**large, **placed} if large else placed
                    return pb.EnvironmentResponse.FromString(message), large
                except (DecodeError, ValueError) as err:   # the stream's order can no longer be trusted
                    self._broken = f"the server sent an answer that is no EnvironmentResponse: {err}"
                    raise ConnectionError(f"the dm_env_rpc server at {self.address} answered {field} with "
                                          f"{len(message)} bytes that are no EnvironmentResponse ({err})") from None
            except socket.timeout:
                raise TimeoutError(f"no answer to {field} from the dm_env_rpc server at "
                                   f"{self.address} within {self.timeout} s") from None
            except StreamEnded as ended:
                if not self._retry_first(ended):
                    raise self._ended_error(ended, field) from None
            except OSError as err:
                if not self._retry_first(err):
                    raise self._read_failed(err, field) from None

    def send(self, request: Any) -> Any:
        """Send ``request`` and return its answer (e.g. a ``pb.StepResponse``)."""
        return self._exchange(0, self.submit, request)[0]

    def send_step(self, request: pb.StepRequest, pieces: large_tensors.Pieces | None = None,
                  steady: Callable[[bytes], Any] | None = None) -> tuple[Any, dict[int, large_tensors.Decoded] | None]:
        """Send a StepRequest and return its answer as :meth:`receive_step` does (``steady``: as there)."""
        return self._exchange(large_tensors.OBSERVATIONS, self.submit, request, pieces, steady=steady)

    def steady_write(self, link: Any, framed: tuple[bytes, int], layout: Any) -> Any:
        """A steady step (:mod:`~dmrpc_gym.client.steady_step`): ``framed`` (its DATA frame, payload size) sent
        in one round trip of ``link``, counted and owed as :meth:`submit` does: the answer where it has ``layout``;
        None: it comes the general way; ``NOT_SENT``: nothing sent (closed, broken, first or owed answers)."""
        if self._closed or self._broken or self._first is not None or self._pending:
            return NOT_SENT
        stream, before, number = link.stream, link.stream.messages_sent, self._entries + 1
        self._entries = number
        try:
            message = link.connection.round_trip(link, framed[0], framed[1], layout, self.timeout)
        except BaseException as err:
            if stream.messages_sent == before or link.phase == TAKEN:
                raise                            # nothing sent, or its answer is in: nothing owed
            if isinstance(err, OSError):
                raise (self._read_failed(err, "step") if link.phase else self.send_failed(err)) from None
            entry = Pending("step", number)      # as _write: its answer is dropped when it comes
            entry.drop()
            self._pending.append(entry)
            raise
        if message is None:
            self._pending.append(Pending("step", number))
        return message

    @property
    def steady_idle(self) -> bool:
        """Whether a vector step's steady request (:mod:`~dmrpc_gym.client.steady_batch`) may go: the connection usable,
        its first answer in, no answer owed (as :meth:`steady_write` requires)."""
        return not (self._closed or self._broken or self._first is not None or self._pending)

    def owe_step(self) -> None:
        """A step request was sent on this stream by a vector step's one send (``send_frames``): its answer is
        owed, as :meth:`submit` owes it (read by :meth:`steady_answer`, or the general way)."""
        self._entries += 1
        self._pending.append(Pending("step", self._entries))

    def steady_answer(self, link: Any) -> bytearray:
        """The answer to the owed step that the vector step's read took for ``link`` (``take_answers``)."""
        message = link.answer()
        self._pending.popleft()
        return message

    @property
    def steady_link(self) -> Any:
        """The transport's :class:`~dmrpc_gym.transport.SteadyLink` (ours has one; a grpcio channel: None)."""
        return getattr(self._transport, "steady", None)

    def send_extension(self, payload: Any) -> Any:
        """Send an extension ``Any`` and return the ``Any`` answered."""
        return self._exchange(0, self.submit_extension, payload)[0]

    def _exchange(self, map_field: int, submit: Callable[..., None], *args: Any,
                  steady: Callable[[bytes], Any] | None = None) -> tuple[Any, dict]:
        """``submit(*args)``, then its answer, as one call: should it be interrupted anywhere,
        even between the two (Ctrl-C), its answer is dropped when it comes, never taken for the
        answer to a later request."""
        first = self._entries + 1
        try:
            submit(*args)
            return self._receive(map_field, steady)
        except BaseException:
            for entry in self._pending:
                if entry.number >= first and entry.answer is Answer.OWED:
                    entry.drop()
            raise

    def plan_regions(self, actions: Mapping[int, tuple[int, int]], observations: Mapping[int, tuple[int, int]],
                     **shared: Any) -> None:
        """Lay out a joined world's large tensors in shared memory, where the server offers it
        (:meth:`~dmrpc_gym.transport.shared_memory.RegionLink.plan`)."""
        regions = self.regions
        if regions.nonce is not None:
            regions.offer = self._transport.initial_metadata.get(OFFER_HEADER)
            regions.plan(actions, observations, **shared)

    @property
    def shared_memory(self) -> str:
        """Whether this connection uses shared memory (``"on"``), or why not (``"off"``, ``"not offered by
        the server ..."``, ``"unused ..."``, ``"failed: ..."``)."""
        return self.regions.state

    @property
    def same_host(self) -> bool:
        """Whether the stream goes over a dmrpc_gym server's Unix socket, moved there from TCP
        (:mod:`~dmrpc_gym.transport.same_host`)."""
        return bool(getattr(self._transport, "same_host", False))

    def send_failed(self, err: OSError) -> ConnectionError:
        """A send failed: the connection is unusable, and the error to raise says why."""
        self.regions.release()
        self._broken = f"sending failed: {err}"
        return ConnectionError(f"lost the dm_env_rpc server at {self.address}: {err}")

    def _read_failed(self, err: OSError, field: str) -> ConnectionError:
        """Reading the answer to ``field`` failed: the connection is unusable, and the error says why."""
        self.regions.release()
        self._broken = f"the connection failed: {err}"
        return ConnectionError(f"lost the dm_env_rpc server at {self.address} during {field}: {err}")

    def shorten_timeout(self, seconds: float) -> None:
        """Wait at most ``seconds`` for each answer from now on (never lengthens the limit)."""
        self.timeout = seconds if self.timeout is None else min(seconds, self.timeout)

    # -- state -----------------------------------------------------------------
    def _ended_error(self, ended: StreamEnded, field: str) -> Exception:
        """The stream is over: a status the server chose is a ``DmRpcError``; a server
        going away (no status, OK, UNAVAILABLE or CANCELLED) is a ``ConnectionError``."""
        self.regions.release()
        self._broken = ended.message
        if ended.status not in _GONE:
            return DmRpcError(ended.status, ended.message, request=field)
        why = ended.message if ended.status in (None, 0) else f"{status_name(ended.status)}: {ended.message}"
        return ConnectionError(f"the dm_env_rpc server at {self.address} ended the "
                               f"connection during {field}: {why}")

    def _check_usable(self) -> None:
        if self._closed:
            raise ConnectionError(f"the connection to {self.address} is closed")
        if self._broken:
            raise ConnectionError(f"the connection to {self.address} is unusable: {self._broken}")

    @property
    def server_software(self) -> str | None:
        """``"dmrpc-gym/VERSION"`` when the server is one of ours (it says so in its response
        headers, known once it has answered), else None."""
        version = self._transport.initial_metadata.get(SERVER_METADATA)
        return None if version is None else f"dmrpc-gym/{version}"

    @property
    def server_features(self) -> frozenset[str]:
        """What a dmrpc_gym server offers beyond dm_env_rpc (its response headers say;
        known once it has answered), such as ``"info"``; empty for any other server."""
        listed = self._transport.initial_metadata.get(FEATURES_METADATA, "")
        return frozenset(f.strip() for f in listed.split(",") if f.strip())

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def failure(self) -> str | None:
        """Why the connection was lost (the stream ended or failed), or None while it is usable
        or after a ``close()`` of our own."""
        return self._broken

    def close(self) -> None:
        """Close the stream. Idempotent; never blocks for long."""
        if self._closed:
            return
        self._closed = True
        try:
            self._transport.close()
        finally:
            self.regions.close()
            self._close_channels()

    def _close_channels(self) -> None:
        for channel in getattr(self, "_own_channels", {}).values():
            channel.close()

    def __enter__(self) -> "Connection":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass


def settings_tensors(settings: Mapping[str, Any] | None) -> dict[str, pb.Tensor]:
    """World / join / reset settings (Python values or arrays) as Tensors."""
    return {str(k): v if isinstance(v, pb.Tensor) else tensors.pack(v)
            for k, v in (settings or {}).items()}


def check_keepalive(keepalive: float | bool | None, channel: Any = None) -> None:
    """``ValueError`` unless ``keepalive`` is None, False or at least ``MIN_KEEPALIVE`` seconds (and we own the channel)."""
    if keepalive is None or keepalive is False:
        return
    if isinstance(keepalive, bool) or not isinstance(keepalive, (int, float)) or not keepalive >= MIN_KEEPALIVE:
        raise ValueError(f"keepalive must be None or at least {MIN_KEEPALIVE:g} seconds, or False for no PINGs "
                         f"(servers end connections that PING more often, GOAWAY too_many_pings), got {keepalive!r}")
    if channel is not None:
        raise ValueError("keepalive= is for connections we open; give your channel= the option grpc.keepalive_time_ms")


def transport_options(tls: Any = None, token: str | None = None, compression: str | None = None,
                      max_message_size: int | None = None, keepalive: float | None = None,
                      shared: SharedConnections | None = None, shared_memory: bool | None = None) -> dict[str, Any]:
    """The :class:`Connection` keywords an env passes on (those left at None keep their defaults)."""
    options = dict(tls=tls, token=token, compression=compression, max_message_size=max_message_size,
                   keepalive=keepalive, shared=shared, shared_memory=shared_memory)
    return {k: v for k, v in options.items() if v is not None}
