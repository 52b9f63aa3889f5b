"""A client connection's conduct on our server: what it costs without being a request, and when that is too much.

Requests are bounded by flow control and the size limit. What is left is
what a peer can make the server do for free: answer PINGs, open and reset
streams, or hold a connection with a frame, a header block or a preface it
never finishes. :class:`Conduct` counts these against a connection's
:class:`~dmrpc_gym.transport.limits.ConnectionLimits` and says when a
connection is to end, and why.

>>> from dmrpc_gym.transport.limits import ConnectionLimits
>>> conduct = Conduct(ConnectionLimits(min_ping_interval=1, max_ping_strikes=1), now=0.0)
>>> conduct.ping(0.0, streams=1); conduct.ping(0.5, streams=1)      # the second PING is a strike
>>> conduct.answered = True                      # DATA went out: the next PING is free
>>> conduct.ping(0.6, streams=1); conduct.strikes
0
>>> conduct.ping(0.7, streams=1)
>>> try:
...     conduct.ping(0.8, streams=1)
... except ProtocolError as err:
...     print(err)
too_many_pings
>>> conduct.erred(); conduct.dropped(1000), conduct.dropped(1 << 20)     # after a GOAWAY for its error
(False, True)
"""
from __future__ import annotations

import asyncio
import logging

from dmrpc_gym.transport.frames import ENHANCE_YOUR_CALM, NO_ERROR, PROTOCOL_ERROR, ProtocolError
from dmrpc_gym.transport.limits import IDLE_PING_INTERVAL, LINGER_BYTES, MIN_KEEPALIVE, ConnectionLimits

__all__ = ["Conduct", "Watching"]

log = logging.getLogger("dmrpc_gym.server")


class Conduct:
    """One connection's PINGs, resets and stalls, held against its ``limits`` (times from ``loop.time()``).

    ``answered`` is set by the connection whenever it sends HEADERS or DATA: the
    next PING is then no strike, and clears the strikes and the last PING's time,
    as grpc-go's ``resetPingStrikes`` and C-core's ``ResetPingStrikes`` do. So the
    PINGs a gRPC client sends as data arrives (BDP probes) are never strikes.
    """

    __slots__ = ("limits", "tick", "strikes", "answered", "_last_ping", "_resets", "_reset_second", "_since",
                 "_stall", "_drop_left")

    def __init__(self, limits: ConnectionLimits, now: float):
        self.limits = limits
        #: How often (seconds) :meth:`overdue` should be asked: a quarter of the shortest timeout, at most 1 s.
        self.tick = min(1.0, limits.handshake_timeout / 4, limits.frame_timeout / 4, limits.idle_timeout / 4)
        self.strikes = 0
        self.answered = False             # HEADERS or DATA went out since the last PING
        self._last_ping: float | None = None
        self._resets, self._reset_second = 0, 0.0
        self._since = now                 # since when the connection is idle (or waits for its preface)
        self._stall: tuple | None = None  # (what is unfinished, since when)
        self._drop_left: int | None = None   # what the linger after the peer's error may still read

    def erred(self) -> None:
        """The connection ends by GOAWAY for the peer's own error: its linger reads at most
        :data:`~dmrpc_gym.transport.limits.LINGER_BYTES` more (:meth:`dropped`)."""
        self._drop_left = LINGER_BYTES

    def dropped(self, n: int) -> bool:
        """``n`` bytes read and dropped while the connection lingers; True when it is to read no
        more (the peer erred, and has sent past its bound since)."""
        if self._drop_left is None:
            return False                  # a server stopping: its clients' bytes are read to the end
        self._drop_left -= n
        return self._drop_left <= 0

    def idle_from(self, now: float) -> None:
        """The connection's last stream has ended: it is idle from ``now``."""
        self._since = now

    def ping(self, now: float, streams: int, keepalive: bool = False) -> None:
        """A PING came, with ``streams`` open (``keepalive``: our client's keepalive PING):
        ``ProtocolError`` ("too_many_pings") past ``max_ping_strikes`` PINGs too close together.

        Too close: within ``min_ping_interval`` of the last PING while a stream is open, within
        :data:`~dmrpc_gym.transport.limits.IDLE_PING_INTERVAL` while none is (gRPC's rules);
        our client's keepalive is held to its own floor, ``MIN_KEEPALIVE``, when that is shorter.
        """
        last, self._last_ping = self._last_ping, now
        if self.answered or last is None:
            self.answered, self.strikes = False, 0
            return
        interval = self.limits.min_ping_interval if streams else IDLE_PING_INTERVAL
        if keepalive:
            interval = min(interval, MIN_KEEPALIVE)
        if now - last < interval:
            self.strikes += 1
            if self.strikes > self.limits.max_ping_strikes:
                raise ProtocolError(ENHANCE_YOUR_CALM, "too_many_pings")

    def reset(self, now: float) -> None:
        """The client reset a stream: ``ProtocolError`` past ``max_resets`` in one second (Rapid Reset)."""
        if now - self._reset_second >= 1.0:
            self._resets, self._reset_second = 0, now
        self._resets += 1
        if self._resets > self.limits.max_resets:
            raise ProtocolError(ENHANCE_YOUR_CALM, f"more than {self.limits.max_resets} stream resets in a "
                                                   "second (ConnectionLimits.max_resets)")

    def overdue(self, now: float, preface: bool, unfinished: tuple | None, streams: int) -> str | None:
        """Why the connection is to end now (a sentence naming the limit), or None.

        ``preface``: the client's preface has come; ``unfinished``: a key naming
        the frame or header block begun and not whole (None: none), which
        changes when it does; ``streams``: how many streams are open.
        """
        limits = self.limits
        if not preface:
            if now - self._since > limits.handshake_timeout:
                return (f"no HTTP/2 preface within {limits.handshake_timeout:g} s "
                        "(ConnectionLimits.handshake_timeout)")
            return None
        if unfinished is None:
            self._stall = None
        elif self._stall is None or self._stall[0] != unfinished:
            self._stall = (unfinished, now)
        elif now - self._stall[1] > limits.frame_timeout:
            return (f"a {unfinished[0]} begun {now - self._stall[1]:.0f} s ago is still unfinished "
                    f"(ConnectionLimits.frame_timeout is {limits.frame_timeout:g} s)")
        if streams:
            self._since = now
        elif now - self._since > limits.idle_timeout:
            return f"no open stream for {limits.idle_timeout:g} s (ConnectionLimits.idle_timeout)"
        return None


class Watching:
    """The connection's side of its conduct (a mixin of
    :class:`~dmrpc_gym.transport.server.protocol.GrpcProtocol`): a timer that runs only while a
    deadline applies, asking :class:`Conduct` each tick whether one has passed.

    What it needs of its host: :class:`~dmrpc_gym.transport.server.contracts.WatchingHost`.
    """

    def _watch(self) -> None:
        """A deadline may apply from now (a frame begun, the last stream gone): tick until none does.

        No timer runs while none can: a connection whose streams are open and whose frames
        are whole costs the event loop nothing (a timer always armed cost large transfers ~5 %)."""
        if self._tick is None and not self._closed:
            self._tick = asyncio.get_running_loop().call_later(self._conduct.tick, self._on_tick)

    def _on_tick(self) -> None:
        """Every ``Conduct.tick`` seconds while a deadline applies: end the connection should it
        stall or idle past its limits."""
        self._tick = None
        if self._closed or self._transport is None:
            return
        loop = asyncio.get_running_loop()
        unfinished = (("header block", self._blocks_done) if self._headers_in.open
                      else ("frame", self._frames_done) if self._buf or self._part is not None else None)
        why = self._conduct.overdue(loop.time(), self._preface, unfinished, len(self._streams))
        if why is None:
            if not self._preface or unfinished is not None or not self._streams:
                self._tick = loop.call_later(self._conduct.tick, self._on_tick)
            return
        log.info("closing an HTTP/2 connection: %s", why)
        if not self._preface:
            self._closed = True
            self._transport.close()
        else:
            self.abort(NO_ERROR if unfinished is None else PROTOCOL_ERROR, why)
