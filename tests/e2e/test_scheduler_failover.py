"""Gateways survive their scheduler: two schedulers on a private etcd, two simulated nodes, the
scheduler the gateway picks from SIGKILLed; every later message is still answered by a model,
its pick moved to the other scheduler at once."""

from __future__ import annotations

import asyncio
import signal
import time
import uuid

import aiohttp
import grpc
import pytest

from chat.v1 import scheduler_service_pb2_grpc as pb_grpc
from clients.chatctl.platform import LocalPlatform, PlatformSettings
from domain.errors import InvalidArgument, NoReplica, Unavailable
from domain.types import Tier
from gateway.scheduler_client import CHANNEL_OPTIONS, SchedulerClient
from infra.tls_channel import open_channel
from tests.servers import free_port, run_etcd
from tests.sse import read_events

pytestmark = pytest.mark.slow

# Generous for a loaded 2-core machine; the pick's own retry is one refused connection.
MESSAGE_BOUND_S = 5.0


@pytest.fixture(scope="module")
async def two_schedulers(tmp_path_factory):
    with run_etcd() as etcd:
        platform = LocalPlatform(
            PlatformSettings(
                state_dir=tmp_path_factory.mktemp("scheduler-failover"),
                edge_listen="127.0.0.1:0",
                nodes=2,
                schedulers=2,
                etcd_endpoint=f"127.0.0.1:{etcd.port}",
                extra_env={
                    "CHAT_NODEAGENT_ENGINE": "sim",
                    "CHAT_NODEAGENT_SIM_SPEED": "100",
                    "CHAT_GATEWAY_PLUS_MAX_ANSWER_TOKENS": "16",
                    "CHAT_GATEWAY_ROUTER": "false",
                },
            )
        )
        try:
            await platform.start()
            yield platform
        finally:
            await platform.stop()


async def ask(platform: LocalPlatform, http: aiohttp.ClientSession) -> tuple[list, float]:
    started = time.monotonic()
    async with http.post(
        f"{platform.edge_url}/v1/conversations/c_{uuid.uuid4().hex[:8]}/messages",
        json={"content": "Tell me about rivers."},
        headers={"Authorization": f"Bearer {platform.tokens['plus']}"},
    ) as response:
        assert response.status == 200, await response.text()
        events = await read_events(response)
    return events, time.monotonic() - started


async def test_messages_are_answered_by_a_model_after_the_gateways_scheduler_dies(
    two_schedulers: LocalPlatform,
) -> None:
    platform = two_schedulers
    async with aiohttp.ClientSession() as http:
        events, _ = await ask(platform, http)
        assert events[0].data["model"] != "busy" and events[-1].event == "done"
        # The gateway asks the first scheduler first; kill exactly that one.
        first = next(c for c in platform.children if c.name == "scheduler")
        first.process.send_signal(signal.SIGKILL)
        await first.process.wait()
        for _ in range(6):
            events, seconds = await ask(platform, http)
            meta, done = events[0], events[-1]
            assert meta.event == "meta" and meta.data["model"] != "busy", meta.data
            assert meta.data["replica"] in {"local-small-0", "local-small-1"}
            assert done.event == "done" and done.data["finish"] in {"stop", "length"}, done.data
            assert seconds < MESSAGE_BOUND_S


@pytest.mark.parametrize("pick_stream", [True, False], ids=["stream", "calls"])
async def test_the_client_skips_an_unreachable_scheduler_and_passes_on_real_refusals(
    two_schedulers: LocalPlatform, pick_stream: bool
) -> None:
    # By name: the schedulers are started side by side, so the list is in no fixed order.
    live = next(str(c.ready["grpc"]) for c in two_schedulers.children if c.name == "scheduler-1")
    dead = f"127.0.0.1:{free_port()}"
    gateway_tls = two_schedulers.tls("gateway")
    client = SchedulerClient([dead, live], rpc_timeout_s=5.0, tls=gateway_tls,
                             pick_stream=pick_stream)  # fmt: skip
    try:
        pick = await client.pick("c1", "small", Tier.PLUS, 100)
        assert pick.node_id in {"local-small-0", "local-small-1"}
        assert pick.model and pick.address in two_schedulers.node_addresses()
        # Many at once share the one stream, each answered with its own pick.
        picks = await asyncio.gather(
            *(client.pick(f"c{i}", "small", Tier.PLUS, 100) for i in range(20))
        )
        again = [await client.pick(f"c{i}", "small", Tier.PLUS, 100) for i in range(20)]
        assert [p.node_id for p in again] == [p.node_id for p in picks]
        # A scheduler's own answers are not retried elsewhere: they would be the same.
        excluded = ["local-small-0", "local-small-1"]
        with pytest.raises(NoReplica, match="no replica of pool 'small'"):
            await client.pick("c1", "small", Tier.PLUS, 100, exclude_node_ids=excluded)
        with pytest.raises(InvalidArgument, match="unknown pool"):
            await client.pick("c1", "huge", Tier.PLUS, 100)
    finally:
        await client.close()
    nowhere = SchedulerClient([dead, f"127.0.0.1:{free_port()}"], tls=gateway_tls,
                              pick_stream=pick_stream)  # fmt: skip
    try:
        with pytest.raises(Unavailable, match="no scheduler is reachable"):
            await nowhere.pick("c1", "small", Tier.PLUS, 100)
    finally:
        await nowhere.close()


class ReleaseBeforeTheStream(pb_grpc.SchedulerServiceServicer):
    """A scheduler of a release before PickReplicas: it answers picks by call alone (passed on
    to a real scheduler), the stream with UNIMPLEMENTED, as an older scheduler does."""

    def __init__(self, real: pb_grpc.SchedulerServiceStub) -> None:
        self._real = real

    async def PickReplica(self, request, context):
        try:
            return await self._real.PickReplica(request)
        except grpc.aio.AioRpcError as refused:
            await context.abort(refused.code(), refused.details() or "")


async def test_a_scheduler_without_the_pick_stream_is_asked_by_call(
    two_schedulers: LocalPlatform,
) -> None:
    live = next(str(c.ready["grpc"]) for c in two_schedulers.children if c.name == "scheduler-1")
    real = open_channel(live, two_schedulers.tls("gateway"), CHANNEL_OPTIONS)
    older = grpc.aio.server()
    pb_grpc.add_SchedulerServiceServicer_to_server(
        ReleaseBeforeTheStream(pb_grpc.SchedulerServiceStub(real)), older
    )
    port = older.add_insecure_port("127.0.0.1:0")
    await older.start()
    client = SchedulerClient([f"127.0.0.1:{port}"], rpc_timeout_s=5.0, tls=None)
    try:
        first = await client.pick("c-older", "small", Tier.PLUS, 100)
        assert first.node_id in {"local-small-0", "local-small-1"}
        # Asked by call from then on: the same conversation, the same replica.
        again = await client.pick("c-older", "small", Tier.PLUS, 100)
        assert again.node_id == first.node_id
        with pytest.raises(InvalidArgument, match="unknown pool"):
            await client.pick("c-older", "huge", Tier.PLUS, 100)
    finally:
        await client.close()
        await older.stop(None)
        await real.close()


async def test_a_scheduler_restarted_under_a_held_stream_answers_the_next_picks(
    two_schedulers: LocalPlatform,
) -> None:
    """Its stream ends with the old process; the picks after it reach the new one at once (by
    call, then on a new stream), never 'no scheduler is reachable'. Once its nodes have
    connected again (their reconnection backs off), it picks as before."""
    platform = two_schedulers
    address = next(str(c.ready["grpc"]) for c in platform.children if c.name == "scheduler-1")
    client = SchedulerClient([address], rpc_timeout_s=5.0, tls=platform.tls("gateway"))
    try:
        first = await client.pick("c-restart", "small", Tier.PLUS, 100)
        scheduler = next(c for c in platform.children if c.name == "scheduler-1")
        scheduler.process.send_signal(signal.SIGKILL)
        await platform.restart("scheduler-1")
        deadline = time.monotonic() + 30.0
        while True:
            try:
                again = await client.pick("c-restart", "small", Tier.PLUS, 100)
                break
            except NoReplica:  # the new process has not heard from its nodes yet
                assert time.monotonic() < deadline, "the nodes never came back to it"
                await asyncio.sleep(0.1)
        assert again.node_id in {"local-small-0", "local-small-1"}
        assert first.node_id in {"local-small-0", "local-small-1"}
    finally:
        await client.close()
