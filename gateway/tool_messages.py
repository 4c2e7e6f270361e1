"""A stored message whose answer is the tool loop's (the conversation API and the Responses API
with `store: true`, asking for platform tools).

The pipeline stores the user's message and plans it as any other (its history, fitted to the
window, is the prompt); then, instead of one model call, this runs the tool loop over that
prompt (gateway/tool_loop.py: each step an ordinary completion, which reserves and settles
its own share of the bucket, so the message's own reservation is given back first), writes
the loop's events into the message's run, and stores the answer's text, all its steps'
together. What is stored is the text: the calls and their results are in the run's log (a
resume reads them) but not in the conversation, so a later message's prompt has the answer
without the pages it was made from.

Such a run stays with this gateway: it is not shared through Redis, so another gateway does
not take it over when this one dies (the answer is then lost, as a completion is), and calls
that would wait for a person's approval are refused (approvals are served for stateless
responses, which carry the call back themselves)."""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncGenerator, Sequence
from typing import Protocol

import structlog

from domain import errors
from domain.answer_options import ToolDefinition
from domain.types import Finish, Role, Usage, User
from gateway.answers import AnswerPlan
from gateway.buckets import Buckets
from gateway.completions import CallerTurn, CompleteRequest
from gateway.ids import ANSWER_SUFFIX
from gateway.prompt_capture import NoCapture, PromptCapture, captured
from gateway.runs import (
    Delta,
    Done,
    Event,
    Failed,
    FailureCode,
    MessageRun,
    Meta,
    RunRegistry,
    ToolsListed,
)
from gateway.tool_loop import ToolLoop
from gateway.tool_requests import NO_APPROVALS, PlatformTool
from gateway.turn_citations import CONVERSATION
from store.base import ConversationStore
from store.records import NewMessage

# google.rpc codes of the errors a step may end the loop with; anything else is UNAVAILABLE.
_FAILURE_CODES: list[tuple[type[errors.DomainError], int]] = [
    (errors.InvalidArgument, 3),
    (errors.PermissionDenied, 7),
    (errors.ResourceExhausted, 8),
    (errors.FailedPrecondition, 9),
]


class ToolMessageDriver(Protocol):
    def check(self, user: User, tools: Sequence[PlatformTool]) -> None:
        """Raises (a 4xx) for tools this message may not run, before anything is stored."""
        ...

    async def drive(
        self,
        run: MessageRun,
        user: User,
        plan: AnswerPlan,
        answer_parent_seq: int,
        tools: Sequence[PlatformTool],
    ) -> None: ...


class NoToolMessages:
    """A gateway that runs no tools."""

    def check(self, user: User, tools: Sequence[PlatformTool]) -> None:
        raise errors.InvalidArgument("this gateway runs no platform tools")

    async def drive(
        self,
        run: MessageRun,
        user: User,
        plan: AnswerPlan,
        answer_parent_seq: int,
        tools: Sequence[PlatformTool],
    ) -> None:
        raise errors.InvalidArgument("this gateway runs no platform tools")


def no_tool_messages(_: object) -> ToolMessageDriver:
    return NoToolMessages()


def _caller_turns(plan: AnswerPlan) -> tuple[CallerTurn, ...]:
    return tuple(CallerTurn(turn.role, turn.text, turn.tool_calls, turn.tool_call_id)
                 for turn in plan.prompt.turns)  # fmt: skip


def _failure(error: errors.DomainError) -> Failed:
    code = next((c for kind, c in _FAILURE_CODES if isinstance(error, kind)),
                int(FailureCode.UNAVAILABLE))  # fmt: skip
    return Failed(code, error.reason)


@dataclasses.dataclass(slots=True)
class _Written:
    """What the loop wrote into the run, for the stored answer."""

    text: list[str] = dataclasses.field(default_factory=list)
    model: str = ""
    replica_id: str = ""
    ending: Event | None = None
    # The tools the loop offered the model, for the turn's capture.
    offered: list[ToolDefinition] = dataclasses.field(default_factory=list)


class ToolMessages:
    def __init__(
        self,
        loop: ToolLoop,
        store: ConversationStore,
        buckets: Buckets,
        runs: RunRegistry,
        region: str = "",
        prompts: PromptCapture | None = None,
    ) -> None:
        self._prompts = prompts or NoCapture()
        self._loop = loop
        self._store = store
        self._buckets = buckets
        self._runs = runs
        self._region = region
        self._log = structlog.get_logger(component="tool_messages")

    def check(self, user: User, tools: Sequence[PlatformTool]) -> None:
        waits = [tool.server_label or tool.name for tool in tools
                 if tool.require_approval or tool.approval_exceptions]  # fmt: skip
        if waits:
            raise errors.InvalidArgument(
                f"{waits[0]!r} would wait for approvals, which are served for stateless "
                "answers only: send its require_approval as never, or the request unstored"
            )
        self._loop.capabilities(user, tools)

    async def drive(
        self,
        run: MessageRun,
        user: User,
        plan: AnswerPlan,
        answer_parent_seq: int,
        tools: Sequence[PlatformTool],
    ) -> None:
        # Each step reserves and settles its own share; the message's would be counted twice.
        await self._buckets.settle(user.user_id, user.tier, plan.reserved, 0.0)
        request = CompleteRequest(_caller_turns(plan), plan.pool, plan.max_answer_tokens, "",
                                  affinity=run.conversation_id)  # fmt: skip
        written = _Written()
        try:
            await self._relay(
                run, self._loop.run(user, request, tools, NO_APPROVALS, CONVERSATION), written
            )
        except errors.DomainError as error:
            written.ending = _failure(error)
            await run.append(written.ending)
        except Exception:
            self._log.exception("tool loop failed", message_id=run.message_id)
            written.ending = Failed(FailureCode.UNAVAILABLE, "the answer failed")
            await run.append(written.ending)
        if written.ending is None:  # the loop ended without saying how: never left open
            written.ending = Failed(FailureCode.UNAVAILABLE, "the answer ended unfinished")
            await run.append(written.ending)
        await self._save(run, user, answer_parent_seq, written, written.ending)
        self._runs.mark_ended(run)
        if isinstance(written.ending, Done) and written.ending.finish is not Finish.ERROR:
            # The first step's prompt and the tools it offered: every later step's prompt is
            # that one and the calls and results the stream showed.
            prompt = captured(plan, run.conversation_id, run.message_id, written.model,
                              written.replica_id, tuple(written.offered))  # fmt: skip
            await self._prompts.keep_tool_turn(user, prompt)

    async def _relay(
        self,
        run: MessageRun,
        batches: AsyncGenerator[list[tuple[int, Event]]],
        written: _Written,
    ) -> None:
        """The loop's events into the message's run; a stop asked for ends it at the next
        batch, with the text so far."""
        try:
            async for batch in batches:
                for _, event in batch:
                    await run.append(self._own(run, event, written))
                if run.stop_requested.is_set() and written.ending is None:
                    written.ending = Done(Finish.CANCELLED, Usage())
                    await run.append(written.ending)
                if written.ending is not None:
                    return
        finally:
            await batches.aclose()

    def _own(self, run: MessageRun, event: Event, written: _Written) -> Event:
        match event:
            case Meta():
                written.model, written.replica_id = event.model, event.replica_id
                conversation_id = run.conversation_id
                return dataclasses.replace(event, message_id=run.message_id,
                                           conversation_id=conversation_id)  # fmt: skip
            case Delta():
                written.text.append(event.text)
            case ToolsListed():
                written.offered.extend(event.tools)
            case Done() | Failed():
                written.ending = event
        return event

    async def _save(
        self, run: MessageRun, user: User, parent_seq: int, written: _Written, ending: Event
    ) -> None:
        """The answer as the user read it, a failed one too (with the text so far), as the
        driver saves a message's answer."""
        done = ending if isinstance(ending, Done) else Done(Finish.ERROR, Usage())
        answer = NewMessage(run.message_id + ANSWER_SUFFIX, Role.ASSISTANT, "".join(written.text),
                            done.usage.output_tokens, parent_seq, model=written.model,
                            replica_id=written.replica_id, finish=done.finish.value,
                            region=self._region)  # fmt: skip
        try:
            await self._store.add_message(user.user_id, run.conversation_id, answer)
        except Exception:
            # The client's stream has ended whatever the store did; the operator sees it here.
            self._log.exception("answer not saved", message_id=run.message_id)
