"""The OpenAI-compatible API: `/v1/chat/completions` and `/v1/models` over ChatService.Complete,
so the official `openai` SDK, LangChain and curl work unchanged. Errors use OpenAI's shape
(`{"error": {"message", "type", "param", "code"}}`), which those clients parse.

A completion is stateless: nothing stores or shares it, so when its gateway goes away
mid-answer no other gateway can carry it on, and the stream ends with an error chunk (the
conversation API's streams re-attach instead: edge.relay). Only a gateway lost before the
first chunk gets the request sent to another one."""

from __future__ import annotations

import asyncio
import functools
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import grpc
from aiohttp import web

from chat.v1 import chat_service_pb2 as pb
from domain.answer_options import AnswerOptions
from edge import openai_fields, openai_format, openai_tools, sse
from edge.convert import (
    FINISH_ERROR,
    MODEL_CHOICES,
    NO_OPTIONS,
    OPENAI_ROLES,
    CallerTurn,
    completion_request,
    limits_request,
    pool_headers,
)
from edge.failures import failure_of, user_message_of_code
from edge.gateways import Gateways
from edge.metrics import EdgeMetrics

# Re-exported: callers import these from here (edge/errors.py, the Responses API).
from edge.openai_errors import OpenAIError as OpenAIError
from edge.openai_replies import ChunkWriter, WholeAnswer, completion_body, write_event
from edge.openai_replies import usage_of as usage_of
from infra.status import REASON_MESSAGE_TOO_LARGE

SESSION_HEADER = "X-Session-Id"
REPLICA_HEADER = "X-Replica"
DONE_LINE = b"data: [DONE]\n\n"
# How often a non-streaming completion looks whether its caller is still connected.
CLIENT_CHECK_S = 0.25
CLIENT_CLOSED = 499  # nginx's status for a request its client gave up on; nobody reads it
MAX_BODY_KEY = web.AppKey("max_body_bytes", int)
# `X-Resumable: true` streams a completion that outlives its client (edge/resumable_completions.py).
RESUMABLE_HEADER = "X-Resumable"
ResumableStart = Callable[[web.Request, "Completion", tuple[tuple[str, str], ...]],
                          Awaitable[web.StreamResponse]]  # fmt: skip
# The key's second argument names its value's type in its repr; mypy takes only a class there.
RESUMABLE_KEY: web.AppKey[ResumableStart] = web.AppKey(
    "resumable_completions",
    ResumableStart,  # type: ignore[arg-type]
)


def from_rpc(error: grpc.aio.AioRpcError) -> OpenAIError:
    failure = failure_of(error)
    status = failure.http_status
    if failure.reason == REASON_MESSAGE_TOO_LARGE:
        # OpenAI answers a history the model cannot hold with a 400 of this code; 413 stays
        # for a body over the edge's size limit.
        return OpenAIError(400, failure.message, "context_length_exceeded", "messages")
    codes = {401: "invalid_api_key", 404: "not_found", 429: "rate_limit_exceeded"}
    return OpenAIError(status, failure.message, codes.get(status), None, failure.retry_after_header)


Handler = Callable[[Any, web.Request], Awaitable[web.StreamResponse]]


def openai_errors(handler: Handler) -> Handler:
    """Answers every failure before the first byte in OpenAI's error shape."""

    @functools.wraps(handler)
    async def wrapped(self: Any, request: web.Request) -> web.StreamResponse:
        try:
            return await handler(self, request)
        except OpenAIError as error:
            return error.response()
        except grpc.aio.AioRpcError as rpc_error:
            return from_rpc(rpc_error).response()
        except web.HTTPRequestEntityTooLarge:
            limit = request.app[MAX_BODY_KEY]
            too_large = OpenAIError(413, f"the body is over {limit} bytes", "request_too_large")
            return too_large.response()

    return wrapped


@dataclass(frozen=True, slots=True)
class Completion:
    """A parsed /v1/chat/completions body."""

    request: pb.CompleteRequest
    model: str
    stream: bool
    include_usage: bool
    options: AnswerOptions = NO_OPTIONS


def bearer(request: web.Request) -> tuple[tuple[str, str], ...]:
    header = request.headers.get("Authorization", "")
    if not header.startswith("Bearer ") or not header.removeprefix("Bearer ").strip():
        raise OpenAIError(
            401, "send your API key as 'Authorization: Bearer <token>'", "invalid_api_key"
        )
    return (("authorization", header),)


def _text_of(content: Any, index: int) -> str:
    """A message's content: a string, or OpenAI's list of text parts joined."""
    param = f"messages[{index}].content"
    if isinstance(content, str):
        return content
    if not isinstance(content, list) or not content:
        raise OpenAIError(400, f"'{param}' must be a string or a list of text parts", None, param)
    texts = []
    for part in content:
        if not isinstance(part, dict) or part.get("type") != "text":
            raise OpenAIError(400, f"'{param}' may hold only parts of type 'text'", None, param)
        if not isinstance(part.get("text"), str):
            raise OpenAIError(400, f"each part of '{param}' needs a string 'text'", None, param)
        texts.append(part["text"])
    return "".join(texts)


def _turn(message: dict[str, Any], index: int) -> CallerTurn:
    role = message["role"]
    calls = openai_tools.calls_of(message, index)
    content = message.get("content")
    if calls and content is None:
        return CallerTurn(role, "", calls)  # an assistant turn that only called tools
    text = _text_of(content, index)
    if role == "tool":
        return CallerTurn(role, text, (), openai_tools.call_id_of(message, index))
    return CallerTurn(role, text, calls)


def _turns(messages: Any) -> list[CallerTurn]:
    if not isinstance(messages, list) or not messages:
        raise OpenAIError(400, "'messages' must be a non-empty list", None, "messages")
    turns = []
    for index, message in enumerate(messages):
        if not isinstance(message, dict):
            raise OpenAIError(400, f"'messages[{index}]' must be an object", None, "messages")
        if message.get("role") not in OPENAI_ROLES:
            raise OpenAIError(
                400,
                f"'messages[{index}].role' must be one of system, developer, user, assistant, tool",
                None,
                f"messages[{index}].role",
            )
        turns.append(_turn(message, index))
    return turns


def _max_tokens(body: dict[str, Any]) -> int:
    for name in ("max_completion_tokens", "max_tokens"):
        value = body.get(name)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 1_000_000:
            raise OpenAIError(400, f"'{name}' must be an integer from 1", None, name)
        return value
    return 0


def _stream_flags(body: dict[str, Any]) -> tuple[bool, bool]:
    stream = body.get("stream", False)
    if stream is None:
        stream = False
    if not isinstance(stream, bool):
        raise OpenAIError(400, "'stream' must be a boolean", None, "stream")
    options = body.get("stream_options")
    if options is None:
        return stream, False
    if not stream:
        raise OpenAIError(
            400, "'stream_options' is only allowed when 'stream' is true", None, "stream_options"
        )
    if not isinstance(options, dict) or not isinstance(options.get("include_usage", False), bool):
        raise OpenAIError(
            400, "'stream_options.include_usage' must be a boolean", None, "stream_options"
        )
    return stream, bool(options.get("include_usage", False))


def parse_completion(body: dict[str, Any], session_key: str) -> Completion:
    model = body.get("model")
    if not isinstance(model, str):
        raise OpenAIError(400, "'model' must be a string", None, "model")
    if model not in MODEL_CHOICES:
        raise OpenAIError(
            404,
            f"the model {model!r} does not exist; use auto, small or large",
            "model_not_found",
            "model",
        )
    openai_fields.check_known(body)
    stream, include_usage = _stream_flags(body)
    turns = _turns(body.get("messages"))
    options = openai_fields.sampling(body)
    options = openai_format.with_format(options, body.get("response_format"))
    options = openai_tools.with_tools(options, body)
    key = openai_fields.cache_key(body, session_key)
    ask = completion_request(turns, model, _max_tokens(body), key, options)
    return Completion(ask, model, stream, include_usage, options)


class OpenAIApi:
    def __init__(
        self,
        gateways: Gateways,
        metrics: EdgeMetrics,
        keepalives: sse.KeepAlives,
        rpc_timeout_s: float,
    ) -> None:
        self._gateways = gateways
        self._metrics = metrics
        self._keepalives = keepalives
        self._rpc_timeout_s = rpc_timeout_s

    def register(self, app: web.Application) -> None:
        app.router.add_post("/v1/chat/completions", self.chat_completions)
        app.router.add_get("/v1/models", self.list_models)
        app.router.add_get("/v1/models/{model}", self.get_model)

    @openai_errors
    async def chat_completions(self, request: web.Request) -> web.StreamResponse:
        metadata = bearer(request)
        try:
            body = await request.json()
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise OpenAIError(400, "the body is not valid JSON") from exc
        if not isinstance(body, dict):
            raise OpenAIError(400, "the body must be a JSON object")
        completion = parse_completion(body, request.headers.get(SESSION_HEADER, ""))
        if request.headers.get(RESUMABLE_HEADER, "").lower() == "true":
            return await request.app[RESUMABLE_KEY](request, completion, metadata)
        _, call, head = await self._gateways.open_stream(
            lambda chat: chat.Complete(completion.request, metadata=metadata)
        )
        events = _events(head, call)
        first = await anext(events, None)
        if first is None or first.WhichOneof("kind") != "meta":
            call.cancel()
            raise OpenAIError(502, "the gateway did not start the completion")
        if completion.stream:
            return await self._stream(request, call, first.meta, events, completion)
        return await self._whole_unless_gone(request, call, first.meta, events)

    async def _stream(
        self,
        request: web.Request,
        call: grpc.aio.UnaryStreamCall,
        meta: pb.MetaEvent,
        events: AsyncIterator[pb.ChatEvent],
        completion: Completion,
    ) -> web.StreamResponse:
        response = web.StreamResponse(
            headers={**sse.STREAM_HEADERS, REPLICA_HEADER: meta.replica_id, **pool_headers(meta)}
        )
        await response.prepare(request)
        writer = ChunkWriter(response, meta, self._metrics)
        self._metrics.open_streams.inc()
        try:
            await writer.choice({"role": "assistant", "content": ""})
            await self._relay(response, writer, events, completion.include_usage)
            await response.write(DONE_LINE)
        except ConnectionResetError:
            pass  # the client went away mid-stream: no error of the edge's, nothing to write
        finally:
            # Also when the client went away: cancelling the call stops the completion
            # upstream, since nobody can resume a stateless one.
            call.cancel()
            self._metrics.open_streams.dec()
        return response

    async def _relay(
        self,
        response: web.StreamResponse,
        writer: ChunkWriter,
        events: AsyncIterator[pb.ChatEvent],
        include_usage: bool,
    ) -> None:
        async with self._keepalives.watch(response) as keepalive:
            try:
                async for event in events:
                    if await write_event(writer, event, include_usage):
                        return
                    keepalive.wrote()
            except grpc.aio.AioRpcError as error:
                failure = failure_of(error)
                await writer.error(failure.code.value[0], failure.message)

    async def _whole_unless_gone(
        self,
        request: web.Request,
        call: grpc.aio.UnaryStreamCall,
        meta: pb.MetaEvent,
        events: AsyncIterator[pb.ChatEvent],
    ) -> web.Response:
        """The whole completion, or, once its caller has hung up, its cancellation upstream:
        nobody can read or resume a stateless answer, so its GPU time would be wasted. aiohttp
        does not cancel a handler whose client left (a streaming one notices when a write
        fails), so the connection is looked at while the answer is written."""
        whole = asyncio.ensure_future(self._whole(meta, events))
        try:
            while not (await asyncio.wait({whole}, timeout=CLIENT_CHECK_S))[0]:
                transport = request.transport
                if transport is None or transport.is_closing():
                    call.cancel()
                    whole.cancel()
                    return web.Response(status=CLIENT_CLOSED, text="client closed the request")
            return whole.result()
        finally:
            if not whole.done():
                whole.cancel()

    async def _whole(self, meta: pb.MetaEvent, events: AsyncIterator[pb.ChatEvent]) -> web.Response:
        answer = WholeAnswer()
        async for event in events:
            kind = event.WhichOneof("kind")
            if kind == "delta":
                answer.add(event.delta)
            elif kind == "error":
                message = user_message_of_code(event.error.code, event.error.message)
                raise OpenAIError(502 if event.error.code != 14 else 503, message)
            elif kind == "done":
                if event.done.finish == FINISH_ERROR:
                    raise OpenAIError(502, "the model failed while answering")
                return web.json_response(
                    completion_body(meta, answer, event.done),
                    headers={REPLICA_HEADER: meta.replica_id, **pool_headers(meta)},
                )
        raise OpenAIError(502, "the gateway ended the completion without finishing it")

    @openai_errors
    async def list_models(self, request: web.Request) -> web.Response:
        await self._check_key(request)
        return web.json_response({"object": "list", "data": [_model(m) for m in MODEL_CHOICES]})

    @openai_errors
    async def get_model(self, request: web.Request) -> web.Response:
        await self._check_key(request)
        name = request.match_info["model"]
        if name not in MODEL_CHOICES:
            raise OpenAIError(404, f"the model {name!r} does not exist", "model_not_found")
        return web.json_response(_model(name))

    async def _check_key(self, request: web.Request) -> None:
        """Only the gateway knows whether a token is valid; its cheapest call asks."""
        metadata, timeout = bearer(request), self._rpc_timeout_s
        ask = limits_request()
        await self._gateways.call(
            lambda chat: chat.GetLimits(ask, metadata=metadata, timeout=timeout)
        )


def _model(name: str) -> dict[str, Any]:
    return {"id": name, "object": "model", "created": 0, "owned_by": "chat-platform"}


async def _events(head: Any | None, call: grpc.aio.UnaryStreamCall) -> AsyncIterator[pb.ChatEvent]:
    """The completion's events one by one, from its first message (head, already read) on;
    the gateway may send several in one message."""
    responses = aiter(call)
    item = head
    while item is not None:
        yield item.event
        for event in item.more:
            yield event
        item = await anext(responses, None)
