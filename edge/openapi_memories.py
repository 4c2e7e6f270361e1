"""The OpenAPI document's part for /v1/memories (edge/memories.py), merged into it by
edge/openapi.py."""

from __future__ import annotations

from typing import Any

ID = {"type": "string", "pattern": "^[A-Za-z0-9_-]{1,64}$"}
TIME = {"type": "string", "format": "date-time"}
JSON = "application/json"


def _ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{name}"}


def _json(schema: dict[str, Any], description: str) -> dict[str, Any]:
    return {"description": description, "content": {JSON: {"schema": schema}}}


def _errors(*statuses: int) -> dict[str, Any]:
    reasons = {
        400: "the request is malformed, or the text cannot be kept (empty, too long, or it "
        "did not pass the input check); the message says why",
        401: "no bearer token, or one the platform does not know",
        404: "the caller has no such entry",
        409: "the memory is full: delete an entry first",
        503: "the platform cannot serve now",
    }
    return {str(s): _json(_ref("Error"), reasons[s]) for s in statuses}


MEMORY_SCHEMAS: dict[str, Any] = {
    "Memory": {
        "type": "object",
        "required": ["id", "text", "pinned", "source", "createdAt", "updatedAt", "aged"],
        "properties": {
            "id": ID,
            "text": {"type": "string"},
            "pinned": {"type": "boolean", "description": "a pinned entry never ages"},
            "source": {
                "enum": ["user", "model"],
                "description": "user: written here; model: a remember call in one of the "
                "user's turns",
            },
            "createdAt": TIME,
            "updatedAt": {**TIME, "description": "when its text or pin last changed"},
            "aged": {
                "type": "boolean",
                "description": "not written for the operator's max age and not pinned: kept "
                "and listed, never read into a turn",
            },
        },
        "additionalProperties": False,
    },
    "MemoryWrite": {
        "type": "object",
        "properties": {
            "text": {
                "type": "string",
                "description": "trimmed; at most the operator's max_chars (500 by default)",
            },
            "pinned": {"type": "boolean"},
        },
        "additionalProperties": False,
    },
}

_LIST = {
    "type": "object",
    "required": ["memories"],
    "properties": {"memories": {"type": "array", "items": _ref("Memory")}},
}
_ENTRY = {"type": "object", "required": ["memory"], "properties": {"memory": _ref("Memory")}}

MEMORY_PATHS: dict[str, Any] = {
    "/v1/memories": {
        "get": {
            "summary": "The caller's memory, the newest written first. A stored conversation's "
            "turn reads the few entries most relevant to its message (none aged unless pinned)",
            "responses": {
                "200": _json(_LIST, "the entries"),
                **_errors(401, 503),
            },
        },
        "post": {
            "summary": "Keeps an entry (text required, pinned false unless given)",
            "requestBody": {"required": True, "content": {JSON: {"schema": _ref("MemoryWrite")}}},
            "responses": {"201": _json(_ENTRY, "the entry kept"), **_errors(400, 401, 409, 503)},
        },
    },
    "/v1/memories/{memory_id}": {
        "parameters": [{"name": "memory_id", "in": "path", "required": True, "schema": ID}],
        "patch": {
            "summary": "Changes an entry's text, its pin, or both (what the body names); the "
            "entry is written again, so it ages from now",
            "requestBody": {"required": True, "content": {JSON: {"schema": _ref("MemoryWrite")}}},
            "responses": {
                "200": _json(_ENTRY, "the entry as kept"),
                **_errors(400, 401, 404, 503),
            },
        },
        "delete": {
            "summary": "Deletes an entry: no later turn reads it",
            "responses": {
                "200": _json(
                    {"type": "object", "properties": {"deleted": {"const": True}}}, "deleted"
                ),
                **_errors(400, 401, 404, 503),
            },
        },
    },
}
