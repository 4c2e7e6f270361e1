"""What the chat pipeline's core (pipeline, planner, answers, compactor) needs of the world
around it, as protocols over plain values: a replica picked, a node's token counts and answer
stream, the daily allowance, and the store's conversations. gateway/main.py hands in the real
ones (gateway/scheduler_client.py, gateway/node_client.py, gateway/daily_budget.py, store/);
the buckets' protocol is gateway/buckets.py's and run sharing's gateway/run_sharing.py's.
Nothing here names gRPC, protobuf or Redis: the adapters convert at their edge."""

from __future__ import annotations

from collections.abc import Awaitable, Sequence
from dataclasses import asdict, dataclass
from typing import Any, NamedTuple, Protocol, final

from domain.answer_options import PLAIN, AnswerOptions, ToolCall
from domain.budget import BudgetDecision
from domain.types import Finish, Tier, Turn, Usage, User

# Picking a replica -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ReplicaPick:
    """Where one answer runs, and what the scheduler knew when it chose."""

    node_id: str
    address: str
    model: str
    ladder_rung: int = 0
    expected_wait_s: float = 0.0
    # The replica's context window (0: not reported).
    context_tokens: int = 0

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, body: dict[str, Any]) -> ReplicaPick:
        return cls(**body)


class ReplicaPicker(Protocol):
    """The schedulers: NoReplica when the pool has no replica for it, Unavailable when no
    scheduler answers, InvalidArgument when one refuses the question."""

    async def pick(
        self,
        conversation_id: str,
        pool: str,
        tier: Tier,
        prompt_tokens: int,
        reusable_prefix_tokens: int = 0,
        exclude_node_ids: Sequence[str] = (),
        model: str = "",
    ) -> ReplicaPick: ...


# Calling nodes -----------------------------------------------------------------------------------


# Final, both: the answer loops tell them apart by exact type (type(item) is Chunk), which a
# subclass would defeat.
@final
class Chunk(NamedTuple):
    """Text from the engine; index is its last token's (1, 2, 3... per request). pieces: the
    same text as the tokens the node kept apart (several ready at once, sent in one message),
    each shown as an event of its own; empty when the node sent the text as one piece."""

    # Shadows tuple.index(), which nothing calls on a chunk; the wire's field has this name.
    index: int  # type: ignore[assignment]
    text: str
    pieces: Sequence[str] = ()


@final
class Finished(NamedTuple):
    finish: Finish
    usage: Usage
    # The calls the engine parsed from the answer (a request with tools).
    tool_calls: tuple[ToolCall, ...] = ()
    # The counts of the spec's count_texts, in order; empty when the node did not count them.
    text_tokens: tuple[int, ...] = ()
    # The node lost its engine mid-answer: the replica failed, not the request.
    engine_lost: bool = False


@final
class Working:
    """The node vouches that an answer with no news is still in its engine's hands (queued,
    or behind a long prompt in the same batch): silence so vouched is waiting, not a lost node."""

    __slots__ = ()


WORKING = Working()


class StreamBroken(Exception):
    """The node's stream ended without a finish, or failed on the way (code: the transport's
    name for why, None when the stream simply ended)."""

    def __init__(self, code: str | None, reason: str) -> None:
        super().__init__(reason)
        self.code = code


class GenerateSpec(NamedTuple):
    request_id: str
    turns: Sequence[Turn]
    max_tokens: int
    tier: Tier
    temperature: float
    prompt_tokens: int
    # A partial answer to go on from (a failover or a takeover).
    continue_from: str = ""
    # The caller's sampling, JSON answer and tools (completions).
    options: AnswerOptions = PLAIN
    # Texts for the node to count while it answers (the counts come with the finish).
    count_texts: tuple[str, ...] = ()
    # The least time between two chunks after the first; 0: the node's own interval.
    stream_interval_s: float = 0.0


class Generation(Protocol):
    """One answer's stream: read() until a Finished (StreamBroken when it fails on the way),
    with Working between chunks from a node that vouches for its silence; cancel() stops the
    engine at once and may be awaited; close() always, after."""

    async def read(self) -> Chunk | Finished | Working: ...

    def cancel(self) -> Awaitable[None]: ...

    def close(self) -> None: ...


class Nodes(Protocol):
    """The nodes, by address: Unavailable when one cannot count, a subclass of it when one
    refuses a request no other replica would take either."""

    async def tokenize(self, address: str, texts: Sequence[str], model: str = "") -> list[int]: ...

    async def generate(self, address: str, spec: GenerateSpec) -> Generation: ...


# The daily allowance -----------------------------------------------------------------------------


class Budget(Protocol):
    """The daily allowance (gateway/daily_budget.py): which pool a message may use, and what
    an answer spent. Neither call fails for its store being away."""

    async def decide(self, user: User, routed_pool: str) -> BudgetDecision: ...

    async def charge(self, user: User, pool: str, usage: Usage) -> None: ...
