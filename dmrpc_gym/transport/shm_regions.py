"""Shared-memory regions between two processes of one host: the building block of issue 40's large tensors.

A region is a ``memfd`` (anonymous memory: no name in any file system, nothing to clean up, gone
when the last process holding it closes it or dies), sealed against shrinking and growing so that
a peer cannot truncate it under our mapping (which would end in ``SIGBUS``, a crash). It goes to
the peer as a file descriptor over a Unix socket (``SCM_RIGHTS``), whose peer is checked first
(``SO_PEERCRED``: the same user, unless said otherwise). The listening socket lives in the
abstract namespace under 128 random bits: no path, nothing left behind, no name to guess.

Nothing the peer says is trusted: an announcement with the wrong header, no descriptor or
several, a descriptor that is not a sealed memfd of the announced size, and every offset and
length read from a peer are checked before use; each failure is a :class:`RegionError` naming
what was wrong and what was expected.

:class:`Allocator` hands out bounded, aligned spans of a region (first fit, freed spans merged),
so one region carries many tensors at once.

>>> region = Region.create(1 << 16)
>>> spans = Allocator(region.size)
>>> at = spans.allocate(12)
>>> region.write(at, np.arange(3, dtype=np.float32))
>>> region.array(at, np.float32, (3,))
array([0., 1., 2.], dtype=float32)
>>> region.array(region.size - 4, np.float32, (3,))
Traceback (most recent call last):
...
dmrpc_gym.transport.shm_regions.RegionError: a span of 12 bytes at offset 65532 runs past the region's 65536 bytes
>>> spans.free(at); region.close()
"""
from __future__ import annotations

import fcntl
import mmap
import os
import secrets
import socket
import struct
from bisect import insort
from typing import Any, Callable, NamedTuple

import numpy as np

__all__ = ["RegionError", "Region", "Allocator", "Credentials", "peer_credentials", "check_peer", "listen",
           "connect", "send_region", "receive_region", "receive_announced", "MAX_REGION", "ALIGN", "TARGET_ALIGN",
           "HEADER", "aligned"]

#: The largest region accepted from a peer unless the receiver says otherwise (1 GiB).
MAX_REGION = 1 << 30
#: Spans start at multiples of this (a cache line: every dtype's alignment, no false sharing).
ALIGN = 64
#: Where a peer may ask for a tensor to be written: offsets at multiples of this (the largest itemsize a
#: region holds, so every dtype's alignment), not of :data:`ALIGN`, so that the rows of a vector env's
#: ``[N, *shape]`` array, ``nbytes`` apart, are targets too.
TARGET_ALIGN = 8


def aligned(n: int, to: int = ALIGN) -> int:
    """``n`` rounded up to a multiple of ``to``."""
    return -(-n // to) * to
_SEALS = fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_SEAL
#: A region announcement: magic, version, the region's size (its descriptor rides along, SCM_RIGHTS).
HEADER = struct.Struct("<4sBQ")
_MAGIC, _VERSION = b"DRGN", 1
_CREDENTIALS = struct.Struct("3i")         # struct ucred: pid, uid, gid
#: dtypes an array over a region may have: numbers and bools (never objects, whose bytes are pointers).
_KINDS = set("biuf")


class RegionError(ValueError):
    """A region, an announcement of one or a span in one is not what was expected."""


class Region:
    """A sealed ``memfd`` of ``size`` bytes, mapped: :meth:`create` a new one, :meth:`adopt` a peer's.

    >>> with Region.create(4096) as region:
    ...     region.write(0, np.array([7, 8], np.uint8))
    ...     region.array(0, np.uint8, (2,), copy=False).flags.owndata
    False
    """

    __slots__ = ("fd", "size", "_map", "__weakref__")

    def __init__(self, fd: int, size: int):
        self.fd, self.size = fd, size
        self._map: mmap.mmap | None = mmap.mmap(fd, size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)

    @classmethod
    def create(cls, size: int, label: str = "dmrpc_gym") -> "Region":
        """A new region of ``size`` bytes (zeros). ``label`` shows in ``/proc/PID/fd`` only: no one can open it by it."""
        if not isinstance(size, int) or not 0 < size <= MAX_REGION:
            raise RegionError(f"a region's size must be an int in 1..{MAX_REGION}, got {size!r}")
        fd = os.memfd_create(label, os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
        try:
            os.ftruncate(fd, size)
            fcntl.fcntl(fd, fcntl.F_ADD_SEALS, _SEALS)
            return cls(fd, size)
        except BaseException:
            os.close(fd)
            raise

    @classmethod
    def adopt(cls, fd: int, size: int) -> "Region":
        """The region behind ``fd`` (a peer's; this takes the descriptor over and closes it on error), after
        checking that it is a memfd of ``size`` bytes sealed against shrinking and growing."""
        try:
            try:
                seals = fcntl.fcntl(fd, fcntl.F_GET_SEALS)
            except OSError:
                raise RegionError("the descriptor sent for a region is not a memfd (it has no seals)") from None
            missing = [name for flag, name in ((fcntl.F_SEAL_SHRINK, "F_SEAL_SHRINK"), (fcntl.F_SEAL_GROW, "F_SEAL_GROW"))
                       if not seals & flag]
            if missing:
                raise RegionError(f"the region sent is not sealed with {' and '.join(missing)} "
                                  "(it could be truncated under the mapping)")
            actual = os.fstat(fd).st_size
            if actual != size:
                raise RegionError(f"the region sent has {actual} bytes, announced as {size}")
            return cls(fd, size)
        except BaseException:
            os.close(fd)
            raise

    def _span(self, offset: Any, length: Any) -> tuple[int, int]:
        """``(offset, length)`` as ints, once checked to lie within the region."""
        if self._map is None:
            raise RegionError("the region is closed")
        for what, value in (("offset", offset), ("length", length)):
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
                raise RegionError(f"a span's {what} must be an int, got {type(value).__name__}")
            if value < 0:
                raise RegionError(f"a span's {what} must be 0 or more, got {value}")
        offset, length = int(offset), int(length)
        if offset + length > self.size:
            raise RegionError(f"a span of {length} bytes at offset {offset} runs past the region's {self.size} bytes")
        return offset, length

    def view(self, offset: int, length: int) -> memoryview:
        """Bytes ``offset .. offset + length`` of the region (checked), as a writable view."""
        offset, length = self._span(offset, length)
        return memoryview(self._map)[offset:offset + length]

    def array(self, offset: int, dtype: Any, shape: tuple[int, ...], copy: bool = True) -> np.ndarray:
        """The array of ``dtype`` and ``shape`` at ``offset`` (all checked: these come from a peer): a copy the
        caller owns, or with ``copy=False`` a view of the region, valid until the region's next use."""
        return self.reader(offset, dtype, shape)(copy)

    def reader(self, offset: int, dtype: Any, shape: tuple[int, ...]) -> Callable[[bool], np.ndarray]:
        """What reads the array of ``dtype`` and ``shape`` at ``offset`` (checked now, as :meth:`array` checks them),
        step after step: ``read(copy)`` gives it as :meth:`array` does (a ``RegionError`` once the region is closed;
        bools checked at every read: the peer writes them)."""
        try:
            dtype = np.dtype(dtype)
        except TypeError as err:
            raise RegionError(f"not a dtype: {dtype!r} ({err})") from None
        if dtype.kind not in _KINDS or dtype.hasobject:
            raise RegionError(f"an array in a region holds numbers or bools, not {dtype}")
        try:
            shape = tuple(int(d) for d in shape)
        except (TypeError, ValueError):
            raise RegionError(f"a shape is a sequence of ints, got {shape!r}") from None
        if any(d < 0 for d in shape):
            raise RegionError(f"a shape's dimensions must be 0 or more, got {list(shape)}")
        count = 0 if 0 in shape else 1
        for d in shape if count else ():
            count *= d
            if count * dtype.itemsize > self.size:      # before the product can grow without bound
                raise RegionError(f"an array of shape {list(shape)} and dtype {dtype} is larger than the region "
                                  f"({self.size} bytes)")
        offset, _ = self._span(offset, count * dtype.itemsize)
        if offset % dtype.alignment:
            raise RegionError(f"an array of {dtype} must start at a multiple of {dtype.alignment}, got offset {offset}")
        bools = dtype.kind == "b" and count

        def read(copy: bool = True) -> np.ndarray:
            mapped = self._map
            if mapped is None:
                raise RegionError("the region is closed")
            flat = np.frombuffer(mapped, dtype, count, offset).reshape(shape)
            if bools and flat.view(np.uint8).max() > 1:
                raise RegionError(f"the bools at offset {offset} hold bytes other than 0 and 1")
            return flat.copy() if copy else flat
        return read

    def write(self, offset: int, array: np.ndarray) -> None:
        """Copy ``array``'s bytes into the region at ``offset`` (checked): one copy."""
        array = np.ascontiguousarray(array)
        if array.dtype.kind not in _KINDS or array.dtype.hasobject:
            raise RegionError(f"an array in a region holds numbers or bools, not {array.dtype}")
        offset, length = self._span(offset, array.nbytes)
        self._map[offset:offset + length] = array      # (its C-order bytes, by the buffer protocol: one memcpy)

    def close(self) -> None:
        """Unmap and close (idempotent). Views still held keep the mapping until they go."""
        if self._map is not None:
            try:
                self._map.close()
            except BufferError:          # a view of it is still alive: the memory goes with the last one
                pass
            self._map = None
            os.close(self.fd)

    def __enter__(self) -> "Region":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Region({self.size} bytes{', closed' if self._map is None else ''})"


class Allocator:
    """Spans of a region of ``size`` bytes: :meth:`allocate` ``n`` bytes (aligned to :data:`ALIGN`, first fit),
    :meth:`free` them; at most ``max_spans`` at once. Every error says what was asked and what is left.

    >>> spans = Allocator(256)
    >>> spans.allocate(100), spans.allocate(10), spans.used
    (0, 128, 192)
    >>> spans.allocate(100)
    Traceback (most recent call last):
    ...
    dmrpc_gym.transport.shm_regions.RegionError: no room for 100 bytes in the region (256 bytes, 192 in use, the largest free span 64)
    """

    __slots__ = ("size", "max_spans", "_free", "_taken")

    def __init__(self, size: int, max_spans: int = 1024):
        if not isinstance(size, int) or size <= 0:
            raise RegionError(f"an allocator's size must be a positive int, got {size!r}")
        self.size, self.max_spans = size, max_spans
        self._free: list[tuple[int, int]] = [(0, size)]     # (offset, length), sorted by offset, merged
        self._taken: dict[int, int] = {}                     # offset -> length

    @property
    def used(self) -> int:
        return sum(self._taken.values())

    def allocate(self, n: int) -> int:
        """The offset of ``n`` fresh bytes (a multiple of :data:`ALIGN`)."""
        if not isinstance(n, int) or n <= 0:
            raise RegionError(f"a span to allocate has a positive int length, got {n!r}")
        if len(self._taken) >= self.max_spans:
            raise RegionError(f"the region already holds {len(self._taken)} spans, the most allowed")
        need = aligned(n)
        for i, (at, length) in enumerate(self._free):
            if length >= need:
                if length == need:
                    del self._free[i]
                else:
                    self._free[i] = (at + need, length - need)
                self._taken[at] = need
                return at
        largest = max((length for _, length in self._free), default=0)
        raise RegionError(f"no room for {n} bytes in the region ({self.size} bytes, {self.used} in use, "
                          f"the largest free span {largest})")

    def free(self, offset: int) -> None:
        """Give back the span at ``offset`` (one :meth:`allocate` returned and not yet freed)."""
        length = self._taken.pop(offset, None)
        if length is None:
            raise RegionError(f"no span was allocated at offset {offset!r}")
        insort(self._free, (offset, length))
        merged: list[tuple[int, int]] = []
        for at, n in self._free:
            if merged and merged[-1][0] + merged[-1][1] == at:
                merged[-1] = (merged[-1][0], merged[-1][1] + n)
            else:
                merged.append((at, n))
        self._free = merged


# -- the Unix socket: who is there, and passing regions -------------------------------------------------
class Credentials(NamedTuple):
    pid: int
    uid: int
    gid: int


def peer_credentials(sock: socket.socket) -> Credentials:
    """The process at the other end of the Unix socket ``sock``, as the kernel saw it connect (``SO_PEERCRED``)."""
    return Credentials(*_CREDENTIALS.unpack(sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED,
                                                            _CREDENTIALS.size)))


def check_peer(sock: socket.socket, uid: int | None = None) -> Credentials:
    """The peer's credentials, if it runs as ``uid`` (default: this process's user); else ``PermissionError``."""
    found = peer_credentials(sock)
    want = os.geteuid() if uid is None else uid
    if found.uid != want:
        raise PermissionError(f"the process at the other end of the Unix socket (pid {found.pid}) runs as uid "
                              f"{found.uid}; only uid {want} may share memory with this one")
    return found


def listen(backlog: int = 8, name: str | None = None) -> tuple[socket.socket, str]:
    """A Unix socket listening in the abstract namespace under 128 random bits (or ``name``, which should hold
    as many): ``(socket, name)``. No file is made (nothing to clean up); whoever connects is checked with
    :func:`check_peer`."""
    name = name or f"dmrpc_gym-{secrets.token_hex(16)}"
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.bind("\0" + name)
        sock.listen(backlog)
    except BaseException:
        sock.close()
        raise
    return sock, name


def connect(name: str, timeout: float | None = 10.0) -> socket.socket:
    """A connection to the abstract Unix socket ``name`` (what :func:`listen` returned)."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(timeout)
    try:
        sock.connect("\0" + name)
    except BaseException:
        sock.close()
        raise
    return sock


def send_region(sock: socket.socket, region: Region, prefix: bytes = b"") -> None:
    """Announce ``region`` to the peer and pass it its descriptor (``SCM_RIGHTS``), after ``prefix`` (in the
    same message: what :func:`receive_announced` reads before the announcement)."""
    socket.send_fds(sock, [prefix + HEADER.pack(_MAGIC, _VERSION, region.size)], [region.fd])


def receive_region(sock: socket.socket, max_size: int = MAX_REGION) -> Region:
    """The region the peer sent with :func:`send_region`, checked (``RegionError`` naming what was wrong);
    ``EOFError`` when the peer closed the connection instead."""
    return receive_announced(sock, max_size)[1]


def receive_announced(sock: socket.socket, max_size: int = MAX_REGION, prefix: int = 0) -> tuple[bytes, Region]:
    """:func:`receive_region` of a region sent after ``prefix`` bytes: ``(those bytes, the region)``."""
    data, fds, flags, _ = socket.recv_fds(sock, prefix + HEADER.size, 4)
    head, data = data[:prefix], data[prefix:]
    extra = fds[1:]
    for fd in extra:
        os.close(fd)
    fd = fds[0] if fds else None
    try:
        if flags & socket.MSG_CTRUNC:
            raise RegionError("the peer sent more descriptors than a region announcement holds (one)")
        if not head and not data and fd is None:
            raise EOFError("the peer closed the connection before announcing a region")
        if len(head) != prefix or len(data) != HEADER.size:
            raise RegionError(f"a region announcement is {prefix + HEADER.size} bytes, got {len(head) + len(data)}")
        magic, version, size = HEADER.unpack(data)
        if magic != _MAGIC or version != _VERSION:
            raise RegionError(f"a region announcement starts with {_MAGIC!r} version {_VERSION}, got "
                              f"{magic!r} version {version}")
        if fd is None:
            raise RegionError("a region announcement came without its descriptor")
        if extra:
            raise RegionError(f"a region announcement came with {len(fds)} descriptors, expected one")
        if not 0 < size <= max_size:
            raise RegionError(f"the peer announced a region of {size} bytes; at most {max_size} are accepted")
    except BaseException:
        if fd is not None:
            os.close(fd)
        raise
    return head, Region.adopt(fd, size)
