"""Function tools in the Responses API, which the caller runs (OpenAI's `{"type":
"function", "name", "description", "parameters", "strict"}`): the request's functions and
`tool_choice`, the `function_call` / `function_call_output` items an earlier response's input
carries back, and the calls a model made, written as `function_call` output items.

The gateway decodes them as it does the chat completions' (nodeagent/forced_calls.py for a
required or named choice), so here they are only checked and shaped. They are served with
`store: false`: a stored conversation keeps messages, not calls, so a call's result could not
be carried into its next turn."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from chat.v1 import common_pb2
from domain.answer_options import ToolCall, ToolChoice, ToolDefinition
from edge.convert import CallerTurn
from edge.openai_errors import OpenAIError
from edge.openai_tools import MAX_TOOLS, function_definition

FUNCTION_FIELDS = frozenset({"type", "name", "description", "parameters", "strict"})
CALL_ITEM = "function_call"
OUTPUT_ITEM = "function_call_output"
CHOICES = {"auto": ToolChoice.AUTO, "none": ToolChoice.NONE, "required": ToolChoice.REQUIRED}


def bad(param: str, message: str) -> OpenAIError:
    return OpenAIError(400, message, None, param)


@dataclass(frozen=True, slots=True)
class Functions:
    tools: tuple[ToolDefinition, ...] = ()
    choice: ToolChoice = ToolChoice.AUTO
    choice_name: str = ""


def parse_functions(body: dict[str, Any]) -> Functions:
    """The body's function tools and its tool_choice. Other tools' types are left to
    edge/responses_tool_input.py (the platform's); a choice beyond auto and none needs
    functions to choose from."""
    raw = body.get("tools")
    functions: list[ToolDefinition] = []
    if isinstance(raw, list):
        for index, tool in enumerate(raw):
            if isinstance(tool, dict) and tool.get("type") == "function":
                functions.append(_function(tool, f"tools[{index}]"))
    if len(functions) > MAX_TOOLS:
        raise bad("tools", f"'tools' may hold at most {MAX_TOOLS} functions")
    names = [f.name for f in functions]
    if len(names) != len(set(names)):
        raise bad("tools", "each function needs a name of its own")
    choice, name = _choice(body.get("tool_choice"), set(names))
    return Functions(tuple(functions), choice, name)


def _function(tool: dict[str, Any], param: str) -> ToolDefinition:
    unknown = sorted(set(tool) - FUNCTION_FIELDS)
    if unknown:
        raise bad(f"{param}.{unknown[0]}", f"'{param}.{unknown[0]}' is not a function field")
    return function_definition(tool, param)


def _choice(value: Any, names: set[str]) -> tuple[ToolChoice, str]:
    if value is None:
        return ToolChoice.AUTO, ""
    if isinstance(value, str) and value in CHOICES:
        if value == "required" and not names:
            raise bad("tool_choice", "'tool_choice' is 'required' but no function was given")
        return CHOICES[value], ""
    name = value.get("name") if isinstance(value, dict) else None
    if not isinstance(value, dict) or value.get("type") != "function" or not isinstance(name, str):
        raise bad("tool_choice", "'tool_choice' must be auto, none, required or "
                  '{"type": "function", "name": ...}')  # fmt: skip
    if name not in names:
        raise bad("tool_choice", f"'tool_choice' names {name[:64]!r}, which is not among the "
                  "functions")  # fmt: skip
    return ToolChoice.NAMED, name


def choice_json(functions: Functions) -> Any:
    """tool_choice as the response object echoes it."""
    if functions.choice is ToolChoice.NAMED:
        return {"type": "function", "name": functions.choice_name}
    return functions.choice.value


def is_function_item(item: Any) -> bool:
    return isinstance(item, dict) and item.get("type") in (CALL_ITEM, OUTPUT_ITEM)


def _text(item: dict[str, Any], key: str, param: str) -> str:
    value = item.get(key)
    if not isinstance(value, str) or not value:
        raise bad(f"{param}.{key}", f"'{param}.{key}' must be a non-empty string")
    return value


def function_turn(item: dict[str, Any], param: str, history: list[CallerTurn]) -> None:
    """Adds one item to the history: a call joins the assistant turn of the calls just
    before it (one model step's parallel calls are one turn), an output is a tool turn."""
    if item["type"] == OUTPUT_ITEM:
        output = item.get("output")
        if not isinstance(output, str):
            raise bad(f"{param}.output", f"'{param}.output' must be a string")
        history.append(CallerTurn("tool", output, tool_call_id=_text(item, "call_id", param)))
        return
    arguments = item.get("arguments", "{}")
    if not isinstance(arguments, str):
        raise bad(f"{param}.arguments", f"'{param}.arguments' must be a string")
    call = ToolCall(_text(item, "call_id", param), _text(item, "name", param), arguments)
    last = history[-1] if history else None
    if last is not None and last.role == "assistant" and last.tool_calls and not last.text:
        history[-1] = CallerTurn("assistant", "", (*last.tool_calls, call))
        return
    history.append(CallerTurn("assistant", "", (call,)))


def functions_json(functions: Functions) -> list[dict[str, Any]]:
    """The functions as the response object echoes them."""
    return [{"type": "function", "name": f.name, "description": f.description or None,
             "parameters": _parameters(f), "strict": f.strict}
            for f in functions.tools]  # fmt: skip


def _parameters(function: ToolDefinition) -> dict[str, Any] | None:
    return json.loads(function.parameters) if function.parameters else None


def call_item(call: common_pb2.ToolCall) -> dict[str, Any]:
    """A call the model made, as OpenAI writes it: the caller runs it and sends back a
    function_call_output item with the same call_id."""
    return {"id": "fc_" + "".join(c if c.isalnum() else "_" for c in call.id)[:48],
            "type": "function_call", "status": "completed", "call_id": call.id,
            "name": call.name, "arguments": call.arguments}  # fmt: skip
