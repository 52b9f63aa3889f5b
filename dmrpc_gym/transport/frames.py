"""HTTP/2 and gRPC framing shared by both ends: frame layout, constants, message splitting.

Only what a gRPC peer needs of RFC 9113: the 9-byte frame header, the frame
types and flags, SETTINGS payloads, header-block fragments (hpack decoding)
and gRPC's 5-byte length prefix, which may span DATA frames.

>>> grpc_frame(b"hi", 1)[:9]   # DATA frame header: length 7, stream 1
b'\\x00\\x00\\x07\\x00\\x00\\x00\\x00\\x00\\x01'
"""
from __future__ import annotations

import struct
from collections import deque

import hpack

__all__ = ["MessageSplitter", "frame", "grpc_frame", "parse_settings",
           "header_fragment", "decode_headers", "HEADER", "U32", "PREFACE", "MAX_WINDOW"]

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
DATA, HEADERS, RST_STREAM, SETTINGS, PUSH_PROMISE, PING, GOAWAY, WINDOW_UPDATE, CONTINUATION = 0, 1, 3, 4, 5, 6, 7, 8, 9
END_STREAM, ACK, END_HEADERS, PADDED, PRIORITY = 0x1, 0x1, 0x4, 0x8, 0x20
SETTING_HEADER_TABLE, SETTING_PUSH, SETTING_WINDOW, SETTING_FRAME = 1, 2, 4, 5
MAX_WINDOW = 2**31 - 1
HEADER = struct.Struct(">BHBBL")  # length (24 bits as 8+16), type, flags, stream id
U32 = struct.Struct(">L")          # a big-endian 32-bit field


def frame(kind: int, flags: int, stream: int, payload: bytes = b"") -> bytes:
    """One HTTP/2 frame: 9-byte header, then ``payload``."""
    n = len(payload)
    return HEADER.pack(n >> 16, n & 0xFFFF, kind, flags, stream) + payload


def grpc_frame(message: bytes, stream: int) -> bytes:
    """One gRPC message (length-prefixed, uncompressed) in one DATA frame."""
    n = len(message) + 5
    return (HEADER.pack(n >> 16, n & 0xFFFF, DATA, 0, stream)
            + b"\x00" + U32.pack(len(message)) + message)


def parse_settings(payload: bytes) -> list[tuple[int, int]]:
    """A SETTINGS frame's ``(identifier, value)`` pairs."""
    return [struct.unpack_from(">HL", payload, i) for i in range(0, len(payload) - 5, 6)]


def header_fragment(flags: int, payload: bytes) -> bytes:
    """A HEADERS frame's header-block fragment: its padding and priority fields removed."""
    if flags & PADDED:
        payload = payload[1:len(payload) - payload[0]]
    if flags & PRIORITY:
        payload = payload[5:]
    return payload


def decode_headers(decoder: hpack.Decoder, block: bytes) -> dict[str, str]:
    """A complete header block as ``{name: value}`` (text)."""
    return {k if isinstance(k, str) else k.decode(): v if isinstance(v, str) else v.decode()
            for k, v in decoder.decode(bytes(block))}


class MessageSplitter:
    """Cuts DATA payloads into gRPC messages (which may span frames, or share one).

    >>> splitter, out = MessageSplitter(), []
    >>> framed = grpc_frame(b"ab", 1)[9:] + grpc_frame(b"cde", 1)[9:]
    >>> splitter.feed(framed[:4], out), out
    (None, [])
    >>> splitter.feed(framed[4:], out), out
    (None, [b'ab', b'cde'])
    """

    __slots__ = ("_data",)

    def __init__(self):
        self._data = bytearray()

    def feed(self, payload: bytes, out: "deque[bytes] | list[bytes]") -> None:
        """Append ``payload``; every message it completes goes to ``out``."""
        data = self._data
        data += payload
        while len(data) >= 5:
            size = U32.unpack_from(data, 1)[0]
            if len(data) < 5 + size:
                break
            if data[0]:
                raise ConnectionError("a compressed gRPC message arrived; compression was not negotiated")
            out.append(bytes(data[5:5 + size]))
            del data[:5 + size]


