"""What a message gives up on the current ladder rung. Plus never gives anything up."""

from __future__ import annotations

from dataclasses import dataclass

from domain.pools import SMALL_POOL
from domain.types import Tier


@dataclass(frozen=True, slots=True)
class SheddingPolicy:
    # Rung 2 caps Free answers here.
    capped_answer_tokens: int = 300
    # Rung 3 refuses a Free message that would wait longer than this to start.
    max_wait_s: float = 2.0


@dataclass(frozen=True, slots=True)
class Shed:
    pool: str
    max_answer_tokens: int


def shed(tier: Tier, rung: int, pool: str, max_answer_tokens: int, policy: SheddingPolicy) -> Shed:
    """Rungs 1 and 2: where a message runs and how long its answer may be."""
    if tier is Tier.PLUS:
        return Shed(pool, max_answer_tokens)
    if rung >= 1:
        pool = SMALL_POOL
    if rung >= 2:
        max_answer_tokens = min(max_answer_tokens, policy.capped_answer_tokens)
    return Shed(pool, max_answer_tokens)


def refuse_at_door(tier: Tier, rung: int, expected_wait_s: float, policy: SheddingPolicy) -> bool:
    """Rung 3: a Free message that cannot start soon is told so at once, not left to time out."""
    return tier is Tier.FREE and rung >= 3 and expected_wait_s > policy.max_wait_s
