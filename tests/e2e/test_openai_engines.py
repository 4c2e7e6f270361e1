"""Structured outputs and tools against the real engine (llama.cpp's llama-server with
SmolLM2-135M), through the official SDK and LangChain's ChatOpenAI: the engine's grammar makes
the answer parse; a required or named tool choice comes back as a call whose arguments the
tool's schema accepts (decoded under that schema); the tools reach the model's prompt and a
tool result in the history is rendered. (Under `auto` SmolLM2 writes no calls of its own: those
are tested on simulated replicas, tests/e2e/test_openai_agents.py.)"""

from __future__ import annotations

import json

import aiohttp
import jsonschema
import openai
import pydantic
import pytest
from langchain_openai import ChatOpenAI

from clients.chatctl.platform import LocalPlatform
from tests.tool_schemas import FORECAST, SCHEMAS, ZONE

pytestmark = pytest.mark.slow


class Capital(pydantic.BaseModel):
    country: str
    city: str


def sdk(platform: LocalPlatform) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(
        base_url=f"{platform.edge_url}/v1",
        api_key=platform.tokens["plus"],
        max_retries=0,
        timeout=240,
    )


def chat_model(platform: LocalPlatform, **settings: object) -> ChatOpenAI:
    # A model name LangChain knows nothing of: it never needs tiktoken's encodings, which
    # cannot be downloaded here.
    return ChatOpenAI(
        model="small",
        base_url=f"{platform.edge_url}/v1",
        api_key=platform.tokens["plus"],
        max_retries=0,
        timeout=240,
        **settings,
    )


async def test_the_sdk_parses_what_llama_cpp_writes_under_the_schema(platform) -> None:
    async with sdk(platform) as client:
        completion = await client.chat.completions.parse(
            model="small",
            messages=[{"role": "user", "content": "Name the capital of France."}],
            response_format=Capital,
            max_tokens=120,
            temperature=0,
        )
    (choice,) = completion.choices
    assert choice.finish_reason == "stop"
    assert choice.message.parsed == Capital.model_validate_json(choice.message.content)


async def test_langchain_structured_output_on_llama_cpp(platform) -> None:
    structured = chat_model(platform, temperature=0, max_tokens=120).with_structured_output(
        Capital, method="json_schema"
    )
    capital = await structured.ainvoke("Name the capital of Italy.")
    assert isinstance(capital, Capital)


async def test_tools_and_a_tool_result_reach_llama_cpp(platform) -> None:
    weather = {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Weather now in a city",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
        },
    }
    history = [
        {"role": "user", "content": "Weather in Oslo?"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": json.dumps({"city": "Oslo"})},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": '{"celsius": 4}'},
    ]
    async with sdk(platform) as client:
        answer = await client.chat.completions.create(
            model="small", messages=history, tools=[weather], max_tokens=16, temperature=0
        )
    choice = answer.choices[0]
    # The template rendered the call and its result; the model answered in prose.
    assert choice.finish_reason in ("stop", "length") and choice.message.content
    # The tools' definitions were counted into the prompt (about 150 tokens of them).
    assert answer.usage.prompt_tokens > 150


TOOLS = [
    {"type": "function", "function": {"name": "get_forecast", "description": "Weather forecast",
                                      "parameters": FORECAST}},
    {"type": "function", "function": {"name": "get_time", "description": "Time now in a zone",
                                      "parameters": ZONE}},
]  # fmt: skip
NAMED_TIME = {"type": "function", "function": {"name": "get_time"}}


@pytest.mark.parametrize("choice", ["required", NAMED_TIME], ids=["required", "named"])
async def test_a_required_or_named_choice_is_a_call_the_tools_schema_accepts(
    platform, choice
) -> None:
    async with sdk(platform) as client:
        completion = await client.chat.completions.create(
            model="small",
            messages=[{"role": "user", "content": "What will the weather be in Oslo?"}],
            tools=TOOLS,
            tool_choice=choice,
            max_tokens=120,
            temperature=0,
        )
    (choice_made,) = completion.choices
    assert choice_made.finish_reason == "tool_calls", choice_made.message
    assert choice_made.message.content is None
    (call,) = choice_made.message.tool_calls
    if isinstance(choice, dict):
        assert call.function.name == "get_time"
    jsonschema.validate(json.loads(call.function.arguments), SCHEMAS[call.function.name])
    assert call.id.startswith("call_")


async def test_a_streamed_named_choice_is_one_call_and_no_text(platform) -> None:
    async with sdk(platform) as client:
        stream = await client.chat.completions.create(
            model="small",
            messages=[{"role": "user", "content": "Weather in Rome for three days?"}],
            tools=TOOLS,
            tool_choice={"type": "function", "function": {"name": "get_forecast"}},
            max_tokens=120,
            temperature=0,
            stream=True,
        )
        chunks = [chunk async for chunk in stream]
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    deltas = [d for c in chunks if c.choices for d in c.choices[0].delta.tool_calls or ()]
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices]
    assert text == "" and finishes[-1] == "tool_calls"
    (delta,) = deltas
    assert delta.function.name == "get_forecast"
    jsonschema.validate(json.loads(delta.function.arguments), FORECAST)


async def test_langchain_bind_tools_with_a_named_choice_gets_the_call(platform) -> None:
    bound = chat_model(platform, temperature=0, max_tokens=120).bind_tools(
        TOOLS, tool_choice="get_forecast"
    )
    answer = await bound.ainvoke("Will it rain in Bergen this week?")
    (call,) = answer.tool_calls
    assert call["name"] == "get_forecast"
    jsonschema.validate(call["args"], FORECAST)


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        (
            {"tools": TOOLS, "tool_choice": {"type": "function", "function": {"name": "x"}}},
            "'tool_choice' names 'x', which is not among the tools",
        ),
        ({"tool_choice": "required"}, "'tool_choice' is 'required' but no tools were given"),
    ],
    ids=["named-missing", "required-without-tools"],
)
async def test_a_choice_that_cannot_be_a_call_is_a_400_saying_why(
    platform, fields, message
) -> None:
    body = {"model": "small", "messages": [{"role": "user", "content": "Hi"}], **fields}
    async with (
        aiohttp.ClientSession() as http,
        http.post(
            f"{platform.edge_url}/v1/chat/completions",
            json=body,
            headers={"Authorization": f"Bearer {platform.tokens['plus']}"},
        ) as response,
    ):
        assert response.status == 400
        assert (await response.json()) == {
            "error": {
                "message": message,
                "type": "invalid_request_error",
                "param": "tool_choice",
                "code": None,
            }
        }


async def test_a_forced_call_cut_by_max_tokens_finishes_length_with_no_call_and_no_text(
    platform,
) -> None:
    """Half a document is no call, and it is not shown as text either."""
    async with sdk(platform) as client:
        completion = await client.chat.completions.create(
            model="small",
            messages=[{"role": "user", "content": "Weather in Rome for three days?"}],
            tools=TOOLS,
            tool_choice={"type": "function", "function": {"name": "get_forecast"}},
            max_tokens=3,
            temperature=0,
        )
    (choice,) = completion.choices
    assert choice.finish_reason == "length"
    assert (choice.message.content, choice.message.tool_calls) == ("", None)
