"""The ladder's shared state and its single mover, on real etcd."""

from __future__ import annotations

import asyncio
import uuid

import aetcd
import pytest

from domain.ladder import LadderPolicy, LadderState
from domain.picker import ReplicaLoad
from domain.types import NodeState
from scheduler.ladder import EtcdLadderStore, InProcessLadderStore, LadderKeeper
from scheduler.table import LoadTable


def client(etcd_server) -> aetcd.Client:
    return aetcd.Client(
        host=etcd_server.host, port=etcd_server.port, timeout=5.0
    )  # generous: a busy CI disk slows etcd's fsync


def hot_table(kv_usage: float, small_kv_usage: float | None = None) -> LoadTable:
    table = LoadTable(lambda: 0.0)
    pools = [("large", kv_usage)] + ([] if small_kv_usage is None else [("small", small_kv_usage)])
    for pool, usage in pools:
        for i in range(4):
            table.join(
                ReplicaLoad(f"{pool}{i}", "a", pool, "m", NodeState.READY, 10, 0, kv_usage=usage),
                4096,
                8192,
            )
    return table


async def test_writes_are_compare_and_swap(etcd_server) -> None:
    store = EtcdLadderStore(client(etcd_server), "s1", prefix=f"/t/{uuid.uuid4().hex}/")
    try:
        state, version = await store.read()
        assert (state, version) == (LadderState(), 0)
        assert await store.write(LadderState(rung=1), version)
        assert not await store.write(LadderState(rung=2), version)  # stale version
        state, newer = await store.read()
        assert state.rung == 1 and newer > version
    finally:
        await store.close()


async def test_exactly_one_of_two_schedulers_leads_and_the_lead_passes_on(etcd_server) -> None:
    prefix = f"/t/{uuid.uuid4().hex}/"
    first = EtcdLadderStore(client(etcd_server), "s1", prefix=prefix, leader_ttl_s=2)
    second = EtcdLadderStore(client(etcd_server), "s2", prefix=prefix, leader_ttl_s=2)
    try:
        leads = [await first.is_leader(), await second.is_leader()]
        assert leads == [True, False]
        assert [await first.is_leader(), await second.is_leader()] == [True, False]
        await first.close()  # revokes its lease: the lead is free at once
        assert await second.is_leader()
    finally:
        await second.close()


async def test_the_leader_moves_the_rung_and_the_follower_serves_the_same(etcd_server) -> None:
    prefix = f"/t/{uuid.uuid4().hex}/"
    table = hot_table(kv_usage=0.99)
    keepers = [
        LadderKeeper(
            EtcdLadderStore(client(etcd_server), name, prefix=prefix),
            table,
            "large",
            LadderPolicy(),
            clock=asyncio.get_running_loop().time,
            tick_s=0.2,
            read_s=0.05,
        )
        for name in ("s1", "s2")
    ]
    tasks = [asyncio.create_task(k.run()) for k in keepers]
    try:

        async def climbed() -> bool:
            return all(k.state.rung == 3 for k in keepers)

        await _eventually(climbed, 10)
        assert sum(k.leading for k in keepers) == 1
        history = keepers[0].state.history
        assert [(c.from_rung, c.to_rung) for c in history] == [(0, 1), (1, 2), (2, 3)]
        pinned = await keepers[1].pin(0)  # from the follower
        assert pinned.effective_rung == 0

        async def both_pinned() -> bool:
            return all(k.state.effective_rung == 0 for k in keepers)

        await _eventually(both_pinned, 5)
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for keeper in keepers:
            await keeper.close()


async def test_with_etcd_gone_the_last_rung_stays_the_lead_is_given_up_nothing_crashes() -> None:
    store = EtcdLadderStore(aetcd.Client(host="127.0.0.1", port=1, timeout=0.2), "s1")
    keeper = LadderKeeper(
        store, hot_table(0.99), "large", LadderPolicy(), clock=lambda: 0.0, tick_s=0.01, read_s=0.01
    )
    keeper.state = LadderState(rung=2)
    # It led before etcd went: without etcd it cannot know its lease still holds, so it stops
    # saying it leads (another scheduler takes the lead once the lease lapses).
    keeper.leading = True
    task = asyncio.create_task(keeper.run())
    await asyncio.sleep(0.5)
    assert not task.done() and keeper.state.rung == 2
    assert not keeper.leading
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    with pytest.raises((aetcd.ClientError, TimeoutError)):
        await keeper.pin(1)
    await keeper.close()


def _fast_keeper(table: LoadTable) -> LadderKeeper:
    """A keeper of its own in-process store that ticks every 50 ms."""
    return LadderKeeper(
        InProcessLadderStore(),
        table,
        "large",
        LadderPolicy(),
        clock=asyncio.get_running_loop().time,
        tick_s=0.05,
        read_s=0.01,
    )


async def test_in_process_store_ticks_on_its_own() -> None:
    keeper = _fast_keeper(hot_table(0.9))
    task = asyncio.create_task(keeper.run())
    try:

        async def moved() -> bool:
            return keeper.state.rung == 1 and keeper.state.busy_share == pytest.approx(0.9)

        await _eventually(moved, 5)
        await asyncio.sleep(0.2)
        assert keeper.state.rung == 1  # 90 % is under the next line (92 %)
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


async def test_after_free_moves_to_the_small_pool_its_heat_climbs_the_ladder() -> None:
    # The large pool reads 88 %: rung 1 and no further on its own. The small pool, where rung 1
    # sends Free, reads 98 %: from rung 1 on the ladder reads it, and climbs to refusing.
    keeper = _fast_keeper(hot_table(0.88, small_kv_usage=0.98))
    task = asyncio.create_task(keeper.run())
    try:

        async def refusing() -> bool:
            return keeper.state.rung == 3

        await _eventually(refusing, 5)
        assert [(c.from_rung, c.to_rung) for c in keeper.state.history] == [(0, 1), (1, 2), (2, 3)]
        assert keeper.state.history[0].busy_share == pytest.approx(0.88)
        assert keeper.state.history[-1].busy_share == pytest.approx(0.98)
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


async def _eventually(check, timeout_s: float) -> None:
    deadline = asyncio.get_running_loop().time() + timeout_s
    while not await check():
        assert asyncio.get_running_loop().time() < deadline, "condition not reached in time"
        await asyncio.sleep(0.05)
