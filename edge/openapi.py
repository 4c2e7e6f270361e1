"""The edge's OpenAPI 3.1 document, served at /openapi.json. Written by hand, beside the routes;
a test proves every registered route is described here and every path here is registered."""

from __future__ import annotations

from typing import Any

from aiohttp import web

from domain.feedback import MAX_COMMENT_CHARS, Rating
from domain.types import Finish, Role, Tier
from edge.openai_schemas import OPENAI_REQUEST_SCHEMAS
from edge.openapi_files import FILE_PATHS, FILE_SCHEMAS
from edge.openapi_memories import MEMORY_PATHS, MEMORY_SCHEMAS
from edge.openapi_responses import (
    MCP_TOOL,
    OPERATOR_TOOL,
    POOL_HEADERS,
    RESPONSES_PATHS,
    RESPONSES_SCHEMAS,
)
from infra.convert import MODEL_CHOICES

JSON = "application/json"
SSE = "text/event-stream"
ID = {"type": "string", "pattern": "^[A-Za-z0-9_-]{1,64}$"}
PARENT_ID = {"type": "string", "pattern": "^[A-Za-z0-9_-]{1,64}(\\.answer)?$"}


def _ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{name}"}


def _json(schema: dict[str, Any], description: str) -> dict[str, Any]:
    return {"description": description, "content": {JSON: {"schema": schema}}}


def _errors(*statuses: int) -> dict[str, Any]:
    reasons = {
        400: "the request is malformed; the message says why",
        401: "no bearer token, or one the platform does not know",
        403: "not allowed (a cross-origin preflight from an origin not listed)",
        404: "no such resource for this user",
        409: "the idempotency key was used for another request",
        413: "the body (or the message) is over the limit",
        429: "a limit or the shedding ladder: wait Retry-After seconds",
        503: "the platform cannot serve now",
    }
    answers: dict[str, Any] = {str(s): _json(_ref("Error"), reasons[s]) for s in statuses}
    if 429 in statuses:
        answers["429"]["headers"] = {"Retry-After": {"schema": {"type": "integer"}}}
    return answers


def _openai_errors(*statuses: int) -> dict[str, Any]:
    answers = _errors(*statuses)
    for answer in answers.values():
        answer["content"][JSON]["schema"] = _ref("OpenAIError")
    return answers


def _path_param(name: str, schema: dict[str, Any]) -> dict[str, Any]:
    return {"name": name, "in": "path", "required": True, "schema": schema}


def _op(summary: str, responses: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"summary": summary, "responses": responses, **extra}


STREAM_200 = {
    "description": (
        "the answer's events: meta {messageId, conversationId, model, replica, region, "
        "regionNotice}, delta {text}"
        "..., then done {finish, usage {input, cached, output}} or error {code, message}; ids "
        "count 1, 2, 3. retract {withdrawnChars} (a tier in retract mode): remove all of the "
        "answer's text shown so far; the refusal follows as a delta. meta also names the model "
        "version serving (version) and, as downgraded, why a smaller pool answers "
        "(daily_budget: the day's allowance is spent; empty otherwise), slice the user's "
        "slice of the rollout (current, candidate, holdout, kept, pinned), pool the pool that "
        "serves (empty for an answer no model wrote) and poolReason why it is not the one "
        "model asked for, empty when it is (as the header X-Pool-Reason). A stream that starts "
        "with meta has the headers X-Pool and X-Pool-Reason too. A message with tools has, "
        "between meta and its text, toolsListed {server, tools [{name, description, "
        "parameters}], error}, and for each call the platform runs toolCall {callId, server, "
        "name, arguments} then toolResult {callId, output, error}"
    ),
    "content": {SSE: {"schema": {"type": "string"}}},
    "headers": POOL_HEADERS,
}
CONVERSATION = _path_param("conversation_id", ID)
MESSAGE = _path_param("message_id", PARENT_ID)
STRING = {"type": "string"}
COUNT = {"type": "integer", "minimum": 0}
TIME = {"type": "string", "format": "date-time"}


def _object(properties: dict[str, Any]) -> dict[str, Any]:
    """Every property is always there (edge/convert.py)."""
    return {
        "type": "object",
        "required": list(properties),
        "properties": properties,
        "additionalProperties": False,
    }


SCHEMAS: dict[str, Any] = {
    "Error": {
        "type": "object",
        "required": ["error"],
        "properties": {
            "error": {
                "type": "object",
                "required": ["status", "message"],
                "properties": {"status": {"type": "integer"}, "message": {"type": "string"}},
            }
        },
    },
    "OpenAIError": {
        "type": "object",
        "required": ["error"],
        "properties": {
            "error": {
                "type": "object",
                "required": ["message", "type"],
                "properties": {
                    "message": {"type": "string"},
                    "type": {"type": "string"},
                    "param": {"type": ["string", "null"]},
                    "code": {"type": ["string", "null"]},
                },
            }
        },
    },
    "SendMessage": {
        "type": "object",
        "required": ["content"],
        "properties": {
            "content": {"type": "string", "minLength": 1, "maxLength": 32000},
            "parentId": PARENT_ID,
            "model": {"type": "string", "enum": list(MODEL_CHOICES)},
            "tools": {
                "type": "array",
                "maxItems": 16,
                "description": "tools the platform runs for this message (as the Responses "
                "API's: an mcp server, the operator's by type); no approvals here, so a "
                "server's calls run without one. The answer is the last of several model "
                "calls; only its text is stored",
                "items": {"oneOf": [MCP_TOOL, OPERATOR_TOOL]},
            },
        },
        "additionalProperties": False,
    },
    "Conversation": _object(
        {
            "conversationId": STRING,
            "title": STRING,
            "model": STRING,
            "totalTokens": COUNT,
            "createdAt": TIME,
            "updatedAt": TIME,
        }
    ),
    "Message": _object(
        {
            "messageId": STRING,
            "conversationId": STRING,
            "seq": COUNT,
            "parentId": {**STRING, "description": "the message answered; empty for none"},
            "role": {"enum": [role.value for role in Role]},
            "content": STRING,
            "tokens": COUNT,
            "model": {**STRING, "description": "the model that wrote it, or counted its tokens"},
            "replica": {
                **STRING,
                "description": "the replica that wrote it (as in meta); empty for a user's",
            },
            "finish": {
                "enum": [*(finish.value for finish in Finish), None],
                "description": "how the answer ended, as in done; null for a user's turn",
            },
            "createdAt": TIME,
            "region": {**STRING, "description": "the region that served it; empty with one"},
        }
    ),
    "ConversationPage": _object(
        {
            "conversations": {"type": "array", "items": _ref("Conversation")},
            "nextCursor": {**STRING, "description": "the next page's cursor; empty after the last"},
        }
    ),
    "Feedback": {
        "type": "object",
        "required": ["rating"],
        "properties": {
            "rating": {"enum": [rating.value for rating in Rating]},
            "comment": {"type": ["string", "null"], "maxLength": MAX_COMMENT_CHARS},
        },
        "additionalProperties": False,
    },
    "Rating": _object(
        {
            "messageId": STRING,
            "rating": {"enum": [rating.value for rating in Rating]},
            "version": {
                **STRING,
                "description": "the model version that served the answer; empty for none",
            },
        }
    ),
    "Limits": _object(
        {
            "tier": {"enum": [tier.value for tier in Tier]},
            "level": {"type": "number", "description": "tokens of budget left"},
            "capacity": {"type": "number"},
            "refillPerSecond": {"type": "number"},
            "fullInSeconds": {"type": "number"},
        }
    ),
    # The chat-completions request, field by field (edge/openai_schemas.py).
    **OPENAI_REQUEST_SCHEMAS,
    "ChatCompletion": {
        "type": "object",
        "required": ["id", "object", "created", "model", "choices", "usage"],
        "properties": {
            "id": {"type": "string"},
            "object": {"const": "chat.completion"},
            "created": {"type": "integer"},
            "model": {"type": "string"},
            "system_fingerprint": {
                "type": "string",
                "description": "version@replica: the model version and the replica that served",
            },
            "choices": {"type": "array", "items": {"type": "object"}},
            "usage": {"type": "object"},
        },
    },
    "Model": {
        "type": "object",
        "required": ["id", "object", "owned_by"],
        "properties": {
            "id": {"type": "string"},
            "object": {"const": "model"},
            "created": {"type": "integer"},
            "owned_by": {"type": "string"},
        },
    },
}

CONVERSATION_PATHS: dict[str, Any] = {
    "/v1/conversations": {
        "get": _op(
            "Lists the caller's conversations, newest first",
            {
                "200": _json(_ref("ConversationPage"), "a page of conversations"),
                **_errors(400, 401),
            },
            parameters=[
                {
                    "name": "limit",
                    "in": "query",
                    "schema": {"type": "integer", "minimum": 1, "maximum": 100},
                },
                {"name": "cursor", "in": "query", "schema": {"type": "string"}},
            ],
        )
    },
    "/v1/conversations/{conversation_id}": {
        "parameters": [CONVERSATION],
        "get": _op(
            "Reads one conversation",
            {
                "200": _json(_object({"conversation": _ref("Conversation")}), "the conversation"),
                **_errors(400, 401, 404),
            },
        ),
        "delete": _op(
            "Deletes a conversation and its messages",
            {
                "200": _json(_object({"deleted": {"const": True}}), "deleted"),
                **_errors(400, 401, 404),
            },
        ),
    },
    "/v1/conversations/{conversation_id}/messages": {
        "parameters": [CONVERSATION],
        "post": _op(
            "Sends a message (the first one creates the conversation) and streams the answer",
            {"200": STREAM_200, **_errors(400, 401, 404, 409, 413, 429, 503)},
            parameters=[
                {"name": "Idempotency-Key", "in": "header", "schema": ID},
                {"name": "Accept", "in": "header", "schema": {"type": "string"}},
            ],
            requestBody={"required": True, "content": {JSON: {"schema": _ref("SendMessage")}}},
        ),
        "get": _op(
            "Lists a conversation's messages, oldest first",
            {
                "200": _json(
                    _object({"messages": {"type": "array", "items": _ref("Message")}}),
                    "the messages",
                ),
                **_errors(400, 401, 404),
            },
        ),
    },
    "/v1/messages/{message_id}": {
        "parameters": [MESSAGE],
        "get": _op(
            "Reads one message",
            {
                "200": _json(_object({"message": _ref("Message")}), "the message"),
                **_errors(400, 401, 404),
            },
        ),
    },
    "/v1/messages/{message_id}/stream": {
        "parameters": [MESSAGE],
        "get": _op(
            "Replays an answer's events after Last-Event-ID, then follows it live",
            {"200": STREAM_200, **_errors(400, 401, 404)},
            parameters=[
                {
                    "name": "Last-Event-ID",
                    "in": "header",
                    "schema": {"type": "string", "pattern": "^[0-9]{1,18}$"},
                },
                {"name": "lastEventId", "in": "query", "schema": {"type": "integer", "minimum": 0}},
            ],
        ),
    },
    "/v1/messages/{message_id}/stop": {
        "parameters": [MESSAGE],
        "post": _op(
            "Stops an answer and frees its GPU slot at once",
            {
                "200": _json(_object({"stopped": {"type": "boolean"}}), "whether it was running"),
                **_errors(400, 401, 404),
            },
        ),
    },
    "/v1/messages/{message_id}/feedback": {
        "parameters": [MESSAGE],
        "post": _op(
            "Rates one of the caller's answers thumbs up or down, with an optional comment; "
            "rating again replaces the rating",
            {
                "200": _json(_ref("Rating"), "the rating stored"),
                **_errors(400, 401, 404, 413),
            },
            requestBody={"required": True, "content": {JSON: {"schema": _ref("Feedback")}}},
        ),
    },
    "/v1/limits": {
        "get": _op(
            "The caller's token bucket",
            {"200": _json(_ref("Limits"), "the bucket"), **_errors(401)},
        )
    },
}

OPENAI_PATHS: dict[str, Any] = {
    "/v1/chat/completions": {
        "post": _op(
            "OpenAI-compatible chat completion; nothing is stored",
            {
                "200": {
                    "description": "a chat.completion, or chat.completion.chunk events when "
                    "stream is true, ending with `data: [DONE]`; header X-Replica names the "
                    "replica that served, X-Pool the pool and X-Pool-Reason why it is not the "
                    "one model asked for",
                    "content": {
                        JSON: {"schema": _ref("ChatCompletion")},
                        SSE: {"schema": {"type": "string"}},
                    },
                    "headers": {
                        "X-Replica": {"schema": {"type": "string"}},
                        **POOL_HEADERS,
                    },
                },
                **_openai_errors(400, 401, 404, 413, 429, 503),
            },
            parameters=[
                {"name": "X-Session-Id", "in": "header", "schema": {"type": "string"}},
                # An extension: the completion runs on when its client goes, for a resume.
                {"name": "X-Resumable", "in": "header", "schema": {"enum": ["true", "false"]}},
            ],
            requestBody={
                "required": True,
                "content": {JSON: {"schema": _ref("ChatCompletionRequest")}},
            },
        )
    },
    "/v1/models": {
        "get": _op(
            "The models a completion may ask for: auto (the router chooses), small, large",
            {
                "200": _json(
                    {
                        "type": "object",
                        "properties": {"data": {"type": "array", "items": _ref("Model")}},
                    },
                    "an OpenAI model list",
                ),
                **_openai_errors(401),
            },
        )
    },
    "/v1/models/{model}": {
        "parameters": [_path_param("model", {"type": "string"})],
        "get": _op(
            "One model", {"200": _json(_ref("Model"), "the model"), **_openai_errors(401, 404)}
        ),
    },
}

OPERATIONS_PATHS: dict[str, Any] = {
    "/healthz": {"get": _op("Liveness: the process answers", {"200": _json({}, "alive")})},
    "/readyz": {
        "get": _op(
            "Readiness: a gateway behind this edge is serving; each gateway's state is listed",
            {"200": _json({}, "ready"), **_errors(503)},
        )
    },
    "/metrics": {
        "get": _op(
            "Prometheus metrics: open streams, SSE events written, responses by status",
            {"200": {"description": "metrics", "content": {"text/plain": {"schema": {}}}}},
        )
    },
    "/openapi.json": {"get": _op("This document", {"200": _json({}, "OpenAPI 3.1")})},
    "/": {
        "get": _op(
            "The web chat page",
            {"200": {"description": "HTML", "content": {"text/html": {"schema": {}}}}},
        )
    },
    "/static/{name}": {
        "parameters": [_path_param("name", {"type": "string"})],
        "get": _op(
            "The web chat page's script and style",
            {
                "200": {"description": "a file", "content": {"text/plain": {"schema": {}}}},
                **_errors(404),
            },
        ),
    },
}

PUBLIC_PATHS = frozenset(OPERATIONS_PATHS)


def build_document() -> dict[str, Any]:
    paths = {**CONVERSATION_PATHS, **MEMORY_PATHS, **OPENAI_PATHS, **RESPONSES_PATHS,
             **FILE_PATHS, **OPERATIONS_PATHS}  # fmt: skip
    for path, item in paths.items():
        if path in PUBLIC_PATHS:
            for method in ("get", "post", "delete"):
                if method in item:
                    item[method]["security"] = []
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "chat platform edge",
            "version": "1",
            "description": "HTTP and server-sent events in front of the gateways, and an "
            "OpenAI-compatible API. Errors before the first byte are HTTP statuses with a JSON "
            "body; after it they are `error` events.",
        },
        "paths": paths,
        "components": {
            "schemas": {**SCHEMAS, **MEMORY_SCHEMAS, **RESPONSES_SCHEMAS, **FILE_SCHEMAS},
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        },
        "security": [{"bearer": []}],
    }


DOCUMENT = build_document()


async def openapi_handler(_: web.Request) -> web.Response:
    return web.json_response(DOCUMENT)
