"""Regions sharing one real Redis, each under the key prefix `chatctl up --regions` gives it
(clients/chatctl/regions.py): one region's buckets, daily spend, runs and stops are not
another's, while a region's own gateways still share theirs."""

from __future__ import annotations

import asyncio
import dataclasses
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest
from redis.asyncio import Redis

from clients.chatctl.regions import region_redis_prefix
from domain import limiter
from domain.context import Prompt
from domain.types import Role, Tier, Turn
from gateway.answers import AnswerPlan
from gateway.daily_budget import RedisDailySpend
from gateway.main import GatewayConfig, connect_redis
from gateway.redis_buckets import RedisBuckets, bucket_key, connect
from gateway.runs import Meta
from gateway.scheduler_client import ReplicaPick
from gateway.shared_runs import SharedRuns, SharedRunsConfig
from infra.config import ConfigError
from tests.servers import Redis as RedisServer

A, B = region_redis_prefix("a"), region_redis_prefix("b")
FAST = SharedRunsConfig(liveness_s=0.6, follow_block_s=0.1, keep_after_end_s=30)
THREE_HOURS = 3 * 3600


@pytest.fixture
async def client(redis_server: RedisServer) -> AsyncIterator[Redis]:
    client = connect(redis_server.url, timeout_s=5.0)
    yield client
    await client.aclose()


def _runs(client: Redis, prefix: str) -> SharedRuns:
    return SharedRuns(client, dataclasses.replace(FAST, key_prefix=prefix))


def _plan() -> AnswerPlan:
    prompt = Prompt((Turn(Role.USER, "Hi there", 2),), 0)
    pick = ReplicaPick(node_id="node-a", address="127.0.0.1:1", model="m", context_tokens=2048)
    return AnswerPlan(prompt, pick, 64, 123.5, "small", Tier.PLUS)


def _user() -> str:
    return f"u-{uuid.uuid4().hex[:8]}"


def test_the_regions_prefixes_hold_neither_each_other_nor_the_default() -> None:
    assert (A, B) == ("chat:regions:a:", "chat:regions:b:")
    assert not region_redis_prefix("ab").startswith(A)


async def test_a_user_who_drained_region_a_still_has_a_full_bucket_in_region_b(client) -> None:
    limits = {tier: limiter.Limit.refilling_in(1000, THREE_HOURS) for tier in Tier}
    at_a, again_at_a = (
        RedisBuckets(client, limits, prefix=A),
        RedisBuckets(client, limits, prefix=A),
    )
    at_b = RedisBuckets(client, limits, prefix=B)
    user = _user()
    assert (await at_a.reserve(user, Tier.PLUS, 1000)).admitted
    # A's other gateway sees the same empty bucket; b's is whole.
    refused = await again_at_a.reserve(user, Tier.PLUS, 100)
    assert (refused.admitted, refused.retry_after_s > 0) == (False, True)
    assert (await at_b.level(user, Tier.PLUS)).level == pytest.approx(1000)
    assert (await at_b.reserve(user, Tier.PLUS, 600)).admitted
    assert (await at_a.level(user, Tier.PLUS)).level == pytest.approx(0, abs=1)
    assert await client.exists(bucket_key(user, A), bucket_key(user, B)) == 2
    assert not await client.exists(bucket_key(user))


async def test_a_days_spend_in_region_a_is_not_region_bs(client) -> None:
    user = _user()
    await RedisDailySpend(client, A).add(user, "2026-12-03", 250.0)
    assert await RedisDailySpend(client, A).spent(user, "2026-12-03") == 250.0
    assert await RedisDailySpend(client, B).spent(user, "2026-12-03") == 0.0


async def test_region_bs_gateways_never_take_over_or_follow_region_as_runs(client) -> None:
    owner, heir, stranger = _runs(client, A), _runs(client, A), _runs(client, B)
    user, message = _user(), f"m-{uuid.uuid4().hex[:8]}"
    # Never kept alive: its owner is dead from the start, so a's sweepers see an orphan.
    await owner.claim(user, message, "fp", "c1")
    await owner.record_plan(user, message, _plan(), None)
    await owner.append(user, message, 1, Meta(message, "c1", "m", "node-a"))
    assert (user, message) in await heir.orphans()
    assert (user, message) not in await stranger.orphans()
    assert await stranger.exists(user, message) is None
    assert await stranger.take_over(user, message) is None
    # The same message id is free in b: a claim there is b's own.
    assert await stranger.claim(user, message, "fp-b", "c9") is None
    taken = await heir.take_over(user, message)
    assert taken is not None and (taken.conversation_id, taken.fingerprint) == ("c1", "fp")


async def test_a_stop_asked_in_region_a_reaches_only_region_as_gateways(client) -> None:
    a_owner, a_asker = _runs(client, A), _runs(client, A)
    b_owner, b_asker = _runs(client, B), _runs(client, B)
    user, message, other = _user(), f"m-{uuid.uuid4().hex[:8]}", f"m-{uuid.uuid4().hex[:8]}"
    for runs, message_id in ((a_owner, message), (b_owner, message), (b_owner, other)):
        await runs.claim(user, message_id, "fp", "c1")
        await runs.record_plan(user, message_id, _plan(), None)
    heard: dict[str, asyncio.Queue[tuple[str, str]]] = {A: asyncio.Queue(), B: asyncio.Queue()}

    def listener(prefix: str) -> Callable[[str, str], Awaitable[None]]:
        async def on_stop(user_id: str, message_id: str) -> None:
            await heard[prefix].put((user_id, message_id))

        return on_stop

    watchers = [
        asyncio.create_task(a_owner.watch_stops(listener(A))),
        asyncio.create_task(b_owner.watch_stops(listener(B))),
    ]
    try:
        async with asyncio.timeout(10):
            await _until_subscribed(client, A + "stop", B + "stop")
            assert await a_asker.ask_stop(user, message) is True
            assert await b_asker.ask_stop(user, other) is True
            assert await heard[A].get() == (user, message)
            # b's first stop is its own, asked after a's: a's never reached b.
            assert await heard[B].get() == (user, other)
    finally:
        for watcher in watchers:
            watcher.cancel()
        await asyncio.gather(*watchers, return_exceptions=True)


async def _until_subscribed(client: Redis, *channels: str) -> None:
    """Returns once each channel has its one subscriber (a watcher subscribes on its own)."""
    wanted = {channel.encode(): 1 for channel in channels}
    while (seen := dict(await client.pubsub_numsub(*channels))) != wanted:
        assert all(count <= 1 for count in seen.values()), seen
        await asyncio.sleep(0.01)


def test_a_prefix_without_its_colon_is_refused() -> None:
    config = GatewayConfig(buckets="redis", redis_prefix="chat:regions:a")
    with pytest.raises(ConfigError, match="redis_prefix must end with ':'"):
        connect_redis(config)
