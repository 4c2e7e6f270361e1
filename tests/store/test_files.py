"""Users' files on both backends: the same files, the same passages found in the same order,
the same errors, and nothing kept of a file once it is deleted."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from domain.errors import AlreadyExists, NotFound
from domain.types import Tier
from store.records import FilePassage, FileRecord
from tests.store.test_stores import store, url  # noqa: F401  (fixtures)

NOW = 1_000_000.0


def fid(n: int) -> str:
    return f"file-{n:024x}"


def record(file_id: str, passages: Sequence[str], name: str = "notes.txt",
           at: float = NOW) -> FileRecord:  # fmt: skip
    content = "\n\n".join(passages)
    return FileRecord(file_id, name, "user_data", len(content.encode()), len(passages), at)


async def add(store, user: str, file_id: str, passages: Sequence[str], name: str = "notes.txt",  # noqa: F811
              at: float = NOW) -> FileRecord:  # fmt: skip
    kept = record(file_id, passages, name, at)
    await store.add_file(user, kept, "\n\n".join(passages), passages)
    return kept


async def found(store, user: str, terms: Sequence[str], limit: int = 10) -> list[tuple[str, int]]:  # noqa: F811
    return [(p.file_id, p.index) for p in await store.search_passages(user, terms, limit)]


async def test_a_file_reads_back_whole_as_it_was_added(store) -> None:  # noqa: F811
    passages = ["Café crème, naïve résumé.", "日本語のテキスト 🙂", "Ünïcödé — “quoted”"]
    content = "\n\n".join(passages)
    kept = FileRecord(fid(1), "Führer für Anfänger.md", "assistants", len(content.encode()),
                      3, NOW + 0.25)  # fmt: skip
    assert kept.bytes > len(content)
    await store.add_file("alice", kept, content, passages)
    assert await store.list_files("alice") == [kept]
    assert await store.get_file("alice", fid(1)) == kept
    assert await store.file_content("alice", fid(1)) == content
    refs = [(fid(1), 0), (fid(1), 1), (fid(1), 2)]
    assert await store.get_passages("alice", refs) == [
        FilePassage(fid(1), "Führer für Anfänger.md", i, text) for i, text in enumerate(passages)
    ]
    assert await store.search_passages("alice", ["crème"], 5) == [
        FilePassage(fid(1), "Führer für Anfänger.md", 0, passages[0])
    ]


async def test_files_are_listed_newest_first_then_by_id(store) -> None:  # noqa: F811
    await add(store, "alice", fid(3), ["old"], at=NOW)
    await add(store, "alice", fid(2), ["new"], at=NOW + 5)
    await add(store, "alice", fid(1), ["new too"], at=NOW + 5)
    assert [f.file_id for f in await store.list_files("alice")] == [fid(1), fid(2), fid(3)]
    assert await store.list_files("bob") == []


async def test_another_users_file_is_not_found(store) -> None:  # noqa: F811
    alices = await add(store, "alice", fid(1), ["My cat is called Tofu"])
    for missing in (store.get_file("bob", fid(1)), store.file_content("bob", fid(1)),
                    store.delete_file("bob", fid(1))):  # fmt: skip
        with pytest.raises(NotFound):
            await missing
    assert await found(store, "bob", ["cat"]) == []
    assert await store.get_passages("bob", [(fid(1), 0)]) == []
    # Bob may use the same id for a file of his own; neither sees the other's.
    await add(store, "bob", fid(1), ["Bob has a dog"], name="bob.txt")
    assert await store.list_files("alice") == [alices]
    assert await found(store, "alice", ["cat", "dog"]) == [(fid(1), 0)]
    assert [p.text for p in await store.search_passages("bob", ["cat", "dog"], 5)] == [
        "Bob has a dog"
    ]


async def test_search_finds_words_in_another_form_the_best_match_first(store) -> None:  # noqa: F811
    await add(store, "alice", fid(1), [
        "The river runs through a quiet valley.",
        "A dog runs in the park every morning.",
        "Cats sleep for most of the day.",
    ])  # fmt: skip
    assert await found(store, "alice", ["running"]) == [(fid(1), 0), (fid(1), 1)]
    # The passage holding both words ranks before the one holding one.
    assert await found(store, "alice", ["running", "dogs"]) == [(fid(1), 1), (fid(1), 0)]
    assert await found(store, "alice", ["running", "dogs"], limit=1) == [(fid(1), 1)]
    assert await found(store, "alice", ["sleeping", "cat"]) == [(fid(1), 2)]
    assert await found(store, "alice", ["elephant"]) == []


async def test_equally_relevant_passages_come_by_file_then_place(store) -> None:  # noqa: F811
    await add(store, "alice", fid(2), ["Green tea at noon."])
    await add(store, "alice", fid(1), ["Green tea at noon.", "Green tea at noon."])
    assert await found(store, "alice", ["tea"]) == [(fid(1), 0), (fid(1), 1), (fid(2), 0)]


async def test_no_terms_or_no_room_finds_nothing(store) -> None:  # noqa: F811
    await add(store, "alice", fid(1), ['A "quoted" word OR NEAR(x) * and - signs'])
    assert await found(store, "alice", []) == []
    assert await found(store, "alice", ["quoted"], limit=0) == []
    assert await found(store, "alice", ["quoted"], limit=-1) == []
    # Only words reach the query: the rest is dropped, never a syntax error.
    for terms in (['"'], ["NEAR("], ["a*"], ["'; DROP TABLE files; --"], ["!&|"]):
        assert await found(store, "alice", terms) == []
    assert await found(store, "alice", ["OR", "near"]) == [(fid(1), 0)]


async def test_a_deleted_files_passages_are_found_no_more(store) -> None:  # noqa: F811
    await add(store, "alice", fid(1), ["alpha centauri", "alpha beta"])
    await store.delete_file("alice", fid(1))
    assert await found(store, "alice", ["alpha"]) == []
    assert await store.get_passages("alice", [(fid(1), 0), (fid(1), 1)]) == []
    for missing in (store.get_file("alice", fid(1)), store.file_content("alice", fid(1)),
                    store.delete_file("alice", fid(1))):  # fmt: skip
        with pytest.raises(NotFound):
            await missing
    # New passages may take the deleted ones' places in the table: the old words find none.
    await add(store, "alice", fid(2), ["gamma rays", "delta wing"])
    assert await found(store, "alice", ["alpha", "beta", "centauri"]) == []
    assert await found(store, "alice", ["gamma", "delta"]) == [(fid(2), 0), (fid(2), 1)]
    assert await store.list_files("alice") == [record(fid(2), ["gamma rays", "delta wing"])]


async def test_a_file_of_an_id_the_user_has_is_refused_and_nothing_changes(store) -> None:  # noqa: F811
    kept = await add(store, "alice", fid(1), ["original words"])
    again = record(fid(1), ["replacement text", "second passage"], name="other.txt", at=NOW + 9)
    with pytest.raises(AlreadyExists):
        await store.add_file("alice", again, "replacement text", ["replacement text", "second"])
    assert await store.list_files("alice") == [kept]
    assert await store.file_content("alice", fid(1)) == "original words"
    assert await found(store, "alice", ["replacement", "second"]) == []
    assert await found(store, "alice", ["original"]) == [(fid(1), 0)]
    assert await store.get_passages("alice", [(fid(1), 1)]) == []


async def test_passages_other_than_the_record_counts_are_refused_and_nothing_kept(store) -> None:  # noqa: F811
    for given in (["just one"], ["one", "two", "three"]):
        with pytest.raises(ValueError):
            await store.add_file("alice", record(fid(1), ["one", "two"]), "one two", given)
    assert await store.list_files("alice") == []
    assert await found(store, "alice", ["one", "two", "three", "just"]) == []
    with pytest.raises(NotFound):
        await store.get_file("alice", fid(1))
    # The id is free: the refused file left nothing behind.
    await add(store, "alice", fid(1), ["one", "two"])


async def test_deleting_a_user_deletes_their_files_and_only_theirs(store) -> None:  # noqa: F811
    await store.create_user("alice", Tier.FREE, "hash-a")
    await store.create_user("bob", Tier.FREE, "hash-b")
    await add(store, "alice", fid(1), ["Alice's cat is called Tofu"])
    await add(store, "alice", fid(2), ["Alice's second cat"])
    bobs = await add(store, "bob", fid(1), ["Bob's cat is called Miso"])
    await store.delete_user("alice")
    assert await store.list_files("alice") == []
    assert await found(store, "alice", ["cat"]) == []
    assert await store.get_passages("alice", [(fid(1), 0), (fid(2), 0)]) == []
    with pytest.raises(NotFound):
        await store.file_content("alice", fid(1))
    assert await store.list_files("bob") == [bobs]
    assert await store.file_content("bob", fid(1)) == "Bob's cat is called Miso"
    assert await found(store, "bob", ["cat"]) == [(fid(1), 0)]


async def test_named_passages_come_in_the_order_asked_missing_ones_left_out(store) -> None:  # noqa: F811
    await add(store, "alice", fid(1), ["zero", "one", "two"], name="a.txt")
    await add(store, "alice", fid(2), ["other zero"], name="b.txt")
    asked = [(fid(1), 2), (fid(9), 0), (fid(2), 0), (fid(1), 7), (fid(1), -1), (fid(1), 2**40),
             ("file-\x00", 0), (fid(1), 0)]  # fmt: skip
    assert await store.get_passages("alice", asked) == [
        FilePassage(fid(1), "a.txt", 2, "two"),
        FilePassage(fid(2), "b.txt", 0, "other zero"),
        FilePassage(fid(1), "a.txt", 0, "zero"),
    ]
    assert await store.get_passages("alice", []) == []
