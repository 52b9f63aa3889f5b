"""Busy polling: on one host, wait for the peer's next bytes by polling a little before going to sleep.

A small step is a request and an answer, each end waiting while the other works. A process that blocks
(``recv``, ``epoll_wait``) gives its core up; the peer's bytes must then wake it, and on a virtual machine
whose idle cores halt that wake-up crosses the hypervisor: measured on a 2-vCPU VM, a 200-byte ping-pong
between two processes took 57 us blocking on both ends, 21 us with one end polling and 7 us with both
(``benchmarks/host.md``). So each end polls for up to :data:`WINDOW` seconds before it blocks: the client's
steady-state reads (:mod:`~dmrpc_gym.transport.client.steady`; the general read, the reference, blocks at
once) and the server's event loop (:class:`BusySelector`). A peer that answers within the window is read
without a wake-up; one slower than it costs the window's CPU once, after which that end blocks at once until a
wait shows the peer answering within the window again (:class:`Poller`), so that processes that outnumber
the cores (a server per env on a small machine) do not keep polling against each other.

``DMRPC_BUSY_POLL_US`` in the environment sets the window in microseconds (default 200; ``0`` turns busy
polling off), read where a connection or a server's loop is made.

>>> window("0"), window("50")
(0.0, 5e-05)
"""
from __future__ import annotations

import os
import selectors
import socket
import time
from typing import Any, Callable

__all__ = ["BUSY_POLL_ENV", "WINDOW", "window", "reader", "selector", "Poller", "BusySelector"]

#: The environment variable that sets the window, in microseconds (0: off).
BUSY_POLL_ENV = "DMRPC_BUSY_POLL_US"
#: The window by default: seconds polled before a wait blocks. It covers a vector step of 8 small envs on
#: either end; a peer slower than it costs one window, then its reads block (:class:`Poller`).
WINDOW = 200e-6
_DONTWAIT = getattr(socket, "MSG_DONTWAIT", 0)     # (none on Windows: no busy polling there)
_clock = time.perf_counter
_yield = getattr(os, "sched_yield", lambda: None)   # (polling cedes the core to any process waiting for it)


def window(setting: str | None = None) -> float:
    """The window in seconds: ``setting`` (microseconds; default: ``DMRPC_BUSY_POLL_US``, else :data:`WINDOW`);
    0.0 where polling is off or the platform cannot read a socket without blocking."""
    if setting is None:
        setting = os.environ.get(BUSY_POLL_ENV)
    if setting is None:
        return WINDOW if _DONTWAIT else 0.0
    try:
        micros = float(setting)
    except ValueError:
        raise ValueError(f"{BUSY_POLL_ENV} must be a number of microseconds (0: off), got {setting!r}") from None
    if not micros >= 0:
        raise ValueError(f"{BUSY_POLL_ENV} must be 0 or more microseconds, got {setting!r}")
    return micros / 1e6 if _DONTWAIT else 0.0


class Poller:
    """Busy polling with a memory, for one connection's reads: it polls up to ``seconds`` before a read blocks
    while the peer has been answering within that (a poll in vain turns it off; a blocking read answered
    within ``seconds`` turns it on again), so a peer slower than the window costs one window, not one a read.

    >>> a, b = socket.socketpair()
    >>> poller = Poller(a, 200e-6)
    >>> _ = b.send(b"hi"); buf = bytearray(8)
    >>> poller.recv_into(buf), poller.polling
    (2, True)
    >>> a.close(); b.close()
    """

    __slots__ = ("sock", "seconds", "polling")

    def __init__(self, sock: socket.socket, seconds: float):
        self.sock = sock
        self.seconds = seconds
        self.polling = bool(seconds)

    def recv_into(self, buf: Any) -> int:
        """``sock.recv_into(buf)`` on the blocking socket, polling first while :attr:`polling`."""
        sock, seconds = self.sock, self.seconds
        if self.polling:
            end = _clock() + seconds
            while True:
                try:
                    return sock.recv_into(buf, 0, _DONTWAIT)
                except BlockingIOError:
                    if _clock() >= end:
                        break
                    _yield()                     # a process waiting for this core goes first
            self.polling = False                 # in vain: the peer is slower than the window
            return sock.recv_into(buf)
        if not seconds:
            return sock.recv_into(buf)
        start = _clock()
        got = sock.recv_into(buf)
        self.polling = _clock() - start < seconds    # answered within the window: poll again
        return got


def reader(sock: socket.socket) -> Callable[[Any], int]:
    """How a blocking ``sock`` is read where a peer on this host may answer fast: a :class:`Poller`'s
    ``recv_into`` where busy polling is on (:func:`window`), else the socket's own."""
    seconds = window()
    return Poller(sock, seconds).recv_into if seconds else sock.recv_into


def selector() -> selectors.BaseSelector:
    """An event loop's selector: a :class:`BusySelector` where busy polling is on (:func:`window`), else the
    platform's default."""
    seconds = window()
    return BusySelector(seconds) if seconds else selectors.DefaultSelector()


class BusySelector(selectors.DefaultSelector):    # type: ignore[misc, valid-type]
    """The platform's default selector, polling for up to ``seconds`` (default: :func:`window`) before a
    select that would wait, with :class:`Poller`'s memory: an event loop made with it
    (``asyncio.SelectorEventLoop(BusySelector())``) answers a peer that writes within the window without
    sleeping, and sleeps at once while its peers are slower than that.

    >>> selector = BusySelector(20e-6)
    >>> selector.select(0.001), selector.seconds, selector.polling
    ([], 2e-05, False)
    >>> selector.close()
    """

    def __init__(self, seconds: float | None = None):
        super().__init__()
        self.seconds = window() if seconds is None else seconds
        self.polling = bool(self.seconds)

    def select(self, timeout: float | None = None) -> list:
        seconds = self.seconds
        if not seconds or timeout is not None and timeout <= 0:
            return super().select(timeout)
        if self.polling:
            if timeout is not None:
                seconds = min(seconds, timeout)
            end, poll = _clock() + seconds, super().select
            while True:
                ready = poll(0)
                if ready:
                    return ready
                if _clock() >= end:
                    break
                _yield()
            self.polling = False                 # in vain: the peers are slower than the window
            return super().select(None if timeout is None else max(0.0, timeout - seconds))
        start = _clock()
        ready = super().select(timeout)
        self.polling = bool(ready) and _clock() - start < seconds
        return ready
