"""A tool call that must be made (`tool_choice` "required", or a named tool), decoded as a
JSON document under a schema made from the tools, through the engine's structured-output
support (llama-server's and vLLM's `response_format` json_schema).

Why not the engines' own tool support: llama-server forces a call only for chat templates
whose tool format it recognises, and for the one the local platform ships it does not, so a
required call came back as prose; a JSON schema holds on every engine, for any template. The
tools still go in the request, with `tool_choice` "none", so the template puts their
descriptions in the prompt while the engine's own tool grammar and parser stay out of the way.

The document is one call: a named tool's (or a lone tool's) arguments, or, for several tools,
`{"name": ..., "arguments": ...}`, the form the tool template asks the model to write."""

from __future__ import annotations

import json
from typing import Any

from domain.answer_options import AnswerOptions, ToolCall, ToolChoice, ToolDefinition
from domain.types import Finish

# A tool without parameters takes the empty object and nothing else.
NO_PARAMETERS: dict[str, Any] = {"type": "object", "properties": {}, "additionalProperties": False}


class NotACall(ValueError):
    """The engine's document is not a call the schema allows: it did not decode under it."""


def forces_call(options: AnswerOptions) -> bool:
    return bool(options.tools) and options.tool_choice in (ToolChoice.REQUIRED, ToolChoice.NAMED)


def _candidates(options: AnswerOptions) -> list[ToolDefinition]:
    if options.tool_choice is ToolChoice.NAMED:
        return [t for t in options.tools if t.name == options.tool_choice_name]
    return list(options.tools)


def _parameters(tool: ToolDefinition) -> dict[str, Any]:
    return json.loads(tool.parameters) if tool.parameters else NO_PARAMETERS


def schema(options: AnswerOptions) -> dict[str, Any]:
    """The JSON Schema the answer is decoded under; options must force a call."""
    tools = _candidates(options)
    if len(tools) == 1:
        return _parameters(tools[0])
    return {
        "anyOf": [
            {
                "type": "object",
                "properties": {"name": {"const": tool.name}, "arguments": _parameters(tool)},
                "required": ["name", "arguments"],
                "additionalProperties": False,
            }
            for tool in tools
        ]
    }


def request_fields(fields: dict[str, Any], options: AnswerOptions) -> dict[str, Any]:
    """The engine request's option fields (chat_wire.option_fields) with the call forced
    through the schema; unchanged when options force no call. A response_format the caller
    asked for gives way: a forced call has no text answer for it to shape."""
    if not forces_call(options):
        return fields
    shaped = {key: value for key, value in fields.items() if key != "parallel_tool_calls"}
    # A named tool alone in the prompt: the model writes its arguments, and the others'
    # descriptions would only lead a small model astray.
    names = {tool.name for tool in _candidates(options)}
    shaped["tools"] = [tool for tool in fields["tools"] if tool["function"]["name"] in names]
    shaped["tool_choice"] = "none"
    shaped["response_format"] = {
        "type": "json_schema",
        "json_schema": {"name": "tool_call", "schema": schema(options), "strict": True},
    }
    return shaped


def call_of(text: str, options: AnswerOptions, call_id: str) -> ToolCall:
    """The call in the engine's document; NotACall when it is not one."""
    try:
        document = json.loads(text)
    except ValueError as error:
        raise NotACall(f"the answer under the tool's schema is not JSON: {text[:200]!r}") from error
    tools = _candidates(options)
    name: Any
    if len(tools) == 1:
        name, arguments = tools[0].name, document
    else:
        if not isinstance(document, dict):
            raise NotACall(f"the answer under the tools' schema is not an object: {text[:200]!r}")
        name, arguments = document.get("name"), document.get("arguments")
        if name not in {tool.name for tool in tools}:
            raise NotACall(f"the answer names no tool of the request: {name!r}")
    if not isinstance(arguments, dict):
        raise NotACall(f"the arguments of {name!r} are not a JSON object: {text[:200]!r}")
    compact = json.dumps(arguments, separators=(",", ":"), ensure_ascii=False)
    return ToolCall(call_id, str(name), compact)


def finished_calls(
    text: str, finish: Finish, options: AnswerOptions, call_id: str
) -> tuple[ToolCall, ...]:
    """The answer's call once the engine finished. Cut short (its token limit, an abort), none:
    half a document is no call, and the finish says why; NotACall when a whole answer is not
    one."""
    if finish is not Finish.STOP:
        return ()
    return (call_of(text, options, call_id),)
