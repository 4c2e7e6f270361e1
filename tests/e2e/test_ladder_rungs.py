"""The ladder's rungs as users meet them, through the edge, with an operator's pin."""

from __future__ import annotations

import asyncio
import time
import uuid

import aiohttp
import pytest

from chat.v1 import scheduler_service_pb2 as pb
from chat.v1 import scheduler_service_pb2_grpc as pb_grpc
from clients.chatctl.platform import LocalPlatform, PlatformSettings
from tests.sse import read_events

pytestmark = pytest.mark.slow


@pytest.fixture
async def one_slot(tmp_path_factory):
    # One node with one slot: a second answer queued behind a first makes the node "busy".
    # A platform of its own for each test: once an answer has finished, the node reports how
    # long its answers hold the slot, and the wait the refusal reads follows that measure, so
    # an earlier test's short answer would make a queue look short. Plus answers run up to 600
    # tokens, so the first holds the slot well past the moment a report shows the second
    # waiting behind it.
    platform = LocalPlatform(
        PlatformSettings(
            state_dir=tmp_path_factory.mktemp("rungs"),
            edge_listen="127.0.0.1:0",
            nodes=1,
            slot_context_tokens=2048,
            parallel=1,
            extra_env={
                "CHAT_SCHEDULER_PREFILL_TOKENS_PER_S": "1",
                "CHAT_GATEWAY_PLUS_MAX_ANSWER_TOKENS": "600",
                "CHAT_GATEWAY_MAX_OPEN_STREAMS_PER_USER": "10",
            },
        )
    )
    await platform.start()
    yield platform
    await platform.stop()


async def pin(platform: LocalPlatform, rung: int | None) -> None:
    async with platform.channel(platform.scheduler_address) as channel:
        ask = pb.PinLadderRequest() if rung is None else pb.PinLadderRequest(rung=rung)
        await pb_grpc.SchedulerServiceStub(channel).PinLadder(
            ask, metadata=(("authorization", f"Bearer {platform.admin_token}"),)
        )


async def until_a_report_shows_a_queue(platform: LocalPlatform, timeout_s: float = 10.0) -> None:
    """Waits for the scheduler's table (what the ladder and the refusal read) to show the
    node with one answer running and another waiting behind it. A report of one waiting
    request alone can come before the first answer starts, and the node is not busy then."""
    deadline = asyncio.get_running_loop().time() + timeout_s
    admin = (("authorization", f"Bearer {platform.admin_token}"),)
    async with platform.channel(platform.scheduler_address) as channel:
        stub = pb_grpc.SchedulerServiceStub(channel)
        while True:
            nodes = (await stub.ListNodes(pb.ListNodesRequest(), metadata=admin)).nodes
            if any(n.load.running_requests and n.load.waiting_requests for n in nodes):
                return
            assert asyncio.get_running_loop().time() < deadline, "no report showed a queue"
            await asyncio.sleep(0.05)


async def post(http, platform: LocalPlatform, tier: str, content: str):
    return http.post(
        f"{platform.edge_url}/v1/conversations/c_{uuid.uuid4().hex[:8]}/messages",
        json={"content": content},
        headers={
            "Authorization": f"Bearer {platform.tokens[tier]}",
            "Idempotency-Key": uuid.uuid4().hex,
        },
    )


async def post_greedy(http, platform: LocalPlatform, tier: str, content: str):
    """A streamed chat completion at temperature 0: how long the model writes is then the
    same on every run (a sampled story may end after a dozen tokens)."""
    return http.post(
        f"{platform.edge_url}/v1/chat/completions",
        json={
            "model": "auto",
            "stream": True,
            "temperature": 0,
            "messages": [{"role": "user", "content": content}],
        },
        headers={"Authorization": f"Bearer {platform.tokens[tier]}"},
    )


async def test_rung_two_caps_free_answers_and_leaves_plus_alone(one_slot) -> None:
    await pin(one_slot, 2)
    try:
        async with aiohttp.ClientSession() as http:
            async with await post(http, one_slot, "free", "Tell me a long tale.") as response:
                done = (await read_events(response))[-1]
        assert done.data["usage"]["output"] <= 300
    finally:
        await pin(one_slot, None)


async def test_rung_three_refuses_a_waiting_free_message_at_once(one_slot) -> None:
    await pin(one_slot, 3)
    try:
        async with aiohttp.ClientSession() as http:
            long_one = await post_greedy(http, one_slot, "plus", "Write a long story about whales.")
            queued = await post_greedy(http, one_slot, "plus", "Write a long story about owls.")
            async with long_one as first, queued as second:
                assert first.status == second.status == 200
                await until_a_report_shows_a_queue(one_slot)
                started = time.perf_counter()
                async with await post(http, one_slot, "free", "Hi!") as refused:
                    elapsed = time.perf_counter() - started
                    body = await refused.json()
                    assert refused.status == 429, body
                    assert int(refused.headers["Retry-After"]) >= 2
                assert "busy" in body["error"]["message"]
                assert elapsed < 0.5  # goal 100 ms; generous on a shared 2-core machine
                # Plus is never shed: it queues and gets its answer.
                assert (await second.text()).endswith("data: [DONE]\n\n")
                assert (await first.text()).endswith("data: [DONE]\n\n")
    finally:
        await pin(one_slot, None)
