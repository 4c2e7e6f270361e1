"""Which model pool a message runs on, and where its conversation stays afterwards.

The KV cache is per model, so a switch re-prefills the whole conversation. Hence: route once
when the conversation starts, escalate small -> large at most once, never come back down. The
ladder's rung 1 overrides this for one Free message at a time without moving the conversation,
so when the rung drops it carries on where it was.

Choices made here (docs/decisions.md, "The router"):
- A Free user's explicit pick is ignored and the message is routed as "auto": picking a model is
  what Plus pays for, and honouring Free picks of large would let anyone bypass the
  router that halves the fleet.
- A Plus pick moves the conversation to the picked pool, also downwards: the user asked for it,
  and their next "auto" message is cheapest where the cache now is.
- A later message in a small conversation escalates only on a real score. With the classifier
  down, the length rule is too crude to spend the one re-prefill on; the next scored message
  can still escalate.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from domain.difficulty import looks_like_code, word_count
from domain.pools import LARGE_POOL, POOLS, SMALL_POOL
from domain.shedding import SheddingPolicy, shed
from domain.types import Tier


class RouteReason(enum.StrEnum):
    """Why a message went where it did; a metrics label, so the set stays small."""

    CLASSIFIER = "classifier"
    FALLBACK_SHORT = "fallback_short"
    FALLBACK_LONG = "fallback_long"
    USER_CHOICE = "user_choice"
    ESCALATED = "escalated"
    STICKY = "sticky"
    SHED = "shed"


@dataclass(frozen=True, slots=True)
class RouteRequest:
    text: str
    tier: Tier
    # The conversation's stored pool; None for its first message.
    conversation_pool: str | None
    # The pool the user picked for this message; None for "auto".
    picked_pool: str | None
    # Probability the message is hard; None when the classifier is down or too slow.
    score: float | None
    # The pool the ladder forces this message onto (Free at rung 1 and up: small); None when
    # the ladder leaves routing alone. See ladder_pool().
    ladder_pool: str | None = None


@dataclass(frozen=True, slots=True)
class RouteDecision:
    # Where this message runs.
    pool: str
    # What to store as the conversation's pool; differs from `pool` only when shed.
    conversation_pool: str
    reason: RouteReason


@dataclass(frozen=True, slots=True)
class Router:
    # Scores below this go small; DifficultyModel.threshold, chosen on held-out data.
    threshold: float
    # Classifier down: messages up to this many words without code go small. A 200-token line
    # (about 150 words) sends 93 % of the shipped set's hard messages small; at 10
    # words it is 12 % of hard and 77 % of easy (data/router/README.md).
    fallback_max_words: int = 10

    def __post_init__(self) -> None:
        if not 0.0 <= self.threshold <= 1.0:
            raise ValueError(f"threshold must be a probability, got {self.threshold}")
        if self.fallback_max_words < 0:
            raise ValueError("fallback_max_words must not be negative")

    def route(self, request: RouteRequest) -> RouteDecision:
        for pool in (request.conversation_pool, request.picked_pool, request.ladder_pool):
            if pool is not None and pool not in POOLS:
                raise ValueError(f"unknown pool {pool!r}")
        routed = self._unshed(request)
        return _apply_ladder(request, routed)

    def _unshed(self, request: RouteRequest) -> RouteDecision:
        if request.picked_pool is not None and request.tier is Tier.PLUS:
            # What Plus pays for; the user accepts the re-prefill a switch costs.
            return _stay(request.picked_pool, RouteReason.USER_CHOICE)
        current = request.conversation_pool
        if current is None:
            return self._first(request)
        if current == SMALL_POOL and request.score is not None and self._hard(request.score):
            return _stay(LARGE_POOL, RouteReason.ESCALATED)
        # Large never comes back down: the saving would not pay for a second re-prefill.
        return _stay(current, RouteReason.STICKY)

    def _first(self, request: RouteRequest) -> RouteDecision:
        if request.score is not None:
            pool = LARGE_POOL if self._hard(request.score) else SMALL_POOL
            return _stay(pool, RouteReason.CLASSIFIER)
        # A crude rule keeps most traffic on small instead of sending everything large, which
        # would need twice the GPUs at peak.
        short = word_count(request.text) <= self.fallback_max_words
        if short and not looks_like_code(request.text):
            return _stay(SMALL_POOL, RouteReason.FALLBACK_SHORT)
        return _stay(LARGE_POOL, RouteReason.FALLBACK_LONG)

    def _hard(self, score: float) -> bool:
        return score >= self.threshold


def _stay(pool: str, reason: RouteReason) -> RouteDecision:
    return RouteDecision(pool, pool, reason)


def _apply_ladder(request: RouteRequest, routed: RouteDecision) -> RouteDecision:
    forced = request.ladder_pool
    # Plus is never shed, whatever the caller passed.
    if forced is None or request.tier is Tier.PLUS or forced == routed.pool:
        return routed
    # This message only: the stored pool stays, so the conversation is back when the rung drops.
    return RouteDecision(forced, routed.conversation_pool, RouteReason.SHED)


def ladder_pool(tier: Tier, rung: int) -> str | None:
    """The pool the ladder's rung forces a message onto, for RouteRequest.ladder_pool.

    Asks domain.shedding, so the rung rule (Free goes small from rung 1; Plus never) lives in
    one place.
    """
    moved = shed(tier, rung, LARGE_POOL, 0, SheddingPolicy()).pool
    return moved if moved != LARGE_POOL else None
