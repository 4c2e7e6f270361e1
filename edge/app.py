"""The edge: the only place where gRPC becomes HTTP and server-sent events. Stateless."""

from __future__ import annotations

import asyncio
import json
import re
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
from aiohttp import web
from prometheus_client import CollectorRegistry

from domain.feedback import Rating
from edge import convert, memories, responses_tools, sse
from edge.errors import HttpError, error_for, error_response, from_rpc
from edge.files_api import FilesApi
from edge.gateways import Gateways, never_sent
from edge.metrics import EdgeMetrics
from edge.openai_api import MAX_BODY_KEY, OpenAIApi
from edge.openai_errors import OpenAIError
from edge.openapi import openapi_handler
from edge.ops import Cors, PerAddressLimit
from edge.relay import Relay
from edge.responses_api import ResponsesApi
from edge.responses_tool_input import parse_tools
from edge.resumable_completions import ResumableCompletions
from infra.convert import AUTO_MODEL
from infra.metrics import metrics_handler

EVENT_ID = re.compile(r"[0-9]{1,18}")
PAGE_SIZE = re.compile(r"[1-9][0-9]?|100")
RATINGS = frozenset(rating.value for rating in Rating)
FEEDBACK_FIELDS = ("rating", "comment")
MESSAGE_FIELDS = ("content", "parentId", "model", "tools")


def _tools(body: dict[str, Any]) -> list[Any]:
    """The tools the platform runs for the message, in the Responses API's shapes (an `mcp`
    server, the operator's by type); this API has no approvals, so a server's calls run
    without one unless the body asks (which the gateway refuses)."""
    try:
        return responses_tools.platform_tools_pb(parse_tools(body, mcp_approval="never"))
    except OpenAIError as error:
        raise HttpError(400, error.message) from error


def _only_fields(body: dict[str, Any], known: tuple[str, ...]) -> None:
    """A field the route does not know is refused, worded as the OpenAI-compatible routes word
    it: a misspelt one ("coment") would otherwise be dropped without a word."""
    for name in body:
        if name not in known:
            raise HttpError(400, f"unrecognized request argument supplied: {name}")


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
    # How long a stream whose gateway went away may take to carry on through another one
    # before the client is sent an error event.
    reattach_timeout_s: float = 10.0
    # /metrics on the public HTTP port; off when the edge serves it on a port of its own.
    metrics_on_http: bool = True
    # The largest file POST /v1/files reads (the gateway keeps its own limit, files.max_bytes).
    max_file_bytes: int = 1_048_576


class Edge:
    def __init__(
        self,
        gateways: Gateways,
        settings: EdgeSettings,
        metrics: EdgeMetrics,
        keepalives: sse.KeepAlives,
    ) -> None:
        self._gateways = gateways
        self._settings = settings
        self._metrics = metrics
        self._relay = Relay(gateways, metrics, keepalives, settings.reattach_timeout_s)

    # Plumbing -----------------------------------------------------------------------------------

    @web.middleware
    async def errors(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        try:
            response = await handler(request)
        except HttpError as error:
            response = error_for(request, error)
        except grpc.aio.AioRpcError as rpc_error:
            response = error_for(request, from_rpc(rpc_error))
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

    async def _unary(
        self, send: Callable[[Any], Awaitable[Any]], to_json: Callable[[Any], dict[str, Any]]
    ) -> web.Response:
        """A read, at the next live gateway."""
        reply = await self._gateways.call(send)
        return web.json_response(to_json(reply))

    # Routes -------------------------------------------------------------------------------------

    async def send_message(self, request: web.Request) -> web.StreamResponse:
        metadata = self._metadata(request)
        body = await self._json_body(request)
        _only_fields(body, MESSAGE_FIELDS)
        content = body.get("content")
        parent_id = body.get("parentId", "") or ""
        model = body.get("model", AUTO_MODEL)
        if not isinstance(content, str):
            raise HttpError(400, "'content' must be a string")
        if not isinstance(parent_id, str):
            raise HttpError(400, "'parentId' must be a string")
        if model not in convert.MODEL_CHOICES:
            raise HttpError(400, "'model' must be one of auto, small, large")
        message_id = request.headers.get("Idempotency-Key") or f"m_{uuid.uuid4().hex}"
        send = convert.send_request(
            request.match_info["conversation_id"], message_id, parent_id, content, model
        )
        send.platform_tools.extend(_tools(body))
        return await self._relay.stream(
            request, lambda chat: chat.SendMessage(send, metadata=metadata), message_id, metadata
        )

    async def resume(self, request: web.Request) -> web.StreamResponse:
        metadata = self._metadata(request)
        raw = request.headers.get("Last-Event-ID") or request.query.get("lastEventId") or "0"
        # ASCII digits only ("²".isdigit() is true), and few enough to fit the uint64 field.
        if not EVENT_ID.fullmatch(raw):
            raise HttpError(400, "Last-Event-ID must be a non-negative integer")
        message_id = request.match_info["message_id"]
        attach = convert.attach_request(message_id, int(raw))
        return await self._relay.stream(
            request,
            lambda chat: chat.AttachMessage(attach, metadata=metadata),
            message_id,
            metadata,
        )

    async def stop(self, request: web.Request) -> web.Response:
        stop = convert.stop_request(request.match_info["message_id"])
        metadata, timeout = self._metadata(request), self._settings.rpc_timeout_s
        # A stop that reached a gateway is not sent again: the second would answer "not
        # stopped" for the answer the first one stopped.
        reply = await self._gateways.call(
            lambda chat: chat.StopMessage(stop, metadata=metadata, timeout=timeout), never_sent
        )
        return web.json_response({"stopped": reply.stopped})

    async def list_conversations(self, request: web.Request) -> web.Response:
        size = request.query.get("limit", "20")
        if not PAGE_SIZE.fullmatch(size):
            raise HttpError(400, "limit must be an integer from 1 to 100")
        ask = convert.list_conversations_request(int(size), request.query.get("cursor", ""))
        metadata, timeout = self._metadata(request), self._settings.rpc_timeout_s
        return await self._unary(
            lambda chat: chat.ListConversations(ask, metadata=metadata, timeout=timeout),
            convert.conversation_page_json,
        )

    async def get_conversation(self, request: web.Request) -> web.Response:
        ask = convert.get_conversation_request(request.match_info["conversation_id"])
        metadata, timeout = self._metadata(request), self._settings.rpc_timeout_s
        return await self._unary(
            lambda chat: chat.GetConversation(ask, metadata=metadata, timeout=timeout),
            convert.conversation_reply_json,
        )

    async def delete_conversation(self, request: web.Request) -> web.Response:
        ask = convert.delete_conversation_request(request.match_info["conversation_id"])
        metadata, timeout = self._metadata(request), self._settings.rpc_timeout_s
        # A delete that reached a gateway is not sent again: the second would answer 404.
        await self._gateways.call(
            lambda chat: chat.DeleteConversation(ask, metadata=metadata, timeout=timeout),
            never_sent,
        )
        return web.json_response({"deleted": True})

    async def list_messages(self, request: web.Request) -> web.Response:
        ask = convert.list_messages_request(request.match_info["conversation_id"])
        metadata, timeout = self._metadata(request), self._settings.rpc_timeout_s
        return await self._unary(
            lambda chat: chat.ListMessages(ask, metadata=metadata, timeout=timeout),
            convert.messages_json,
        )

    async def get_message(self, request: web.Request) -> web.Response:
        ask = convert.get_message_request(request.match_info["message_id"])
        metadata, timeout = self._metadata(request), self._settings.rpc_timeout_s
        return await self._unary(
            lambda chat: chat.GetMessage(ask, metadata=metadata, timeout=timeout),
            convert.message_reply_json,
        )

    async def rate(self, request: web.Request) -> web.Response:
        metadata, timeout = self._metadata(request), self._settings.rpc_timeout_s
        body = await self._json_body(request)
        _only_fields(body, FEEDBACK_FIELDS)
        rating = body.get("rating")
        # null, like a missing comment, is none.
        comment = body.get("comment")
        comment = "" if comment is None else comment
        if not isinstance(rating, str) or rating not in RATINGS:
            raise HttpError(400, "'rating' must be up or down")
        if not isinstance(comment, str):
            raise HttpError(400, "'comment' must be a string")
        ask = convert.rate_request(request.match_info["message_id"], rating, comment)
        # A rating sent again replaces itself: safe to retry at another gateway.
        return await self._unary(
            lambda chat: chat.RateMessage(ask, metadata=metadata, timeout=timeout),
            convert.rating_json,
        )

    async def list_memories(self, request: web.Request) -> web.Response:
        metadata, timeout = self._metadata(request), self._settings.rpc_timeout_s
        ask = memories.list_request()
        return await self._unary(
            lambda chat: chat.ListMemories(ask, metadata=metadata, timeout=timeout),
            memories.list_json,
        )

    async def create_memory(self, request: web.Request) -> web.Response:
        metadata, timeout = self._metadata(request), self._settings.rpc_timeout_s
        ask = memories.create_request(await self._json_body(request))
        # Sent once: a second try at another gateway could keep the entry twice.
        reply = await self._gateways.call(
            lambda chat: chat.CreateMemory(ask, metadata=metadata, timeout=timeout), never_sent
        )
        return web.json_response(memories.memory_reply_json(reply), status=201)

    async def update_memory(self, request: web.Request) -> web.Response:
        metadata, timeout = self._metadata(request), self._settings.rpc_timeout_s
        body = await self._json_body(request)
        ask = memories.update_request(request.match_info["memory_id"], body)
        return await self._unary(
            lambda chat: chat.UpdateMemory(ask, metadata=metadata, timeout=timeout),
            memories.memory_reply_json,
        )

    async def delete_memory(self, request: web.Request) -> web.Response:
        metadata, timeout = self._metadata(request), self._settings.rpc_timeout_s
        ask = memories.delete_request(request.match_info["memory_id"])
        await self._gateways.call(
            lambda chat: chat.DeleteMemory(ask, metadata=metadata, timeout=timeout), never_sent
        )
        return web.json_response({"deleted": True})

    async def limits(self, request: web.Request) -> web.Response:
        metadata, timeout = self._metadata(request), self._settings.rpc_timeout_s
        ask = convert.limits_request()
        return await self._unary(
            lambda chat: chat.GetLimits(ask, metadata=metadata, timeout=timeout),
            convert.limits_json,
        )

    async def healthz(self, _: web.Request) -> web.Response:
        return web.json_response({"status": "ok"})

    async def readyz(self, _: web.Request) -> web.Response:
        """Ready while any gateway serves; each gateway's state is listed for operators."""
        states = await asyncio.gather(*(g.serving_state() for g in self._gateways.all))
        gateways = {
            gateway.address: state
            for gateway, state in zip(self._gateways.all, states, strict=True)
        }
        if "serving" in states:
            return web.json_response({"status": "ready", "gateways": gateways})
        return error_response(503, "no gateway is serving")

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
    gateways: Gateways | grpc.aio.Channel, settings: EdgeSettings, registry: CollectorRegistry
) -> web.Application:
    """gateways: the gateways to call, or one channel to one gateway."""
    if isinstance(gateways, grpc.aio.Channel):
        gateways = Gateways([("gateway", gateways)])
    metrics = EdgeMetrics(registry)
    # One keep-alive ticker for every stream this process serves, whatever its API.
    keepalives = sse.KeepAlives(settings.keepalive_s)
    edge = Edge(gateways, settings, metrics, keepalives)
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
    app.router.add_post("/v1/messages/{message_id}/feedback", edge.rate)
    app.router.add_get("/v1/limits", edge.limits)
    app.router.add_get("/v1/memories", edge.list_memories)
    app.router.add_post("/v1/memories", edge.create_memory)
    app.router.add_patch("/v1/memories/{memory_id}", edge.update_memory)
    app.router.add_delete("/v1/memories/{memory_id}", edge.delete_memory)
    OpenAIApi(gateways, metrics, keepalives, settings.rpc_timeout_s).register(app)
    ResponsesApi(gateways, metrics, keepalives, settings.rpc_timeout_s).register(app)
    ResumableCompletions(gateways, metrics, keepalives).register(app)
    FilesApi(gateways, settings.rpc_timeout_s, settings.max_file_bytes).register(app)
    app.router.add_get("/openapi.json", openapi_handler)
    app.router.add_get("/healthz", edge.healthz)
    app.router.add_get("/readyz", edge.readyz)
    if settings.metrics_on_http:
        app.router.add_get("/metrics", metrics_handler(registry))
    app.router.add_get("/", static_file)
    app.router.add_get("/static/{name}", static_file)
    return app
