"""A burst: 500 streams started within 2 s through one edge and one gateway, on simulated
replicas; every one ends `done` with exactly the answer the simulated model writes."""

from __future__ import annotations

import asyncio
import time
import uuid

import aiohttp
import pytest

from clients.chatctl.platform import LocalPlatform, PlatformSettings
from tests.simtext import expected_answer
from tests.sse import read_events

pytestmark = pytest.mark.slow

STREAMS = 500
SPREAD_S = 2.0
SYSTEM_PROMPT = "You are a helpful assistant."
ANSWER_TOKENS = (20, 40)


@pytest.fixture(scope="module")
async def burst_platform(tmp_path_factory):
    platform = LocalPlatform(
        PlatformSettings(
            state_dir=tmp_path_factory.mktemp("burst"),
            edge_listen="127.0.0.1:0",
            nodes=2,
            extra_env={
                "CHAT_NODEAGENT_ENGINE": "sim",
                "CHAT_NODEAGENT_SIM_SPEED": "4",
                "CHAT_NODEAGENT_SIM_ANSWER_TOKENS": ",".join(map(str, ANSWER_TOKENS)),
                "CHAT_GATEWAY_SYSTEM_PROMPT": SYSTEM_PROMPT,
                "CHAT_GATEWAY_ROUTER": "false",
                # Raised so that only the platform's own capacity is under test: one user
                # opens every stream, from one address.
                "CHAT_GATEWAY_MAX_OPEN_STREAMS_PER_USER": "100000",
                "CHAT_GATEWAY_PLUS_BUCKET_CAPACITY": "1e12",
                "CHAT_EDGE_MAX_REQUESTS_PER_IP": "0",
                "CHAT_GATEWAY_LOG_LEVEL": "warning",
                "CHAT_EDGE_LOG_LEVEL": "warning",
            },
        )
    )
    try:
        await platform.start()
        yield platform
    finally:
        await platform.stop()


@pytest.mark.timeout(420)
async def test_500_streams_started_within_two_seconds_all_end_done(burst_platform) -> None:
    platform = burst_platform
    headers = {"Authorization": f"Bearer {platform.tokens['plus']}"}
    run = uuid.uuid4().hex[:6]
    connector = aiohttp.TCPConnector(limit=0)
    timeout = aiohttp.ClientTimeout(total=300)

    async def one(http: aiohttp.ClientSession, i: int) -> tuple[str, int, list]:
        await asyncio.sleep(SPREAD_S * i / STREAMS)
        content = f"Burst {run} question {i}: tell me about rivers."
        async with http.post(
            f"{platform.edge_url}/v1/conversations/b{run}_{i}/messages",
            json={"content": content},
            headers=headers,
        ) as response:
            body = await read_events(response) if response.status == 200 else []
            return content, response.status, body

    started = time.monotonic()
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as http:
        outcomes = await asyncio.gather(*(one(http, i) for i in range(STREAMS)))
    seconds = time.monotonic() - started
    statuses = [status for _, status, _ in outcomes]
    assert statuses == [200] * STREAMS, {s: statuses.count(s) for s in set(statuses)}
    endings = [events[-1].event if events else "none" for _, _, events in outcomes]
    assert endings == ["done"] * STREAMS, {e: endings.count(e) for e in set(endings)}
    for content, _, events in outcomes:
        text = "".join(e.data["text"] for e in events if e.event == "delta")
        assert text == expected_answer(content, SYSTEM_PROMPT, ANSWER_TOKENS)
        assert [e.id for e in events] == list(range(1, len(events) + 1))
    print(f"{STREAMS} streams in {seconds:.1f} s")
