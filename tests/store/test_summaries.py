"""A conversation's summary and pinned constraints, written by compaction with compare-and-set.

Every case runs against SQLite and the real PostgreSQL, as in test_stores.py.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from domain.errors import NotFound
from domain.types import Role
from store.base import Store
from store.factory import open_store
from store.records import NewMessage
from tests.store.test_postgres import fresh_database


@pytest.fixture(params=["sqlite", "postgres"])
async def store(request: pytest.FixtureRequest, tmp_path) -> AsyncIterator[Store]:
    if request.param == "sqlite":
        opened = await open_store(f"sqlite:///{tmp_path / 'chat.db'}")
        yield opened
        await opened.close()
        return
    async with fresh_database(request.getfixturevalue("postgres_server")) as dsn:
        opened = await open_store(dsn)
        yield opened
        await opened.close()


async def conversation_of(store: Store, user_id: str, turns: int) -> None:
    parent: int | None = None
    for i in range(turns):
        role = Role.USER if i % 2 == 0 else Role.ASSISTANT
        saved = await store.add_message(
            user_id, "c1", NewMessage(f"{user_id}-m{i}", role, f"turn {i}", 10, parent)
        )
        parent = saved.seq


async def test_a_new_conversation_has_no_summary_and_nothing_pinned(store) -> None:
    await conversation_of(store, "alice", 1)
    conversation = await store.get_conversation("alice", "c1")
    assert (conversation.summary, conversation.summary_upto_seq) == ("", 0)
    assert (conversation.summary_tokens, conversation.pinned, conversation.pinned_tokens) == (
        0,
        "",
        0,
    )


async def test_set_summary_writes_every_field_and_reads_back(store) -> None:
    await conversation_of(store, "alice", 8)
    before = await store.get_conversation("alice", "c1")
    written = await store.set_summary(
        "alice", "c1", "Facts:\n- x", 42, 4, "Pinned:\n- I am vegan.", 9, expected_upto_seq=0
    )
    assert written
    after = await store.get_conversation("alice", "c1")
    assert (after.summary, after.summary_tokens, after.summary_upto_seq) == ("Facts:\n- x", 42, 4)
    assert (after.pinned, after.pinned_tokens) == ("Pinned:\n- I am vegan.", 9)
    # Background work: the conversation does not jump to the top of the user's list.
    assert after.updated_at == before.updated_at
    assert after.total_tokens == before.total_tokens
    listed = await store.list_conversations("alice", 10)
    assert listed == [after]


async def test_set_summary_is_a_compare_and_set_on_the_summary_point(store) -> None:
    await conversation_of(store, "alice", 8)
    assert await store.set_summary("alice", "c1", "first", 5, 4, "", 0, expected_upto_seq=0)
    # A second worker that read the conversation before the first one wrote loses.
    assert not await store.set_summary("alice", "c1", "stale", 6, 5, "p", 1, expected_upto_seq=0)
    conversation = await store.get_conversation("alice", "c1")
    assert (conversation.summary, conversation.summary_upto_seq) == ("first", 4)
    # The next compaction starts from what it read.
    assert await store.set_summary("alice", "c1", "second", 7, 6, "", 0, expected_upto_seq=4)
    assert (await store.get_conversation("alice", "c1")).summary == "second"


async def test_concurrent_set_summaries_let_exactly_one_win(store) -> None:
    await conversation_of(store, "alice", 8)
    results = await asyncio.gather(
        *(
            store.set_summary("alice", "c1", f"s{i}", i, 4, "", 0, expected_upto_seq=0)
            for i in range(8)
        )
    )
    assert sorted(results) == [False] * 7 + [True]
    winner = results.index(True)
    assert (await store.get_conversation("alice", "c1")).summary == f"s{winner}"


async def test_set_summary_on_another_users_conversation_is_not_found(store) -> None:
    await conversation_of(store, "alice", 2)
    with pytest.raises(NotFound):
        await store.set_summary("bob", "c1", "x", 1, 1, "", 0, expected_upto_seq=0)
    with pytest.raises(NotFound):
        await store.set_summary("alice", "nope", "x", 1, 1, "", 0, expected_upto_seq=0)
    assert (await store.get_conversation("alice", "c1")).summary == ""
