"""Held rollout reads on a real etcd: two schedulers share the rollout there, and a read held
at one is answered when the other changes it, within the recheck; a change through the same
scheduler answers at once; nothing changed, the read ends at its wait."""

from __future__ import annotations

import asyncio
import uuid

import aetcd

from domain import rollout
from domain.rollout import Version
from scheduler.rollout import EtcdRolloutStore, RolloutKeeper
from tests.servers import Etcd


def keeper(etcd: Etcd, key: str, recheck_s: float) -> RolloutKeeper:
    client = aetcd.Client(host=etcd.host, port=etcd.port)
    return RolloutKeeper(EtcdRolloutStore(client, key), lambda: 50.0, recheck_s)


async def test_a_held_read_sees_another_schedulers_change_within_the_recheck(
    etcd_server: Etcd,
) -> None:
    key = f"/tests/rollout/{uuid.uuid4().hex}"
    here, there = keeper(etcd_server, key, 0.2), keeper(etcd_server, key, 0.2)
    loop = asyncio.get_running_loop()
    try:
        _, revision = await here.read()
        started = loop.time()
        _, unchanged = await here.read_after(revision, 0.3)
        assert unchanged == revision and loop.time() - started >= 0.3

        held = asyncio.create_task(here.read_after(revision, 20.0))
        await there.change(lambda s, at: rollout.create(s, Version("v-there"), at))
        state, changed = await asyncio.wait_for(held, timeout=5)
        assert changed != revision and state.has("v-there")

        # Through the same keeper no recheck is needed (it is a minute here): the change wakes
        # the held read, or the read, coming second, finds it.
        slow = keeper(etcd_server, key, 60.0)
        try:
            held = asyncio.create_task(slow.read_after(changed, 20.0))
            await slow.change(lambda s, at: rollout.create(s, Version("v-here"), at))
            state, _ = await asyncio.wait_for(held, timeout=5)
            assert state.has("v-here")
        finally:
            await slow.close()
    finally:
        await here.close()
        await there.close()


async def test_a_stopping_scheduler_answers_its_held_reads_at_once(etcd_server: Etcd) -> None:
    held_keeper = keeper(etcd_server, f"/tests/rollout/{uuid.uuid4().hex}", 60.0)
    try:
        _, revision = await held_keeper.read()
        held = asyncio.create_task(held_keeper.read_after(revision, 20.0))
        await held_keeper.release()
        assert (await asyncio.wait_for(held, timeout=5))[1] == revision
        # And a read after the release is not held either.
        assert (await asyncio.wait_for(held_keeper.read_after(revision, 20.0), 5))[1] == revision
    finally:
        await held_keeper.close()
