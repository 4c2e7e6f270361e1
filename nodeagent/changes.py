"""A count of changes that waiters can sleep on without missing one.

The load reporter sleeps while its node is idle and must wake for whatever changes the load
or the node's state: a request starting, the engine's health flipping, a drain command. One
reporter runs per scheduler, so a single asyncio.Event cleared by one waiter could hide a
change from another; a waiter here remembers the count it saw instead.
"""

from __future__ import annotations

import asyncio


class Changes:
    def __init__(self) -> None:
        self.count = 0
        self._event = asyncio.Event()

    def note(self) -> None:
        self.count += 1
        self._event.set()
        self._event = asyncio.Event()

    async def wait_after(self, seen: int) -> None:
        """Returns once the count has moved past `seen`."""
        if self.count == seen:
            await self._event.wait()
