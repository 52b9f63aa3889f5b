"""Header blocks as they arrive (HEADERS, then CONTINUATION frames), bounded in what they may hold.

A peer could send a header block that never ends, or one that decodes to far
more than it weighs. What a block may hold is judged from each frame's 9-byte
header, before its payload is buffered: an unfinished block holds at most
``limit`` bytes, and the frame that ends it may take it to
:data:`WHOLE_BLOCK_FACTOR` times that (a whole block, decoded so that HPACK's
state stays shared, which the receiver may then refuse for its stream alone).
Past either, the connection ends (GOAWAY ENHANCE_YOUR_CALM, naming ``option``).
An honest peer's block is never larger than its header list (hpack spends at
most a few bytes per field where RFC 9113 counts 32), so a block past the
limit holds a list past it too.

>>> block = HeaderBlock(limit=100, option="the demo's limit")
>>> block.admit(HEADERS, 0, 60); block.add(HEADERS, 0, 1, bytes(60), hpack.Decoder()) is None
True
>>> try:
...     block.admit(CONTINUATION, 0, 60)
... except ProtocolError as err:
...     print(err)
a header block of more than 100 bytes, unfinished (the demo's limit)
"""
from __future__ import annotations

import hpack

from dmrpc_gym.transport.frames import (CONTINUATION, COMPRESSION_ERROR, END_HEADERS, ENHANCE_YOUR_CALM, HEADERS,
                                        PROTOCOL_ERROR, ProtocolError, header_fragment)

__all__ = ["HeaderBlock", "decode_headers", "FIELD_OVERHEAD", "WHOLE_BLOCK_FACTOR"]

#: What RFC 9113 (6.5.2) counts for each field of a header list beyond its name and value.
FIELD_OVERHEAD = 32
#: How much larger than ``limit`` a whole block may be (its last frame buffered, then decoded):
#: a list a little past the limit is refused for its stream alone, as gRPC's servers refuse it.
WHOLE_BLOCK_FACTOR = 2
#: How much larger than ``limit`` the list a block decodes to may be before the decoder stops
#: (hpack's indexed fields let a small block name large values); past it HPACK's shared state is
#: lost mid-block, so the connection ends (COMPRESSION_ERROR).
DECODED_FACTOR = 4


def decode_headers(decoder: hpack.Decoder, block: bytes) -> tuple[dict[str, str], int]:
    """A complete header block as ``{name: value}`` (text) and its list size as RFC 9113 counts it;
    one that does not decode is a connection error (RFC 9113 4.3: COMPRESSION_ERROR)."""
    try:
        fields = decoder.decode(bytes(block), raw=True)
        size = sum(len(k) + len(v) + FIELD_OVERHEAD for k, v in fields)
        return {k.decode(): v.decode() for k, v in fields}, size
    except (hpack.HPACKError, UnicodeDecodeError) as exc:
        raise ProtocolError(COMPRESSION_ERROR, f"a header block that does not decode: {exc}") from None


class HeaderBlock:
    """A header block as it arrives: a HEADERS frame, then CONTINUATION frames until END_HEADERS.

    ``limit``: the bytes an unfinished block may hold (see the module doc); ``option``: what
    sets it, as a refusal names it. ``size``: the list size of the last whole block.

    >>> block, encoder = HeaderBlock(), hpack.Encoder()
    >>> data = encoder.encode([(":status", "200"), ("x", "1")])
    >>> block.add(HEADERS, 0, 1, data[:2], hpack.Decoder()) is None, block.open, block.stream
    (True, True, 1)
    """

    __slots__ = ("data", "stream", "flags", "size", "limit", "option")

    #: The default ``limit``: what our client takes from a server.
    LIMIT = 1 << 20

    def __init__(self, limit: int = LIMIT, option: str = "our client's limit"):
        self.data: bytearray | None = None
        self.stream = 0                    # the stream and the HEADERS flags (END_STREAM) of the block
        self.flags = 0
        self.size = 0
        self.limit, self.option = limit, option

    @property
    def open(self) -> bool:
        """A block has begun and not ended: only its CONTINUATION frames may come now."""
        return self.data is not None

    def decoder(self) -> hpack.Decoder:
        """An HPACK decoder for the blocks this bounds (it stops at :data:`DECODED_FACTOR` times ``limit``)."""
        return hpack.Decoder(max_header_list_size=DECODED_FACTOR * self.limit)

    def admit(self, kind: int, flags: int, length: int) -> None:
        """A HEADERS or CONTINUATION frame of ``length`` bytes is announced: ``ProtocolError``
        (ENHANCE_YOUR_CALM) if the block would pass what it may hold, before any of it is buffered."""
        held = len(self.data) if kind == CONTINUATION and self.data is not None else 0
        whole = flags & END_HEADERS
        bound = WHOLE_BLOCK_FACTOR * self.limit if whole else self.limit
        if held + length > bound:
            raise ProtocolError(ENHANCE_YOUR_CALM, f"a header block of more than {bound} bytes"
                                                   f"{'' if whole else ', unfinished'} ({self.option})")

    def add(self, kind: int, flags: int, stream: int, payload: bytes,
            decoder: hpack.Decoder) -> dict[str, str] | None:
        """Take one HEADERS or CONTINUATION frame: the decoded headers once the block is whole."""
        self.admit(kind, flags, len(payload))
        if kind == HEADERS:
            self.data = bytearray(header_fragment(flags, payload))
            self.stream, self.flags = stream, flags
        elif self.data is None:
            raise ProtocolError(PROTOCOL_ERROR, "a CONTINUATION frame without a HEADERS frame before it")
        else:
            self.data += payload
        if not flags & END_HEADERS:
            return None
        data, self.data = self.data, None
        headers, self.size = decode_headers(decoder, data)
        return headers
