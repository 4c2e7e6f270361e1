"""Requests that do not parse are INVALID_ARGUMENT, with the reason protobuf gave.

grpc.aio deserializes a request before any servicer (or interceptor's behavior) runs, and an
exception there ends the call as UNKNOWN ("Unexpected DecodeError..."): the caller cannot tell
its own malformed bytes (garbage, a truncated message, a string that is not UTF-8) from a
server fault. The interceptor here wraps each method's deserializer so that a request that
does not parse becomes an `Undecodable` value, and the method's behavior refuses it.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import grpc
from google.protobuf.message import DecodeError


@dataclass(frozen=True, slots=True)
class Undecodable:
    """Bytes that were not a message of the method's request type."""

    reason: str


def _tolerant(deserializer: Callable[[bytes], Any] | None) -> Callable[[bytes], Any] | None:
    if deserializer is None:
        return None

    def deserialize(raw: bytes) -> Any:
        try:
            return deserializer(raw)
        except DecodeError as error:
            return Undecodable(str(error))

    return deserialize


async def _refuse(context: grpc.aio.ServicerContext, request: Undecodable) -> None:
    await context.abort(
        grpc.StatusCode.INVALID_ARGUMENT, f"the request is not valid protobuf: {request.reason}"
    )


class _CheckedStream:
    """A call's stream of request messages, cut at the first that does not parse.

    A servicer may read its requests in a task of its own (a node's cancel watcher, a link's
    reader, the scheduler's report reader), where an abort's exception would never reach gRPC.
    There the stream ends and the call's own task is cancelled; the guard around the behavior
    turns that cancellation into the refusal (`refusal`). The call's task is cancelled only
    while it runs the behavior (`inside`): cancelled while gRPC writes a response the behavior
    yielded, it would end in gRPC's own code, and the caller would hear nothing until its
    deadline. Outside, the guard finds the refusal when gRPC asks for the next response."""

    def __init__(self, requests: AsyncIterator[Any], context: grpc.aio.ServicerContext) -> None:
        self._requests = requests
        self._context = context
        self._call_task = asyncio.current_task()
        self.refusal: Undecodable | None = None
        self.inside = True

    async def __aiter__(self) -> AsyncIterator[Any]:
        async for request in self._requests:
            if isinstance(request, Undecodable):
                if asyncio.current_task() is self._call_task:
                    await _refuse(self._context, request)
                self.refusal = request
                if self._call_task is not None and self.inside:
                    self._call_task.cancel()
                return
            yield request


def _guard(behavior: Callable[..., Any], streaming_requests: bool) -> Any:
    """The behavior, refusing an undecodable request (or stream message) first."""

    async def checked(request: Any, context: grpc.aio.ServicerContext) -> Any:
        if streaming_requests:
            return _CheckedStream(request, context)
        if isinstance(request, Undecodable):
            await _refuse(context, request)
        return request

    def refusal_of(request: Any) -> Undecodable | None:
        """After the call's task was cancelled: the message that caused it, if one did."""
        return request.refusal if isinstance(request, _CheckedStream) else None

    async def refuse_instead(context: grpc.aio.ServicerContext, refusal: Undecodable) -> None:
        task = asyncio.current_task()
        if task is not None:
            task.uncancel()  # the cancellation was ours, not the caller's
        await _refuse(context, refusal)

    if inspect.isasyncgenfunction(behavior):

        async def streaming(request: Any, context: grpc.aio.ServicerContext) -> Any:
            request = await checked(request, context)
            stream = request if isinstance(request, _CheckedStream) else None
            items = aiter(behavior(request, context))
            try:
                while True:
                    if stream is not None:
                        if stream.refusal is not None:
                            await items.aclose()
                            await _refuse(context, stream.refusal)
                        stream.inside = True
                    try:
                        item = await anext(items)
                    except StopAsyncIteration:
                        return
                    finally:
                        if stream is not None:
                            stream.inside = False
                    yield item
            except asyncio.CancelledError:
                if (refusal := refusal_of(request)) is None:
                    raise
                await refuse_instead(context, refusal)

        return streaming

    async def once(request: Any, context: grpc.aio.ServicerContext) -> Any:
        request = await checked(request, context)
        try:
            return await behavior(request, context)
        except asyncio.CancelledError:
            if (refusal := refusal_of(request)) is None:
                raise
            await refuse_instead(context, refusal)

    return once


_HANDLER_KINDS = (
    ("unary_unary", grpc.unary_unary_rpc_method_handler, False),
    ("unary_stream", grpc.unary_stream_rpc_method_handler, False),
    ("stream_unary", grpc.stream_unary_rpc_method_handler, True),
    ("stream_stream", grpc.stream_stream_rpc_method_handler, True),
)


class DecodeCheck(grpc.aio.ServerInterceptor):
    """Refuses with INVALID_ARGUMENT a request (or a streamed request message) that does not
    parse as the method's request type; the servicer never sees it."""

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]],
        details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler | None:
        handler = await continuation(details)
        if handler is None:
            return None
        for kind, make, streaming_requests in _HANDLER_KINDS:
            behavior = getattr(handler, kind)
            if behavior is not None:
                return make(
                    _guard(behavior, streaming_requests),
                    request_deserializer=_tolerant(handler.request_deserializer),
                    response_serializer=handler.response_serializer,
                )
        return handler
