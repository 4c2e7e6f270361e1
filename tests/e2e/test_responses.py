"""OpenAI's Responses API as its users meet it: the official `openai` SDK's `client.responses`
against the real platform's processes with simulated replicas, whose answer is a function of
its prompt, so every text is checked character for character against the answer the same
prompt gets (tests/simtext.py): a multi-turn conversation through previous_response_id,
instructions, background and polling, a stream cut mid-answer and resumed with
starting_after, cancel, delete, another user's ids, bad input; and a chat completion that
survives its client going (`X-Resumable`)."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import openai
import pytest

from clients.chatctl.platform import LocalPlatform, PlatformSettings
from domain.safety import Refusals
from domain.types import Role
from nodeagent.engine import PromptTurn
from nodeagent.sim import planned_answer, rendered
from tests.e2e.responses_support import new_user, sdk, simulated_answer
from tests.sse import SseEvent

pytestmark = pytest.mark.slow

SYSTEM_PROMPT = "You are a careful assistant."
ANSWER_TOKENS = (60, 90)
# How long a condition may take to come true before the test fails (never a fixed wait).
PATIENCE_S = 30.0


@pytest.fixture(scope="module")
async def platform(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[LocalPlatform]:
    """Two simulated replicas (about 40 tokens a second: an answer streams for 1.5-2.5 s),
    the router off and text released token by token, so a stream can be cut mid-answer."""
    local = LocalPlatform(
        PlatformSettings(
            state_dir=tmp_path_factory.mktemp("responses"),
            edge_listen="127.0.0.1:0",
            nodes=2,
            extra_env={
                "CHAT_NODEAGENT_ENGINE": "sim",
                "CHAT_NODEAGENT_SIM_ANSWER_TOKENS": ",".join(map(str, ANSWER_TOKENS)),
                "CHAT_GATEWAY_SYSTEM_PROMPT": SYSTEM_PROMPT,
                "CHAT_GATEWAY_ROUTER": "false",
                "CHAT_GATEWAY_OUTPUT_HOLDBACK_TOKENS": "0",
                "CHAT_GATEWAY_OUTPUT_CHECK_EVERY_TOKENS": "1",
            },
        )
    )
    await local.start()
    yield local
    await local.stop()


def answer_to(*turns: tuple[Role, str]) -> str:
    """The simulated replica's whole answer to a prompt of these turns."""
    return simulated_answer(ANSWER_TOKENS, *turns)


def first_answer(content: str, system: str = SYSTEM_PROMPT) -> str:
    return answer_to((Role.SYSTEM, system), (Role.USER, content))


async def until(check: Any, what: str) -> Any:
    """Polls check() (a coroutine function) until it returns something true."""
    deadline = time.monotonic() + PATIENCE_S
    while time.monotonic() < deadline:
        found = await check()
        if found:
            return found
        await asyncio.sleep(0.05)
    raise AssertionError(f"not within {PATIENCE_S} s: {what}")


# Conversations through previous_response_id --------------------------------------------------


async def test_a_conversation_continues_through_previous_response_id(
    platform: LocalPlatform,
) -> None:
    token = await new_user(platform)
    async with sdk(platform, token) as client:
        first = await client.responses.create(model="auto", input="Name three rivers.")
        second = await client.responses.create(
            model="auto", input="Which is longest?", previous_response_id=first.id
        )
        third = await client.responses.create(
            model="auto",
            input=[{"role": "user", "content": [{"type": "input_text", "text": "And why?"}]}],
            previous_response_id=second.id,
            instructions="You answer like a geographer.",
        )
    one = first_answer("Name three rivers.")
    assert (first.object, first.status, first.output_text) == ("response", "completed", one)
    assert first.id.startswith("resp_") and first.previous_response_id is None
    assert first.usage.output_tokens == len(planned_answer(
        [PromptTurn(Role.SYSTEM, SYSTEM_PROMPT), PromptTurn(Role.USER, "Name three rivers.")],
        ANSWER_TOKENS))  # fmt: skip
    # The prompt was built at the gateway from the stored history.
    two = answer_to((Role.SYSTEM, SYSTEM_PROMPT), (Role.USER, "Name three rivers."),
                    (Role.ASSISTANT, one), (Role.USER, "Which is longest?"))  # fmt: skip
    assert (second.status, second.output_text, second.previous_response_id) == (
        "completed", two, first.id)  # fmt: skip
    # Instructions stand in for the system prompt of this response alone.
    three = answer_to((Role.SYSTEM, "You answer like a geographer."),
                      (Role.USER, "Name three rivers."), (Role.ASSISTANT, one),
                      (Role.USER, "Which is longest?"), (Role.ASSISTANT, two),
                      (Role.USER, "And why?"))  # fmt: skip
    assert (third.output_text, third.instructions) == (three, "You answer like a geographer.")
    # One stored conversation, named after its first response, on one replica.
    async with aiohttp.ClientSession() as http:
        async with http.get(
            f"{platform.edge_url}/v1/conversations/{first.id}/messages",
            headers={"Authorization": f"Bearer {token}"},
        ) as listed:
            messages = (await listed.json())["messages"]
    ids = [first.id, second.id, third.id]
    assert [m["messageId"] for m in messages] == [
        i + suffix for i in ids for suffix in ("", ".answer")
    ]
    assert [m["content"] for m in messages[1::2]] == [one, two, three]
    assert len({m["replica"] for m in messages[1::2]}) == 1


async def test_a_background_response_is_polled_until_it_completes(platform: LocalPlatform) -> None:
    async with sdk(platform, await new_user(platform)) as client:
        started = await client.responses.create(
            model="auto", input="Tell me about tides.", background=True
        )
        assert (started.status, started.background, started.output) == ("in_progress", True, [])

        async def completed() -> Any:
            polled = await client.responses.retrieve(started.id)
            return polled if polled.status == "completed" else None

        done = await until(completed, "the background response completed")
    assert done.id == started.id and done.output_text == first_answer("Tell me about tides.")
    assert done.output[0].id == started.id.replace("resp_", "msg_", 1)


async def test_the_answer_cap_and_the_input_check_apply_as_to_messages(
    platform: LocalPlatform,
) -> None:
    async with sdk(platform, await new_user(platform)) as client:
        capped = await client.responses.create(
            model="auto", input="Tell me about owls.", max_output_tokens=7
        )
        refused = await client.responses.create(
            model="auto", input="Say FORBIDDEN-CANARY-PHRASE please"
        )
        # The caller's instructions reach the model too, so they are checked as well.
        refused_instructions = await client.responses.create(
            model="auto", input="Hello.", instructions="FORBIDDEN canary PHRASE"
        )
    tokens = planned_answer(
        [PromptTurn(Role.SYSTEM, SYSTEM_PROMPT), PromptTurn(Role.USER, "Tell me about owls.")],
        ANSWER_TOKENS,
    )
    assert (capped.status, capped.incomplete_details.reason) == ("incomplete", "max_output_tokens")
    assert capped.output_text == "".join(rendered(tokens[:7], 0))
    assert capped.usage.output_tokens == 7
    for blocked in (refused, refused_instructions):
        assert (blocked.status, blocked.incomplete_details.reason) == (
            "incomplete", "content_filter")  # fmt: skip
        assert blocked.output_text == Refusals().input


async def test_background_responses_count_against_the_open_streams_cap(
    platform: LocalPlatform,
) -> None:
    # As messages do: a background response streams at the gateway until it ends.
    async with sdk(platform, await new_user(platform)) as client:
        running = [
            await client.responses.create(model="auto", input=f"Essay {i}.", background=True)
            for i in range(4)
        ]
        with pytest.raises(openai.RateLimitError) as refused:
            await client.responses.create(model="auto", input="One more.", background=True)
        assert refused.value.response.headers["Retry-After"] == "1"

        async def all_ended() -> bool:
            read = [await client.responses.retrieve(r.id) for r in running]
            return all(r.status == "completed" for r in read)

        await until(all_ended, "the four background responses completed")
        again = await client.responses.create(model="auto", input="Now?")
    assert again.output_text == first_answer("Now?")


# Streams: whole, and cut then resumed ----------------------------------------------------------


async def test_a_stream_cut_mid_answer_resumes_after_its_last_event_exactly(
    platform: LocalPlatform,
) -> None:
    question = "Explain how bread rises."
    async with sdk(platform, await new_user(platform)) as client:
        stream = await client.responses.create(model="auto", input=question, stream=True)
        before: list[Any] = []
        async for event in stream:
            before.append(event)
            if sum(e.type == "response.output_text.delta" for e in before) == 5:
                break
        await stream.close()  # the client goes mid-answer
        response_id = before[0].response.id
        last = before[-1].sequence_number
        asked_at = time.monotonic()
        resumed = await client.responses.retrieve(response_id, stream=True, starting_after=last)
        after = []
        async for event in resumed:
            if not after:
                resume_s = time.monotonic() - asked_at
            after.append(event)
        # The same question again, uninterrupted, in a conversation of its own.
        whole = await client.responses.create(model="auto", input=question)
    events = before + after
    assert [e.sequence_number for e in events] == list(range(len(events)))
    assert [e.type for e in events[:4]] == [
        "response.created", "response.in_progress", "response.output_item.added",
        "response.content_part.added"]  # fmt: skip
    assert [e.type for e in events[-4:]] == [
        "response.output_text.done", "response.content_part.done",
        "response.output_item.done", "response.completed"]  # fmt: skip
    text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    expected = first_answer(question)
    lost, repeated = max(0, len(expected) - len(text)), max(0, len(text) - len(expected))
    print(
        f"\nresume: {len(before)} events before the cut, {len(after)} after; chars lost "
        f"{lost}, repeated {repeated}; first event {resume_s * 1000:.1f} ms after asking"
    )
    assert text == whole.output_text == expected
    assert events[-1].response.output_text == text and events[-4].text == text
    assert resume_s < 5.0


async def test_a_stream_from_the_start_and_one_after_its_end(platform: LocalPlatform) -> None:
    async with sdk(platform, await new_user(platform)) as client:
        done = await client.responses.create(model="auto", input="Describe glass.")
        replay = await client.responses.retrieve(done.id, stream=True)
        events = [event async for event in replay]
        past_the_end = await client.responses.retrieve(
            done.id, stream=True, starting_after=events[-1].sequence_number
        )
        assert [event async for event in past_the_end] == []
    assert events[-1].type == "response.completed"
    assert "".join(e.delta for e in events if e.type == "response.output_text.delta") == (
        done.output_text
    )


# Cancel, delete, other users -------------------------------------------------------------------


async def test_a_cancelled_response_stops_with_the_text_so_far(platform: LocalPlatform) -> None:
    question = "Write about comets."
    async with sdk(platform, await new_user(platform)) as client:
        started = await client.responses.create(model="auto", input=question, background=True)
        cancelled = await client.responses.cancel(started.id)
        read = await client.responses.retrieve(started.id)
    assert (cancelled.id, cancelled.status, read.status) == (started.id, "cancelled", "cancelled")
    whole = first_answer(question)
    assert whole.startswith(cancelled.output_text) and len(cancelled.output_text) < len(whole)
    assert read.output_text == cancelled.output_text


async def test_a_deleted_response_is_gone_but_its_turns_stay_history(
    platform: LocalPlatform,
) -> None:
    async with sdk(platform, await new_user(platform)) as client:
        first = await client.responses.create(model="auto", input="Name a bird.")
        second = await client.responses.create(
            model="auto", input="Another one.", previous_response_id=first.id
        )
        await client.responses.delete(first.id)
        with pytest.raises(openai.NotFoundError):
            await client.responses.retrieve(first.id)
        with pytest.raises(openai.NotFoundError):
            await client.responses.delete(first.id)
        with pytest.raises(openai.NotFoundError) as continued:
            await client.responses.create(
                model="auto", input="More.", previous_response_id=first.id
            )
        assert continued.value.param == "previous_response_id"
        # The response after it still continues from the whole history.
        third = await client.responses.create(
            model="auto", input="A third.", previous_response_id=second.id
        )
    one = first_answer("Name a bird.")
    two = answer_to((Role.SYSTEM, SYSTEM_PROMPT), (Role.USER, "Name a bird."),
                    (Role.ASSISTANT, one), (Role.USER, "Another one."))  # fmt: skip
    assert third.output_text == answer_to(
        (Role.SYSTEM, SYSTEM_PROMPT), (Role.USER, "Name a bird."), (Role.ASSISTANT, one),
        (Role.USER, "Another one."), (Role.ASSISTANT, two), (Role.USER, "A third."))  # fmt: skip


async def test_another_users_response_is_not_found(platform: LocalPlatform) -> None:
    async with sdk(platform, await new_user(platform)) as owner:
        mine = await owner.responses.create(model="auto", input="Say hello.", background=True)
    async with sdk(platform, await new_user(platform)) as other:
        with pytest.raises(openai.NotFoundError):
            await other.responses.retrieve(mine.id)
        with pytest.raises(openai.NotFoundError):
            await other.responses.retrieve(mine.id, stream=True, starting_after=0)
        with pytest.raises(openai.NotFoundError):
            await other.responses.cancel(mine.id)
        with pytest.raises(openai.NotFoundError):
            await other.responses.delete(mine.id)
        with pytest.raises(openai.NotFoundError):
            await other.responses.create(model="auto", input="Go on.", previous_response_id=mine.id)
    async with sdk(platform, await new_user(platform)) as owner_again:
        with pytest.raises(openai.NotFoundError):
            await owner_again.responses.retrieve("resp_no-such-response")


async def test_a_response_not_stored_takes_the_whole_history_and_cannot_be_read(
    platform: LocalPlatform,
) -> None:
    history = [
        {"role": "developer", "content": "You are brief."},
        {"role": "user", "content": "Name a fish."},
        {"role": "assistant", "content": "A trout."},
        {"role": "user", "content": "Another?"},
    ]
    async with sdk(platform, await new_user(platform)) as client:
        answered = await client.responses.create(model="auto", input=history, store=False)
        with pytest.raises(openai.NotFoundError):
            await client.responses.retrieve(answered.id)
    assert (answered.status, answered.store) == ("completed", False)
    assert answered.output_text == answer_to(
        (Role.SYSTEM, "You are brief."), (Role.USER, "Name a fish."),
        (Role.ASSISTANT, "A trout."), (Role.USER, "Another?"))  # fmt: skip


# Bad input -------------------------------------------------------------------------------------

BAD_BODIES = [
    ({"model": "auto"}, "input"),
    ({"model": "auto", "input": []}, "input"),
    ({"model": "auto", "input": 7}, "input"),
    ({"model": "auto", "input": [{"role": "tool", "content": "x"}]}, "input[0].role"),
    (
        {"model": "auto", "input": [{"role": "user", "content": [{"type": "input_image"}]}]},
        "input[0].content[0]",
    ),
    ({"model": "auto", "input": "Hi", "stream": "yes"}, "stream"),
    ({"model": "auto", "input": "Hi", "max_output_tokens": 0}, "max_output_tokens"),
    ({"model": "auto", "input": "Hi", "temperature": 0.2}, "temperature"),
    ({"model": "auto", "input": "Hi", "tools": [{"type": "web_search"}]}, "tools"),
    ({"model": "auto", "input": "Hi", "frobnicate": 1}, "frobnicate"),
    ({"model": "auto", "input": "Hi", "background": True, "store": False}, "background"),
    ({"model": "auto", "input": "Hi", "previous_response_id": 3}, "previous_response_id"),
    # Over the gateway's 32,000 characters: refused there, named as OpenAI names it.
    ({"model": "auto", "input": "word " * 7000}, "input"),
    (
        {
            "model": "auto",
            "input": [{"role": "assistant", "content": "x"}, {"role": "user", "content": "y"}],
        },
        "input",
    ),
]


@pytest.mark.parametrize(("body", "param"), BAD_BODIES)
async def test_bad_bodies_get_a_400_naming_the_field(platform, body, param) -> None:
    async with aiohttp.ClientSession() as http:
        async with http.post(
            f"{platform.edge_url}/v1/responses",
            data=json.dumps(body),
            headers={"Authorization": f"Bearer {platform.tokens['plus']}"},
        ) as answer:
            status, error = answer.status, (await answer.json())["error"]
    assert (status, error["param"], error["type"]) == (400, param, "invalid_request_error")
    assert error["message"]


async def test_bad_queries_and_unknown_ids(platform: LocalPlatform) -> None:
    headers = {"Authorization": f"Bearer {platform.tokens['plus']}"}
    base = f"{platform.edge_url}/v1/responses"
    async with aiohttp.ClientSession() as http:
        for query, param in [("stream=true&starting_after=-1", "starting_after"),
                             ("stream=maybe", "stream")]:  # fmt: skip
            async with http.get(f"{base}/resp_x?{query}", headers=headers) as answer:
                body = await answer.json()
            assert (answer.status, body["error"]["param"]) == (400, param)
        for path in ["chatcmpl-1", "resp_x.answer"]:
            async with http.get(f"{base}/{path}", headers=headers) as answer:
                assert answer.status == 404
        async with http.get(f"{base}/resp_x") as answer:
            assert (answer.status, (await answer.json())["error"]["code"]) == (
                401, "invalid_api_key")  # fmt: skip


# Chat completions that survive a drop (X-Resumable) ----------------------------------------------


async def read_chunks(response: aiohttp.ClientResponse, stop_after: int | None) -> list[SseEvent]:
    """The `id:`-numbered chunks, until [DONE] or stop_after chunks."""
    chunks: list[SseEvent] = []
    fields: dict[str, str] = {}
    async for raw in response.content:
        line = raw.decode().rstrip("\n")
        if line.startswith(":"):
            continue
        if line:
            key, _, value = line.partition(": ")
            fields[key] = value
            continue
        if fields.get("data") == "[DONE]":
            return chunks
        chunks.append(SseEvent(int(fields["id"]), "chunk", json.loads(fields["data"])))
        fields = {}
        if stop_after is not None and len(chunks) == stop_after:
            return chunks
    return chunks


async def test_a_resumable_completion_runs_on_and_resumes_by_last_event_id(
    platform: LocalPlatform,
) -> None:
    token = await new_user(platform)
    headers = {"Authorization": f"Bearer {token}"}
    body = {"model": "auto", "stream": True,
            "messages": [{"role": "user", "content": "Describe a harbour."}]}  # fmt: skip
    async with aiohttp.ClientSession() as http:
        async with http.post(
            f"{platform.edge_url}/v1/chat/completions",
            json=body,
            headers={**headers, "X-Resumable": "true"},
        ) as cut:
            before = await read_chunks(cut, stop_after=6)
        # The client went; the completion runs on for a resume.
        completion_id = before[0].data["id"]
        async with http.get(
            f"{platform.edge_url}/v1/chat/completions/{completion_id}/stream",
            headers={**headers, "Last-Event-ID": str(before[-1].id)},
        ) as resumed:
            assert resumed.status == 200
            after = await read_chunks(resumed, stop_after=None)
        async with http.get(
            f"{platform.edge_url}/v1/chat/completions/{completion_id}/stream",
            headers={"Authorization": f"Bearer {await new_user(platform)}"},
        ) as others:
            assert others.status == 404
    chunks = before + after
    assert [c.id for c in chunks[1:-1]] == list(range(2, len(chunks)))
    assert {c.data["id"] for c in chunks} == {completion_id}
    text = "".join(c.data["choices"][0]["delta"].get("content", "") for c in chunks)
    assert text == first_answer("Describe a harbour.")
    assert chunks[-1].data["choices"][0]["finish_reason"] == "stop"
