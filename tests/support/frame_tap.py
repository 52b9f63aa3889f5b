"""A frame tap: a loopback TCP relay between a gRPC client and server that logs every HTTP/2 frame
both ways (cleartext only; TLS passes through unread), for interop tests with foreign peers.

    with FrameTap(server_address) as tap:      # on leaving, prints the frames: pytest shows
        run_client(tap.address)                # them when the test failed
        assert not tap.frames_of("GOAWAY", "<")

Directions: ``">"`` client to server, ``"<"`` server to client.
"""
from __future__ import annotations

import socket
import struct
import threading
import time
from dataclasses import dataclass

import hpack

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
KINDS = ["DATA", "HEADERS", "PRIORITY", "RST_STREAM", "SETTINGS", "PUSH_PROMISE", "PING", "GOAWAY",
         "WINDOW_UPDATE", "CONTINUATION"]
ERRORS = ["NO_ERROR", "PROTOCOL_ERROR", "INTERNAL_ERROR", "FLOW_CONTROL_ERROR", "SETTINGS_TIMEOUT",
          "STREAM_CLOSED", "FRAME_SIZE_ERROR", "REFUSED_STREAM", "CANCEL", "COMPRESSION_ERROR",
          "CONNECT_ERROR", "ENHANCE_YOUR_CALM", "INADEQUATE_SECURITY", "HTTP_1_1_REQUIRED"]
SETTINGS = {1: "HEADER_TABLE_SIZE", 2: "ENABLE_PUSH", 3: "MAX_CONCURRENT_STREAMS", 4: "INITIAL_WINDOW_SIZE",
            5: "MAX_FRAME_SIZE", 6: "MAX_HEADER_LIST_SIZE", 8: "ENABLE_CONNECT_PROTOCOL"}
ACK, END_STREAM, END_HEADERS = 0x1, 0x1, 0x4


@dataclass
class Frame:
    time: float          # seconds since the tap started
    connection: int      # 0 for the first connection through the tap, then 1, ...
    direction: str       # ">" client to server, "<" server to client
    kind: str
    flags: int
    stream: int
    summary: str         # what the frame says: a GOAWAY's code and debug data, a PING's payload, ...

    def __str__(self) -> str:
        return (f"{self.time * 1000:9.1f} ms  #{self.connection} {self.direction} {self.kind:<13} "
                f"stream={self.stream:<3} flags={self.flags:#04x} {self.summary}")


def _error(code: int) -> str:
    return ERRORS[code] if code < len(ERRORS) else f"error {code:#x}"


def describe(kind: str, flags: int, payload: bytes) -> str:
    """What a frame says, in a few words (a header block is described where it ends)."""
    if kind == "DATA":
        return f"{len(payload)} bytes" + (" END_STREAM" if flags & END_STREAM else "")
    if kind == "SETTINGS":
        if flags & ACK:
            return "ACK"
        pairs = [struct.unpack_from(">HI", payload, i) for i in range(0, len(payload) - 5, 6)]
        return " ".join(f"{SETTINGS.get(k, k)}={v}" for k, v in pairs)
    if kind == "PING":
        return ("ACK " if flags & ACK else "") + payload.hex()
    if kind == "GOAWAY" and len(payload) >= 8:
        last, code = struct.unpack_from(">II", payload)
        return f"last_stream={last & 0x7FFFFFFF} {_error(code)} {payload[8:].decode('utf-8', 'replace')!r}"
    if kind == "RST_STREAM" and len(payload) >= 4:
        return _error(struct.unpack(">I", payload[:4])[0])
    if kind == "WINDOW_UPDATE" and len(payload) >= 4:
        return f"+{struct.unpack('>I', payload[:4])[0] & 0x7FFFFFFF}"
    return f"{len(payload)} bytes"


class _Reader:
    """Parses one direction of one connection into frames."""

    def __init__(self, tap: FrameTap, connection: int, direction: str):
        self.tap, self.connection, self.direction = tap, connection, direction
        self.buffer = b""
        self.preface = direction == ">"
        self.opaque = False              # TLS, or not HTTP/2: relayed unread
        self.decoder = hpack.Decoder()
        self.decoder.max_header_list_size = 1 << 24
        self.block = b""

    def feed(self, data: bytes) -> None:
        if self.opaque:
            return
        self.buffer += data
        if self.preface:
            if len(self.buffer) < len(PREFACE):
                if not PREFACE.startswith(self.buffer):
                    self._give_up()
                return
            if not self.buffer.startswith(PREFACE):
                return self._give_up()
            self.buffer, self.preface = self.buffer[len(PREFACE):], False
        while len(self.buffer) >= 9:
            length = int.from_bytes(self.buffer[:3], "big")
            if len(self.buffer) < 9 + length:
                return
            kind_id, flags = self.buffer[3], self.buffer[4]
            stream = int.from_bytes(self.buffer[5:9], "big") & 0x7FFFFFFF
            payload = self.buffer[9:9 + length]
            self.buffer = self.buffer[9 + length:]
            kind = KINDS[kind_id] if kind_id < len(KINDS) else f"TYPE_{kind_id}"
            self.tap._add(self.connection, self.direction, kind, flags, stream, self._summary(kind, flags, payload))

    def _summary(self, kind: str, flags: int, payload: bytes) -> str:
        if kind not in ("HEADERS", "CONTINUATION"):
            return describe(kind, flags, payload)
        if kind == "HEADERS":
            pad = payload[0] if flags & 0x8 else 0
            start = (1 if flags & 0x8 else 0) + (5 if flags & 0x20 else 0)
            payload = payload[start:len(payload) - pad]
        self.block += payload
        if not flags & END_HEADERS:
            return f"{len(payload)} bytes of a header block"
        block, self.block = self.block, b""
        try:
            fields = self.decoder.decode(block, raw=False)
        except Exception as exc:  # noqa: BLE001 - a tap never breaks the relay
            return f"undecodable header block: {exc}"
        shown = [f"{k}: {v if len(v) <= 80 else v[:77] + '...'}" for k, v in fields]
        return ("END_STREAM " if flags & END_STREAM else "") + "; ".join(shown)

    def _give_up(self) -> None:
        self.opaque = True
        self.buffer = b""
        self.tap._add(self.connection, self.direction, "OPAQUE", 0, 0, "not cleartext HTTP/2: relayed unread")


class FrameTap:
    """Relays connections from ``address`` to ``upstream`` and logs their HTTP/2 frames in ``frames``."""

    def __init__(self, upstream: str):
        host, port = upstream.rsplit(":", 1)
        self.upstream = (host, int(port))
        self.frames: list[Frame] = []
        self._lock = threading.Lock()
        self._sockets: list[socket.socket] = []
        self._start = time.monotonic()
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.address = f"127.0.0.1:{self._listener.getsockname()[1]}"
        self._connections = 0
        threading.Thread(target=self._accept, daemon=True, name="frame-tap").start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            try:
                server = socket.create_connection(self.upstream, timeout=10)
            except OSError as exc:
                self._add(self._connections, ">", "REFUSED", 0, 0, f"upstream: {exc}")
                client.close()
                continue
            server.settimeout(None)
            for sock in (client, server):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            with self._lock:
                self._sockets += [client, server]
                index, self._connections = self._connections, self._connections + 1
            for source, target, direction in ((client, server, ">"), (server, client, "<")):
                threading.Thread(target=self._pump, args=(source, target, _Reader(self, index, direction)),
                                 daemon=True, name=f"frame-tap {index}{direction}").start()

    def _pump(self, source: socket.socket, target: socket.socket, reader: _Reader) -> None:
        try:
            while data := source.recv(1 << 16):
                reader.feed(data)
                target.sendall(data)
        except OSError:
            pass
        self._add(reader.connection, reader.direction, "EOF", 0, 0, "")
        try:
            target.shutdown(socket.SHUT_WR)
        except OSError:
            pass

    def _add(self, connection: int, direction: str, kind: str, flags: int, stream: int, summary: str) -> None:
        with self._lock:
            self.frames.append(Frame(time.monotonic() - self._start, connection, direction, kind, flags, stream,
                                     summary))

    def frames_of(self, kind: str, direction: str | None = None) -> list[Frame]:
        """The frames of ``kind`` (``"PING"``, ``"GOAWAY"``, ...) seen so far, in one direction or both."""
        with self._lock:
            return [f for f in self.frames if f.kind == kind and direction in (None, f.direction)]

    def pings(self, direction: str) -> list[Frame]:
        """The PINGs (not their ACKs) sent in ``direction``."""
        return [f for f in self.frames_of("PING", direction) if not f.flags & ACK]

    def dump(self) -> str:
        """Every frame, one line each, but a run of DATA (or WINDOW_UPDATE) frames of one stream in
        one direction is one line: its first frame and the run's count and bytes."""
        with self._lock:
            frames = list(self.frames)
        lines: list[str] = []
        run: list[Frame] = []

        def flush() -> None:
            if len(run) > 2:
                size = sum(int(f.summary.split()[0].lstrip("+")) for f in run)
                lines.append(f"{run[0]}  ... {len(run)} {run[0].kind} frames to {run[-1].time * 1000:.1f} ms, "
                             f"{size} bytes in all")
            else:
                lines.extend(str(f) for f in run)
            run.clear()

        for f in frames:
            bulk = f.kind in ("DATA", "WINDOW_UPDATE") and not f.flags & END_STREAM
            if run and not (bulk and (f.connection, f.direction, f.kind, f.stream) ==
                            (run[0].connection, run[0].direction, run[0].kind, run[0].stream)):
                flush()
            if bulk:
                run.append(f)
            else:
                lines.append(str(f))
        flush()
        return (f"frames through the tap to {self.upstream[0]}:{self.upstream[1]} ({len(frames)}):\n"
                + "\n".join(lines))

    def close(self) -> None:
        self._listener.close()
        with self._lock:
            sockets = list(self._sockets)
        for sock in sockets:
            try:
                sock.close()
            except OSError:
                pass

    def __enter__(self) -> FrameTap:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
        print(self.dump())    # captured: pytest shows it only when the test failed
