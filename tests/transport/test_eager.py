"""transport.server.eager: a coroutine runs on the caller's stack and becomes a task only when it waits."""
import asyncio

import pytest

from dmrpc_gym.transport.server import eager


def test_a_coroutine_that_never_waits_runs_at_once_and_makes_no_task():
    async def main():
        log = []

        async def quick():
            log.append("ran")

        before = len(asyncio.all_tasks())
        assert eager.start(quick()) is None
        assert log == ["ran"] and len(asyncio.all_tasks()) == before
    asyncio.run(main())


def test_a_waiting_coroutine_carries_on_in_a_task_with_results_passed_down():
    async def main():
        loop = asyncio.get_running_loop()
        first, second = loop.create_future(), loop.create_future()
        log = []

        async def two_waits():
            log.append(("first", await first))
            log.append(("second", await second))
            return "done"

        task = eager.start(two_waits())
        assert isinstance(task, asyncio.Task) and log == []
        first.set_result(1)
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        assert log == [("first", 1)]
        second.set_result(2)
        assert await task == "done"
        assert log == [("first", 1), ("second", 2)]
    asyncio.run(main())


def test_errors_propagate_from_the_eager_part_and_from_the_task():
    async def main():
        async def fails_now():
            raise ValueError("now")

        with pytest.raises(ValueError, match="now"):
            eager.start(fails_now())

        async def fails_later():
            await asyncio.sleep(0)
            raise KeyError("later")

        with pytest.raises(KeyError, match="later"):
            await eager.start(fails_later())
    asyncio.run(main())


def test_cancelling_the_task_reaches_the_coroutine_where_it_waits():
    async def main():
        seen = []

        async def waits_forever():
            try:
                await asyncio.get_running_loop().create_future()
            except asyncio.CancelledError:
                seen.append("cancelled")
                raise
            finally:
                seen.append("finally")

        task = eager.start(waits_forever())
        await asyncio.sleep(0)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert seen == ["cancelled", "finally"]
    asyncio.run(main())


def test_a_coroutine_that_catches_a_cancellation_may_go_on_waiting():
    async def main():
        loop = asyncio.get_running_loop()
        later = loop.create_future()

        async def stubborn():
            try:
                await loop.create_future()
            except asyncio.CancelledError:
                return await later

        task = eager.start(stubborn())
        await asyncio.sleep(0)
        task.cancel()
        await asyncio.sleep(0)
        later.set_result("kept going")
        assert await task == "kept going"
    asyncio.run(main())


def test_a_task_cancelled_before_its_first_step_cancels_what_the_coroutine_waits_on():
    """Cancelled at once (a stream reset in the same read as its request), the coroutine still sees
    the cancellation where it waits, and the future it waits on is cancelled, as with a plain task
    (before: the coroutine was dropped unawaited and its future left pending, so queued work ran)."""
    async def main():
        waited_on = asyncio.get_running_loop().create_future()
        seen = []

        async def waits():
            try:
                await waited_on
            except asyncio.CancelledError:
                seen.append("cancelled")
                raise

        task = eager.start(waits())
        task.cancel()                    # before the task's first step
        with pytest.raises(asyncio.CancelledError):
            await task
        assert seen == ["cancelled"] and waited_on.cancelled()
    asyncio.run(main())
