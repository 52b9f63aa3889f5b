"""A scripted dm_env_rpc server over raw HTTP/2: it answers each request with bytes a test chose, framed and
split as the test says, and records every byte the client sent (the steady-state step's differential test)."""
from __future__ import annotations

import socket
import threading
from collections import deque

import hpack

from dmrpc_gym.protocol.info import INFO_FEATURE
from dmrpc_gym.protocol.wire import FEATURES_METADATA, pb
from dmrpc_gym.transport.frames import (ACK, DATA, END_HEADERS, END_STREAM, HEADER, HEADERS, PADDED, PING, SETTINGS,
                                        MessageSplitter, frame)

#: One answer as the server sends it: the message, the DATA payload cuts (offsets into prefix + message),
#: the frames sent before each piece (``(kind, flags, stream, payload)``), whether pieces are padded, and
#: the byte offsets at which the whole is cut into separate ``send`` calls.
Answer = tuple


def framed(answer: Answer, stream: int = 1) -> list[bytes]:
    """``answer``'s bytes on the wire, as the ``send`` calls that carry them."""
    message, cuts, before, padded, writes = answer
    payload = b"\x00" + len(message).to_bytes(4, "big") + message
    bounds = [0, *sorted({c for c in cuts if 0 < c < len(payload)}), len(payload)]
    out = b""
    for i, (a, b) in enumerate(zip(bounds, bounds[1:])):
        for kind, flags, sid, body in (before[i] if i < len(before) else ()):
            out += frame(kind, flags, sid, body)
        piece = payload[a:b]
        out += frame(DATA, PADDED, stream, b"\x02" + piece + b"\x00\x00") if padded else frame(DATA, 0, stream, piece)
    points = [0, *sorted({w for w in writes if 0 < w < len(out)}), len(out)]
    return [out[a:b] for a, b in zip(points, points[1:])]


class ScriptedServer(threading.Thread):
    """One connection: CreateWorld, JoinWorld (``specs``), then each StepRequest gets the next of ``steps``
    (:data:`Answer`); ``received`` holds the client's bytes. ``info``: say the ``info`` feature."""

    def __init__(self, specs: pb.ActionObservationSpecs, steps: list[Answer], info: bool = False):
        super().__init__(daemon=True)
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.listener.settimeout(10)
        self.address = f"127.0.0.1:{self.listener.getsockname()[1]}"
        self.specs, self.steps, self.info = specs, deque(steps), info
        #: The client's frames in order, ``(kind, flags, stream, payload)``; a header block decoded, less
        #: ``:authority`` (its port differs from one server to the next), and the bytes of the preface.
        self.received: list[tuple] = []
        self.error: BaseException | None = None
        self.start()

    def run(self) -> None:
        try:
            conn, _ = self.listener.accept()
            with conn:
                conn.settimeout(10)
                self._serve(conn)
        except (OSError, ConnectionError) as err:
            self.error = err
        finally:
            self.listener.close()

    def _serve(self, conn: socket.socket) -> None:
        conn.sendall(frame(SETTINGS, 0, 0))
        buf, splitter, messages, encoder, replied = bytearray(), MessageSplitter(), [], hpack.Encoder(), False
        decoder = hpack.Decoder()
        while True:
            chunk = conn.recv(65536)
            if not chunk:
                return
            buf += chunk
            if buf.startswith(b"PRI * HTTP/2.0"):
                self.received.append(bytes(buf[:24]))
                del buf[:24]
            while len(buf) >= 9:
                hi, lo, kind, flags, sid = HEADER.unpack_from(buf)
                end = 9 + ((hi << 16) | lo)
                if len(buf) < end:
                    break
                payload = bytes(buf[9:end])
                del buf[:end]
                if kind == HEADERS:          # (the client's blocks fit one frame)
                    self.received.append((kind, flags, sid, [h for h in decoder.decode(payload) if h[0] != ":authority"]))
                else:
                    self.received.append((kind, flags, sid, payload))
                if kind == SETTINGS and not flags & ACK:
                    conn.sendall(frame(SETTINGS, ACK, 0))
                elif kind == DATA:
                    splitter.feed(payload, messages)
                    if flags & END_STREAM:
                        conn.sendall(frame(HEADERS, END_HEADERS | END_STREAM, 1,
                                           encoder.encode([("grpc-status", "0")])))
                        return
            for raw in messages:
                if not replied:
                    headers = [(":status", "200"), ("content-type", "application/grpc")]
                    if self.info:
                        headers.append((FEATURES_METADATA, INFO_FEATURE))
                    conn.sendall(frame(HEADERS, END_HEADERS, 1, encoder.encode(headers)))
                    replied = True
                for piece in self._answer(pb.EnvironmentRequest.FromString(raw)):
                    conn.sendall(piece)
            messages.clear()

    def _answer(self, request: pb.EnvironmentRequest) -> list[bytes]:
        which = request.WhichOneof("payload")
        if which == "step":
            if not self.steps:
                return framed((pb.EnvironmentResponse(error={"code": 9, "message": "no more steps"})
                               .SerializeToString(), (), (), False, ()))
            return framed(self.steps.popleft())
        response = pb.EnvironmentResponse()
        if which == "create_world":
            response.create_world.world_name = "w"
        elif which == "join_world":
            response.join_world.specs.CopyFrom(self.specs)
        else:
            getattr(response, which).SetInParent()
        return framed((response.SerializeToString(), (), (), False, ()))


#: Frames a server may send between an answer's pieces, that change nothing the client returns.
def ping(data: bytes = b"12345678") -> tuple:
    return PING, 0, 0, data
