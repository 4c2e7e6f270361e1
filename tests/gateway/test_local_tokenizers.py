"""gateway.local_tokenizers: when the gateway counts itself and when it leaves it to the node.

The tokenizers here are real (Hugging Face's library), built small in the test; the nodes are a
stand-in `fetch` that records who was asked. tests/nodeagent/test_served_tokenizer.py has the
same against a real node and llama-server."""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Sequence

import pytest
from tokenizers import Tokenizer, models, pre_tokenizers

from domain.errors import Unavailable
from gateway.local_tokenizers import LocalTokenizers, OfferedTokenizer


def word_tokenizer(words: list[str]) -> bytes:
    """A tokenizer file that gives each known word one token and anything else [UNK]."""
    vocab = {"[UNK]": 0} | {word: i + 1 for i, word in enumerate(words)}
    tokenizer = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    return tokenizer.to_str().encode()


def offer(model: str, data: bytes) -> OfferedTokenizer:
    return OfferedTokenizer(model, hashlib.sha256(data).hexdigest(), data)


class Nodes:
    """What each address offers, and who was asked."""

    def __init__(self, offers: dict[str, OfferedTokenizer | None]) -> None:
        self.offers = offers
        self.asked: list[str] = []
        self.sent_without_bytes: list[str] = []

    async def fetch(self, address: str, have: Sequence[str]) -> OfferedTokenizer | None:
        self.asked.append(address)
        offered = self.offers[address]
        if isinstance(offered, Exception):
            raise offered
        if offered is not None and offered.sha256 in have:
            self.sent_without_bytes.append(address)
            return OfferedTokenizer(offered.model, offered.sha256, b"")
        return offered


async def settled(tokenizers: LocalTokenizers, address: str) -> None:
    """Waits for the fetch started by a first count to end, whatever it brought."""
    async with asyncio.timeout(10):
        await tokenizers.asked(address)


async def test_the_first_count_is_the_nodes_then_the_gateway_counts() -> None:
    nodes = Nodes({"n1": offer("m", word_tokenizer(["hello", "world"]))})
    tokenizers = LocalTokenizers(nodes.fetch)
    assert await tokenizers.count("n1", ["hello world"]) is None
    await settled(tokenizers, "n1")
    assert await tokenizers.count("n1", ["hello world", "", "hello there, world"]) == [2, 0, 4]
    assert await tokenizers.count("n1", ["hello"], model="m") == [1]
    assert nodes.asked == ["n1"]


async def test_long_texts_are_counted_off_the_event_loop_alike() -> None:
    nodes = Nodes({"n1": offer("m", word_tokenizer(["hello"]))})
    tokenizers = LocalTokenizers(nodes.fetch)
    await tokenizers.count("n1", ["x"])
    await settled(tokenizers, "n1")
    long = "hello " * 5_000
    assert await tokenizers.count("n1", [long, "hello"]) == [5_000, 1]


async def test_a_node_that_offers_none_is_asked_again_only_after_the_retry() -> None:
    now = [0.0]
    data = word_tokenizer(["hi"])
    nodes = Nodes({"n1": None})
    tokenizers = LocalTokenizers(nodes.fetch, retry_s=60, clock=lambda: now[0])
    assert await tokenizers.count("n1", ["hi"]) is None
    await settled(tokenizers, "n1")
    assert await tokenizers.count("n1", ["hi"]) is None
    assert nodes.asked == ["n1"]
    now[0] = 61.0
    nodes.offers["n1"] = offer("m", data)  # upgraded meanwhile
    assert await tokenizers.count("n1", ["hi"]) is None
    await settled(tokenizers, "n1")
    assert await tokenizers.count("n1", ["hi"]) == [1]
    assert nodes.asked == ["n1", "n1"]


@pytest.mark.parametrize(
    "offered",
    [
        Unavailable("the node could not be reached"),
        OfferedTokenizer("m", "0" * 64, b"{}"),  # the bytes are not the file the digest names
        OfferedTokenizer("m", hashlib.sha256(b"not json").hexdigest(), b"not json"),
    ],
    ids=["unreachable", "digest-mismatch", "not-a-tokenizer"],
)
async def test_an_offer_that_fails_leaves_the_counting_to_the_node(offered: object) -> None:
    nodes = Nodes({"n1": offered})  # type: ignore[dict-item]
    tokenizers = LocalTokenizers(nodes.fetch)
    assert await tokenizers.count("n1", ["hi"]) is None
    await settled(tokenizers, "n1")
    assert await tokenizers.count("n1", ["hi"]) is None
    assert not tokenizers.knows("n1")


async def test_nodes_of_one_file_share_one_tokenizer_and_its_counts() -> None:
    data = word_tokenizer(["a", "b"])
    nodes = Nodes({"n1": offer("m", data), "n2": offer("m", data)})
    tokenizers = LocalTokenizers(nodes.fetch)
    for address in ("n1", "n2"):
        await tokenizers.count(address, ["a"])
        await settled(tokenizers, address)
    assert await tokenizers.count("n1", ["a b a"]) == [3]
    assert await tokenizers.count("n2", ["a b a"]) == [3]
    assert nodes.sent_without_bytes == ["n2"]
    assert len(tokenizers._files) == 1
    assert tokenizers._files[offer("m", data).sha256].counts.hits == 1


async def test_a_node_picked_for_another_model_is_asked_again() -> None:
    nodes = Nodes({"n1": offer("old", word_tokenizer(["a"]))})
    tokenizers = LocalTokenizers(nodes.fetch)
    await tokenizers.count("n1", ["a"])
    await settled(tokenizers, "n1")
    nodes.offers["n1"] = offer("new", word_tokenizer(["a", "b"]))  # restarted on another model
    assert await tokenizers.count("n1", ["a b"], model="new") is None
    await settled(tokenizers, "n1")
    assert await tokenizers.count("n1", ["a b"], model="new") == [2]
    assert nodes.asked == ["n1", "n1"]


async def test_a_forgotten_node_is_asked_again() -> None:
    nodes = Nodes({"n1": offer("m", word_tokenizer(["a"]))})
    tokenizers = LocalTokenizers(nodes.fetch)
    await tokenizers.count("n1", ["a"])
    await settled(tokenizers, "n1")
    tokenizers.forget("n1")
    assert await tokenizers.count("n1", ["a"]) is None
    await settled(tokenizers, "n1")
    assert nodes.asked == ["n1", "n1"]
