"""A request on a simulated replica, and the records the replica hands out about it: what a
step did, how a request ended, the replica's load. Pure: the step loop (domain/replica_sim.py)
moves requests through their states.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Final, NamedTuple

# Admission priority: lower goes first.
PAID: Final = 0
FREE: Final = 1

# The records a step hands out are NamedTuples, not dataclasses: a fleet makes tens of
# thousands a second, and a frozen dataclass costs several times as much to build.


class SimFinish(NamedTuple):
    request_id: str
    prompt_tokens: int
    cached_tokens: int  # prompt tokens found in the prefix cache (GPU or host) at admission
    output_tokens: int
    submitted_s: float
    first_token_s: float  # -1 when it never got one
    finished_s: float
    cancelled: bool = False


class StepResult(NamedTuple):
    step: int
    started_s: float
    duration_s: float
    decoded: tuple[str, ...]  # answers that got their next token (empty unless named)
    started: tuple[str, ...]  # prompts read to the end: each got its first token
    prefilled: tuple[tuple[str, int], ...]  # (request, prompt tokens read this step)
    admitted: tuple[str, ...]
    finished: tuple[SimFinish, ...]
    preempted: tuple[str, ...] = ()

    @property
    def idle(self) -> bool:
        return self.duration_s == 0.0


class SimLoad(NamedTuple):
    kv_usage: float  # share of KV blocks held by admitted requests
    free_kv_tokens: int  # free blocks plus evictable cached ones, in tokens
    kv_capacity_tokens: int
    # Prompt tokens not yet read, admitted or waiting (a waiting prompt counts whole: what of
    # it is cached is known when it is admitted).
    queued_prefill_tokens: int
    running_requests: int
    waiting_requests: int
    prefix_hit_rate: float  # cached share of admitted prompt tokens
    cached_kv_tokens: int  # evictable prefix blocks on the GPUs, in tokens
    host_kv_tokens: int  # prefix blocks spilled to host RAM, in tokens


# A request's state. Final: mypyc compiles the constants in, not a module lookup per use.
WAITING: Final = 0
PREFILLING: Final = 1
DECODING: Final = 2
DONE: Final = 3


# A plain class with its own __init__, not a dataclass: the dataclass-made __init__ stays
# interpreted Python when mypyc compiles this module (fleet/compiled.py), and a region makes one
# per message.


class ReplicaRequest:
    __slots__ = (
        "answer",
        "blocks",
        "cached",
        "conversation",
        "emitted",
        "first_cached",
        "first_token_s",
        "left",
        "order",
        "origin",
        "priority",
        "prompt",
        "queue_epoch",
        "request_id",
        "reusable",
        "shared",
        "shared_tokens",
        "state",
        "submitted_s",
    )

    def __init__(
        self,
        request_id: str,
        priority: int,
        order: int,
        prompt: int,
        answer: int,
        conversation: Hashable | None,
        reusable: int,
        submitted_s: float,
    ) -> None:
        self.request_id = request_id
        self.priority = priority
        self.order = order  # arrival order: ties in priority go to the earlier request
        self.prompt = prompt  # the prompt as submitted
        self.answer = answer  # tokens the answer will have
        self.conversation = conversation
        self.reusable = reusable  # leading prompt tokens equal to what the cache holds
        self.submitted_s = submitted_s
        self.emitted = 0  # tokens emitted before this admission (after a preemption)
        self.state = WAITING
        self.left = 0  # prompt tokens of this admission not yet read
        self.cached = 0
        self.first_cached = -1  # cache hit of the first admission, for the finish record
        self.blocks = 0  # blocks held while prefilling
        self.origin = 0  # while decoding, tokens emitted after step t are t - origin
        self.first_token_s = -1.0
        self.queue_epoch = 0
        self.shared: Hashable | None = None  # the key of a prefix many conversations open with
        self.shared_tokens = 0

    @property
    def to_read(self) -> int:
        """This admission's prompt: the prompt plus what a preempted answer already wrote."""
        return self.prompt + self.emitted


__all__ = [
    "DECODING",
    "DONE",
    "FREE",
    "PAID",
    "PREFILLING",
    "WAITING",
    "ReplicaRequest",
    "SimFinish",
    "SimLoad",
    "StepResult",
]
