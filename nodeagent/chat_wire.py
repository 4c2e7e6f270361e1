"""What llama-server and vLLM share: both speak OpenAI's chat-completions API, so a request's
messages, sampling, JSON answer and tools are written to them alike (a citation grammar goes
in a field of each engine's own, nodeagent/citation_grammar.py), and both stream the tool
calls they parse (llama-server from its chat template's tool support, vLLM with its tool
parser) as OpenAI's `tool_calls` deltas, which are assembled here into whole calls."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from domain.answer_options import AnswerOptions, ToolCall, ToolChoice
from domain.types import Finish
from nodeagent import citation_grammar, forced_calls
from nodeagent.engine import EngineError, GenerationRequest, PromptTurn


def _message(turn: PromptTurn) -> dict[str, Any]:
    message: dict[str, Any] = {"role": turn.role.value, "content": turn.text}
    if turn.tool_calls:
        message["tool_calls"] = [
            {
                "id": call.call_id,
                "type": "function",
                "function": {"name": call.name, "arguments": call.arguments},
            }
            for call in turn.tool_calls
        ]
    if turn.tool_call_id:
        message["tool_call_id"] = turn.tool_call_id
    return message


def messages(turns: Sequence[PromptTurn]) -> list[dict[str, Any]]:
    return [_message(turn) for turn in turns]


def _response_format(options: AnswerOptions) -> dict[str, Any] | None:
    if options.json_schema:
        schema = json.loads(options.json_schema)
        return {
            "type": "json_schema",
            "json_schema": {"name": "answer", "schema": schema, "strict": True},
        }
    if options.json_object:
        return {"type": "json_object"}
    return None


def _tools(options: AnswerOptions) -> dict[str, Any]:
    if not options.tools:
        return {}
    tools = []
    for tool in options.tools:
        function: dict[str, Any] = {"name": tool.name, "description": tool.description}
        function["parameters"] = json.loads(tool.parameters) if tool.parameters else {}
        if tool.strict:
            function["strict"] = True
        tools.append({"type": "function", "function": function})
    choice: Any = options.tool_choice.value
    if options.tool_choice is ToolChoice.NAMED:
        choice = {"type": "function", "function": {"name": options.tool_choice_name}}
    return {
        "tools": tools,
        "tool_choice": choice,
        "parallel_tool_calls": options.parallel_tool_calls,
    }


def option_fields(
    options: AnswerOptions,
    engine: citation_grammar.Engine = citation_grammar.Engine.LLAMA_SERVER,
) -> dict[str, Any]:
    """The request's fields beyond the messages and the temperature; none when plain. A call
    the options force is decoded under its tools' schema (nodeagent/forced_calls.py); an
    answer that may cite only given ids under a grammar in the engine's own field."""
    fields: dict[str, Any] = {
        name: value
        for name, value in (
            ("top_p", options.top_p),
            ("seed", options.seed),
            ("frequency_penalty", options.frequency_penalty),
            ("presence_penalty", options.presence_penalty),
        )
        if value is not None
    }
    if options.stop:
        fields["stop"] = list(options.stop)
    response_format = _response_format(options)
    if response_format is not None:
        fields["response_format"] = response_format
    fields.update(_tools(options))
    fields = citation_grammar.request_fields(fields, options, engine)
    return forced_calls.request_fields(fields, options)


def call_id(request_id: str, index: int) -> str:
    """An id for a call the engine named none for, unique to the request."""
    return f"call_{index}_{request_id[-8:]}"


@dataclass(slots=True)
class _Partial:
    call_id: str = ""
    name: str = ""
    arguments: list[str] = field(default_factory=list)


@dataclass(slots=True)
class ToolCallAssembler:
    """Joins a stream's tool_calls deltas (by index: the id and name come once, the arguments
    in pieces) into whole calls; or, for a request that forces a call, keeps the text the
    engine decoded under the tools' schema (nodeagent/forced_calls.py), which becomes the call.
    """

    request: GenerationRequest
    partials: dict[int, _Partial] = field(default_factory=dict)
    # The forced call's document; None when the request forces no call.
    document: list[str] | None = None

    def __post_init__(self) -> None:
        if forced_calls.forces_call(self.request.options):
            self.document = []

    def shown(self, text: str) -> str:
        """What of the engine's text goes out as the answer's: none of a forced call's
        document. The caller still sends an empty chunk per token, so the node and the gateway
        see the engine at work (their stall timeouts) while nothing is shown."""
        if self.document is None:
            return text
        self.document.append(text)
        return ""

    def feed(self, delta: Mapping[str, Any]) -> None:
        for piece in delta.get("tool_calls") or ():
            if not isinstance(piece, dict):
                continue
            partial = self.partials.setdefault(int(piece.get("index", 0)), _Partial())
            partial.call_id = piece.get("id") or partial.call_id
            function = piece.get("function") or {}
            partial.name = function.get("name") or partial.name
            partial.arguments.append(function.get("arguments") or "")

    def calls(self, finish: Finish) -> tuple[ToolCall, ...]:
        """The whole calls; an engine that names no id gets one made from the request's. A
        forced call's document that is not a call the schema allows fails the request rather
        than answer in prose."""
        request_id = self.request.request_id
        if self.document is not None:
            try:
                return forced_calls.finished_calls(
                    "".join(self.document), finish, self.request.options, call_id(request_id, 0)
                )
            except forced_calls.NotACall as error:
                raise EngineError(str(error)) from error
        return tuple(
            ToolCall(p.call_id or call_id(request_id, index), p.name, "".join(p.arguments))
            for index, p in sorted(self.partials.items())
        )
