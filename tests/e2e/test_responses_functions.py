"""Function tools in the Responses API, end to end through the OpenAI SDK: the model's call
comes back as a `function_call` item, the caller runs it and sends its output back with the
call, and the answer is the model's answer to all of it. On real processes (edge, gateway,
scheduler, simulated replica) over real sockets.

The simulated model is the script: under `auto` it calls the first function it is offered
when the newest turn is the user's, with arguments drawn from the function's schema, and
answers in prose once it has read a result."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

import jsonschema
import openai
import pytest

from clients.chatctl.platform import LocalPlatform, PlatformSettings
from domain.types import Role
from tests.e2e.responses_support import new_user, sdk, simulated_answer

pytestmark = pytest.mark.slow

SYSTEM_PROMPT = "You are a careful assistant."
ANSWER_TOKENS = (10, 16)
QUESTION = "What is the weather in Oslo?"
CITY = {"type": "object", "properties": {"city": {"type": "string", "enum": ["Oslo", "Bergen"]}},
        "required": ["city"], "additionalProperties": False}  # fmt: skip
WEATHER = {"type": "function", "name": "get_weather", "description": "The weather in a city",
           "parameters": CITY, "strict": True}  # fmt: skip
CLOCK = {"type": "function", "name": "get_time", "description": "The time now"}


@pytest.fixture(scope="module")
async def platform(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[LocalPlatform]:
    local = LocalPlatform(
        PlatformSettings(
            state_dir=tmp_path_factory.mktemp("functions"),
            edge_listen="127.0.0.1:0",
            extra_env={
                "CHAT_NODEAGENT_ENGINE": "sim",
                "CHAT_NODEAGENT_SIM_ANSWER_TOKENS": ",".join(map(str, ANSWER_TOKENS)),
                "CHAT_GATEWAY_SYSTEM_PROMPT": SYSTEM_PROMPT,
                "CHAT_GATEWAY_ROUTER": "false",
            },
        )
    )
    await local.start()
    yield local
    await local.stop()


async def test_a_call_goes_to_the_caller_and_its_output_comes_back(platform) -> None:
    async with sdk(platform, await new_user(platform)) as client:
        asked = await client.responses.create(
            model="auto", input=QUESTION, store=False, tools=[WEATHER],  # type: ignore[list-item]
        )  # fmt: skip
        (call,) = asked.output
        assert (call.type, call.name, call.status) == ("function_call", "get_weather", "completed")
        jsonschema.validate(json.loads(call.arguments), CITY)
        assert asked.status == "completed" and asked.output_text == ""
        assert [t.name for t in asked.tools] == ["get_weather"]  # type: ignore[union-attr]
        answered = await client.responses.create(
            model="auto", store=False, tools=[WEATHER],  # type: ignore[list-item]
            input=[{"role": "user", "content": QUESTION}, call.model_dump(),  # type: ignore[list-item]
                   {"type": "function_call_output", "call_id": call.call_id,
                    "output": "Sunny, 21 C"}],
        )  # fmt: skip
    assert [item.type for item in answered.output] == ["message"]
    assert answered.output_text == simulated_answer(
        ANSWER_TOKENS, (Role.SYSTEM, SYSTEM_PROMPT), (Role.USER, QUESTION),
        (Role.ASSISTANT, ""), (Role.TOOL, "Sunny, 21 C"))  # fmt: skip


async def test_required_and_named_choices_come_back_as_calls(platform) -> None:
    async with sdk(platform, await new_user(platform)) as client:
        named = await client.responses.create(
            model="auto", input=QUESTION, store=False, tools=[WEATHER, CLOCK],  # type: ignore[list-item]
            tool_choice={"type": "function", "name": "get_time"},
        )  # fmt: skip
        required = await client.responses.create(
            model="auto", input=QUESTION, store=False, tools=[WEATHER],  # type: ignore[list-item]
            tool_choice="required", parallel_tool_calls=False,
        )  # fmt: skip
    assert [(i.type, i.name) for i in named.output] == [("function_call", "get_time")]
    assert named.tool_choice.name == "get_time"  # type: ignore[union-attr]
    assert [(i.type, i.name) for i in required.output] == [("function_call", "get_weather")]


async def test_a_stream_writes_each_call_as_openai_does(platform) -> None:
    async with sdk(platform, await new_user(platform)) as client:
        stream = await client.responses.create(
            model="auto", input=QUESTION, store=False, stream=True, tools=[WEATHER],  # type: ignore[list-item]
        )  # fmt: skip
        events = [event async for event in stream]
    assert [e.type for e in events] == [
        "response.created", "response.in_progress", "response.output_item.added",
        "response.function_call_arguments.delta", "response.function_call_arguments.done",
        "response.output_item.done", "response.completed"]  # fmt: skip
    assert [e.sequence_number for e in events] == list(range(7))
    done = events[-1].response.output[0]
    assert events[4].arguments == events[3].delta == done.arguments  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("body", "param", "reason"),
    [
        ({"tools": [WEATHER]}, "store", "function tools are served with 'store': false"),
        ({"store": False, "tools": [WEATHER, {"type": "send_email"}]}, "tools",
         "either the platform's tools or functions"),
        ({"store": False, "tools": [{**WEATHER, "name": "get weather"}]}, "tools[0].name",
         "1-64 letters"),
        ({"store": False, "tools": [{**WEATHER, "color": "red"}]}, "tools[0].color",
         "not a function field"),
        ({"store": False, "tools": [WEATHER], "tool_choice": {"type": "function", "name": "x"}},
         "tool_choice", "not among the functions"),
        ({"store": False, "tool_choice": "required"}, "tool_choice", "no function was given"),
        ({"store": False, "tools": [WEATHER],
          "input": [{"role": "user", "content": QUESTION},
                    {"type": "function_call", "call_id": "c1", "name": "get_weather",
                     "arguments": "{}"}]}, "input", "has no function_call_output"),
    ],
)  # fmt: skip
async def test_bad_function_requests_are_refused_naming_the_field(
    platform: LocalPlatform, body: dict, param: str, reason: str
) -> None:
    async with sdk(platform, await new_user(platform)) as client:
        with pytest.raises(openai.BadRequestError) as refused:
            await client.responses.create(**{"model": "auto", "input": QUESTION, **body})
    assert refused.value.body["param"] == param  # type: ignore[index]
    assert reason in refused.value.message
