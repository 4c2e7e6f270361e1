"""Structured outputs and tool calls through the OpenAI-compatible API, on simulated replicas
(which write a document the schema accepts, and call tools, deterministically): the SDK's
parse(), streamed JSON through the output check's hold-back, a refusal in OpenAI's `refusal`
field, a failover refused mid-document, and tool calls whole and streamed."""

from __future__ import annotations

import asyncio
import json
import signal
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, Literal

import aiohttp
import jsonschema
import openai
import pydantic
import pytest
from langchain_core.messages import HumanMessage
from langchain_core.tools import tool as langchain_tool
from langchain_openai import ChatOpenAI

from chat.v1 import scheduler_service_pb2 as spb
from chat.v1 import scheduler_service_pb2_grpc as spb_grpc
from clients.chatctl.platform import LocalPlatform, PlatformSettings
from domain.safety import Refusals

pytestmark = pytest.mark.slow

# Flags the canary phrase alone.
BLOCKLIST = Path(__file__).parent / "data" / "blocks_canary.json"
CANARY = "forbidden canary phrase"


class City(pydantic.BaseModel):
    name: str
    population: int
    rivers: list[str]


@pytest.fixture(scope="module")
async def sim(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[LocalPlatform]:
    platform = LocalPlatform(
        PlatformSettings(
            state_dir=tmp_path_factory.mktemp("openai-agents"),
            edge_listen="127.0.0.1:0",
            nodes=2,
            extra_env={
                "CHAT_NODEAGENT_ENGINE": "sim",
                "CHAT_NODEAGENT_SIM_PRESET": "8b-1xh100",
                "CHAT_GATEWAY_SAFETY_BLOCKLIST": str(BLOCKLIST),
                "CHAT_GATEWAY_PLUS_MAX_ANSWER_TOKENS": "4000",
            },
        )
    )
    await platform.start()
    yield platform
    await platform.stop()


def sdk(platform: LocalPlatform) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(
        base_url=f"{platform.edge_url}/v1",
        api_key=platform.tokens["plus"],
        max_retries=0,
        timeout=120,
    )


def ask(text: str) -> list[dict[str, Any]]:
    return [{"role": "user", "content": text}]


# Structured outputs ---------------------------------------------------------------------------


async def test_parse_returns_an_object_the_schema_accepts(sim: LocalPlatform) -> None:
    async with sdk(sim) as client:
        completion = await client.chat.completions.parse(
            model="auto", messages=ask("Describe a city."), response_format=City
        )
    (choice,) = completion.choices
    assert choice.finish_reason == "stop" and choice.message.refusal is None
    assert isinstance(choice.message.parsed, City)
    assert choice.message.parsed == City.model_validate_json(choice.message.content)
    jsonschema.validate(json.loads(choice.message.content), City.model_json_schema())


async def test_a_streamed_json_answer_is_whole_after_the_hold_back(sim: LocalPlatform) -> None:
    async with (
        sdk(sim) as client,
        client.chat.completions.stream(
            model="auto", messages=ask("Describe a city."), response_format=City
        ) as stream,
    ):
        pieces = [e.delta async for e in stream if e.type == "content.delta"]
        final = await stream.get_final_completion()
    assert len(pieces) > 1  # it streamed, in pieces the output check released
    text = "".join(pieces)
    assert final.choices[0].message.content == text
    assert final.choices[0].message.parsed == City.model_validate_json(text)


async def test_json_object_gets_a_json_object(sim: LocalPlatform) -> None:
    async with sdk(sim) as client:
        completion = await client.chat.completions.create(
            model="auto",
            messages=ask("Reply in JSON."),
            response_format={"type": "json_object"},
        )
    document = json.loads(completion.choices[0].message.content)
    assert isinstance(document, dict) and document


def canary_schema() -> dict[str, Any]:
    return {
        "type": "json_schema",
        "json_schema": {
            "name": "word",
            "strict": True,
            "schema": {
                "type": "object",
                "properties": {"word": {"const": CANARY}},
                "required": ["word"],
                "additionalProperties": False,
            },
        },
    }


async def test_a_refused_json_answer_gives_the_refusal_field_not_a_document(
    sim: LocalPlatform,
) -> None:
    async with sdk(sim) as client:
        completion = await client.chat.completions.create(
            model="auto", messages=ask("Give me a word."), response_format=canary_schema()
        )
        streamed = await client.chat.completions.create(
            model="auto",
            messages=ask("Give me a word."),
            response_format=canary_schema(),
            stream=True,
        )
        chunks = [chunk async for chunk in streamed]
        refused_input = await client.chat.completions.parse(
            model="auto", messages=ask(f"Say {CANARY}."), response_format=City
        )
    (choice,) = completion.choices
    assert choice.message.content is None
    assert choice.message.refusal == Refusals().output
    assert choice.finish_reason == "stop"
    deltas = [c.choices[0].delta for c in chunks if c.choices]
    # The flagged document never reached the client; the refusal came apart from it.
    assert "".join(d.content or "" for d in deltas) == ""
    assert "".join(d.refusal or "" for d in deltas) == Refusals().output
    assert chunks[-1].choices[0].finish_reason == "stop"
    message = refused_input.choices[0].message
    assert message.parsed is None and message.refusal == Refusals().input


async def test_a_json_answer_whose_replica_dies_is_not_continued(sim: LocalPlatform) -> None:
    """A grammar cannot be resumed mid-document on another replica: the client gets a clear
    error, never a document spliced from two."""
    schema = {
        "type": "object",
        "properties": {"rivers": {"type": "array", "items": {"type": "string"}, "minItems": 400}},
        "required": ["rivers"],
    }
    body = {
        "model": "auto",
        "messages": ask("List rivers."),
        "stream": True,
        "response_format": {"type": "json_schema", "json_schema": {"name": "r", "schema": schema}},
    }
    headers = {"Authorization": f"Bearer {sim.tokens['plus']}"}
    events: list[dict[str, Any]] = []
    async with (
        aiohttp.ClientSession() as http,
        http.post(f"{sim.edge_url}/v1/chat/completions", json=body, headers=headers) as r,
    ):
        serving = f"nodeagent-{r.headers['X-Replica'].rsplit('-', 1)[1]}"
        async for raw in r.content:
            line = raw.decode().strip()
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            events.append(json.loads(line[6:]))
            shown = sum(1 for e in events if e.get("choices") and e["choices"][0]["delta"])
            if shown == 3 and "error" not in events[-1]:
                killed = next(c for c in sim.children if c.name == serving)
                killed.process.send_signal(signal.SIGKILL)
    # The fixture's other tests get both replicas back.
    await sim.restart(serving)
    await both_nodes_ready(sim)
    error = events[-1]["error"]
    assert error["code"] == "14"
    assert error["message"] == (
        "the replica writing this JSON answer was lost mid-document, and a JSON answer "
        "cannot be continued on another replica; send the request again"
    )
    assert not any(e.get("choices") and e["choices"][0]["finish_reason"] for e in events)


async def both_nodes_ready(platform: LocalPlatform) -> None:
    admin = (("authorization", f"Bearer {platform.admin_token}"),)
    async with platform.channel(platform.scheduler_address) as channel:
        scheduler = spb_grpc.SchedulerServiceStub(channel)
        for _ in range(600):
            nodes = (await scheduler.ListNodes(spb.ListNodesRequest(), metadata=admin)).nodes
            if sum(n.load.state == spb.NODE_STATE_READY for n in nodes) == 2:
                return
            await asyncio.sleep(0.1)
    raise AssertionError("the restarted node did not come back")


# Tool calls -----------------------------------------------------------------------------------

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Weather now in a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}, "unit": {"enum": ["c", "f"]}},
            "required": ["city", "unit"],
            "additionalProperties": False,
        },
    },
}
TIME = {
    "type": "function",
    "function": {
        "name": "get_time",
        "description": "Local time in a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
        },
    },
}


def assert_call_fits(call: Any, tool: dict[str, Any]) -> None:
    assert call.type == "function" and call.id.startswith("call_")
    assert call.function.name == tool["function"]["name"]
    jsonschema.validate(json.loads(call.function.arguments), tool["function"]["parameters"])


async def test_tool_calls_whole_and_parallel(sim: LocalPlatform) -> None:
    async with sdk(sim) as client:
        both = await client.chat.completions.create(
            model="auto", messages=ask("Weather and time in Oslo?"), tools=[WEATHER, TIME]
        )
        one = await client.chat.completions.create(
            model="auto",
            messages=ask("Weather and time in Oslo?"),
            tools=[WEATHER, TIME],
            parallel_tool_calls=False,
        )
    choice = both.choices[0]
    assert choice.finish_reason == "tool_calls" and choice.message.content is None
    assert [c.function.name for c in choice.message.tool_calls] == ["get_weather", "get_time"]
    assert_call_fits(choice.message.tool_calls[0], WEATHER)
    assert_call_fits(choice.message.tool_calls[1], TIME)
    assert [c.function.name for c in one.choices[0].message.tool_calls] == ["get_weather"]


async def test_tool_choice_none_named_and_required(sim: LocalPlatform) -> None:
    async with sdk(sim) as client:
        none = await client.chat.completions.create(
            model="auto", messages=ask("Weather in Oslo?"), tools=[WEATHER], tool_choice="none"
        )
        named = await client.chat.completions.create(
            model="auto",
            messages=ask("Weather in Oslo?"),
            tools=[WEATHER, TIME],
            tool_choice={"type": "function", "function": {"name": "get_time"}},
        )
        required = await client.chat.completions.create(
            model="auto",
            messages=ask("Weather in Oslo?"),
            tools=[WEATHER],
            tool_choice="required",
        )
    assert none.choices[0].message.tool_calls is None
    assert none.choices[0].message.content and none.choices[0].finish_reason == "stop"
    assert [c.function.name for c in named.choices[0].message.tool_calls] == ["get_time"]
    assert_call_fits(named.choices[0].message.tool_calls[0], TIME)
    assert_call_fits(required.choices[0].message.tool_calls[0], WEATHER)


async def test_a_tool_result_in_the_history_gets_an_answer(sim: LocalPlatform) -> None:
    async with sdk(sim) as client:
        first = await client.chat.completions.create(
            model="auto", messages=ask("Weather in Oslo?"), tools=[WEATHER]
        )
        (call,) = first.choices[0].message.tool_calls
        history = [
            *ask("Weather in Oslo?"),
            first.choices[0].message.model_dump(exclude_none=True),
            {"role": "tool", "tool_call_id": call.id, "content": '{"temp": 4}'},
        ]
        answer = await client.chat.completions.create(
            model="auto", messages=history, tools=[WEATHER]
        )
        with pytest.raises(openai.BadRequestError) as stray:
            await client.chat.completions.create(
                model="auto",
                messages=[*history[:2], {**history[2], "tool_call_id": "call_nobody"}],
                tools=[WEATHER],
            )
    assert answer.choices[0].finish_reason == "stop"
    assert answer.choices[0].message.content and answer.choices[0].message.tool_calls is None
    assert "call_nobody" in stray.value.message


async def test_streamed_tool_calls_come_as_openai_deltas(sim: LocalPlatform) -> None:
    async with sdk(sim) as client:
        stream = await client.chat.completions.create(
            model="auto",
            messages=ask("Weather and time in Oslo?"),
            tools=[WEATHER, TIME],
            stream=True,
        )
        chunks = [chunk async for chunk in stream]
        async with client.chat.completions.stream(
            model="auto", messages=ask("Weather and time in Oslo?"), tools=[WEATHER, TIME]
        ) as helper:
            final = await helper.get_final_completion()
    deltas = [c.choices[0].delta for c in chunks if c.choices and c.choices[0].delta.tool_calls]
    calls = [call for d in deltas for call in d.tool_calls]
    assert [(c.index, c.type, c.function.name) for c in calls] == [
        (0, "function", "get_weather"),
        (1, "function", "get_time"),
    ]
    assert chunks[-1].choices[0].finish_reason == "tool_calls"
    assert [c.function.arguments for c in final.choices[0].message.tool_calls] == [
        c.function.arguments for c in calls
    ]


CALL_WITHOUT_FUNCTION = {"role": "assistant", "tool_calls": [{"id": "c", "type": "function"}]}
NAMED_MISSING = {"type": "function", "function": {"name": "x"}}
UNNAMED_SCHEMA = {"type": "json_schema", "json_schema": {"name": "a b"}}
BAD_SCHEMA = {"type": "json_schema", "json_schema": {"name": "a", "schema": {"type": "thing"}}}
BAD_TOOL_BODIES = [
    ({"tools": [{"type": "function"}]}, "tools[0].function"),
    ({"tools": [WEATHER, WEATHER]}, "tools"),
    ({"tools": [WEATHER], "tool_choice": NAMED_MISSING}, "tool_choice"),
    ({"tool_choice": "required"}, "tool_choice"),
    ({"messages": [CALL_WITHOUT_FUNCTION, *ask("Hi")]}, "messages[0].tool_calls[0]"),
    ({"response_format": UNNAMED_SCHEMA}, "response_format.json_schema.name"),
    ({"response_format": BAD_SCHEMA}, "response_format.json_schema.schema"),
]


@pytest.mark.parametrize(("fields", "param"), BAD_TOOL_BODIES)
async def test_malformed_tools_and_formats_get_a_400_naming_them(sim, fields, param) -> None:
    body = {"model": "auto", "messages": ask("Hi"), **fields}
    async with (
        aiohttp.ClientSession() as http,
        http.post(
            f"{sim.edge_url}/v1/chat/completions",
            json=body,
            headers={"Authorization": f"Bearer {sim.tokens['plus']}"},
        ) as r,
    ):
        assert r.status == 400
        assert (await r.json())["error"]["param"] == param


# LangChain's ChatOpenAI --------------------------------------------------------------------------


def chat_model(platform: LocalPlatform) -> ChatOpenAI:
    # A model name LangChain knows nothing of: it never needs tiktoken's encodings.
    return ChatOpenAI(
        model="auto",
        base_url=f"{platform.edge_url}/v1",
        api_key=platform.tokens["plus"],
        max_retries=0,
    )


@langchain_tool
def get_weather(city: str, unit: Literal["c", "f"]) -> str:
    """Weather now in a city."""
    return json.dumps({"city": city, "unit": unit, "temp": 4})


async def test_langchain_bind_tools_gets_calls_and_uses_their_results(sim: LocalPlatform) -> None:
    model = chat_model(sim).bind_tools([get_weather])
    question = HumanMessage("Weather in Oslo?")
    asked = await model.ainvoke([question])
    (call,) = asked.tool_calls
    assert call["name"] == "get_weather" and set(call["args"]) == {"city", "unit"}
    assert call["args"]["unit"] in ("c", "f")
    result = await get_weather.ainvoke(call)
    answer = await model.ainvoke([question, asked, result])
    assert answer.tool_calls == [] and answer.content
    streamed = [chunk async for chunk in model.astream([question])]
    whole = streamed[0]
    for chunk in streamed[1:]:
        whole += chunk
    assert [c["name"] for c in whole.tool_calls] == ["get_weather"]


async def test_langchain_structured_output_on_simulated_replicas(sim: LocalPlatform) -> None:
    city = (
        await chat_model(sim)
        .with_structured_output(City, method="json_schema")
        .ainvoke("Describe a city.")
    )
    assert isinstance(city, City) and len(city.rivers) == 2


async def test_prompt_cache_key_and_user_keep_a_session_on_one_replica(sim: LocalPlatform) -> None:
    """Both name the affinity key: different openings with one key go to one replica (by
    chance, five openings would share one of two replicas once in sixteen)."""
    async with sdk(sim) as client:
        for field in ("prompt_cache_key", "user"):
            replicas = set()
            for topic in ("owls", "tides", "bread", "comets", "glass"):
                completion = await client.chat.completions.create(
                    model="auto",
                    messages=ask(f"About {topic}?"),
                    max_tokens=2,
                    **{field: f"{field}-session-1"},
                )
                replicas.add(completion.system_fingerprint)
            assert len(replicas) == 1, field
