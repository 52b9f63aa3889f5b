"""Reading a socket so that a Ctrl-C (almost) never loses bytes that were already read.

Python runs a signal's handler between bytecodes. A KeyboardInterrupt raised
just after ``recv_into`` returned, before its bytes were added to the
connection's buffer, drops those bytes: the frames after them lose their
place, and the next call waits for an answer that was already read. Where a
Ctrl-C does not end the process (a Jupyter kernel, whose next cell uses the
env again), a read in the main thread therefore waits with ``poll`` (which a
Ctrl-C interrupts, having read nothing), then takes the bytes with SIGINT
blocked, and unblocks it once they are stored: a Ctrl-C that came meanwhile
is raised then, with nothing lost. A send is held the same way until what it
sent is no longer counted as unsent (else the next call sent those bytes
twice). That costs two or three system calls a read or send, so a plain
script, whose Ctrl-C ends it, goes without them.

The hold is the main thread's signal mask, so it is whole for a SIGINT sent
to the main thread. A SIGINT sent to the process while the main thread holds
it goes to another thread that does not block it (a kernel has several), and
Python raises it in the main thread at the next bytecode it checks. That is
lost only if the other thread wakes and takes the signal within the few
bytecodes of the held stretch: far less likely than the unguarded gap, not
impossible. No pure-Python means closes it.

>>> import socket
>>> a, b = socket.socketpair()
>>> b.sendall(b"abc")
>>> wait_ready(a, 1.0); hold()
>>> a.recv(3)
b'abc'
>>> release(); a.close(); b.close()
"""
from __future__ import annotations

import select
import signal
import socket
import ssl
import sys
import threading

__all__ = ["guarded", "hold", "in_kernel", "release", "wait_ready"]

_SIGINT = {signal.SIGINT}


def in_kernel() -> bool:
    """Whether this process lives on after a Ctrl-C: an IPython kernel (where SIGINT can be held)."""
    return "ipykernel" in sys.modules and hasattr(signal, "pthread_sigmask")


def guarded() -> bool:
    """Whether a read in this thread holds Ctrl-C back (:func:`in_kernel`, and the main thread:
    Python runs signal handlers there only)."""
    return threading.current_thread() is threading.main_thread()


def wait_ready(sock: socket.socket, timeout: float | None, event: int = select.POLLIN) -> None:
    """Block until ``sock`` can be read (or TLS has decrypted bytes already), or written with
    ``event=select.POLLOUT``; ``socket.timeout`` past ``timeout`` seconds."""
    if event == select.POLLIN and isinstance(sock, ssl.SSLSocket) and sock.pending():
        return
    poller = select.poll()
    poller.register(sock, event)
    if not poller.poll(None if timeout is None else timeout * 1000):
        raise socket.timeout("timed out")


def hold() -> None:
    """Keep SIGINT pending from now on (call inside the ``try`` whose ``finally`` releases it)."""
    signal.pthread_sigmask(signal.SIG_BLOCK, _SIGINT)


def release() -> None:
    """Deliver a SIGINT that came while held (its KeyboardInterrupt is raised after this call)."""
    signal.pthread_sigmask(signal.SIG_UNBLOCK, _SIGINT)
