"""Answers in flight. Each run owns its event log; clients follow it, so a client that drops
and comes back (or a retry with the same message id) reads the same answer, never a second one."""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from enum import IntEnum

from domain.answer_options import ToolCall, ToolDefinition
from domain.types import Finish, Usage
from infra.waiters import Waiters


@dataclass(frozen=True, slots=True)
class Meta:
    message_id: str
    conversation_id: str
    model: str
    replica_id: str
    # The region serving the answer ('' on a single-region platform), and what the user is
    # told about it (home out: no history).
    region: str = ""
    region_notice: str = ""
    # The model version that serves ('' for composed answers: a refusal, "busy").
    version: str = ""
    # Why a smaller pool than the router's serves: "daily_budget", or ''.
    downgraded: str = ""
    # The user's slice of the rollout (domain/rollout.py's Slice), or ''.
    slice: str = ""
    # The pool that serves ('' for composed answers), and why it is not the one the message
    # asked for (domain/pool_reason.py), or ''.
    pool: str = ""
    pool_reason: str = ""
    # The answer is the tool loop's (gateway/tool_loop.py): tool events may come before text.
    tools: bool = False


@dataclass(frozen=True, slots=True)
class Delta:
    text: str
    # Whole tool calls the model made (completions with tools).
    tool_calls: tuple[ToolCall, ...] = ()
    # The text is the platform's refusal of a completion that asked for JSON or tools.
    refusal: bool = False


@dataclass(frozen=True, slots=True)
class Retract:
    """Withdraws every character of the answer shown so far: the output check (retract mode)
    flagged text it had already released. The refusal follows as a delta."""

    chars: int


@dataclass(frozen=True, slots=True)
class Done:
    finish: Finish
    usage: Usage


class FailureCode(IntEnum):
    """Why an answer failed, numbered as google.rpc.Code so the numbers in the shared event
    log and on the wire are the same ones."""

    UNAVAILABLE = 14


@dataclass(frozen=True, slots=True)
class Failed:
    code: int
    message: str


@dataclass(frozen=True, slots=True)
class ToolsListed:
    """The tools a server offered a turn of the tool loop (gateway/tool_loop.py), or why it
    could not be asked. Tool events come only from the loop, never from a run's log."""

    server_label: str
    tools: tuple[ToolDefinition, ...]
    error: str = ""


@dataclass(frozen=True, slots=True)
class ToolStarted:
    call_id: str
    server_label: str  # '' for the operator's own tools
    name: str
    arguments: str


@dataclass(frozen=True, slots=True)
class ToolEnded:
    call_id: str
    output: str
    error: str = ""


@dataclass(frozen=True, slots=True)
class ApprovalRequested:
    """A call that waits for a person's approval: the answer ends after it."""

    call_id: str
    server_label: str
    name: str
    arguments: str


Event = (
    Meta
    | Delta
    | Retract
    | Done
    | Failed
    | ToolsListed
    | ToolStarted
    | ToolEnded
    | ApprovalRequested
)


def shown_pieces(events: list[Event]) -> tuple[list[str], bool]:
    """The answer's text a reader of these events is left with, and whether a retract came:
    a retract drops every delta before it."""
    pieces: list[str] = []
    retracted = False
    for event in events:
        if isinstance(event, Delta):
            pieces.append(event.text)
        elif isinstance(event, Retract):
            pieces.clear()
            retracted = True
    return pieces, retracted


class RunAbandoned(Exception):
    """This gateway stopped writing the run (another took it over, or will): its followers
    must attach elsewhere."""


@dataclass(slots=True)
class MessageRun:
    user_id: str
    conversation_id: str
    message_id: str
    # What the request was, so a retry with the same id but another body is told apart.
    fingerprint: str
    events: list[Event] = field(default_factory=list)
    stop_requested: asyncio.Event = field(default_factory=asyncio.Event)
    task: asyncio.Task[None] | None = None
    # Where each event is written before local followers see it (the shared log in Redis),
    # given the event's id; it raises when this gateway no longer owns the run.
    sink: Callable[[int, Event], Awaitable[None]] | None = None
    # When the message arrived and when its answer's first text was appended (monotonic s).
    started_at: float = field(default_factory=time.monotonic)
    first_text_at: float | None = None
    abandoned: bool = False
    # True once no more events come (ended or abandoned): a follower holding its next message
    # back (follow_batches' interval) sends at once then, without waking on every event.
    closed: bool = False
    # Followers waiting for the next event, and followers holding a batch back, whom only the
    # run's close wakes.
    _event_waiters: Waiters = field(default_factory=Waiters)
    _close_waiters: Waiters = field(default_factory=Waiters)

    @property
    def ended(self) -> bool:
        return bool(self.events) and isinstance(self.events[-1], Done | Failed)

    async def append(self, event: Event) -> None:
        if self.sink is not None:
            await self.sink(len(self.events) + 1, event)
        await self.append_here(event)

    async def append_here(self, event: Event) -> None:
        """Appends for this gateway's followers only, not to the sink: the ending of a run
        whose shared log takes no more writes."""
        if self.first_text_at is None and isinstance(event, Delta):
            self.first_text_at = time.monotonic()
        self.events.append(event)
        if isinstance(event, Done | Failed):
            self._close()
        self._event_waiters.wake()

    async def abandon(self) -> None:
        """No more events will come from here; followers get RunAbandoned."""
        self.abandoned = True
        self._close()
        self._event_waiters.wake()

    def _close(self) -> None:
        self.closed = True
        self._close_waiters.wake()

    async def follow(self, after_event_id: int = 0) -> AsyncIterator[tuple[int, Event]]:
        """Events numbered from 1, after after_event_id, until the run ends."""
        async for batch in self.follow_batches(after_event_id):
            for item in batch:
                yield item

    async def follow_batches(
        self, after_event_id: int = 0, most: int = 64, interval_s: float = 0.0
    ) -> AsyncIterator[list[tuple[int, Event]]]:
        """The same events, as many at a time as have piled up (at most `most`): a reader
        that fell behind catches up in a few sends instead of one per event. With interval_s,
        a batch that follows one with text waits until interval_s after it, carrying what
        came meanwhile: every message costs CPU here and at the edge, while a reader sees no
        difference between 20 updates a second and 60. The first text goes at once (it is
        the answer's time to first token), and so does a batch with the answer's end."""
        sent = after_event_id
        loop = asyncio.get_running_loop()
        hold_until = 0.0
        while True:
            if self.ended and sent >= len(self.events):
                return  # asked for what comes after the last event: nothing will
            while len(self.events) <= sent and not self.abandoned:
                await self._event_waiters.wait()
            await self._hold(hold_until - loop.time(), sent + most)
            pending = self.events[sent : sent + most]
            if not pending:
                raise RunAbandoned(f"this gateway stopped writing {self.message_id}")
            batch = list(enumerate(pending, start=sent + 1))
            sent += len(batch)
            for index, (_, event) in enumerate(batch):
                if isinstance(event, Done | Failed):
                    yield batch[: index + 1]
                    return
            if interval_s > 0 and any(isinstance(event, Delta) for event in pending):
                hold_until = loop.time() + interval_s
            yield batch

    async def _hold(self, hold_s: float, full_at: int) -> None:
        """Waits hold_s, or less if the run ends first; not at all when `full_at` events are
        there already (a reader behind the answer catches up without waiting)."""
        if hold_s <= 0 or self.closed or len(self.events) >= full_at:
            return
        await self._close_waiters.wait(hold_s)


class RunRegistry:
    """In-process idempotency: one run per (user, message id), kept a while after it ends."""

    def __init__(self, clock: Callable[[], float], keep_after_end_s: float = 600.0) -> None:
        self._clock = clock
        self._keep_after_end_s = keep_after_end_s
        self._runs: dict[tuple[str, str], MessageRun] = {}
        # Each user's runs not yet seen ended: counting a user's open streams reads only these,
        # not every run kept for retries.
        self._open_of_user: dict[str, dict[str, MessageRun]] = {}
        self._ended_at: dict[tuple[str, str], float] = {}

    def __len__(self) -> int:
        return len(self._runs)

    def get(self, user_id: str, message_id: str) -> MessageRun | None:
        self._evict()
        return self._runs.get((user_id, message_id))

    def add(self, run: MessageRun) -> None:
        self._runs[(run.user_id, run.message_id)] = run
        self._open_of_user.setdefault(run.user_id, {})[run.message_id] = run

    def discard(self, run: MessageRun) -> None:
        self._runs.pop((run.user_id, run.message_id), None)
        self._forget_open(run.user_id, run.message_id)

    def mark_ended(self, run: MessageRun) -> None:
        self._ended_at[(run.user_id, run.message_id)] = self._clock()
        self._forget_open(run.user_id, run.message_id)

    def running(self) -> list[MessageRun]:
        return [r for r in self._runs.values() if not r.ended]

    def open_for(self, user_id: str) -> int:
        runs = self._open_of_user.get(user_id, {})
        for run in [r for r in runs.values() if r.ended]:
            self._forget_open(user_id, run.message_id)
        return len(self._open_of_user.get(user_id, {}))

    def _forget_open(self, user_id: str, message_id: str) -> None:
        runs = self._open_of_user.get(user_id)
        if runs is not None:
            runs.pop(message_id, None)
            if not runs:
                del self._open_of_user[user_id]

    def _evict(self) -> None:
        # Runs are marked ended in time order, so the expired ones are at the front.
        cutoff = self._clock() - self._keep_after_end_s
        expired = list(itertools.takewhile(lambda item: item[1] < cutoff, self._ended_at.items()))
        for key, _ in expired:
            self._runs.pop(key, None)
            del self._ended_at[key]
