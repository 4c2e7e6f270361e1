"""Chooses the replica for a message: the one that still holds the conversation's KV cache
(its rendezvous favourite), unless a request would wait there over a second to start and
longer than re-reading the cached prefix on the idlest replica takes (`EscapeRule`)."""

from __future__ import annotations

import enum
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from domain.start_wait import StartWaitModel, start_wait_s
from domain.types import NodeState

_FNV64_OFFSET: Final = 0xCBF29CE484222325
_FNV64_PRIME: Final = 0x100000001B3
_MASK64: Final = 0xFFFFFFFFFFFFFFFF


def fnv1a64(text: str) -> int:
    """FNV-1a, 64 bits: stable across processes and languages, unlike Python's hash()."""
    h = _FNV64_OFFSET
    for byte in text.encode():
        h = ((h ^ byte) * _FNV64_PRIME) & _MASK64
    return h


def mix64(x: int) -> int:
    """SplitMix64's finaliser: spreads the bits of a combined pair of hashes."""
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9 & _MASK64
    x = (x ^ (x >> 27)) * 0x94D049BB133111EB & _MASK64
    return x ^ (x >> 31)


def rendezvous_score(conversation_hash: int, replica_hash: int) -> int:
    return mix64(conversation_hash ^ replica_hash)


class PickReason(enum.StrEnum):
    AFFINITY = "affinity"
    ESCAPED_QUEUE = "escaped-queue"
    ESCAPED_KV_ROOM = "escaped-kv-room"
    NO_REPLICA = "no-replica"
    MOVED = "moved"


@dataclass(frozen=True, slots=True)
class ReplicaLoad:
    node_id: str
    address: str
    pool: str
    model: str
    state: NodeState
    free_kv_tokens: int
    queued_prefill_tokens: int
    running_requests: int = 0
    waiting_requests: int = 0
    kv_usage: float = 0.0
    prefix_hit_rate: float = 0.0
    # The most answers the engine batches at once (vLLM's max_num_seqs, llama.cpp's slots);
    # 0 when the node does not say.
    max_running_requests: int = 0

    @property
    def batch_fill(self) -> float:
        """How full the batch is, 0..1: by memory, or by places when the engine caps them."""
        fill = self.kv_usage
        if self.max_running_requests > 0:
            fill = max(fill, self.running_requests / self.max_running_requests)
        return min(1.0, fill)

    @property
    def pickable(self) -> bool:
        return self.state is NodeState.READY


@dataclass(frozen=True, slots=True)
class EscapeRule:
    """When leaving a conversation's favourite replica pays: only when a request would wait
    there longer than `min_wait_s` to start (domain/start_wait.py, as a paid one would), and
    longer than on the idlest replica by more than reading the cached prefix again takes.

    Without the floor, a favourite a few hundred milliseconds behind the idlest loses the
    conversation, which reads its whole history again there and again on its next turn back
    at the favourite: the fleet simulator measured the cached share of history at 77 % and
    about 1,000 prefill GPUs at the planned peak, against 88 % and 620 with a 1 s floor.
    """

    wait: StartWaitModel
    min_wait_s: float = 1.0


# The default rule, and the scheduler's configuration defaults (scheduler/main.py): 2,000
# prompt tokens a second, answers holding their place about 13 s, Plus taking 40 % of them.
DEFAULT_ESCAPE = EscapeRule(StartWaitModel(2000.0, 13.0, 0.4))
# The favourite always (the fleet simulator's ceiling for pure affinity), unless the prompt
# does not fit there at all.
NEVER_ESCAPE = EscapeRule(StartWaitModel(2000.0, 13.0), math.inf)


@dataclass(frozen=True, slots=True)
class Pick:
    replica: ReplicaLoad | None
    reason: PickReason


def pick_replica(
    conversation_id: str,
    prompt_tokens: int,
    reusable_prefix_tokens: int,
    replicas: Sequence[ReplicaLoad],
    rule: EscapeRule = DEFAULT_ESCAPE,
) -> Pick:
    candidates = [r for r in replicas if r.pickable]
    if not candidates:
        return Pick(None, PickReason.NO_REPLICA)
    conversation_hash = fnv1a64(conversation_id)
    favourite = max(
        candidates, key=lambda r: rendezvous_score(conversation_hash, fnv1a64(r.node_id))
    )
    idlest = min(candidates, key=lambda r: r.queued_prefill_tokens)
    return settle(favourite, idlest, prompt_tokens, reusable_prefix_tokens, rule=rule)


def settle(
    favourite: ReplicaLoad,
    idlest: ReplicaLoad,
    prompt_tokens: int,
    reusable_prefix_tokens: int,
    favourite_queue: int | None = None,
    idlest_queue: int | None = None,
    *,
    rule: EscapeRule = DEFAULT_ESCAPE,
    favourite_sent: int = 0,
    idlest_sent: int = 0,
) -> Pick:
    """Stays on the favourite or escapes to the idlest; shared with PoolIndex so the two
    pickers cannot drift apart. The queues default to the replicas' last reports; a picker
    that also counts its own picks since those reports passes its own figures (the prompt
    tokens it charged, the requests it sent)."""
    if favourite.free_kv_tokens < prompt_tokens:
        return Pick(idlest, PickReason.ESCAPED_KV_ROOM)
    if favourite_queue is None:
        favourite_queue = favourite.queued_prefill_tokens
    waiting_there = _start_wait_s(rule, favourite, favourite_queue, favourite_sent)
    if waiting_there <= rule.min_wait_s:
        return Pick(favourite, PickReason.AFFINITY)
    if idlest_queue is None:
        idlest_queue = idlest.queued_prefill_tokens
    waiting_elsewhere = _start_wait_s(rule, idlest, idlest_queue, idlest_sent)
    # Leaving the favourite throws its cached prefix away: only worth it when the extra wait
    # there is longer than reading that prefix again elsewhere.
    if waiting_there - waiting_elsewhere > reusable_prefix_tokens / rule.wait.prefill_tokens_per_s:
        return Pick(idlest, PickReason.ESCAPED_QUEUE)
    return Pick(favourite, PickReason.AFFINITY)


def _start_wait_s(rule: EscapeRule, replica: ReplicaLoad, queue: int, sent: int) -> float:
    return start_wait_s(
        rule.wait,
        queue,
        replica.running_requests,
        replica.waiting_requests + sent,
        replica.max_running_requests,
        replica.kv_usage,
        paid=True,
    )
