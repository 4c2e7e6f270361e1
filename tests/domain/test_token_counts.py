"""domain.token_counts: each distinct text goes to the counter once, while it is kept.

The engine here is a stand-in that counts words and records what it was asked (the cache's
own rules); tests/nodeagent/test_servicer.py checks it in front of a real llama-server."""

from __future__ import annotations

import asyncio

import pytest

from domain.errors import Unavailable
from domain.token_counts import TokenCounts


class WordCounter:
    def __init__(self) -> None:
        self.asked: list[list[str]] = []

    async def __call__(self, texts: list[str]) -> list[int]:
        self.asked.append(list(texts))
        await asyncio.sleep(0)
        return [len(text.split()) for text in texts]


async def test_kept_counts_are_not_asked_for_again() -> None:
    engine, counts = WordCounter(), TokenCounts()
    assert await counts.count(["a b", "c", "a b"], engine) == [2, 1, 2]
    assert engine.asked == [["a b", "c"]], "each distinct text once, in one call"
    assert await counts.count(["c", "d e f", "a b"], engine) == [1, 3, 2]
    assert engine.asked[1:] == [["d e f"]]
    assert await counts.count(["a b"], engine) == [2]
    assert len(engine.asked) == 2
    assert (counts.misses, counts.hits) == (3, 4)


async def test_the_least_recently_used_text_goes_first() -> None:
    engine, counts = WordCounter(), TokenCounts(capacity=2)
    await counts.count(["one", "two"], engine)
    await counts.count(["one"], engine)  # "two" is now the older
    await counts.count(["three"], engine)
    assert len(counts) == 2
    await counts.count(["one", "three"], engine)
    assert engine.asked[-1] == ["three"], "nothing new asked for one and three"
    await counts.count(["two"], engine)
    assert engine.asked[-1] == ["two"], "two was dropped"


async def test_capacity_zero_keeps_nothing() -> None:
    engine, counts = WordCounter(), TokenCounts(capacity=0)
    await counts.count(["x y"], engine)
    await counts.count(["x y"], engine)
    assert engine.asked == [["x y"], ["x y"]] and len(counts) == 0


async def test_concurrent_calls_get_their_own_answers_even_when_evicted() -> None:
    engine, counts = WordCounter(), TokenCounts(capacity=1)
    texts = [[f"w{i} " * (i + 1)] for i in range(20)]
    results = await asyncio.gather(*(counts.count(t, engine) for t in texts))
    assert results == [[i + 1] for i in range(20)]


async def test_an_engine_that_answers_the_wrong_number_of_counts_is_unavailable() -> None:
    async def short(texts: list[str]) -> list[int]:
        return [1]

    counts = TokenCounts()
    with pytest.raises(Unavailable, match="asked for 2 counts, got 1"):
        await counts.count(["a", "b"], short)
    assert len(counts) == 0, "nothing kept from a bad answer"


async def test_a_failed_count_keeps_nothing() -> None:
    async def broken(texts: list[str]) -> list[int]:
        raise ConnectionError("down")

    counts = TokenCounts()
    with pytest.raises(ConnectionError):
        await counts.count(["a"], broken)
    assert len(counts) == 0 and counts.misses == 0


def test_a_negative_capacity_is_refused() -> None:
    with pytest.raises(ValueError, match="0 or more"):
        TokenCounts(capacity=-1)
