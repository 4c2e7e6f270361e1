"""Tasks waiting for a stream's next item, woken all at once.

A stream's reader waits once per message (a token on a node, an event on a gateway), so a
wait is a bare future and, when bounded, one timer handle: no lock, condition or task, which
asyncio.Condition and asyncio.timeout add to every wait."""

from __future__ import annotations

import asyncio
import contextlib


class Waiters:
    __slots__ = ("_futures",)

    def __init__(self) -> None:
        self._futures: list[asyncio.Future[None]] = []

    def wake(self) -> None:
        woken, self._futures = self._futures, []
        for future in woken:
            if not future.done():
                future.set_result(None)

    async def wait(self, timeout_s: float | None = None) -> None:
        """Until the next wake, or timeout_s passes (no error then: the caller looks again)."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[None] = loop.create_future()
        self._futures.append(future)
        timer = None if timeout_s is None else loop.call_later(timeout_s, _resolve, future)
        try:
            await future
        finally:
            if timer is not None:
                timer.cancel()
            with contextlib.suppress(ValueError):
                self._futures.remove(future)  # still listed when the timer or a cancel ended it


def _resolve(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)
