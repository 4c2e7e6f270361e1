"""The fleet simulator's future: events in time order, handed out one tick at a time.

A region keeps about half a million events waiting (every conversation's next message, every
message's patience), and one binary heap of them all costs some twenty scattered comparisons a
pop. The simulation already walks time in ticks (the load reports' interval), so events wait
in one bucket per tick and only the tick under way is a heap: a few thousand events, kept in
the processor's cache. The order is the heap's own, (time, then the order of pushing), so a
run is the same event for event as with one heap.
"""

from __future__ import annotations

import heapq
import itertools

Event = tuple[float, int, int, object]  # (at, serial, kind, subject)


class EventQueue:
    def __init__(self, tick_s: float) -> None:
        if not tick_s > 0:
            raise ValueError(f"a tick must be a positive number of seconds, not {tick_s!r}")
        self.tick_s = tick_s
        self._serial = itertools.count()
        self._later: dict[int, list[Event]] = {}  # tick -> its events, unordered
        self._now: list[Event] = []  # heap: the tick under way
        self._tick = 0  # the tick under way: events before tick x tick_s

    def __len__(self) -> int:
        return len(self._now) + sum(len(bucket) for bucket in self._later.values())

    def push(self, at: float, kind: int, subject: object) -> None:
        event = (at, next(self._serial), kind, subject)
        tick = self.tick_of(at)
        if tick <= self._tick:
            heapq.heappush(self._now, event)
        else:
            bucket = self._later.get(tick)
            if bucket is None:
                self._later[tick] = [event]
            else:
                bucket.append(event)

    def tick_of(self, at: float) -> int:
        """The first tick whose end (tick x tick_s, computed as the loop computes it) comes
        after `at`: the tick that handles an event at `at`."""
        tick = int(at / self.tick_s) + 1
        while at >= tick * self.tick_s:  # rounding put it a tick early
            tick += 1
        while tick > 1 and at < (tick - 1) * self.tick_s:  # or a tick late
            tick -= 1
        return tick

    def start_tick(self, tick: int) -> None:
        """Events before tick x tick_s become due (with any left from earlier ticks)."""
        for passed in range(self._tick + 1, tick + 1):
            bucket = self._later.pop(passed, None)
            if bucket is not None:
                if self._now:
                    self._now.extend(bucket)
                else:
                    self._now = bucket
        heapq.heapify(self._now)
        self._tick = tick

    def pop_due(self) -> Event | None:
        """The earliest event due in the tick under way; None when there is none left."""
        return heapq.heappop(self._now) if self._now else None
