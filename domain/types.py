"""The plain values that cross module boundaries."""

from __future__ import annotations

import enum
from dataclasses import dataclass

from domain.answer_options import ToolCall

# The most a gateway may ask a node to wait between two chunks of one answer: past it a reader
# would watch a stalled answer, and the gateway's stall timeout nears. The node refuses more,
# and the gateway's configuration may not ask for more.
MAX_STREAM_INTERVAL_S = 2.0


class Tier(enum.StrEnum):
    FREE = "free"
    PLUS = "plus"


class Role(enum.StrEnum):
    SYSTEM = "system"
    USER = "user"
    ASSISTANT = "assistant"
    # A tool's result (the OpenAI-compatible API's completions only; never stored).
    TOOL = "tool"


class Finish(enum.StrEnum):
    STOP = "stop"
    LENGTH = "length"
    CANCELLED = "cancelled"
    REFUSED = "refused"
    ERROR = "error"


class NodeState(enum.StrEnum):
    STARTING = "starting"
    READY = "ready"
    DRAINING = "draining"
    DEAD = "dead"


@dataclass(frozen=True, slots=True)
class Turn:
    role: Role
    text: str
    # Counted once with the serving model's tokenizer when the turn is saved; never recounted.
    tokens: int
    # Tool use (completions only): an assistant turn's calls, or the call a tool turn answers.
    tool_calls: tuple[ToolCall, ...] = ()
    tool_call_id: str = ""


@dataclass(frozen=True, slots=True)
class Usage:
    input_tokens: int = 0
    cached_tokens: int = 0
    output_tokens: int = 0


@dataclass(frozen=True, slots=True)
class User:
    user_id: str
    tier: Tier
