"""Answers in flight. Each run owns its event log; clients follow it, so a client that drops
and comes back (or a retry with the same message id) reads the same answer, never a second one."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field

from domain.types import Finish, Usage


@dataclass(frozen=True, slots=True)
class Meta:
    message_id: str
    conversation_id: str
    model: str
    replica_id: str


@dataclass(frozen=True, slots=True)
class Delta:
    text: str


@dataclass(frozen=True, slots=True)
class Done:
    finish: Finish
    usage: Usage


@dataclass(frozen=True, slots=True)
class Failed:
    code: int
    message: str


Event = Meta | Delta | Done | Failed


@dataclass(slots=True)
class MessageRun:
    user_id: str
    conversation_id: str
    message_id: str
    # What the request was, so a retry with the same id but another body is told apart.
    fingerprint: str
    events: list[Event] = field(default_factory=list)
    changed: asyncio.Condition = field(default_factory=asyncio.Condition)
    stop_requested: asyncio.Event = field(default_factory=asyncio.Event)
    task: asyncio.Task[None] | None = None
    # Where each event is written before local followers see it (the shared log in Redis),
    # given the event's id; it raises when this gateway no longer owns the run.
    sink: Callable[[int, Event], Awaitable[None]] | None = None
    # When the message arrived and when its answer's first text was appended (monotonic s).
    started_at: float = field(default_factory=time.monotonic)
    first_text_at: float | None = None

    @property
    def ended(self) -> bool:
        return bool(self.events) and isinstance(self.events[-1], Done | Failed)

    async def append(self, event: Event) -> None:
        if self.sink is not None:
            await self.sink(len(self.events) + 1, event)
        if self.first_text_at is None and isinstance(event, Delta):
            self.first_text_at = time.monotonic()
        async with self.changed:
            self.events.append(event)
            self.changed.notify_all()

    async def follow(self, after_event_id: int = 0) -> AsyncIterator[tuple[int, Event]]:
        """Events numbered from 1, after after_event_id, until the run ends."""
        async for batch in self.follow_batches(after_event_id):
            for item in batch:
                yield item

    async def follow_batches(
        self, after_event_id: int = 0, most: int = 64
    ) -> AsyncIterator[list[tuple[int, Event]]]:
        """The same events, as many at a time as have piled up (at most `most`): a reader
        that fell behind catches up in a few sends instead of one per event."""
        sent = after_event_id
        while True:
            if self.ended and sent >= len(self.events):
                return  # asked for what comes after the last event: nothing will
            async with self.changed:
                await self.changed.wait_for(lambda seen=sent: len(self.events) > seen)
                pending = self.events[sent : sent + most]
            batch = list(enumerate(pending, start=sent + 1))
            sent += len(batch)
            for index, (_, event) in enumerate(batch):
                if isinstance(event, Done | Failed):
                    yield batch[: index + 1]
                    return
            yield batch


class RunRegistry:
    """In-process idempotency: one run per (user, message id), kept a while after it ends."""

    def __init__(self, clock: Callable[[], float], keep_after_end_s: float = 600.0) -> None:
        self._clock = clock
        self._keep_after_end_s = keep_after_end_s
        self._runs: dict[tuple[str, str], MessageRun] = {}
        self._ended_at: dict[tuple[str, str], float] = {}

    def get(self, user_id: str, message_id: str) -> MessageRun | None:
        self._evict()
        return self._runs.get((user_id, message_id))

    def add(self, run: MessageRun) -> None:
        self._runs[(run.user_id, run.message_id)] = run

    def discard(self, run: MessageRun) -> None:
        self._runs.pop((run.user_id, run.message_id), None)

    def mark_ended(self, run: MessageRun) -> None:
        self._ended_at[(run.user_id, run.message_id)] = self._clock()

    def running(self) -> list[MessageRun]:
        return [r for r in self._runs.values() if not r.ended]

    def open_for(self, user_id: str) -> int:
        return sum(1 for r in self._runs.values() if r.user_id == user_id and not r.ended)

    def _evict(self) -> None:
        cutoff = self._clock() - self._keep_after_end_s
        for key in [k for k, at in self._ended_at.items() if at < cutoff]:
            self._runs.pop(key, None)
            del self._ended_at[key]
