"""The interface every engine adapter implements, and the values it exchanges."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Protocol

from domain.answer_options import PLAIN, AnswerOptions, ToolCall
from domain.types import Finish, Role, Tier, Usage


@dataclass(frozen=True, slots=True)
class PromptTurn:
    role: Role
    text: str
    # Tool use: an assistant turn's calls, or the call a tool turn answers.
    tool_calls: tuple[ToolCall, ...] = ()
    tool_call_id: str = ""


@dataclass(frozen=True, slots=True)
class GenerationRequest:
    request_id: str
    turns: tuple[PromptTurn, ...]
    max_tokens: int
    tier: Tier = Tier.FREE
    # A partial assistant answer to continue from after a failover.
    continue_from: str = ""
    temperature: float = 0.7
    prompt_tokens: int = 0
    # The caller's sampling, JSON answer and tools (the temperature above is the one to use).
    options: AnswerOptions = PLAIN
    # How often the node passes new text on (0: as it comes): an engine may gather that long's
    # tokens into one event instead of sending each on its own (nodeagent/engine_speed.py).
    stream_interval_s: float = 0.0


@dataclass(frozen=True, slots=True)
class Chunk:
    text: str
    # The tokens the text is: 1 unless the engine gathered several into one event.
    tokens: int = 1


@dataclass(frozen=True, slots=True)
class Finished:
    finish: Finish
    usage: Usage
    # The tool calls the engine parsed from the whole answer.
    tool_calls: tuple[ToolCall, ...] = ()
    # The answer ended because its engine was lost (EngineLost), not because of the request.
    engine_lost: bool = False


@dataclass(frozen=True, slots=True)
class EngineLoad:
    kv_usage: float
    free_kv_tokens: int
    kv_capacity_tokens: int
    queued_prefill_tokens: int
    running_requests: int
    waiting_requests: int
    prefix_hit_rate: float
    # Measured from the engine's own requests (nodeagent/engine_speed.py); 0: not yet.
    prefill_tokens_per_s: float = 0.0
    decode_step_s: float = 0.0
    answer_s: float = 0.0


class EngineError(Exception):
    """The engine failed a request or could not be reached."""


class EngineLost(EngineError):
    """The engine could not be reached, or its stream broke: the replica failed, not the
    request, so the answer may go on elsewhere (an engine that answers with an error status
    refused the request itself, and raises plain EngineError)."""


class Engine(Protocol):
    model: str
    context_tokens: int
    max_running_requests: int  # answers the engine batches at once; 0 when not known

    async def start(self) -> None: ...

    async def stop(self) -> None: ...

    def generate(self, request: GenerationRequest) -> AsyncIterator[Chunk | Finished]:
        """Yields chunks then one Finished. Closing the iterator aborts the request."""
        ...

    async def tokenize(self, texts: list[str]) -> list[int]: ...

    async def load(self) -> EngineLoad: ...

    async def healthy(self) -> bool: ...
