"""The daily allowance at the gateway (domain/budget.py decides): what each user spent today,
kept in this process or, with buckets in Redis, in Redis so every gateway sees the same
figure. Past the allowance a message goes to the small pool; it is never refused for it."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Protocol

import structlog
from redis.asyncio import Redis
from redis.exceptions import RedisError

from domain.budget import DAY_S, BudgetDecision, BudgetOutcome, DailyAllowance, day_of, decide
from domain.types import Usage, User
from gateway.metrics import GatewayMetrics
from gateway.redis_buckets import REDIS_PREFIX

KEY_PREFIX = REDIS_PREFIX + "v1:spend:"


class DailySpend(Protocol):
    async def spent(self, user_id: str, day: str) -> float: ...

    async def add(self, user_id: str, day: str, amount: float) -> None: ...


class InProcessDailySpend:
    def __init__(self) -> None:
        self._day = ""
        self._spent: dict[str, float] = {}

    def _roll(self, day: str) -> None:
        # One day at a time: yesterday's figures are never read again.
        if day != self._day:
            self._day, self._spent = day, {}

    async def spent(self, user_id: str, day: str) -> float:
        self._roll(day)
        return self._spent.get(user_id, 0.0)

    async def add(self, user_id: str, day: str, amount: float) -> None:
        self._roll(day)
        self._spent[user_id] = self._spent.get(user_id, 0.0) + amount


class RedisDailySpend:
    """One float per user and day; it expires a day after the day ends."""

    def __init__(self, redis: Redis, prefix: str = REDIS_PREFIX) -> None:
        self._redis = redis
        self._key_prefix = prefix + "v1:spend:"

    async def spent(self, user_id: str, day: str) -> float:
        value = await self._redis.get(f"{self._key_prefix}{day}:{user_id}")
        return float(value) if value is not None else 0.0

    async def add(self, user_id: str, day: str, amount: float) -> None:
        key = f"{self._key_prefix}{day}:{user_id}"
        async with self._redis.pipeline(transaction=True) as pipe:
            pipe.incrbyfloat(key, amount)
            pipe.expire(key, 2 * DAY_S)
            await pipe.execute()


class DailyBudget:
    def __init__(
        self,
        allowance: DailyAllowance,
        spend: DailySpend,
        metrics: GatewayMetrics,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._allowance = allowance
        self._spend = spend
        self._metrics = metrics
        self._clock = clock
        self._log = structlog.get_logger(component="daily_budget")

    async def decide(self, user: User, routed_pool: str) -> BudgetDecision:
        if self._allowance.of(user.tier) <= 0:
            return BudgetDecision(routed_pool, BudgetOutcome.NONE)
        try:
            spent = await self._spend.spent(user.user_id, day_of(self._clock()))
        except RedisError as error:
            # The allowance is a cost control, not a safety one: with its store away the
            # router's decision stands rather than a user being downgraded for nothing.
            self._log.warning("daily spend unreadable; not applied", error=type(error).__name__)
            return BudgetDecision(routed_pool, BudgetOutcome.NONE)
        decision = decide(self._allowance, user.tier, routed_pool, spent)
        if decision.downgraded:
            self._metrics.budget_downgrades.labels(user.tier.value).inc()
            self._log.info("over the daily allowance; sent to the small pool",
                           user_id=user.user_id, spent=round(spent),
                           allowance=self._allowance.of(user.tier))  # fmt: skip
        return decision

    async def charge(self, user: User, pool: str, usage: Usage) -> None:
        if self._allowance.of(user.tier) <= 0:
            return
        amount = self._allowance.weighted(pool, usage)
        try:
            await self._spend.add(user.user_id, day_of(self._clock()), amount)
        except RedisError as error:
            self._log.warning("daily spend not recorded", error=type(error).__name__,
                              amount=round(amount))  # fmt: skip
