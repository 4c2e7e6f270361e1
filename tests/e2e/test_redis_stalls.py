"""Redis stalling mid-answer, as it did under load in the soak (bench/soak.py): the gateway's
write of an answer's next event to its shared log got no reply within its 0.5 s timeout, the
answer's task died on the error, and the user never got `done` (and the run stayed open).

Redis is stopped with SIGSTOP after the 5th delta, so the write in flight is one Redis runs
only when it goes on. A stall shorter than the gateway's liveness window is a pause for the
user, and the whole answer, exactly; a longer one too: the gateway leaves the run for another
gateway to take over, and when none did (Redis itself was away) takes it back itself.

One platform: edge, gateway (answers in flight in a Redis of its own), one simulated node
(about 40 tokens a second, so an answer of 200 streams for about 5 s)."""

from __future__ import annotations

import asyncio
import os
import signal
import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any

import aiohttp
import pytest

from clients.chatctl.platform import LocalPlatform, PlatformSettings
from tests.servers import Redis, run_redis
from tests.simtext import expected_answer
from tests.sse import SseEvent, iter_events

pytestmark = pytest.mark.slow

SYSTEM_PROMPT = "You are a patient assistant."
ANSWER_TOKENS = (200, 200)
STALL_AFTER_DELTAS = 5
ANSWER_BOUND_S = 60.0


@pytest.fixture(scope="module")
def redis() -> Iterator[Redis]:
    with run_redis() as server:
        yield server


@pytest.fixture(scope="module")
async def platform(
    tmp_path_factory: pytest.TempPathFactory, redis: Redis
) -> AsyncIterator[LocalPlatform]:
    local = LocalPlatform(
        PlatformSettings(
            state_dir=tmp_path_factory.mktemp("redis-stalls"),
            edge_listen="127.0.0.1:0",
            redis_url=redis.url,
            extra_env={
                "CHAT_NODEAGENT_ENGINE": "sim",
                "CHAT_NODEAGENT_SIM_ANSWER_TOKENS": ",".join(map(str, ANSWER_TOKENS)),
                "CHAT_GATEWAY_SYSTEM_PROMPT": SYSTEM_PROMPT,
                "CHAT_GATEWAY_ROUTER": "false",
                # Text token by token, so each chunk is one write to the log.
                "CHAT_GATEWAY_OUTPUT_HOLDBACK_TOKENS": "0",
                "CHAT_GATEWAY_OUTPUT_CHECK_EVERY_TOKENS": "1",
            },
        )
    )
    await local.start()
    yield local
    await local.stop()


async def ask(
    platform: LocalPlatform, redis: Redis, conversation: str, content: str, stall_s: float
) -> tuple[list[SseEvent], dict[str, Any]]:
    """One message's events, Redis stopped for stall_s after the 5th delta; and the answer
    as stored (read once Redis goes on)."""
    bearer = {"Authorization": f"Bearer {platform.tokens['plus']}"}
    url = f"{platform.edge_url}/v1/conversations/{conversation}/messages"
    events: list[SseEvent] = []
    # A hang (an answer that never ends) fails here rather than at the suite's timeout.
    async with aiohttp.ClientSession() as http, asyncio.timeout(ANSWER_BOUND_S):
        try:
            async with http.post(url, json={"content": content}, headers=bearer) as response:
                assert response.status == 200
                async for event in iter_events(response):
                    events.append(event)
                    if stall_s and sum(e.event == "delta" for e in events) == STALL_AFTER_DELTAS:
                        os.kill(redis.pid, signal.SIGSTOP)
                        asyncio.get_running_loop().call_later(
                            stall_s, os.kill, redis.pid, signal.SIGCONT
                        )
        finally:
            os.kill(redis.pid, signal.SIGCONT)  # whatever happened, Redis goes on
        async with http.get(url, headers=bearer) as response:
            messages = (await response.json())["messages"]
    return events, messages[-1]


def shown(events: list[SseEvent]) -> str:
    return "".join(e.data["text"] for e in events if e.event == "delta")


async def test_a_short_stall_is_a_pause_and_the_answer_is_whole(platform, redis) -> None:
    content = f"Redis stalls: tell me about {uuid.uuid4().hex[:6]}."
    events, stored = await ask(platform, redis, f"c_{uuid.uuid4().hex[:8]}", content, 1.5)
    assert [e.event for e in events][-1] == "done", [e.data for e in events[-2:]]
    assert [e.id for e in events] == list(range(1, len(events) + 1))  # no gap, no repeat
    expected = expected_answer(content, SYSTEM_PROMPT, ANSWER_TOKENS)
    assert shown(events) == expected and stored["content"] == expected


async def test_a_stall_past_the_liveness_window_is_a_pause_and_the_answer_is_whole(
    platform, redis
) -> None:
    # Past the window the gateway leaves the run for a gateway that can reach Redis; none
    # can (Redis itself stopped, and there is one gateway), so it takes the run back once
    # Redis answers and goes on from the logged text.
    content = f"Redis stalls long: tell me about {uuid.uuid4().hex[:6]}."
    events, stored = await ask(platform, redis, f"c_{uuid.uuid4().hex[:8]}", content, 5.0)
    assert [e.event for e in events][-1] == "done", [e.data for e in events[-2:]]
    assert [e.id for e in events] == list(range(1, len(events) + 1))
    expected = expected_answer(content, SYSTEM_PROMPT, ANSWER_TOKENS)
    assert shown(events) == expected and stored["content"] == expected
