"""Chooses the replica for a message: the one that still holds the conversation's KV cache
(its rendezvous favourite here; `domain.pool_index.PoolIndex` also remembers where each
conversation last ran), unless a request would wait there over a second to start and longer
than re-reading the cached prefix on the idlest replica takes (`EscapeRule`). Waits and the
price of a move use each replica's measured prompt-reading speed where it reported one."""

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
    AFFINITY = "affinity"  # stayed where the conversation's cache is (or presumably is)
    ESCAPED_QUEUE = "escaped-queue"
    ESCAPED_KV_ROOM = "escaped-kv-room"
    NO_REPLICA = "no-replica"
    MOVED = "moved"
    # Nothing of the conversation is cached anywhere: placed where it starts soonest.
    COLD = "cold"


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
    # What the node measured of its engine: uncached prompt tokens read per second, and the
    # seconds of one decode step; 0 until it has measured them (the configured figure counts).
    prefill_tokens_per_s: float = 0.0
    decode_step_s: float = 0.0
    # How long its recent answers held their places in the batch (0: not measured yet).
    answer_s: float = 0.0

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

    The two waits compared are means, where the floor and the ladder's promise use the
    model's quantile: at 9 in 10 a replica two answers behind looks 3.9 answer-endings away
    and one behind 2.3, against 2 and 1 on average, so comparing quantiles made a queue one
    longer than the idlest's look worth leaving much sooner than it is, and each escape
    throws a cached history away (docs/decisions.md, "Escapes compare mean waits").
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
    if is_cold(reusable_prefix_tokens, rule):
        soonest = min(
            candidates, key=lambda r: _cold_key(r, conversation_hash, prompt_tokens, rule)
        )
        return Pick(soonest, PickReason.COLD)
    idlest = min(candidates, key=lambda r: r.queued_prefill_tokens)
    return settle(favourite, idlest, prompt_tokens, reusable_prefix_tokens, rule=rule)


def is_cold(reusable_prefix_tokens: int, rule: EscapeRule) -> bool:
    """Whether a message with nothing known of its whereabouts is placed as a conversation's
    first turn: nothing of it is cached anywhere, so no replica has a claim on it and it goes
    where it starts soonest. Never under a rule that never escapes (pure rendezvous)."""
    return reusable_prefix_tokens <= 0 and not math.isinf(rule.min_wait_s)


def _cold_key(
    replica: ReplicaLoad, conversation_hash: int, prompt_tokens: int, rule: EscapeRule
) -> tuple[bool, float, int, int]:
    # Room for the prompt first, then the soonest start; ties (an idle pool) go to the fewest
    # answers under way, then to the rendezvous order, so that quiet arrivals spread too.
    return (
        replica.free_kv_tokens < prompt_tokens,
        replica_start_wait_s(rule, replica, replica.queued_prefill_tokens, 0, expected=True),
        replica.running_requests + replica.waiting_requests,
        -rendezvous_score(conversation_hash, fnv1a64(replica.node_id)),
    )


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
    if replica_start_wait_s(rule, favourite, favourite_queue, favourite_sent) <= rule.min_wait_s:
        return Pick(favourite, PickReason.AFFINITY)
    if idlest_queue is None:
        idlest_queue = idlest.queued_prefill_tokens
    waiting_there = replica_start_wait_s(rule, favourite, favourite_queue, favourite_sent,
                                         expected=True)  # fmt: skip
    waiting_elsewhere = replica_start_wait_s(rule, idlest, idlest_queue, idlest_sent,
                                             expected=True)  # fmt: skip
    # Leaving the favourite throws its cached prefix away: only worth it when the extra wait
    # there is longer than reading that prefix again elsewhere, at that replica's speed.
    if waiting_there - waiting_elsewhere > reusable_prefix_tokens / reading_speed(rule, idlest):
        return Pick(idlest, PickReason.ESCAPED_QUEUE)
    return Pick(favourite, PickReason.AFFINITY)


def reading_speed(rule: EscapeRule, replica: ReplicaLoad) -> float:
    """The replica's measured prompt-reading speed, the rule's configured one until then."""
    measured = replica.prefill_tokens_per_s
    return measured if measured > 0 else rule.wait.prefill_tokens_per_s


def replica_start_wait_s(
    rule: EscapeRule, replica: ReplicaLoad, queue: int, sent: int, *, expected: bool = False
) -> float:
    """A paid request's start wait on the replica, with its prompt queue and the requests
    sent to it since its report: the quantile the floor checks, or (expected) the mean wait
    two replicas are compared by."""
    return start_wait_s(
        rule.wait,
        queue,
        replica.running_requests,
        replica.waiting_requests + sent,
        replica.max_running_requests,
        replica.kv_usage,
        paid=True,
        prefill_tokens_per_s=replica.prefill_tokens_per_s,
        answer_s=replica.answer_s,
        expected=expected,
    )
