"""gRPC message encodings (``grpc-encoding``): gzip and deflate, each bounded by a size limit.

gRPC compresses message by message: a message whose flag byte is 1 is in the
stream's ``grpc-encoding``; each side advertises what it can decode in
``grpc-accept-encoding``. ``deflate`` is the zlib format, as grpc-core and
Node's ``zlib.deflate`` write it.

>>> inflate = decompressor("gzip", limit=1000)
>>> inflate(compressor("gzip")(b"x" * 100)) == b"x" * 100
True
"""
from __future__ import annotations

import zlib
from typing import Callable, Iterator

from dmrpc_gym.transport.codes import GrpcStatus
from dmrpc_gym.transport.frames import CLIENT_MESSAGE_LIMIT, StreamError

__all__ = ["ENCODINGS", "ACCEPT_ENCODING", "compressor", "decompressor", "inflating", "inflated_size", "check_encoding"]

_WBITS = {"gzip": 31, "deflate": 15}
#: Encodings this package reads and writes besides ``identity``.
ENCODINGS = tuple(_WBITS)
#: The ``grpc-accept-encoding`` value both ends advertise.
ACCEPT_ENCODING = "identity," + ",".join(ENCODINGS)


def check_encoding(name: str | None) -> str | None:
    """``None``/``"identity"`` -> None, a supported name -> itself; ``ValueError`` naming the choices else."""
    if name in (None, "identity"):
        return None
    if name not in _WBITS:
        raise ValueError(f"compression={name!r} is not supported; expected one of {ENCODINGS} or None")
    return name


def compressor(name: str) -> Callable[[bytes], bytes]:
    """A function compressing one message in encoding ``name`` (``"gzip"`` or ``"deflate"``)."""
    wbits = _WBITS[name]

    def compress(message: bytes) -> bytes:
        packer = zlib.compressobj(6, zlib.DEFLATED, wbits)
        return packer.compress(message) + packer.flush()
    return compress


def decompressor(name: str, limit: int, option: str = CLIENT_MESSAGE_LIMIT) -> Callable[[bytes], bytes]:
    """A function inflating one message in encoding ``name``; ``StreamError`` past ``limit`` bytes or when corrupt.

    ``KeyError`` for an encoding this package does not speak.
    """
    _WBITS[name]                              # KeyError now, not at the first message
    return lambda message: b"".join(inflating(name, message, limit, option))


#: Bytes inflated at a time: a server yields to its other connections between steps (a step
#: holds its event loop a few ms at most).
INFLATE_STEP = 1 << 18


def inflated_size(name: str, message: bytes, limit: int) -> int:
    """The size a gzip ``message`` says it inflates to (its trailer's ISIZE, mod 2**32), where that is
    within ``limit``; else 0 (deflate says nothing). A hint for the room to set aside: the inflation
    itself holds the limit, and zlib checks the size at the end."""
    size = _declared(name, message)
    return size if size is not None and size <= limit else 0


def _declared(name: str, message: bytes) -> int | None:
    return int.from_bytes(message[-4:], "little") if name == "gzip" and len(message) >= 18 else None


def inflating(name: str, message: bytes, limit: int, option: str = CLIENT_MESSAGE_LIMIT) -> Iterator[bytes]:
    """The inflated ``message``, in pieces of at most :data:`INFLATE_STEP` bytes, made as they are taken.

    ``StreamError`` as soon as the total passes ``limit`` (RESOURCE_EXHAUSTED, naming ``option``, what sets it) or the data is
    corrupt (INTERNAL): a small message that inflates to gigabytes costs at most ``limit``, and a gzip
    message whose trailer says it inflates past ``limit`` is refused before any of it is inflated.
    """
    declared = _declared(name, message)
    if declared is not None and declared > limit:    # a message within the limit says its size exactly
        raise StreamError(GrpcStatus.RESOURCE_EXHAUSTED, f"a {name} message of {len(message)} bytes inflates "
                          f"past the maximum message size of {limit} bytes (set by {option}): it says "
                          f"{declared} bytes")
    wbits = _WBITS[name] | 32 if name == "deflate" else _WBITS[name]   # deflate: zlib or gzip header
    unpacker, data, total = zlib.decompressobj(wbits), message, 0
    while True:
        try:
            out = unpacker.decompress(data, INFLATE_STEP)
        except zlib.error as err:
            raise StreamError(GrpcStatus.INTERNAL, f"a {name} message does not decompress: {err}") from None
        total += len(out)
        if total > limit:
            raise StreamError(GrpcStatus.RESOURCE_EXHAUSTED, f"a {name} message of {len(message)} bytes inflates "
                              f"past the maximum message size of {limit} bytes (set by {option})")
        if not out:
            return
        yield out
        data = unpacker.unconsumed_tail
