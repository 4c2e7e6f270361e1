"""Personal memory on the real processes (edge, gateway, scheduler, a simulated replica): the user
asks the assistant to remember something, the `remember` call writes it, /v1/memories lists
it with its time, and what later turns were sent (read back through prompt capture, the
exact prompt the engine answered) holds it only where the message is on its subject, and
never after it was deleted. The list is the user's own: edited, deleted, and another user's
entries are 404.

The simulated model is the script: offered a tool, it calls it with arguments drawn from
the tool's schema (a few of its words for `text`), then answers in prose."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
import uuid
from collections.abc import AsyncIterator
from datetime import datetime
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from chat.v1 import common_pb2
from chat.v1 import scheduler_service_pb2 as spb
from chat.v1 import scheduler_service_pb2_grpc as spb_grpc
from chat.v1.chat_service_pb2 import UpdateMemoryRequest
from clients.base import ClientError
from clients.chatctl.main import main as chatctl
from clients.chatctl.platform import LocalPlatform, PlatformSettings
from clients.memory_client import MemoryClient
from domain.memory import MEMORY_HEADER
from domain.types import Role
from tests.e2e.test_prompt_capture import captured
from tests.sse import read_events

pytestmark = pytest.mark.slow

SYSTEM_PROMPT = "You are a helpful assistant."
# The Plus segment's turn (the users here are Plus): stable for every Plus user, after the
# system prompt and before the user's memory.
TONE = "Warm and brief."
FACT = "The user pays for Plus"


@contextlib.asynccontextmanager
async def memory_platform(state_dir: Path, **settings: str) -> AsyncIterator[LocalPlatform]:
    """A platform of one simulated replica whose answers are short, with these gateway
    settings besides."""
    env = {
        "CHAT_NODEAGENT_ENGINE": "sim",
        "CHAT_NODEAGENT_SIM_ANSWER_TOKENS": "8,12",
        "CHAT_GATEWAY_SYSTEM_PROMPT": SYSTEM_PROMPT,
        "CHAT_GATEWAY_ROUTER": "false",
        "CHAT_GATEWAY_COMPACTION": "false",
    }
    local = LocalPlatform(PlatformSettings(state_dir=state_dir, edge_listen="127.0.0.1:0",
                                           nodes=1, extra_env={**env, **settings}))  # fmt: skip
    await local.start()
    try:
        yield local
    finally:
        await local.stop()


@pytest.fixture(scope="module")
async def platform(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[LocalPlatform]:
    async with memory_platform(
        tmp_path_factory.mktemp("memory"),
        CHAT_GATEWAY_MEMORY_MAX_CHARS="200",
        CHAT_GATEWAY_PLUS_TONE=TONE,
        CHAT_GATEWAY_PLUS_PROFILE_FACTS=FACT,
    ) as local:
        yield local


class User:
    def __init__(self, platform: LocalPlatform, user_id: str, token: str) -> None:
        self.platform = platform
        self.user_id = user_id
        self.headers = {"Authorization": f"Bearer {token}"}

    async def call(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        async with aiohttp.ClientSession() as http:
            async with http.request(method, f"{self.platform.edge_url}{path}", json=body,
                                    headers=self.headers) as reply:  # fmt: skip
                return reply.status, await reply.json()

    async def memories(self) -> list[dict[str, Any]]:
        status, body = await self.call("GET", "/v1/memories")
        assert status == 200, body
        return body["memories"]

    async def say(self, content: str, tools: list[Any] | None = None) -> tuple[str, list[Any]]:
        """A message in a new conversation: its message id and its events."""
        body: dict[str, Any] = {"content": content}
        if tools is not None:
            body["tools"] = tools
        conversation = f"c_{uuid.uuid4().hex[:12]}"
        async with aiohttp.ClientSession() as http:
            async with http.post(
                f"{self.platform.edge_url}/v1/conversations/{conversation}/messages",
                json=body, headers=self.headers,
            ) as answer:  # fmt: skip
                assert answer.status == 200, await answer.text()
                events = await read_events(answer)
        assert events[-1].event == "done", events
        return events[0].data["messageId"], events

    async def sent(self, content: str) -> list[tuple[Role, str]]:
        """The turns the engine was sent for a new conversation's message."""
        message_id, _ = await self.say(content)
        kept = await captured(self.platform, self.user_id, message_id)
        return [(turn.role, turn.text) for turn in kept.turns]


async def new_user(platform: LocalPlatform) -> User:
    user_id = f"u-{uuid.uuid4().hex[:10]}"
    async with platform.channel(platform.scheduler_address) as channel:
        created = await spb_grpc.UserServiceStub(channel).CreateUser(
            spb.UserServiceCreateUserRequest(user_id=user_id, tier=common_pb2.TIER_PLUS),
            metadata=(("authorization", f"Bearer {platform.admin_token}"),),
        )
    return User(platform, user_id, created.token)


SYSTEM = (Role.SYSTEM, SYSTEM_PROMPT)
SEGMENT = (Role.SYSTEM, f"How to answer:\n{TONE}\n\nAbout the user:\n- {FACT}")


def block(*texts: str) -> tuple[Role, str]:
    return Role.SYSTEM, "\n".join([MEMORY_HEADER, *(f"- {text}" for text in texts)])


async def test_a_remembered_fact_reaches_only_the_turns_on_its_subject(
    platform: LocalPlatform,
) -> None:
    user = await new_user(platform)
    ask = "Please remember this about me."
    before = time.time()
    asked_id, events = await user.say(ask, tools=[{"type": "remember"}])
    names = [event.event for event in events]
    assert names[:4] == ["meta", "toolsListed", "toolCall", "toolResult"], names
    call, result = events[2].data, events[3].data
    assert call["name"] == "remember"

    (entry,) = await user.memories()
    assert (entry["source"], entry["pinned"], entry["aged"]) == ("model", False, False)
    assert result["output"] == f"remembered ({entry['id']}): {entry['text']}"
    assert entry["createdAt"] == entry["updatedAt"]
    # The tool turn's capture: its first step's prompt, and the tool it offered.
    kept = await captured(platform, user.user_id, asked_id)
    assert [(t.role, t.text) for t in kept.turns] == [SYSTEM, SEGMENT, (Role.USER, ask)]
    assert [tool.name for tool in kept.tools] == ["remember"]
    written = datetime.fromisoformat(entry["createdAt"].replace("Z", "+00:00")).timestamp()
    assert before - 1 <= written <= time.time() + 1

    fact = entry["text"]
    on_subject = f"What do you make of {fact.split()[0]}?"
    assert await user.sent(on_subject) == [
        SYSTEM, SEGMENT, block(fact), (Role.USER, on_subject)]  # fmt: skip
    unrelated = "How do trains run on time?"
    assert await user.sent(unrelated) == [SYSTEM, SEGMENT, (Role.USER, unrelated)]

    status, body = await user.call("DELETE", f"/v1/memories/{entry['id']}")
    assert (status, body) == (200, {"deleted": True})
    assert await user.memories() == []
    assert await user.sent(on_subject) == [SYSTEM, SEGMENT, (Role.USER, on_subject)]


async def test_the_list_is_the_users_own_to_edit(platform: LocalPlatform) -> None:
    user, other = await new_user(platform), await new_user(platform)
    status, created = await user.call("POST", "/v1/memories", {"text": "  I keep bees  "})
    assert status == 201, created
    memory = created["memory"]
    assert (memory["text"], memory["source"], memory["pinned"]) == ("I keep bees", "user", False)
    status, edited = await user.call("PATCH", f"/v1/memories/{memory['id']}", {"pinned": True})
    assert status == 200 and edited["memory"]["pinned"] is True
    assert edited["memory"]["text"] == "I keep bees"
    status, edited = await user.call("PATCH", f"/v1/memories/{memory['id']}",
                                     {"text": "I keep bees and hens"})  # fmt: skip
    assert status == 200 and edited["memory"]["pinned"] is True
    assert [m["text"] for m in await user.memories()] == ["I keep bees and hens"]

    # The memory, in two entries, on a message about one of them: both sorted by writing.
    status, _ = await user.call("POST", "/v1/memories", {"text": "My hens lay brown eggs"})
    assert status == 201
    asked = "Should my hens get more light in winter?"
    assert await user.sent(asked) == [
        SYSTEM, SEGMENT, block("I keep bees and hens", "My hens lay brown eggs"),
        (Role.USER, asked)]  # fmt: skip

    # Another user sees none of it and can touch none of it.
    assert await other.memories() == []
    for method, body in (("PATCH", {"text": "mine now"}), ("DELETE", None)):
        status, error = await other.call(method, f"/v1/memories/{memory['id']}", body)
        assert status == 404, error
    assert await other.sent(asked) == [SYSTEM, SEGMENT, (Role.USER, asked)]


@pytest.mark.parametrize(
    ("method", "path", "body", "reason"),
    [
        ("POST", "/v1/memories", {}, "'text' is required"),
        ("POST", "/v1/memories", {"text": "   "}, "a memory needs some text"),
        ("POST", "/v1/memories", {"text": "x" * 201}, "at most 200 characters"),
        ("POST", "/v1/memories", {"text": 5}, "'text' must be a string"),
        ("POST", "/v1/memories", {"text": "a", "pinned": "yes"}, "'pinned' must be true or false"),
        ("POST", "/v1/memories", {"text": "a", "tags": []}, "unrecognized request argument"),
        ("POST", "/v1/memories", [1], "the body must be a JSON object"),
        ("PATCH", "/v1/memories/mem_1", {}, "name 'text', 'pinned' or both"),
        ("PATCH", "/v1/memories/bad%20id", {"pinned": True}, "memory id must be"),
        ("DELETE", "/v1/memories/mem_nothing", None, "no memory 'mem_nothing'"),
    ],
)
async def test_bad_requests_are_refused_and_keep_nothing(
    platform: LocalPlatform, method: str, path: str, body: Any, reason: str
) -> None:
    user = await new_user(platform)
    status, error = await user.call(method, path, body)
    assert status in (400, 404), error
    assert reason in error["error"]["message"]
    assert await user.memories() == []


async def test_the_python_client_reads_and_writes_the_same_list(platform: LocalPlatform) -> None:
    user = await new_user(platform)
    token = user.headers["Authorization"].removeprefix("Bearer ")
    async with MemoryClient(platform.gateway_address, token, tls=platform.tls("client")) as client:
        kept = await client.create("I run on Sundays", pinned=True)
        assert (kept.text, kept.pinned, kept.source, kept.aged) == (
            "I run on Sundays", True, "user", False)  # fmt: skip
        edited = await client.update(kept.memory_id, text="I run on Saturdays")
        assert (edited.text, edited.pinned, edited.created_at) == (
            "I run on Saturdays", True, kept.created_at)  # fmt: skip
        assert edited.updated_at >= kept.updated_at
        assert await client.list() == [edited]
        assert [m["text"] for m in await user.memories()] == ["I run on Saturdays"]
        with pytest.raises(ClientError) as empty:
            await client.update(kept.memory_id)
        assert empty.value.code == "INVALID_ARGUMENT"
        # A mask naming a field that cannot change is refused by the gateway itself.
        request = UpdateMemoryRequest(memory_id=kept.memory_id, update_mask=["source"])
        with pytest.raises(ClientError) as masked:
            await client._unary(client._stub.UpdateMemory, request)
        assert (masked.value.code, masked.value.message) == (
            "INVALID_ARGUMENT",
            "update_mask names 'source': only text and pinned can be changed",
        )
        await client.delete(kept.memory_id)
        with pytest.raises(ClientError) as gone:
            await client.delete(kept.memory_id)
        assert gone.value.code == "NOT_FOUND"
        assert await client.list() == []


async def test_an_operator_exports_and_deletes_a_users_memories(
    platform: LocalPlatform, capsys: pytest.CaptureFixture[str]
) -> None:
    user = await new_user(platform)
    texts = ["I keep bees", "My hens lay brown eggs", "I live by the sea"]
    for text in texts:
        status, _ = await user.call("POST", "/v1/memories", {"text": text})
        assert status == 201
    flags = ["--json", "--scheduler", platform.scheduler_address,
             "--admin-token", platform.admin_token, "--tls-dir", str(platform.tls_dir)]  # fmt: skip

    async def chatctl_json(*args: str) -> Any:
        capsys.readouterr()
        assert await asyncio.to_thread(chatctl, [*args, *flags]) == 0
        return json.loads(capsys.readouterr().out)

    exported = await chatctl_json("users", "memories", user.user_id)
    listed = await user.memories()
    assert [(m["memory_id"], m["text"], m["source"]) for m in exported] == [
        (m["id"], m["text"], m["source"]) for m in listed]  # fmt: skip
    assert sorted(m["text"] for m in exported) == sorted(texts)

    one = listed[0]["id"]
    assert await chatctl_json("users", "forget", user.user_id, one) == {
        "user_id": user.user_id, "deleted": 1}  # fmt: skip
    assert [m["id"] for m in await user.memories()] == [m["id"] for m in listed[1:]]
    # An entry the user does not have: refused, and nothing deleted.
    capsys.readouterr()
    assert await asyncio.to_thread(chatctl, ["users", "forget", user.user_id, one, *flags]) != 0
    assert len(await user.memories()) == 2
    assert await chatctl_json("users", "forget", user.user_id) == {
        "user_id": user.user_id, "deleted": 2}  # fmt: skip
    assert await user.memories() == []

    # Deleting the user deletes their memory with them.
    status, _ = await user.call("POST", "/v1/memories", {"text": "I keep bees"})
    assert status == 201
    await chatctl_json("users", "delete", user.user_id)
    capsys.readouterr()
    assert await asyncio.to_thread(chatctl, ["users", "memories", user.user_id, *flags]) != 0
    assert "NOT_FOUND" in capsys.readouterr().err


@pytest.fixture(scope="module")
async def ageing(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[LocalPlatform]:
    """Entries age after a second here, so a test can watch one age."""
    async with memory_platform(
        tmp_path_factory.mktemp("memory-ageing"), CHAT_GATEWAY_MEMORY_MAX_AGE_DAYS=str(1 / 86_400)
    ) as local:
        yield local


async def test_an_aged_entry_is_read_by_no_turn_until_pinned(ageing: LocalPlatform) -> None:
    user = await new_user(ageing)
    status, created = await user.call("POST", "/v1/memories", {"text": "I sail on Sundays"})
    assert status == 201
    memory = created["memory"]
    asked = "Is Sunday good for sailing?"
    # Waited on the entry's own state, as the list shows it, not on a fixed time.
    deadline = time.monotonic() + 30
    while not (await user.memories())[0]["aged"]:
        assert time.monotonic() < deadline, "the entry never aged"
        await asyncio.sleep(0.1)
    assert await user.sent(asked) == [SYSTEM, (Role.USER, asked)]
    status, pinned = await user.call("PATCH", f"/v1/memories/{memory['id']}", {"pinned": True})
    assert status == 200 and pinned["memory"]["aged"] is False
    assert await user.sent(asked) == [SYSTEM, block("I sail on Sundays"), (Role.USER, asked)]
