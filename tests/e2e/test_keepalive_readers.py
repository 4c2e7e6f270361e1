"""Keep-alives through real silences, read by the clients people use: the official `openai` SDK
on the Responses API and on chat completions (plain and `X-Resumable`), and the conversation
API parsed as the web page does (edge/static/chat.js). The edge sends a keep-alive after
KEEPALIVE_S of silence; each answer here is held back whole by the output check until it ends
(its hold-back is longer than the answer), so the stream is silent for the 1-1.5 s the
simulated replica takes to write it, and several keep-alives arrive mid-stream. Every text is
compared with the answer the same prompt gets (tests/simtext.py)."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator

import aiohttp
import openai
import pytest

from chat.v1 import common_pb2
from chat.v1 import scheduler_service_pb2 as spb
from chat.v1 import scheduler_service_pb2_grpc as spb_grpc
from clients.chatctl.platform import LocalPlatform, PlatformSettings
from tests.simtext import expected_answer

pytestmark = pytest.mark.slow

SYSTEM_PROMPT = "You are a careful assistant."
# About 40 tokens a second: 1-1.25 s of silence each, against a keep-alive every 0.2 s.
ANSWER_TOKENS = (40, 50)
KEEPALIVE_S = 0.2


@pytest.fixture(scope="module")
async def platform(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[LocalPlatform]:
    local = LocalPlatform(
        PlatformSettings(
            state_dir=tmp_path_factory.mktemp("keepalives"),
            edge_listen="127.0.0.1:0",
            nodes=1,
            extra_env={
                "CHAT_NODEAGENT_ENGINE": "sim",
                "CHAT_NODEAGENT_SIM_ANSWER_TOKENS": ",".join(map(str, ANSWER_TOKENS)),
                "CHAT_GATEWAY_SYSTEM_PROMPT": SYSTEM_PROMPT,
                "CHAT_GATEWAY_ROUTER": "false",
                # More than any answer: its text is held until it ends.
                "CHAT_GATEWAY_OUTPUT_HOLDBACK_TOKENS": "200",
                "CHAT_GATEWAY_FREE_OUTPUT_MODE": "holdback",
                "CHAT_GATEWAY_PLUS_OUTPUT_MODE": "holdback",
                "CHAT_EDGE_KEEPALIVE_S": str(KEEPALIVE_S),
            },
        )
    )
    await local.start()
    yield local
    await local.stop()


async def new_user(platform: LocalPlatform) -> str:
    async with platform.channel(platform.scheduler_address) as channel:
        created = await spb_grpc.UserServiceStub(channel).CreateUser(
            spb.UserServiceCreateUserRequest(
                user_id=f"u-{uuid.uuid4().hex[:10]}", tier=common_pb2.TIER_PLUS
            ),
            metadata=(("authorization", f"Bearer {platform.admin_token}"),),
        )
    return created.token


def sdk(platform: LocalPlatform, token: str) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(
        base_url=f"{platform.edge_url}/v1", api_key=token, max_retries=0, timeout=60
    )


def answer(content: str) -> str:
    return expected_answer(content, SYSTEM_PROMPT, ANSWER_TOKENS)


async def streamed_response(platform: LocalPlatform, content: str) -> str:
    async with sdk(platform, await new_user(platform)) as client:
        stream = await client.responses.create(model="auto", input=content, stream=True)
        deltas = [e.delta async for e in stream if e.type == "response.output_text.delta"]
    return "".join(deltas)


async def streamed_completion(platform: LocalPlatform, content: str, resumable: bool) -> str:
    headers = {"X-Resumable": "true"} if resumable else {}
    async with sdk(platform, await new_user(platform)) as client:
        stream = await client.chat.completions.create(
            model="auto",
            messages=[{"role": "user", "content": content}],
            stream=True,
            extra_headers=headers,
        )
        deltas = [c.choices[0].delta.content or "" async for c in stream if c.choices]
    return "".join(deltas)


async def test_the_sdk_reads_responses_and_completions_through_keepalives(
    platform: LocalPlatform,
) -> None:
    prompts = ("Describe a lighthouse.", "Describe a harbour.", "Describe a ferry.")
    texts = await asyncio.gather(
        streamed_response(platform, prompts[0]),
        streamed_completion(platform, prompts[1], resumable=True),
        streamed_completion(platform, prompts[2], resumable=False),
        return_exceptions=True,  # one reader's failure shows beside the others' texts
    )
    assert list(texts) == [answer(p) for p in prompts]


def page_events(body: str) -> list[tuple[str, str]]:
    """The events the web page reads from a stream (edge/static/chat.js, readEvents): blocks
    split at blank lines, lines starting with ":" skipped, events without data dropped."""
    events = []
    for block in body.split("\n\n"):
        name, data = "message", []
        for line in block.split("\n"):
            if line.startswith(":"):
                continue
            field, _, value = line.partition(":")
            if field == "event":
                name = value.removeprefix(" ")
            elif field == "data":
                data.append(value.removeprefix(" "))
        if data:
            events.append((name, "\n".join(data)))
    return events


async def test_the_page_reads_a_conversation_answer_through_keepalives(
    platform: LocalPlatform,
) -> None:
    content = "Describe a canal."
    async with (
        aiohttp.ClientSession() as http,
        http.post(
            f"{platform.edge_url}/v1/conversations/c_{uuid.uuid4().hex[:8]}/messages",
            json={"content": content},
            headers={"Authorization": f"Bearer {await new_user(platform)}"},
        ) as response,
    ):
        assert response.status == 200
        body = (await response.read()).decode()
    # The silence was kept alive, each keep-alive a comment line of its own between events.
    assert "\n: keep-alive\n" in body, body
    assert ": keep-alive\n\n" not in body
    events = page_events(body)
    names = [name for name, _ in events]
    assert names[0] == "meta" and names[-1] == "done" and set(names[1:-1]) == {"delta"}
    text = "".join(json.loads(data)["text"] for _, data in events[1:-1])
    assert text == answer(content)
