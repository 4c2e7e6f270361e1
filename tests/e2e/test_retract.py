"""The output check's modes as shipped, on real processes and the simulated engine: Plus
answers show as they come and a flagged one is withdrawn (retract mode: a `retract` event,
then the refusal, which is all that is stored); Free stays on the hold-back, and so do the
OpenAI-compatible APIs (completions, Responses) whatever the tier.

The simulator writes sentences of words from a fixed list, "the" among them, and the test
blocklist flags "the", so an answer can be seen withdrawn without anyone writing harmful text.
Its answer to a message is a function of the message: the one sent here first says "the"
57 tokens in, after several clean checks."""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import openai
import pytest

from clients.chat_client import (
    ChatClient,
    Delta,
    Done,
    Meta,
    Retract,
    answer_text,
    new_conversation_id,
)
from clients.chatctl.platform import LocalPlatform, PlatformSettings
from domain.safety import Refusals
from domain.safety.text import TOKEN
from tests.sse import SseEvent, iter_events

pytestmark = pytest.mark.slow

BLOCKLIST = Path(__file__).parent / "data" / "blocks_the.json"
# The simulator's answer to this says "the" 57 tokens in (and the message itself does not,
# or the input check would refuse it).
MESSAGE = "Describe a quiet morning."
REFUSAL = Refusals().output


def assert_held_back(shown: str) -> None:
    """ "the" comes 57 tokens in and a clean check releases text only 50 tokens behind what it
    read, so at most the first 7 tokens can show before the refusal (none, when the checks'
    edges fell so), and never the flagged word."""
    held = shown.removesuffix(REFUSAL)
    assert shown.endswith(REFUSAL) and (held == "" or held.endswith("\n\n")), shown
    assert len(TOKEN.findall(held)) <= 7 and not re.search(r"\bthe\b", held, re.I), shown


@pytest.fixture(scope="module")
async def platform(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[LocalPlatform]:
    platform = LocalPlatform(
        PlatformSettings(
            state_dir=tmp_path_factory.mktemp("retract"),
            edge_listen="127.0.0.1:0",
            extra_env={
                "CHAT_NODEAGENT_ENGINE": "sim",
                "CHAT_NODEAGENT_SIM_PRESET": "8b-1xh100",
                "CHAT_GATEWAY_SAFETY_BLOCKLIST": str(BLOCKLIST),
                # No output mode is set: each tier's shipped default is under test.
                # The router would only add a classifier to load; the pool is not under test.
                "CHAT_GATEWAY_ROUTER": "false",
            },
        )
    )
    await platform.start()
    yield platform
    await platform.stop()


async def send_through_edge(
    platform: LocalPlatform, tier: str, conversation: str
) -> tuple[list[SseEvent], list[dict]]:
    """The message's SSE events, and the conversation's stored messages after it."""
    headers = {
        "Authorization": f"Bearer {platform.tokens[tier]}",
        "Idempotency-Key": f"m_{uuid.uuid4().hex[:8]}",
    }
    url = f"{platform.edge_url}/v1/conversations/{conversation}/messages"
    async with aiohttp.ClientSession() as http:
        async with http.post(url, json={"content": MESSAGE}, headers=headers) as response:
            assert response.status == 200, await response.text()
            events = [event async for event in iter_events(response)]
        async with http.get(url, headers=headers) as response:
            stored = (await response.json())["messages"]
    return events, stored


async def test_a_plus_answer_shows_at_once_and_a_flagged_one_is_withdrawn(platform) -> None:
    events, stored = await send_through_edge(platform, "plus", new_conversation_id())
    names = [e.event for e in events]
    retract_at = names.index("retract")
    assert names[0] == "meta" and set(names[1:retract_at]) == {"delta"}
    assert names[retract_at:] == ["retract", "delta", "done"]
    shown = "".join(e.data["text"] for e in events[1:retract_at])
    # Everything shown was withdrawn, then the refusal alone: what is stored too.
    assert events[retract_at].data == {"withdrawnChars": len(shown)}
    # Shown as it came: the last clean check read at least 42 tokens (a check every 16, and
    # the next one reads past "the" at 57), and all the text fed until then was shown.
    assert len(TOKEN.findall(shown)) >= 42, shown
    assert events[retract_at + 1].data == {"text": REFUSAL}
    assert events[-1].data["finish"] == "refused"
    assert (stored[-1]["content"], stored[-1]["finish"]) == (REFUSAL, "refused")


async def test_the_python_client_surfaces_the_retract(platform) -> None:
    conversation = new_conversation_id()
    async with ChatClient(
        platform.gateway_address, platform.tokens["plus"], tls=platform.tls("client")
    ) as chat:
        events = [e async for e in chat.send(conversation, MESSAGE)]
        stored = await chat.messages(conversation)
    assert isinstance(events[0], Meta)
    retract = next(e for e in events if isinstance(e, Retract))
    before = events[1 : events.index(retract)]
    assert before and all(isinstance(e, Delta) for e in before)
    assert retract.withdrawn_chars == len("".join(e.text for e in before))
    assert answer_text(events) == REFUSAL
    assert isinstance(events[-1], Done) and events[-1].finish == "refused"
    assert (stored[-1].content, stored[-1].finish) == (REFUSAL, "refused")


async def test_a_free_answer_still_holds_back_and_never_shows_the_flagged_word(
    platform,
) -> None:
    events, stored = await send_through_edge(platform, "free", new_conversation_id())
    names = [e.event for e in events]
    assert "retract" not in names
    assert names[0] == "meta" and names[-1] == "done"
    shown = "".join(e.data["text"] for e in events if e.event == "delta")
    assert_held_back(shown)
    assert events[-1].data["finish"] == "refused"
    assert stored[-1]["content"] == shown


async def test_a_completion_holds_back_even_for_a_plus_caller(platform) -> None:
    body = {"model": "auto", "stream": True, "messages": [{"role": "user", "content": MESSAGE}]}
    headers = {"Authorization": f"Bearer {platform.tokens['plus']}"}
    async with aiohttp.ClientSession() as http:
        async with http.post(
            f"{platform.edge_url}/v1/chat/completions", json=body, headers=headers
        ) as response:
            assert response.status == 200
            raw = (await response.content.read()).decode()
    assert raw.endswith("data: [DONE]\n\n")
    chunks = [json.loads(line[6:]) for line in raw.splitlines() if line.startswith("data: {")]
    choices = [choice for chunk in chunks for choice in chunk["choices"]]
    text = "".join(choice["delta"].get("content", "") for choice in choices)
    assert_held_back(text)  # as for Free
    assert choices[-1]["finish_reason"] == "content_filter"


async def test_a_response_holds_back_even_for_a_plus_caller(platform) -> None:
    # OpenAI's Responses API has no way to withdraw text either.
    async with openai.AsyncOpenAI(
        base_url=f"{platform.edge_url}/v1", api_key=platform.tokens["plus"], max_retries=0
    ) as client:
        stream = await client.responses.create(model="auto", input=MESSAGE, stream=True)
        events = [event async for event in stream]
    text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert_held_back(text)  # as for Free
    ending = events[-1]
    assert (ending.type, ending.response.incomplete_details.reason) == (
        "response.incomplete", "content_filter")  # fmt: skip
    assert ending.response.output_text == text
