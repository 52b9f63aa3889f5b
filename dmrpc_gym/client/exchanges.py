"""Exchanges over several connections at once: every request sent before any answer is read.

The two halves that the vector envs (:mod:`~dmrpc_gym.client.fanout`) and the
multi-agent envs (:mod:`~dmrpc_gym.client.parallel`, :mod:`~dmrpc_gym.client.aec`)
share: :func:`submit_all` sends, :func:`receive_all` reads, each going on past a
failure so that every connection stays in step; :func:`first_ready` says whose
answers have come; :func:`named_failure` says which agent an error came from.
"""
from __future__ import annotations

import select
import time
from typing import Any, Callable, Hashable, Iterable, Mapping, TypeVar

from dmrpc_gym.protocol.errors import DmRpcError

__all__ = ["submit_all", "receive_all", "first_ready", "named_failure"]

K = TypeVar("K", bound=Hashable)
R = TypeVar("R")


def submit_all(keys: Iterable[K], submit: Callable[[K], bool]) -> tuple[list[K], dict[K, BaseException]]:
    """Send every request before any answer is awaited (the first half of every exchange).

    ``submit(key)`` sends the request of one key (a sub-env index, an agent
    name) and returns whether an answer is owed. A failing send does not stop
    the others (an interrupt, Ctrl-C, does). Returns the keys that owe an
    answer, in order, and the failures by key.

    >>> owed, failures = submit_all([2, 0, 1], lambda k: 1 / k > 0.6)
    >>> owed, failures
    ([1], {0: ZeroDivisionError('division by zero')})
    """
    owed: list[K] = []
    failures: dict[K, BaseException] = {}
    for key in keys:
        try:
            if submit(key):
                owed.append(key)
        except Exception as err:  # noqa: BLE001 - raised by the caller, after the others are sent
            failures[key] = err
    return owed, failures


def receive_all(owed: Iterable[K], receive: Callable[[K], R], failures: dict[K, BaseException],
                before_late: Callable[[K], Callable[[], None] | None] | None = None) -> dict[K, R]:
    """Read every owed answer, even after some failed (the second half of every exchange).

    Failures are added to ``failures`` (by key, in order), so that every
    connection stays in step and the caller raises the first. Once anything
    has failed, ``before_late(key)`` runs before each further read (to bound
    the wait: the peer may be holding that answer for the failed one) and
    may return a function that undoes it. An interrupt (Ctrl-C) is raised at
    once unless ``before_late`` bounds the reads that remain.

    >>> failures = {}
    >>> receive_all([1, 2, 3], lambda k: 10 // (k - 2), failures)
    {1: -10, 3: 10}
    >>> failures
    {2: ZeroDivisionError('integer division or modulo by zero')}
    """
    results: dict[K, R] = {}
    for key in owed:
        undo = before_late(key) if failures and before_late is not None else None
        try:
            results[key] = receive(key)
        except Exception as err:  # noqa: BLE001 - raised by the caller, after every answer is read
            failures[key] = err
        except BaseException as err:
            if before_late is None:
                raise
            failures[key] = err
        finally:
            if undo is not None:
                undo()
    return results


def first_ready(connections: Mapping[K, Any], n: int, timeout: float | None) -> list[K]:
    """The first ``n`` keys of ``connections`` (each with a request in flight) whose answers have
    come, in the order they came, waiting until that many have. A connection whose answers cannot
    be watched (a grpcio channel: no ``fileno``) ends the wait: the rest are taken in turn, as they
    are past ``timeout`` seconds (their reads then raise).

    >>> first_ready({}, 1, None)
    []
    """
    waiting, ready = list(connections), []
    poller, on_fd = select.poll(), {}              # socket -> the keys waiting on it (streams share one)
    for key in waiting:
        fd = connections[key].fileno()
        if fd is None:
            return (ready + waiting)[:n]
        if fd not in on_fd:
            on_fd[fd] = []
            poller.register(fd, select.POLLIN)
        on_fd[fd].append(key)
    deadline = None if timeout is None else time.monotonic() + timeout
    candidates = list(waiting)                  # what to look at: first everything, then what woke up
    while True:
        # Every key on a socket that woke up is looked at, again while any was found ready:
        # one connection's read may take in the answers of those looked at before it.
        found = True
        while found and len(ready) < n:
            found = False
            for key in candidates:
                if key in waiting and connections[key].answer_ready():
                    waiting.remove(key)
                    ready.append(key)
                    found = True
        for fd in [fd for fd, keys in on_fd.items() if not any(k in waiting for k in keys)]:
            poller.unregister(fd)
            del on_fd[fd]
        if len(ready) >= n or not waiting:
            return ready[:n]
        left = None if deadline is None else deadline - time.monotonic()
        if left is not None and left <= 0:
            return (ready + waiting)[:n]
        events = poller.poll(1000 if left is None else max(1, min(1000, int(left * 1000))))
        candidates = [k for fd, _ in events for k in on_fd[fd]] if events else list(waiting)


def named_failure(err: BaseException, agent: str, what: str, note: str = "") -> BaseException:
    """The same kind of error, saying which agent of a multi-agent exchange it came from
    (``.agent`` holds the name).

    >>> named_failure(ConnectionError("gone"), "red", "step")
    ConnectionError("agent 'red' failed during step: gone")
    """
    if isinstance(err, DmRpcError):
        request = f"{err.request or what} of agent {agent!r}"
        new: BaseException = DmRpcError(err.code, err.message + note, err.details, request=request)
    else:
        message = f"agent {agent!r} failed during {what}: {err}{note}"
        try:
            new = type(err)(message)
        except Exception:
            new = RuntimeError(message)
    new.agent = agent  # type: ignore[attr-defined]
    return new
