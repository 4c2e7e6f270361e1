"""bench/sim_server.py through a real socket: a simulated replica streams the simulator's
answer as OpenAI chunks, and a conversation's second turn finds its first turn in the prefix
cache, as many tokens as the replica kept (whole KV blocks of what turn one read and wrote)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

import aiohttp
import pytest

from bench.sim_server import Replica, make_replicas
from domain.replica_hardware import BLOCK_TOKENS
from domain.types import Role
from nodeagent.engine import PromptTurn
from nodeagent.sim import planned_answer, rendered

LENGTHS = (6, 12)  # short answers, and a fast replica: a turn takes milliseconds
SYSTEM = "You answer briefly, in plain words, and you never invent prices or opening hours."


@pytest.fixture
async def replica() -> AsyncIterator[Replica]:
    (one,) = make_replicas(1, "70b-4xh100", speed=200.0, answer_tokens=LENGTHS)
    await one.start()
    yield one
    await one.stop()


async def streamed(http: aiohttp.ClientSession, url: str, messages: list[dict]) -> tuple:
    """(text, usage, replica named in the chunks, X-Replica) of one streamed completion."""
    body = {"model": "any", "messages": messages, "max_tokens": 64, "stream": True,
            "stream_options": {"include_usage": True}}  # fmt: skip
    texts, usage, fingerprints = [], None, set()
    async with http.post(url + "/v1/chat/completions", json=body) as response:
        assert response.status == 200
        header = response.headers["X-Replica"]
        lines = (await response.text()).split("\n\n")
    assert lines[-2:] == ["data: [DONE]", ""]
    for line in lines[:-2]:
        event = json.loads(line.removeprefix("data: "))
        fingerprints.add(event["system_fingerprint"])
        for choice in event["choices"]:
            texts.append(choice["delta"].get("content", ""))
        usage = event.get("usage") or usage
    return "".join(texts), usage, fingerprints, header


def expected_answer(messages: list[dict]) -> str:
    turns = [PromptTurn(Role(m["role"]), m["content"]) for m in messages]
    return "".join(rendered(planned_answer(turns, LENGTHS), 0))


async def test_a_second_turn_streams_with_its_first_turn_cached(replica: Replica) -> None:
    messages = [{"role": "system", "content": SYSTEM},
                {"role": "user", "content": "What should I pack for a wet weekend?"}]  # fmt: skip
    async with aiohttp.ClientSession() as http:
        first, usage1, names1, header1 = await streamed(http, replica.url, messages)
        assert first == expected_answer(messages)
        assert usage1["prompt_tokens_details"] == {"cached_tokens": 0}
        messages += [{"role": "assistant", "content": first},
                     {"role": "user", "content": "And for a dry one?"}]  # fmt: skip
        second, usage2, names2, header2 = await streamed(http, replica.url, messages)
    assert second == expected_answer(messages)
    # Turn one's KV, whole blocks of it, less its last token (whose KV was never written).
    kept = (usage1["prompt_tokens"] + usage1["completion_tokens"] - 1) // BLOCK_TOKENS
    assert usage2["prompt_tokens_details"] == {"cached_tokens": kept * BLOCK_TOKENS}
    assert usage2["completion_tokens"] == len(planned_answer(
        [PromptTurn(Role(m["role"]), m["content"]) for m in messages], LENGTHS))  # fmt: skip
    assert names1 == names2 == {"sim-0"} and header1 == header2 == "sim-0"


async def test_bad_input_is_refused_with_the_reason(replica: Replica) -> None:
    async with aiohttp.ClientSession() as http:
        body = {"messages": [{"role": "narrator", "content": "hi"}], "stream": True}
        async with http.post(replica.url + "/v1/chat/completions", json=body) as response:
            assert response.status == 400
            assert await response.json() == {"error": {
                "message": "messages[0].role must be one of system, user, assistant",
                "type": "invalid_request_error"}}  # fmt: skip
