"""Answering a client connection's control frames (PING, SETTINGS, GOAWAY) while no call reads it.

Our client reads its socket only inside a call, so a server that pings an
idle connection (keepalive in grpc-js, grpclib, grpc-go...) would wait in
vain and drop it. :class:`IdleWatcher` is a daemon thread that touches the
socket only after the connection has been idle for a moment: it never takes
part in a call (no hand-off, no event loop, so Jupyter is unaffected), and a
busy connection costs it one wake-up per ``_IDLE`` seconds.
"""
from __future__ import annotations

import select
import threading
from typing import Callable

__all__ = ["IdleWatcher"]

_IDLE = 0.05          # seconds without a new request before the watcher reads the socket
_POLL = 1.0           # longest wait on the socket before checking for close()


class IdleWatcher:
    """A daemon thread that calls ``pump()`` when ``sock`` is readable and no call is running.

    Args:
        sock: the connection's socket.
        lock: held by every call while it uses the socket; the watcher only ever try-acquires it.
        activity: a counter that a new call changes (requests sent).
        pump: reads what is available without blocking and handles it; False when the connection is over.
        tick: called at least once a second while idle (keepalive PINGs); False when the connection is
            over. It may be set later (``watcher.tick``), once the server is known.

    >>> import socket, threading
    >>> a, b = socket.socketpair()
    >>> seen = threading.Event()
    >>> watcher = IdleWatcher(a, threading.Lock(), lambda: 0, lambda: (a.recv(9), seen.set())[0] and True)
    >>> _ = b.send(b"ping")
    >>> seen.wait(5)
    True
    >>> watcher.stop(); a.close(); b.close()
    """

    def __init__(self, sock, lock: threading.Lock, activity: Callable[[], int], pump: Callable[[], bool],
                 tick: Callable[[], bool] | None = None):
        self._sock, self._lock, self._activity, self._pump, self.tick = sock, lock, activity, pump, tick
        self._stop = threading.Event()
        threading.Thread(target=self._run, name="dmrpc-keepalive", daemon=True).start()

    def stop(self) -> None:
        """Stop watching (the thread ends within ``_POLL`` seconds, without touching the socket again)."""
        self._stop.set()

    def _run(self) -> None:
        stop, lock, activity = self._stop, self._lock, self._activity
        while True:
            seen = activity()
            if stop.wait(_IDLE):
                return
            if activity() != seen or lock.locked():
                continue                          # busy: look again later
            ready = True                          # frames may already sit in a buffer
            while not stop.is_set():
                if ready or self.tick is not None:
                    if not lock.acquire(blocking=False):
                        break
                    try:
                        if stop.is_set() or activity() != seen:
                            break
                        if ready and not self._pump():
                            return
                        if self.tick is not None and not self.tick():
                            return
                    finally:
                        lock.release()
                try:
                    ready = bool(select.select([self._sock], [], [], _POLL)[0])
                except (OSError, ValueError):     # closed under us
                    return
                if activity() != seen:
                    break
