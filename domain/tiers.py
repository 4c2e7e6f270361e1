"""What each tier gets, and its defaults: the prompt's window, the answer's cap and the token
bucket. One definition for the gateway (gateway/main.py's configuration defaults, the planner)
and the fleet simulator (fleet/sim_gateway.py)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from domain.limiter import Limit
from domain.types import Tier


@dataclass(frozen=True, slots=True)
class TierPolicy:
    # The prompt's budget: system prompt, summary, turns, the new message and the answer's
    # reserve (the context builder fills it, domain/context.py).
    window_tokens: int
    max_answer_tokens: int
    limit: Limit
    # The tier's segment turn (domain/context.py's segment_text: a tone template and profile
    # facts the operator writes), after the system prompt of every stored turn; '' for none.
    segment: str = ""


# A spent bucket is full again in three hours.
BUCKET_REFILL_S: Final = 3 * 3600
# Free: an 8,000-token window and 25,000 weighted tokens (domain/limiter.py) per three hours;
# Plus: four times the window and ten times the budget.
FREE_DEFAULTS: Final = TierPolicy(8_000, 1_000, Limit.refilling_in(25_000, BUCKET_REFILL_S))
PLUS_DEFAULTS: Final = TierPolicy(32_000, 4_000, Limit.refilling_in(250_000, BUCKET_REFILL_S))


def default_tiers() -> dict[Tier, TierPolicy]:
    """Every tier's defaults, in a dict of the caller's own."""
    return {Tier.FREE: FREE_DEFAULTS, Tier.PLUS: PLUS_DEFAULTS}


__all__ = ["BUCKET_REFILL_S", "FREE_DEFAULTS", "PLUS_DEFAULTS", "TierPolicy", "default_tiers"]
