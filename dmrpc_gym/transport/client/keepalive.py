"""What the client stream does between calls: the idle watcher's reads, keepalive PINGs, and
looking for an answer without blocking.

A mixin of :class:`~dmrpc_gym.transport.client.connection.GrpcConnection`; every method runs
with the stream's ``lock`` held. The idle watcher
(:mod:`~dmrpc_gym.transport.client.idle_watcher`) calls :meth:`IdleConnection._pump` when the socket
is readable and no call runs, and, with keepalive on (``ping_every`` seconds,
off by default), :meth:`IdleConnection._tick` about once a second: a connection quiet
``ping_every`` seconds gets a PING, and one whose PING waits
:data:`PING_TIMEOUT` seconds for its ACK is declared dead, so the next call
fails at once, naming the cause. A call waiting for its answer does the same
(:meth:`IdleConnection._await_peer`): after ``ping_every`` seconds in which nothing came,
it PINGs, and it fails :data:`PING_TIMEOUT` seconds later if the PING is not
answered (a frozen server), so a call never waits longer than the two for a
server that says nothing at all. :meth:`IdleConnection.answer_ready` lets a caller
with many streams (the vector env's async batches) wait for whichever
answers first, on the sockets that :meth:`IdleConnection.fileno` gives.
"""
from __future__ import annotations

import select
import socket
import ssl
import struct
import time

from dmrpc_gym.transport.client import interrupts
from dmrpc_gym.transport.frames import (ping_frame)
from dmrpc_gym.transport.limits import KEEPALIVE_PING, MIN_KEEPALIVE

__all__ = ["MIN_KEEPALIVE", "PING_TIMEOUT", "RECV_CHUNK"]

# MIN_KEEPALIVE (from limits): the shortest keepalive interval a client may ask for, grpc clients'
# floor too. Our server permits our keepalive PINGs at that rate; grpc servers by default allow
# one PING per 5 minutes on a connection that carries no data, and answer more with GOAWAY
# too_many_pings.
#: Seconds a keepalive PING may wait for its ACK before the connection counts as dead.
PING_TIMEOUT = 20.0
RECV_CHUNK = 1 << 18          # the most one recv takes (into a buffer kept for it)
_SLICE = 0.02                 # seconds a read of a shared connection waits before it looks again
_READ_SLICE = 1               # seconds a blocking read waits, keepalive on, before it looks at the clock


class IdleConnection:
    """The connection between calls (see the module doc).

    What it needs of its host: :class:`~dmrpc_gym.transport.client.contracts.IdleHost`.
    """

    _ping_every: float | None = None  # keepalive interval (None: no PINGs of ours)
    _ping_out: float | None = None    # when our unanswered PING went out
    _quiet_since: float = 0.0         # since when no call was made, nor a PING answered
    _calls_seen = -1                  # messages_sent at the last tick (calls since: not quiet)
    _silent_from: float | None = None  # (a read of several streams) since when nothing came
    _timeout_by_select = False        # keepalive on, and blocking reads do not come back by themselves

    def answer_ready(self, stream) -> bool:
        """Whether ``stream.read`` would return at once (an answer, or the end of the stream): what
        the socket holds now is taken in first, without blocking."""
        with self.lock:
            if not stream.messages and stream.ended is None and self._dead is None:
                self._pump()
            return bool(stream.messages) or stream.ended is not None or self._dead is not None

    def fileno(self) -> int:
        """The socket's descriptor, to wait on with ``select``."""
        return self._sock.fileno()

    def _await_bytes(self) -> None:
        """(A read on a connection of several streams, nothing buffered.) Wait for the socket with
        the lock let go, so that other threads' calls on the other streams go on (a server may
        hold this answer until another agent's JoinWorld comes), then take in what came.

        Another thread may take in this stream's answer while we wait: the wait is cut into
        :data:`_SLICE` pieces, after each of which the read looks at its answers again.
        """
        lock, deadline = self.lock, self._deadline
        left = _SLICE if deadline is None else min(_SLICE, deadline - time.monotonic())
        if left <= 0:
            raise socket.timeout("timed out")
        quiet = False
        try:
            lock.release()     # inside the try: an interrupt right after it still takes the lock back
            interrupts.wait_ready(self._sock, left)
        except socket.timeout:
            quiet = True
        finally:
            lock.acquire()
            # Another thread's call may have moved the clock meanwhile: this call's again.
            self._deadline = deadline
            if deadline is None:
                self._set_timeout(None)
        if quiet:              # this slice passed: the read looks at its answers again
            if self._ping_every is not None:                 # is the server there?
                now = time.monotonic()
                if self._silent_from is None:
                    self._silent_from = now
                self._check_peer(self._silent_from, now)
            return
        if self._take_in() == 0:   # (without blocking: another thread may have taken these bytes in)
            self._dead = ConnectionResetError("the server closed the connection"
                                              + (f" after GOAWAY ({self._goaway})" if self._goaway else ""))
            raise self._dead

    def _take_in(self) -> int | None:
        """Add what the socket holds now to the buffer, without blocking: how many bytes (0: the
        server closed the connection; None: nothing there). A Ctrl-C loses none (see interrupts)."""
        guard = self._kernel and interrupts.guarded()
        try:
            if guard:
                interrupts.hold()
            got = self._at_once(lambda flags: self._sock.recv_into(self._rbuf, 0, flags))
            if got:
                self.state.buf += self._rview[:got]
                self._silent_from = None
            return got
        finally:
            if guard:
                interrupts.release()

    def _pump(self) -> bool:
        """The idle watcher's turn, or a look for an answer (lock held): read what is there,
        handle whole frames."""
        sock = self._sock
        if self.state.part is not None:
            return True                      # a call stopped inside a frame: it finishes that frame
        try:
            if self._take_in() == 0:
                self._dead = ConnectionResetError("the server closed the connection while it was idle"
                                                  + (f" (GOAWAY: {self._goaway})" if self._goaway else ""))
                return False
            self._take_frames(whole=True)     # whole frames only (a large one begun: the next call reads it)
            if self._goaway is not None and all(s.ended is not None for s in list(self.streams.values())):
                sock.close()     # drained by GOAWAY, our streams over: nothing can use it (the next call says why)
                return False
            if self._unsent:
                self.send(b"")
            return True
        except Exception as exc:  # noqa: BLE001 - the next call reports it
            self._dead = exc if isinstance(exc, OSError) else ConnectionError(str(exc))
            return False

    def _tick(self) -> bool:
        """The idle watcher's turn (lock held): PING when due; False once a PING went unanswered."""
        now = time.monotonic()
        if self.messages_sent != self._calls_seen:   # calls since the last tick: quiet from now
            self._calls_seen, self._quiet_since = self.messages_sent, now
        if self._ping_out is not None:
            if now - self._ping_out < PING_TIMEOUT:
                return True
            self._dead = ConnectionError(f"the server did not answer a keepalive PING within {PING_TIMEOUT:g} s: "
                                         f"the connection is dead")
            try:
                self._sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            return False
        if now - self._quiet_since >= self._ping_every:
            self.send(ping_frame(KEEPALIVE_PING))
            self._ping_out = now
        return True

    def _await_peer(self) -> None:
        """(A call about to block on the socket, with keepalive PINGs on.) Wait until the socket
        has bytes, PINGing the server after ``ping_every`` seconds in which nothing came, and
        failing :data:`PING_TIMEOUT` seconds later should the PING not be answered; the call's
        own deadline still applies (``socket.timeout``)."""
        sock = self._sock
        if isinstance(sock, ssl.SSLSocket) and sock.pending():
            return
        silent_from = time.monotonic()
        while True:
            now = time.monotonic()
            due = silent_from + self._ping_every if self._ping_out is None else self._ping_out + PING_TIMEOUT
            if self._deadline is not None:
                due = min(due, self._deadline)
            if select.select([sock], [], [], max(0.0, due - now))[0]:
                return
            now = time.monotonic()
            if self._deadline is not None and now >= self._deadline:
                raise socket.timeout("timed out")
            self._check_peer(silent_from, now)

    def _wake_reads(self) -> None:
        """Keepalive PINGs are on: a blocking read of the socket comes back every
        :data:`_READ_SLICE` seconds in which nothing came (``SO_RCVTIMEO``: no cost while
        answers come), so that a call can PING a silent server (:meth:`_heard_nothing`). Where
        the option is not there, and over TLS, calls wait by ``select`` (:meth:`_await_peer`)."""
        if isinstance(self._sock, ssl.SSLSocket):   # its blocking read retries inside OpenSSL: select
            self._timeout_by_select = True
            return
        try:
            self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, struct.pack("ll", int(_READ_SLICE), 0))
        except (OSError, struct.error, AttributeError):
            self._timeout_by_select = True

    def _heard_nothing(self, silent_from: float | None) -> float:
        """A blocking read came back empty-handed after :data:`_READ_SLICE` seconds: PING the server
        or declare it dead (:meth:`_check_peer`); since when it has been silent."""
        now = time.monotonic()
        if silent_from is None:
            silent_from = now - _READ_SLICE
        self._check_peer(silent_from, now)
        return silent_from

    def _check_peer(self, silent_from: float, now: float) -> None:
        """Nothing came from the server since ``silent_from``: PING it after ``ping_every`` seconds
        of that; ``ConnectionError`` once a PING has waited :data:`PING_TIMEOUT` seconds."""
        if self._ping_out is None:
            if now - silent_from >= self._ping_every:
                self.send(ping_frame(KEEPALIVE_PING))
                self._ping_out = now
            return
        if now - self._ping_out >= PING_TIMEOUT:
            self._dead = ConnectionError(
                f"the server did not answer a keepalive PING within {PING_TIMEOUT:g} s, and nothing came from "
                f"it for {now - silent_from:.0f} s: it is frozen or unreachable; the connection is dead")
            try:
                self._sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            raise self._dead

    def _pong(self) -> None:
        """Our PING was answered."""
        self._ping_out, self._quiet_since = None, time.monotonic()
