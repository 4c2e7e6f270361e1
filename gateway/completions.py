"""Stateless completions (the OpenAI-compatible API): the caller sends the whole history and
nothing is stored. The pipeline plans them like messages; what differs lives here as plain
functions: validation, the affinity key, and fitting the given history into the window.
Like a message, a completion passes the input check, the router, the ladder, the token bucket
and the per-user stream cap, and its answer the output check."""

from __future__ import annotations

import contextlib
import hashlib
import re
from collections.abc import AsyncGenerator
from dataclasses import dataclass

from domain import answer_options
from domain.answer_options import PLAIN, AnswerOptions, ToolCall
from domain.context import ContextBuilder, Prompt
from domain.errors import InvalidArgument, MessageTooLarge
from domain.types import Role, Turn
from gateway.runs import Event, MessageRun

# A history longer than this is a client bug or an attack; no model window holds it anyway.
MAX_TURNS = 256
# Printable ASCII without spaces: it is only hashed, but it travels in an HTTP header.
SESSION_KEY_PATTERN = re.compile(r"^[\x21-\x7e]{1,128}$")
COMPLETION_PREFIX = "chatcmpl-"


@dataclass(frozen=True, slots=True)
class CallerTurn:
    """One turn as the caller sent it, not yet counted by any tokenizer."""

    role: Role
    text: str
    # Tool use: an assistant turn's calls (its text may then be empty), or the call a tool
    # turn answers.
    tool_calls: tuple[ToolCall, ...] = ()
    tool_call_id: str = ""

    def counted_text(self) -> str:
        """What the prompt holds of this turn, as the tokenizer is asked to count it: the
        calls go into the prompt as JSON (an estimate of the chat template's own form)."""
        calls = (f'{{"name":"{c.name}","arguments":{c.arguments}}}' for c in self.tool_calls)
        return "\n".join([self.text, *calls]) if self.tool_calls else self.text

    def as_turn(self, tokens: int) -> Turn:
        return Turn(self.role, self.text, tokens, self.tool_calls, self.tool_call_id)


@dataclass(frozen=True, slots=True)
class CompleteRequest:
    turns: tuple[CallerTurn, ...]
    pool: str | None  # None: the router decides
    max_tokens: int  # 0: the tier's (and the ladder's) cap
    session_key: str  # empty: derived from the start of the history
    options: AnswerOptions = PLAIN
    # Runs on when its caller goes, for a resume by its id (the OpenAI API's X-Resumable).
    resumable: bool = False
    # The replica picker's key, given: a stored conversation's tool loop (gateway/
    # tool_messages.py) runs its steps as completions, on the conversation's own favourite.
    affinity: str = ""


def validate(request: CompleteRequest, max_message_chars: int) -> None:
    if not request.turns:
        raise InvalidArgument("turns must not be empty")
    if len(request.turns) > MAX_TURNS:
        raise InvalidArgument(f"at most {MAX_TURNS} turns are accepted")
    calls: set[str] = set()
    for index, turn in enumerate(request.turns):
        if not turn.text.strip() and not turn.tool_calls:
            raise InvalidArgument(f"turn {index} has no content")
        if len(turn.counted_text()) > max_message_chars:
            raise MessageTooLarge(
                f"turn {index} has {len(turn.counted_text())} characters; "
                f"at most {max_message_chars} are accepted"
            )
        _check_tool_use(index, turn, calls)
    if request.turns[-1].role not in (Role.USER, Role.TOOL):
        raise InvalidArgument("the last turn must be the user's or a tool's result")
    answer_options.check(request.options)
    if request.max_tokens < 0:
        raise InvalidArgument("max_tokens must not be negative")
    if request.session_key and not SESSION_KEY_PATTERN.match(request.session_key):
        raise InvalidArgument("the session key must be 1-128 printable ASCII characters")


def _check_tool_use(index: int, turn: CallerTurn, calls: set[str]) -> None:
    """Tool calls only on assistant turns; a tool turn answers a call made before it."""
    if turn.tool_calls and turn.role is not Role.ASSISTANT:
        raise InvalidArgument(f"turn {index}: only an assistant turn may call tools")
    calls.update(call.call_id for call in turn.tool_calls)
    if turn.role is Role.TOOL and turn.tool_call_id not in calls:
        raise InvalidArgument(
            f"turn {index} answers the tool call {turn.tool_call_id!r}, which no earlier turn made"
        )


def affinity_key(user_id: str, request: CompleteRequest) -> str:
    """What the replica picker hashes in place of a conversation id. A multi-turn client
    resends the same opening every time (system prompt and first user message), so hashing
    it sends every turn to the replica whose prefix cache already holds the conversation.
    The user id is mixed in so two users with the same opening do not share a favourite."""
    if request.affinity:
        return request.affinity
    if request.session_key:
        parts = [user_id, "session", request.session_key]
    else:
        system = next((t.text for t in request.turns if t.role is Role.SYSTEM), "")
        first = next(t.text for t in request.turns if t.role is Role.USER)
        parts = [user_id, "opening", system, first]
    digest = hashlib.sha256("\x1f".join(parts).encode()).hexdigest()
    return f"cmpl-{digest[:32]}"


def completion_id(random_hex: str) -> str:
    return COMPLETION_PREFIX + random_hex


def split_system(
    request: CompleteRequest, default_system: str
) -> tuple[CallerTurn, list[CallerTurn]]:
    """The caller's leading system turn replaces the platform's; without one the platform's
    system prompt leads, as it does in conversations."""
    turns = list(request.turns)
    if turns[0].role is Role.SYSTEM:
        return turns[0], turns[1:]
    return CallerTurn(Role.SYSTEM, default_system), turns


def tools_text(options: AnswerOptions) -> str:
    """The tools' definitions as the prompt carries them (the chat template writes them into
    the system part): counted with the system turn, so the window and the bucket see them."""
    return "\n".join(f"{t.name}: {t.description} {t.parameters}" for t in options.tools)


def fit(system: Turn, turns: list[Turn], window_tokens: int, answer_reserve: int) -> Prompt:
    """The whole given history with the answer reserve, or MessageTooLarge. Unlike a
    conversation, nothing is dropped quietly: the caller chose the history and expects the
    model to read all of it (OpenAI answers such a call with context_length_exceeded)."""
    builder = ContextBuilder(system, window_tokens, answer_reserve)
    prompt = builder.build(None, turns[:-1], turns[-1])
    if prompt.dropped_turns or not builder.fits_alone(turns[-1]):
        total = system.tokens + sum(t.tokens for t in turns)
        raise MessageTooLarge(
            f"the history has {total} tokens; with {answer_reserve} tokens kept for the answer "
            f"the window of {window_tokens} tokens cannot hold it"
        )
    return prompt


async def follow_then_stop(
    run: MessageRun, interval_s: float = 0.0, resumable: bool = False
) -> AsyncGenerator[list[tuple[int, Event]]]:
    """The run's events for its one caller, in batches. Nobody can resume a stateless
    completion unless it was asked resumable, so a caller that goes away stops it: the
    replica's slot is freed for someone who is there."""
    try:
        async for batch in run.follow_batches(0, interval_s=interval_s):
            yield batch
    finally:
        if not run.ended and not resumable:
            run.stop_requested.set()


def answer_cap(tier_cap: int, asked: int) -> int:
    """The caller may ask for less than the tier allows, never more."""
    return min(tier_cap, asked) if asked else tier_cap


def closing_events(
    run: MessageRun, interval_s: float = 0.0, resumable: bool = False
) -> contextlib.aclosing[AsyncGenerator[list[tuple[int, Event]]]]:
    """follow_then_stop, closed (and so stopped) even when its reader is closed mid-way."""
    return contextlib.aclosing(follow_then_stop(run, interval_s, resumable))
