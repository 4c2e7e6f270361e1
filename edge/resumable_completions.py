"""Chat completions that survive a drop, an extension of the OpenAI API: a streamed
`/v1/chat/completions` sent with `X-Resumable: true` runs on at the gateway when its client
goes, and `GET /v1/chat/completions/{id}/stream` with `Last-Event-ID` resumes it. Each chunk
carries an SSE `id:`, its answer event's id (the role chunk 1, each text chunk its delta's,
the finish and usage chunks the `done` event's), so a client resumes after the last one it
read, as with the conversation API's streams.

The completion's event log is kept by the gateway that runs it, while it runs and a while
after (as a message's): a resume reaches it at that gateway, and so, with several gateways,
only while the edge still sends its calls there (a completion is not shared through Redis)."""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator
from typing import Any

import grpc
from aiohttp import web

from chat.v1 import chat_service_pb2 as pb
from edge import sse
from edge.convert import attach_request, pool_headers
from edge.failures import failure_of
from edge.gateways import Gateways
from edge.metrics import EdgeMetrics
from edge.openai_api import (
    DONE_LINE,
    REPLICA_HEADER,
    RESUMABLE_KEY,
    ChunkWriter,
    Completion,
    OpenAIError,
    bearer,
    openai_errors,
)
from edge.openai_replies import write_event

COMPLETION_ID = re.compile(r"chatcmpl-[0-9a-f]{1,55}")
EVENT_ID = re.compile(r"[0-9]{1,18}")
Metadata = tuple[tuple[str, str], ...]


class NumberedChunks(ChunkWriter):
    """chat.completion.chunk lines, each with the id of the answer event it came from."""

    def __init__(self, response: web.StreamResponse, meta: pb.MetaEvent, metrics: EdgeMetrics):
        super().__init__(response, meta, metrics)
        self._out = response
        self._count = metrics
        self.event_id = 0

    async def data(self, payload: dict[str, Any]) -> None:
        line = json.dumps(payload, separators=(",", ":"), ensure_ascii=False)
        await self._out.write(f"id: {self.event_id}\ndata: {line}\n\n".encode())
        self._count.events.inc()


class ResumableCompletions:
    def __init__(
        self, gateways: Gateways, metrics: EdgeMetrics, keepalives: sse.KeepAlives
    ) -> None:
        self._gateways = gateways
        self._metrics = metrics
        self._keepalives = keepalives

    def register(self, app: web.Application) -> None:
        app[RESUMABLE_KEY] = self.start
        app.router.add_get("/v1/chat/completions/{completion_id}/stream", self.resume)

    async def start(
        self, request: web.Request, completion: Completion, metadata: Metadata
    ) -> web.StreamResponse:
        """A completion asked with X-Resumable: true (the OpenAI API's handler passes it)."""
        if not completion.stream:
            raise OpenAIError(400, "'X-Resumable' applies to streamed completions only: "
                              "send 'stream': true", None, "stream")  # fmt: skip
        completion.request.resumable = True
        _, call, head = await self._gateways.open_stream(
            lambda chat: chat.Complete(completion.request, metadata=metadata)
        )
        return await self._relay(request, call, head, 0, completion.include_usage)

    @openai_errors
    async def resume(self, request: web.Request) -> web.StreamResponse:
        metadata = bearer(request)
        completion_id = request.match_info["completion_id"]
        if not COMPLETION_ID.fullmatch(completion_id):
            raise OpenAIError(404, f"no completion {completion_id!r}", "not_found")
        raw = request.headers.get("Last-Event-ID") or "0"
        if not EVENT_ID.fullmatch(raw):
            raise OpenAIError(400, "Last-Event-ID must be a non-negative integer")
        # From the first event: the chunks' head (model, replica) is the meta event's.
        attach = attach_request(completion_id, 0)
        _, call, head = await self._gateways.open_stream(
            lambda chat: chat.AttachMessage(attach, metadata=metadata)
        )
        # The usage chunk comes only to a client that asked for it, which a resume cannot tell.
        return await self._relay(request, call, head, int(raw), False)

    async def _relay(
        self,
        request: web.Request,
        call: grpc.aio.UnaryStreamCall,
        head: Any | None,
        after: int,
        include_usage: bool,
    ) -> web.StreamResponse:
        events = _events(head, call)
        first = await anext(events, None)
        if first is None or first.WhichOneof("kind") != "meta":
            call.cancel()
            raise OpenAIError(502, "the gateway did not start the completion")
        response = web.StreamResponse(
            headers={
                **sse.STREAM_HEADERS,
                REPLICA_HEADER: first.meta.replica_id,
                **pool_headers(first.meta),
            },
        )
        await response.prepare(request)
        writer = NumberedChunks(response, first.meta, self._metrics)
        self._metrics.open_streams.inc()
        try:
            async with self._keepalives.watch(response) as keepalive:
                ended = await self._write_all(writer, _chain(first, events), after, include_usage)
                keepalive.wrote()
            if ended:
                await response.write(DONE_LINE)
        except ConnectionResetError:
            pass  # the client went: the completion runs on for a resume
        finally:
            call.cancel()  # only this call: a resumable completion is not stopped by it
            self._metrics.open_streams.dec()
        return response

    async def _write_all(
        self,
        writer: NumberedChunks,
        events: AsyncIterator[pb.ChatEvent],
        after: int,
        include_usage: bool,
    ) -> bool:
        """Writes the chunks of the events numbered above `after`; True once the last."""
        try:
            async for event in events:
                if event.event_id <= after:
                    if event.WhichOneof("kind") in ("done", "error"):
                        return True
                    continue
                writer.event_id = int(event.event_id)
                if await _write_event(writer, event, include_usage):
                    return True
        except grpc.aio.AioRpcError as error:
            failure = failure_of(error)
            await writer.error(failure.code.value[0], failure.message)
        return False


async def _write_event(writer: NumberedChunks, event: pb.ChatEvent, usage: bool) -> bool:
    """Writes one event as chunks, as a first call's stream would; True when it was the last."""
    if event.WhichOneof("kind") == "meta":
        await writer.choice({"role": "assistant", "content": ""})
        return False
    return await write_event(writer, event, usage)


async def _events(head: Any | None, call: grpc.aio.UnaryStreamCall) -> AsyncIterator[pb.ChatEvent]:
    responses = aiter(call)
    item = head
    while item is not None:
        yield item.event
        for event in item.more:
            yield event
        item = await anext(responses, None)


async def _chain(
    first: pb.ChatEvent, rest: AsyncIterator[pb.ChatEvent]
) -> AsyncIterator[pb.ChatEvent]:
    yield first
    async for event in rest:
        yield event
