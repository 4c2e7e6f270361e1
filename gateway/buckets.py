"""Per-user token buckets held in this process: the local platform's embedded default.

Production uses the Redis script (gateway.redis_buckets); the arithmetic is domain.limiter's.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from domain import limiter
from domain.types import Tier


class Buckets(Protocol):
    """What the pipeline and the servicer need of a bucket store: in process or in Redis."""

    def limit(self, tier: Tier) -> limiter.Limit: ...

    async def reserve(self, user_id: str, tier: Tier, amount: float) -> limiter.Decision: ...

    async def settle(self, user_id: str, tier: Tier, reserved: float, actual: float) -> None: ...

    async def level(self, user_id: str, tier: Tier) -> limiter.Bucket: ...


class InProcessBuckets:
    def __init__(self, limits: dict[Tier, limiter.Limit], clock: Callable[[], float]) -> None:
        self._limits = limits
        self._clock = clock
        self._buckets: dict[str, limiter.Bucket] = {}

    def limit(self, tier: Tier) -> limiter.Limit:
        return self._limits[tier]

    async def reserve(self, user_id: str, tier: Tier, amount: float) -> limiter.Decision:
        decision = limiter.reserve(
            self._buckets.get(user_id), self._limits[tier], self._clock(), amount
        )
        self._buckets[user_id] = decision.bucket
        return decision

    async def settle(self, user_id: str, tier: Tier, reserved: float, actual: float) -> None:
        self._buckets[user_id] = limiter.settle(
            self._buckets.get(user_id), self._limits[tier], self._clock(), reserved, actual
        )

    async def level(self, user_id: str, tier: Tier) -> limiter.Bucket:
        limit = self._limits[tier]
        now = self._clock()
        return (self._buckets.get(user_id) or limiter.Bucket(limit.capacity, now)).refilled(
            limit, now
        )
