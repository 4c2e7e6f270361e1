"""Structured outputs and tools against the real engine (llama.cpp's llama-server with
SmolLM2-135M), through the official SDK and LangChain's ChatOpenAI: the engine's grammar makes
the answer parse; the tools reach the model's prompt and a tool result in the history is
rendered. (SmolLM2 does not write tool calls of its own, even when one is required: the calls
themselves are tested on simulated replicas, tests/e2e/test_openai_agents.py.)"""

from __future__ import annotations

import json

import openai
import pydantic
import pytest
from langchain_openai import ChatOpenAI

from clients.chatctl.platform import LocalPlatform

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
