"""Server-sent events: how one ChatEvent is written on the wire."""

from __future__ import annotations

import asyncio
import json
from json.encoder import encode_basestring

from aiohttp import web
from google.protobuf import json_format

from chat.v1 import chat_service_pb2 as pb
from edge.convert import FINISH_NAMES
from edge.failures import user_message_of_code


def event_payload(event: pb.ChatEvent) -> tuple[str, dict[str, object]]:
    kind = event.WhichOneof("kind")
    if kind == "meta":
        m = event.meta
        return "meta", {
            "messageId": m.message_id,
            "conversationId": m.conversation_id,
            "model": m.model,
            "replica": m.replica_id,
            "region": m.region,
            "regionNotice": m.region_notice,
            # The model version that serves (its prompt and sampling); "downgraded" says why
            # the answer runs on a smaller pool than chosen ("daily_budget"), "" when not.
            "version": m.version,
            "downgraded": m.downgraded,
            "slice": m.slice,
            # The pool that serves, and why it is not the one asked for ("tier", "allowance",
            # "ladder", "fallback", "router"), "" when it is (gateway: domain/pool_reason.py).
            "pool": m.pool,
            "poolReason": m.pool_reason,
        }
    if kind == "delta":
        return "delta", {"text": event.delta.text}
    if kind == "retract":
        # Remove all of this answer's text shown so far; the refusal follows as a delta.
        return "retract", {"withdrawnChars": event.retract.withdrawn_chars}
    if kind == "done":
        u = event.done.usage
        return "done", {
            "finish": FINISH_NAMES.get(event.done.finish, "error"),
            "usage": {
                "input": u.input_tokens,
                "cached": u.cached_tokens,
                "output": u.output_tokens,
            },
        }
    if kind == "error":
        message = user_message_of_code(event.error.code, event.error.message)
        return "error", {"code": event.error.code, "message": message}
    if kind in TOOL_EVENTS:
        return TOOL_EVENTS[kind](event)
    return "error", {"code": 2, "message": "unknown event " + json_format.MessageToJson(event)}


def _tools_listed(event: pb.ChatEvent) -> tuple[str, dict[str, object]]:
    listed = event.tools_listed
    tools = [{"name": t.name, "description": t.description,
              "parameters": json.loads(t.parameters) if t.parameters else {}}
             for t in listed.tools]  # fmt: skip
    return "toolsListed", {"server": listed.server_label, "tools": tools, "error": listed.error}


def _tool_call(event: pb.ChatEvent) -> tuple[str, dict[str, object]]:
    call = event.tool_call
    return "toolCall", {"callId": call.call_id, "server": call.server_label, "name": call.name,
                        "arguments": call.arguments}  # fmt: skip


def _tool_result(event: pb.ChatEvent) -> tuple[str, dict[str, object]]:
    result = event.tool_result
    return "toolResult", {"callId": result.call_id, "output": result.output,
                          "error": result.error}  # fmt: skip


def _approval_request(event: pb.ChatEvent) -> tuple[str, dict[str, object]]:
    asked = event.approval_request
    return "approvalRequest", {"callId": asked.call_id, "server": asked.server_label,
                               "name": asked.name, "arguments": asked.arguments}  # fmt: skip


# The tool loop's events (a message with platform tools), named in the API's camelCase.
TOOL_EVENTS = {
    "tools_listed": _tools_listed,
    "tool_call": _tool_call,
    "tool_result": _tool_result,
    "approval_request": _approval_request,
}


def encode(event: pb.ChatEvent) -> bytes:
    if event.HasField("delta"):
        # Nearly every event is a delta: its JSON written directly, the same bytes json.dumps
        # writes below, at a fraction of the cost (a dict and an encoder per event).
        text = encode_basestring(event.delta.text)
        return f'id: {event.event_id}\nevent: delta\ndata: {{"text":{text}}}\n\n'.encode()
    name, payload = event_payload(event)
    data = json.dumps(payload, separators=(",", ":"), ensure_ascii=False)
    return f"id: {event.event_id}\nevent: {name}\ndata: {data}\n\n".encode()


# A comment line alone, with no blank line after it: the blank line would end an event, and a
# reader that keeps the last `id:` across events (the openai SDK's decoder, as the SSE spec
# says) then dispatches an event with empty data, which that SDK parses as JSON and fails on.
# A comment is written between whole events only (each event is one write), so every reader
# skips it as part of the next event or of none.
KEEPALIVE = b": keep-alive\n"
STREAM_HEADERS = {
    "Content-Type": "text/event-stream",
    "Cache-Control": "no-cache",
    # Proxies (nginx) would otherwise buffer the stream and the answer would arrive at once.
    "X-Accel-Buffering": "no",
}


class KeepAlives:
    """Keep-alive comments for every open stream of one edge process, so proxies and clients
    keep a stream open while the model is silent: a stream that wrote nothing for interval_s
    gets one. One task serves them all, ticking TICKS times an interval while any stream is
    open and not at all otherwise; a task and its timer per stream were ~2 KB and a wake-up
    each, of the 10,000 idle streams an edge holds. Relaying an event costs one timestamp."""

    TICKS = 4

    def __init__(self, interval_s: float) -> None:
        if interval_s <= 0:
            raise ValueError("the keep-alive interval must be positive")
        self.interval_s = interval_s
        self._streams: set[KeepAlive] = set()
        self._ticker: asyncio.Task[None] | None = None
        # Keep-alive writes in flight: one slow client must not hold the others' back.
        self._writes: set[asyncio.Task[None]] = set()

    def watch(self, response: web.StreamResponse) -> KeepAlive:
        """`async with keepalives.watch(response) as keepalive:`, calling keepalive.wrote()
        after each write of the stream's own."""
        return KeepAlive(self, response)

    def __len__(self) -> int:
        return len(self._streams)

    def opened(self, stream: KeepAlive) -> None:
        self._streams.add(stream)
        if self._ticker is None or self._ticker.done():
            self._ticker = asyncio.create_task(self._tick(), name="sse-keepalives")

    def closed(self, stream: KeepAlive) -> None:
        self._streams.discard(stream)

    async def _tick(self) -> None:
        loop = asyncio.get_running_loop()
        while self._streams:
            await asyncio.sleep(self.interval_s / self.TICKS)
            silent_since = loop.time() - self.interval_s
            for stream in self._streams:
                if stream.last_write <= silent_since and not stream.writing:
                    stream.writing = True
                    write = asyncio.create_task(stream.keep_alive())
                    self._writes.add(write)
                    write.add_done_callback(self._writes.discard)


class KeepAlive:
    """One stream's place in its KeepAlives: when it last wrote."""

    __slots__ = ("_owner", "_response", "last_write", "writing")

    def __init__(self, owner: KeepAlives, response: web.StreamResponse) -> None:
        self._owner = owner
        self._response = response
        self.last_write = asyncio.get_running_loop().time()
        self.writing = False

    def wrote(self) -> None:
        self.last_write = asyncio.get_running_loop().time()

    async def keep_alive(self) -> None:
        try:
            await self._response.write(KEEPALIVE)
            self.wrote()
        except (ConnectionError, OSError, RuntimeError):
            # The client is gone (RuntimeError: aiohttp's "connection lost" once the response
            # is closed): the stream's own write or its cancellation ends it.
            self._owner.closed(self)
        finally:
            self.writing = False

    async def __aenter__(self) -> KeepAlive:
        self._owner.opened(self)
        return self

    async def __aexit__(self, *_: object) -> None:
        self._owner.closed(self)
