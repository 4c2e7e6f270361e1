"""The node's tokenizer file, vouched for against a real llama-server and sent over a real
socket, and the gateway's client counting with it: the counts are the engine's own."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from tokenizers import Tokenizer, models, pre_tokenizers

from chat.v1 import node_service_pb2, node_service_pb2_grpc
from gateway.node_client import NodeClient
from nodeagent.llamacpp import LlamaCppEngine
from nodeagent.main import NodeAgentConfig, tokenizer_file
from nodeagent.served_tokenizer import PART_BYTES, ServedTokenizer, vouch
from nodeagent.servicer import NodeServicer
from tests.nodeagent.conftest import NodeUnderTest, serve_node

TEXTS = [
    "Hello! What is the capital of France?",
    "",
    "  indented\n\tcode = {'a': [1, 2, 3]}  # comment\n",
    "Ünïcödé ñ 中文 日本語 한국어 🙂👍🏽",
    "<|im_start|>assistant\nSure.<|im_end|>",
    "The quick brown fox jumps over the lazy dog. " * 300,  # past the inline limit
]


def bundled_tokenizer() -> Path:
    path = tokenizer_file(NodeAgentConfig(engine="llamacpp"))
    assert path is not None, "make setup converts the bundled model's tokenizer.json"
    return path


@pytest.fixture(scope="module")
async def served(engine: LlamaCppEngine) -> ServedTokenizer:
    vouched = await vouch(engine.model, bundled_tokenizer(), engine.tokenize)
    assert vouched is not None, "the bundled GGUF's own tokenizer counts as llama-server does"
    return vouched


@pytest.fixture
async def counting_node(
    engine: LlamaCppEngine, served: ServedTokenizer
) -> AsyncIterator[NodeUnderTest]:
    async for under_test in serve_node(NodeUnderTest(engine, tokenizer=served)):
        yield under_test


async def fetched(client: NodeClient, address: str) -> None:
    """Waits for the fetch of the node's tokenizer that a first count started to end."""
    async with asyncio.timeout(30):
        await client.tokenizers.asked(address)


async def test_the_node_sends_its_whole_file_in_parts(
    counting_node: NodeUnderTest, served: ServedTokenizer
) -> None:
    parts = [
        r async for r in counting_node.stub.GetTokenizer(node_service_pb2.GetTokenizerRequest())
    ]
    assert b"".join(p.part for p in parts) == bundled_tokenizer().read_bytes()
    assert len(parts) == -(-len(served.data) // PART_BYTES)
    assert {(p.model, p.sha256) for p in parts} == {("smollm2-135m-instruct", served.sha256)}
    held = node_service_pb2.GetTokenizerRequest(have_sha256=["0" * 64, served.sha256])
    [again] = [r async for r in counting_node.stub.GetTokenizer(held)]
    assert (again.model, again.sha256, again.part) == ("smollm2-135m-instruct", served.sha256, b"")


async def test_the_gateway_counts_as_the_engine_does_without_asking_the_node(
    engine: LlamaCppEngine, counting_node: NodeUnderTest
) -> None:
    address = counting_node.server.address
    client = NodeClient()
    try:
        assert await client.tokenize(address, TEXTS) == await engine.tokenize(TEXTS)  # the node's
        await fetched(client, address)
        assert client.tokenizers.knows(address)
        assert await client.tokenize(address, TEXTS) == await engine.tokenize(TEXTS)
        # With the node gone, the gateway still counts: nothing was asked of it.
        await counting_node.server.stop(0)
        more = ["A text the node never saw.", "Une phrase que le nœud n'a jamais vue."]
        assert await client.tokenize(address, more) == await engine.tokenize(more)
    finally:
        await client.close()


def unlike_tokenizer() -> bytes:
    tokenizer = Tokenizer(models.WordLevel({"[UNK]": 0}, unk_token="[UNK]"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    return tokenizer.to_str().encode()


async def test_a_file_that_counts_unlike_the_engine_is_not_sent(
    engine: LlamaCppEngine, tmp_path: Path
) -> None:
    wrong = tmp_path / "tokenizer.json"
    wrong.write_bytes(unlike_tokenizer())
    assert await vouch(engine.model, wrong, engine.tokenize) is None
    broken = tmp_path / "broken.json"
    broken.write_text("{not json")
    assert await vouch(engine.model, broken, engine.tokenize) is None


class OlderServicer(NodeServicer):
    """A node from before GetTokenizer: the call is UNIMPLEMENTED."""

    GetTokenizer = node_service_pb2_grpc.NodeServiceServicer.GetTokenizer  # type: ignore[assignment]


@pytest.mark.parametrize("kind", ["offers-none", "older"])
async def test_a_node_without_a_tokenizer_counts_for_the_gateway(
    engine: LlamaCppEngine, kind: str
) -> None:
    node = NodeUnderTest(
        engine, servicer_type=NodeServicer if kind == "offers-none" else OlderServicer
    )
    client = NodeClient()
    try:
        async for under_test in serve_node(node):
            address = under_test.server.address
            assert await client.tokenize(address, TEXTS) == await engine.tokenize(TEXTS)
            await fetched(client, address)
            assert not client.tokenizers.knows(address)
            assert await client.tokenize(address, TEXTS[:3]) == await engine.tokenize(TEXTS[:3])
    finally:
        await client.close()


def test_a_configured_tokenizer_file_must_exist(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="is not a file"):
        tokenizer_file(NodeAgentConfig(tokenizer_file=str(tmp_path / "missing.json")))
    assert tokenizer_file(NodeAgentConfig(engine="sim")) is None
    assert tokenizer_file(NodeAgentConfig(serve_tokenizer=False)) is None
