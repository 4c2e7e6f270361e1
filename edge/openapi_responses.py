"""The OpenAPI description of the Responses API (edge/responses_api.py) and of the resumable
chat completions' resume (edge/resumable_completions.py); edge/openapi.py merges it in."""

from __future__ import annotations

from typing import Any

from infra.convert import MODEL_CHOICES

JSON = "application/json"
SSE = "text/event-stream"
RESPONSE_ID = {"type": "string", "pattern": "^resp_[A-Za-z0-9_-]{1,59}$"}
ERROR = {"$ref": "#/components/schemas/OpenAIError"}
REASONS = {
    400: "the request is malformed; `param` names the field",
    401: "no bearer token, or one the platform does not know",
    403: "a tool named that the plan may not run",
    404: "no such response (or model) for this user",
    413: "the body is over the limit",
    429: "a limit or the shedding ladder: wait Retry-After seconds",
    503: "the platform cannot serve now",
}
# On every answer's response, from its meta event (a stream resumed after it has none).
POOL_HEADERS = {
    "X-Pool": {
        "description": "the pool that served the answer; absent for one no model wrote (a "
        "refusal of the input check, busy)",
        "schema": {"enum": ["small", "large"]},
    },
    "X-Pool-Reason": {
        "description": "why X-Pool is not the pool the request's model asked for; absent when "
        "it is: router (auto: the router chose), tier (picking a pool is Plus's: a Free "
        "request is routed as auto), allowance (the day's allowance is spent), ladder (Free is "
        "shed to small while the fleet is busy), fallback (the pool had no replica or its "
        "breaker was open). More may come",
        "schema": {"type": "string"},
    },
}


def _errors(*statuses: int) -> dict[str, Any]:
    answers = {
        str(s): {"description": REASONS[s], "content": {JSON: {"schema": ERROR}}} for s in statuses
    }
    if 429 in statuses:
        answers["429"]["headers"] = {"Retry-After": {"schema": {"type": "integer"}}}
    return answers


def _ok(
    description: str, schema: dict[str, Any], stream: bool = False, served: bool = False
) -> dict[str, Any]:
    """served: the response names the pool that served (POOL_HEADERS)."""
    content: dict[str, Any] = {JSON: {"schema": schema}}
    if stream:
        content[SSE] = {"schema": {"type": "string"}}
    ok: dict[str, Any] = {"description": description, "content": content}
    if served:
        ok["headers"] = POOL_HEADERS
    return {"200": ok}


TEXT_PART = {
    "type": "object",
    "required": ["type", "text"],
    "properties": {"type": {"enum": ["input_text", "output_text"]}, "text": {"type": "string"}},
}
INPUT_ITEM = {
    "type": "object",
    "required": ["role", "content"],
    "properties": {
        "type": {"const": "message"},
        "role": {"enum": ["user", "system", "developer", "assistant"]},
        "content": {
            "oneOf": [{"type": "string"}, {"type": "array", "minItems": 1, "items": TEXT_PART}]
        },
    },
}
NULLABLE_STRING = {"type": ["string", "null"]}
# An earlier stateless response's items, carried back in a later one's input (store false).
CALL_ITEM = {
    "type": "object",
    "description": "a call an earlier response ran (mcp_call, or <name>_call for the "
    "operator's tools): the call and its output or error become the history",
    "required": ["type", "id", "name"],
    "properties": {
        "type": {"type": "string", "pattern": "_call$", "not": {"const": "function_call"}},
        "id": {"type": "string", "minLength": 1},
        "name": {"type": "string", "minLength": 1},
        "arguments": {"type": "string"},
        "output": NULLABLE_STRING,
        "error": NULLABLE_STRING,
    },
}
APPROVAL_REQUEST_ITEM = {
    "type": "object",
    "description": "a call an earlier response asked a person about; the decision follows",
    "required": ["type", "id", "name"],
    "properties": {
        "type": {"const": "mcp_approval_request"},
        "id": {"type": "string", "minLength": 1},
        "name": {"type": "string", "minLength": 1},
        "arguments": {"type": "string"},
        "server_label": {"type": "string"},
    },
}
APPROVAL_RESPONSE_ITEM = {
    "type": "object",
    "required": ["type", "approval_request_id", "approve"],
    "properties": {
        "type": {"const": "mcp_approval_response"},
        "approval_request_id": {"type": "string", "minLength": 1},
        "approve": {"type": "boolean"},
    },
}
LISTING_ITEM = {
    "type": "object",
    "description": "an earlier listing: ignored (the servers are asked again)",
    "required": ["type"],
    "properties": {"type": {"const": "mcp_list_tools"}},
}
NAMES = {"type": "array", "items": {"type": "string", "minLength": 1}}
APPROVAL = {
    "description": "whether each call waits for a person's approval (an mcp_approval_request "
    "item ends the response; the next request's input carries it back with an "
    "mcp_approval_response); a remote server's calls ask unless told never, the operator's "
    "tools only when told always",
    "oneOf": [
        {"enum": ["always", "never"]},
        {
            "type": "object",
            "properties": {
                "always": {"type": "object", "properties": {"tool_names": NAMES}},
                "never": {"type": "object", "properties": {"tool_names": NAMES}},
            },
        },
        {"type": "null"},
    ],
}
MCP_TOOL = {
    "type": "object",
    "description": "A remote MCP server's tools, run by the platform (streamable HTTP). The "
    "operator's servers are named by their label (server_url may be left out); a server the "
    "request names itself is taken to read private data, bring outside content and send data "
    "out, so its result ends the turn at the next model call (the lethal-trifecta check)",
    "required": ["type", "server_label"],
    "additionalProperties": False,
    "properties": {
        "type": {"const": "mcp"},
        "server_label": {"type": "string", "pattern": "^[A-Za-z0-9_-]{1,64}$"},
        "server_url": {"type": "string", "pattern": "^https?://"},
        "server_description": {"type": "string"},
        "headers": {"type": ["object", "null"], "additionalProperties": {"type": "string"}},
        "allowed_tools": {
            "oneOf": [
                NAMES,
                {"type": "object", "properties": {"tool_names": NAMES}},
                {"type": "null"},
            ]
        },
        "require_approval": APPROVAL,
    },
}
OPERATOR_TOOL = {
    "type": "object",
    "description": "One of the operator's own tools, by its name as type (send_email); "
    "the tier must be granted it",
    "required": ["type"],
    "additionalProperties": False,
    "properties": {
        "type": {"type": "string", "not": {"enum": ["mcp", "function"]}},
        "require_approval": APPROVAL,
    },
}
FUNCTION_TOOL = {
    "type": "object",
    "description": "A function the caller runs (only with store false): the model's call "
    "comes back as a function_call item; send its output back as a function_call_output "
    "item after it",
    "required": ["type", "name"],
    "additionalProperties": False,
    "properties": {
        "type": {"const": "function"},
        "name": {"type": "string", "pattern": "^[A-Za-z0-9_-]{1,64}$"},
        "description": NULLABLE_STRING,
        "parameters": {"type": ["object", "null"]},
        "strict": {"type": ["boolean", "null"]},
    },
}
FUNCTION_CALL_ITEM = {
    "type": "object",
    "description": "a function call an earlier response asked the caller to run",
    "required": ["type", "call_id", "name"],
    "properties": {
        "type": {"const": "function_call"},
        "call_id": {"type": "string", "minLength": 1},
        "name": {"type": "string", "minLength": 1},
        "arguments": {"type": "string"},
    },
}
FUNCTION_OUTPUT_ITEM = {
    "type": "object",
    "description": "what the caller's function gave for a call",
    "required": ["type", "call_id", "output"],
    "properties": {
        "type": {"const": "function_call_output"},
        "call_id": {"type": "string", "minLength": 1},
        "output": {"type": "string"},
    },
}
RESPONSES_SCHEMAS: dict[str, Any] = {
    "ResponseRequest": {
        "type": "object",
        "required": ["input"],
        "properties": {
            "model": {"type": "string", "enum": list(MODEL_CHOICES)},
            "input": {
                "oneOf": [
                    {"type": "string", "minLength": 1},
                    {
                        "type": "array",
                        "minItems": 1,
                        "items": {
                            "oneOf": [
                                INPUT_ITEM,
                                FUNCTION_CALL_ITEM,
                                FUNCTION_OUTPUT_ITEM,
                                CALL_ITEM,
                                APPROVAL_REQUEST_ITEM,
                                APPROVAL_RESPONSE_ITEM,
                                LISTING_ITEM,
                            ]
                        },
                    },
                ]
            },
            "instructions": NULLABLE_STRING,
            "previous_response_id": {"oneOf": [RESPONSE_ID, {"type": "null"}]},
            "store": {"type": "boolean", "description": "false: a stateless completion"},
            "stream": {"type": "boolean"},
            "background": {"type": "boolean", "description": "only with store true"},
            "max_output_tokens": {"type": ["integer", "null"], "minimum": 1},
            "temperature": {"type": ["number", "null"], "description": "only 1 (the default)"},
            "tools": {
                "type": "array",
                "description": "tools the platform runs (at most 16; a stored response refuses "
                "approvals): a loop of model calls and tool calls, at most the tier's "
                "max_steps; the output holds mcp_list_tools and mcp_call items "
                "(send_email_call, file_search_call for the operator's) before the message. "
                "Or functions the caller runs (store false), not both",
                "items": {"oneOf": [MCP_TOOL, OPERATOR_TOOL, FUNCTION_TOOL]},
            },
            "tool_choice": {
                "oneOf": [
                    {"enum": ["auto", "none", "required"]},
                    {
                        "type": "object",
                        "required": ["type", "name"],
                        "properties": {"type": {"const": "function"}, "name": {"type": "string"}},
                    },
                ],
                "description": "required and a named function need functions",
            },
            "parallel_tool_calls": {"type": "boolean"},
        },
    },
    "Response": {
        "type": "object",
        "required": ["id", "object", "created_at", "status", "model", "output"],
        "properties": {
            "id": RESPONSE_ID,
            "object": {"const": "response"},
            "created_at": {"type": "integer"},
            "status": {"enum": ["in_progress", "completed", "incomplete", "cancelled", "failed"]},
            "model": {"type": "string"},
            "output": {"type": "array", "items": {"type": "object"}},
            "previous_response_id": NULLABLE_STRING,
            "instructions": NULLABLE_STRING,
            "background": {"type": "boolean"},
            "store": {"type": "boolean"},
            "usage": {"type": ["object", "null"]},
            "error": {"type": ["object", "null"]},
            "incomplete_details": {"type": ["object", "null"]},
        },
    },
    "DeletedResponse": {
        "type": "object",
        "required": ["id", "object", "deleted"],
        "properties": {
            "id": RESPONSE_ID,
            "object": {"const": "response"},
            "deleted": {"const": True},
        },
    },
}

RESPONSE_PARAM = {"name": "response_id", "in": "path", "required": True, "schema": RESPONSE_ID}
STREAM_EVENTS = (
    "OpenAI's stream events, each with `sequence_number` (from 0, also the SSE id): "
    "response.created, response.in_progress, response.output_item.added, "
    "response.content_part.added, response.output_text.delta..., response.output_text.done, "
    "response.content_part.done, response.output_item.done, then response.completed, "
    "response.incomplete, response.cancelled or response.failed. With tools, before the "
    "message's: response.output_item.added, response.mcp_list_tools.in_progress, "
    "response.mcp_list_tools.completed (or failed), response.output_item.done for each "
    "server's listing, and response.output_item.added, response.mcp_call.in_progress, "
    "response.mcp_call_arguments.done, response.mcp_call.completed (or failed), "
    "response.output_item.done for each call. With functions, for each call the model made: "
    "response.output_item.added, response.function_call_arguments.delta, "
    "response.function_call_arguments.done, response.output_item.done"
)
RESPONSES_PATHS: dict[str, Any] = {
    "/v1/responses": {
        "post": {
            "summary": "Creates a response (OpenAI's Responses API); stored ones continue "
            "through previous_response_id",
            "requestBody": {
                "required": True,
                "content": {JSON: {"schema": {"$ref": "#/components/schemas/ResponseRequest"}}},
            },
            "responses": {
                **_ok(
                    "the response (in progress when background), or its events when stream: "
                    + STREAM_EVENTS,
                    {"$ref": "#/components/schemas/Response"},
                    stream=True,
                    served=True,
                ),
                **_errors(400, 401, 403, 404, 413, 429, 503),
            },
        }
    },
    "/v1/responses/{response_id}": {
        "parameters": [RESPONSE_PARAM],
        "get": {
            "summary": "Reads a stored response; with stream=true, its events again, after "
            "starting_after",
            "parameters": [
                {"name": "stream", "in": "query", "schema": {"enum": ["true", "false"]}},
                {
                    "name": "starting_after",
                    "in": "query",
                    "schema": {"type": "integer", "minimum": 0},
                },
            ],
            "responses": {
                **_ok(STREAM_EVENTS, {"$ref": "#/components/schemas/Response"}, stream=True),
                **_errors(400, 401, 404),
            },
        },
        "delete": {
            "summary": "Deletes a response; its conversation keeps the turns as history",
            "responses": {
                **_ok("deleted", {"$ref": "#/components/schemas/DeletedResponse"}),
                **_errors(401, 404),
            },
        },
    },
    "/v1/responses/{response_id}/cancel": {
        "parameters": [RESPONSE_PARAM],
        "post": {
            "summary": "Stops a response's answer; the response as it ended",
            "responses": {
                **_ok("the response", {"$ref": "#/components/schemas/Response"}),
                **_errors(401, 404),
            },
        },
    },
    "/v1/chat/completions/{completion_id}/stream": {
        "parameters": [
            {
                "name": "completion_id",
                "in": "path",
                "required": True,
                "schema": {"type": "string", "pattern": "^chatcmpl-[0-9a-f]{1,55}$"},
            }
        ],
        "get": {
            "summary": "Resumes a chat completion sent with `X-Resumable: true` (an extension), "
            "after the chunk whose SSE id is Last-Event-ID",
            "parameters": [
                {
                    "name": "Last-Event-ID",
                    "in": "header",
                    "schema": {"type": "string", "pattern": "^[0-9]{1,18}$"},
                },
            ],
            "responses": {
                "200": {
                    "description": "chat.completion.chunk events with SSE ids, then `data: [DONE]`",
                    "content": {SSE: {"schema": {"type": "string"}}},
                    "headers": POOL_HEADERS,
                },
                **_errors(400, 401, 404),
            },
        },
    },
}
