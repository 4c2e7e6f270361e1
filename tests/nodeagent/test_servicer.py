"""NodeService over a real gRPC socket, on a real llama-server."""

from __future__ import annotations

import asyncio
import time
import uuid
from itertools import accumulate

import grpc
import pytest

from chat.v1 import common_pb2
from chat.v1 import node_service_pb2 as pb
from nodeagent.llamacpp import LlamaCppEngine
from nodeagent.request_registry import RequestRegistry
from nodeagent.servicer import NodeServicer
from tests.nodeagent.conftest import NodeUnderTest


def start(rid: str, text: str, max_tokens: int = 12, interval_ms: int = 0) -> pb.GenerateRequest:
    return pb.GenerateRequest(
        start=pb.GenerateStart(
            request_id=rid,
            max_tokens=max_tokens,
            prompt_tokens=20,
            turns=[common_pb2.Turn(role=common_pb2.ROLE_USER, content=text)],
            stream_interval_ms=interval_ms,
        )
    )


async def read_all(call) -> list[pb.GenerateResponse]:
    responses = []
    while (response := await call.read()) is not grpc.aio.EOF:
        responses.append(response)
    return responses


async def test_generate_streams_numbered_chunks_then_finish(node: NodeUnderTest) -> None:
    call = node.stub.Generate()
    await call.write(start("s1", "Name two fruits."))
    responses = await read_all(call)
    chunks = [r.chunk for r in responses[:-1]]
    # One token a piece, as the engine wrote them; tokens ready at once share a message.
    tokens = node.registry.get("s1").chunks
    assert [p for c in chunks for p in pieces(c)] == tokens
    assert [c.index for c in chunks] == list(accumulate(len(pieces(c)) for c in chunks))
    assert all(c.text == "".join(pieces(c)) for c in chunks)
    finish = responses[-1].finish
    assert finish.finish in (common_pb2.FINISH_REASON_STOP, common_pb2.FINISH_REASON_LENGTH)
    assert len(tokens) <= finish.usage.output_tokens <= len(tokens) + 1
    assert finish.model == "smollm2-135m-instruct"


def pieces(chunk: pb.TokenChunk) -> list[str]:
    return list(chunk.pieces) or [chunk.text]


async def timed_read_all(call) -> list[tuple[float, pb.GenerateResponse]]:
    responses = []
    while (response := await call.read()) is not grpc.aio.EOF:
        responses.append((time.monotonic(), response))
    return responses


async def test_a_batching_node_sends_the_same_answer_in_fewer_chunks(
    batching_node: NodeUnderTest,
) -> None:
    sent_at = time.monotonic()
    call = batching_node.stub.Generate()
    await call.write(start("b1", "Count from one to thirty in words.", 48))
    await assert_batched(batching_node, "b1", sent_at, await timed_read_all(call))


async def test_an_answer_asking_for_an_interval_gets_it_from_a_node_without_one(
    node: NodeUnderTest,
) -> None:
    # The node sends each token as it comes; this answer asks for chunks 0.3 s apart, as a
    # gateway does for an answer it holds back.
    sent_at = time.monotonic()
    call = node.stub.Generate()
    await call.write(start("b4", "Count from one to thirty in words.", 48, interval_ms=300))
    await assert_batched(node, "b4", sent_at, await timed_read_all(call))


async def assert_batched(
    node: NodeUnderTest, rid: str, sent_at: float, timed: list[tuple[float, pb.GenerateResponse]]
) -> None:
    """The whole answer, the first token alone and at once, then at most a chunk per 0.3 s."""
    chunks = [response.chunk for _, response in timed[:-1]]
    # What the engine wrote, token by token, as the node keeps it for re-attaches.
    tokens = node.registry.get(rid).chunks
    assert "".join(c.text for c in chunks) == "".join(tokens)
    assert timed[-1][1].finish.usage.output_tokens == len(tokens)
    # The first token alone, at once; then each chunk's index is its last token's.
    indexes = [c.index for c in chunks]
    assert indexes[0] == 1 and chunks[0].text == tokens[0]
    assert indexes == sorted(set(indexes)) and indexes[-1] == len(tokens)
    assert all(
        c.text == "".join(tokens[a:b])
        for c, a, b in zip(chunks, [0, *indexes], indexes, strict=False)
    )
    assert len(chunks) < len(tokens) / 2
    arrivals = [at for at, _ in timed[:-1]]
    assert arrivals[0] - sent_at < 5.0
    # At most one chunk per 0.3 s after the first, and the last as soon as the answer ends
    # (counted, not timed gap by gap, and one spare: a reader's own pauses move arrivals).
    assert len(chunks) - 3 <= (arrivals[-1] - arrivals[0]) / 0.3


async def test_a_batched_answer_reattaches_after_its_last_index(
    batching_node: NodeUnderTest,
) -> None:
    call = batching_node.stub.Generate()
    await call.write(start("b2", "Count from one to thirty in words.", 120))
    await call.read()  # the first token, alone
    second = (await call.read()).chunk
    call.cancel()
    again = batching_node.stub.Generate()
    attach = pb.GenerateAttach(request_id="b2", after_chunk_index=second.index)
    await again.write(pb.GenerateRequest(attach=attach))
    rest = await read_all(again)
    # On a loaded machine the second chunk may already hold the rest of the answer: then the
    # re-attach gets the finish alone. Either way it gets exactly what came after the index.
    chunks = [r.chunk for r in rest[:-1]]
    tokens = batching_node.registry.get("b2").chunks
    assert all(c.index > second.index for c in chunks)
    assert "".join(c.text for c in chunks) == "".join(tokens[second.index :])
    last = chunks[-1].index if chunks else second.index
    assert rest[-1].finish.usage.output_tokens == last == len(tokens)


async def test_cancel_aborts_the_answer(node: NodeUnderTest) -> None:
    call = node.stub.Generate()
    await call.write(start("s2", "Write a very long essay about mountains.", 500))
    first = await call.read()
    assert first.HasField("chunk")
    await call.write(pb.GenerateRequest(cancel=pb.GenerateCancel()))
    rest = await read_all(call)
    assert rest[-1].finish.finish == common_pb2.FINISH_REASON_CANCELLED
    assert len(rest) < 100


async def test_a_dropped_stream_can_be_reattached_by_request_id(node: NodeUnderTest) -> None:
    call = node.stub.Generate()
    await call.write(start("s3", "List five animals.", 20))
    first = await call.read()
    call.cancel()  # the gateway's stream died; the answer goes on in the node
    again = node.stub.Generate()
    attach = pb.GenerateAttach(request_id="s3", after_chunk_index=first.chunk.index)
    await again.write(pb.GenerateRequest(attach=attach))
    rest = await read_all(again)
    assert rest[0].chunk.index - len(pieces(rest[0].chunk)) == first.chunk.index
    assert rest[-1].HasField("finish")
    tokens_seen = rest[-2].chunk.index if len(rest) > 1 else first.chunk.index
    assert tokens_seen <= rest[-1].finish.usage.output_tokens <= tokens_seen + 1


@pytest.mark.parametrize(
    ("first", "reason"),
    [
        (pb.GenerateRequest(cancel=pb.GenerateCancel()), "must be start or attach"),
        (pb.GenerateRequest(start=pb.GenerateStart(max_tokens=5)), "request_id"),
        (pb.GenerateRequest(start=pb.GenerateStart(request_id="b", max_tokens=5)), "turns"),
        (start("b2", "hi", max_tokens=0), "max_tokens"),
        (start("b3", "hi", max_tokens=10**6), "max_tokens"),
        (start("b5", "hi", interval_ms=2001), "stream_interval_ms"),
    ],
)
async def test_bad_first_messages_are_invalid_argument(node, first, reason) -> None:
    call = node.stub.Generate()
    await call.write(first)
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await read_all(call)
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert reason in caught.value.details()


async def test_attach_to_an_unknown_request_is_not_found(node: NodeUnderTest) -> None:
    call = node.stub.Generate()
    await call.write(pb.GenerateRequest(attach=pb.GenerateAttach(request_id="nope")))
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await read_all(call)
    assert caught.value.code() == grpc.StatusCode.NOT_FOUND


async def test_a_draining_node_refuses_new_answers(node: NodeUnderTest) -> None:
    node.accepting.clear()
    try:
        call = node.stub.Generate()
        await call.write(start("d1", "hi"))
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await read_all(call)
        assert caught.value.code() == grpc.StatusCode.UNAVAILABLE
    finally:
        node.accepting.set()


async def test_tokenize_over_grpc(node: NodeUnderTest) -> None:
    answer = await node.stub.Tokenize(pb.TokenizeRequest(texts=["hello world", "hi"]))
    assert list(answer.token_counts) == [2, 1] or answer.token_counts[0] == 2
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await node.stub.Tokenize(pb.TokenizeRequest(texts=["x"] * 300))
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT


async def test_a_text_is_counted_by_the_engine_once(node: NodeUnderTest, engine) -> None:
    counts = node.servicer.token_counts
    fresh = f"A text no test sent before: {uuid.uuid4().hex}."
    truth = await engine.tokenize([fresh, "hello world"])  # the engine itself, uncached
    misses, hits = counts.misses, counts.hits
    first = await node.stub.Tokenize(pb.TokenizeRequest(texts=[fresh, "hello world", fresh]))
    assert list(first.token_counts) == [truth[0], truth[1], truth[0]]
    assert counts.misses - misses <= 2  # "hello world" may be kept from an earlier test
    second = await node.stub.Tokenize(pb.TokenizeRequest(texts=["hello world", fresh]))
    assert list(second.token_counts) == [truth[1], truth[0]]
    assert counts.misses - misses <= 2, "the second call asked the engine for nothing"
    assert counts.hits - hits >= 3


async def test_texts_asked_for_beside_an_answer_come_counted_in_its_finish(
    node: NodeUnderTest, engine
) -> None:
    texts = [f"Count me beside the answer: {uuid.uuid4().hex}.", "Écris une phrase 🦉."]
    truth = await engine.tokenize(texts)  # the engine itself, uncached
    request = start("c1", "Name two fruits.")
    request.start.count_texts.extend(texts)
    call = node.stub.Generate()
    await call.write(request)
    responses = await read_all(call)
    assert responses[-1].HasField("finish")
    assert list(responses[-1].finish.text_tokens) == truth
    # Nothing asked, nothing counted.
    plain = node.stub.Generate()
    await plain.write(start("c2", "Name two fruits."))
    assert list((await read_all(plain))[-1].finish.text_tokens) == []


async def test_too_many_texts_to_count_beside_an_answer_are_invalid(node: NodeUnderTest) -> None:
    request = start("c3", "hi")
    request.start.count_texts.extend(["x"] * 300)
    call = node.stub.Generate()
    await call.write(request)
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await read_all(call)
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "count_texts" in caught.value.details()


async def test_an_unclaimed_answer_is_cancelled_after_the_grace(
    node: NodeUnderTest, engine
) -> None:
    call = node.stub.Generate()
    await call.write(start("orphan", "Write a very long essay about rivers.", 400))
    assert (await call.read()).HasField("chunk")
    call.cancel()  # the gateway vanished and nobody re-attaches
    running = node.registry.get("orphan")
    for _ in range(60):  # the grace is 1 s here
        if running.finished is not None:
            break
        await asyncio.sleep(0.1)
    assert running.finished.finish.value == "cancelled"
    assert (await engine.load()).running_requests == 0


async def test_a_prompt_over_the_window_is_invalid(node: NodeUnderTest) -> None:
    too_long = start("w1", "hi", max_tokens=100)
    too_long.start.prompt_tokens = 2000  # the window here is 2,048
    call = node.stub.Generate()
    await call.write(too_long)
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await read_all(call)
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "do not fit" in caught.value.details()


async def test_a_node_whose_engine_is_down_answers_unavailable(node: NodeUnderTest) -> None:
    node.engine_ok.clear()
    try:
        call = node.stub.Generate()
        await call.write(start("e1", "hi"))
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await read_all(call)
        assert caught.value.code() == grpc.StatusCode.UNAVAILABLE
        assert "engine" in caught.value.details()
    finally:
        node.engine_ok.set()


@pytest.mark.parametrize("interval_s", [-0.1, 2.5])
def test_a_stream_interval_out_of_range_is_refused(
    engine: LlamaCppEngine, interval_s: float
) -> None:
    with pytest.raises(ValueError, match="stream_interval_s"):
        NodeServicer(engine, RequestRegistry(engine), asyncio.Event(), None, interval_s)
