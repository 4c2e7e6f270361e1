"""Tool calls in the OpenAI-compatible API: the request's `tools`, `tool_choice` and
`parallel_tool_calls`; assistant messages with `tool_calls` and `tool` messages in the history;
and the calls a model made, written as OpenAI writes them (whole in a message, as deltas in a
stream). The engine parses the calls out of the model's text (llama-server's chat templates,
vLLM's tool parsers); here they are only checked and shaped."""

from __future__ import annotations

import json
import re
from dataclasses import replace
from typing import Any

from domain.answer_options import AnswerOptions, ToolCall, ToolChoice, ToolDefinition
from edge.openai_errors import OpenAIError

NAME_PATTERN = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
MAX_TOOLS = 128
CHOICES = {"auto": ToolChoice.AUTO, "none": ToolChoice.NONE, "required": ToolChoice.REQUIRED}


def _refuse(message: str, param: str) -> OpenAIError:
    return OpenAIError(400, message, None, param)


def _definition(tool: Any, index: int) -> ToolDefinition:
    param = f"tools[{index}]"
    if not isinstance(tool, dict) or tool.get("type") != "function":
        raise _refuse(f"'{param}' must be an object of type 'function'", param)
    function = tool.get("function")
    if not isinstance(function, dict):
        raise _refuse(f"'{param}.function' must be an object", f"{param}.function")
    return function_definition(function, f"{param}.function")


def function_definition(function: dict[str, Any], param: str) -> ToolDefinition:
    """A function's name, description, parameters and strict flag, checked; param names where
    they sit in the request (the Responses API writes them on the tool itself)."""
    name = function.get("name")
    if not isinstance(name, str) or not NAME_PATTERN.match(name):
        raise _refuse(f"'{param}.name' must be 1-64 letters, digits, _ or -", f"{param}.name")
    description = function.get("description") or ""
    if not isinstance(description, str):
        raise _refuse(f"'{param}.description' must be a string", f"{param}.description")
    parameters = function.get("parameters")
    if parameters is not None and not isinstance(parameters, dict):
        raise _refuse(f"'{param}.parameters' must be a JSON Schema object", f"{param}.parameters")
    strict = function.get("strict") or False
    if not isinstance(strict, bool):
        raise _refuse(f"'{param}.strict' must be a boolean", f"{param}.strict")
    text = json.dumps(parameters, separators=(",", ":"), ensure_ascii=False) if parameters else ""
    return ToolDefinition(name, description, text, strict)


def _choice(value: Any, names: set[str]) -> tuple[ToolChoice, str]:
    if value is None:
        return (ToolChoice.AUTO, "")
    if isinstance(value, str) and value in CHOICES:
        choice = CHOICES[value]
        if choice is ToolChoice.REQUIRED and not names:
            raise _refuse("'tool_choice' is 'required' but no tools were given", "tool_choice")
        return (choice, "")
    function = value.get("function") if isinstance(value, dict) else None
    name = function.get("name") if isinstance(function, dict) else None
    if not isinstance(value, dict) or value.get("type") != "function" or not isinstance(name, str):
        raise _refuse(
            "'tool_choice' must be auto, none, required or "
            '{"type": "function", "function": {"name": ...}}',
            "tool_choice",
        )
    if name not in names:
        raise _refuse(f"'tool_choice' names {name!r}, which is not among the tools", "tool_choice")
    return (ToolChoice.NAMED, name)


def with_tools(options: AnswerOptions, body: dict[str, Any]) -> AnswerOptions:
    """options with the body's tools, tool_choice and parallel_tool_calls applied."""
    tools = body.get("tools") or []
    if not isinstance(tools, list) or len(tools) > MAX_TOOLS:
        raise _refuse(f"'tools' must be a list of at most {MAX_TOOLS} functions", "tools")
    definitions = tuple(_definition(tool, i) for i, tool in enumerate(tools))
    names = {d.name for d in definitions}
    if len(names) != len(definitions):
        raise _refuse("each tool needs a name of its own", "tools")
    choice, name = _choice(body.get("tool_choice"), names)
    parallel = body.get("parallel_tool_calls")
    if parallel is not None and not isinstance(parallel, bool):
        raise _refuse("'parallel_tool_calls' must be a boolean", "parallel_tool_calls")
    return replace(
        options,
        tools=definitions,
        tool_choice=choice,
        tool_choice_name=name,
        parallel_tool_calls=parallel is not False,
    )


def _call(call: Any, param: str) -> ToolCall:
    function = call.get("function") if isinstance(call, dict) else None
    if not isinstance(function, dict) or call.get("type", "function") != "function":
        raise _refuse(f"'{param}' must be a function call", param)
    call_id, name, arguments = call.get("id"), function.get("name"), function.get("arguments")
    if not (isinstance(call_id, str) and call_id and isinstance(name, str) and name) or not (
        isinstance(arguments, str)
    ):
        raise _refuse(f"'{param}' needs a string id, function.name and function.arguments", param)
    return ToolCall(call_id, name, arguments)


def calls_of(message: dict[str, Any], index: int) -> tuple[ToolCall, ...]:
    """An assistant message's tool calls, as the client sends its history back."""
    calls = message.get("tool_calls")
    if calls is None:
        return ()
    param = f"messages[{index}].tool_calls"
    if message.get("role") != "assistant" or not isinstance(calls, list):
        raise _refuse(f"'{param}' must be a list on an assistant message", param)
    return tuple(_call(call, f"{param}[{i}]") for i, call in enumerate(calls))


def call_id_of(message: dict[str, Any], index: int) -> str:
    """A tool message's tool_call_id: which call its content answers."""
    call_id = message.get("tool_call_id")
    if not isinstance(call_id, str) or not call_id:
        param = f"messages[{index}].tool_call_id"
        raise _refuse(f"a tool message needs its '{param}'", param)
    return call_id


def call_json(call: ToolCall, index: int | None = None) -> dict[str, Any]:
    """One call as OpenAI writes it: in a message (no index) or in a stream's delta."""
    shaped: dict[str, Any] = {
        "id": call.call_id,
        "type": "function",
        "function": {"name": call.name, "arguments": call.arguments},
    }
    return shaped if index is None else {"index": index, **shaped}
