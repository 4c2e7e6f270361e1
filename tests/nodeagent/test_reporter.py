"""The load stream a node sends its schedulers, read from a real simulated engine."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import time

import pytest
import structlog.testing

from chat.v1 import scheduler_service_pb2 as pb
from domain.replica_hardware import H100x4_70B, step_seconds
from fleet.replicas import prefill_tokens_per_s
from nodeagent.changes import Changes
from nodeagent.reporter import AT_ONCE, LoadReporter, NodeIdentity
from nodeagent.request_registry import RequestRegistry, RunningRequest
from nodeagent.sim import SimEngine
from tests.nodeagent.test_sim import ask, started
from tests.servers import free_port


def reporter(engine: SimEngine, **timing: float) -> tuple[LoadReporter, RequestRegistry]:
    """A node's reporter and the registry its requests start in, sharing their changes."""
    accepting = asyncio.Event()
    accepting.set()
    identity = NodeIdentity("n1", "127.0.0.1:1", "small")
    activity = Changes()
    registry = RequestRegistry(engine, activity=activity)
    node = LoadReporter(
        identity, engine, ["127.0.0.1:2"], accepting, activity, registry.__len__, **timing
    )
    return node, registry


async def ended(running: RunningRequest) -> None:
    await running.until_finished()


async def test_an_idle_node_sends_heartbeats_and_a_busy_one_every_change() -> None:
    # Real time: one 70B answer of 160 tokens lasts a few seconds; its KV blocks (16 tokens
    # each) grow several times a second. kv_step 0: every change of the cache goes out.
    async with started(SimEngine(H100x4_70B, speed=1.0, answer_lengths=(160, 160))) as engine:
        node, registry = reporter(engine, interval_s=0.05, heartbeat_s=0.8, kv_step=0.0)
        stream = node.messages()
        first = await anext(stream)
        assert first.HasField("registration") and first.registration.node_id == "n1"
        idle_at = []
        while len(idle_at) < 3:
            assert (await anext(stream)).HasField("load")
            idle_at.append(time.monotonic())
        gaps = [later - earlier for earlier, later in itertools.pairwise(idle_at)]
        assert all(0.75 <= gap < 1.5 for gap in gaps), gaps  # heartbeats only
        busy = asyncio.create_task(ended(registry.start(ask("r1", "Tell me about rivers."))))
        started_at, loads = time.monotonic(), []
        while not busy.done():
            loads.append((await anext(stream)).load)
        await busy
        # Every change went out: well over what heartbeats alone would have sent (2.4-2.7x
        # here; heartbeats alone are at most 1x).
        heartbeats = (time.monotonic() - started_at) / 0.8 + 1
        assert len(loads) >= 1.6 * heartbeats, (len(loads), heartbeats)
        assert any(load.running_requests == 1 for load in loads)


async def test_a_busy_node_sends_what_a_pick_reads_at_once_and_its_cache_growth_by_the_step() -> (
    None
):
    # The same answer with the default step: the cache's growth (well under 2 % of a 70B
    # replica's cache) waits for the heartbeat, here longer than the test, while the start,
    # the prefill and the finish each go within the interval.
    async with started(SimEngine(H100x4_70B, speed=1.0, answer_lengths=(160, 160))) as engine:
        node, registry = reporter(engine, interval_s=0.05, heartbeat_s=60.0)
        stream = node.messages()
        assert (await anext(stream)).HasField("registration")
        idle = (await anext(stream)).load
        assert idle.running_requests == 0
        busy = asyncio.create_task(ended(registry.start(ask("r1", "Tell me about rivers."))))
        loads = []
        async with asyncio.timeout(30):
            while not loads or loads[-1].running_requests or not busy.done():
                loads.append((await anext(stream)).load)
        await busy
        assert loads[0].running_requests + loads[0].waiting_requests == 1  # the start
        assert any(load.running_requests == 1 for load in loads)
        assert loads[-1].running_requests == 0
        # Each report carried news for a pick; none was the cache's growth alone.
        for sent, load in itertools.pairwise([idle, *loads]):
            assert any(getattr(load, name) != getattr(sent, name) for name in AT_ONCE), load
        assert len(loads) <= 8, [(load.running_requests, load.kv_usage) for load in loads]


@pytest.mark.parametrize(
    "timing",
    [{"interval_s": 0.0}, {"interval_s": 2.0, "heartbeat_s": 1.0}, {"kv_step": 1.0}],
)
async def test_bad_report_timing_is_refused(timing: dict[str, float]) -> None:
    async with started(SimEngine(H100x4_70B, speed=200.0)) as engine:
        with pytest.raises(ValueError, match="report"):
            reporter(engine, **timing)


async def test_an_idle_node_reports_a_start_or_a_drain_at_once_not_at_its_heartbeat() -> None:
    """An idle node reads its load only at its heartbeat (here 30 s), yet a request that starts
    or a drain command is reported within a few intervals: the scheduler must not pick a full
    or draining node for a whole heartbeat."""
    async with started(SimEngine(H100x4_70B, speed=1.0, answer_lengths=(400, 400))) as engine:
        node, registry = reporter(engine, interval_s=0.05, heartbeat_s=30.0)
        stream = node.messages()
        assert (await anext(stream)).HasField("registration")
        assert (await anext(stream)).load.running_requests == 0
        loop = asyncio.get_running_loop()
        began = loop.time()
        running = registry.start(ask("r1", "Tell me about rivers."))
        async with asyncio.timeout(5):
            while (await anext(stream)).load.running_requests != 1:
                pass
        assert loop.time() - began < 2.0
        running.cancel()
        async with asyncio.timeout(5):
            while (await anext(stream)).load.running_requests != 0:
                pass
        began = loop.time()
        node.obey(pb.NODE_COMMAND_DRAIN)
        async with asyncio.timeout(5):
            assert (await anext(stream)).load.state == pb.NODE_STATE_DRAINING
        assert loop.time() - began < 2.0


async def test_a_node_backs_off_while_a_scheduler_cannot_be_reached() -> None:
    """Nothing listens at the scheduler's address: the attempts come further and further apart
    (0.1 s doubling, jittered 0.5-1.5x), not ten a second for as long as it is down."""
    dead = f"127.0.0.1:{free_port()}"
    async with started(SimEngine(H100x4_70B, speed=200.0)) as engine:
        accepting = asyncio.Event()
        identity = NodeIdentity("n1", "127.0.0.1:1", "small")
        node = LoadReporter(identity, engine, [dead], accepting, Changes(), lambda: 0)
        with structlog.testing.capture_logs() as logs:
            began = time.monotonic()
            reporting = asyncio.create_task(node.run())
            try:
                for _ in range(1000):  # 20 s at most
                    if sum(e["event"] == "scheduler stream lost" for e in logs) >= 6:
                        break
                    await asyncio.sleep(0.02)
            finally:
                reporting.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await reporting
    assert sum(e["event"] == "scheduler stream lost" for e in logs) >= 6
    # Five waits between six attempts: at least 0.5 x (0.1 + 0.2 + 0.4 + 0.8 + 1.6) s. Without
    # the backoff they were at most 5 x 0.15 s.
    assert time.monotonic() - began >= 1.55


async def test_a_report_carries_the_engines_own_speeds() -> None:
    async with started(SimEngine(H100x4_70B, speed=2.0)) as engine:
        node, _ = reporter(engine)
        load = await node.snapshot()
        # The fleet simulator's figure for the same hardware, twice as fast in real time.
        assert load.prefill_tokens_per_second == pytest.approx(2 * prefill_tokens_per_s(H100x4_70B))
        assert load.decode_step_seconds == pytest.approx(step_seconds(H100x4_70B, 1, 0) / 2)
