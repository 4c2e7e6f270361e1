"""The simulated engine's JSON answers: a document each schema accepts, streamed in chunks that
join to it, and the tool calls it makes under each tool_choice."""

from __future__ import annotations

import json
import random

import jsonschema
import pytest

from domain.answer_options import AnswerOptions, ToolChoice, ToolDefinition
from nodeagent import sim_documents
from nodeagent.sim import count_tokens

SCHEMAS = [
    {"type": "object"},
    {
        "type": "object",
        "properties": {
            "name": {"type": "string", "minLength": 3, "maxLength": 8},
            "age": {"type": "integer", "minimum": 18, "maximum": 20},
            "score": {"type": "number", "minimum": 0.5, "maximum": 0.75},
            "ok": {"type": "boolean"},
            "none": {"type": "null"},
            "maybe": {"type": ["string", "null"]},
            "kind": {"enum": ["a", "b"]},
            "fixed": {"const": 7},
            "either": {"anyOf": [{"type": "integer"}, {"type": "string"}]},
            "tags": {"type": "array", "items": {"type": "string"}, "minItems": 3},
        },
        "required": ["name", "age", "score", "ok", "none", "maybe", "kind", "fixed", "tags"],
        "additionalProperties": False,
    },
    {
        "$defs": {
            "Point": {
                "type": "object",
                "properties": {"x": {"type": "integer"}},
                "required": ["x"],
                "additionalProperties": False,
            }
        },
        "type": "object",
        "properties": {"points": {"type": "array", "items": {"$ref": "#/$defs/Point"}}},
        "required": ["points"],
    },
]


@pytest.mark.parametrize("schema", SCHEMAS)
def test_each_document_is_one_the_schema_accepts(schema) -> None:
    for seed in range(20):
        text = sim_documents.document(json.dumps(schema), random.Random(seed))
        jsonschema.validate(json.loads(text), schema)
        chunks = sim_documents.chunks(text)
        assert "".join(chunks) == text
        # One token a chunk, as the simulator counts tokens: a continuation's count is right.
        assert count_tokens(text) == len(chunks)


WEATHER = ToolDefinition("weather", "", json.dumps({"type": "object", "properties": {}}))
TIME = ToolDefinition("time", "", json.dumps({"type": "object", "properties": {"city": {}}}))


def names(options: AnswerOptions, answers_tool: bool = False) -> list[str]:
    calls = sim_documents.tool_calls(options, answers_tool, random.Random(1))
    return [call.name for call in calls]


def test_the_calls_follow_tool_choice() -> None:
    tools = (WEATHER, TIME)
    assert names(AnswerOptions(tools=tools)) == ["weather", "time"]
    assert names(AnswerOptions(tools=tools, parallel_tool_calls=False)) == ["weather"]
    assert names(AnswerOptions(tools=tools, tool_choice=ToolChoice.NONE)) == []
    named = AnswerOptions(tools=tools, tool_choice=ToolChoice.NAMED, tool_choice_name="time")
    assert names(named) == ["time"]
    # After a tool's result: auto answers in prose, required calls again.
    assert names(AnswerOptions(tools=tools), answers_tool=True) == []
    required = AnswerOptions(tools=(WEATHER,), tool_choice=ToolChoice.REQUIRED)
    assert names(required, answers_tool=True) == ["weather"]
    (call,) = sim_documents.tool_calls(required, False, random.Random(1))
    assert json.loads(call.arguments) == {}


SEARCH = {
    "type": "object",
    "properties": {
        "query": {"type": "string", "maxLength": 12},
        "limit": {"type": "integer", "minimum": 1, "maximum": 9},
        "scope": {"type": "string"},
    },
}


def test_a_query_parameter_asks_what_the_user_asked_and_the_rest_is_drawn_as_before() -> None:
    tool = ToolDefinition("search", "", json.dumps(SEARCH))
    options = AnswerOptions(tools=(tool,), tool_choice=ToolChoice.REQUIRED)
    (asked,) = sim_documents.tool_calls(options, False, random.Random(1), "When is the tide high?")
    (drawn,) = sim_documents.tool_calls(options, False, random.Random(1))
    asked_args, drawn_args = json.loads(asked.arguments), json.loads(drawn.arguments)
    assert asked_args["query"] == "When is the t"[:12]  # held to its maxLength
    assert drawn_args["query"] != asked_args["query"]
    assert {**asked_args, "query": drawn_args["query"]} == drawn_args
    assert asked.call_id == drawn.call_id
    # Only a string property named query at the top; a JSON answer's is drawn.
    nested = {"type": "object", "properties": {"q": {"type": "object", "properties": SEARCH}}}
    assert sim_documents.document(json.dumps(nested), random.Random(1), query="x") == (
        sim_documents.document(json.dumps(nested), random.Random(1))
    )
    numeric = {"type": "object", "properties": {"query": {"type": "integer"}}}
    assert isinstance(
        json.loads(sim_documents.document(json.dumps(numeric), random.Random(1), False, "x"))[
            "query"
        ],
        int,
    )
