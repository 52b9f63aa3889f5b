"""What a gRPC call on our server is before it runs: its stream state, and whether it is admitted.

A call is refused (trailers only) for a header list past the server's limit,
an unknown method, a missing or wrong token, or a message encoding we do not
speak; an HTTP/1.x peer gets a plain HTTP/1.1 answer instead of HTTP/2 frames.

>>> refusal_of({":path": "/dm_env_rpc.v1.Environment/Process", ":method": "POST"}, token="s3cret")[0]
<GrpcStatus.UNAUTHENTICATED: 16>
>>> methods = {"/pkg.Health/Check": Method(lambda headers: None, without_token=True)}
>>> refusal_of({":path": "/pkg.Health/Check", ":method": "POST"}, "s3cret", methods=methods) is None
True
>>> refusal_of({":path": "/x", ":method": "POST"}, None, methods=methods)[1]
'unknown method /x; this server serves /pkg.Health/Check'
>>> refusal_of({}, None, size=20000, limit=16384)[:2]
(<GrpcStatus.RESOURCE_EXHAUSTED: 8>, 'the request headers are 20000 bytes, more than this server takes: 16384 (ConnectionLimits.max_header_list_size)')
"""
from __future__ import annotations

import asyncio
from collections import deque
from typing import Awaitable, Mapping, Protocol

from dmrpc_gym.protocol.wire import METHOD_PATH
from dmrpc_gym.transport import compression as encodings
from dmrpc_gym.transport.codes import GrpcStatus
from dmrpc_gym.transport.frames import DEFAULT_WINDOW, SERVER_MESSAGE_LIMIT, MessageSplitter
from dmrpc_gym.transport.security import TOKEN_ENV, token_matches
from dmrpc_gym.transport.server.methods import Method, served
from dmrpc_gym.transport.stream_states import Inbound, Outbound
from dmrpc_gym.transport.windows import Window

__all__ = ["StreamHandler", "Stream", "Inbound", "Outbound", "refusal_of", "HTTP1_ANSWER", "HEADER_LIMIT"]

#: What sets the server's header-list limit, as its refusals name it.
HEADER_LIMIT = "ConnectionLimits.max_header_list_size"
_HTTP1_BODY = b"This is a gRPC server: it speaks HTTP/2 only.\n"
HTTP1_ANSWER = (b"HTTP/1.1 505 HTTP Version Not Supported\r\nConnection: close\r\nContent-Type: text/plain\r\n"
                 b"Content-Length: %d\r\n\r\n%s" % (len(_HTTP1_BODY), _HTTP1_BODY))


#: The methods of a server that names none: dm_env_rpc's one method.
_PROCESS_ONLY = {METHOD_PATH: Method(lambda headers: None)}


class StreamHandler(Protocol):
    """What a stream talks to: answers requests in order, and is closed when the stream ends."""

    def handle(self, raw: bytes) -> Awaitable[bytes]: ...

    def close(self) -> None: ...

    # Optional: ``steady``, a ``steady(message, room)`` answering a request synchronously with the answer's
    # bytes, or None (:mod:`~dmrpc_gym.transport.server.steady`); the attribute may change as the session goes.


class Stream:
    """One call's state on the server: flow-control window, requests in, and how answers go out.

    ``inbound`` and ``outbound`` are the stream's state (:class:`~dmrpc_gym.transport.stream_states.Inbound`,
    :class:`~dmrpc_gym.transport.stream_states.Outbound`: the client's half begins OPEN, with its HEADERS);
    ``send`` and ``recv`` its flow-control windows (:class:`~dmrpc_gym.transport.windows.Window`).
    ``busy`` is no state of the stream but a guard: someone is answering its requests now (on the
    loop's turn that read them, or in ``task``), and takes any new ones in order.

    >>> stream = Stream(1, window=65535, limit=1 << 20)
    >>> stream.splitter.limit, stream.inbound, stream.outbound, list(stream.inbox)
    (1048576, <Inbound.OPEN: 'open'>, <Outbound.FRESH: 'fresh'>, [])
    >>> stream.send, stream.recv
    (Window(size=65535, credit=0), Window(size=65535, credit=0))
    """

    __slots__ = ("id", "send", "recv", "held", "splitter", "inbox", "session", "busy", "task",
                 "inbound", "outbound", "compress", "encoding", "many", "steady_host", "declined")

    def __init__(self, stream_id: int, window: int, limit: int, recv_window: int = DEFAULT_WINDOW):
        self.id = stream_id
        self.send = Window(window)       # what we may send on it (the client's flow control)
        self.recv = Window(recv_window)  # what the client may still send on it (ours), and the credit owed
        self.held = 0                    # bytes received and not yet consumed by the session
        self.splitter = MessageSplitter(limit, option=SERVER_MESSAGE_LIMIT)
        self.inbox: deque = deque()      # requests (compressed ones as Deflated), then None once the client is done
        self.session: StreamHandler | None = None
        self.busy = False                # answering requests (on the loop's turn, or in ``task``)
        self.task: asyncio.Task | None = None   # carries the answering on when it had to wait
        self.inbound = Inbound.OPEN
        self.outbound = Outbound.FRESH
        self.compress = None             # compresses our answers in the client's request encoding
        self.encoding = None
        self.many = False                # its method answers a request with many messages (set at HEADERS)
        self.steady_host = None          # the session, where it has a ``steady`` answer (set at HEADERS)
        self.declined = False            # its next request was asked for a steady answer already: no

    def end(self) -> None:
        """Our half is over (trailers or a reset sent, or the connection lost); again: nothing more."""
        if self.outbound is not Outbound.ENDED:
            self.outbound = self.outbound.to(Outbound.ENDED)


def refusal_of(headers: Mapping[str, str], token: str | None, size: int = 0, limit: int | None = None,
               methods: Mapping[str, Method] | None = None) -> tuple[int, str, tuple] | None:
    """``(status, message, extra trailers)`` for a call we will not serve, else None.

    ``size``: the header list's size as RFC 9113 counts it; past ``limit`` the call is
    RESOURCE_EXHAUSTED, as C-core's servers answer it. ``methods``: what is served
    (:class:`~dmrpc_gym.transport.server.methods.Method` by path; None: dm_env_rpc's
    ``Process`` only); another path is UNIMPLEMENTED, naming those served.
    """
    if limit is not None and size > limit:
        return (GrpcStatus.RESOURCE_EXHAUSTED, f"the request headers are {size} bytes, more than this server takes: "
                f"{limit} ({HEADER_LIMIT})", ())
    path = headers.get(":path", "")
    method = _PROCESS_ONLY.get(path) if methods is None else methods.get(path)
    if method is None or headers.get(":method") != "POST":
        return (GrpcStatus.UNIMPLEMENTED, f"unknown method {path}; this server serves "
                f"{served(_PROCESS_ONLY if methods is None else methods)}", ())
    if token is not None and not method.without_token and not token_matches(headers, token):
        said = "no token was sent" if "authorization" not in headers else "the token sent is not this server's"
        return (GrpcStatus.UNAUTHENTICATED, f"this server requires a token and {said} (metadata authorization: "
                f"Bearer <token>; dmrpc_gym clients: token= or {TOKEN_ENV}, dmrpc-gym commands: --token)", ())
    encoding = headers.get("grpc-encoding", "identity")
    if encoding != "identity" and encoding not in encodings.ENCODINGS:
        return (GrpcStatus.UNIMPLEMENTED, f"message encoding {encoding} is not supported; this server accepts "
                f"{encodings.ACCEPT_ENCODING}", (("grpc-accept-encoding", encodings.ACCEPT_ENCODING),))
    return None
