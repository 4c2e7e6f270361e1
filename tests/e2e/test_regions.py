"""Three regions on one machine (loopback), each a whole platform with its own store, and the
global directory in one etcd: spilling, staying, residency, history kept at home (and read,
rated and deleted from any region), answers resumed and stopped from any region, a region
lost and back."""

from __future__ import annotations

import asyncio
import signal
import uuid
from collections.abc import AsyncIterator

import aiohttp
import pytest

from clients.chatctl.platform import LocalPlatform, PlatformSettings
from domain.errors import NotFound
from domain.memory import memory_block
from domain.tiers import PLUS_DEFAULTS
from domain.types import Role, Tier
from infra.bearer import token_hash
from infra.certs import Authority
from infra.directory import Directory, DirectoryUser
from store.base import Store
from store.records import CapturedPrompt
from tests.clients.test_chatctl import admin_flags, chatctl
from tests.e2e.regions_support import (
    HOME_OUT,
    away_user,
    conversations,
    create_user,
    delete,
    level,
    listed,
    listed_error,
    pin,
    rate,
    ratings_counted,
    refused,
    region_store,
    responses,
    resume,
    resumed_and_stopped_at,
    send,
    send_events,
    stop,
    until_seen,
)
from tests.servers import Etcd

pytestmark = pytest.mark.slow

NAMES = ("a", "b", "c")
PLUS_CAPACITY = PLUS_DEFAULTS.limit.capacity
# Within the 10 s the design allows: published every 2 s, out after 6 s, read every 1 s.
OUT_WITHIN_S = 10.0


@pytest.fixture(scope="module")
async def regions(
    tmp_path_factory: pytest.TempPathFactory, etcd_server: Etcd
) -> AsyncIterator[dict[str, LocalPlatform]]:
    authority = Authority.create()
    prefix = f"/regions-test-{uuid.uuid4().hex[:8]}/"
    platforms = {
        name: LocalPlatform(
            PlatformSettings(
                state_dir=tmp_path_factory.mktemp(f"region-{name}"),
                edge_listen="127.0.0.1:0",
                nodes=1,
                region=name,
                global_etcd_endpoint=etcd_server.endpoint,
                authority=authority,
                extra_env={
                    "CHAT_NODEAGENT_ENGINE": "sim",
                    "CHAT_NODEAGENT_SIM_SPEED": "2",
                    "CHAT_NODEAGENT_SIM_ANSWER_TOKENS": "30,120",
                    "CHAT_GATEWAY_ROUTER": "false",
                    "CHAT_GATEWAY_GLOBAL_PREFIX": prefix,
                    "CHAT_SCHEDULER_GLOBAL_PREFIX": prefix,
                },
            )
        )
        for name in NAMES
    }
    try:
        await asyncio.gather(*(p.start() for p in platforms.values()))
        yield platforms
    finally:
        await asyncio.gather(*(p.stop() for p in platforms.values()))


async def until_captured(store: Store, user_id: str, message_id: str) -> CapturedPrompt:
    """A turn's captured prompt, once its gateway has written it (after the answer's end)."""
    deadline = asyncio.get_running_loop().time() + 30.0
    while True:
        try:
            return await store.captured_prompt(user_id, message_id)
        except NotFound:
            if asyncio.get_running_loop().time() > deadline:
                raise
        await asyncio.sleep(0.05)


async def test_a_full_home_spills_and_the_conversation_stays_where_it_went(regions) -> None:
    a = regions["a"]
    user_id = f"u-{uuid.uuid4().hex[:8]}"
    token = await create_user(a, user_id=user_id)
    async with aiohttp.ClientSession() as http:
        await pin(a, 3)
        try:
            await until_seen(http, a, {"rung:a": 3, "up:b": 1, "up:c": 1}, 10.0)
            first, first_text, first_id = await send(http, a, token, "c1", "Hello from home")
            # Home full: the region with the most room (b and c idle alike: by name).
            assert (first["region"], first["regionNotice"]) == ("b", "")
            # The bucket is home's: the answer run at b was charged at a, and b's edge shows
            # that bucket (read later, it has refilled as much or more). (Plus refills about 23
            # tokens a second: the charge shows for many seconds.)
            charged, seen_at_b = await level(http, a, token), await level(http, regions["b"], token)
            assert charged <= seen_at_b < PLUS_CAPACITY, (charged, seen_at_b)
        finally:
            await pin(a, None)
        # Home has room again, but the conversation's cache is at b now: it stays there.
        await until_seen(http, a, {"rung:a": 0}, 10.0)
        second, second_text, _ = await send(
            http, a, token, "c1", "And a second turn", parent=first_id + ".answer"
        )
        assert second["region"] == "b"
        # History stays home: the turns run at b are stored at a, and only there.
        status, messages = await listed(http, a, token, "c1")
        assert status == 200
        assert [(m["role"], m["content"], m["region"]) for m in messages] == [
            ("user", "Hello from home", "b"),
            ("assistant", first_text, "b"),
            ("user", "And a second turn", "b"),
            ("assistant", second_text, "b"),
        ]
        async with region_store(regions["b"]) as kept_at_b:
            with pytest.raises(NotFound):
                await kept_at_b.get_conversation(user_id, "c1")
        # So is each turn's captured prompt, written by b's gateway after the answer's end.
        async with region_store(a) as kept_at_a:
            prompt = await until_captured(kept_at_a, user_id, first_id)
        assert [(t.role.value, t.text) for t in prompt.turns][1:] == [("user", "Hello from home")]
        assert (prompt.conversation_id, prompt.version) == ("c1", first["version"])
        # b's edge shows the same, read from a.
        assert await listed(http, regions["b"], token, "c1") == (200, messages)
        # An answer run at b is rated at a with the version that served it there, wherever the
        # user rates it, and counted in a's tally.
        counted = (first["version"], "plus", "up")
        before = (await ratings_counted(http, a)).get(counted, 0.0)
        first_answer = f"{first_id}.answer"
        assert await rate(http, regions["b"], token, first_answer, "up") == (
            200,
            {"messageId": first_answer, "rating": "up", "version": first["version"]},
        )
        assert (await ratings_counted(http, a)).get(counted) == before + 1
        # A new conversation with home's room back runs at home.
        third, _, _ = await send(http, a, token, "c2", "A new one")
        assert third["region"] == "a"


async def test_a_pinned_user_never_leaves_home(regions) -> None:
    a = regions["a"]
    token = await create_user(a, pinned=True)
    async with aiohttp.ClientSession() as http:
        await pin(a, 3)
        try:
            await until_seen(http, a, {"rung:a": 3, "up:b": 1}, 10.0)
            meta, text, _ = await send(http, a, token, "p1", "Stay where my data is")
        finally:
            await pin(a, None)
        assert meta["region"] == "a"
        status, messages = await listed(http, a, token, "p1")
        assert (status, [(m["content"], m["region"]) for m in messages]) == (
            200,
            [("Stay where my data is", "a"), (text, "a")],
        )


async def test_a_user_reaching_another_region_is_served_by_home(regions) -> None:
    token = await create_user(regions["c"])
    async with aiohttp.ClientSession() as http:
        meta, text, _ = await send(http, regions["b"], token, "far", "Hello from afar")
        assert meta["region"] == "c"
        status, messages = await listed(http, regions["c"], token, "far")
        assert (status, [m["content"] for m in messages]) == (200, ["Hello from afar", text])


async def test_chatctl_creates_a_pinned_user_and_lists_the_regions(regions, etcd_server) -> None:
    a = regions["a"]
    prefix = a.settings.extra_env["CHAT_GATEWAY_GLOBAL_PREFIX"]
    created = await chatctl("users", "create", "ctl-pinned", "--region", "a", "--pinned",
                            "--tier", "plus", "--json", *admin_flags(a))  # fmt: skip
    assert created.code == 0, created.err
    directory = Directory(etcd_server.endpoint, prefix)
    try:
        listed_user = await directory.user("ctl-pinned")
    finally:
        await directory.close()
    assert listed_user == DirectoryUser(
        "ctl-pinned", Tier.PLUS, "a", True, token_hash(created.json()["token"])
    )
    # `users list` shows each user's home and residency, as the directory lists them.
    shown_users = await chatctl("users", "list", "--json", *admin_flags(a))
    assert shown_users.code == 0, shown_users.err
    (pinned,) = [u for u in shown_users.json() if u["user_id"] == "ctl-pinned"]
    assert (pinned["home_region"], pinned["pinned"]) == ("a", True)
    dev = {u["user_id"]: (u["home_region"], u["pinned"]) for u in shown_users.json()}
    assert dev["dev-free-a"] == ("a", False)
    table = (await chatctl("users", "list", *admin_flags(a))).out.splitlines()
    assert table[0].split() == ["USER", "TIER", "TOKEN", "HOME", "PINNED", "CREATED"]
    (row,) = [line.split()[:5] for line in table if line.startswith("ctl-pinned ")]
    assert row == ["ctl-pinned", "plus", "yes", "a", "yes"]
    # Another region's scheduler does not create a's users: their history lives at a.
    refused = await chatctl("users", "create", "ctl-wrong", "--region", "a",
                            *admin_flags(regions["b"]))  # fmt: skip
    assert (refused.code, "created by that region's scheduler" in refused.err) == (1, True)
    shown = await chatctl("regions", "--etcd", etcd_server.endpoint, "--prefix", prefix, "--json")
    assert shown.code == 0, shown.err
    small = {row["region"]: row for row in shown.json() if row["pool"] == "small"}
    assert {name: (row["up"], row["ready_replicas"]) for name, row in small.items()} == {
        "a": (True, 1),
        "b": (True, 1),
        "c": (True, 1),
    }


async def test_an_answer_kept_at_home_is_rated_from_another_region(regions, etcd_server) -> None:
    b, c = regions["b"], regions["c"]
    user_id = f"u-{uuid.uuid4().hex[:8]}"
    token = await create_user(c, user_id=user_id)
    async with aiohttp.ClientSession() as http:
        meta, _, question_id = await send(http, b, token, "rated", "Rate me from afar")
        assert (meta["region"], bool(meta["version"])) == ("c", True)
        answer_id = f"{question_id}.answer"
        counted = (meta["version"], "plus", "down")
        before = (await ratings_counted(http, c)).get(counted, 0.0)
        # Rated at b's edge: stored at c with the answer and counted in c's tally.
        assert await rate(http, b, token, answer_id, "down", "too short") == (
            200,
            {"messageId": answer_id, "rating": "down", "version": meta["version"]},
        )
        assert (await ratings_counted(http, c)).get(counted) == before + 1
        assert (await ratings_counted(http, b)).get(counted, 0.0) == 0.0
        async with region_store(c) as kept_at_c:
            stored = await kept_at_c.feedback_of(user_id, answer_id)
        assert (stored.rating, stored.comment, stored.version) == (
            "down",
            "too short",
            meta["version"],
        )
        # Rated again at home, the same: stored again, not counted twice.
        assert (await rate(http, c, token, answer_id, "down"))[0] == 200
        assert (await ratings_counted(http, c)).get(counted) == before + 1
        status, body = await rate(http, b, token, "nosuch.answer", "up")
        assert (status, body["error"]["message"]) == (404, "no message 'nosuch.answer'")
        status, body = await rate(http, b, token, question_id, "up")
        assert (status, body["error"]["message"]) == (
            400,
            f"message {question_id!r} is not an answer: only answers are rated",
        )
        # A user whose home region is not running: 503, and why.
        status, body = await rate(http, b, await away_user(etcd_server, b), answer_id, "up")
        assert (status, body["error"]["message"]) == (503, HOME_OUT)


async def test_a_user_sees_the_lists_kept_at_home_from_another_region(regions, etcd_server) -> None:
    b, c = regions["b"], regions["c"]
    token = await create_user(c)
    async with aiohttp.ClientSession() as http:
        _, older_text, _ = await send(http, c, token, "older", "First, at home")
        _, newer_text, _ = await send(http, b, token, "newer", "Second, from afar")
        # One list on every device: b's edge reads c's, a page at a time.
        status, home_list = await conversations(http, c, token)
        assert (status, [x["conversationId"] for x in home_list["conversations"]]) == (
            200,
            ["newer", "older"],
        )
        status, first = await conversations(http, b, token, "?limit=1")
        assert (status, first["conversations"]) == (200, home_list["conversations"][:1])
        after_first = f"?limit=1&cursor={first['nextCursor']}"
        status, second = await conversations(http, b, token, after_first)
        assert (status, second["conversations"]) == (200, home_list["conversations"][1:])
        for conversation, question, answer in (
            ("older", "First, at home", older_text),
            ("newer", "Second, from afar", newer_text),
        ):
            status, messages = await listed(http, b, token, conversation)
            assert (status, [m["content"] for m in messages]) == (200, [question, answer])
            assert (status, messages) == await listed(http, c, token, conversation)
        status, body = await listed_error(http, b, token, "/v1/conversations/nosuch/messages")
        assert (status, body) == (404, "no conversation 'nosuch'")
        # Deleted at b's edge: gone from the list at home.
        assert await delete(http, b, token, "older") == (200, {"deleted": True})
        status, home_list = await conversations(http, c, token)
        assert (status, [x["conversationId"] for x in home_list["conversations"]]) == (
            200,
            ["newer"],
        )
        assert await delete(http, b, token, "older") == (
            404,
            {"error": {"status": 404, "message": "no conversation 'older'"}},
        )
        away = await away_user(etcd_server, b)
        assert await listed_error(http, b, away, "/v1/conversations") == (503, HOME_OUT)
        status, body = await listed_error(http, b, away, "/v1/conversations/older/messages")
        assert (status, body) == (503, HOME_OUT)


async def test_an_answer_running_at_home_is_resumed_and_stopped_from_another_region(
    regions,
) -> None:
    b = regions["b"]
    token = await create_user(regions["c"])
    async with aiohttp.ClientSession() as http:
        events, message_id = await send_events(http, b, token, "far-run", "Resume me from afar")
        assert events[0].data["region"] == "c"
        await resumed_and_stopped_at(http, b, token, events, message_id, "c")
        assert await resume(http, b, token, "nosuch", 0) == (
            404,
            "no answer 'nosuch' is streaming or recently ended",
        )
        assert await stop(http, b, token, "nosuch") == (404, "no message 'nosuch'")


async def test_a_spilled_answer_is_resumed_and_stopped_at_home(regions) -> None:
    a = regions["a"]
    token = await create_user(a)
    async with aiohttp.ClientSession() as http:
        await pin(a, 3)
        try:
            await until_seen(http, a, {"rung:a": 3, "up:b": 1, "up:c": 1}, 10.0)
            events, message_id = await send_events(http, a, token, "spilled", "Run me away")
            assert events[0].data["region"] == "b"
            # A new conversation spills to the region with the most room: b, or c while b's
            # last published busy share still counts the answer that just ran there.
            await resumed_and_stopped_at(http, a, token, events, message_id, "b", ("b", "c"))
        finally:
            await pin(a, None)


async def test_a_response_kept_at_home_is_read_and_deleted_from_another_region(
    regions, etcd_server
) -> None:
    b, c = regions["b"], regions["c"]
    token = await create_user(c)
    async with aiohttp.ClientSession() as http:
        status, created = await responses(http, b, token, "POST", body={"model": "auto",
                                          "input": "Keep me at home"})  # fmt: skip
        assert (status, created["status"]) == (200, "completed")
        path = f"/{created['id']}"
        # Read at b from c, where it is kept: as c's edge reads it.
        read_at_b, read_at_c = (await responses(http, b, token, "GET", path),
                                await responses(http, c, token, "GET", path))  # fmt: skip
        assert read_at_b == read_at_c
        assert (read_at_b[0], read_at_b[1]["output"]) == (200, created["output"])
        # Deleted at b, it is deleted at home.
        assert await responses(http, b, token, "DELETE", path) == (
            200, {"id": created["id"], "object": "response", "deleted": True},
        )  # fmt: skip
        gone = f"no response {created['id']!r}"
        for edge in (b, c):
            status, body = await responses(http, edge, token, "GET", path)
            assert (status, body["error"]["message"]) == (404, gone)
        status, body = await responses(http, b, token, "DELETE", "/resp_nosuch")
        assert (status, body["error"]["message"]) == (404, "no response 'resp_nosuch'")
        # Home out: what is kept there cannot be read or deleted meanwhile.
        away = await away_user(etcd_server, b)
        for method in ("GET", "DELETE"):
            status, body = await responses(http, b, away, method, "/resp_older")
            assert (status, body["error"]["message"]) == (503, HOME_OUT)
        # Meanwhile their messages run here, charged to this region's bucket: that one shows.
        assert await level(http, b, away) == PLUS_CAPACITY


async def test_a_region_killed_whole_is_out_and_its_users_wait_for_it(regions) -> None:
    a, b, c = regions["a"], regions["b"], regions["c"]
    carol_id = f"u-{uuid.uuid4().hex[:8]}"
    carol = await create_user(c, user_id=carol_id)
    pia = await create_user(c, pinned=True)
    bob = await create_user(b)
    async with aiohttp.ClientSession() as http:
        await until_seen(http, a, {"up:c": 1}, 10.0)
        # A conversation kept at home, its answer rated.
        _, first_text, first_id = await send(http, a, carol, "kept", "Hello from home")
        assert (await rate(http, a, carol, f"{first_id}.answer", "up"))[0] == 200
        # An answer in flight at b while c dies: it ends whole.
        started = asyncio.Event()
        in_flight = asyncio.create_task(
            send(http, b, bob, "b1", "Keep going while c dies", started=started)
        )
        await started.wait()
        for child in c.children:
            child.process.send_signal(signal.SIGKILL)
        await asyncio.gather(*(child.process.wait() for child in c.children))
        out_after_s = await until_seen(http, a, {"up:c": 0}, OUT_WITHIN_S)
        # Home out: its user's messages wait for it, to the conversation kept there and to a
        # new one alike (a cannot tell them apart), and a keeps nothing of theirs.
        c_out = HOME_OUT.replace("'z'", "'c'")
        refusal = (503, {"error": {"status": 503, "message": c_out}}, "10")
        assert await refused(http, a, carol, "kept", "Still there?") == refusal
        assert await refused(http, a, carol, "lost", "Is anyone there?") == refusal
        async with region_store(a) as kept_at_a:
            assert await kept_at_a.list_conversations(carol_id, 10) == []
        assert await listed_error(http, a, carol, "/v1/conversations") == (503, c_out)
        assert await listed_error(http, a, carol, "/v1/conversations/kept/messages") == (
            503,
            c_out,
        )
        status, body = await rate(http, a, carol, f"{first_id}.answer", "down")
        assert (status, body["error"]["message"]) == (503, c_out)
        # A pinned user's conversations stay in their region, even while it is out.
        assert await refused(http, a, pia, "pinned", "Anyone?") == (
            503,
            {"error": {"status": 503, "message": "your home region 'c' is unavailable; "
                       "residency keeps your conversations there"}},
            "10",
        )  # fmt: skip
        bob_meta, bob_text, _ = await in_flight
        assert bob_meta["region"] == "b"
        status, messages = await listed(http, b, bob, "b1")
        assert (status, [m["content"] for m in messages]) == (
            200,
            ["Keep going while c dies", bob_text],
        )
        print(f"region c out at a's gateway {out_after_s:.1f} s after the kill")
        # c back: its users go home again.
        for child in list(c.children):
            await c.restart(child.name)
        # Back once its node is ready again: a region without a ready replica is full. In
        # c's own view too: a's gateway passes the message to c's, which spills it to a
        # neighbour while it has not yet seen its own replica ready.
        for viewer in (a, c):
            await until_seen(http, viewer, {"up:c": 1, "ready:c": 1}, 30.0)
        again, again_text, _ = await send(http, a, carol, "kept", "Back home?")
        assert again["region"] == "c"
        # One conversation under its id, every turn in it, and its rating kept.
        status, messages = await listed(http, a, carol, "kept")
        assert (status, [(m["role"], m["content"]) for m in messages]) == (
            200,
            [
                ("user", "Hello from home"),
                ("assistant", first_text),
                ("user", "Back home?"),
                ("assistant", again_text),
            ],
        )
        for edge in (a, c):
            status, listing = await conversations(http, edge, carol)
            assert (status, [x["conversationId"] for x in listing["conversations"]]) == (
                200,
                ["kept"],
            )
        async with region_store(c) as kept_at_c:
            rated = await kept_at_c.feedback_of(carol_id, f"{first_id}.answer")
        assert rated.rating == "up"


async def test_a_users_memory_is_kept_at_home_and_read_from_another_region(regions) -> None:
    b, c = regions["b"], regions["c"]
    user_id = f"u-{uuid.uuid4().hex[:8]}"
    token = await create_user(c, user_id=user_id)
    headers = {"Authorization": f"Bearer {token}"}
    async with aiohttp.ClientSession() as http:
        # Written at b's edge: kept at c, nowhere else.
        async with http.post(f"{b.edge_url}/v1/memories", json={"text": "I keep bees"},
                             headers=headers) as created:  # fmt: skip
            assert created.status == 201, await created.text()
            memory = (await created.json())["memory"]
        async with region_store(c) as kept_at_c, region_store(b) as kept_at_b:
            assert [m.text for m in await kept_at_c.list_memories(user_id)] == ["I keep bees"]
            assert await kept_at_b.list_memories(user_id) == []
        for edge in (b, c):
            async with http.get(f"{edge.edge_url}/v1/memories", headers=headers) as listed_here:
                assert [m["id"] for m in (await listed_here.json())["memories"]] == [memory["id"]]
        # A turn on its subject, sent at b, reads it from home.
        asked = "How do bees sleep?"
        _, _, question_id = await send(http, b, token, f"bees-{user_id}", asked)
        async with region_store(c) as kept_at_c:
            captured = await until_captured(kept_at_c, user_id, question_id)
        assert [(t.role, t.text) for t in captured.turns[1:]] == [
            (Role.SYSTEM, memory_block(["I keep bees"])), (Role.USER, asked)]  # fmt: skip
        # Deleted at b's edge: gone at home.
        async with http.delete(f"{b.edge_url}/v1/memories/{memory['id']}",
                               headers=headers) as deleted:  # fmt: skip
            assert deleted.status == 200
        async with region_store(c) as kept_at_c:
            assert await kept_at_c.list_memories(user_id) == []
