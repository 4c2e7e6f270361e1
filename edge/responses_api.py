"""OpenAI's Responses API over ChatService: `POST /v1/responses`, `GET /v1/responses/{id}`
(with `stream=true&starting_after=N`, a resume), `POST /v1/responses/{id}/cancel` and
`DELETE /v1/responses/{id}`.

A stored response is a message of a stored conversation, and its id the message's: the
response is the user's turn (its id `resp_...`) and the answer to it (`resp_....answer`).
A first response starts a conversation whose id is the response's; `previous_response_id`
continues that response's conversation after its answer, so the gateway builds the prompt
from the stored history and the conversation keeps its replica (and its prefix cache). So
nothing maps ids: the conversation is read off the message (ChatService.GetResponse), and a
deletion is marked beside it (the store's deleted_responses). Everything a message meets
(limits, the ladder, the safety checks, per-user scoping) a response meets, being one.
`store: false` is a stateless completion (ChatService.Complete): nothing is kept, nothing can
be read back, and the input may carry the whole history.

A stream is the answer's event log, in OpenAI's events (edge/responses_convert.py), and the
answer runs on when the client goes (it is a message), so a background response, or any
stream cut short, can be read again from any event."""

from __future__ import annotations

import asyncio
import json
import re
import uuid
from collections.abc import AsyncGenerator, Callable
from typing import Any

import grpc
from aiohttp import web

from chat.v1 import chat_service_pb2 as pb
from chat.v1 import chat_service_pb2_grpc as pb_grpc
from domain.answer_options import AnswerOptions
from edge import convert, responses_convert, responses_request, responses_tools, sse
from edge.convert import NO_OPTIONS, CallerTurn, completion_request, pool_headers
from edge.failures import failure_of
from edge.gateways import Gateways, gateway_lost, never_sent
from edge.metrics import EdgeMetrics
from edge.openai_api import OpenAIError, bearer, from_rpc, openai_errors
from edge.responses_convert import (
    ANSWER_SUFFIX,
    RESPONSE_PREFIX,
    ResponseState,
    sse_line,
    stored_state,
)
from edge.responses_functions import choice_json, functions_json
from edge.responses_request import ResponseRequest

RESPONSE_ID = re.compile(r"resp_[A-Za-z0-9_-]{1,59}")
SEQUENCE = re.compile(r"[0-9]{1,18}")
Metadata = tuple[tuple[str, str], ...]
StartCall = Callable[[pb_grpc.ChatServiceStub], grpc.aio.UnaryStreamCall]


def _not_found(response_id: str) -> OpenAIError:
    return OpenAIError(404, f"no response {response_id!r}", "not_found", None)


def _response_id(request: web.Request) -> str:
    response_id = request.match_info["response_id"]
    if not RESPONSE_ID.fullmatch(response_id):
        raise _not_found(response_id)
    return response_id


def _starting_after(request: web.Request) -> int:
    """The sequence number the stream resumes after; -1 (from the start) when not given."""
    raw = request.query.get("starting_after")
    if raw is None:
        return -1
    if not SEQUENCE.fullmatch(raw):
        raise OpenAIError(400, "'starting_after' must be a non-negative integer", None,
                          "starting_after")  # fmt: skip
    return int(raw)


def _stream_asked(request: web.Request) -> bool:
    raw = request.query.get("stream", "false")
    if raw not in ("true", "false"):
        raise OpenAIError(400, "'stream' must be true or false", None, "stream")
    return raw == "true"


async def _body(request: web.Request) -> dict[str, Any]:
    try:
        body = await request.json()
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise OpenAIError(400, "the body is not valid JSON") from exc
    if not isinstance(body, dict):
        raise OpenAIError(400, "the body must be a JSON object")
    return body


class ResponsesApi:
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
        app.router.add_post("/v1/responses", self.create)
        app.router.add_get("/v1/responses/{response_id}", self.retrieve)
        app.router.add_delete("/v1/responses/{response_id}", self.delete)
        app.router.add_post("/v1/responses/{response_id}/cancel", self.cancel)

    # Routes -------------------------------------------------------------------------------------

    @openai_errors
    async def create(self, request: web.Request) -> web.StreamResponse:
        metadata = bearer(request)
        ask = responses_request.parse(await _body(request))
        response_id = RESPONSE_PREFIX + uuid.uuid4().hex
        state = ResponseState(response_id, ask.model, instructions=ask.instructions or None,
                              previous_response_id=ask.previous_response_id or None,
                              background=ask.background, store=ask.store,
                              max_output_tokens=ask.max_output_tokens or None,
                              tools=responses_tools.tools_json(ask.tools)
                              + functions_json(ask.functions),
                              parallel_tool_calls=ask.parallel_tool_calls,
                              functions=bool(ask.functions.tools),
                              tool_choice=choice_json(ask.functions))  # fmt: skip
        if ask.store:
            start = await self._send(ask, response_id, metadata)
            events = self._follow(start, response_id, metadata)
        else:
            start = self._complete(ask, metadata)
            events = self._follow(start, None, metadata)
        try:
            first = await anext(events, None)
        except grpc.aio.AioRpcError as error:
            refused = from_rpc(error)
            if refused.code == "context_length_exceeded":
                refused.param = "input"  # what the chat completions call `messages`
            elif ask.tools and refused.status in (400, 403) and refused.param is None:
                # Refused before it started: of what the edge has not checked already, the
                # gateway refuses a request's tools (one the platform does not run, one the
                # plan may not, an approval a stored response cannot wait for).
                refused.param = "tools"
            raise refused from error
        if first is None or first.WhichOneof("kind") != "meta":
            await events.aclose()
            raise OpenAIError(502, "the gateway did not start the response")
        served = pool_headers(first.meta)
        if ask.stream:
            return await self._stream(request, state, _chain(first, events), -1, served)
        if ask.background:
            # The answer runs on at the gateway, and its event log with it: read it with GET.
            await events.aclose()
            responses_tools.translator(state).feed(first)
            return web.json_response(state.body(), headers=served)
        return web.json_response(await _whole(state, _chain(first, events)), headers=served)

    @openai_errors
    async def retrieve(self, request: web.Request) -> web.StreamResponse:
        metadata = bearer(request)
        response_id = _response_id(request)
        stream, after = _stream_asked(request), _starting_after(request)
        stored = await self._get(response_id, metadata)
        if not stream:
            return web.json_response(stored_state(stored).body())
        read = stored_state(stored)
        state = ResponseState(response_id, read.model, created_at=read.created_at,
                              previous_response_id=read.previous_response_id)  # fmt: skip
        events = self._follow(self._attach(response_id, metadata), response_id, metadata)
        first = await anext(events, None)
        if first is None:
            raise OpenAIError(404, f"the stream of {response_id!r} is no longer kept", "not_found")
        return await self._stream(request, state, _chain(first, events), after)

    @openai_errors
    async def cancel(self, request: web.Request) -> web.Response:
        metadata, timeout = bearer(request), self._rpc_timeout_s
        response_id = _response_id(request)
        read = stored_state(await self._get(response_id, metadata))  # 404 when not theirs
        stop = convert.stop_request(response_id)
        await self._gateways.call(
            lambda chat: chat.StopMessage(stop, metadata=metadata, timeout=timeout), never_sent
        )
        # The answer ends at once and is saved; its log says how, with the text so far.
        state = ResponseState(response_id, read.model, created_at=read.created_at,
                              previous_response_id=read.previous_response_id)  # fmt: skip
        events = self._follow(self._attach(response_id, metadata), response_id, metadata)
        try:
            async with asyncio.timeout(timeout):
                return web.json_response(await _whole(state, events))
        except TimeoutError:
            pass  # the answer did not end in time: what the store holds is the answer
        except grpc.aio.AioRpcError as error:
            if error.code() != grpc.StatusCode.NOT_FOUND:
                raise
        return web.json_response(stored_state(await self._get(response_id, metadata)).body())

    @openai_errors
    async def delete(self, request: web.Request) -> web.Response:
        metadata, timeout = bearer(request), self._rpc_timeout_s
        response_id = _response_id(request)
        ask = responses_convert.delete_request(response_id)
        await self._gateways.call(
            lambda chat: chat.DeleteResponse(ask, metadata=metadata, timeout=timeout), never_sent
        )
        return web.json_response({"id": response_id, "object": "response", "deleted": True})

    # Calls --------------------------------------------------------------------------------------

    async def _get(self, response_id: str, metadata: Metadata) -> pb.GetResponseResponse:
        ask = responses_convert.get_request(response_id)
        timeout = self._rpc_timeout_s
        try:
            return await self._gateways.call(
                lambda chat: chat.GetResponse(ask, metadata=metadata, timeout=timeout)
            )
        except grpc.aio.AioRpcError as error:
            if error.code() in (grpc.StatusCode.NOT_FOUND, grpc.StatusCode.INVALID_ARGUMENT):
                raise _not_found(response_id) from error
            raise

    async def _send(self, ask: ResponseRequest, response_id: str, metadata: Metadata) -> StartCall:
        """The SendMessage call of a stored response: a new conversation, or the previous
        response's, after its answer."""
        conversation_id, parent_id = response_id, ""
        previous = ask.previous_response_id
        if previous:
            if not RESPONSE_ID.fullmatch(previous):
                raise _previous_not_found(previous)
            try:
                stored = await self._get(previous, metadata)
            except OpenAIError as error:
                raise _previous_not_found(previous) from error
            if not stored.answered:
                raise OpenAIError(400, f"the response {previous!r} is still in progress", None,
                                  "previous_response_id")  # fmt: skip
            conversation_id, parent_id = stored.question.conversation_id, previous + ANSWER_SUFFIX
        tools = responses_tools.platform_tools_pb(ask.tools)
        send = responses_convert.send_request(conversation_id, response_id, parent_id,
                                              ask.content, ask.model, ask.system,
                                              ask.max_output_tokens, tools)  # fmt: skip
        return lambda chat: chat.SendMessage(send, metadata=metadata)

    def _complete(self, ask: ResponseRequest, metadata: Metadata) -> StartCall:
        """A response not stored: a stateless completion of the input's whole history."""
        turns = [turn for turn in ask.history if turn.role != "system"]
        if ask.system:
            turns.insert(0, CallerTurn("system", ask.system))
        functions = ask.functions
        options = NO_OPTIONS
        if ask.tools or functions.tools:
            options = AnswerOptions(tools=functions.tools, tool_choice=functions.choice,
                                    tool_choice_name=functions.choice_name,
                                    parallel_tool_calls=ask.parallel_tool_calls)  # fmt: skip
        complete = completion_request(turns, ask.model, ask.max_output_tokens, "", options)
        complete.platform_tools.extend(responses_tools.platform_tools_pb(ask.tools))
        complete.tool_approvals.extend(responses_tools.approvals_pb(ask.approvals))
        return lambda chat: chat.Complete(complete, metadata=metadata)

    def _attach(self, response_id: str, metadata: Metadata) -> StartCall:
        # From the first event: the closing events carry the whole text.
        return _attach_after(response_id, 0, metadata)

    async def _follow(
        self, start: StartCall, message_id: str | None, metadata: Metadata
    ) -> AsyncGenerator[pb.ChatEvent]:
        """The answer's events one by one. When the gateway goes away mid-answer, the same
        answer is followed at another one after the last event read (message_id None: a
        completion, which died with its gateway)."""
        gateway, call, item = await self._gateways.open_stream(start)
        last = 0
        try:
            while True:
                try:
                    while item is not None:
                        for event in (item.event, *item.more):
                            last = int(event.event_id)
                            yield event
                        item = await anext(aiter(call), None)
                    return
                except grpc.aio.AioRpcError as error:
                    if message_id is None or not gateway_lost(error):
                        raise
                    self._gateways.lost(gateway)
                call.cancel()
                gateway, call, item = await self._gateways.open_stream(
                    _attach_after(message_id, last, metadata)
                )
        finally:
            call.cancel()

    # Writing ------------------------------------------------------------------------------------

    async def _stream(
        self,
        request: web.Request,
        state: ResponseState,
        events: AsyncGenerator[pb.ChatEvent],
        after: int,
        served: dict[str, str] | None = None,
    ) -> web.StreamResponse:
        """OpenAI's stream events of the answer, those numbered above `after` only; served:
        the pool headers, where the answer's meta event was read before."""
        response = web.StreamResponse(headers={**sse.STREAM_HEADERS, **(served or {})})
        await response.prepare(request)
        translator = responses_tools.translator(state)
        self._metrics.open_streams.inc()
        last = 0
        try:
            async with self._keepalives.watch(response) as keepalive:
                try:
                    async for event in events:
                        last = int(event.event_id)
                        lines = [sse_line(e) for e in translator.feed(event) if e[0] > after]
                        if lines:
                            await response.write(b"".join(lines))
                            self._metrics.events.inc(len(lines))
                            keepalive.wrote()
                except grpc.aio.AioRpcError as error:
                    failure = failure_of(error)
                    lost = responses_convert.failure_event(last, failure.code.value[0],
                                                           failure.message)  # fmt: skip
                    await response.write(b"".join(sse_line(e) for e in translator.feed(lost)))
        except ConnectionResetError:
            pass  # the client went away; the answer runs on for a resume
        finally:
            await events.aclose()
            self._metrics.open_streams.dec()
        return response


def _attach_after(message_id: str, after: int, metadata: Metadata) -> StartCall:
    attach = convert.attach_request(message_id, after)
    return lambda chat: chat.AttachMessage(attach, metadata=metadata)


def _previous_not_found(previous: str) -> OpenAIError:
    return OpenAIError(404, f"no previous response {previous!r}", "not_found",
                       "previous_response_id")  # fmt: skip


async def _chain(
    first: pb.ChatEvent, rest: AsyncGenerator[pb.ChatEvent]
) -> AsyncGenerator[pb.ChatEvent]:
    try:
        yield first
        async for event in rest:
            yield event
    finally:
        await rest.aclose()


async def _whole(state: ResponseState, events: AsyncGenerator[pb.ChatEvent]) -> dict[str, Any]:
    """The response once its answer has ended."""
    translator = responses_tools.translator(state)
    try:
        async for event in events:
            translator.feed(event)
    finally:
        await events.aclose()
    return state.body()
