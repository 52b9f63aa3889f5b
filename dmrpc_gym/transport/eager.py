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
from typing import Any, Coroutine

__all__ = ["start"]


def start(coro: Coroutine[Any, Any, Any]) -> asyncio.Task | None:
    """Run ``coro`` until it first waits: None if it finished (its result is dropped, an
    exception propagates), else a task of the running loop that carries it on."""
    try:
        waiting_on = coro.send(None)
    except StopIteration:
        return None
    return asyncio.get_running_loop().create_task(_carry_on(coro, waiting_on))


async def _carry_on(coro: Coroutine[Any, Any, Any], waiting_on: Any) -> Any:
    return await _Continued(coro, waiting_on)


class _Continued:
    """An awaitable that resumes ``coro``, suspended on ``waiting_on``, under the awaiting task.

    What ``coro`` waits on passes up to the task unchanged and what the task
    sends or throws (a result, a cancellation) passes down, as ``yield from`` does.
    """

    __slots__ = ("_coro", "_waiting_on")

    def __init__(self, coro: Coroutine[Any, Any, Any], waiting_on: Any):
        self._coro, self._waiting_on = coro, waiting_on

    def __await__(self):
        coro, waiting_on = self._coro, self._waiting_on
        while True:
            try:
                sent = yield waiting_on
            except GeneratorExit:
                coro.close()
                raise
            except BaseException as exc:  # noqa: BLE001 - handed on, as ``yield from`` does
                try:
                    waiting_on = coro.throw(exc)
                except StopIteration as stop:
                    return stop.value
            else:
                try:
                    waiting_on = coro.send(sent)
                except StopIteration as stop:
                    return stop.value
