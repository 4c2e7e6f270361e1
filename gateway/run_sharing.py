"""Who else knows about an answer in flight: nobody (runs live in this gateway only, the
embedded default), or every gateway (runs shared through Redis, in gateway/redis_run_sharing.py).
The pipeline works against this protocol and never asks which one it has."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Protocol

from domain.types import User
from gateway.answers import Answer, AnswerPlan
from gateway.runs import Event, MessageRun

# Starts writing a run taken over from a dead gateway: (run, user, plan, the answer's parent
# seq, the answer so far). The pipeline's own drive loop.
Resume = Callable[[MessageRun, User, AnswerPlan, int | None, Answer], None]


class OwnershipLost(Exception):
    """Another gateway took this run over; this one must stop writing it."""


class FollowedRun(Protocol):
    """A run another gateway writes, read through the shared log."""

    @property
    def fingerprint(self) -> str: ...

    def follow_batches(
        self, after_event_id: int = 0, most: int = 64, interval_s: float = 0.0
    ) -> AsyncIterator[list[tuple[int, Event]]]: ...


class Claim(Protocol):
    """One attempt's hold on a message id."""

    # Set when another attempt holds the id: its run, followed instead of running the model.
    held: FollowedRun | None

    async def publish(
        self, run: MessageRun, plan: AnswerPlan, answer_parent_seq: int | None
    ) -> None:
        """Makes the run followable (and resumable) elsewhere before its first event."""

    async def release(self) -> None:
        """Gives the id back: the message was refused, or answered without a model."""


class RunSharing(Protocol):
    async def claim(
        self, user_id: str, message_id: str, fingerprint: str, conversation_id: str, resume: Resume
    ) -> Claim: ...

    async def end(self, run: MessageRun) -> None:
        """After the run's last event: kept a while for retries and resumes, then gone."""

    async def find(self, user_id: str, message_id: str, resume: Resume) -> FollowedRun | None:
        """A run another gateway writes (or wrote lately); None when none is known."""

    async def ask_stop(self, user_id: str, message_id: str) -> bool | None:
        """Asks whichever gateway writes the run to stop it: True when asked, False when it
        had ended, None when no gateway knows it."""

    def start(self, resume: Resume, address: str = "") -> list[asyncio.Task[None]]:
        """The background work sharing needs while the gateway serves; address: where this
        gateway serves gRPC, for other gateways to check on it."""

    async def retire(self, tasks: list[asyncio.Task[None]]) -> None:
        """At shutdown, after every run ended: stops the background work."""


class _LocalClaim:
    held: FollowedRun | None = None

    async def publish(
        self, run: MessageRun, plan: AnswerPlan, answer_parent_seq: int | None
    ) -> None:
        return None

    async def release(self) -> None:
        return None


LOCAL_CLAIM = _LocalClaim()


class LocalRuns:
    """Runs live in this gateway only: a retry elsewhere, or after a restart, answers from
    the store or runs the model again."""

    async def claim(
        self, user_id: str, message_id: str, fingerprint: str, conversation_id: str, resume: Resume
    ) -> Claim:
        return LOCAL_CLAIM

    async def end(self, run: MessageRun) -> None:
        return None

    async def find(self, user_id: str, message_id: str, resume: Resume) -> FollowedRun | None:
        return None

    async def ask_stop(self, user_id: str, message_id: str) -> bool | None:
        return None

    def start(self, resume: Resume, address: str = "") -> list[asyncio.Task[None]]:
        return []

    async def retire(self, tasks: list[asyncio.Task[None]]) -> None:
        return None
