"""The schema a forced tool call is decoded under, the engine request that carries it, and
the call read back from the engine's document (pure: no engine; the engines are in
tests/e2e/test_openai_engines.py and test_vllm.py)."""

from __future__ import annotations

import json

import jsonschema
import pytest

from domain.answer_options import AnswerOptions, ToolCall, ToolChoice, ToolDefinition
from domain.types import Finish, Role, Tier
from nodeagent import chat_wire, forced_calls
from nodeagent.engine import EngineError, GenerationRequest, PromptTurn

CITY = {
    "type": "object",
    "properties": {"city": {"type": "string"}},
    "required": ["city"],
    "additionalProperties": False,
}
WEATHER = ToolDefinition("get_weather", "Weather now in a city", json.dumps(CITY))
CLOCK = ToolDefinition("get_time", "Time now")


def options(choice: ToolChoice, name: str = "", *tools: ToolDefinition) -> AnswerOptions:
    return AnswerOptions(tools=tools or (WEATHER, CLOCK), tool_choice=choice, tool_choice_name=name)


def test_only_required_and_named_choices_force_a_call() -> None:
    assert forced_calls.forces_call(options(ToolChoice.REQUIRED))
    assert forced_calls.forces_call(options(ToolChoice.NAMED, "get_time"))
    assert not forced_calls.forces_call(options(ToolChoice.AUTO))
    assert not forced_calls.forces_call(options(ToolChoice.NONE))
    assert not forced_calls.forces_call(AnswerOptions(json_object=True))


def test_a_named_tool_is_decoded_under_its_own_parameters() -> None:
    assert forced_calls.schema(options(ToolChoice.NAMED, "get_weather")) == CITY
    # No parameters: the empty object alone.
    assert forced_calls.schema(options(ToolChoice.NAMED, "get_time")) == {
        "type": "object",
        "properties": {},
        "additionalProperties": False,
    }
    # A lone tool that is required is the same as naming it.
    assert forced_calls.schema(options(ToolChoice.REQUIRED, "", WEATHER)) == CITY


def test_several_required_tools_are_one_call_to_any_of_them() -> None:
    schema = forced_calls.schema(options(ToolChoice.REQUIRED))
    jsonschema.validate({"name": "get_weather", "arguments": {"city": "Oslo"}}, schema)
    jsonschema.validate({"name": "get_time", "arguments": {}}, schema)
    for wrong in (
        {"name": "get_weather", "arguments": {}},
        {"name": "get_time", "arguments": {"city": "Oslo"}},
        {"name": "send_mail", "arguments": {}},
        {"arguments": {}},
        [{"name": "get_time", "arguments": {}}],
        "prose",
    ):
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(wrong, schema)


def test_the_request_keeps_the_tools_in_the_prompt_and_leaves_the_engines_tool_grammar_out():
    named = chat_wire.option_fields(options(ToolChoice.NAMED, "get_weather"))
    assert named == {
        "response_format": {
            "type": "json_schema",
            "json_schema": {"name": "tool_call", "schema": CITY, "strict": True},
        },
        "tools": [
            {
                "type": "function",
                "function": {
                    "name": "get_weather",
                    "description": "Weather now in a city",
                    "parameters": CITY,
                },
            }
        ],
        "tool_choice": "none",
    }
    required = chat_wire.option_fields(options(ToolChoice.REQUIRED))
    assert [t["function"]["name"] for t in required["tools"]] == ["get_weather", "get_time"]
    assert required["tool_choice"] == "none"
    # A response_format asked for beside a forced call gives way to the call's schema.
    both = AnswerOptions(
        json_schema='{"type": "object"}',
        json_object=True,
        tools=(WEATHER,),
        tool_choice=ToolChoice.REQUIRED,
    )
    assert chat_wire.option_fields(both)["response_format"]["json_schema"]["schema"] == CITY


def test_auto_and_none_reach_the_engine_as_before() -> None:
    fields = chat_wire.option_fields(options(ToolChoice.AUTO))
    assert fields["tool_choice"] == "auto" and fields["parallel_tool_calls"] is True
    assert "response_format" not in fields
    assert chat_wire.option_fields(options(ToolChoice.NONE))["tool_choice"] == "none"


def test_the_document_becomes_the_call() -> None:
    named = options(ToolChoice.NAMED, "get_weather")
    assert forced_calls.call_of('{\n  "city": "Oslo"\n}', named, "call_0_x") == ToolCall(
        "call_0_x", "get_weather", '{"city":"Oslo"}'
    )
    required = options(ToolChoice.REQUIRED)
    document = '{"name": "get_time", "arguments": {}}'
    assert forced_calls.call_of(document, required, "c") == ToolCall("c", "get_time", "{}")


@pytest.mark.parametrize(
    ("text", "choice", "reason"),
    [
        ("The weather in Oslo is sunny.", ToolChoice.NAMED, "not JSON"),
        ('["Oslo"]', ToolChoice.NAMED, "not a JSON object"),
        ('{"name": "send_mail", "arguments": {}}', ToolChoice.REQUIRED, "names no tool"),
        ('{"name": "get_time", "arguments": 3}', ToolChoice.REQUIRED, "not a JSON object"),
        ('"get_time"', ToolChoice.REQUIRED, "not an object"),
    ],
)
def test_a_document_that_is_no_call_is_refused(text, choice, reason) -> None:
    name = "get_weather" if choice is ToolChoice.NAMED else ""
    with pytest.raises(forced_calls.NotACall, match=reason):
        forced_calls.call_of(text, options(choice, name), "c")


def request(choice: ToolChoice, name: str = "") -> GenerationRequest:
    return GenerationRequest(
        request_id="u/m/0123abcd",
        turns=(PromptTurn(Role.USER, "Weather in Oslo?"),),
        max_tokens=40,
        tier=Tier.PLUS,
        options=options(choice, name),
    )


def forced(pieces: list[str], finish: Finish, request: GenerationRequest) -> tuple[ToolCall, ...]:
    """The calls an engine's streamed pieces become, as an adapter feeds them."""
    calls = chat_wire.ToolCallAssembler(request)
    assert [calls.shown(piece) for piece in pieces] == [""] * len(pieces)  # none shown
    return calls.calls(finish)


def test_an_answer_cut_short_is_no_call_and_prose_is_an_engine_error() -> None:
    named = request(ToolChoice.NAMED, "get_weather")
    assert forced(['{"ci'], Finish.LENGTH, named) == ()
    assert forced(['{"city"', ': "Oslo"}'], Finish.STOP, named) == (
        ToolCall("call_0_0123abcd", "get_weather", '{"city":"Oslo"}'),
    )
    with pytest.raises(EngineError, match="not JSON"):
        forced(["Sunny, 18 degrees."], Finish.STOP, named)
