"""The load stream a node sends its schedulers, read from a real simulated engine."""

from __future__ import annotations

import asyncio
import itertools
import time

import pytest

from domain.replica_hardware import H100x4_70B
from nodeagent.reporter import LoadReporter, NodeIdentity
from nodeagent.sim import SimEngine
from tests.nodeagent.test_sim import answer, ask, started


def reporter(engine: SimEngine, **timing: float) -> LoadReporter:
    accepting = asyncio.Event()
    accepting.set()
    identity = NodeIdentity("n1", "127.0.0.1:1", "small")
    return LoadReporter(identity, engine, ["127.0.0.1:2"], accepting, **timing)


async def test_an_idle_node_sends_heartbeats_and_a_busy_one_every_change() -> None:
    # Real time: one 70B answer of 160 tokens lasts a few seconds; its KV blocks (16 tokens
    # each) grow several times a second.
    async with started(SimEngine(H100x4_70B, speed=1.0, answer_lengths=(160, 160))) as engine:
        stream = reporter(engine, interval_s=0.05, heartbeat_s=0.8).messages()
        first = await anext(stream)
        assert first.HasField("registration") and first.registration.node_id == "n1"
        idle_at = []
        while len(idle_at) < 3:
            assert (await anext(stream)).HasField("load")
            idle_at.append(time.monotonic())
        gaps = [later - earlier for earlier, later in itertools.pairwise(idle_at)]
        assert all(0.75 <= gap < 1.5 for gap in gaps), gaps  # heartbeats only
        busy = asyncio.create_task(answer(engine, ask("r1", "Tell me about rivers.")))
        started_at, loads = time.monotonic(), []
        while not busy.done():
            loads.append((await anext(stream)).load)
        await busy
        # Every change went out: well over what heartbeats alone would have sent (2.4-2.7x
        # here; heartbeats alone are at most 1x).
        heartbeats = (time.monotonic() - started_at) / 0.8 + 1
        assert len(loads) >= 1.6 * heartbeats, (len(loads), heartbeats)
        assert any(load.running_requests == 1 for load in loads)


@pytest.mark.parametrize("timing", [{"interval_s": 0.0}, {"interval_s": 2.0, "heartbeat_s": 1.0}])
async def test_bad_report_timing_is_refused(timing: dict[str, float]) -> None:
    async with started(SimEngine(H100x4_70B, speed=200.0)) as engine:
        with pytest.raises(ValueError, match="report"):
            reporter(engine, **timing)
