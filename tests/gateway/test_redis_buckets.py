"""RedisBuckets against a real Redis: a burst, two gateways, settle, refill, outages, and
agreement with domain.limiter's arithmetic. Every test has a user of its own."""

from __future__ import annotations

import asyncio
import math
import time
import uuid
from collections.abc import AsyncIterator

import pytest
from prometheus_client import CollectorRegistry
from redis.asyncio import Redis

from domain import limiter
from domain.types import Tier
from gateway.metrics import GatewayMetrics
from gateway.redis_buckets import RedisBuckets, bucket_key, connect
from tests.servers import Redis as RedisServer
from tests.servers import free_port

THREE_HOURS = 3 * 3600


@pytest.fixture
async def client(redis_server: RedisServer) -> AsyncIterator[Redis]:
    client = connect(redis_server.url)
    yield client
    await client.aclose()


def new_user() -> str:
    return f"user-{uuid.uuid4().hex}"


def both_tiers(limit: limiter.Limit) -> dict[Tier, limiter.Limit]:
    return {Tier.FREE: limit, Tier.PLUS: limit}


async def test_a_burst_of_30_passes_exactly_the_6_the_bucket_affords(client: Redis) -> None:
    worst = limiter.worst_case_cost(1000, 800)  # 4,200
    limit = limiter.Limit.refilling_in(6 * worst, THREE_HOURS)
    buckets = RedisBuckets(client, both_tiers(limit))
    user = new_user()
    decisions = await asyncio.gather(*(buckets.reserve(user, Tier.FREE, worst) for _ in range(30)))
    assert sum(d.admitted for d in decisions) == 6
    for refused in (d for d in decisions if not d.admitted):
        # Refused right after the sixth admission: the bucket is nearly empty, so the wait is
        # almost a whole worst case's refill.
        assert 0 <= refused.bucket.level < 10
        expected = (worst - refused.bucket.level) / limit.refill_per_s
        assert refused.retry_after_s > 0
        assert math.isclose(refused.retry_after_s, expected, rel_tol=1e-9)


async def test_two_gateways_share_one_bucket(redis_server: RedisServer, client: Redis) -> None:
    limits = both_tiers(limiter.Limit.refilling_in(1000, THREE_HOURS))
    other = connect(redis_server.url)
    try:
        first, second = RedisBuckets(client, limits), RedisBuckets(other, limits)
        user = new_user()
        assert (await first.reserve(user, Tier.FREE, 300)).admitted
        assert (await second.level(user, Tier.FREE)).level == pytest.approx(700, abs=1)
        calls = [g.reserve(user, Tier.FREE, 100) for g in (first, second) for _ in range(10)]
        decisions = await asyncio.gather(*calls)
        assert sum(d.admitted for d in decisions) == 7
        assert (await first.level(user, Tier.FREE)).level == pytest.approx(0, abs=1)
    finally:
        await other.aclose()


async def test_settle_gives_back_the_unused_and_never_exceeds_capacity(client: Redis) -> None:
    buckets = RedisBuckets(client, both_tiers(limiter.Limit.refilling_in(10_000, THREE_HOURS)))
    user = new_user()
    assert (await buckets.reserve(user, Tier.PLUS, 4000)).admitted
    await buckets.settle(user, Tier.PLUS, reserved=4000, actual=1000)
    assert (await buckets.level(user, Tier.PLUS)).level == pytest.approx(9000, abs=1)
    await buckets.settle(user, Tier.PLUS, reserved=4000, actual=0)
    assert (await buckets.level(user, Tier.PLUS)).level == 10_000
    assert not await client.exists(bucket_key(user))  # a full bucket needs no key
    # An answer that overran its reservation takes the difference.
    assert (await buckets.reserve(user, Tier.PLUS, 1000)).admitted
    await buckets.settle(user, Tier.PLUS, reserved=1000, actual=3000)
    assert (await buckets.level(user, Tier.PLUS)).level == pytest.approx(7000, abs=1)


async def test_an_empty_bucket_refills_over_time_and_its_key_expires(client: Redis) -> None:
    limit = limiter.Limit.refilling_in(1000, 2.0)
    buckets = RedisBuckets(client, both_tiers(limit))
    user = new_user()
    emptied = await buckets.reserve(user, Tier.FREE, 1000)
    assert emptied.admitted and emptied.bucket.level == 0
    await asyncio.sleep(1.0)
    half = await buckets.level(user, Tier.FREE)
    assert 450 < half.level < 650
    assert half.level == pytest.approx(emptied.bucket.refilled(limit, half.at).level)
    await asyncio.sleep(1.1)
    assert (await buckets.level(user, Tier.FREE)).level == 1000
    assert not await client.exists(bucket_key(user))
    assert (await buckets.reserve(user, Tier.FREE, 1000)).admitted


async def test_unreachable_redis_lets_plus_in_and_keeps_free_out() -> None:
    dead = connect(f"redis://127.0.0.1:{free_port()}/0", timeout_s=0.2)
    limit = limiter.Limit.refilling_in(25_000, THREE_HOURS)
    try:
        buckets = RedisBuckets(dead, both_tiers(limit))
        user = new_user()
        started = time.monotonic()
        plus = await buckets.reserve(user, Tier.PLUS, 5000)
        free = await buckets.reserve(user, Tier.FREE, 5000)
        await buckets.settle(user, Tier.FREE, reserved=5000, actual=100)  # dropped, no error
        assert time.monotonic() - started < 2
        assert plus.admitted
        assert not free.admitted and free.retry_after_s == 5.0
        assert (await buckets.level(user, Tier.PLUS)).level == 25_000
        assert (await buckets.level(user, Tier.FREE)).level == 0
        flipped = RedisBuckets(dead, both_tiers(limit), {Tier.FREE: True, Tier.PLUS: False})
        assert (await flipped.reserve(user, Tier.FREE, 5000)).admitted
        assert not (await flipped.reserve(user, Tier.PLUS, 5000)).admitted
    finally:
        await dead.aclose()


async def test_after_an_outage_a_fail_open_reservation_is_charged_only_its_use(
    redis_server: RedisServer, client: Redis
) -> None:
    # CLIENT PAUSE makes Redis stall every script: the gateway's calls time out, as when Redis
    # hangs; a timed-out call is never run. When the pause ends the next call reconnects.
    gateway = connect(redis_server.url, timeout_s=0.1)
    try:
        buckets = RedisBuckets(gateway, both_tiers(limiter.Limit.refilling_in(100_000, 3600)))
        user = new_user()
        assert (await buckets.reserve(user, Tier.PLUS, 5000)).admitted
        await client.execute_command("CLIENT", "PAUSE", 400, "WRITE")
        assert (await buckets.reserve(user, Tier.PLUS, 1000)).admitted
        assert not (await buckets.reserve(user, Tier.FREE, 1000)).admitted
        await asyncio.sleep(0.5)
        await buckets.settle(user, Tier.PLUS, reserved=1000, actual=300)
        # 5,000 reserved before the outage, 300 used during it (and about 30 s x 0.6 s refilled).
        assert (await buckets.level(user, Tier.PLUS)).level == pytest.approx(94_700, abs=50)
    finally:
        await gateway.aclose()


async def test_redis_agrees_with_domain_limiter(client: Redis) -> None:
    # Fast refill (100 a second) so the milliseconds between calls matter; each step is replayed
    # on domain.limiter at the time Redis used, starting from the domain's own previous state.
    limit = limiter.Limit.refilling_in(10_000, 100.0)
    buckets = RedisBuckets(client, both_tiers(limit))
    user = new_user()
    model: limiter.Bucket | None = None
    steps = [
        ("reserve", 3000.0, 0.0),
        ("reserve", 4000.0, 0.0),
        ("settle", 4000.0, 1500.0),
        ("reserve", 8000.0, 0.0),  # refused
        ("reserve", 20_000.0, 0.0),  # more than the capacity: never
        ("settle", 3000.0, 3500.0),  # overran
        ("sleep", 0.05, 0.0),
        ("reserve", 2000.0, 0.0),
        ("settle", 2000.0, 0.0),
    ]
    for operation, first, second in steps:
        if operation == "reserve":
            model = await _check_reserve(buckets, user, model, limit, first)
        elif operation == "settle":
            model = await _check_settle(buckets, client, user, model, limit, first, second)
        else:
            await asyncio.sleep(first)
    got = await buckets.level(user, Tier.FREE)
    assert model is not None
    assert got.level == pytest.approx(model.refilled(limit, got.at).level, rel=1e-12)


async def _check_reserve(
    buckets: RedisBuckets,
    user: str,
    model: limiter.Bucket | None,
    limit: limiter.Limit,
    amount: float,
) -> limiter.Bucket:
    got = await buckets.reserve(user, Tier.FREE, amount)
    expected = limiter.reserve(model, limit, got.bucket.at, amount)
    assert got.admitted == expected.admitted
    assert got.bucket.level == pytest.approx(expected.bucket.level, rel=1e-12)
    assert got.retry_after_s == pytest.approx(expected.retry_after_s, rel=1e-9)
    return expected.bucket


async def _check_settle(
    buckets: RedisBuckets,
    client: Redis,
    user: str,
    model: limiter.Bucket | None,
    limit: limiter.Limit,
    reserved: float,
    actual: float,
) -> limiter.Bucket:
    await buckets.settle(user, Tier.FREE, reserved, actual)
    # settle returns nothing: the stored hash says when Redis settled and to what.
    level, at = await client.hmget(bucket_key(user), ["level", "at"])
    expected = limiter.settle(model, limit, float(at), reserved, actual)
    assert float(level) == pytest.approx(expected.level, rel=1e-12)
    return expected


async def test_each_reservation_decided_without_redis_is_counted_by_outcome() -> None:
    dead = connect(f"redis://127.0.0.1:{free_port()}/0", timeout_s=0.2)
    registry = CollectorRegistry()
    metrics = GatewayMetrics(registry)
    limit = limiter.Limit.refilling_in(25_000, THREE_HOURS)
    try:
        buckets = RedisBuckets(
            dead, both_tiers(limit), on_unavailable=metrics.observe_bucket_store_unavailable
        )
        user = new_user()
        for _ in range(2):
            await buckets.reserve(user, Tier.PLUS, 1000)
        await buckets.reserve(user, Tier.FREE, 1000)
        await buckets.settle(user, Tier.PLUS, reserved=1000, actual=10)  # not a decision
    finally:
        await dead.aclose()
    counted = {
        (tier, outcome): registry.get_sample_value(
            "gateway_bucket_store_unavailable_total", {"tier": tier, "outcome": outcome}
        )
        for tier in ("free", "plus")
        for outcome in ("admitted", "refused")
    }
    assert counted == {
        ("free", "admitted"): 0.0,
        ("free", "refused"): 1.0,
        ("plus", "admitted"): 2.0,
        ("plus", "refused"): 0.0,
    }
