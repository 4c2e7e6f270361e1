"""The edge in front of two gateways sharing answers through a real Redis, with simulated
nodes: the gateway an answer streams through is killed mid-answer, and the HTTP client sees a
pause, then the rest of the same answer, ending `done`; with a gateway gone, every call
through the edge still works."""

from __future__ import annotations

import itertools
import time
import uuid
from collections.abc import AsyncIterator

import aiohttp
import pytest

from clients.chatctl.platform import Child, LocalPlatform, PlatformError, PlatformSettings
from tests.faults import kill, streaming_gateway
from tests.servers import Redis
from tests.sse import SseEvent, iter_events

pytestmark = pytest.mark.slow

STORY = "Write a long story about a lighthouse keeper and a storm."
PLUS_ANSWER_TOKENS = 300
FREE_ANSWER_TOKENS = 12


@pytest.fixture(scope="module")
async def platform(
    tmp_path_factory: pytest.TempPathFactory, redis_server: Redis
) -> AsyncIterator[LocalPlatform]:
    local = LocalPlatform(
        PlatformSettings(
            state_dir=tmp_path_factory.mktemp("edge-failover"),
            edge_listen="127.0.0.1:0",
            nodes=2,
            gateways=2,
            # A database of its own: other modules' dead gateways leave runs in theirs, which
            # these gateways would otherwise sweep up and try to finish.
            redis_url=redis_server.url.rsplit("/", 1)[0] + "/3",
            extra_env={
                # A simulated 70B (about 40 tokens a second): a Plus answer streams for ~7 s.
                "CHAT_NODEAGENT_ENGINE": "sim",
                "CHAT_NODEAGENT_SIM_ANSWER_TOKENS": f"{PLUS_ANSWER_TOKENS},{PLUS_ANSWER_TOKENS}",
                "CHAT_GATEWAY_FREE_MAX_ANSWER_TOKENS": str(FREE_ANSWER_TOKENS),
                # Text token by token, so the test can act after the first few deltas.
                "CHAT_GATEWAY_OUTPUT_HOLDBACK_TOKENS": "0",
                "CHAT_GATEWAY_OUTPUT_CHECK_EVERY_TOKENS": "1",
            },
        )
    )
    await local.start()
    yield local
    await local.stop()


@pytest.fixture(autouse=True)
async def gateways_back(platform: LocalPlatform) -> AsyncIterator[None]:
    """Each test starts with both gateways: the ones a test killed start again after it."""
    yield
    for child in list(platform.children):
        if child.name.startswith("gateway") and child.process.returncode is not None:
            await platform.restart(child.name)


def bearer(platform: LocalPlatform, tier: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {platform.tokens[tier]}"}


async def stored_answer(http: aiohttp.ClientSession, url: str, headers: dict[str, str]) -> str:
    async with http.get(url, headers=headers) as response:
        assert response.status == 200
        messages = (await response.json())["messages"]
    assert [m["role"] for m in messages] == ["user", "assistant"]
    return str(messages[1]["content"])


async def test_a_stream_whose_gateway_is_killed_carries_on_to_done(platform) -> None:
    headers = {**bearer(platform, "plus"), "Idempotency-Key": f"m_{uuid.uuid4().hex[:8]}"}
    url = f"{platform.edge_url}/v1/conversations/c_{uuid.uuid4().hex[:8]}/messages"
    events: list[tuple[float, SseEvent]] = []
    killed: Child | None = None
    async with aiohttp.ClientSession() as http:
        async with http.post(url, json={"content": STORY}, headers=headers) as response:
            assert response.status == 200
            async for event in iter_events(response):
                events.append((time.monotonic(), event))
                if killed is None and sum(e.event == "delta" for _, e in events) == 5:
                    killed = await streaming_gateway(http, platform)
                    await kill(killed)
        names = [e.event for _, e in events]
        assert names[0] == "meta" and names[-1] == "done", names[-3:]
        assert "error" not in names
        stored = await stored_answer(http, url, bearer(platform, "plus"))
        async with http.get(f"{platform.edge_url}/metrics") as response:
            metrics = await response.text()

    assert events[-1][1].data["finish"] == "stop"
    assert [e.id for _, e in events] == list(range(1, len(events) + 1))  # no gap, no repeat
    assert "".join(e.data["text"] for _, e in events if e.event == "delta") == stored
    assert 'edge_stream_reattaches_total{outcome="ok"} 1.0' in metrics
    # The client saw a pause (the dead gateway's liveness, 2 s, running out, then the
    # takeover), then the rest at the usual pace.
    assert max(b - a for (a, _), (b, _) in itertools.pairwise(events)) < 10.0


async def test_with_a_gateway_gone_every_call_through_the_edge_works(platform) -> None:
    gone = next(c for c in platform.children if c.name == "gateway")
    await kill(gone)
    headers = bearer(platform, "free")
    conversation = f"c_{uuid.uuid4().hex[:8]}"
    messages_url = f"{platform.edge_url}/v1/conversations/{conversation}/messages"
    async with aiohttp.ClientSession() as http:
        # Several messages: the first call to go to the dead gateway is sent again to the live
        # one; the calls after it pass the dead one over.
        for turn in range(3):
            body = {"content": f"Question {turn}?"}
            async with http.post(messages_url, json=body, headers=headers) as response:
                assert response.status == 200, await response.text()
                answer = [e async for e in iter_events(response)]
            assert [e.event for e in answer][-1:] == ["done"]
        async with http.get(messages_url, headers=headers) as response:
            assert response.status == 200
            stored = (await response.json())["messages"]
        assert [m["role"] for m in stored] == ["user", "assistant"] * 3
        last = stored[-1]["messageId"]
        for path in ("/v1/conversations", f"/v1/conversations/{conversation}", "/v1/limits",
                     f"/v1/messages/{last}"):  # fmt: skip
            async with http.get(platform.edge_url + path, headers=headers) as response:
                assert response.status == 200, (path, await response.text())
        async with http.get(f"{platform.edge_url}/readyz") as response:
            ready = await response.json()
        assert response.status == 200
        assert ready["gateways"][str(gone.ready["grpc"])] == "unreachable"
        async with http.delete(
            f"{platform.edge_url}/v1/conversations/{conversation}", headers=headers
        ) as response:
            assert response.status == 200
            assert await response.json() == {"deleted": True}


async def test_a_gateway_back_from_a_restart_serves_as_soon_as_the_other_dies(platform) -> None:
    """The edge's connection to a restarted gateway waits out a reconnect backoff (up to a few
    seconds); a call that finds the other gateway dead meanwhile waits for it, not a 503."""
    first, second = (c for c in platform.children if c.name.startswith("gateway"))
    headers = bearer(platform, "free")
    url = f"{platform.edge_url}/v1/conversations/c_{uuid.uuid4().hex[:8]}/messages"
    async with aiohttp.ClientSession() as http:
        await kill(second)
        # Calls fail over to the first while the edge's reconnects to the second back off.
        for turn in range(2):
            async with http.post(url, json={"content": f"Before {turn}?"}, headers=headers) as r:
                assert r.status == 200, await r.text()
                assert [e.event async for e in iter_events(r)][-1:] == ["done"]
        await platform.restart(second.name)
        await kill(first)
        async with http.post(url, json={"content": "After?"}, headers=headers) as response:
            assert response.status == 200, await response.text()
            assert [e.event async for e in iter_events(response)][-1:] == ["done"]


async def test_a_running_service_is_not_restarted(platform) -> None:
    """restart() waits a moment for a killed service's exit to be seen, never starts a second
    copy of a live one at its address."""
    live = next(c for c in platform.children if c.name.startswith("gateway"))
    with pytest.raises(PlatformError, match=f"{live.name} is still running"):
        await platform.restart(live.name)
    assert live in platform.children and live.process.returncode is None
