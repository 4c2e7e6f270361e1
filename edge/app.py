"""The edge: the only place where gRPC becomes HTTP and server-sent events. Stateless."""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
from aiohttp import web
from google.protobuf import json_format
from grpc_health.v1 import health_pb2, health_pb2_grpc
from prometheus_client import CollectorRegistry

from chat.v1 import chat_service_pb2 as pb
from chat.v1 import chat_service_pb2_grpc as pb_grpc
from edge import sse
from edge.errors import HttpError, error_for, error_response
from edge.metrics import EdgeMetrics
from edge.openai_api import MAX_BODY_KEY, OpenAIApi
from edge.openapi import openapi_handler
from edge.ops import Cors, PerAddressLimit
from infra.metrics import metrics_handler
from infra.status import CallFailure

MODEL_CHOICES = {
    "auto": pb.MODEL_CHOICE_AUTO,
    "small": pb.MODEL_CHOICE_SMALL,
    "large": pb.MODEL_CHOICE_LARGE,
}
EVENT_ID = re.compile(r"[0-9]{1,18}")
PAGE_SIZE = re.compile(r"[1-9][0-9]?|100")
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@dataclass(frozen=True, slots=True)
class EdgeSettings:
    max_body_bytes: int = 64 * 1024
    keepalive_s: float = 15.0
    rpc_timeout_s: float = 10.0
    # Web origins allowed to call cross-origin ("*": any); none by default.
    cors_origins: tuple[str, ...] = ()
    # Requests (streams included) one client address may hold open; 0: no limit.
    max_requests_per_ip: int = 256


def _from_rpc(error: grpc.aio.AioRpcError) -> HttpError:
    failure = CallFailure(error)
    return HttpError(failure.http_status, failure.message, failure.retry_after_header)


class Edge:
    def __init__(
        self,
        chat: pb_grpc.ChatServiceStub,
        health: health_pb2_grpc.HealthStub,
        settings: EdgeSettings,
        metrics: EdgeMetrics,
    ) -> None:
        self._chat = chat
        self._health = health
        self._settings = settings
        self._metrics = metrics

    # Plumbing -----------------------------------------------------------------------------------

    @web.middleware
    async def errors(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        try:
            response = await handler(request)
        except HttpError as error:
            response = error_for(request, error)
        except grpc.aio.AioRpcError as rpc_error:
            response = error_for(request, _from_rpc(rpc_error))
        except web.HTTPRequestEntityTooLarge:
            too_large = HttpError(413, f"the body is over {self._settings.max_body_bytes} bytes")
            response = error_for(request, too_large)
        except web.HTTPException as http:
            response = error_for(request, HttpError(http.status, http.reason))
        except UnicodeEncodeError:
            # A lone surrogate ("\ud800" in JSON, or percent-encoded in a path) is valid
            # Python text but cannot go into a protobuf string.
            response = error_for(request, HttpError(400, "text must be valid Unicode"))
        self._metrics.responses.labels(str(response.status)).inc()
        return response

    def _metadata(self, request: web.Request) -> tuple[tuple[str, str], ...]:
        header = request.headers.get("Authorization", "")
        if not header.startswith("Bearer ") or not header.removeprefix("Bearer ").strip():
            raise HttpError(401, "send 'Authorization: Bearer <token>'")
        return (("authorization", header),)

    async def _json_body(self, request: web.Request) -> dict[str, Any]:
        if request.content_length and request.content_length > self._settings.max_body_bytes:
            raise HttpError(413, f"the body is over {self._settings.max_body_bytes} bytes")
        try:
            body = await request.json()
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise HttpError(400, "the body is not valid JSON") from exc
        if not isinstance(body, dict):
            raise HttpError(400, "the body must be a JSON object")
        return body

    async def _unary(self, call: Awaitable[Any]) -> web.Response:
        reply = await call
        return web.json_response(json_format.MessageToDict(reply))

    # Streaming ----------------------------------------------------------------------------------

    async def _stream(
        self, request: web.Request, call: grpc.aio.UnaryStreamCall
    ) -> web.StreamResponse:
        """Relays a ChatEvent stream as SSE. Errors before the first event are HTTP statuses."""
        responses = aiter(call)
        try:
            first = await anext(responses)
        except grpc.aio.AioRpcError as error:
            raise _from_rpc(error) from error
        except StopAsyncIteration as exc:
            raise HttpError(502, "the gateway closed the stream without an event") from exc
        response = web.StreamResponse(headers=sse.STREAM_HEADERS)
        await response.prepare(request)
        self._metrics.open_streams.inc()
        try:
            await self._relay(response, first, responses)
        except (ConnectionResetError, asyncio.CancelledError):
            # The app went away; the gateway keeps writing the answer for a later resume.
            call.cancel()
            raise
        finally:
            self._metrics.open_streams.dec()
        return response

    async def _relay(
        self, response: web.StreamResponse, first: Any, rest: AsyncIterator[Any]
    ) -> None:
        """Writes each gRPC message's events (one, or a batch when the gateway was ahead)
        in one write."""
        await self._write_events(response, first)
        async with sse.KeepAlive(response, self._settings.keepalive_s) as keepalive:
            try:
                async for item in rest:
                    await self._write_events(response, item)
                    keepalive.wrote()
            except grpc.aio.AioRpcError as error:
                failure = CallFailure(error)
                lost = pb.ChatEvent(
                    error=pb.ErrorEvent(code=failure.code.value[0], message=failure.message)
                )
                await response.write(sse.encode(lost))

    async def _write_events(self, response: web.StreamResponse, item: Any) -> None:
        events = [item.event, *item.more]
        await response.write(b"".join(sse.encode(event) for event in events))
        self._metrics.events.inc(len(events))

    # Routes -------------------------------------------------------------------------------------

    async def send_message(self, request: web.Request) -> web.StreamResponse:
        metadata = self._metadata(request)
        body = await self._json_body(request)
        content = body.get("content")
        parent_id = body.get("parentId", "") or ""
        model = body.get("model", "auto")
        if not isinstance(content, str):
            raise HttpError(400, "'content' must be a string")
        if not isinstance(parent_id, str):
            raise HttpError(400, "'parentId' must be a string")
        if model not in MODEL_CHOICES:
            raise HttpError(400, "'model' must be one of auto, small, large")
        message_id = request.headers.get("Idempotency-Key") or f"m_{uuid.uuid4().hex}"
        call = self._chat.SendMessage(
            pb.SendMessageRequest(
                conversation_id=request.match_info["conversation_id"],
                message_id=message_id,
                parent_id=parent_id,
                content=content,
                model=MODEL_CHOICES[model],
            ),
            metadata=metadata,
        )
        return await self._stream(request, call)

    async def resume(self, request: web.Request) -> web.StreamResponse:
        metadata = self._metadata(request)
        raw = request.headers.get("Last-Event-ID") or request.query.get("lastEventId") or "0"
        # ASCII digits only ("²".isdigit() is true), and few enough to fit the uint64 field.
        if not EVENT_ID.fullmatch(raw):
            raise HttpError(400, "Last-Event-ID must be a non-negative integer")
        call = self._chat.AttachMessage(
            pb.AttachMessageRequest(
                message_id=request.match_info["message_id"], after_event_id=int(raw)
            ),
            metadata=metadata,
        )
        return await self._stream(request, call)

    async def stop(self, request: web.Request) -> web.Response:
        stop = pb.StopMessageRequest(message_id=request.match_info["message_id"])
        reply = await self._chat.StopMessage(
            stop, metadata=self._metadata(request), timeout=self._settings.rpc_timeout_s
        )
        return web.json_response({"stopped": reply.stopped})

    async def list_conversations(self, request: web.Request) -> web.Response:
        size = request.query.get("limit", "20")
        if not PAGE_SIZE.fullmatch(size):
            raise HttpError(400, "limit must be an integer from 1 to 100")
        ask = pb.ListConversationsRequest(
            page_size=int(size), page_token=request.query.get("cursor", "")
        )
        return await self._unary(
            self._chat.ListConversations(
                ask, metadata=self._metadata(request), timeout=self._settings.rpc_timeout_s
            )
        )

    async def get_conversation(self, request: web.Request) -> web.Response:
        ask = pb.GetConversationRequest(conversation_id=request.match_info["conversation_id"])
        return await self._unary(
            self._chat.GetConversation(
                ask, metadata=self._metadata(request), timeout=self._settings.rpc_timeout_s
            )
        )

    async def delete_conversation(self, request: web.Request) -> web.Response:
        ask = pb.DeleteConversationRequest(conversation_id=request.match_info["conversation_id"])
        await self._chat.DeleteConversation(
            ask, metadata=self._metadata(request), timeout=self._settings.rpc_timeout_s
        )
        return web.json_response({"deleted": True})

    async def list_messages(self, request: web.Request) -> web.Response:
        ask = pb.ListMessagesRequest(conversation_id=request.match_info["conversation_id"])
        return await self._unary(
            self._chat.ListMessages(
                ask, metadata=self._metadata(request), timeout=self._settings.rpc_timeout_s
            )
        )

    async def get_message(self, request: web.Request) -> web.Response:
        ask = pb.GetMessageRequest(message_id=request.match_info["message_id"])
        return await self._unary(
            self._chat.GetMessage(
                ask, metadata=self._metadata(request), timeout=self._settings.rpc_timeout_s
            )
        )

    async def limits(self, request: web.Request) -> web.Response:
        return await self._unary(
            self._chat.GetLimits(
                pb.GetLimitsRequest(),
                metadata=self._metadata(request),
                timeout=self._settings.rpc_timeout_s,
            )
        )

    async def healthz(self, _: web.Request) -> web.Response:
        return web.json_response({"status": "ok"})

    async def readyz(self, _: web.Request) -> web.Response:
        with contextlib.suppress(grpc.aio.AioRpcError):
            reply = await self._health.Check(health_pb2.HealthCheckRequest(), timeout=2)
            if reply.status == health_pb2.HealthCheckResponse.SERVING:
                return web.json_response({"status": "ready"})
        return error_response(503, "the gateway is not serving")

    async def not_found(self, _: web.Request) -> web.Response:
        raise HttpError(404, "no such endpoint")


# The web chat page: plain files from edge/static, no build step. ---------------------------------

STATIC_DIR = Path(__file__).parent / "static"
# One plain file name with a known type: no "/" and no "..", so nothing outside STATIC_DIR.
STATIC_NAME = re.compile(r"[A-Za-z0-9_-]+\.(html|js|css)")
STATIC_TYPES = {
    "html": "text/html; charset=utf-8",
    "js": "text/javascript; charset=utf-8",
    "css": "text/css; charset=utf-8",
}
PAGE_POLICY = "default-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"


async def static_file(request: web.Request) -> web.FileResponse:
    name = request.match_info.get("name", "index.html")
    match = STATIC_NAME.fullmatch(name)
    path = STATIC_DIR / name
    if match is None or not path.is_file():
        raise HttpError(404, "no such file")
    headers = {
        "Content-Type": STATIC_TYPES[match.group(1)],
        "Cache-Control": "no-cache",
        "X-Content-Type-Options": "nosniff",
    }
    if match.group(1) == "html":
        headers["Content-Security-Policy"] = PAGE_POLICY
    return web.FileResponse(path, headers=headers)


def build_app(
    channel: grpc.aio.Channel, settings: EdgeSettings, registry: CollectorRegistry
) -> web.Application:
    metrics = EdgeMetrics(registry)
    chat = pb_grpc.ChatServiceStub(channel)
    edge = Edge(chat, health_pb2_grpc.HealthStub(channel), settings, metrics)
    cors = Cors(settings.cors_origins)
    per_address = PerAddressLimit(settings.max_requests_per_ip, metrics)
    app = web.Application(
        middlewares=[edge.errors, cors.preflight, per_address.middleware],
        client_max_size=settings.max_body_bytes,
    )
    app[MAX_BODY_KEY] = settings.max_body_bytes
    app.on_response_prepare.append(cors.on_prepare)
    app.router.add_post("/v1/conversations/{conversation_id}/messages", edge.send_message)
    app.router.add_get("/v1/conversations", edge.list_conversations)
    app.router.add_get("/v1/conversations/{conversation_id}", edge.get_conversation)
    app.router.add_delete("/v1/conversations/{conversation_id}", edge.delete_conversation)
    app.router.add_get("/v1/conversations/{conversation_id}/messages", edge.list_messages)
    app.router.add_get("/v1/messages/{message_id}", edge.get_message)
    app.router.add_get("/v1/messages/{message_id}/stream", edge.resume)
    app.router.add_post("/v1/messages/{message_id}/stop", edge.stop)
    app.router.add_get("/v1/limits", edge.limits)
    OpenAIApi(chat, metrics, settings.keepalive_s, settings.rpc_timeout_s).register(app)
    app.router.add_get("/openapi.json", openapi_handler)
    app.router.add_get("/healthz", edge.healthz)
    app.router.add_get("/readyz", edge.readyz)
    app.router.add_get("/metrics", metrics_handler(registry))
    app.router.add_get("/", static_file)
    app.router.add_get("/static/{name}", static_file)
    return app
