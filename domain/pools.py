"""The model pools a message can run on, named once: the router, the ladder's shedding, the
fallback chain, the services' defaults and the fleet simulator all use these names."""

from __future__ import annotations

from typing import Final

# The large model (the 70B): hard messages, and conversations escalated to it.
LARGE_POOL: Final = "large"
# The small model (the 8B): easy messages, Free messages on the ladder's rung 1, summaries.
SMALL_POOL: Final = "small"
POOLS: Final = (SMALL_POOL, LARGE_POOL)

__all__ = ["LARGE_POOL", "POOLS", "SMALL_POOL"]
