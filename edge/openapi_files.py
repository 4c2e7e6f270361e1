"""The OpenAPI document's part for OpenAI's Files API at /v1/files (edge/files_api.py), merged
into it by edge/openapi.py."""

from __future__ import annotations

from typing import Any

JSON = "application/json"
ERROR = {"$ref": "#/components/schemas/OpenAIError"}
FILE = {"$ref": "#/components/schemas/File"}
REASONS = {
    400: "not a file the platform can search (not UTF-8 text, empty, over the gateway's "
    "files.max_bytes), a bad name or purpose, or a malformed form; the message says why",
    401: "no bearer token, or one the platform does not know",
    404: "the caller has no such file",
    409: "the caller keeps the most files allowed, or is served outside their home region",
    413: "the file is over the edge's max_file_bytes",
    503: "the platform cannot serve now",
}
FILE_ID = {
    "name": "file_id",
    "in": "path",
    "required": True,
    "schema": {"type": "string", "pattern": "^file-[A-Za-z0-9]{1,59}$"},
}


def _errors(*statuses: int) -> dict[str, Any]:
    return {str(s): {"description": REASONS[s], "content": {JSON: {"schema": ERROR}}}
            for s in statuses}  # fmt: skip


def _ok(description: str, schema: dict[str, Any]) -> dict[str, Any]:
    return {"200": {"description": description, "content": {JSON: {"schema": schema}}}}


FILE_SCHEMAS: dict[str, Any] = {
    "File": {
        "type": "object",
        "required": ["id", "object", "bytes", "created_at", "filename", "purpose", "status"],
        "properties": {
            "id": {"type": "string"},
            "object": {"const": "file"},
            "bytes": {"type": "integer"},
            "created_at": {"type": "integer", "description": "unix seconds"},
            "filename": {"type": "string"},
            "purpose": {"enum": ["user_data", "assistants"]},
            "status": {
                "const": "processed",
                "description": "cut into passages and indexed before the upload is answered",
            },
            "expires_at": {"type": "null"},
            "status_details": {"type": "null"},
        },
    },
}

FILE_PATHS: dict[str, Any] = {
    "/v1/files": {
        "post": {
            "summary": "Uploads a UTF-8 text file for the file_search tool, which searches its "
            "passages; an answer may cite a passage as [[cite:<file id>#<index>]]",
            "requestBody": {
                "required": True,
                "content": {
                    "multipart/form-data": {
                        "schema": {
                            "type": "object",
                            "required": ["file", "purpose"],
                            "properties": {
                                "file": {"type": "string", "format": "binary"},
                                "purpose": {"enum": ["user_data", "assistants"]},
                            },
                        }
                    }
                },
            },
            "responses": {
                **_ok("the file as kept", FILE),
                **_errors(400, 401, 409, 413, 503),
            },
        },
        "get": {
            "summary": "The caller's files, the newest first",
            "responses": {
                **_ok(
                    "the files",
                    {
                        "type": "object",
                        "required": ["object", "data", "has_more"],
                        "properties": {
                            "object": {"const": "list"},
                            "data": {"type": "array", "items": FILE},
                            "has_more": {"type": "boolean"},
                            "first_id": {"type": ["string", "null"]},
                            "last_id": {"type": ["string", "null"]},
                        },
                    },
                ),
                **_errors(401, 409, 503),
            },
        },
    },
    "/v1/files/{file_id}": {
        "get": {
            "summary": "One of the caller's files",
            "parameters": [FILE_ID],
            "responses": {**_ok("the file", FILE), **_errors(401, 404, 409, 503)},
        },
        "delete": {
            "summary": "Deletes the file and its passages: no later search finds them",
            "parameters": [FILE_ID],
            "responses": {
                **_ok(
                    "deleted",
                    {
                        "type": "object",
                        "required": ["id", "object", "deleted"],
                        "properties": {
                            "id": {"type": "string"},
                            "object": {"const": "file"},
                            "deleted": {"const": True},
                        },
                    },
                ),
                **_errors(401, 404, 409, 503),
            },
        },
    },
    "/v1/files/{file_id}/content": {
        "get": {
            "summary": "The file's text, as uploaded",
            "parameters": [FILE_ID],
            "responses": {
                "200": {
                    "description": "the text",
                    "content": {"text/plain": {"schema": {"type": "string"}}},
                },
                **_errors(401, 404, 409, 503),
            },
        },
    },
}
