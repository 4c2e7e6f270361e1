"""One message end to end: edge -> gateway -> scheduler -> nodeagent -> llama.cpp, and back."""

from __future__ import annotations

import asyncio
import json
import uuid
from datetime import datetime

import aiohttp
import pytest

from clients.chatctl.platform import LocalPlatform
from gateway.node_client import NodeClient
from tests.api_schema import assert_conforms
from tests.sse import SseEvent, read_events

pytestmark = pytest.mark.slow


def auth(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def new_id(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex[:12]}"


async def send(
    http: aiohttp.ClientSession,
    url: str,
    token: str,
    conversation: str,
    content: str,
    message_id: str | None = None,
    **extra: object,
) -> tuple[int, list[SseEvent] | dict]:
    headers = {
        **auth(token),
        "Accept": "text/event-stream",
        "Idempotency-Key": message_id or new_id("m"),
    }
    async with http.post(
        f"{url}/v1/conversations/{conversation}/messages",
        json={"content": content, **extra},
        headers=headers,
    ) as response:
        if response.content_type == "text/event-stream":
            return response.status, await read_events(response)
        return response.status, await response.json()


def assert_well_formed(events: list[SseEvent]) -> None:
    assert [e.id for e in events] == list(range(1, len(events) + 1))
    assert events[0].event == "meta"
    assert events[-1].event == "done"
    assert all(e.event == "delta" for e in events[1:-1])


async def test_two_messages_in_one_conversation_stream_and_carry_history(
    platform: LocalPlatform,
) -> None:
    token = platform.tokens["free"]
    async with aiohttp.ClientSession() as http:
        # llama-server keeps a prefix per slot and sometimes gives the second turn the other
        # slot (no cache there): a fresh conversation then tries again, up to three.
        for _ in range(3):
            conversation = new_id("c")
            status, first = await send(
                http,
                platform.edge_url,
                token,
                conversation,
                "My name is Ada. Reply with one short sentence.",
            )
            assert status == 200
            assert_well_formed(first)
            meta = first[0].data
            assert meta["model"] == "smollm2-135m-instruct"
            assert meta["replica"].startswith("local-")
            answer = "".join(e.data["text"] for e in first if e.event == "delta")
            assert answer.strip()
            usage1 = first[-1].data["usage"]
            assert first[-1].data["finish"] in ("stop", "length")
            assert usage1["input"] > 0 and usage1["output"] > 0

            status, second = await send(
                http, platform.edge_url, token, conversation, "What is my name?"
            )
            assert status == 200
            assert_well_formed(second)
            usage2 = second[-1].data["usage"]
            # The second prompt holds the first turn and its answer. The answer's text read
            # back can be fewer tokens than were generated (the model's token sequence is not
            # always the tokenizer's own; 128 generated came back as about 110 once), so the
            # prompt grows by most of the answer's tokens, not all of them.
            assert usage2["input"] >= usage1["input"] + usage1["output"] * 3 // 4
            if usage2["cached"] > 0:  # and the replica found the shared prefix in its cache
                break
        assert usage2["cached"] > 0, "no second turn found its prefix cached in three tries"

        async with http.get(
            f"{platform.edge_url}/v1/conversations/{conversation}/messages", headers=auth(token)
        ) as response:
            stored = (await response.json())["messages"]
        assert [m["role"] for m in stored] == ["user", "assistant"] * 2
        # The stored answer in the events' terms: the same names, the same finish.
        # meta names the message sent: the answer is stored as its ".answer".
        assert {k: v for k, v in stored[1].items() if k != "createdAt"} == {
            "messageId": meta["messageId"] + ".answer",
            "conversationId": conversation,
            "seq": stored[1]["seq"],
            "parentId": meta["messageId"],
            "role": "assistant",
            "content": answer,
            "tokens": usage1["output"],
            "model": meta["model"],
            "replica": meta["replica"],
            "finish": first[-1].data["finish"],
            # One region: the meta's and the stored message's region are both empty.
            "region": meta["region"],
        }
        assert (stored[0]["messageId"], stored[0]["seq"]) == (meta["messageId"], 1)
        assert stored[1]["seq"] == 2
        for message in stored:
            assert_conforms("Message", message)
            assert datetime.fromisoformat(message["createdAt"]).tzinfo is not None
        assert stored[2]["parentId"] == stored[1]["messageId"]

        # Regenerate the second answer: a new message with the same parent (the first answer).
        status, again = await send(
            http,
            platform.edge_url,
            token,
            conversation,
            "What is my name?",
            parentId=stored[1]["messageId"],
        )
        assert status == 200 and again[-1].event == "done"
        async with http.get(
            f"{platform.edge_url}/v1/conversations/{conversation}/messages", headers=auth(token)
        ) as response:
            branches = (await response.json())["messages"]
        assert len(branches) == 6
        assert branches[4]["parentId"] == branches[2]["parentId"] == stored[1]["messageId"]
        # The regenerated prompt held the first turn but not the answer it replaces: the same
        # prompt as the second message's. Not asserted equal: after a cache restore
        # llama-server once reported 41 prompt tokens for it against 65 (its usage counts,
        # not the prompt the gateway built; the branch itself is checked above).
        assert 0 < again[-1].data["usage"]["input"] <= usage2["input"]
        assert all(int(m["tokens"]) > 0 for m in stored)


async def test_a_retry_with_the_same_key_replays_the_same_answer(platform: LocalPlatform) -> None:
    token = platform.tokens["plus"]
    conversation, message = new_id("c"), new_id("m")
    async with aiohttp.ClientSession() as http:
        first_send = send(http, platform.edge_url, token, conversation, "Say hi.", message)
        retry = send(http, platform.edge_url, token, conversation, "Say hi.", message)
        (s1, a), (s2, b) = await asyncio.gather(first_send, retry)
        assert s1 == s2 == 200
        assert [(e.id, e.event, e.data) for e in a] == [(e.id, e.event, e.data) for e in b]
        status, body = await send(
            http, platform.edge_url, token, conversation, "Something else.", message
        )
        assert status == 409 and "another message" in body["error"]["message"]
        async with http.get(
            f"{platform.edge_url}/v1/conversations/{conversation}/messages", headers=auth(token)
        ) as response:
            assert len((await response.json())["messages"]) == 2


async def test_resume_after_last_event_id_replays_the_rest(platform: LocalPlatform) -> None:
    token = platform.tokens["free"]
    conversation, message = new_id("c"), new_id("m")
    async with aiohttp.ClientSession() as http:
        _, events = await send(
            http, platform.edge_url, token, conversation, "Count from one to five.", message
        )
        async with http.get(
            f"{platform.edge_url}/v1/messages/{message}/stream",
            headers={**auth(token), "Last-Event-ID": "2"},
        ) as response:
            assert response.status == 200
            resumed = await read_events(response)
    assert [e.id for e in resumed] == [e.id for e in events[2:]]
    assert [e.data for e in resumed] == [e.data for e in events[2:]]


async def test_stop_ends_the_answer_as_cancelled(platform: LocalPlatform) -> None:
    token = platform.tokens["plus"]
    async with aiohttp.ClientSession() as http:
        # SmolLM sometimes ends even a "very long story" within a few lines, before the stop
        # arrives (the stop then says so): a new message tries again, up to three.
        for _ in range(3):
            conversation, message = new_id("c"), new_id("m")
            headers = {**auth(token), "Idempotency-Key": message}
            async with http.post(
                f"{platform.edge_url}/v1/conversations/{conversation}/messages",
                json={"content": "Write a very long story about the sea, in many chapters."},
                headers=headers,
            ) as response:
                assert response.status == 200
                seen, last = 0, b""
                async for raw in response.content:
                    if raw.startswith(b"event: "):
                        last = raw
                    elif raw == b"\n" and last.startswith(b"event: delta"):
                        seen += 1  # a whole delta event has arrived
                        if seen == 3:
                            break
                async with http.post(
                    f"{platform.edge_url}/v1/messages/{message}/stop", headers=auth(token)
                ) as stop:
                    assert stop.status == 200
                    stopped = (await stop.json())["stopped"]
                rest = await read_events(response)
            assert rest[-1].event == "done"
            if stopped:
                break
            assert rest[-1].data["finish"] in ("stop", "length")  # it had ended by itself
    assert stopped, "every answer ended before its stop in three tries"
    assert rest[-1].data["finish"] == "cancelled"
    assert rest[-1].data["usage"]["output"] < 1000


async def test_bad_requests_get_clear_statuses_and_store_nothing(platform: LocalPlatform) -> None:
    url, token = platform.edge_url, platform.tokens["free"]
    other = platform.tokens["plus"]
    conversation = new_id("c")
    async with aiohttp.ClientSession() as http:
        # Someone else's conversation, to probe with.
        status, _ = await send(http, url, other, conversation, "Hello.")
        assert status == 200
        async with http.get(
            f"{url}/v1/conversations/{conversation}/messages", headers=auth(other)
        ) as response:
            others_message = (await response.json())["messages"][0]["messageId"]

        async def post(path: str, body: bytes | str, headers: dict[str, str]) -> tuple[int, dict]:
            async with http.post(
                f"{url}{path}", data=body, headers={"Content-Type": "application/json", **headers}
            ) as r:
                return r.status, await r.json()

        path = f"/v1/conversations/{new_id('c')}/messages"
        cases = [
            (path, b"{not json", auth(token), 400, "not valid JSON"),
            (path, json.dumps({"content": 5}), auth(token), 400, "'content'"),
            (path, json.dumps({"content": "  "}), auth(token), 400, "empty"),
            (path, json.dumps({"content": "hi", "model": "huge"}), auth(token), 400, "'model'"),
            # A misspelt field is refused, not dropped (the answer would ignore the choice).
            (
                path,
                json.dumps({"content": "hi", "modle": "large"}),
                auth(token),
                400,
                "unrecognized request argument supplied: modle",
            ),
            (
                "/v1/conversations/bad%20id/messages",
                json.dumps({"content": "hi"}),
                auth(token),
                400,
                "conversation id",
            ),
            (path, json.dumps({"content": "hi"}), {}, 401, "Bearer"),
            (path, json.dumps({"content": "hi"}), auth("u_not-a-token"), 401, "not valid"),
            (
                path,
                json.dumps({"content": "hi", "parentId": others_message}),
                auth(token),
                404,
                others_message,
            ),
            (path, json.dumps({"content": "x" * 40_000}), auth(token), 413, "characters"),
            (path, json.dumps({"content": "x" * 70_000}), auth(token), 413, "bytes"),
        ]
        for target, body, headers, want, reason in cases:
            status, answer = await post(target, body, headers)
            assert (status, reason in answer["error"]["message"]) == (want, True), (target, body)

        for method, target in [
            ("GET", f"/v1/conversations/{conversation}"),
            ("GET", f"/v1/conversations/{conversation}/messages"),
            ("DELETE", f"/v1/conversations/{conversation}"),
            ("GET", f"/v1/messages/{others_message}"),
            ("GET", f"/v1/messages/{others_message}/stream"),
            ("POST", f"/v1/messages/{others_message}/stop"),
        ]:
            async with http.request(method, f"{url}{target}", headers=auth(token)) as response:
                assert response.status == 404, (method, target)
                assert "no " in (await response.json())["error"]["message"]

        # Nothing of the refused requests was stored, and the owner still has everything.
        async with http.get(f"{url}/v1/conversations", headers=auth(token)) as response:
            mine = (await response.json()).get("conversations", [])
        assert all(c["conversationId"] != conversation for c in mine)
        assert not any(c["conversationId"] == path.split("/")[3] for c in mine)
        async with http.get(
            f"{url}/v1/conversations/{conversation}/messages", headers=auth(other)
        ) as response:
            assert len((await response.json())["messages"]) == 2


async def test_each_stored_question_carries_the_engines_own_token_count(
    platform: LocalPlatform,
) -> None:
    """The gateway counts a message on the pool's previous replica while it picks: whichever
    replica counted, the stored count is the serving engine's own."""
    token = platform.tokens["free"]
    texts = ["Name three rivers in Europe, please.", "Écris une phrase sur les hiboux 🦉."]
    nodes = NodeClient(tls=platform.tls("gateway"))
    try:
        async with aiohttp.ClientSession() as http:
            for text in texts:
                message, conversation = new_id("m"), new_id("c")
                status, events = await send(http, platform.edge_url, token, conversation, text,
                                            message)  # fmt: skip
                assert status == 200 and events[-1].event == "done"
                async with http.get(
                    f"{platform.edge_url}/v1/messages/{message}", headers=auth(token)
                ) as response:
                    stored = (await response.json())["message"]
                assert_conforms("Message", stored)
                # One node: the count asked of it now is the serving engine's own.
                (address,) = platform.node_addresses()
                count = (await nodes.tokenize(address, [text]))[0]
                assert {k: v for k, v in stored.items() if k != "createdAt"} == {
                    "messageId": message,
                    "conversationId": conversation,
                    "seq": 1,
                    "parentId": "",
                    "role": "user",
                    "content": text,
                    "tokens": count,
                    "model": events[0].data["model"],  # whose tokens counted it
                    "replica": "",
                    "finish": None,
                    "region": "",
                }
                # The conversation's total is its turns' own counts, the question's exact one
                # included (after the first message the gateway plans on an upper bound and
                # the node counts the question beside the answer).
                async with http.get(f"{platform.edge_url}/v1/messages/{message}.answer",
                                    headers=auth(token)) as response:  # fmt: skip
                    answer = (await response.json())["message"]
                async with http.get(f"{platform.edge_url}/v1/conversations/{conversation}",
                                    headers=auth(token)) as response:  # fmt: skip
                    listed = (await response.json())["conversation"]
                assert listed["totalTokens"] == count + answer["tokens"]
    finally:
        await nodes.close()
