"""A frame as PNG, written with the standard library (zlib): what a dashboard's page shows.

The server sends a watched world's frames so (:mod:`~dmrpc_gym.server.serving.watching`): a CartPole frame is
5 kB of PNG instead of 720 kB of pixels, which costs less to encode (zlib, off the event loop and
without the GIL) than to copy and send.

>>> import numpy as np
>>> data = encode_png(np.zeros((2, 3, 3), np.uint8))
>>> data[:8] == b"\\x89PNG\\r\\n\\x1a\\n", len(data) > 40
(True, True)
"""
from __future__ import annotations

import struct
import zlib

import numpy as np

__all__ = ["encode_png"]

_COLOR_TYPES = {1: 0, 3: 2, 4: 6}       # channels -> PNG colour type (grey, RGB, RGBA)


def _chunk(kind: bytes, body: bytes) -> bytes:
    return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body) & 0xFFFFFFFF)


def encode_png(frame: np.ndarray, level: int = 3) -> bytes:
    """``frame`` (uint8, H x W, or H x W x 1, 3 or 4) as PNG bytes; ``ValueError`` for anything else."""
    array = np.asarray(frame)
    if array.ndim == 2:
        array = array[:, :, None]
    if array.dtype != np.uint8 or array.ndim != 3 or array.shape[2] not in _COLOR_TYPES or 0 in array.shape[:2]:
        raise ValueError(f"a frame is uint8 H x W x 1, 3 or 4, got {array.dtype} {array.shape}")
    height, width, channels = array.shape
    rows = np.concatenate([np.zeros((height, 1), np.uint8), array.reshape(height, width * channels)], axis=1)
    header = struct.pack(">IIBBBBB", width, height, 8, _COLOR_TYPES[channels], 0, 0, 0)
    return (b"\x89PNG\r\n\x1a\n" + _chunk(b"IHDR", header)
            + _chunk(b"IDAT", zlib.compress(rows.tobytes(), level)) + _chunk(b"IEND", b""))
