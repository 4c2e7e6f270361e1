"""The OpenAPI schemas of a chat-completions request: every field of OpenAI's, honoured ones
with their ranges, the others with the only values accepted (edge/openai_fields.py)."""

from __future__ import annotations

from typing import Any

from edge.openai_fields import DEFAULT_ONLY
from infra.convert import MODEL_CHOICES


def _ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{name}"}


OPENAI_REQUEST_SCHEMAS: dict[str, Any] = {
    "ChatMessage": {
        "type": "object",
        "required": ["role"],
        "properties": {
            "role": {
                "type": "string",
                "enum": ["system", "developer", "user", "assistant", "tool"],
            },
            "content": {
                "description": "null only on an assistant message that calls tools",
                "oneOf": [
                    {"type": "string"},
                    {
                        "type": "array",
                        "minItems": 1,
                        "items": {
                            "type": "object",
                            "required": ["type", "text"],
                            "properties": {
                                "type": {"const": "text"},
                                "text": {"type": "string"},
                            },
                        },
                    },
                    {"type": "null"},
                ],
            },
            "name": {"type": "string"},
            "tool_calls": {
                "type": "array",
                "description": "an assistant message's calls, sent back with the history",
                "items": _ref("ToolCall"),
            },
            "tool_call_id": {"type": "string", "description": "a tool message: the call answered"},
        },
    },
    "ToolCall": {
        "type": "object",
        "required": ["id", "type", "function"],
        "properties": {
            "id": {"type": "string", "minLength": 1},
            "type": {"const": "function"},
            "function": {
                "type": "object",
                "required": ["name", "arguments"],
                "properties": {
                    "name": {"type": "string", "minLength": 1},
                    "arguments": {"type": "string", "description": "a JSON object as text"},
                },
            },
        },
    },
    "Tool": {
        "type": "object",
        "required": ["type", "function"],
        "properties": {
            "type": {"const": "function"},
            "function": {
                "type": "object",
                "required": ["name"],
                "properties": {
                    "name": {"type": "string", "pattern": "^[A-Za-z0-9_-]{1,64}$"},
                    "description": {"type": "string"},
                    "parameters": {"type": "object", "description": "a JSON Schema"},
                    "strict": {"type": "boolean"},
                },
            },
        },
    },
    "ResponseFormat": {
        "oneOf": [
            {
                "type": "object",
                "required": ["type"],
                "properties": {"type": {"enum": ["text", "json_object"]}},
            },
            {
                "type": "object",
                "required": ["type", "json_schema"],
                "properties": {
                    "type": {"const": "json_schema"},
                    "json_schema": {
                        "type": "object",
                        "required": ["name"],
                        "properties": {
                            "name": {"type": "string", "pattern": "^[A-Za-z0-9_-]{1,64}$"},
                            "description": {"type": "string"},
                            "schema": {
                                "type": "object",
                                "description": "a JSON Schema; the answer is a document it "
                                "accepts (the engine decodes under its grammar)",
                            },
                            "strict": {"type": ["boolean", "null"]},
                        },
                    },
                },
            },
        ]
    },
    "ChatCompletionRequest": {
        "type": "object",
        "required": ["model", "messages"],
        "description": "Every field of OpenAI's request: those listed with a range are "
        "honoured; the others are accepted only at the defaults listed (a 400 naming the "
        "field otherwise); a field OpenAI does not have is refused.",
        "additionalProperties": False,
        "properties": {
            "model": {"type": "string", "enum": list(MODEL_CHOICES)},
            "messages": {"type": "array", "minItems": 1, "items": _ref("ChatMessage")},
            "stream": {"type": ["boolean", "null"]},
            "stream_options": {
                "type": "object",
                "properties": {"include_usage": {"type": "boolean"}},
            },
            "max_tokens": {"type": "integer", "minimum": 1},
            "max_completion_tokens": {"type": "integer", "minimum": 1},
            "temperature": {"type": "number", "minimum": 0, "maximum": 2},
            "top_p": {"type": "number", "minimum": 0, "maximum": 1},
            "stop": {
                "oneOf": [
                    {"type": "string", "minLength": 1},
                    {
                        "type": "array",
                        "maxItems": 4,
                        "items": {"type": "string", "minLength": 1},
                    },
                ]
            },
            "seed": {"type": "integer", "minimum": -(2**63) + 1, "maximum": 2**63 - 1},
            "frequency_penalty": {"type": "number", "minimum": -2, "maximum": 2},
            "presence_penalty": {"type": "number", "minimum": -2, "maximum": 2},
            "response_format": _ref("ResponseFormat"),
            "tools": {"type": "array", "maxItems": 128, "items": _ref("Tool")},
            "tool_choice": {
                "description": "required, or a function named: the answer is a call to "
                "that function (to one of the tools, when required; one call on llama.cpp "
                "and vLLM), decoded under its parameters' schema, never prose, and "
                "finish_reason is tool_calls (length, with no call, when max_tokens cut it); "
                "a name not among the tools, or required with no tools, is a 400 that says so",
                "oneOf": [
                    {"enum": ["auto", "none", "required"]},
                    {
                        "type": "object",
                        "required": ["type", "function"],
                        "properties": {
                            "type": {"const": "function"},
                            "function": {
                                "type": "object",
                                "required": ["name"],
                                "properties": {"name": {"type": "string"}},
                            },
                        },
                    },
                ],
            },
            "parallel_tool_calls": {"type": "boolean"},
            "prompt_cache_key": {
                "type": "string",
                "pattern": "^[!-~]{1,128}$",
                "description": "the affinity key: calls with one key go to one replica",
            },
            "user": {
                "type": "string",
                "pattern": "^[!-~]{1,128}$",
                "description": "the affinity key when prompt_cache_key is not given",
            },
            **{name: {"enum": list(rule.defaults)} for name, rule in DEFAULT_ONLY.items()},
        },
    },
}
