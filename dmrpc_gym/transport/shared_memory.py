"""Shared memory between our client and our server on one host: the negotiation, the side channel, and
one connection's regions (:class:`RegionLink`, the same object at both ends).

The negotiation, per gRPC stream and only between our two ends (every foreign peer sees plain dm_env_rpc):

1. our client, unless told ``shared_memory=False``, sends the request header
   ``dmrpc-shared-memory: NONCE`` (128 random bits, as 32 digits of :data:`_DIGITS`) on its stream;
2. our server, unless told ``--no-shared-memory``, says in every response's headers
   ``dmrpc-gym-shared-memory: NAME``: its Unix socket in the abstract namespace, named by 128 random
   bits (no file, nothing left behind; a server on another host or in another network namespace
   has none the client can reach, which is what makes this a same-host test that cannot be fooled);
   the stream's session keeps the nonce (it passed the token check, where the server has a token);
3. once the world's specs are known and some tensor of fixed size is :data:`THRESHOLD` bytes or
   more, the client creates a region (a sealed ``memfd``, :mod:`~dmrpc_gym.transport.shm_regions`),
   connects to ``NAME``, checks that the server runs as its own user (``SO_PEERCRED``) and sends the
   stream's nonce and the region's descriptor (``SCM_RIGHTS``) in one message; the server checks the
   client's user in turn, finds the stream by its nonce, checks the region (sealed, of the announced
   size, at most ``max_size`` bytes) and answers one byte (or a refusal naming why);
4. from then on, each step request carries its large actions as references into the region and
   the targets where the server is to write its large observations, and the answer carries
   references to them (:mod:`~dmrpc_gym.protocol.region_refs`).

The client owns the region and its layout; the server writes only where a step asked it to and
reads only within the region, every reference checked (:class:`~dmrpc_gym.transport.shm_regions.RegionError`).
Where the client asked and could not get it, :attr:`RegionLink.state` says why (``inspect`` and
``status`` show it, the ``dmrpc_gym.shared_memory`` logger says it at debug level): never an error.

>>> region = Region.create(1 << 20)
>>> link = RegionLink(bytes(16), region=region)         # the client's (plan() lays it out, joined to the server)
>>> link.reads = {3: (0, 1 << 20, 6)}
>>> server = RegionLink(bytes(16), region=region)       # the server's (it adopts the client's region)
>>> asked = targets({3: (0, 1 << 20)})
>>> _ = server.resolve(STEP_TAG + varint(len(asked)) + asked, 1)
>>> server.writes
{3: (0, 1048576)}
>>> ref = server.place(3, np.full(1 << 20, 7, np.uint8), 6)
>>> body = b"".join(entries(OBSERVATIONS_TAG, {3: ref}))
>>> _, large = link.resolve(STEP_TAG + varint(len(body)) + body, 2)
>>> large[3][0], large[3][1][:3], large[3][1].flags.owndata
('uint8s', array([7, 7, 7], dtype=uint8), True)
>>> region.close()
>>> link.close()
"""
from __future__ import annotations

import logging
import math
import secrets
import socket
import struct
from typing import Any, Mapping

import numpy as np

from dmrpc_gym.protocol import tensors
from dmrpc_gym.protocol.dtypes import BY_DATA_TYPE, MEMORY
from dmrpc_gym.protocol.protowire import varint
from dmrpc_gym.protocol.region_refs import (OBSERVATIONS_TAG, STEP_TAG, OFFER_HEADER, REQUEST_HEADER, entries, read,
                                            reference, targets)
from dmrpc_gym.transport.shm_regions import (TARGET_ALIGN, Region, aligned, RegionError, check_peer, connect, listen,
                                             receive_announced, send_region)

__all__ = ["HELLO", "THRESHOLD", "MAX_SHARED", "RegionLink", "SharedMemoryHost", "join", "REQUEST_HEADER", "OFFER_HEADER",
           "Region", "RegionError", "request_header"]

log = logging.getLogger("dmrpc_gym.shared_memory")

#: Tensors of this many bytes or more go through the region (measured: ``benchmarks/shm_threshold.py``, and
#: ``docs/guides/shared-memory.md``).
THRESHOLD = 16 << 10
#: The largest region a connection has by default (the client creates none larger, the server adopts none larger).
MAX_SHARED = 1 << 30
HELLO = struct.Struct("<4sB16s")           # magic, version, the stream's nonce: before the region announcement
_MAGIC, _VERSION = b"DMSM", 1
_HANDSHAKE = 5.0                            # seconds a side-channel handshake may take
_HANDSHAKES = 16                            # at most this many at once on a server


#: The 16 digits that write 128 random bits in a header (the hex digits' places): all of one length (6 bits) in
#: HPACK's Huffman code, so that a header's size never depends on the bits (byte counts stay comparable).
_DIGITS = "3456789bdfghlmnp"
_FROM_HEX = str.maketrans("0123456789abcdef", _DIGITS)
_TO_HEX = str.maketrans(_DIGITS, "0123456789abcdef")


def written(nonce: bytes) -> str:
    """``nonce`` in :data:`_DIGITS` (what the headers carry).

    >>> written(bytes([0, 255]))
    '33pp'
    """
    return nonce.hex().translate(_FROM_HEX)


def read_written(text: str) -> bytes | None:
    """The bytes :func:`written` wrote as ``text``; None where it is not such a text."""
    if not text or set(text) - set(_DIGITS):
        return None
    return bytes.fromhex(text.translate(_TO_HEX))


def request_header() -> tuple[bytes, tuple[str, str]]:
    """A fresh nonce and the request header that carries it."""
    nonce = secrets.token_bytes(16)
    return nonce, (REQUEST_HEADER, written(nonce))


class RegionLink:
    """One connection's shared memory, at either end: its region, where this end writes its large tensors
    (:attr:`writes`, ``uid -> (offset, capacity)``: the client's action spans, the server's targets of
    the step being answered), where the client expects its observations (:attr:`reads`; None on the
    server: anywhere in the region), whether arrays read are copies (:attr:`copy`) and :attr:`state`.

    ``nonce``: the stream's (the client's own, or the one the server got in the request header).
    """

    __slots__ = ("region", "writes", "reads", "copy", "state", "threshold", "nonce", "owned", "offer", "max_size",
                 "targets", "_refs")

    def __init__(self, nonce: bytes | None = None, *, region: Region | None = None, threshold: int | None = None,
                 max_size: int = MAX_SHARED):
        self.nonce, self.region, self.max_size = nonce, region, max_size
        #: Tensors of this many bytes or more go through the region (None: :data:`THRESHOLD` as it is now).
        self.threshold = THRESHOLD if threshold is None else threshold
        self.writes: dict[int, tuple[int, int]] = {}
        self.reads: dict[int, tuple[int, int, int]] | None = None
        self.copy = True
        self.owned = False             # whether closing the link closes the region (not when several share it)
        self.offer: str | None = None  # the server's socket name, once its answer said it
        #: What the step requests carry: the targets of the large observations (b"": none).
        self.targets = b""
        self._refs: dict[tuple, bytes] = {}     # (shape, data type, offset) -> the reference's bytes
        #: ``"on"``, or why not (``"off"``, ``"asked"``, ``"not offered by the server"``, ``"unused"``, ...).
        self.state = "asked" if nonce is not None else "off"

    @property
    def active(self) -> bool:
        return self.region is not None

    # -- the client's layout --------------------------------------------------------------------
    def plan(self, actions: Mapping[int, tuple[int, int]], observations: Mapping[int, tuple[int, int]], *,
             region: Region | None = None, at: Mapping[int, int] | None = None) -> None:
        """Lay out a joined world's large tensors (``uid -> (nbytes, data type)``, each of fixed size): the
        action spans (:attr:`writes`) and observation targets (:attr:`reads`, :attr:`targets`), in a new
        region joined to the server, or (a vector env) in ``region`` (owned by the caller), joined here, at the offsets ``at``
        (``("a" or "o", uid) -> offset``). Where it cannot (no offer, nothing large, the server refuses),
        nothing goes through regions and :attr:`state` says why."""
        self.writes, self.reads, self.targets = {}, None, b""
        if self.nonce is None:
            return
        if self.offer is None:
            self.state = "not offered by the server (not a dmrpc_gym server, or one serving with --no-shared-memory)"
            return
        if not actions and not observations:
            self.state = f"unused (no tensor of a fixed size of {self.threshold} bytes or more)"
            return
        if region is None:
            layout, size = {}, 0
            for key, n in [*((("a", u), n) for u, (n, _) in actions.items()),
                           *((("o", u), n) for u, (n, _) in observations.items())]:
                layout[key], size = size, size + aligned(n)
            if size > self.max_size:
                self.state = f"unused (the large tensors need {size} bytes, more than the {self.max_size} allowed)"
                return
            if self.region is None or self.region.size < size or not self.owned:
                try:
                    fresh = Region.create(size, "dmrpc_gym-client")
                except (OSError, RegionError) as err:
                    self._failed(f"no region of {size} bytes could be made ({err})")
                    return
                try:
                    join(self.offer, self.nonce, fresh)
                except (OSError, RegionError, PermissionError) as err:
                    fresh.close()
                    self._failed(str(err))
                    return
                self.release()
                self.region, self.owned = fresh, True
            at = layout
        else:
            if region is not self.region:
                try:
                    join(self.offer, self.nonce, region)
                except (OSError, RegionError, PermissionError) as err:
                    self._failed(str(err))       # (its own region, if any, stays in use)
                    return
                self.release()
                self.region, self.owned = region, False
        self.writes = {u: (at[("a", u)], n) for u, (n, _) in actions.items()}
        self.reads = {u: (at[("o", u)], n, dt) for u, (n, dt) in observations.items()}
        self.targets = targets({u: (offset, n) for u, (offset, n, _) in self.reads.items()}) if self.reads else b""
        self.state = "on"

    def _failed(self, why: str) -> None:
        self.state = f"failed: {why}"
        log.debug("shared memory not used: %s", why)

    # -- both ends ------------------------------------------------------------------------------
    def place(self, uid: int, value: Any, dtype: Any) -> bytes | None:
        """Write ``value`` (the tensor of ``uid``) into its span and return the reference that replaces it in
        the message; None where it has no span or does not fit it (it then travels in the message)."""
        span = self.writes.get(uid)
        if span is None or self.region is None:
            return None
        arr, c = tensors.prepare(value, dtype)
        if c.kind is not MEMORY or arr.nbytes > span[1]:
            return None
        self.region.write(span[0], arr)
        key = arr.shape, c.dt, span[0]
        ref = self._refs.get(key)
        if ref is None:
            ref = reference(*key)
            if len(self._refs) < 256:
                self._refs[key] = ref
        return ref

    def resolve(self, message: Any, map_field: int) -> tuple[Any, dict[int, tuple[str, np.ndarray]]]:
        """``message`` (a step's envelope) without its references, and the arrays they point to by UID
        (as :func:`~dmrpc_gym.protocol.large_tensors.split` gives them); a request's targets become
        :attr:`writes`. ``ValueError`` (a :class:`RegionError` naming it) for a reference that is
        not what this end allows."""
        message, refs, spans = read(message, map_field)
        if self.reads is None:                 # the server: the targets are the step's own
            size = 0 if self.region is None else self.region.size
            for uid, (offset, capacity) in spans.items():
                if offset % TARGET_ALIGN or offset + capacity > size:
                    raise RegionError(f"observation {uid}: a target of {capacity} bytes at offset {offset}, not "
                                      f"a span of the region ({size} bytes, targets at multiples of {TARGET_ALIGN})")
            self.writes = spans
        elif spans:
            raise RegionError("the peer sent shared-memory targets, which only a client sends")
        large = {}
        for uid, (shape, dt, number, offset) in refs.items():
            why = self.refused(uid, shape, dt, number, offset)
            if why is not None:
                raise RegionError(why)
            c = BY_DATA_TYPE[dt]
            large[uid] = c.name, self.region.array(offset, c.wire, shape, copy=self.copy)
        return message, large

    def refused(self, uid: int, shape: tuple[int, ...], dt: int, number: int, offset: int) -> str | None:
        """Why the peer's reference to ``shape`` elements of data type ``dt`` at ``offset`` of region ``number``,
        for tensor ``uid``, is not one this end takes (None: it is). The one check of a reference, for the
        general read (:meth:`resolve`) and the client's steady path, which learns its layout from one."""
        c = BY_DATA_TYPE.get(dt)
        if c is None or c.kind is not MEMORY:
            return f"tensor {uid}: a reference to data type {dt}, which no region holds (float, double, int8, uint8 " \
                   "and bool do)"
        if number != 0 or self.region is None:
            return f"tensor {uid}: a reference to region {number}, which this connection does not have"
        if self.reads is not None:
            expected = self.reads.get(uid)
            nbytes = math.prod(shape) * c.wire.itemsize
            if expected is None or expected[0] != offset or nbytes > expected[1] or expected[2] != dt:
                want = "no reference" if expected is None else \
                    f"at most {expected[1]} bytes of data type {expected[2]} at offset {expected[0]}"
                return (f"observation {uid}: a reference to {nbytes} bytes of data type {dt} at offset {offset}; "
                        f"this client asked for {want}")
        return None

    def release(self) -> None:
        """Let go of the region (closed where this link made it)."""
        region, self.region = self.region, None
        self.writes, self.targets = {}, b""
        if region is not None and self.owned:
            region.close()

    def close(self) -> None:
        """The connection is over: release the region (idempotent)."""
        self.release()
        if self.nonce is not None and self.state == "on":
            self.state = "closed"

    def __repr__(self) -> str:
        size = f", {self.region.size} bytes" if self.region is not None else ""
        return f"RegionLink({self.state}{size})"


# -- the side channel --------------------------------------------------------------------------------
def join(name: str, nonce: bytes, region: Region, timeout: float = _HANDSHAKE) -> None:
    """Give ``region`` to the server listening at the abstract Unix socket ``name`` for the stream of ``nonce``.
    ``PermissionError`` when the server runs as another user, ``RegionError`` when it refuses (its reason),
    ``OSError`` when it cannot be reached (another host, another network namespace)."""
    sock = connect(name, timeout)
    try:
        check_peer(sock)
        send_region(sock, region, HELLO.pack(_MAGIC, _VERSION, nonce))
        reply = b""
        while len(reply) < 512:
            got = sock.recv(512)
            if not got:
                break
            reply += got
    finally:
        sock.close()
    if reply[:1] != b"\x01":
        why = reply[1:].decode("utf-8", "replace") or "it closed the side channel without a word"
        raise RegionError(f"the server refused the region: {why}")


class SharedMemoryHost:
    """A server's offer of shared memory: its abstract Unix socket, served on the server's event loop, and
    the streams that asked for it (by nonce). :meth:`link` makes a stream's :class:`RegionLink`;
    :meth:`drop` ends it. Every handshake is bounded (:data:`_HANDSHAKE` s, :data:`_HANDSHAKES` at once).

    >>> import asyncio
    >>> host = SharedMemoryHost()
    >>> host.name.startswith("dmrpc_gym-"), host.link({}) is None
    (True, True)
    >>> host.close()
    """

    def __init__(self, max_size: int = MAX_SHARED):
        if isinstance(max_size, bool) or not isinstance(max_size, int) or max_size < 1:
            raise ValueError(f"max_size must be a whole number of bytes >= 1, got {max_size!r}")
        self.max_size = max_size
        self.listener, self.name = listen(_HANDSHAKES, f"dmrpc_gym-{written(secrets.token_bytes(16))}")
        self.listener.setblocking(False)
        self.links: dict[bytes, RegionLink] = {}
        self._loop: Any = None
        self._handshakes: dict[socket.socket, Any] = {}

    @property
    def header(self) -> tuple[str, str]:
        """The response header that offers it."""
        return OFFER_HEADER, self.name

    def start(self, loop: Any) -> None:
        """Accept side connections on ``loop`` (the server's)."""
        self._loop = loop
        loop.add_reader(self.listener.fileno(), self._accept)

    def link(self, headers: Mapping[str, str]) -> RegionLink | None:
        """The :class:`RegionLink` of a stream whose request ``headers`` ask for shared memory, else None."""
        asked = headers.get(REQUEST_HEADER)
        if asked is None:
            return None
        nonce = read_written(asked) or b""
        if len(nonce) != 16 or nonce in self.links:
            log.debug("a client's %s header is not a fresh nonce of 32 digits of %r: ignored", REQUEST_HEADER, _DIGITS)
            return None
        link = self.links[nonce] = RegionLink(nonce, max_size=self.max_size, threshold=1)    # (the client decides)
        link.state, link.owned = "offered", True
        return link

    def drop(self, link: RegionLink | None) -> None:
        """The stream of ``link`` ended: forget it and release its region."""
        if link is not None:
            self.links.pop(link.nonce, None)
            link.close()

    def in_use(self) -> tuple[int, int]:
        """How many streams use a region, and their regions' bytes."""
        regions = [link.region.size for link in self.links.values() if link.region is not None]
        return len(regions), sum(regions)

    def _accept(self) -> None:
        try:
            conn, _ = self.listener.accept()
        except (BlockingIOError, InterruptedError):
            return
        except OSError as err:
            log.warning("shared memory: accepting on the side channel failed: %s", err)
            return
        if len(self._handshakes) >= _HANDSHAKES:
            conn.close()
            return
        try:
            conn.setblocking(False)
            check_peer(conn)
        except (PermissionError, OSError) as err:
            log.info("shared memory refused: %s", err)
            conn.close()
            return
        loop = self._loop
        self._handshakes[conn] = loop.call_later(_HANDSHAKE, self._end, conn, "the handshake took too long")
        loop.add_reader(conn.fileno(), self._hello, conn)

    def _hello(self, conn: socket.socket) -> None:
        try:
            head, region = receive_announced(conn, self.max_size, HELLO.size)
        except BlockingIOError:
            return
        except (RegionError, EOFError, OSError) as err:
            self._end(conn, str(err))
            return
        magic, version, nonce = HELLO.unpack(head)
        link = self.links.get(nonce) if (magic, version) == (_MAGIC, _VERSION) else None
        if link is None:
            region.close()
            self._end(conn, "no stream of this server asked for shared memory with that nonce")
            return
        link.release()
        link.region, link.state = region, "on"
        self._end(conn, None)

    def _end(self, conn: socket.socket, refusal: str | None) -> None:
        timer = self._handshakes.pop(conn, None)
        if timer is None:
            return
        timer.cancel()
        try:
            self._loop.remove_reader(conn.fileno())
        except (ValueError, OSError):
            pass
        if refusal is not None:
            log.info("shared memory refused: %s", refusal)
        try:
            conn.send(b"\x01" if refusal is None else b"\x00" + refusal.encode()[:400])
        except OSError:
            pass
        conn.close()

    def close(self) -> None:
        """Stop offering (idempotent): the socket closes, every region is released."""
        if self._loop is not None:
            try:
                self._loop.remove_reader(self.listener.fileno())
            except (ValueError, OSError, RuntimeError):
                pass
        for conn in list(self._handshakes):
            self._handshakes.pop(conn).cancel()
            conn.close()
        self.listener.close()
        for link in list(self.links.values()):
            link.close()
        self.links.clear()
