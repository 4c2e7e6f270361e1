"""The daily allowance's pure policy."""

from __future__ import annotations

from domain.budget import (
    BudgetDecision,
    BudgetOutcome,
    DailyAllowance,
    day_of,
    decide,
)
from domain.types import Tier, Usage

ALLOWANCE = DailyAllowance({Tier.FREE: 1000.0, Tier.PLUS: 0.0})


def test_within_the_allowance_the_router_decides() -> None:
    assert decide(ALLOWANCE, Tier.FREE, "large", 999.0) == BudgetDecision(
        "large", BudgetOutcome.WITHIN
    )


def test_past_it_the_large_pool_is_swapped_for_the_small_one_and_says_why() -> None:
    assert decide(ALLOWANCE, Tier.FREE, "large", 1000.0) == BudgetDecision(
        "small", BudgetOutcome.OVER, "daily_budget"
    )
    # Already small: nothing to downgrade, but the record says the user was over.
    assert decide(ALLOWANCE, Tier.FREE, "small", 5000.0) == BudgetDecision(
        "small", BudgetOutcome.OVER
    )


def test_a_tier_without_an_allowance_is_never_downgraded() -> None:
    assert decide(ALLOWANCE, Tier.PLUS, "large", 1e12) == BudgetDecision(
        "large", BudgetOutcome.NONE
    )


def test_tokens_are_weighted_by_the_pools_gpu_cost() -> None:
    usage = Usage(input_tokens=100, cached_tokens=0, output_tokens=25)  # cost 200
    assert ALLOWANCE.weighted("large", usage) == 200.0
    assert ALLOWANCE.weighted("small", usage) == 200.0 * 0.27


def test_the_day_is_the_utc_calendar_day() -> None:
    assert day_of(0.0) == "1970-01-01"
    assert day_of(86_399.0) == "1970-01-01"
    assert day_of(86_400.0) == "1970-01-02"
