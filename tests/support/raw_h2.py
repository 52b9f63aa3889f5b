"""A raw HTTP/2 peer for protocol tests: frames written byte by byte to a real server over loopback, and the
calls the hostile-peer tests make with it (a world joined, a step, an answer read, a grpc-go-like BDP client)."""
from __future__ import annotations

import socket
import struct
import time

import hpack

from dmrpc_gym.protocol import tensors
from dmrpc_gym.protocol.wire import METHOD_PATH, pb
from dmrpc_gym.transport import compression
from dmrpc_gym.transport.limits import ConnectionLimits
from dmrpc_gym.transport.frames import (ACK, CONTINUATION, DATA, END_HEADERS, END_STREAM, GOAWAY, HEADER, HEADERS, PING,
                                        PREFACE, SETTINGS, U32, WINDOW_UPDATE, MessageSplitter, frame)


#: Server limits for tests whose header lists pass the default 16 KiB (a 60 KB path, 32 KB of metadata).
LARGE_HEADERS = ConnectionLimits(max_header_list_size=64 << 10)


class RawClient:
    """A client that writes whatever frames it is told to; ``frames()`` reads the server's."""

    def __init__(self, address: str, timeout: float = 10.0):
        host, port = address.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=timeout)
        self.sock.sendall(PREFACE + frame(SETTINGS, 0, 0))
        self._buf = b""
        self._encoder = hpack.Encoder()
        self.decoder = hpack.Decoder()

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def request_headers(self, stream: int, extra: tuple = (), path: str = METHOD_PATH) -> bytes:
        """A HEADERS frame opening a gRPC call on ``stream``."""
        return frame(HEADERS, END_HEADERS, stream, self._encoder.encode(
            [(":method", "POST"), (":scheme", "http"), (":path", path), (":authority", "x"),
             ("content-type", "application/grpc"), ("te", "trailers"), *extra]))

    def next_frame(self) -> tuple[int, int, int, bytes] | None:
        """``(kind, flags, stream, payload)``, or None at EOF."""
        while True:
            if len(self._buf) >= 9:
                hi, lo, kind, flags, stream = HEADER.unpack_from(self._buf)
                end = 9 + ((hi << 16) | lo)
                if len(self._buf) >= end:
                    payload, self._buf = self._buf[9:end], self._buf[end:]
                    return kind, flags, stream & 0x7FFFFFFF, payload
            try:
                chunk = self.sock.recv(65536)
            except ConnectionResetError:
                return None
            if not chunk:
                return None
            self._buf += chunk

    def goaway(self) -> tuple[int, str] | None:
        """Read until the server's GOAWAY: ``(error code, debug text)``; None if it closed without one."""
        while (got := self.next_frame()) is not None:
            kind, _, _, payload = got
            if kind == GOAWAY:
                return struct.unpack_from(">L", payload, 4)[0], payload[8:].decode()
        return None

    def trailers(self, stream: int) -> dict[str, str]:
        """Read until ``stream``'s END_STREAM HEADERS; their decoded fields (answers on the way are kept)."""
        self.answers: list[bytes] = getattr(self, "answers", [])
        block = b""
        while (got := self.next_frame()) is not None:
            kind, flags, sid, payload = got
            if kind == HEADERS and sid == stream:
                block, end = payload, flags & END_STREAM
            elif kind == CONTINUATION and sid == stream:
                block += payload
            elif kind == DATA and sid == stream:
                self.answers.append(payload)
                continue
            else:
                continue
            if flags & END_HEADERS:
                fields = dict(self.decoder.decode(block))
                if end:
                    return fields
        raise ConnectionError("the server closed the connection before the trailers")

    def close(self) -> None:
        self.sock.close()


def message(request: pb.EnvironmentRequest, flag: int = 0) -> bytes:
    """One length-prefixed gRPC message."""
    body = request.SerializeToString()
    return bytes([flag]) + U32.pack(len(body)) + body


def data(stream: int, payload: bytes, end: bool = False) -> bytes:
    return frame(DATA, END_STREAM if end else 0, stream, payload)


# -- calls made raw, shared by the transport's hostile-peer tests ----------------------------------------
def joined(raw: RawClient, sid: int = 1, headers: tuple = (), **settings) -> None:
    """Open ``sid`` (with ``headers`` besides the call's), and create, join and reset a world of
    ``settings`` on it (answers read)."""
    raw.send(raw.request_headers(sid, headers))
    create = pb.EnvironmentRequest(create_world=pb.CreateWorldRequest(
        settings={k: tensors.pack(v) for k, v in settings.items()}))
    raw.send(data(sid, message(create)))
    name = first_answer(raw, sid).create_world.world_name
    raw.send(data(sid, message(pb.EnvironmentRequest(join_world=pb.JoinWorldRequest(world_name=name)))))
    first_answer(raw, sid)
    raw.send(data(sid, message(pb.EnvironmentRequest(reset=pb.ResetRequest()))))
    assert first_answer(raw, sid).WhichOneof("payload") == "reset"


def first_answer(raw: RawClient, sid: int) -> pb.EnvironmentResponse:
    """The next whole answer on ``sid`` (one DATA frame holds a small one; gzip when flagged)."""
    while (got := raw.next_frame()) is not None:
        kind, _, stream, payload = got
        if kind == DATA and stream == sid and payload:
            body = compression.decompressor("gzip", 1 << 20)(payload[5:]) if payload[0] else payload[5:]
            return pb.EnvironmentResponse.FromString(body)
    raise ConnectionError("closed before an answer")


def step_request(blob: int = 0) -> bytes:
    """A Step; ``blob`` bytes of padding ride along in an unknown action (the answer is an error)."""
    actions = {999: pb.Tensor(uint8s=pb.Tensor.Uint8Array(array=bytes(blob)))} if blob else {}
    return message(pb.EnvironmentRequest(step=pb.StepRequest(actions=actions)))


def released(socks: list[socket.socket], within: float) -> float:
    """Seconds until the server closed every one of ``socks`` (each read to EOF); ``within`` at most."""
    start = time.monotonic()
    for sock in socks:
        sock.settimeout(max(0.01, within - (time.monotonic() - start)))
        try:
            while sock.recv(65536):
                pass
        except ConnectionResetError:
            pass
        except TimeoutError:
            break
    return time.monotonic() - start


def connections(address: str, n: int, first_bytes: bytes) -> list[socket.socket]:
    host, port = address.rsplit(":", 1)
    socks = []
    for _ in range(n):
        sock = socket.create_connection((host, int(port)), timeout=10)
        if first_bytes:
            sock.sendall(first_bytes)
        socks.append(sock)
    return socks


#: The opaque bytes of :class:`BdpClient`'s PINGs.
BDP_PING = b"bdp-ping"


class BdpClient(RawClient):
    """A raw client that behaves like grpc-go's BDP estimator: a PING right after a DATA or
    HEADERS frame it receives, unless its last PING is still unanswered; and WINDOW_UPDATEs for
    every DATA frame, as any flow-controlled client sends. ``goaway``: the server's, if one came."""

    def __init__(self, address: str):
        super().__init__(address, timeout=30)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)   # as gRPC clients set it
        self.outstanding, self.pings, self.seen_goaway = False, 0, None

    def next_frame(self):
        got = super().next_frame()
        if got is None:
            return None
        kind, flags, sid, payload = got
        if kind == DATA and payload:
            self.send(frame(WINDOW_UPDATE, 0, 0, U32.pack(len(payload)))
                      + frame(WINDOW_UPDATE, 0, sid, U32.pack(len(payload))))
        if kind in (DATA, HEADERS) and not self.outstanding:
            self.send(frame(PING, 0, 0, BDP_PING))
            self.outstanding, self.pings = True, self.pings + 1
        elif kind == PING and flags & ACK and payload == BDP_PING:
            self.outstanding = False
        elif kind == GOAWAY:
            self.seen_goaway = (U32.unpack_from(payload, 4)[0], payload[8:].decode())
        return got


def answers(raw: RawClient, sids: list[int]) -> dict[int, pb.EnvironmentResponse]:
    """One whole answer on each of ``sids`` (whatever their order and however many frames each spans)."""
    splitters, got = {sid: MessageSplitter() for sid in sids}, {}
    while len(got) < len(sids):
        frame_ = raw.next_frame()
        if frame_ is None:
            raise ConnectionError(f"closed before the answers (GOAWAY: {getattr(raw, 'seen_goaway', None)})")
        kind, _, sid, payload = frame_
        if kind == DATA and sid in splitters and sid not in got:
            out: list[bytes] = []
            splitters[sid].feed(payload, out)
            if out:
                got[sid] = pb.EnvironmentResponse.FromString(out[0])
    return got
