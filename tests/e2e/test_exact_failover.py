"""Failover, proven exact: with the simulated engine an answer is a function of its prompt, so
the whole text a user saw across a fault must be the answer the same prompt gets uninterrupted,
character for character. Comparing the streamed text with the stored one is not enough: both
come from the same gateway buffer, so an answer that started again after the fault, or repeated
its last words, would pass that.

One platform: the edge, two gateways sharing answers through Redis, two simulated replicas
(about 40 tokens a second, so an answer streams for 4-7 s)."""

from __future__ import annotations

import itertools
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import aiohttp
import openai
import pytest

from clients.admin_client import AdminClient
from clients.chatctl.platform import LocalPlatform, PlatformSettings
from tests.faults import kill, restart_the_dead, serving_node, streaming_gateway
from tests.servers import Redis
from tests.simtext import expected_answer
from tests.sse import SseEvent, iter_events

pytestmark = pytest.mark.slow

SYSTEM_PROMPT = "You are a careful assistant."
ANSWER_TOKENS = (200, 260)
# Below every planned answer: a Plus answer ends at the cap, which a continuation must keep to.
PLUS_CAP = 160
KILL_AFTER_DELTAS = 5
# Generous: bench/faults.py measures the pauses themselves against their goals.
PAUSE_BOUND_S = 8.0

Act = Callable[[aiohttp.ClientSession, LocalPlatform, str], Awaitable[None]]


@pytest.fixture(scope="module")
async def platform(
    tmp_path_factory: pytest.TempPathFactory, redis_server: Redis
) -> AsyncIterator[LocalPlatform]:
    local = LocalPlatform(
        PlatformSettings(
            state_dir=tmp_path_factory.mktemp("exact-failover"),
            edge_listen="127.0.0.1:0",
            nodes=2,
            gateways=2,
            # A database of its own: no other module's orphaned runs to sweep up.
            redis_url=redis_server.url.rsplit("/", 1)[0] + "/4",
            extra_env={
                "CHAT_NODEAGENT_ENGINE": "sim",
                "CHAT_NODEAGENT_SIM_ANSWER_TOKENS": ",".join(map(str, ANSWER_TOKENS)),
                "CHAT_GATEWAY_SYSTEM_PROMPT": SYSTEM_PROMPT,
                "CHAT_GATEWAY_ROUTER": "false",
                "CHAT_GATEWAY_PLUS_MAX_ANSWER_TOKENS": str(PLUS_CAP),
                # Text token by token, so the test can act after the first few deltas.
                "CHAT_GATEWAY_OUTPUT_HOLDBACK_TOKENS": "0",
                "CHAT_GATEWAY_OUTPUT_CHECK_EVERY_TOKENS": "1",
            },
        )
    )
    await local.start()
    yield local
    await local.stop()


@pytest.fixture
async def http(platform: LocalPlatform) -> AsyncIterator[aiohttp.ClientSession]:
    """A client; after the test, every process it killed runs again."""
    async with aiohttp.ClientSession() as session:
        yield session
        await restart_the_dead(platform, session)


async def answer(
    http: aiohttp.ClientSession, platform: LocalPlatform, tier: str, content: str, act: Act
) -> tuple[list[tuple[float, SseEvent]], dict[str, Any]]:
    """One message's events as the client read them, with when; act(http, platform, replica
    serving it) runs after the 5th delta. Also the answer as stored."""
    bearer = {"Authorization": f"Bearer {platform.tokens[tier]}"}
    headers = {**bearer, "Idempotency-Key": f"m_{uuid.uuid4().hex[:8]}"}
    url = f"{platform.edge_url}/v1/conversations/c_{uuid.uuid4().hex[:8]}/messages"
    events: list[tuple[float, SseEvent]] = []
    acted = False
    async with http.post(url, json={"content": content}, headers=headers) as response:
        assert response.status == 200
        async for event in iter_events(response):
            events.append((time.monotonic(), event))
            if not acted and sum(e.event == "delta" for _, e in events) == KILL_AFTER_DELTAS:
                acted = True
                await act(http, platform, events[0][1].data["replica"])
    assert acted, "the answer ended before the fault"
    async with http.get(url, headers=bearer) as response:
        messages = (await response.json())["messages"]
    assert [m["role"] for m in messages] == ["user", "assistant"]
    return events, messages[1]


def assert_exact(
    events: list[tuple[float, SseEvent]], stored: dict[str, Any], expected: str
) -> None:
    """The client got one whole answer, the uninterrupted one, and it is what was saved."""
    names = [e.event for _, e in events]
    assert names[0] == "meta" and names[-1] == "done" and "error" not in names, names
    assert [e.id for _, e in events] == list(range(1, len(events) + 1))  # no gap, no repeat
    assert "".join(e.data["text"] for _, e in events if e.event == "delta") == expected
    assert stored["content"] == expected
    pause_s = max(b - a for (a, _), (b, _) in itertools.pairwise(events))
    assert pause_s < PAUSE_BOUND_S, f"the answer paused {pause_s:.1f} s"


async def kill_the_node(http: aiohttp.ClientSession, platform: LocalPlatform, replica: str) -> None:
    await kill(serving_node(platform, replica))


async def kill_the_gateway(
    http: aiohttp.ClientSession, platform: LocalPlatform, replica: str
) -> None:
    await kill(await streaming_gateway(http, platform))


async def drain_the_node(
    http: aiohttp.ClientSession, platform: LocalPlatform, replica: str
) -> None:
    async with AdminClient(
        platform.scheduler_address, platform.admin_token, tls=platform.tls()
    ) as admin:
        await admin.drain(replica)


async def test_a_node_killed_mid_answer_the_user_sees_the_uninterrupted_answer(
    platform, http
) -> None:
    content = "Node kill: tell me about rivers and the sea."
    events, stored = await answer(http, platform, "free", content, kill_the_node)
    # A Free answer under its cap: the continuation ends where the answer itself does.
    assert_exact(events, stored, expected_answer(content, SYSTEM_PROMPT, ANSWER_TOKENS))
    assert stored["replica"] != events[0][1].data["replica"]
    assert events[-1][1].data["finish"] == "stop"


async def test_a_gateway_killed_mid_answer_the_user_sees_the_uninterrupted_answer(
    platform, http
) -> None:
    content = "Gateway kill: tell me about lighthouses."
    events, stored = await answer(http, platform, "plus", content, kill_the_gateway)
    # The other gateway took the answer over from the text in Redis; it ends at the cap.
    assert_exact(events, stored, expected_answer(content, SYSTEM_PROMPT, ANSWER_TOKENS, PLUS_CAP))
    assert events[-1][1].data["finish"] == "length"
    assert events[-1][1].data["usage"]["output"] == PLUS_CAP


async def test_a_node_drained_mid_answer_finishes_it_unchanged(platform, http) -> None:
    content = "Drain: tell me about mountains."
    try:
        events, stored = await answer(http, platform, "plus", content, drain_the_node)
    finally:
        async with AdminClient(
            platform.scheduler_address, platform.admin_token, tls=platform.tls()
        ) as admin:
            for node in await admin.nodes():
                await admin.undrain(node.node_id)
    assert_exact(events, stored, expected_answer(content, SYSTEM_PROMPT, ANSWER_TOKENS, PLUS_CAP))
    # A drain takes no new answers and lets running ones finish where they are.
    assert stored["replica"] == events[0][1].data["replica"]
    assert events[-1][1].data["usage"]["output"] == PLUS_CAP


async def test_a_response_whose_gateway_is_killed_mid_stream_goes_on_exactly(
    platform, http
) -> None:
    # OpenAI's Responses API over the same answer log: the edge follows the answer at the
    # gateway that took it over, and the SDK's stream numbers on without a gap.
    content = "Response, gateway kill: tell me about harbours."
    async with openai.AsyncOpenAI(
        base_url=f"{platform.edge_url}/v1", api_key=platform.tokens["plus"], max_retries=0
    ) as client:
        stream = await client.responses.create(model="auto", input=content, stream=True)
        events: list[tuple[float, Any]] = []
        async for event in stream:
            events.append((time.monotonic(), event))
            deltas = sum(e.type == "response.output_text.delta" for _, e in events)
            if deltas == KILL_AFTER_DELTAS and event.type == "response.output_text.delta":
                await kill_the_gateway(http, platform, "")
    assert [e.sequence_number for _, e in events] == list(range(len(events)))
    text = "".join(e.delta for _, e in events if e.type == "response.output_text.delta")
    assert text == expected_answer(content, SYSTEM_PROMPT, ANSWER_TOKENS, PLUS_CAP)
    ending = events[-1][1]
    assert (ending.type, ending.response.output_text) == ("response.incomplete", text)
    assert ending.response.usage.output_tokens == PLUS_CAP
    pause_s = max(b - a for (a, _), (b, _) in itertools.pairwise(events))
    assert pause_s < PAUSE_BOUND_S, f"the answer paused {pause_s:.1f} s"
