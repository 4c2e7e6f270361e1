"""Token limits through the edge: a burst is cut at what the bucket affords, with Retry-After;
a message longer than one message may be is refused with its count, and nothing is kept."""

from __future__ import annotations

import asyncio
import re
import uuid

import aiohttp
import pytest

from clients.chatctl.platform import LocalPlatform, PlatformSettings
from tests.api_schema import assert_conforms

pytestmark = pytest.mark.slow

# Below the window (2,048 tokens here): the cap, not the window, refuses the long message.
MAX_MESSAGE_TOKENS = 300


@pytest.fixture(scope="module")
async def small_budget(tmp_path_factory):
    # Each message reserves its prompt (~25 tokens) + 4 x 100 answer tokens: 1,000 affords 2.
    platform = LocalPlatform(
        PlatformSettings(
            state_dir=tmp_path_factory.mktemp("limits"),
            edge_listen="127.0.0.1:0",
            slot_context_tokens=2048,
            extra_env={
                "CHAT_GATEWAY_FREE_MAX_ANSWER_TOKENS": "100",
                "CHAT_GATEWAY_FREE_BUCKET_CAPACITY": "1000",
                "CHAT_GATEWAY_MAX_OPEN_STREAMS_PER_USER": "10",
                "CHAT_GATEWAY_MAX_MESSAGE_TOKENS": str(MAX_MESSAGE_TOKENS),
            },
        )
    )
    await platform.start()
    yield platform
    await platform.stop()


async def test_a_burst_gets_what_the_bucket_affords_and_the_rest_a_429(small_budget) -> None:
    platform = small_budget
    headers = {"Authorization": f"Bearer {platform.tokens['free']}"}

    async def one(i: int) -> tuple[int, str | None, dict | None]:
        async with (
            aiohttp.ClientSession() as http,
            http.post(
                f"{platform.edge_url}/v1/conversations/burst{i}/messages",
                json={"content": "Say hello."},
                headers={**headers, "Idempotency-Key": uuid.uuid4().hex},
            ) as response,
        ):
            if response.status == 200:
                await response.read()
                return 200, None, None
            return response.status, response.headers.get("Retry-After"), await response.json()

    results = await asyncio.gather(*(one(i) for i in range(6)))
    statuses = sorted(r[0] for r in results)
    assert statuses == [200, 200, 429, 429, 429, 429]
    for status, retry_after, body in results:
        if status == 429:
            assert int(retry_after) >= 1
            assert "token budget" in body["error"]["message"]
    async with aiohttp.ClientSession() as http:
        async with http.get(f"{platform.edge_url}/v1/limits", headers=headers) as response:
            limits = await response.json()
    level = limits["level"]
    refill_per_s = 1000 / (3 * 3600)  # the whole bucket refills in bucket_refill_s, 3 h
    assert limits == {
        "tier": "free",
        "level": level,
        "capacity": 1000,
        "refillPerSecond": pytest.approx(refill_per_s),
        "fullInSeconds": pytest.approx((1000 - level) / refill_per_s),
    }
    assert_conforms("Limits", limits)
    # What the two answers did not use was given back.
    assert 0 < level < 1000
    async with aiohttp.ClientSession() as http:
        async with http.get(f"{platform.edge_url}/v1/conversations", headers=headers) as response:
            page = await response.json()
    assert_conforms("ConversationPage", page)
    stored = page["conversations"]
    assert len(stored) == 2  # the refused messages stored nothing
    assert page["nextCursor"] == ""


async def test_a_message_over_the_token_cap_is_refused_with_its_count_and_not_kept(
    small_budget,
) -> None:
    platform = small_budget
    headers = {"Authorization": f"Bearer {platform.tokens['plus']}"}
    conversation = f"long{uuid.uuid4().hex[:8]}"
    # Within max_message_chars and the window, over the cap by the serving model's count.
    pasted = " ".join(f"line {i} of the pasted log" for i in range(120))
    async with aiohttp.ClientSession() as http:
        async with http.post(
            f"{platform.edge_url}/v1/conversations/{conversation}/messages",
            json={"content": pasted},
            headers={**headers, "Idempotency-Key": uuid.uuid4().hex},
        ) as response:
            status, body = response.status, await response.json()
        async with http.get(
            f"{platform.edge_url}/v1/conversations/{conversation}", headers=headers
        ) as kept:
            kept_status = kept.status
    assert status == 413, body
    found = re.fullmatch(
        rf"the message has (\d+) tokens; at most {MAX_MESSAGE_TOKENS} are taken in one "
        r"message: send it in parts",
        body["error"]["message"],
    )
    assert found is not None, body
    assert MAX_MESSAGE_TOKENS < int(found.group(1)) < 2048
    assert kept_status == 404  # nothing stored half-way
