"""fleet.events.EventQueue: the order of one heap of every event, handed out a tick at a time."""

from __future__ import annotations

import heapq
import math
import random
from collections.abc import Callable

import pytest

from fleet.events import EventQueue


def drain(
    queue: EventQueue, ticks: int, on_event: Callable[[EventQueue, float, int], None] | None = None
) -> list[tuple[float, int]]:
    seen = []
    for tick in range(1, ticks + 1):
        queue.start_tick(tick)
        event = queue.pop_due()
        while event is not None:
            at, _, kind, _ = event
            assert at < tick * queue.tick_s, "only events before the tick's end are due"
            seen.append((at, kind))
            if on_event is not None:
                on_event(queue, at, kind)
            event = queue.pop_due()
    return seen


def follow_up(at: float, kind: int) -> tuple[float, int] | None:
    """As the simulator does, some events push others: at the same instant (after every event
    already there at that time), later in the tick, or ticks later."""
    if kind == 0:
        return at, 9
    if kind == 1:
        return at + (0.01, 0.3, 2.0)[int(at * 100) % 3], 8
    return None


def test_events_come_out_in_the_order_of_one_heap_with_pushes_during_a_tick() -> None:
    rng = random.Random(5)
    tick_s, ticks = 0.25, 200
    initial = [
        (round(rng.uniform(0, 40), rng.choice((1, 2, 6))), rng.randrange(5)) for _ in range(2_000)
    ]  # fmt: skip  (rounded: ties and tick boundaries)

    queue = EventQueue(tick_s)
    for at, kind in initial:
        queue.push(at, kind, None)

    def push_follow_up(queue: EventQueue, at: float, kind: int) -> None:
        if (next_event := follow_up(at, kind)) is not None:
            queue.push(*next_event, None)

    got = drain(queue, ticks, push_follow_up)

    reference = [(at, serial, kind) for serial, (at, kind) in enumerate(initial)]
    heapq.heapify(reference)
    serial, expected = len(initial), []
    while reference and reference[0][0] < ticks * tick_s:
        at, _, kind = heapq.heappop(reference)
        expected.append((at, kind))
        if (next_event := follow_up(at, kind)) is not None:
            heapq.heappush(reference, (next_event[0], serial, next_event[1]))
            serial += 1
    assert got == expected
    assert len(got) > 2_000


def test_an_event_on_a_tick_boundary_belongs_to_the_next_tick() -> None:
    queue = EventQueue(0.25)
    assert queue.tick_of(0.0) == 1
    assert queue.tick_of(0.25) == 2  # the loop takes events *before* k x tick_s
    assert queue.tick_of(math.nextafter(0.25, 0)) == 1
    for k in range(1, 5_000):
        boundary = k * 0.25
        assert queue.tick_of(boundary) == k + 1
        assert queue.tick_of(math.nextafter(boundary, 0)) == k


def test_events_left_in_skipped_ticks_still_come_out() -> None:
    queue = EventQueue(1.0)
    queue.push(0.5, 1, "a")
    queue.push(2.5, 2, "b")
    queue.start_tick(5)  # ticks 1-4 never started on their own
    assert [queue.pop_due(), queue.pop_due(), queue.pop_due()] == [
        (0.5, 0, 1, "a"),
        (2.5, 1, 2, "b"),
        None,
    ]
    assert len(queue) == 0


@pytest.mark.parametrize("tick_s", [0.0, -1.0, math.nan])
def test_a_tick_must_be_positive(tick_s: float) -> None:
    with pytest.raises(ValueError, match="positive"):
        EventQueue(tick_s)
