"""The shedding ladder: what Free users give up, rung by rung, when the GPUs run hot.

Rungs: 0 normal; 1 Free goes to the small model; 2 Free answers are capped; 3 Free messages
that cannot start soon are refused at once. Plus is never shed. Pure: the caller ticks it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Final

from domain.picker import ReplicaLoad
from domain.types import NodeState

MAX_RUNG: Final = 3


@dataclass(frozen=True, slots=True)
class LadderPolicy:
    # Busy share at which the ladder climbs from rung r to r + 1 (index r).
    up_at: tuple[float, ...] = (0.85, 0.92, 0.97)
    # The ladder comes down from rung r only this far below the line it went up at, so a busy
    # share hovering at a line does not flap the rung every tick.
    down_gap: float = 0.07

    def __post_init__(self) -> None:
        if len(self.up_at) != MAX_RUNG or list(self.up_at) != sorted(self.up_at):
            raise ValueError(f"up_at needs {MAX_RUNG} rising busy shares")


@dataclass(frozen=True, slots=True)
class LadderChange:
    at: float
    from_rung: int
    to_rung: int
    busy_share: float
    reason: str


@dataclass(frozen=True, slots=True)
class LadderState:
    rung: int = 0
    pinned: int | None = None
    busy_share: float = 0.0
    history: tuple[LadderChange, ...] = field(default_factory=tuple)

    @property
    def effective_rung(self) -> int:
        return self.rung if self.pinned is None else self.pinned


HISTORY_KEPT: Final = 50


def tick(state: LadderState, busy: float, now: float, policy: LadderPolicy) -> LadderState:
    """One tick: at most one rung up or down. A pin freezes the rung where the operator put it."""
    if state.pinned is not None:
        return replace(state, busy_share=busy)
    rung = state.rung
    if rung < MAX_RUNG and busy >= policy.up_at[rung]:
        return _move(state, rung + 1, busy, now, f"busy {busy:.0%} >= {policy.up_at[rung]:.0%}")
    if rung > 0 and busy < policy.up_at[rung - 1] - policy.down_gap:
        line = policy.up_at[rung - 1] - policy.down_gap
        return _move(state, rung - 1, busy, now, f"busy {busy:.0%} < {line:.0%}")
    return replace(state, busy_share=busy)


def pin(state: LadderState, rung: int | None, busy: float, now: float) -> LadderState:
    if rung is not None and not 0 <= rung <= MAX_RUNG:
        raise ValueError(f"rung must be 0..{MAX_RUNG}")
    reason = "unpinned by an operator" if rung is None else f"pinned at {rung} by an operator"
    change = LadderChange(
        now, state.effective_rung, state.rung if rung is None else rung, busy, reason
    )
    return replace(state, pinned=rung, history=(*state.history, change)[-HISTORY_KEPT:])


def _move(state: LadderState, to: int, busy: float, now: float, reason: str) -> LadderState:
    change = LadderChange(now, state.rung, to, busy, reason)
    history = (*state.history, change)[-HISTORY_KEPT:]
    return replace(state, rung=to, busy_share=busy, history=history)


def busy_share(replicas: Sequence[ReplicaLoad], saturated_queue_tokens: float = math.inf) -> float:
    """How busy a pool's GPUs are, 0..1, from the nodes' own reports.

    Continuous batching admits requests while KV blocks are free and the engine's cap on answers
    at once allows, so a replica's KV occupancy or its share of places taken, whichever is
    higher, is how full its batch is (`ReplicaLoad.batch_fill`). Once requests wait, the
    batch cannot grow: the replica is saturated, whatever its KV reads. So is one whose admitted
    prompts wait longer to be read than `saturated_queue_tokens` takes (the prompt tokens it
    prefills in the rung-3 wait): its KV may read half empty while every new message waits
    seconds for its first token. The pool's share is the mean over replicas that serve (ready or
    draining); dead ones serve nothing. A pool with no serving replica counts as fully busy: it
    has no capacity at all.
    """
    serving = [r for r in replicas if r.state in (NodeState.READY, NodeState.DRAINING)]
    if not serving:
        return 1.0 if replicas else 0.0
    return sum(
        1.0
        if r.waiting_requests > 0 or r.queued_prefill_tokens > saturated_queue_tokens
        else r.batch_fill
        for r in serving
    ) / len(serving)


def ladder_busy(pool_busy: Mapping[str, float], rung: int, watched: str, shed_to: str) -> float:
    """The busy share the ladder ticks on, from each pool's `busy_share`.

    At rung 0 only the watched (large) pool counts: rung 1 sends Free to the shed-to (small)
    pool, so a hot small pool must not be the reason to climb there. From rung 1 on, Free
    traffic runs on the shed-to pool as well, and the hotter of the two decides. Reading the
    large pool alone, rung 1 cools it below the next line and the ladder stays at rung 1 while
    the small pool, now carrying every Free message, drowns unseen: capping and refusing at
    the door would never come (the fleet simulation of sizing 000's overload showed exactly
    that). Coming down needs both pools calm, so Free is not sent back into a pool that is
    still hot."""
    busy = pool_busy.get(watched, 0.0)
    if rung == 0 or shed_to not in pool_busy:
        return busy
    return max(busy, pool_busy[shed_to])
