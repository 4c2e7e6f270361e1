"""A run's log while Redis is away, through a relay that falls silent as a partition does: a
short outage costs the answer a pause and loses nothing; past the liveness window the run is
left to the gateway that takes it over."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
from prometheus_client import CollectorRegistry

from gateway.metrics import GatewayMetrics
from gateway.redis_buckets import connect
from gateway.redis_run_sharing import RedisRunSharing
from gateway.runs import Delta, Meta, RunRegistry
from gateway.shared_runs import OwnershipLost, SharedRuns, SharedRunsConfig
from tests.gateway.test_shared_runs import _ids, _plan
from tests.relay import SilentRelay

LIVENESS_S = 1.0


@pytest.fixture
async def sharing(redis_server) -> AsyncIterator[tuple[RedisRunSharing, SilentRelay]]:
    relay = SilentRelay("127.0.0.1", redis_server.port)
    await relay.start()
    # The gateway's own client: each call gives up after half a second.
    redis = connect(f"redis://{relay.address}/0")
    config = SharedRunsConfig(liveness_s=LIVENESS_S, follow_block_s=0.1, keep_after_end_s=30)
    metrics = GatewayMetrics(CollectorRegistry())
    yield RedisRunSharing(SharedRuns(redis, config), RunRegistry(lambda: 0.0), metrics), relay
    relay.thaw()
    await redis.aclose()
    await relay.close()


async def test_a_write_waits_out_a_short_outage_and_the_log_stays_whole(sharing) -> None:
    runs, relay = sharing
    user, message = _ids()
    await runs.shared.claim(user, message, "fp", "c1")
    await runs.shared.record_plan(user, message, _plan(), None)
    write = runs.sink(user, message)
    await write(1, Meta(message, "c1", "m", "node-a"))
    relay.freeze()
    pending = asyncio.create_task(write(2, Delta("through the outage")))
    # The outage itself, shorter than the liveness window, is what is tested.
    await asyncio.sleep(LIVENESS_S / 2)
    assert not pending.done()
    relay.thaw()
    await asyncio.wait_for(pending, LIVENESS_S * 2)
    assert await runs.shared.read_all(user, message) == [
        Meta(message, "c1", "m", "node-a"),
        Delta("through the outage"),
    ]


async def test_past_the_liveness_window_the_run_is_left_to_another_gateway(sharing) -> None:
    runs, relay = sharing
    user, message = _ids()
    await runs.shared.claim(user, message, "fp", "c1")
    await runs.shared.record_plan(user, message, _plan(), None)
    write = runs.sink(user, message)
    relay.freeze()
    loop = asyncio.get_running_loop()
    began = loop.time()
    with pytest.raises(OwnershipLost):
        await write(1, Meta(message, "c1", "m", "node-a"))
    assert LIVENESS_S <= loop.time() - began < LIVENESS_S + 1.0
