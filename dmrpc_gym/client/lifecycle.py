"""How the remote envs start, end and travel: waiting for a server (and sending again what it
missed while starting), closing when collected, pickling as their arguments."""
from __future__ import annotations

import random
import time
import warnings
from typing import Any, Callable, Sequence, TypeVar

from dmrpc_gym.client.addresses import listing
from dmrpc_gym.protocol.errors import DmRpcError
from dmrpc_gym.transport import GrpcStatus, StreamEnded, Transport, Unreachable

__all__ = ["RemoteResource", "Patience", "ConnectRetries", "reset_reconnecting", "warn_reconnected"]

T = TypeVar("T")


def reset_reconnecting(lost: Callable[[], bool], restore: Callable[[str | None], None],
                       reset: Callable[[], T]) -> T:
    """``reset()`` for an env made with ``reconnect=True``: ``restore`` first if the connection
    is known ``lost``, and once more if the reset itself finds it lost (between episodes).

    >>> calls = []
    >>> def reset():
    ...     calls.append("reset")
    ...     if len(calls) == 1:
    ...         raise ConnectionError("gone")
    ...     return "obs"
    >>> reset_reconnecting(lambda: False, lambda why: calls.append(f"restore: {why}"), reset)
    'obs'
    >>> calls
    ['reset', 'restore: gone', 'reset']
    """
    if lost():
        restore(None)
    try:
        return reset()
    except ConnectionError as err:
        restore(str(err))
        return reset()


def warn_reconnected(address: str, created: bool, world_name: str, why: str, lost: str | None = None) -> None:
    """The warning every reconnection gives: where (and, when it moved, from which address ``lost``),
    which world, and what was lost."""
    moved = f" (moved from {lost}, on its address list)" if lost is not None and lost != address else ""
    warnings.warn(f"reconnected to the dm_env_rpc server at {address}{moved} and "
                  f"{'created' if created else 'joined'} world {world_name!r} again ({why})",
                  RuntimeWarning, stacklevel=4)


#: Seconds an attempt to connect may take however little of ``connect_timeout`` is left.
LEAST_ATTEMPT = 0.25


class Patience:
    """The retry budget of connecting: a deadline, the addresses to try in turn, and a growing
    pause between rounds of attempts.

    A server that is starting refuses connections, or (DeepMind's loaders know
    it) reports ready and answers its first request UNAVAILABLE. Connecting
    retries such failures until ``seconds`` have passed since the first attempt;
    ``None`` means one attempt at each address only. A failed attempt moves on to
    the next of ``addresses`` at once; after the last one the round starts again
    after a pause (50 ms doubling to 1 s, with jitter). :attr:`address` is the one
    to try now.

    >>> patience = Patience(0.0, ("h1:1",))
    >>> patience.attempts, patience.pause("refused")
    (1, False)
    >>> patience.attempts, patience.last
    (1, 'refused')
    >>> listed = Patience(None, ("h1:1", "h2:1"))
    >>> listed.pause("refused"), listed.address, listed.pause("refused again"), listed.address
    (True, 'h2:1', False, 'h1:1')
    """

    def __init__(self, seconds: float | None, addresses: Sequence[str]):
        self.seconds = seconds
        self.deadline = None if seconds is None else time.monotonic() + seconds
        self.addresses = tuple(addresses)
        self._at = 0
        self.attempts = 1
        self.last: str | None = None
        self.causes: dict[str, str] = {}     # the last failure at each address tried
        self._delay = 0.05

    @property
    def address(self) -> str:
        """The address to try now."""
        return self.addresses[self._at]

    def remaining(self) -> float | None:
        """Seconds left before the deadline (``None``: no deadline)."""
        return None if self.deadline is None else max(self.deadline - time.monotonic(), 0.0)

    def for_attempt(self) -> float | None:
        """The time an attempt may take: what is left, but at least :data:`LEAST_ATTEMPT`, so that
        an attempt made as the deadline nears is a real try (a socket timeout of 0 would make the
        connect non-blocking, and its "operation now in progress" the cause reported)."""
        left = self.remaining()
        return None if left is None else max(left, LEAST_ATTEMPT)

    def pause(self, cause: Any) -> bool:
        """Note ``cause`` (the failed attempt's error at :attr:`address`); move on to the next address
        (sleeping first when a round is over) and return True, or return False when no time is left
        for another attempt."""
        self.last = self.causes[self.address] = str(cause)
        self._at = (self._at + 1) % len(self.addresses)
        left = self.remaining()
        if self._at:                       # the round goes on: the next address, at once
            if left is not None and left <= 0.0:
                return False
        else:
            if left is None or left <= 0.0:
                return False
            time.sleep(min(self._delay * random.uniform(0.8, 1.2), left))
            self._delay = min(self._delay * 2, 1.0)
            if self.remaining() <= 0.0:
                return False
        self.attempts += 1
        return True

    def gave_up(self) -> ConnectionError:
        """The error once retrying is over: the addresses, the attempts, and the last cause at each."""
        plural = "s" if self.attempts > 1 else ""
        within = ("one attempt at each (connect_timeout=None)" if self.seconds is None
                  else f"{self.seconds} s (connect_timeout)")
        if len(self.addresses) == 1:
            last = f"the last error: {self.last}"
        else:
            last = "the last error at each: " + "; ".join(f"{a}: {c}" for a, c in self.causes.items())
        refused = "Connection refused" in last
        hint = " (nothing listens there: is a server running, `dmrpc-gym serve ...` say?)" if refused else ""
        return ConnectionError(f"gave up on the dm_env_rpc {listing(self.addresses)} after {self.attempts} "
                               f"attempt{plural} in {within}; {last}{hint}")


class ConnectRetries:
    """What a :class:`~dmrpc_gym.client.connection.Connection` does while its server is starting
    or its address list is tried: connecting again within ``connect_timeout`` (to the next address),
    and sending again what it sent before the server's first answer (a mixin: it uses the
    connection's transport, pending answers and :class:`Patience`)."""

    address: str
    _open: Callable[[str, float | None], Transport]
    _patience: Patience
    _transport: Transport
    _first: list[tuple] | None
    _pending: Any
    _broken: str | None
    _write: Callable[..., None]

    def _connect(self) -> Transport:
        """A transport to the first address that answers, retrying a refused or reset connection
        within ``connect_timeout`` (:class:`Patience`).

        A first failure at an address that a server still starting does not explain (a name that
        does not resolve) is told at once, as a warning, while the retries go on."""
        patience = self._patience
        while True:
            try:
                transport = self._open(patience.address, patience.for_attempt())
                self.address = patience.address
                return transport
            except Unreachable as err:
                if not err.starting and patience.address not in patience.causes and patience.remaining():
                    warnings.warn(f"{err}; retrying for up to {patience.seconds:g} s (connect_timeout)",
                                  RuntimeWarning, stacklevel=3)   # where the connection was made
                if not patience.pause(err):
                    if patience.attempts == 1:
                        raise
                    raise patience.gave_up() from None

    def _reopen(self, cause: str) -> None:
        """A new stream in place of the current one, to the next address of :class:`Patience` (the
        same when there is one), after ``cause`` ended an attempt: ``ConnectionError`` when time is up."""
        patience = self._patience
        while True:
            if not patience.pause(cause):
                self._broken = cause
                raise patience.gave_up()
            self._transport.close()
            try:
                self._transport = self._open(patience.address, patience.for_attempt())
                self.address = patience.address
                return
            except Unreachable as again:
                cause = str(again)
            except BaseException as fatal:   # e.g. TLS refused now: no point in retrying
                self._broken = str(fatal)
                raise

    def _ask_again(self, first: list[tuple], field: str, error: Any) -> None:
        """The first request was answered UNAVAILABLE (an error answer): send it again on a new stream
        (to the next address on the list), within ``connect_timeout``. Raises that answer when no
        time was given, ``ConnectionError`` with the cause when the time is up."""
        if self._patience.deadline is None:
            raise DmRpcError.from_status(error, request=field)
        self._reopen(f"UNAVAILABLE: {error.message}")
        self._first = []
        self._write(field, b"", None, first[0])

    def _retry_first(self, err: Exception, parts: tuple | None = None) -> bool:
        """The server went away before its first answer (UNAVAILABLE, or the connection reset):
        connect again (to the next address on the list) and resend what was sent (and ``parts``, the
        request being sent), within ``connect_timeout``. False when this is not such a case;
        ``ConnectionError`` when time is up."""
        first = self._first
        if first is None or len(first) != len(self._pending) or self._patience.deadline is None:
            return False
        if isinstance(err, StreamEnded):
            if err.status != GrpcStatus.UNAVAILABLE:
                return False
            cause = f"UNAVAILABLE: {err.message}"
        elif isinstance(err, (ConnectionResetError, BrokenPipeError, ConnectionAbortedError)):
            cause = str(err)
        else:
            return False
        if parts is not None:
            first.append(parts)
        while True:
            try:
                self._reopen(cause)
            except BaseException:
                if parts is not None:
                    first.pop()
                raise
            try:
                for sent in first:
                    self._transport.write(*sent)
                return True
            except StreamEnded as ended:
                cause = f"UNAVAILABLE: {ended.message}" if ended.status == GrpcStatus.UNAVAILABLE else ended.message
            except OSError as again:
                cause = str(again)


class RemoteResource:
    """Mixin for envs that hold connections: ``DmRpcEnv``, ``DmRpcParallelEnv``, vector envs.

    Subclasses keep their constructor arguments in ``self._kwargs`` and define
    ``close()``. Pickling sends the arguments, and unpickling calls the
    constructor again: a fresh connection (and a world of its own), which is
    what SubprocVecEnv, SuperSuit and Ray need to ship an env elsewhere.
    A garbage-collected env closes itself.

    Why not gymnasium's ``EzPickle``, which also pickles constructor arguments:
    its ``__setstate__`` builds a second object and copies that one's
    ``__dict__`` into the unpickled one; the second object is then collected,
    and closing itself when collected (which these envs must do, or worlds
    leak on the server) would close the connection both now share. We would
    also have to override ``__getstate__`` to refuse ``channel=`` (a channel
    cannot travel). Overriding both leaves nothing of ``EzPickle`` to use.

    >>> class Thing(RemoteResource):
    ...     def __init__(self, address):
    ...         self._kwargs = {"address": address}
    ...     def close(self):
    ...         pass
    >>> state = Thing("h:1").__getstate__()
    >>> state
    {'kwargs': {'address': 'h:1'}}
    >>> copy = Thing.__new__(Thing)
    >>> copy.__setstate__(state)      # what unpickling does: the constructor again
    >>> copy._kwargs
    {'address': 'h:1'}
    """

    _kwargs: dict[str, Any]

    def close(self) -> None:  # pragma: no cover - every subclass defines it
        raise NotImplementedError

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass

    def __getstate__(self) -> dict:
        if self._kwargs.get("channel") is not None:
            raise TypeError(f"a {type(self).__name__} made with channel= cannot be pickled "
                            "(a channel does not travel); pass address= instead")
        state = {"kwargs": self._kwargs}
        if getattr(self, "spec", None) is not None:     # what gymnasium.make recorded travels too
            state["spec"] = self.spec
        return state

    def __setstate__(self, state: dict) -> None:
        self.__init__(**state["kwargs"])
        if "spec" in state:
            self.spec = state["spec"]
