"""Starting a coroutine on the caller's stack, and making it a task only if it has to wait.

The server answers most requests without ever waiting (a quick env steps
inline). Waking a task for each one costs an extra turn of the event loop (a
``select`` call and the loop's bookkeeping), which on a small step is a
large share of the server's time. :func:`start` runs the coroutine at once,
as Python 3.12's eager tasks do (this works on 3.10 too): if it finishes, no
task is made; if it waits, a task carries it on from where it stopped.

>>> import asyncio
>>> async def quick(log): log.append("quick")
>>> async def slow(log): await asyncio.sleep(0); log.append("slow")
>>> async def demo():
...     log = []
...     first = start(quick(log))
...     second = start(slow(log))
...     ran = list(log)
...     await second
...     return first, ran, log
>>> asyncio.run(demo())
(None, ['quick'], ['quick', 'slow'])
"""
from __future__ import annotations

import asyncio
import collections.abc
from typing import Any, Coroutine

__all__ = ["start"]


def start(coro: Coroutine[Any, Any, Any]) -> asyncio.Task | None:
    """Run ``coro`` until it first waits: None if it finished (its result is dropped, an
    exception propagates), else a task of the running loop that carries it on."""
    try:
        waiting_on = coro.send(None)
    except StopIteration:
        return None
    return asyncio.get_running_loop().create_task(_Continued(coro, waiting_on))


class _Continued(collections.abc.Coroutine):
    """``coro``, suspended on ``waiting_on``, as a coroutine a task can carry on.

    The task's first step passes ``waiting_on`` up to it; from then on what the task
    sends or throws (a result, a cancellation) goes to ``coro``. A task cancelled
    before its first step throws the cancellation into ``coro`` (where it waits,
    so its ``except`` and ``finally`` run) and cancels ``waiting_on``, as a task
    already waiting on it would.
    """

    __slots__ = ("_coro", "_first")

    def __init__(self, coro: Coroutine[Any, Any, Any], waiting_on: Any):
        self._coro, self._first = coro, waiting_on

    def send(self, value: Any) -> Any:
        first, self._first = self._first, None
        return first if first is not None else self._coro.send(value)

    def throw(self, typ: Any, value: Any = None, traceback: Any = None) -> Any:
        first, self._first = self._first, None
        exc = typ if value is None else value
        if isinstance(first, asyncio.Future) and (exc is asyncio.CancelledError
                                                   or isinstance(exc, asyncio.CancelledError)):
            first.cancel()
        if value is None and traceback is None:
            return self._coro.throw(typ)
        return self._coro.throw(typ, value, traceback)

    def close(self) -> None:
        self._coro.close()

    def __await__(self):
        return self
