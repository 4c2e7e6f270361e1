"""Personal memory on both backends: the same entries, the same search, the same errors."""

from __future__ import annotations

import pytest

from domain.errors import AlreadyExists, NotFound
from domain.memory import search_terms
from domain.types import Tier
from store.records import MemoryRecord
from tests.store.test_stores import store, url  # noqa: F401  (fixtures)

NOW = 1_000_000.0


def entry(memory_id: str, text: str, at: float = NOW, pinned: bool = False) -> MemoryRecord:
    return MemoryRecord(memory_id, text, pinned, "user", at, at)


async def found(store, user: str, message: str, limit: int = 5, since: float = 0.0) -> list[str]:  # noqa: F811
    records = await store.search_memories(user, search_terms(message), limit, since)
    return [record.memory_id for record in records]


async def test_entries_are_listed_newest_first_and_edited_and_deleted(store) -> None:  # noqa: F811
    await store.add_memory("alice", entry("m1", "I live in Lyon", NOW))
    await store.add_memory("alice", entry("m2", "My cat is called Tofu", NOW + 5))
    await store.add_memory("bob", entry("m1", "Bob's own entry", NOW))
    assert [m.memory_id for m in await store.list_memories("alice")] == ["m2", "m1"]
    with pytest.raises(AlreadyExists):
        await store.add_memory("alice", entry("m1", "again"))
    edited = await store.update_memory("alice", "m1", "I live in Grenoble", True, NOW + 9)
    assert edited == MemoryRecord("m1", "I live in Grenoble", True, "user", NOW, NOW + 9)
    assert await store.get_memory("alice", "m1") == edited
    assert (await store.get_memory("bob", "m1")).text == "Bob's own entry"
    await store.delete_memory("alice", "m1")
    for missing in (store.get_memory("alice", "m1"), store.delete_memory("alice", "m1"),
                    store.update_memory("alice", "m1", "x", False, NOW)):  # fmt: skip
        with pytest.raises(NotFound):
            await missing
    assert [m.text for m in await store.list_memories("alice")] == ["My cat is called Tofu"]


async def test_search_finds_an_entry_by_its_words_stemmed_and_only_the_users_own(store) -> None:  # noqa: F811
    await store.add_memory("alice", entry("cat", "My cat is called Tofu"))
    await store.add_memory("alice", entry("city", "I live in Lyon, near the river"))
    await store.add_memory("alice", entry("job", "I work as a nurse on night shifts"))
    await store.add_memory("bob", entry("bobcat", "Bob has three cats"))
    assert await found(store, "alice", "What should I feed my cats?") == ["cat"]
    assert await found(store, "alice", "Any good restaurants in Lyon?") == ["city"]
    assert await found(store, "alice", "I'm working nights this week") == ["job"]
    # Nothing shared but words that name no subject: nothing comes back.
    assert await found(store, "alice", "What is the weather like?") == []
    assert await found(store, "alice", "") == []
    assert await found(store, "carol", "cats") == []
    # Ranked by relevance, at most the limit.
    both = "My cat likes the river in Lyon"
    assert set(await found(store, "alice", both)) == {"cat", "city"}
    assert len(await found(store, "alice", both, limit=1)) == 1


async def test_search_leaves_aged_entries_out_unless_pinned(store) -> None:  # noqa: F811
    await store.add_memory("alice", entry("old", "My bike is red", NOW - 100))
    await store.add_memory("alice", entry("pinned", "My bike is a tandem", NOW - 100, True))
    await store.add_memory("alice", entry("new", "My bike has a basket", NOW))
    assert sorted(await found(store, "alice", "bike", since=NOW - 50)) == ["new", "pinned"]
    assert sorted(await found(store, "alice", "bike", since=float("-inf"))) == [
        "new", "old", "pinned"]  # fmt: skip
    # An edit is a new write: the entry is fresh again, and found by its new words only.
    await store.update_memory("alice", "old", "My scooter is red", False, NOW)
    assert await found(store, "alice", "scooter", since=NOW - 50) == ["old"]
    assert "old" not in await found(store, "alice", "bike", since=float("-inf"))


async def test_search_terms_cannot_inject_query_syntax(store) -> None:  # noqa: F811
    await store.add_memory("alice", entry("m", 'A "quoted" word OR NEAR(x) * and - signs'))
    for message in ['"', "OR", "NEAR(", "a * b", "x:y", "'; DROP TABLE memories; --", "!&|"]:
        await found(store, "alice", message)  # never a syntax error
    assert await found(store, "alice", "quoted") == ["m"]
    # Operator words as terms are plain words: the query quotes them.
    assert [m.memory_id for m in await store.search_memories("alice", ["OR", "near"], 5, 0.0)
            ] == ["m"]  # fmt: skip


async def test_deleting_a_user_deletes_their_memories(store) -> None:  # noqa: F811
    await store.create_user("alice", Tier.FREE, "hash-a")
    await store.add_memory("alice", entry("m", "My cat is called Tofu"))
    await store.add_memory("bob", entry("m", "Bob's cat"))
    await store.delete_user("alice")
    assert await store.list_memories("alice") == []
    assert await found(store, "alice", "cat") == []
    assert [m.text for m in await store.list_memories("bob")] == ["Bob's cat"]
