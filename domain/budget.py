"""The daily allowance: besides the 3-hour token bucket, each user may spend so many
GPU-cost-weighted tokens a day (per tier); past it their messages go to the small pool
instead of being refused.

Weighted tokens are domain/limiter.py's cost (uncached input + 0.1 x cached + 4 x output)
times the serving pool's GPU cost relative to the large pool: sizing 000 puts a message at
0.67 GPU-s on the 70B and 0.18 on the 8B, so a small-pool token weighs 0.27 of a large one
and a user past the allowance still gets answers, at about a quarter of the cost. A day is a
UTC calendar day: every user's allowance renews at the same moment, which operators and
users can both predict.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from enum import StrEnum

from domain import limiter
from domain.pools import LARGE_POOL, SMALL_POOL
from domain.types import Tier, Usage

# GPU-seconds per message on each pool over the large pool's (sizing 000: 0.18 / 0.67).
DEFAULT_POOL_WEIGHTS = {LARGE_POOL: 1.0, SMALL_POOL: 0.27}
DOWNGRADE_REASON = "daily_budget"
DAY_S = 86_400


class BudgetOutcome(StrEnum):
    # The tier has no daily allowance.
    NONE = ""
    WITHIN = "within"
    OVER = "over"


@dataclass(frozen=True, slots=True)
class DailyAllowance:
    # Weighted tokens per user per UTC day, per tier; 0 (or a tier not named): no allowance.
    per_tier: dict[Tier, float] = field(default_factory=dict)
    pool_weights: dict[str, float] = field(default_factory=lambda: dict(DEFAULT_POOL_WEIGHTS))

    def of(self, tier: Tier) -> float:
        return self.per_tier.get(tier, 0.0)

    def weighted(self, pool: str, usage: Usage) -> float:
        return limiter.usage_cost(usage) * self.pool_weights.get(pool, 1.0)


@dataclass(frozen=True, slots=True)
class BudgetDecision:
    pool: str
    outcome: BudgetOutcome
    # Why the pool is smaller than the router's ('' when it is not).
    downgraded: str = ""


def decide(allowance: DailyAllowance, tier: Tier, routed_pool: str, spent: float) -> BudgetDecision:
    """Where a message runs given what its user spent today: past the allowance, the small
    pool (a message the router already sent there stays, marked over)."""
    limit = allowance.of(tier)
    if limit <= 0:
        return BudgetDecision(routed_pool, BudgetOutcome.NONE)
    if spent < limit:
        return BudgetDecision(routed_pool, BudgetOutcome.WITHIN)
    if routed_pool == SMALL_POOL:
        return BudgetDecision(SMALL_POOL, BudgetOutcome.OVER)
    return BudgetDecision(SMALL_POOL, BudgetOutcome.OVER, DOWNGRADE_REASON)


def day_of(now_s: float) -> str:
    """The UTC day a wall-clock time falls in, as YYYY-MM-DD (the spend's key)."""
    return time.strftime("%Y-%m-%d", time.gmtime(now_s))
