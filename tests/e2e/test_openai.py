"""The OpenAI-compatible API as its users meet it: the official `openai` SDK against the real
platform (llama.cpp), raw HTTP for the error shapes, and a simulated fleet for replica
affinity, limits and the ladder."""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import openai
import pytest

from chat.v1 import common_pb2
from chat.v1 import scheduler_service_pb2 as spb
from chat.v1 import scheduler_service_pb2_grpc as spb_grpc
from clients.chatctl.platform import LocalPlatform, PlatformSettings

pytestmark = pytest.mark.slow

MODEL = "smollm2-135m-instruct"


def sdk(platform: LocalPlatform, token: str) -> openai.AsyncOpenAI:
    # No retries: a test must see the first answer, 429s included.
    return openai.AsyncOpenAI(
        base_url=f"{platform.edge_url}/v1", api_key=token, max_retries=0, timeout=240
    )


# The official SDK against the real engine -------------------------------------------------------


async def test_the_sdk_gets_a_whole_completion(platform: LocalPlatform) -> None:
    async with sdk(platform, platform.tokens["free"]) as client:
        completion = await client.chat.completions.create(
            model="auto",
            messages=[
                {"role": "system", "content": "You answer in one short sentence."},
                {"role": "user", "content": "What colour is the sky?"},
            ],
            max_tokens=24,
        )
    assert completion.object == "chat.completion"
    assert completion.id.startswith("chatcmpl-")
    assert completion.model == MODEL
    # The version that served (the platform's first, "base") and the replica.
    assert completion.system_fingerprint == "base@local-small-0"
    (choice,) = completion.choices
    assert choice.message.role == "assistant" and choice.message.content.strip()
    assert choice.finish_reason in ("stop", "length")
    usage = completion.usage
    assert usage.prompt_tokens > 0 and 0 < usage.completion_tokens <= 24
    assert usage.total_tokens == usage.prompt_tokens + usage.completion_tokens


async def test_the_sdk_streams_a_completion_with_usage(platform: LocalPlatform) -> None:
    async with sdk(platform, platform.tokens["free"]) as client:
        stream = await client.chat.completions.create(
            model="small",
            messages=[{"role": "user", "content": [{"type": "text", "text": "Count to five."}]}],
            max_completion_tokens=20,
            stream=True,
            stream_options={"include_usage": True},
        )
        chunks = [chunk async for chunk in stream]
    assert {c.object for c in chunks} == {"chat.completion.chunk"}
    assert len({c.id for c in chunks}) == 1
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text.strip()
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices]
    assert finishes[-1] in ("stop", "length") and not any(finishes[:-1])
    # With include_usage the last chunk has no choices, only the usage.
    assert chunks[-1].choices == [] and 0 < chunks[-1].usage.completion_tokens <= 20
    assert all(c.usage is None for c in chunks[:-1])


async def test_the_sdk_lists_models_and_raises_its_own_errors(platform: LocalPlatform) -> None:
    async with sdk(platform, platform.tokens["free"]) as client:
        models = await client.models.list()
        assert [m.id for m in models.data] == ["auto", "small", "large"]
        assert (await client.models.retrieve("small")).id == "small"
        with pytest.raises(openai.NotFoundError) as missing:
            await client.chat.completions.create(
                model="gpt-4o", messages=[{"role": "user", "content": "Hi"}]
            )
        assert missing.value.code == "model_not_found"
        with pytest.raises(openai.BadRequestError) as too_long:
            await client.chat.completions.create(
                model="auto",
                messages=[{"role": "user", "content": "word " * 6000}],
            )
        assert too_long.value.code == "context_length_exceeded"
    async with sdk(platform, "not-a-real-token") as client:
        with pytest.raises(openai.AuthenticationError) as refused:
            await client.models.list()
        assert refused.value.code == "invalid_api_key"


# Error shapes and bad input, over raw HTTP ----------------------------------------------------


def user_says(text: str = "Hi") -> list[dict[str, Any]]:
    return [{"role": "user", "content": text}]


BAD_BODIES = [
    ({"model": "auto"}, "messages"),
    ({"model": "auto", "messages": []}, "messages"),
    ({"model": "auto", "messages": "Hi"}, "messages"),
    ({"messages": user_says()}, "model"),
    ({"model": 7, "messages": user_says()}, "model"),
    ({"model": "auto", "messages": [{"role": "robot", "content": "x"}]}, "messages[0].role"),
    ({"model": "auto", "messages": [{"role": "tool", "content": "x"}]}, "messages[0].tool_call_id"),
    ({"model": "auto", "messages": [{"role": "user"}]}, "messages[0].content"),
    (
        {"model": "auto", "messages": [{"role": "user", "content": [{"type": "image_url"}]}]},
        "messages[0].content",
    ),
    ({"model": "auto", "messages": [{"role": "user", "content": "  "}]}, None),
    (
        {"model": "auto", "messages": [*user_says(), {"role": "assistant", "content": "Hello"}]},
        None,
    ),
    ({"model": "auto", "messages": user_says(), "max_tokens": 0}, "max_tokens"),
    ({"model": "auto", "messages": user_says(), "max_tokens": "9"}, "max_tokens"),
    ({"model": "auto", "messages": user_says(), "stream": "yes"}, "stream"),
    (
        {"model": "auto", "messages": user_says(), "stream_options": {"include_usage": True}},
        "stream_options",
    ),
    ({"model": "auto", "messages": user_says(), "n": 3}, "n"),
]


async def post_raw(
    platform: LocalPlatform, body: bytes, token: str | None, **headers: str
) -> tuple[int, dict[str, str], dict[str, Any]]:
    sent = {"Content-Type": "application/json", **headers}
    if token is not None:
        sent["Authorization"] = f"Bearer {token}"
    async with (
        aiohttp.ClientSession() as http,
        http.post(f"{platform.edge_url}/v1/chat/completions", data=body, headers=sent) as r,
    ):
        return r.status, dict(r.headers), await r.json()


def assert_openai_error(body: dict[str, Any], kind: str, code: str | None = None) -> None:
    error = body["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["message"] and error["type"] == kind and error["code"] == code


@pytest.mark.parametrize(("body", "param"), BAD_BODIES)
async def test_bad_bodies_get_a_400_naming_the_field(platform, body, param) -> None:
    status, _, answer = await post_raw(platform, json.dumps(body).encode(), platform.tokens["free"])
    assert status == 400, answer
    assert_openai_error(answer, "invalid_request_error")
    assert answer["error"]["param"] == param


async def test_keys_bodies_and_sessions_that_are_refused(platform: LocalPlatform) -> None:
    good = json.dumps({"model": "auto", "messages": user_says()}).encode()
    token = platform.tokens["free"]
    for key in (None, "nope"):
        status, _, answer = await post_raw(platform, good, key)
        assert status == 401
        assert_openai_error(answer, "invalid_request_error", "invalid_api_key")
    for raw in (b"{not json", b"[1, 2]"):
        status, _, answer = await post_raw(platform, raw, token)
        assert status == 400
        assert_openai_error(answer, "invalid_request_error")
    huge = json.dumps({"model": "auto", "messages": user_says("x" * 70_000)}).encode()
    status, _, answer = await post_raw(platform, huge, token)
    assert status == 413
    assert_openai_error(answer, "invalid_request_error", "request_too_large")
    status, _, answer = await post_raw(platform, good, token, **{"X-Session-Id": "a b"})
    assert status == 400 and "session key" in answer["error"]["message"]


async def test_a_completion_stores_nothing(platform: LocalPlatform) -> None:
    token = platform.tokens["plus"]
    headers = {"Authorization": f"Bearer {token}"}
    async with aiohttp.ClientSession() as http:
        async with http.get(f"{platform.edge_url}/v1/conversations", headers=headers) as r:
            before = (await r.json()).get("conversations", [])
        body = json.dumps({"model": "auto", "messages": user_says("Say ok."), "max_tokens": 4})
        status, headers_back, answer = await post_raw(platform, body.encode(), token)
        assert status == 200 and headers_back["X-Replica"] == "local-small-0"
        with pytest.raises(aiohttp.ClientResponseError):
            async with http.get(
                f"{platform.edge_url}/v1/messages/{answer['id']}", headers=headers
            ) as r:
                r.raise_for_status()
        async with http.get(f"{platform.edge_url}/v1/conversations", headers=headers) as r:
            after = (await r.json()).get("conversations", [])
    assert after == before


# A simulated fleet: affinity, limits, open streams, the ladder ----------------------------------


def sim_platform(state_dir, nodes: int, **env: str) -> LocalPlatform:
    """Simulated 8B replicas (the engine is not what these tests measure)."""
    return LocalPlatform(
        PlatformSettings(
            state_dir=state_dir,
            edge_listen="127.0.0.1:0",
            nodes=nodes,
            extra_env={
                "CHAT_NODEAGENT_ENGINE": "sim",
                "CHAT_NODEAGENT_SIM_PRESET": "8b-1xh100",
                **env,
            },
        )
    )


@pytest.fixture(scope="module")
async def fleet(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[LocalPlatform]:
    """Three simulated replicas: affinity, limits, open streams, the ladder."""
    platform = sim_platform(
        tmp_path_factory.mktemp("openai-fleet"),
        3,
        CHAT_GATEWAY_FREE_MAX_ANSWER_TOKENS="100",
        CHAT_GATEWAY_FREE_BUCKET_CAPACITY="1000",
        CHAT_GATEWAY_SHED_ANSWER_TOKENS="20",
    )
    await platform.start()
    yield platform
    await platform.stop()


async def new_user(platform: LocalPlatform, tier: int) -> str:
    """A user of its own, so each test starts with a full bucket."""
    async with platform.channel(platform.scheduler_address) as channel:
        created = await spb_grpc.UserServiceStub(channel).CreateUser(
            spb.UserServiceCreateUserRequest(user_id=f"u-{uuid.uuid4().hex[:10]}", tier=tier),
            metadata=(("authorization", f"Bearer {platform.admin_token}"),),
        )
    return created.token


async def replica_of(platform: LocalPlatform, token: str, messages: list, **headers: str) -> str:
    body = json.dumps({"model": "auto", "messages": messages, "max_tokens": 3}).encode()
    status, back, answer = await post_raw(platform, body, token, **headers)
    assert status == 200, answer
    assert answer["system_fingerprint"] == f"base@{back['X-Replica']}"
    return back["X-Replica"]


async def test_a_conversation_keeps_its_replica_as_it_grows(fleet: LocalPlatform) -> None:
    token = await new_user(fleet, common_pb2.TIER_PLUS)
    seen: set[str] = set()
    for topic in ["owls", "tides", "bread", "comets", "glass", "rivers", "bees", "maps"]:
        opening = [
            {"role": "system", "content": f"You are an expert on {topic}."},
            {"role": "user", "content": f"Tell me about {topic}."},
        ]
        first = await replica_of(fleet, token, opening)
        later = [
            *opening,
            {"role": "assistant", "content": "Gladly."},
            {"role": "user", "content": "And more?"},
        ]
        assert await replica_of(fleet, token, later) == first, topic
        seen.add(first)
    # Not one favourite for everyone: the openings spread over the fleet.
    assert len(seen) >= 2
    # An explicit session key wins over the opening.
    session = {"X-Session-Id": f"s-{uuid.uuid4().hex}"}
    replicas = {
        await replica_of(fleet, token, user_says(f"Question {i}?"), **session) for i in range(5)
    }
    assert len(replicas) == 1


async def test_a_spent_bucket_answers_429_with_retry_after(fleet: LocalPlatform) -> None:
    # Free: 1,000 tokens; each call reserves its prompt + 100 x 4 answer tokens.
    token = await new_user(fleet, common_pb2.TIER_FREE)
    body = json.dumps({"model": "auto", "messages": user_says("Hello there.")}).encode()
    statuses = []
    for _ in range(4):
        status, headers, answer = await post_raw(fleet, body, token)
        statuses.append(status)
        if status == 429:
            break
    assert statuses[-1] == 429 and statuses[:-1] and set(statuses[:-1]) == {200}
    assert int(headers["Retry-After"]) >= 1
    assert_openai_error(answer, "rate_limit_error", "rate_limit_exceeded")
    assert "token budget" in answer["error"]["message"]
    async with sdk(fleet, token) as client:
        with pytest.raises(openai.RateLimitError):
            await client.chat.completions.create(model="auto", messages=user_says())


async def open_stream(http: aiohttp.ClientSession, platform, token: str, text: str):
    response = await http.post(
        f"{platform.edge_url}/v1/chat/completions",
        json={"model": "auto", "messages": user_says(text), "stream": True},
        headers={"Authorization": f"Bearer {token}"},
    )
    return response


async def test_open_streams_are_capped_per_user_and_a_gone_client_frees_its_slot(
    fleet: LocalPlatform,
) -> None:
    token = await new_user(fleet, common_pb2.TIER_PLUS)  # Plus: 4 answers at once
    async with aiohttp.ClientSession() as http:
        streams = [await open_stream(http, fleet, token, f"Essay {i}, long.") for i in range(4)]
        for response in streams:
            assert response.status == 200
            await response.content.readline()  # the first chunk: the answer is running
        refused = await open_stream(http, fleet, token, "One more.")
        assert refused.status == 429
        assert "too many answers" in (await refused.json())["error"]["message"]
        # Clients that go away stop their completions: nobody could resume them.
        for response in streams:
            response.close()
        for _ in range(50):
            again = await open_stream(http, fleet, token, "Now?")
            if again.status == 200:
                break
            again.close()
            await asyncio.sleep(0.1)
        assert again.status == 200
        assert (await again.content.read()).endswith(b"data: [DONE]\n\n")


@pytest.fixture(scope="module")
async def long_answers(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[LocalPlatform]:
    """One simulated 8B replica whose every answer is 3,000 tokens: about 25 s each."""
    platform = sim_platform(
        tmp_path_factory.mktemp("openai-long"), 1, CHAT_NODEAGENT_SIM_ANSWER_TOKENS="3000,3000"
    )
    await platform.start()
    yield platform
    await platform.stop()


async def test_a_whole_completion_whose_caller_hung_up_is_stopped(
    long_answers: LocalPlatform,
) -> None:
    # Plus may run 4 answers at once. Four long non-streaming completions take every slot;
    # their callers hang up; the slots must come back long before the answers would end.
    token = await new_user(long_answers, common_pb2.TIER_PLUS)
    body = {"model": "auto", "messages": user_says("A very long essay."), "max_tokens": 3000}
    headers = {"Authorization": f"Bearer {token}"}

    async def call() -> None:
        async with aiohttp.ClientSession() as http:
            async with http.post(
                f"{long_answers.edge_url}/v1/chat/completions", json=body, headers=headers
            ) as response:
                await response.read()

    callers = [asyncio.create_task(call()) for _ in range(4)]
    async with aiohttp.ClientSession() as http:
        for _ in range(50):  # until all four run: a fifth is refused
            refused = await open_stream(http, long_answers, token, "One more.")
            refused.close()
            if refused.status == 429:
                break
            await asyncio.sleep(0.1)
        assert refused.status == 429
        for caller in callers:
            caller.cancel()  # closes each caller's connection
        await asyncio.gather(*callers, return_exceptions=True)
        hung_up_at = time.monotonic()
        while time.monotonic() - hung_up_at < 5:
            again = await open_stream(http, long_answers, token, "Now?")
            if again.status == 200:
                break
            again.close()
            await asyncio.sleep(0.1)
        assert again.status == 200
        again.close()


async def test_the_ladder_caps_free_completions(fleet: LocalPlatform) -> None:
    token = await new_user(fleet, common_pb2.TIER_FREE)
    admin = (("authorization", f"Bearer {fleet.admin_token}"),)
    async with fleet.channel(fleet.scheduler_address) as channel:
        ladder = spb_grpc.SchedulerServiceStub(channel)
        await ladder.PinLadder(spb.PinLadderRequest(rung=2), metadata=admin)
        try:
            async with sdk(fleet, token) as client:
                completion = await client.chat.completions.create(
                    model="auto", messages=user_says("Tell me a long tale.")
                )
        finally:
            await ladder.PinLadder(spb.PinLadderRequest(), metadata=admin)
    # Rung 2 caps Free answers (at 20 tokens here); the simulator's answers are 100 or more.
    assert completion.usage.completion_tokens == 20
    assert completion.choices[0].finish_reason == "length"
