"""The OpenAI-compatible API's replies: a whole `chat.completion`, or a stream's
`chat.completion.chunk` objects, in OpenAI's shapes, tool calls and refusals included."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from chat.v1 import chat_service_pb2 as pb
from edge import openai_tools
from edge.convert import FINISH_ERROR, OPENAI_FINISH
from edge.failures import user_message_of_code
from edge.metrics import EdgeMetrics
from infra.convert import tool_call_from_pb


def usage_of(done: pb.DoneEvent) -> dict[str, Any]:
    u = done.usage
    return {
        "prompt_tokens": u.input_tokens,
        "completion_tokens": u.output_tokens,
        "total_tokens": u.input_tokens + u.output_tokens,
        "prompt_tokens_details": {"cached_tokens": u.cached_tokens},
    }


def fingerprint(meta: pb.MetaEvent) -> str:
    """OpenAI's system_fingerprint names the backend configuration an answer ran on: here the
    model version (engine model, system prompt, sampling) and the replica, `version@replica`
    (the replica alone for an answer no version wrote; X-Replica carries the replica too)."""
    return f"{meta.version}@{meta.replica_id}" if meta.version else meta.replica_id


class ChunkWriter:
    """Writes chat.completion.chunk objects of one completion as `data:` lines."""

    def __init__(self, response: web.StreamResponse, meta: pb.MetaEvent, metrics: EdgeMetrics):
        self._response = response
        self._metrics = metrics
        self._head = {
            "id": meta.message_id,
            "object": "chat.completion.chunk",
            "created": int(time.time()),
            "model": meta.model,
            "system_fingerprint": fingerprint(meta),
        }
        # Tool calls were written: a stop is OpenAI's "tool_calls" finish.
        self.called = 0
        # The platform's refusal was written apart (OpenAI's `refusal`), as OpenAI does for a
        # structured answer: the finish is then "stop", which the SDK's parse() reads.
        self.refused = False

    async def data(self, payload: dict[str, Any]) -> None:
        line = json.dumps(payload, separators=(",", ":"), ensure_ascii=False)
        await self._response.write(f"data: {line}\n\n".encode())
        self._metrics.events.inc()

    async def choice(self, delta: dict[str, Any], finish: str | None = None) -> None:
        choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
        await self.data({**self._head, "choices": [choice]})

    async def usage(self, done: pb.DoneEvent) -> None:
        await self.data({**self._head, "choices": [], "usage": usage_of(done)})

    async def error(self, code: int, message: str) -> None:
        # The openai SDK raises an APIError for a chunk that carries "error".
        await self.data(
            {
                "error": {
                    "message": message,
                    "type": "server_error",
                    "param": None,
                    "code": str(code),
                }
            }
        )


@dataclass(slots=True)
class WholeAnswer:
    """A non-streaming completion's parts as they come: its text, the platform's refusal
    (kept apart when the caller asked for JSON or tools), its tool calls."""

    texts: list[str] = field(default_factory=list)
    refusals: list[str] = field(default_factory=list)
    calls: list[dict[str, Any]] = field(default_factory=list)

    def add(self, delta: pb.DeltaEvent) -> None:
        (self.refusals if delta.refusal else self.texts).append(delta.text)
        self.calls.extend(openai_tools.call_json(tool_call_from_pb(c)) for c in delta.tool_calls)

    def message(self) -> dict[str, Any]:
        text = "".join(self.texts)
        message: dict[str, Any] = {"role": "assistant", "content": text, "refusal": None}
        if self.refusals:
            # A refused JSON answer has no document: OpenAI's content is then null.
            message.update(content=None, refusal="".join(self.refusals))
        if self.calls:
            message.update(content=text or None, tool_calls=self.calls)
        return message


def finish_of(done: pb.DoneEvent, called: bool, refused_apart: bool = False) -> str:
    """OpenAI's finish_reason: "tool_calls" after calls; a refusal given in the `refusal` field
    ends with "stop" (OpenAI's own structured-output refusals do), one given as the content
    with "content_filter"."""
    if refused_apart:
        return "stop"
    finish = OPENAI_FINISH.get(done.finish, "stop")
    return "tool_calls" if called and finish == "stop" else finish


def completion_body(meta: pb.MetaEvent, answer: WholeAnswer, done: pb.DoneEvent) -> dict[str, Any]:
    message = answer.message()
    finish = finish_of(done, bool(answer.calls), bool(answer.refusals))
    return {
        "id": meta.message_id,
        "object": "chat.completion",
        "created": int(time.time()),
        "model": meta.model,
        "system_fingerprint": fingerprint(meta),
        "choices": [{"index": 0, "message": message, "logprobs": None, "finish_reason": finish}],
        "usage": usage_of(done),
    }


async def write_event(writer: ChunkWriter, event: pb.ChatEvent, usage: bool) -> bool:
    """Writes one event as OpenAI chunks; True when it was the last. A meta event writes
    nothing: each caller opens its stream its own way."""
    kind = event.WhichOneof("kind")
    if kind == "delta":
        await _write_delta(writer, event.delta)
        return False
    if kind == "error":
        await writer.error(
            event.error.code, user_message_of_code(event.error.code, event.error.message)
        )
        return True
    if kind != "done":
        return False
    if event.done.finish == FINISH_ERROR:
        await writer.error(13, "the model failed while answering")
        return True
    await writer.choice({}, finish_of(event.done, bool(writer.called), writer.refused))
    if usage:
        await writer.usage(event.done)
    return True


async def _write_delta(writer: ChunkWriter, delta: pb.DeltaEvent) -> None:
    if delta.tool_calls:
        calls = [
            openai_tools.call_json(tool_call_from_pb(call), writer.called + index)
            for index, call in enumerate(delta.tool_calls)
        ]
        writer.called += len(calls)
        await writer.choice({"tool_calls": calls})
    if delta.text:
        writer.refused = writer.refused or delta.refusal
        await writer.choice({"refusal" if delta.refusal else "content": delta.text})
