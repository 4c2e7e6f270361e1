"""An answer's events relayed from a gateway to an HTTP client as server-sent events. When the
gateway goes away mid-answer, the relay attaches to the same answer through another gateway,
after the last event it wrote, so the client sees a pause rather than an error: every gateway
can follow any answer in flight (they share them through Redis), and one of them takes over
the answers of a gateway that died."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

import grpc
from aiohttp import web

from chat.v1 import chat_service_pb2 as pb
from chat.v1 import chat_service_pb2_grpc as pb_grpc
from edge import sse
from edge.convert import pool_headers
from edge.errors import HttpError, from_rpc
from edge.failures import failure_of
from edge.gateways import Gateway, Gateways, gateway_lost
from edge.metrics import EdgeMetrics

StartCall = Callable[[pb_grpc.ChatServiceStub], grpc.aio.UnaryStreamCall]
# Between rounds of re-attach attempts when every gateway refused at once.
FIRST_BACKOFF_S = 0.1
MOST_BACKOFF_S = 1.0


@dataclass
class Upstream:
    """The call events come from now, and the first of its messages (None: it ended without
    one)."""

    gateway: Gateway
    call: grpc.aio.UnaryStreamCall
    first: Any | None
    responses: AsyncIterator[Any] = field(init=False)

    def __post_init__(self) -> None:
        self.responses = aiter(self.call)


class Relay:
    def __init__(
        self,
        gateways: Gateways,
        metrics: EdgeMetrics,
        keepalives: sse.KeepAlives,
        reattach_timeout_s: float,
    ) -> None:
        self._gateways = gateways
        self._metrics = metrics
        self._keepalives = keepalives
        self._reattach_timeout_s = reattach_timeout_s

    async def stream(
        self,
        request: web.Request,
        start: StartCall,
        message_id: str,
        metadata: tuple[tuple[str, str], ...],
    ) -> web.StreamResponse:
        """Relays a ChatEvent stream as SSE. Errors before the first event are HTTP statuses.
        start makes the call at a given gateway (Gateways.open_stream picks it)."""
        upstream = await self._open(start)
        first = upstream.first.event  # type: ignore[union-attr]  # _open's has its first message
        # A resume starts after the meta event: its stream names no pool.
        served = pool_headers(first.meta) if first.WhichOneof("kind") == "meta" else {}
        response = web.StreamResponse(headers={**sse.STREAM_HEADERS, **served})
        await response.prepare(request)
        self._metrics.open_streams.inc()
        try:
            await self._relay(response, upstream, message_id, metadata)
        finally:
            self._metrics.open_streams.dec()
        return response

    async def _open(self, start: StartCall) -> Upstream:
        try:
            gateway, call, first = await self._gateways.open_stream(start)
        except grpc.aio.AioRpcError as error:
            raise from_rpc(error) from error
        if first is None:
            raise HttpError(502, "the gateway closed the stream without an event")
        return Upstream(gateway, call, first)

    async def _relay(
        self,
        response: web.StreamResponse,
        upstream: Upstream,
        message_id: str,
        metadata: tuple[tuple[str, str], ...],
    ) -> None:
        async with self._keepalives.watch(response) as keepalive:
            try:
                while upstream.first is not None:
                    last, lost = await self._copy(response, upstream, keepalive)
                    if lost is None:
                        return
                    self._gateways.lost(upstream.gateway)
                    found = await self._reattach(message_id, last, metadata)
                    self._metrics.reattaches.labels("failed" if found is None else "ok").inc()
                    if found is None:
                        await self._write_failure(response, lost)
                        return
                    upstream = found
            except ConnectionResetError:
                # The app went away (a write found its connection closing): nothing more can be
                # written, and it is no error of the edge's, so the request ends here rather
                # than as a logged traceback. The gateway keeps writing the answer for a resume.
                upstream.call.cancel()
            except asyncio.CancelledError:
                upstream.call.cancel()
                raise

    async def _copy(
        self, response: web.StreamResponse, upstream: Upstream, keepalive: sse.KeepAlive
    ) -> tuple[int, grpc.aio.AioRpcError | None]:
        """Writes upstream's messages until it ends, each one's events (one, or a batch when
        the gateway was ahead) in one write. Returns the last event id written, and the error
        when the gateway was lost; any other error is written as an `error` event."""
        last = await self._write_events(response, upstream.first)
        keepalive.wrote()
        try:
            async for item in upstream.responses:
                last = await self._write_events(response, item)
                keepalive.wrote()
        except grpc.aio.AioRpcError as error:
            if gateway_lost(error):
                return last, error
            await self._write_failure(response, error)
        return last, None

    async def _reattach(
        self, message_id: str, after: int, metadata: tuple[tuple[str, str], ...]
    ) -> Upstream | None:
        """The same answer after event `after`, from whichever gateway serves it first within
        reattach_timeout_s; None when none did. The gateway that took the answer over may
        take a few seconds to send its next event: that wait is inside the timeout too."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._reattach_timeout_s
        backoff_s = FIRST_BACKOFF_S
        attach = pb.AttachMessageRequest(message_id=message_id, after_event_id=after)
        while True:
            for gateway in self._gateways.ordered():
                remaining_s = deadline - loop.time()
                if remaining_s <= 0:
                    return None
                upstream = Upstream(gateway, gateway.chat.AttachMessage(attach, metadata=metadata),
                                    None)  # fmt: skip
                try:
                    upstream.first = await asyncio.wait_for(
                        anext(upstream.responses, None), remaining_s
                    )
                except TimeoutError:
                    upstream.call.cancel()
                    return None
                except grpc.aio.AioRpcError as error:
                    if gateway_lost(error):
                        self._gateways.lost(gateway)
                    elif error.code() != grpc.StatusCode.UNAVAILABLE:
                        # NOT_FOUND and the like: no gateway will serve it.
                        return None
                    continue
                except asyncio.CancelledError:
                    upstream.call.cancel()
                    raise
                self._gateways.answered(gateway)
                return upstream
            await asyncio.sleep(min(backoff_s, max(0.0, deadline - loop.time())))
            backoff_s = min(backoff_s * 2, MOST_BACKOFF_S)

    async def _write_events(self, response: web.StreamResponse, item: Any) -> int:
        """Writes the events of one gRPC message; the id of the last."""
        events = [item.event, *item.more]
        await response.write(b"".join(sse.encode(event) for event in events))
        self._metrics.events.inc(len(events))
        return int(events[-1].event_id)

    async def _write_failure(
        self, response: web.StreamResponse, error: grpc.aio.AioRpcError
    ) -> None:
        failure = failure_of(error)
        lost = pb.ChatEvent(
            error=pb.ErrorEvent(code=failure.code.value[0], message=failure.message)
        )
        await response.write(sse.encode(lost))
