"""Prompt capture: the exact prompt of every answered turn, kept in the store that keeps the
conversation, so that a turn can be read as the engine saw it and sent again to measure a
prompt or model change on real traffic (docs/decisions.md, "Every answered turn's prompt is
captured"). Kept for the operator's retention period, per tier, and read only through the
admin API."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import structlog

from domain.answer_options import ToolDefinition
from domain.errors import NotFound
from domain.types import Finish, Tier, User
from gateway.answers import Answer, AnswerPlan, answer_temperature
from store.base import PromptStore
from store.records import CapturedPrompt

# How often expired captures are deleted, at most: a capture outlives its retention by up to
# this (or a tenth of the retention, when that is shorter).
FORGET_EVERY_S = 3600.0


@dataclass(frozen=True, slots=True)
class CapturePolicy:
    """retention_s: how long a capture is kept (0: nothing is captured); tiers: whose turns."""

    retention_s: float
    tiers: frozenset[Tier]

    def __post_init__(self) -> None:
        if self.retention_s < 0:
            raise ValueError(f"prompt capture retention must be 0 or more, not {self.retention_s}")

    def captures(self, tier: Tier) -> bool:
        return self.retention_s > 0 and tier in self.tiers


class PromptCapture(Protocol):
    async def keep(
        self, user: User, conversation_id: str, message_id: str, plan: AnswerPlan, answer: Answer
    ) -> None: ...

    async def keep_tool_turn(self, user: User, prompt: CapturedPrompt) -> None: ...


class NoCapture:
    """A pipeline built without capture (tests and tools that make one by hand)."""

    async def keep(
        self, user: User, conversation_id: str, message_id: str, plan: AnswerPlan, answer: Answer
    ) -> None:
        return None

    async def keep_tool_turn(self, user: User, prompt: CapturedPrompt) -> None:
        return None


def captured(
    plan: AnswerPlan,
    conversation_id: str,
    message_id: str,
    model: str,
    node_id: str,
    tools: tuple[ToolDefinition, ...] = (),
) -> CapturedPrompt:
    """The capture of a turn planned as `plan`, written by `model` on `node_id`."""
    return CapturedPrompt(message_id, conversation_id, plan.version, model, node_id,
                          answer_temperature(plan), plan.max_answer_tokens, plan.prompt.turns,
                          tools=tools)  # fmt: skip


class CaptureWriter(Protocol):
    """Where a capture is written: this region's store, or the home region's through
    HomeService for a turn that ran away from home (gateway/home_client.py)."""

    async def capture_prompt(self, user_id: str, prompt: CapturedPrompt) -> None: ...


class StoredPrompts:
    def __init__(self, store: CaptureWriter, policy: CapturePolicy) -> None:
        self._store = store
        self.policy = policy
        self._log = structlog.get_logger(component="prompt_capture")

    async def keep(
        self, user: User, conversation_id: str, message_id: str, plan: AnswerPlan, answer: Answer
    ) -> None:
        """Keeps the prompt of an answer an engine wrote (any finish but an error, which may
        have reached no engine). A capture that fails is logged; the answer is not touched."""
        if answer.finish is Finish.ERROR:
            return
        served = answer.served_by
        await self.keep_tool_turn(user, captured(plan, conversation_id, message_id, served.model,
                                                 served.node_id))  # fmt: skip

    async def keep_tool_turn(self, user: User, prompt: CapturedPrompt) -> None:
        """Keeps a turn's prompt as given (the tool loop's: its first step's prompt and the
        tools offered), where the user's tier is captured."""
        if not self.policy.captures(user.tier):
            return
        message_id = prompt.message_id
        try:
            await self._store.capture_prompt(user.user_id, prompt)
        except NotFound:
            pass  # the conversation was deleted while the answer ran: nothing to keep it with
        except Exception:
            self._log.exception("prompt not captured", message_id=message_id)


class ExpiredPrompts:
    """Deletes the captures of this region's store past their retention."""

    def __init__(
        self, store: PromptStore, retention_s: float, clock: Callable[[], float] = time.time
    ) -> None:
        self._store = store
        self._retention_s = retention_s
        self._clock = clock
        self._log = structlog.get_logger(component="prompt_capture")

    async def forget_expired(self) -> int:
        if self._retention_s <= 0:
            return 0
        return await self._store.forget_prompts(self._clock() - self._retention_s)

    async def run(self) -> None:
        """Deletes expired captures now and then, for as long as the gateway runs."""
        every_s = min(FORGET_EVERY_S, self._retention_s / 10) or FORGET_EVERY_S
        while True:
            try:
                forgotten = await self.forget_expired()
            except Exception:
                self._log.exception("expired prompt captures not deleted")
            else:
                if forgotten:
                    self._log.info("expired prompt captures deleted", count=forgotten)
            await asyncio.sleep(every_s)
