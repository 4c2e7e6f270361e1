"""Every case runs against both backends: PostgreSQL must behave exactly as SQLite does."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from domain.errors import AlreadyExists, NotFound
from domain.types import Role, Tier
from store.factory import open_store, store_for
from store.postgres import PostgresStore
from store.records import NewMessage
from store.sqlite import SqliteStore
from tests.store.test_postgres import fresh_database


@pytest.fixture(params=["sqlite", "postgres"])
async def url(request: pytest.FixtureRequest, tmp_path) -> AsyncIterator[str]:
    """A store URL with nothing in it yet: a new SQLite file or a new PostgreSQL database."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'chat.db'}"
        return
    # Looked up here so a SQLite-only run (-k sqlite) starts no PostgreSQL server.
    async with fresh_database(request.getfixturevalue("postgres_server")) as dsn:
        yield dsn


@pytest.fixture
async def store(url: str):
    s = await open_store(url)
    yield s
    await s.close()


def msg(mid: str, role: Role, parent: int | None, tokens: int = 5, model: str = "m") -> NewMessage:
    return NewMessage(mid, role, f"text of {mid}", tokens, parent, model=model)


async def test_migrations_are_versioned_and_idempotent(url) -> None:
    for _ in range(2):
        s = await open_store(url)
        assert await s.schema_version() == 11
        await s.close()


async def test_a_conversation_keeps_the_pool_it_was_routed_to(store) -> None:
    def turn(mid: str, pool: str) -> NewMessage:
        return NewMessage(mid, Role.USER, "hi", 2, None, model="m", pool=pool)

    await store.add_message("alice", "cp", turn("p1", "small"))
    assert (await store.get_conversation("alice", "cp")).pool == "small"
    await store.add_message("alice", "cp", turn("p2", ""))  # no decision: it stays
    assert (await store.get_conversation("alice", "cp")).pool == "small"
    await store.add_message("alice", "cp", turn("p3", "large"))  # escalated
    assert (await store.get_conversation("alice", "cp")).pool == "large"


async def test_first_message_creates_the_conversation_scoped_to_its_user(store) -> None:
    first = await store.add_message("alice", "c1", msg("m1", Role.USER, None), title="hi")
    await store.add_message("alice", "c1", msg("m1.answer", Role.ASSISTANT, first.seq, 7))
    conversation = await store.get_conversation("alice", "c1")
    assert conversation.title == "hi" and conversation.total_tokens == 12
    assert [m.seq for m in await store.list_messages("alice", "c1")] == [1, 2]
    # Bob may use the same ids; neither sees the other's.
    await store.add_message("bob", "c1", msg("m1", Role.USER, None))
    assert len(await store.list_messages("bob", "c1")) == 1
    with pytest.raises(NotFound):
        await store.get_conversation("carol", "c1")
    with pytest.raises(NotFound):
        await store.get_message("carol", "m1")
    with pytest.raises(NotFound):
        await store.list_messages("carol", "c1")


async def test_stored_records_read_back_exactly_as_returned(store) -> None:
    added = await store.add_message("alice", "c1", msg("m1", Role.USER, None), title="hi")
    assert await store.get_message("alice", "m1") == added
    assert await store.newest_message("alice", "c1") == added
    assert await store.newest_message("alice", "c2") is None
    conversation = await store.get_conversation("alice", "c1")
    assert isinstance(conversation.created_at, float)
    assert conversation.created_at == conversation.updated_at == added.created_at
    assert (conversation.summary, conversation.summary_upto_seq) == ("", 0)


async def test_a_turn_with_a_model_names_the_conversations_model(store) -> None:
    await store.add_message("alice", "c1", msg("m1", Role.USER, None, model=""))
    assert (await store.get_conversation("alice", "c1")).model == ""
    await store.add_message("alice", "c1", msg("m2", Role.ASSISTANT, 1, model="large"))
    await store.add_message("alice", "c1", msg("m3", Role.USER, 2, model=""))
    assert (await store.get_conversation("alice", "c1")).model == "large"


async def test_a_reused_message_id_stores_nothing(store) -> None:
    await store.add_message("alice", "c1", msg("m1", Role.USER, None))
    with pytest.raises(AlreadyExists):
        await store.add_message("alice", "c1", msg("m1", Role.USER, None))
    assert len(await store.list_messages("alice", "c1")) == 1
    assert (await store.get_conversation("alice", "c1")).total_tokens == 5
    # Not even the new conversation the refused turn would have created.
    with pytest.raises(AlreadyExists):
        await store.add_message("alice", "c2", msg("m1", Role.USER, None))
    with pytest.raises(NotFound):
        await store.get_conversation("alice", "c2")


async def test_an_answer_brings_its_questions_exact_count_into_the_conversations_total(
    store,
) -> None:
    # The question was stored with an upper bound of its count (its bytes); the node counted
    # it beside the answer, and the answer's save puts the exact count in its place.
    question = await store.add_message("alice", "c1", msg("m1", Role.USER, None, tokens=40))
    answer = NewMessage("m1.answer", Role.ASSISTANT, "an answer", 7, question.seq,
                        parent_tokens=9)  # fmt: skip
    await store.add_message("alice", "c1", answer)
    assert (await store.get_message("alice", "m1")).tokens == 9
    assert (await store.get_conversation("alice", "c1")).total_tokens == 9 + 7
    # A reused answer id stores nothing, the parent's count included.
    again = NewMessage("m1.answer", Role.ASSISTANT, "again", 3, question.seq, parent_tokens=30)
    with pytest.raises(AlreadyExists):
        await store.add_message("alice", "c1", again)
    assert (await store.get_message("alice", "m1")).tokens == 9
    assert (await store.get_conversation("alice", "c1")).total_tokens == 9 + 7
    # No count brought: the stored one stands.
    await store.add_message("alice", "c1", msg("m2", Role.USER, 2, tokens=11))
    await store.add_message("alice", "c1", msg("m2.answer", Role.ASSISTANT, 3, tokens=4))
    assert [m.tokens for m in await store.list_messages("alice", "c1")] == [9, 7, 11, 4]
    assert (await store.get_conversation("alice", "c1")).total_tokens == 31


async def test_conversations_list_newest_first_by_cursor(store) -> None:
    for i in range(5):
        await store.add_message("alice", f"c{i}", msg(f"m{i}", Role.USER, None))
    await store.add_message("bob", "b1", msg("m1", Role.USER, None))
    first = await store.list_conversations("alice", 2)
    assert [c.conversation_id for c in first] == ["c4", "c3"]
    rest = await store.list_conversations("alice", 10, updated_before=first[-1].updated_at)
    assert [c.conversation_id for c in rest] == ["c2", "c1", "c0"]
    assert await store.list_conversations("carol", 10) == []


async def test_delete_removes_messages_too(store) -> None:
    await store.add_message("alice", "c1", msg("m1", Role.USER, None))
    await store.delete_conversation("alice", "c1")
    with pytest.raises(NotFound):
        await store.get_message("alice", "m1")
    with pytest.raises(NotFound):
        await store.delete_conversation("alice", "c1")
    # The id is free again, and the conversation starts over.
    again = await store.add_message("alice", "c1", msg("m1", Role.USER, None))
    assert again.seq == 1


async def test_a_deleted_response_is_marked_for_its_user_and_its_turns_stay(store) -> None:
    await store.add_message("alice", "c1", msg("resp_1", Role.USER, None))
    await store.add_message("alice", "c1", msg("resp_1.answer", Role.ASSISTANT, 1))
    with pytest.raises(NotFound):
        await store.delete_response("bob", "resp_1")  # not bob's
    assert not await store.response_deleted("alice", "resp_1")
    await store.delete_response("alice", "resp_1")
    assert await store.response_deleted("alice", "resp_1")
    assert not await store.response_deleted("bob", "resp_1")
    with pytest.raises(NotFound):
        await store.delete_response("alice", "resp_1")  # only once
    # The conversation keeps both turns as history.
    kept = await store.list_messages("alice", "c1")
    assert [m.message_id for m in kept] == ["resp_1", "resp_1.answer"]
    # Gone with its conversation: the id may start over.
    await store.delete_conversation("alice", "c1")
    await store.add_message("alice", "c2", msg("resp_1", Role.USER, None))
    assert not await store.response_deleted("alice", "resp_1")


async def test_users_tokens_and_tiers(store) -> None:
    await store.create_user("u1", Tier.FREE, "hash-1")
    with pytest.raises(AlreadyExists):
        await store.create_user("u1", Tier.PLUS, "hash-2")
    assert (await store.user_by_token_hash("hash-1")).user_id == "u1"
    assert (await store.set_user_tier("u1", Tier.PLUS)).tier is Tier.PLUS
    await store.set_user_token_hash("u1", None)
    assert await store.user_by_token_hash("hash-1") is None
    assert not (await store.get_user("u1")).has_token
    with pytest.raises(NotFound):
        await store.set_user_tier("nobody", Tier.FREE)
    with pytest.raises(NotFound):
        await store.set_user_token_hash("nobody", "hash-3")
    with pytest.raises(NotFound):
        await store.get_user("nobody")
    await store.create_user("u0", Tier.FREE, "hash-0")
    assert [u.user_id for u in await store.list_users()] == ["u0", "u1"]


@pytest.mark.parametrize(
    ("given", "kind", "path"),
    [
        ("sqlite:///.chat/chat.db", SqliteStore, ".chat/chat.db"),
        ("sqlite:////var/lib/chat.db", SqliteStore, "/var/lib/chat.db"),
        (".chat/chat.db", SqliteStore, ".chat/chat.db"),
        ("postgresql://postgres@127.0.0.1:5432/chat", PostgresStore, None),
        ("postgres://postgres@127.0.0.1/chat", PostgresStore, None),
    ],
)
def test_the_url_names_the_backend(given, kind, path) -> None:
    store = store_for(given)
    assert isinstance(store, kind)
    if path is not None:
        assert store._path == path


@pytest.mark.parametrize("given", ["", "mysql://db/chat", "sqlite://chat.db", "sqlite:///"])
async def test_an_unknown_url_is_refused_clearly(given) -> None:
    with pytest.raises(ValueError, match="store URL"):
        await open_store(given)


async def test_concurrent_turns_of_one_conversation_get_consecutive_seqs(store) -> None:
    await asyncio.gather(
        *(store.add_message("alice", "busy", msg(f"m{i}", Role.USER, None)) for i in range(20))
    )
    assert [m.seq for m in await store.list_messages("alice", "busy")] == list(range(1, 21))


async def test_a_token_hash_belongs_to_one_user(store) -> None:
    await store.create_user("u1", Tier.FREE, "same-hash")
    await store.create_user("u2", Tier.FREE, "other-hash")
    with pytest.raises(AlreadyExists):
        await store.set_user_token_hash("u2", "same-hash")
    assert (await store.user_by_token_hash("other-hash")).user_id == "u2"


async def test_each_turn_records_what_served_it_and_a_conversation_keeps_its_first_version(
    store,
) -> None:
    from store.records import ServingRecord

    assert await store.conversation_version("alice", "cv") == ""
    await store.add_message("alice", "cv", msg("v1", Role.USER, None))
    first = ServingRecord("v1", "cv", "cand", "candidate", "large", "over", "small")
    await store.record_serving("alice", first)
    await store.add_message("alice", "cv", msg("v2", Role.USER, 1))
    await store.record_serving("alice", ServingRecord("v2", "cv", "base", "current"))
    assert await store.conversation_version("alice", "cv") == "cand"
    got = await store.serving_of("alice", "v1")
    assert (got.version, got.slice, got.routed_pool, got.budget, got.served_pool) == (
        "cand",
        "candidate",
        "large",
        "over",
        "small",
    )
    with pytest.raises(NotFound):
        await store.serving_of("bob", "v1")
    with pytest.raises(NotFound):  # no such message
        await store.record_serving("alice", ServingRecord("nope", "cv", "base"))
    with pytest.raises(NotFound):  # recorded once
        await store.record_serving("alice", first)
    await store.delete_conversation("alice", "cv")
    assert await store.conversation_version("alice", "cv") == ""


async def test_a_rating_is_stored_once_per_message_and_replaced_by_the_next(store) -> None:
    from store.records import FeedbackRecord

    await store.add_message("alice", "cf", msg("f1", Role.USER, None))
    await store.add_message("alice", "cf", msg("f1.answer", Role.ASSISTANT, 1))
    first = FeedbackRecord("f1.answer", "cf", "down", "too long", "cand")
    assert await store.rate_message("alice", first) == ""
    stored = await store.feedback_of("alice", "f1.answer")
    assert (stored.message_id, stored.conversation_id, stored.rating, stored.comment,
            stored.version) == ("f1.answer", "cf", "down", "too long", "cand")  # fmt: skip
    again = FeedbackRecord("f1.answer", "cf", "up", "", "cand")
    assert await store.rate_message("alice", again) == "down"
    replaced = await store.feedback_of("alice", "f1.answer")
    assert (replaced.rating, replaced.comment, replaced.created_at) == ("up", "", stored.created_at)
    assert replaced.updated_at >= stored.updated_at
    with pytest.raises(NotFound):  # another user's message is not theirs to rate
        await store.rate_message("bob", first)
    with pytest.raises(NotFound):
        await store.feedback_of("bob", "f1.answer")
    with pytest.raises(NotFound):  # no such message
        await store.rate_message("alice", FeedbackRecord("nope", "cf", "up"))
    await store.delete_conversation("alice", "cf")
    with pytest.raises(NotFound):  # the rating goes with its message
        await store.feedback_of("alice", "f1.answer")


async def test_a_captured_prompt_is_kept_whole_replaced_by_a_retry_and_goes_with_its_message(
    store,
) -> None:
    from domain.answer_options import ToolCall, ToolDefinition
    from domain.types import Turn
    from store.records import CapturedPrompt

    await store.add_message("alice", "cc", msg("q1", Role.USER, None))
    turns = (
        Turn(Role.SYSTEM, "You are terse.", 4),
        Turn(Role.ASSISTANT, "", 9, (ToolCall("call_1", "lookup", '{"q": "ünï"}'),)),
        Turn(Role.TOOL, "42", 1, tool_call_id="call_1"),
        Turn(Role.USER, "text of q1\nwith a line", 5),
    )
    offered = (ToolDefinition("remember", "Saves a fact", '{"type": "object"}'),
               ToolDefinition("lookup", "Finds ünï", "{}", strict=True))  # fmt: skip
    first = CapturedPrompt("q1", "cc", "base", "smollm", "node-a", 0.7, 256, turns,
                           tools=offered)  # fmt: skip
    await store.capture_prompt("alice", first)
    kept = await store.captured_prompt("alice", "q1")
    assert (kept.turns, kept.tools) == (turns, offered)
    assert (kept.message_id, kept.conversation_id, kept.version, kept.model, kept.node_id,
            kept.temperature, kept.max_tokens) == ("q1", "cc", "base", "smollm", "node-a", 0.7,
                                                   256)  # fmt: skip
    again = CapturedPrompt("q1", "cc", "cand", "smollm", "node-b", 0.0, 128, turns[-1:])
    await store.capture_prompt("alice", again)  # a retry that ran again
    replaced = await store.captured_prompt("alice", "q1")
    assert (replaced.version, replaced.node_id, replaced.turns, replaced.tools) == (
        "cand", "node-b", turns[-1:], ())  # fmt: skip
    with pytest.raises(NotFound):  # another user's message
        await store.captured_prompt("bob", "q1")
    with pytest.raises(NotFound):
        await store.capture_prompt("bob", first)
    await store.delete_conversation("alice", "cc")
    with pytest.raises(NotFound):  # gone with the conversation
        await store.captured_prompt("alice", "q1")


async def test_deleting_a_user_deletes_everything_kept_of_them_and_nothing_else(store) -> None:
    from domain.types import Turn
    from store.records import CapturedPrompt, FeedbackRecord, ServingRecord

    for user in ("alice", "bob"):
        await store.create_user(user, Tier.FREE, f"hash-{user}")
        await store.add_message(user, "c1", msg("q1", Role.USER, None))
        await store.add_message(user, "c1", msg("q1.answer", Role.ASSISTANT, 1))
        await store.record_serving(user, ServingRecord("q1", "c1", "base"))
        await store.rate_message(user, FeedbackRecord("q1.answer", "c1", "up"))
        turns = (Turn(Role.USER, "text of q1", 5),)
        await store.capture_prompt(user, CapturedPrompt("q1", "c1", "", "m", "n", 0, 8, turns))
    await store.delete_user("alice")
    assert await store.user_by_token_hash("hash-alice") is None
    assert [u.user_id for u in await store.list_users()] == ["bob"]
    for gone in (
        store.get_user("alice"),
        store.get_conversation("alice", "c1"),
        store.get_message("alice", "q1"),
        store.serving_of("alice", "q1"),
        store.feedback_of("alice", "q1.answer"),
        store.captured_prompt("alice", "q1"),
    ):
        with pytest.raises(NotFound):
            await gone
    assert [m.content for m in await store.list_messages("bob", "c1")] == [
        "text of q1",
        "text of q1.answer",
    ]
    assert (await store.captured_prompt("bob", "q1")).turns[0].text == "text of q1"
    assert (await store.feedback_of("bob", "q1.answer")).rating == "up"
    with pytest.raises(NotFound):
        await store.delete_user("alice")


async def test_prompts_captured_before_a_time_are_forgotten(store) -> None:
    from domain.types import Turn
    from store.records import CapturedPrompt

    for mid in ("old", "new"):
        await store.add_message("alice", "cr", msg(mid, Role.USER, None))
        turn = (Turn(Role.USER, mid, 1),)
        await store.capture_prompt("alice", CapturedPrompt(mid, "cr", "", "m", "n", 0, 8, turn))
    old = (await store.captured_prompt("alice", "old")).created_at
    cut = (await store.captured_prompt("alice", "new")).created_at
    assert old < cut  # stamped as written, one after the other
    assert await store.forget_prompts(cut) == 1  # strictly before: the newer one stays
    with pytest.raises(NotFound):
        await store.captured_prompt("alice", "old")
    assert (await store.captured_prompt("alice", "new")).turns[0].text == "new"
    assert await store.forget_prompts(cut) == 0


async def test_a_turn_records_its_region_and_moves_the_conversation_there(url) -> None:
    s = await open_store(url)
    try:
        first = await s.add_message("alice", "c1", NewMessage("m1", Role.USER, "hi", 1, None))
        assert (first.region, (await s.get_conversation("alice", "c1")).region) == ("", "")
        away = NewMessage("m2", Role.USER, "again", 1, first.seq, region="b")
        await s.add_message("alice", "c1", away)
        assert (await s.get_message("alice", "m2")).region == "b"
        assert (await s.get_conversation("alice", "c1")).region == "b"
        # A turn that names no region leaves the conversation where it runs.
        await s.add_message("alice", "c1", NewMessage("m3", Role.USER, "more", 1, None))
        assert (await s.get_conversation("alice", "c1")).region == "b"
    finally:
        await s.close()
