"""The simulated engine through the Engine interface and over NodeService gRPC."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import time
from collections.abc import AsyncIterator
from itertools import accumulate

import grpc
import pytest

from chat.v1 import common_pb2
from chat.v1 import node_service_pb2 as pb
from domain.answer_options import AnswerOptions, ToolChoice, ToolDefinition
from domain.replica_hardware import BLOCK_TOKENS, H100_8B, H100x4_70B
from domain.types import Finish, Role, Tier
from nodeagent.engine import Chunk, EngineError, Finished, GenerationRequest, PromptTurn
from nodeagent.main import NodeAgentConfig, build_engine
from nodeagent.sim import SimEngine, count_tokens, planned_answer, prompt_tokens, rendered
from tests.nodeagent.conftest import NodeUnderTest

FAST = 200.0  # times real time: a 70B step of ~20 ms takes 0.1 ms here


def ask(rid: str, text: str, max_tokens: int = 1_000, **fields) -> GenerationRequest:
    turns = (PromptTurn(Role.SYSTEM, "You are brief."), PromptTurn(Role.USER, text))
    return GenerationRequest(rid, turns, max_tokens, **fields)


async def answer(engine: SimEngine, request: GenerationRequest) -> tuple[list[str], Finished]:
    chunks: list[str] = []
    async for item in engine.generate(request):
        if isinstance(item, Chunk):
            chunks.append(item.text)
        else:
            return chunks, item
    raise AssertionError("no Finished")


@contextlib.asynccontextmanager
async def started(engine: SimEngine) -> AsyncIterator[SimEngine]:
    await engine.start()
    try:
        yield engine
    finally:
        await engine.stop()


@pytest.fixture(scope="module")
async def sim_engine() -> AsyncIterator[SimEngine]:
    async with started(SimEngine(H100x4_70B, speed=FAST, answer_lengths=(20, 60))) as engine:
        yield engine


async def test_generates_deterministic_text_named_as_a_simulator(sim_engine: SimEngine) -> None:
    chunks, finished = await answer(sim_engine, ask("g1", "Why is the sky blue?"))
    again, _ = await answer(sim_engine, ask("g2", "Why is the sky blue?"))
    other, _ = await answer(sim_engine, ask("g3", "Name two rivers."))
    text = "".join(chunks)
    assert 20 <= len(chunks) <= 60 and again == chunks and other != chunks
    assert text[0].isupper() and text.endswith(".") and count_tokens(text) == len(chunks)
    assert finished.finish == Finish.STOP
    assert finished.usage.output_tokens == len(chunks)
    assert finished.usage.input_tokens == len(prompt_tokens(ask("x", "Why is the sky blue?").turns))
    assert sim_engine.model == "llama-70b-sim"
    assert sim_engine.context_tokens == H100x4_70B.context_tokens


async def test_max_tokens_cuts_the_answer(sim_engine: SimEngine) -> None:
    chunks, finished = await answer(sim_engine, ask("m1", "Why is the sky blue?", max_tokens=5))
    full, _ = await answer(sim_engine, ask("m2", "Why is the sky blue?"))
    assert chunks == full[:5]
    assert finished.finish == Finish.LENGTH and finished.usage.output_tokens == 5


async def test_continue_from_carries_on_the_same_answer(sim_engine: SimEngine) -> None:
    full, _ = await answer(sim_engine, ask("c1", "Tell me about tides."))
    partial = "".join(full[:7])
    rest, finished = await answer(
        sim_engine, ask("c2", "Tell me about tides.", continue_from=partial)
    )
    assert rest == full[7:] and rest[0].startswith(" ")
    assert finished.usage.output_tokens == len(full) - 7
    assert (
        finished.usage.input_tokens
        == len(prompt_tokens(ask("x", "Tell me about tides.").turns)) + 7
    )


async def test_a_next_turn_reads_its_history_from_the_prefix_cache(sim_engine: SimEngine) -> None:
    first = ask("t1", "Describe a long river in many words. " * 8)
    chunks, turn1 = await answer(sim_engine, first)
    turns = (
        *first.turns,
        PromptTurn(Role.ASSISTANT, "".join(chunks)),
        PromptTurn(Role.USER, "Why?"),
    )
    _, turn2 = await answer(sim_engine, GenerationRequest("t2", turns, 100))
    assert turn1.usage.cached_tokens == 0
    written = turn1.usage.input_tokens + turn1.usage.output_tokens - 1  # the last token's KV
    assert turn2.usage.cached_tokens == written // BLOCK_TOKENS * BLOCK_TOKENS


async def test_it_forgets_the_oldest_conversation_beyond_the_configured_number() -> None:
    config = NodeAgentConfig(engine="sim", sim_speed=FAST, sim_remembered_conversations=1)
    engine = build_engine(config)
    assert isinstance(engine, SimEngine)

    async def next_turn(first: GenerationRequest, chunks: list[str], rid: str) -> Finished:
        turns = (*first.turns, PromptTurn(Role.ASSISTANT, "".join(chunks)),
                 PromptTurn(Role.USER, "Why?"))  # fmt: skip
        return (await answer(engine, GenerationRequest(rid, turns, 20)))[1]

    async with started(engine):
        a = ask("a1", "Describe a long river in many words. " * 8, max_tokens=40)
        b = ask("b1", "Describe a tall mountain in many words. " * 8, max_tokens=40)
        a_chunks, _ = await answer(engine, a)
        b_chunks, _ = await answer(engine, b)
        # b, the newest, is remembered: its next turn reads its history from the cache.
        assert (await next_turn(b, b_chunks, "b2")).usage.cached_tokens > 0
        # a was forgotten when b was remembered: its next turn is computed afresh.
        assert (await next_turn(a, a_chunks, "a2")).usage.cached_tokens == 0
    with pytest.raises(ValueError, match="sim_remembered_conversations"):
        build_engine(NodeAgentConfig(engine="sim", sim_remembered_conversations=0))


async def test_cancel_frees_the_requests_blocks(sim_engine: SimEngine) -> None:
    engine = SimEngine(H100x4_70B, speed=5.0, answer_lengths=(500, 500))
    async with started(engine):
        stream = engine.generate(ask("x1", "Write a very long essay about mountains."))
        assert isinstance(await anext(stream), Chunk)
        busy = await engine.load()
        assert busy.running_requests == 1 and busy.kv_usage > 0
        await stream.aclose()
        idle = await engine.load()
        assert idle.running_requests == idle.waiting_requests == 0
        assert idle.kv_usage == 0 and idle.free_kv_tokens == idle.kv_capacity_tokens


async def test_tokenize_counts_words_and_punctuation(sim_engine: SimEngine) -> None:
    assert await sim_engine.tokenize(["hello world", "Hi, there!", ""]) == [2, 4, 0]


async def test_load_reports_the_simulated_replica(sim_engine: SimEngine) -> None:
    load = await sim_engine.load()
    assert load.kv_capacity_tokens == H100x4_70B.kv_blocks * BLOCK_TOKENS
    assert 0 <= load.kv_usage <= 1 and load.free_kv_tokens <= load.kv_capacity_tokens
    assert load.queued_prefill_tokens >= 0 and 0 <= load.prefix_hit_rate <= 1
    assert await sim_engine.healthy()


async def test_paid_requests_go_first_when_memory_is_short() -> None:
    # Room for 8 blocks (128 tokens): the runner fills it; then only one of the others fits.
    block = BLOCK_TOKENS * H100x4_70B.kv_bytes_per_token
    small = dataclasses.replace(H100x4_70B, kv_cache_bytes=8 * block)
    engine = SimEngine(small, speed=FAST, answer_lengths=(20, 20))
    async with started(engine):
        runner = engine.generate(ask("runner", "word " * 100))
        assert isinstance(await anext(runner), Chunk)
        order: list[str] = []

        async def follow(rid: str, tier: Tier) -> None:
            async for item in engine.generate(ask(rid, "word " * 70, tier=tier)):
                order.append(f"{rid} {'done' if isinstance(item, Finished) else 'chunk'}")

        free = asyncio.create_task(follow("free", Tier.FREE))
        await asyncio.sleep(0)
        paid = asyncio.create_task(follow("paid", Tier.PLUS))
        async for _ in runner:
            pass
        await asyncio.gather(free, paid)
    assert order.index("paid done") < order.index("free chunk")


async def test_it_runs_at_the_simulated_pace() -> None:
    engine = SimEngine(H100x4_70B, speed=10.0, answer_lengths=(30, 30))
    async with started(engine):
        began = time.perf_counter()
        chunks, _ = await answer(engine, ask("p1", "Why?"))
        wall = time.perf_counter() - began
    assert len(chunks) == 30
    assert wall >= 0.9 * engine.simulated_s / 10.0  # ~17 ms a step on an idle 70B replica


async def test_a_stopped_engine_fails_its_answers() -> None:
    engine = SimEngine(H100x4_70B, speed=1.0, answer_lengths=(500, 500))
    await engine.start()
    stream = engine.generate(ask("s1", "Why?"))
    assert isinstance(await anext(stream), Chunk)
    await engine.stop()
    with pytest.raises(EngineError, match="stopped"):
        await anext(stream)
    assert not await engine.healthy()
    with pytest.raises(EngineError, match="not started"):
        await anext(engine.generate(ask("s2", "Why?")))


# --- citations and a search tool's query ---

SOURCES = PromptTurn(
    Role.SYSTEM,
    "Sources: [[cite:doc-2#3]] says the sky is blue; [[cite:doc-1#0]] says why; "
    "[[cite:bad id]] is no id.",
)
ASKED = PromptTurn(Role.USER, "Why is the sky blue? See [[cite:doc-2#3]] and [[cite:zz-9]].")
# The prose the simulator plans for (SOURCES, ASKED) at 6 tokens.
PROSE = "Server stream model server paper."


@pytest.fixture(scope="module")
async def terse_engine() -> AsyncIterator[SimEngine]:
    async with started(SimEngine(H100x4_70B, speed=FAST, answer_lengths=(6, 6))) as engine:
        yield engine


def cites(
    rid: str, ids: tuple[str, ...] = (), max_tokens: int = 100, **fields
) -> GenerationRequest:
    options = AnswerOptions(citation_ids=ids)
    return GenerationRequest(rid, (SOURCES, ASKED), max_tokens, options=options, **fields)


async def test_a_prose_answer_cites_what_its_prompt_cites(terse_engine: SimEngine) -> None:
    """Each distinct well-formed id of the turns, in order of first appearance, once."""
    chunks, finished = await answer(terse_engine, cites("k1"))
    text = "".join(chunks)
    assert text == f"{PROSE} [[cite:doc-2#3]] [[cite:doc-1#0]] [[cite:zz-9]]"
    assert text == "".join(rendered(planned_answer((SOURCES, ASKED), (6, 6)), 0)) + (
        " [[cite:doc-2#3]] [[cite:doc-1#0]] [[cite:zz-9]]"
    )
    assert finished.usage.output_tokens == len(chunks) == count_tokens(text)


async def test_under_citation_ids_it_cites_only_those(terse_engine: SimEngine) -> None:
    chunks, _ = await answer(terse_engine, cites("k2", ("doc-1#0", "doc-2#3")))
    assert "".join(chunks) == f"{PROSE} [[cite:doc-2#3]] [[cite:doc-1#0]]"
    # None of the ids read is allowed: the first of citation_ids.
    chunks, _ = await answer(terse_engine, cites("k3", ("doc-7#7", "doc-8#8")))
    assert "".join(chunks) == f"{PROSE} [[cite:doc-7#7]]"
    # Nor when the prompt cites nothing; and with neither, nothing is appended.
    hello = (PromptTurn(Role.USER, "Hi"),)
    cited = GenerationRequest("k4", hello, 100, options=AnswerOptions(citation_ids=("doc-7#7",)))
    chunks, _ = await answer(terse_engine, cited)
    plain, _ = await answer(terse_engine, GenerationRequest("k5", hello, 100))
    assert "".join(chunks) == "Answer request server only write. [[cite:doc-7#7]]"
    assert "".join(plain) == "Answer request server only write."


async def test_max_tokens_and_a_continuation_cut_and_carry_the_citations(
    terse_engine: SimEngine,
) -> None:
    full, _ = await answer(terse_engine, cites("k6"))
    # 6 prose tokens (5 words and the full stop), then " [", "[", "cite", ":", "doc", ...:
    # cut inside a marker.
    cut, finished = await answer(terse_engine, cites("k7", max_tokens=10))
    assert cut == full[:10] and "".join(cut) == f"{PROSE} [[cite:"
    assert finished.finish == Finish.LENGTH and finished.usage.output_tokens == 10
    rest, finished = await answer(terse_engine, cites("k8", continue_from="".join(cut)))
    assert rest == full[10:] and "".join(cut + rest) == "".join(full)
    assert finished.finish == Finish.STOP and finished.usage.output_tokens == len(full) - 10


async def test_a_search_tools_query_asks_what_the_user_asked(sim_engine: SimEngine) -> None:
    search = ToolDefinition(
        "search_files",
        "",
        json.dumps({"type": "object", "properties": {"query": {"type": "string"}}}),
    )
    turns = (
        PromptTurn(Role.USER, "What is a tide?"),
        PromptTurn(Role.ASSISTANT, "The sea rising and falling."),
        PromptTurn(Role.USER, 'Where is "the moon" in this?'),
    )
    options = AnswerOptions(tools=(search,), tool_choice=ToolChoice.REQUIRED)
    chunks, finished = await answer(
        sim_engine, GenerationRequest("q1", turns, 100, options=options)
    )
    (call,) = finished.tool_calls
    assert chunks == [] and call.name == "search_files"
    assert json.loads(call.arguments) == {"query": 'Where is "the moon" in this?'}


def test_build_engine_makes_a_sim_from_config() -> None:
    engine = build_engine(NodeAgentConfig(engine="sim"))
    assert isinstance(engine, SimEngine) and engine.model == "llama-70b-sim"
    small = build_engine(NodeAgentConfig(engine="sim", sim_preset="8b-1xh100", sim_speed=50))
    assert small.model == "llama-8b-sim" and small.preset is H100_8B
    with pytest.raises(ValueError, match="70b-4xh100"):
        build_engine(NodeAgentConfig(engine="sim", sim_preset="nope"))
    with pytest.raises(ValueError, match="llamacpp, sim"):
        build_engine(NodeAgentConfig(engine="nope"))
    for bad in ([0, 10], [50, 10], [100]):
        with pytest.raises(ValueError, match="sim_answer_tokens"):
            build_engine(NodeAgentConfig(engine="sim", sim_answer_tokens=bad))


# --- over NodeService gRPC ---


@pytest.fixture(scope="module")
async def grpc_engine() -> AsyncIterator[SimEngine]:
    # Slower and longer-winded than sim_engine, so a cancel lands before the answer ends.
    async with started(SimEngine(H100x4_70B, speed=20, answer_lengths=(200, 400))) as engine:
        yield engine


@pytest.fixture(scope="module")
async def sim_node(grpc_engine: SimEngine) -> AsyncIterator[NodeUnderTest]:
    under_test = NodeUnderTest(grpc_engine)
    await under_test.server.start()
    yield under_test
    await under_test.channel.close()
    await under_test.server.stop(1)
    await under_test.registry.close()


def start(rid: str, text: str, max_tokens: int = 1_000) -> pb.GenerateRequest:
    turn = common_pb2.Turn(role=common_pb2.ROLE_USER, content=text)
    return pb.GenerateRequest(
        start=pb.GenerateStart(
            request_id=rid, max_tokens=max_tokens, prompt_tokens=count_tokens(text), turns=[turn]
        )
    )


async def read_all(call) -> list[pb.GenerateResponse]:
    responses = []
    while (response := await call.read()) is not grpc.aio.EOF:
        responses.append(response)
    return responses


async def test_generate_over_grpc(sim_node: NodeUnderTest) -> None:
    call = sim_node.stub.Generate()
    await call.write(start("rpc1", "Why is the sky blue?", max_tokens=12))
    responses = await read_all(call)
    chunks = [r.chunk for r in responses[:-1]]
    # One token a piece; the tokens ready at once share a message.
    pieces = [list(c.pieces) or [c.text] for c in chunks]
    assert [c.index for c in chunks] == list(accumulate(len(p) for p in pieces))
    assert chunks[-1].index == 12
    assert [c.text for c in chunks] == ["".join(p) for p in pieces]
    finish = responses[-1].finish
    assert finish.finish == common_pb2.FINISH_REASON_LENGTH
    assert finish.usage.output_tokens == 12 and finish.model == "llama-70b-sim"


async def test_cancel_over_grpc_frees_the_slot(sim_node: NodeUnderTest, grpc_engine) -> None:
    call = sim_node.stub.Generate()
    await call.write(start("rpc2", "Write a very long essay about mountains."))
    assert (await call.read()).HasField("chunk")
    await call.write(pb.GenerateRequest(cancel=pb.GenerateCancel()))
    rest = await read_all(call)
    assert rest[-1].finish.finish == common_pb2.FINISH_REASON_CANCELLED
    load = await grpc_engine.load()
    assert load.running_requests == 0 and load.kv_usage == 0


async def test_tokenize_over_grpc(sim_node: NodeUnderTest) -> None:
    answer = await sim_node.stub.Tokenize(pb.TokenizeRequest(texts=["hello world", "Hi, you!"]))
    assert list(answer.token_counts) == [2, 4] and answer.model == "llama-70b-sim"


async def test_the_load_carries_how_long_its_answers_held_their_places() -> None:
    async with started(SimEngine(H100x4_70B, speed=FAST, answer_lengths=(40, 40))) as engine:
        assert (await engine.load()).answer_s == 0.0  # nothing answered yet
        began = time.monotonic()
        _, finished = await answer(engine, ask("held", "Why is the sea salty?"))
        took = time.monotonic() - began
        held = (await engine.load()).answer_s
    # Alone in its batch, its answer took at least its decode steps of one answer each, and
    # the simulator never runs ahead of the clock, so no longer than the request took here.
    assert (finished.usage.output_tokens - 1) * engine.decode_step_s <= held <= took
