"""A Responses API response with platform tools, in OpenAI's objects and stream events: the
listings of the MCP servers (`mcp_list_tools` items), each call the platform ran (`mcp_call`
items; the operator's own tools as `<name>_call` items, as OpenAI names its hosted tools'),
then the message. Pure conversion: no I/O.

Such a response is not stored (tools run with `store: false`), so it is never resumed: its
stream events are numbered as they come, not computed from the platform's event ids as a
stored response's are (edge/responses_convert.py)."""

from __future__ import annotations

import json
from typing import Any

from chat.v1 import chat_service_pb2 as pb
from edge.failures import user_message_of_code
from edge.responses_convert import (
    ENDING_EVENT,
    Event,
    EventTranslator,
    ResponseState,
    finish,
    item_id,
)
from edge.responses_functions import call_item as function_call_item
from edge.responses_tool_input import PlatformToolAsk


class ResponseTranslator:
    """A response's events, numbered as their answer's meta event says: a tool loop's as they
    come (ToolEventTranslator), any other's computed from the event ids (EventTranslator). The
    meta event decides, not the request, so a resume of a stored response, which knows
    nothing of the request's tools, numbers its events as the first stream did."""

    def __init__(self, state: ResponseState) -> None:
        self.state = state
        self._chosen: EventTranslator | ToolEventTranslator | None = None

    def feed(self, event: pb.ChatEvent) -> list[Event]:
        if self._chosen is None:
            looped = event.WhichOneof("kind") == "meta" and event.meta.platform_tools
            self.state.tool_loop = looped
            # Functions' calls are items before any message, numbered as they come too (a
            # response with functions is not stored, so never resumed).
            looped = looped or self.state.functions
            self._chosen = (
                ToolEventTranslator(self.state) if looped else EventTranslator(self.state)
            )
        return self._chosen.feed(event)


def translator(state: ResponseState) -> ResponseTranslator:
    return ResponseTranslator(state)


def _short_id(prefix: str, text: str) -> str:
    return prefix + "".join(c if c.isalnum() else "_" for c in text)[:48]


def list_item(state: ResponseState, listed: pb.ToolsListedEvent) -> dict[str, Any]:
    index = len(state.tool_items)
    tools = [{"name": t.name, "description": t.description or None,
              "input_schema": json.loads(t.parameters) if t.parameters else {},
              "annotations": None} for t in listed.tools]  # fmt: skip
    return {"id": _short_id("mcpl_", f"{state.response_id}_{index}"), "type": "mcp_list_tools",
            "server_label": listed.server_label or "platform", "tools": tools,
            "error": listed.error or None}  # fmt: skip


def call_item(call: pb.ToolCallEvent) -> dict[str, Any]:
    if call.server_label:
        return {"id": _short_id("mcp_", call.call_id), "type": "mcp_call",
                "status": "in_progress", "server_label": call.server_label, "name": call.name,
                "arguments": call.arguments, "output": None, "error": None,
                "approval_request_id": None}  # fmt: skip
    return {"id": _short_id("call_", call.call_id), "type": f"{call.name}_call",
            "status": "in_progress", "name": call.name, "arguments": call.arguments,
            "output": None, "error": None}  # fmt: skip


def result_fields(result: pb.ToolResultEvent) -> dict[str, Any]:
    if result.error:
        return {"status": "failed", "output": None, "error": result.error}
    return {"status": "completed", "output": result.output, "error": None}


def event_prefix(item: dict[str, Any]) -> str:
    """response.mcp_call for an MCP call, response.<name>_call for the operator's tools."""
    return f"response.{item['type']}"


def text_event(state: ResponseState, **extra: Any) -> dict[str, Any]:
    return {"item_id": item_id(state.response_id), "output_index": len(state.tool_items),
            "content_index": 0, **extra, "logprobs": []}  # fmt: skip


class ToolEventTranslator:
    """A response with platform tools: its events are numbered as they come (such a response
    is not stored, so it is never resumed), and its output holds the tools' items before the
    message, which opens at the answer's first text."""

    def __init__(self, state: ResponseState) -> None:
        self.state = state
        self._seq = 0
        self._calls: dict[str, int] = {}  # call id -> the index of its item

    def _events(self, *named: tuple[str, dict[str, Any]]) -> list[Event]:
        events = [(self._seq + i, name, payload) for i, (name, payload) in enumerate(named)]
        self._seq += len(events)
        return events

    def feed(self, event: pb.ChatEvent) -> list[Event]:
        kind = event.WhichOneof("kind")
        state = self.state
        if kind == "meta":
            state.model = event.meta.model or state.model
            body = state.body()
            return self._events(("response.created", {"response": body}),
                                ("response.in_progress", {"response": body}))  # fmt: skip
        if kind == "tools_listed":
            return self._listed(event.tools_listed)
        if kind == "tool_call":
            return self._called(event.tool_call)
        if kind == "tool_result":
            return self._answered(event.tool_result)
        if kind == "approval_request":
            return self._approval_asked(event.approval_request)
        if kind == "delta" and event.delta.tool_calls:
            return self._functions_called(event.delta)
        if kind == "delta":
            opening = self._open_message()
            state.text += event.delta.text
            text = text_event(state, delta=event.delta.text)
            return opening + self._events(("response.output_text.delta", text))
        if kind == "done":
            finish(state, event.done)
            return self._closing()
        if kind == "error":
            state.status = "failed"
            message = user_message_of_code(event.error.code, event.error.message)
            state.error = {"code": "server_error", "message": message}
            return self._events(("response.failed", {"response": state.body()}))
        return []

    def _listed(self, listed: pb.ToolsListedEvent) -> list[Event]:
        item = list_item(self.state, listed)
        index = len(self.state.tool_items)
        self.state.tool_items.append(item)
        ended = "response.mcp_list_tools.failed" if listed.error else \
            "response.mcp_list_tools.completed"  # fmt: skip
        at = {"output_index": index, "item_id": item["id"]}
        placed = {"output_index": index, "item": item}
        return self._events(("response.output_item.added", placed),
                            ("response.mcp_list_tools.in_progress", at), (ended, at),
                            ("response.output_item.done", placed))  # fmt: skip

    def _called(self, call: pb.ToolCallEvent) -> list[Event]:
        item = call_item(call)
        index = len(self.state.tool_items)
        self._calls[call.call_id] = index
        self.state.tool_items.append(item)
        prefix = event_prefix(item)
        at = {"output_index": index, "item_id": item["id"]}
        return self._events(
            ("response.output_item.added", {"output_index": index, "item": dict(item)}),
            (f"{prefix}.in_progress", at),
            (f"{prefix}_arguments.done", {**at, "arguments": call.arguments}),
        )

    def _answered(self, result: pb.ToolResultEvent) -> list[Event]:
        index = self._calls.get(result.call_id)
        if index is None:
            return []
        item = self.state.tool_items[index]
        item.update(result_fields(result))
        prefix = event_prefix(item)
        at = {"output_index": index, "item_id": item["id"]}
        ended = f"{prefix}.failed" if result.error else f"{prefix}.completed"
        placed = {"output_index": index, "item": item}
        return self._events((ended, at), ("response.output_item.done", placed))

    def _functions_called(self, delta: pb.DeltaEvent) -> list[Event]:
        """The model's calls of the caller's functions, each a function_call item whose
        arguments come whole (the engine's parser gives whole calls)."""
        events: list[Event] = []
        self.state.functions_called = True
        for call in delta.tool_calls:
            item = function_call_item(call)
            index = len(self.state.tool_items)
            self.state.tool_items.append(item)
            at = {"output_index": index, "item_id": item["id"]}
            placed = {"output_index": index, "item": item}
            events += self._events(
                ("response.output_item.added",
                 {"output_index": index, "item": {**item, "status": "in_progress",
                                                  "arguments": ""}}),
                ("response.function_call_arguments.delta", {**at, "delta": call.arguments}),
                ("response.function_call_arguments.done", {**at, "arguments": call.arguments}),
                ("response.output_item.done", placed),
            )  # fmt: skip
        return events

    def _approval_asked(self, asked: pb.ToolApprovalRequestEvent) -> list[Event]:
        """A call waiting for a person: the item whose id the approval answers. The response
        ends without a message (unless the model wrote text before its calls)."""
        item = {"id": asked.call_id, "type": "mcp_approval_request",
                "server_label": asked.server_label or asked.name, "name": asked.name,
                "arguments": asked.arguments}  # fmt: skip
        index = len(self.state.tool_items)
        self.state.tool_items.append(item)
        self.state.awaiting_approval = True
        placed = {"output_index": index, "item": item}
        return self._events(("response.output_item.added", placed),
                            ("response.output_item.done", placed))  # fmt: skip

    def _open_message(self) -> list[Event]:
        state = self.state
        if state.message_opened:
            return []
        state.message_opened = True
        index = len(state.tool_items)
        return self._events(
            ("response.output_item.added",
             {"output_index": index, "item": state.item("in_progress")}),
            ("response.content_part.added",
             {"item_id": item_id(state.response_id), "output_index": index,
              "content_index": 0, "part": {**state.part(), "text": ""}}),
        )  # fmt: skip

    def _closing(self) -> list[Event]:
        state = self.state
        ends_on_calls = state.awaiting_approval or state.functions_called
        if not state.text and (state.status != "completed" or ends_on_calls):
            return self._events((ENDING_EVENT[state.status], {"response": state.body()}))
        opening = self._open_message()
        index = len(state.tool_items)
        text_done = text_event(state, text=state.text)
        return opening + self._events(
            ("response.output_text.done", text_done),
            ("response.content_part.done",
             {"item_id": item_id(state.response_id), "output_index": index,
              "content_index": 0, "part": state.part()}),
            ("response.output_item.done",
             {"output_index": index, "item": state.item(state.item_status())}),
            (ENDING_EVENT[state.status], {"response": state.body()}),
        )  # fmt: skip


def platform_tools_pb(tools: tuple[PlatformToolAsk, ...]) -> list[pb.PlatformTool]:
    return [
        pb.PlatformTool(server_label=t.server_label, server_url=t.server_url,
                        headers=dict(t.headers), allowed_tools=t.allowed_tools, name=t.name,
                        require_approval=t.require_approval,
                        approval_exceptions=t.approval_exceptions)
        for t in tools
    ]  # fmt: skip


def approvals_pb(approvals: tuple[tuple[str, bool], ...]) -> list[pb.ToolApproval]:
    return [pb.ToolApproval(call_id=call_id, approve=approve) for call_id, approve in approvals]


def _approval_json(tool: PlatformToolAsk) -> Any:
    way, other = ("always", "never") if tool.require_approval else ("never", "always")
    if not tool.approval_exceptions:
        return way
    return {other: {"tool_names": list(tool.approval_exceptions)}}


def tools_json(tools: tuple[PlatformToolAsk, ...]) -> list[dict[str, Any]]:
    """The tools as the response object echoes them (headers left out: they may hold keys)."""
    echoed: list[dict[str, Any]] = []
    for tool in tools:
        if tool.name:
            echoed.append({"type": tool.name, "require_approval": _approval_json(tool)})
            continue
        allowed = list(tool.allowed_tools) or None
        echoed.append({"type": "mcp", "server_label": tool.server_label,
                       "server_url": tool.server_url or None, "allowed_tools": allowed,
                       "headers": None, "require_approval": _approval_json(tool)})  # fmt: skip
    return echoed
