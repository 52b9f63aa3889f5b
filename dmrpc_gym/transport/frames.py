"""HTTP/2 and gRPC framing shared by both ends: frame layout, constants, message splitting.

Only what a gRPC peer needs of RFC 9113: the 9-byte frame header, the frame
types and flags, SETTINGS payloads, header-block fragments (their decoding: headers)
and gRPC's 5-byte length prefix, which may span DATA frames.

>>> grpc_frame(b"hi", 1)[:9]   # DATA frame header: length 7, stream 1
b'\\x00\\x00\\x07\\x00\\x00\\x00\\x00\\x00\\x01'
"""
from __future__ import annotations

import ctypes
import struct
from collections import deque

from dmrpc_gym.protocol.tensors import MAX_TENSOR_BYTES
from dmrpc_gym.transport.codes import ErrorCode, GrpcStatus

__all__ = ["MessageSplitter", "MessageTooLarge", "Deflated", "StreamError", "ProtocolError", "frame", "grpc_frame",
           "pack_head", "read_head", "unfilled", "pack_prefix", "read_prefix",
           "header_frames", "settings_frame", "goaway_frame", "window_update_frame", "rst_stream_frame", "ping_frame", "MessageParts", "check_frame", "parse_settings", "header_fragment", "unpad", "grpc_status",
           "HEADER", "U32", "PREFACE", "MAX_WINDOW", "DEFAULT_MAX_MESSAGE", "IN_PLACE", "WRITE_CHUNK", "MAX_OWED_CONTROL"]

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
DATA, HEADERS, RST_STREAM, SETTINGS, PUSH_PROMISE, PING, GOAWAY, WINDOW_UPDATE, CONTINUATION = 0, 1, 3, 4, 5, 6, 7, 8, 9
END_STREAM, ACK, END_HEADERS, PADDED, PRIORITY = 0x1, 0x1, 0x4, 0x8, 0x20
SETTING_HEADER_TABLE, SETTING_PUSH, SETTING_STREAMS, SETTING_WINDOW, SETTING_FRAME, SETTING_HEADER_LIST = 1, 2, 3, 4, 5, 6
#: The first of four private settings in which a dmrpc_gym server says its same-host Unix socket
#: (:mod:`~dmrpc_gym.transport.same_host`; 0xF000-0xFFFF is the range IANA keeps for experiments).
SETTINGS_SAME_HOST = 0xF0D0
# RFC 9113 section 7 error codes (short names of ErrorCode's members, as frames use them)
NO_ERROR, PROTOCOL_ERROR = ErrorCode.NO_ERROR, ErrorCode.PROTOCOL_ERROR
FLOW_CONTROL_ERROR = ErrorCode.FLOW_CONTROL_ERROR
STREAM_CLOSED, FRAME_SIZE_ERROR, CANCEL = ErrorCode.STREAM_CLOSED, ErrorCode.FRAME_SIZE_ERROR, ErrorCode.CANCEL
COMPRESSION_ERROR, REFUSED_STREAM, ENHANCE_YOUR_CALM = (ErrorCode.COMPRESSION_ERROR, ErrorCode.REFUSED_STREAM,
                                                        ErrorCode.ENHANCE_YOUR_CALM)
MIN_FRAME, MAX_FRAME = 16384, 2**24 - 1
#: Default largest gRPC message either end accepts: 64 MiB (see docs/guides/security.md).
DEFAULT_MAX_MESSAGE = MAX_TENSOR_BYTES   # one figure: no tensor grows past what a message may carry
#: Messages and DATA frames at least this large are read or filled in place, never copied out of a
#: read buffer: a message this large is received into a buffer of its declared size (see MessageSplitter).
IN_PLACE = 1 << 16
#: The largest DATA frame a server writes in one go (and its transport's write-buffer mark).
WRITE_CHUNK = 1 << 18
MAX_WINDOW = 2**31 - 1
DEFAULT_WINDOW = 65535             # RFC 9113 6.9.2: every window's size until SETTINGS change it
#: Seconds small writes of one batch (a vector env's steps, the answers to them) are gathered
#: before they go out together: fewer syscalls on both ends, while the peer can still start
#: on the first messages as the rest are made (2 vCPUs: one send per batch made the two
#: ends take turns, 0.83x the steps/s of a connection per sub-env).
GATHER_SECONDS = 60e-6
#: Bytes of control frames owed to a peer (PING ACKs: 17 bytes each) that its socket would not
#: take, held before the connection ends: a peer that sends PINGs and reads nothing back would
#: otherwise hold the reader in blocking sends (a step of ``step_timeout=2`` hung 12 s under
#: 200,000 PINGs) or grow what is owed without bound. gRPC bounds its queued control frames too
#: (grpc-go: 50 response frames, then it stops reading).
MAX_OWED_CONTROL = 1 << 16
HEADER = struct.Struct(">BHBBL")  # length (24 bits as 8+16), type, flags, stream id
U32 = struct.Struct(">L")          # a big-endian 32-bit field


class ProtocolError(ConnectionError):
    """The peer broke RFC 9113 badly enough to end the connection; ``code`` goes in our GOAWAY."""

    def __init__(self, code: int, message: str):
        super().__init__(message)
        self.code = code


class StreamError(Exception):
    """A violation that ends one stream (with gRPC status ``status``), not the connection."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status


#: What sets each end's largest message, as its refusals name it (the one to raise).
CLIENT_MESSAGE_LIMIT = "max_message_size= of the client"
SERVER_MESSAGE_LIMIT = "the server's max_message_size=, dmrpc-gym serve --max-message-size"


class MessageTooLarge(StreamError):
    """A gRPC message declared (or inflated to) more bytes than the receiver's limit, set by ``option``."""

    def __init__(self, size: int, limit: int, option: str = CLIENT_MESSAGE_LIMIT):
        super().__init__(8, f"a gRPC message of {size} bytes exceeds the maximum message size "
                            f"of {limit} bytes (set by {option})")
        self.size, self.limit = size, limit


def pack_head(length: int, kind: int, flags: int, stream: int) -> bytes:
    """The 9-byte header of a frame of ``length`` payload bytes: the one encoder of frame headers
    (every frame either end writes, DATA frames of any size included).

    >>> pack_head(7, DATA, 0, 1).hex()
    '000007000000000001'
    """
    return HEADER.pack(length >> 16, length & 0xFFFF, kind, flags, stream)


def read_head(buf, at: int = 0) -> tuple[int, int, int, int]:
    """``(length, kind, flags, stream)`` of the frame header at ``buf[at:at + 9]``: the one decoder of
    frame headers (both ends' frame readers and steady paths). The stream id's reserved bit is dropped.

    >>> read_head(pack_head(70000, DATA, END_STREAM, 3) + b"...")
    (70000, 0, 1, 3)
    """
    return ((buf[at] << 16) | (buf[at + 1] << 8) | buf[at + 2], buf[at + 3], buf[at + 4],
            ((buf[at + 5] & 0x7F) << 24) | (buf[at + 6] << 16) | (buf[at + 7] << 8) | buf[at + 8])


def read_prefix(buf, at: int, limit: int, option: str) -> tuple[int, int]:
    """``(flag, size)`` of the gRPC message prefix at ``buf[at:at + 5]``: the one parser of the prefix,
    and the one place the receiver's message-size ``limit`` (set by ``option``) is held to:
    :class:`MessageTooLarge` for a size past it, before a byte of the message is kept.

    >>> read_prefix(grpc_frame(b"hi", 1), 9, 100, CLIENT_MESSAGE_LIMIT)
    (0, 2)
    """
    size = (buf[at + 1] << 24) | (buf[at + 2] << 16) | (buf[at + 3] << 8) | buf[at + 4]
    if size > limit:
        raise MessageTooLarge(size, limit, option)
    return buf[at], size


def pack_prefix(size: int, flag: bytes = b"\x00") -> bytes:
    """The gRPC prefix of a message of ``size`` bytes: its flag (``b"\\x01"``: compressed), then the size;
    the one encoder of the prefix that :func:`read_prefix` reads.

    >>> read_prefix(pack_prefix(300), 0, 1000, CLIENT_MESSAGE_LIMIT)
    (0, 300)
    """
    return flag + U32.pack(size)


def frame(kind: int, flags: int, stream: int, payload: bytes = b"") -> bytes:
    """One HTTP/2 frame: 9-byte header, then ``payload``."""
    return pack_head(len(payload), kind, flags, stream) + payload


def settings_frame(settings: "tuple[tuple[int, int], ...]") -> bytes:
    """A SETTINGS frame carrying ``(identifier, value)`` pairs (both ends' first frame).

    >>> settings_frame(((SETTING_PUSH, 0),)).hex()
    '000006040000000000000200000000'
    """
    return frame(SETTINGS, 0, 0, b"".join(struct.pack(">HL", key, value) for key, value in settings))


def goaway_frame(last_stream: int, code: int, debug: bytes = b"") -> bytes:
    """A GOAWAY frame: the last stream its sender acts on, an :class:`ErrorCode`, and opaque debug data.

    >>> goaway_frame(3, ErrorCode.ENHANCE_YOUR_CALM, b"too_many_pings")[9:17].hex()
    '000000030000000b'
    """
    return frame(GOAWAY, 0, 0, struct.pack(">LL", last_stream, code) + debug)


def window_update_frame(stream: int, increment: int) -> bytes:
    """A WINDOW_UPDATE frame: the peer may send ``increment`` more bytes on ``stream`` (0: the connection).

    >>> window_update_frame(1, 1024).hex()
    '00000408000000000100000400'
    """
    return frame(WINDOW_UPDATE, 0, stream, U32.pack(increment))


def rst_stream_frame(stream: int, code: int) -> bytes:
    """A RST_STREAM frame ending ``stream`` with an :class:`ErrorCode`."""
    return frame(RST_STREAM, 0, stream, U32.pack(code))


def ping_frame(payload: bytes, ack: bool = False) -> bytes:
    """A PING frame of 8 opaque bytes, or the ACK that returns them."""
    return frame(PING, ACK if ack else 0, 0, payload)


def grpc_frame(message: bytes, stream: int) -> bytes:
    """One gRPC message (length-prefixed, uncompressed) in one DATA frame."""
    return pack_head(len(message) + 5, DATA, 0, stream) + pack_prefix(len(message)) + message


class MessageParts:
    """One gRPC message (prefix included) held as pieces, taken out frame by frame without joining them.

    >>> parts = MessageParts([b"ab", b"cde"])
    >>> len(parts), [bytes(p) for p in parts.take(6)], [bytes(p) for p in parts.take(9)]
    (10, [b'\\x00\\x00\\x00\\x00\\x05', b'a'], [b'b', b'cde'])
    """

    __slots__ = ("_parts", "left")

    def __init__(self, parts, flag: bytes = b"\x00"):
        views = [memoryview(p).cast("B") for p in parts]
        self.left = 5 + sum(map(len, views))
        self._parts = deque([memoryview(pack_prefix(self.left - 5, flag)), *views])

    def __len__(self) -> int:
        return self.left

    def take(self, n: int) -> list[memoryview]:
        """The next ``n`` bytes (at most what is left), as views."""
        out, parts = [], self._parts
        n = min(n, self.left)
        self.left -= n
        while n:
            part = parts[0]
            if len(part) <= n:
                out.append(parts.popleft())
                n -= len(part)
            else:
                out.append(part[:n])
                parts[0] = part[n:]
                n = 0
        return out


def header_frames(stream: int, flags: int, block: bytes, max_frame: int) -> bytes:
    """A header block as HEADERS (+ CONTINUATION frames when it exceeds the peer's ``max_frame``).

    >>> raw = header_frames(1, END_STREAM, bytes(20000), 16384)
    >>> [HEADER.unpack_from(raw, i)[2] for i in (0, 9 + 16384)]   # HEADERS, then CONTINUATION
    [1, 9]
    """
    if len(block) <= max_frame:
        return frame(HEADERS, flags | END_HEADERS, stream, block)
    parts = [frame(HEADERS, flags & ~END_HEADERS, stream, block[:max_frame])]
    for start in range(max_frame, len(block), max_frame):
        last = start + max_frame >= len(block)
        parts.append(frame(CONTINUATION, END_HEADERS if last else 0, stream, block[start:start + max_frame]))
    return b"".join(parts)


def parse_settings(payload: bytes) -> list[tuple[int, int]]:
    """A SETTINGS frame's ``(identifier, value)`` pairs; ``ProtocolError`` for values RFC 9113 forbids."""
    pairs = [struct.unpack_from(">HL", payload, i) for i in range(0, len(payload) - 5, 6)]
    for key, value in pairs:
        if key == SETTING_PUSH and value > 1:
            raise ProtocolError(PROTOCOL_ERROR, f"SETTINGS_ENABLE_PUSH must be 0 or 1, got {value}")
        if key == SETTING_WINDOW and value > MAX_WINDOW:
            raise ProtocolError(FLOW_CONTROL_ERROR, f"SETTINGS_INITIAL_WINDOW_SIZE {value} exceeds 2**31-1")
        if key == SETTING_FRAME and not MIN_FRAME <= value <= MAX_FRAME:
            raise ProtocolError(PROTOCOL_ERROR, f"SETTINGS_MAX_FRAME_SIZE {value} is outside 2**14..2**24-1")
    return pairs


def unpad(payload: bytes) -> bytes:
    """A PADDED frame's payload without its pad-length byte and padding."""
    if not payload or payload[0] >= len(payload):
        raise ProtocolError(PROTOCOL_ERROR, "the padding is as long as the frame or longer")
    return payload[1:len(payload) - payload[0]]


def header_fragment(flags: int, payload: bytes) -> bytes:
    """A HEADERS frame's header-block fragment: its padding and priority fields removed."""
    if flags & PADDED:
        payload = unpad(payload)
    if flags & PRIORITY:
        if len(payload) < 5:
            raise ProtocolError(FRAME_SIZE_ERROR, "a HEADERS frame too short for its priority fields")
        payload = payload[5:]
    return payload


# kind -> (must be on stream 0?, exact payload length or None, minimum length)
_SHAPES = {DATA: (False, None, 0), HEADERS: (False, None, 0), 2: (False, 5, 0), RST_STREAM: (False, 4, 0),
           SETTINGS: (True, None, 0), PUSH_PROMISE: (False, None, 4), PING: (True, 8, 0),
           GOAWAY: (True, None, 8), WINDOW_UPDATE: (None, 4, 0), CONTINUATION: (False, None, 0)}
_NAMES = {DATA: "DATA", HEADERS: "HEADERS", 2: "PRIORITY", RST_STREAM: "RST_STREAM", SETTINGS: "SETTINGS",
          PUSH_PROMISE: "PUSH_PROMISE", PING: "PING", GOAWAY: "GOAWAY", WINDOW_UPDATE: "WINDOW_UPDATE",
          CONTINUATION: "CONTINUATION"}


def check_frame(kind: int, flags: int, stream: int, length: int) -> None:
    """Raise ``ProtocolError`` for a frame whose stream or length RFC 9113 forbids.

    >>> check_frame(PING, 0, 0, 8)
    >>> try:
    ...     check_frame(PING, 0, 0, 7)
    ... except ProtocolError as err:
    ...     print(err.code, err)
    6 a PING frame of 7 bytes (must be 8)
    """
    shape = _SHAPES.get(kind)
    if shape is None:
        return                            # unknown frame types are ignored
    zero, exact, least = shape
    name = _NAMES[kind]
    if zero is True and stream:
        raise ProtocolError(PROTOCOL_ERROR, f"a {name} frame on stream {stream} (must be stream 0)")
    if zero is False and not stream:
        raise ProtocolError(PROTOCOL_ERROR, f"a {name} frame on stream 0")
    if exact is not None and length != exact:
        raise ProtocolError(FRAME_SIZE_ERROR, f"a {name} frame of {length} bytes (must be {exact})")
    if length < least:
        raise ProtocolError(FRAME_SIZE_ERROR, f"a {name} frame of {length} bytes (at least {least})")
    if kind == SETTINGS and (length % 6 or (flags & ACK and length)):
        raise ProtocolError(FRAME_SIZE_ERROR, f"a SETTINGS frame of {length} bytes")


def grpc_status(headers: dict[str, str]) -> int:
    """The ``grpc-status`` of trailers; missing or not a number: UNKNOWN (2) / INTERNAL (13)."""
    text = headers.get("grpc-status")
    if text is None:
        return GrpcStatus.UNKNOWN
    return int(text) if text.isdigit() else GrpcStatus.INTERNAL


class Deflated(bytes):
    """A message still in its stream's ``grpc-encoding``: a splitter whose ``decompress`` is this
    class hands compressed messages on as they came, for the reader to inflate when it takes them.

    >>> splitter, out = MessageSplitter(decompress=Deflated), []
    >>> splitter.feed(bytes([1, 0, 0, 0, 2]) + b"gz", out); out, type(out[0]).__name__
    ([b'gz'], 'Deflated')
    """

    __slots__ = ()


_new_bytearray = ctypes.pythonapi.PyByteArray_FromStringAndSize
_new_bytearray.restype, _new_bytearray.argtypes = ctypes.py_object, (ctypes.c_char_p, ctypes.c_ssize_t)


def unfilled(n: int) -> bytearray:
    """A ``bytearray`` of ``n`` bytes that are not set (``bytearray(n)`` writes n zeros, a copy's
    worth of memory traffic, and makes every page resident at once). Its pages cost memory only as
    they are written: a large allocation is fresh pages from the kernel (an ``mmap``), so memory
    follows the bytes that arrived. Whoever fills it must write every byte it hands on.

    >>> len(unfilled(1 << 20))
    1048576
    """
    return _new_bytearray(None, n)


class MessageSplitter:
    """Cuts DATA payloads into gRPC messages (which may span frames, or share one).

    >>> splitter, out = MessageSplitter(), []
    >>> framed = grpc_frame(b"ab", 1)[9:] + grpc_frame(b"cde", 1)[9:]
    >>> splitter.feed(framed[:4], out), out
    (None, [])
    >>> splitter.feed(framed[4:], out), out
    (None, [b'ab', b'cde'])

    ``limit`` bounds a message's size (``option``: what sets it): a prefix declaring more raises
    :class:`MessageTooLarge` before the message is buffered. Memory follows the
    bytes that arrived, never the size a prefix declares: a large message is
    filled in place in a buffer of its declared size whose bytes are not set
    beforehand (:func:`unfilled`: pages cost memory once written), so a peer that
    declares 64 MiB and sends 5 bytes costs a page or two, and the message's bytes
    are copied once (from the payload, or by the kernel into :meth:`room`). ``decompress``
    (set once the stream's ``grpc-encoding`` is known) inflates messages
    flagged compressed; without it such a message is a :class:`StreamError`.
    """

    __slots__ = ("buffered", "limit", "option", "decompress", "large", "_size", "_filled", "_flag")

    def __init__(self, limit: int = MAX_WINDOW, decompress=None, option: str = CLIENT_MESSAGE_LIMIT):
        self.buffered = bytearray()
        self.limit, self.option = limit, option
        self.decompress = decompress
        self.large: bytearray | None = None   # a large message being filled in place (one copy)
        self._size = 0                        # its declared size (len(_big) grows toward it)
        self._filled = 0
        self._flag = 0

    def feed(self, payload, out: "deque[bytes] | list[bytes]") -> None:
        """Append ``payload`` (bytes-like); every message it completes goes to ``out``."""
        if self.large is not None:
            payload = memoryview(payload)
            n = min(len(payload), self._size - self._filled)
            # through a view: bytearray's own slice assignment first copies a buffer into a new bytearray
            memoryview(self.large)[self._filled:self._filled + n] = payload[:n]
            self.advance(n, out)
            payload = payload[n:]
            if not payload:
                return
        data = self.buffered
        data += payload
        while len(data) >= 5:
            try:
                flag, size = read_prefix(data, 0, self.limit, self.option)
            except MessageTooLarge:
                del data[:]
                raise
            if len(data) < 5 + size:
                if size >= IN_PLACE:                  # fill it in place from now on
                    self._filled = len(data) - 5
                    self.large, self._size, self._flag = unfilled(size), size, flag
                    memoryview(self.large)[:self._filled] = memoryview(data)[5:]
                    del data[:]
                break
            message = bytes(memoryview(data)[5:5 + size]) if size >= IN_PLACE else bytes(data[5:5 + size])
            del data[:5 + size]
            out.append(self._decode(flag, message) if flag else message)

    def room(self) -> memoryview | None:
        """Where the large message being filled wants its next bytes (None: no large message)."""
        if self.large is None:
            return None
        return memoryview(self.large)[self._filled:]

    def advance(self, n: int, out: "deque[bytes] | list[bytes]") -> None:
        """``n`` bytes were written into :meth:`room`; a completed message goes to ``out``."""
        self._filled += n
        if self._filled == self._size:
            message, self.large = self.large, None
            out.append(self._decode(self._flag, message) if self._flag else message)

    def _decode(self, flag: int, message):
        if flag != 1 or self.decompress is None:
            raise StreamError(GrpcStatus.INTERNAL, f"a gRPC message flagged {'compressed' if flag == 1 else flag} "
                                  "on a stream without a message encoding")
        return self.decompress(message)
