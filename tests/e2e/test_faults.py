"""Faults with real processes: two schedulers on a private etcd, two llama.cpp nodes, Redis
buckets and a PostgreSQL store. A killed node stops being picked; etcd going away stops no
pick; both schedulers agree on the fleet and the rung."""

from __future__ import annotations

import asyncio
import signal
import uuid

import aetcd
import aiohttp
import grpc
import pytest

from chat.v1 import scheduler_service_pb2 as pb
from chat.v1 import scheduler_service_pb2_grpc as pb_grpc
from clients.chatctl.platform import LocalPlatform, PlatformSettings
from tests.servers import free_port, run_etcd
from tests.sse import read_events

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
async def fleet(tmp_path_factory, redis_server, postgres_server):
    etcd_port = free_port()
    etcd = run_etcd(etcd_port)
    etcd.__enter__()
    platform = LocalPlatform(
        PlatformSettings(
            state_dir=tmp_path_factory.mktemp("faults"),
            edge_listen="127.0.0.1:0",
            nodes=2,
            schedulers=2,
            slot_context_tokens=2048,
            parallel=1,
            etcd_endpoint=f"127.0.0.1:{etcd_port}",
            redis_url=redis_server.url,
            store_url=postgres_server.dsn,
            extra_env={"CHAT_GATEWAY_FREE_MAX_ANSWER_TOKENS": "24"},
        )
    )
    await platform.start()
    state = {"platform": platform, "etcd": etcd, "etcd_port": etcd_port}
    yield state
    await platform.stop()
    state["etcd"].__exit__(None, None, None)


ADMIN_HEADER = "authorization"


def admin(platform: LocalPlatform) -> tuple[tuple[str, str]]:
    return ((ADMIN_HEADER, f"Bearer {platform.admin_token}"),)


async def on_each_scheduler(platform: LocalPlatform, call):
    results = []
    for address in platform.scheduler_addresses():
        async with platform.channel(address) as channel:
            results.append(await call(pb_grpc.SchedulerServiceStub(channel)))
    return results


async def ready_nodes(platform: LocalPlatform) -> list[set[str]]:
    async def listed(stub):
        nodes = (await stub.ListNodes(pb.ListNodesRequest(), metadata=admin(platform))).nodes
        return {n.registration.node_id for n in nodes if n.load.state == pb.NODE_STATE_READY}

    return await on_each_scheduler(platform, listed)


async def eventually(check, timeout_s: float) -> float:
    loop = asyncio.get_running_loop()
    start = loop.time()
    while not await check():
        assert loop.time() - start < timeout_s, "condition not reached in time"
        await asyncio.sleep(0.1)
    return loop.time() - start


async def ask_one_message(platform: LocalPlatform) -> list:
    async with (
        aiohttp.ClientSession() as http,
        http.post(
            f"{platform.edge_url}/v1/conversations/c_{uuid.uuid4().hex[:8]}/messages",
            json={"content": "Say hi."},
            headers={"Authorization": f"Bearer {platform.tokens['plus']}"},
        ) as response,
    ):
        assert response.status == 200, await response.text()
        return await read_events(response)


async def test_two_schedulers_share_membership_and_the_rung(fleet) -> None:
    platform = fleet["platform"]
    both = {"local-small-0", "local-small-1"}

    async def agreed() -> bool:
        return all(view == both for view in await ready_nodes(platform))

    await eventually(agreed, 10)
    async with aetcd.Client(host="127.0.0.1", port=fleet["etcd_port"]) as etcd:
        keys = {
            kv.key.decode().rsplit("/", 1)[-1]
            async for kv in _aiter(await etcd.get_prefix(b"/chat/v1/nodes/"))
        }
    assert keys == both

    first, second = platform.scheduler_addresses()
    async with platform.channel(second) as channel:
        await pb_grpc.SchedulerServiceStub(channel).PinLadder(
            pb.PinLadderRequest(rung=1), metadata=admin(platform)
        )

    async def same_rung() -> bool:
        ladders = await on_each_scheduler(
            platform, lambda s: s.GetLadder(pb.GetLadderRequest(), metadata=admin(platform))
        )
        return [(lad.rung, lad.pinned) for lad in ladders] == [(1, True), (1, True)]

    await eventually(same_rung, 5)
    ladders = await on_each_scheduler(
        platform, lambda s: s.GetLadder(pb.GetLadderRequest(), metadata=admin(platform))
    )
    assert sorted(lad.leading for lad in ladders) == [False, True]
    async with platform.channel(first) as channel:
        await pb_grpc.SchedulerServiceStub(channel).PinLadder(
            pb.PinLadderRequest(), metadata=admin(platform)
        )


async def test_with_etcd_stopped_picks_go_on_and_membership_converges_after(fleet) -> None:
    platform = fleet["platform"]
    fleet["etcd"].__exit__(None, None, None)  # etcd is gone
    events = await ask_one_message(platform)
    assert events[-1].event == "done", events[-1].data
    assert all(view for view in await ready_nodes(platform))
    fleet["etcd"] = run_etcd(fleet["etcd_port"])  # a fresh etcd that knows nothing
    fleet["etcd"].__enter__()

    async def converged() -> bool:
        try:
            async with aetcd.Client(host="127.0.0.1", port=fleet["etcd_port"]) as etcd:
                found = await etcd.get_prefix(b"/chat/v1/nodes/")
                names = {kv.key.decode().rsplit("/", 1)[-1] async for kv in _aiter(found)}
        except (aetcd.ClientError, grpc.aio.AioRpcError):
            return False
        return names == {"local-small-0", "local-small-1"}

    await eventually(converged, 15)


async def test_a_killed_node_stops_being_picked_within_three_seconds(fleet) -> None:
    platform = fleet["platform"]
    victim = next(c for c in platform.children if c.name == "nodeagent-1")
    victim.process.send_signal(signal.SIGKILL)

    async def out_everywhere() -> bool:
        return all("local-small-1" not in view for view in await ready_nodes(platform))

    try:
        assert await eventually(out_everywhere, 3) < 3
        for _ in range(5):
            events = await ask_one_message(platform)
            assert events[0].data["replica"] == "local-small-0"
            assert events[-1].event == "done", events[-1].data
    finally:
        # The fleet is whole again for whichever test runs next in this module.
        await victim.process.wait()
        await platform.restart("nodeagent-1")
        both = {"local-small-0", "local-small-1"}

        async def back_everywhere() -> bool:
            return all(view == both for view in await ready_nodes(platform))

        await eventually(back_everywhere, 60)


async def _aiter(items):
    for item in items:
        yield item
