"""infra/waiters.py: every waiter woken at once, a bounded wait ending quietly, a cancelled
wait leaving nothing behind."""

from __future__ import annotations

import asyncio

from infra.waiters import Waiters


async def test_a_wake_releases_every_waiter_and_only_those_waiting() -> None:
    waiters = Waiters()
    woken: list[int] = []

    async def waiter(n: int) -> None:
        await waiters.wait()
        woken.append(n)

    tasks = [asyncio.create_task(waiter(n)) for n in range(3)]
    await asyncio.sleep(0)  # let them start waiting
    waiters.wake()
    await asyncio.wait_for(asyncio.gather(*tasks), 5)
    assert sorted(woken) == [0, 1, 2]
    # A wake with nobody waiting is not kept for a later wait.
    waiters.wake()
    late = asyncio.create_task(waiters.wait())
    done, _ = await asyncio.wait([late], timeout=0.05)
    assert not done
    waiters.wake()
    await asyncio.wait_for(late, 5)


async def test_a_bounded_wait_ends_at_its_bound_without_an_error() -> None:
    waiters = Waiters()
    loop = asyncio.get_running_loop()
    start = loop.time()
    await asyncio.wait_for(waiters.wait(0.05), 5)
    assert loop.time() - start >= 0.05
    assert waiters._futures == []


async def test_a_cancelled_wait_leaves_no_future_behind() -> None:
    waiters = Waiters()
    task = asyncio.create_task(waiters.wait())
    await asyncio.sleep(0)
    assert len(waiters._futures) == 1
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    assert task.cancelled() and waiters._futures == []
    waiters.wake()  # nothing left to wake, nothing raised
