"""Server-sent events: how one ChatEvent is written on the wire."""

from __future__ import annotations

import asyncio
import contextlib
import json
from json.encoder import encode_basestring

from aiohttp import web
from google.protobuf import json_format

from chat.v1 import chat_service_pb2 as pb
from edge.convert import FINISH_NAMES


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
        return "error", {"code": event.error.code, "message": event.error.message}
    return "error", {"code": 2, "message": "unknown event " + json_format.MessageToJson(event)}


def encode(event: pb.ChatEvent) -> bytes:
    if event.HasField("delta"):
        # Nearly every event is a delta: its JSON written directly, the same bytes json.dumps
        # writes below, at a fraction of the cost (a dict and an encoder per event).
        text = encode_basestring(event.delta.text)
        return f'id: {event.event_id}\nevent: delta\ndata: {{"text":{text}}}\n\n'.encode()
    name, payload = event_payload(event)
    data = json.dumps(payload, separators=(",", ":"), ensure_ascii=False)
    return f"id: {event.event_id}\nevent: {name}\ndata: {data}\n\n".encode()


KEEPALIVE = b": keep-alive\n\n"
STREAM_HEADERS = {
    "Content-Type": "text/event-stream",
    "Cache-Control": "no-cache",
    # Proxies (nginx) would otherwise buffer the stream and the answer would arrive at once.
    "X-Accel-Buffering": "no",
}


class KeepAlive:
    """Writes a keep-alive comment whenever interval_s passes without a write, so proxies and
    clients keep a stream open while the model is silent. It runs as a task of its own beside
    the relay: relaying an event then costs one timestamp, not a timer per event."""

    def __init__(self, response: web.StreamResponse, interval_s: float) -> None:
        self._response = response
        self._interval_s = interval_s
        self._loop = asyncio.get_running_loop()
        self._last_write = self._loop.time()
        self._task: asyncio.Task[None] | None = None

    def wrote(self) -> None:
        self._last_write = self._loop.time()

    async def __aenter__(self) -> KeepAlive:
        self._task = asyncio.create_task(self._run())
        return self

    async def __aexit__(self, *_: object) -> None:
        if self._task is not None:
            self._task.cancel()
            # A write that failed here failed for the relay too; the relay reports it.
            with contextlib.suppress(asyncio.CancelledError, ConnectionError, OSError):
                await self._task

    async def _run(self) -> None:
        while True:
            idle_s = self._loop.time() - self._last_write
            if idle_s < self._interval_s:
                await asyncio.sleep(self._interval_s - idle_s)
                continue
            await self._response.write(KEEPALIVE)
            self.wrote()
