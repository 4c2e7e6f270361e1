"""`response_format`: free text, any JSON object, or a JSON document a schema accepts. The
engine decodes under the format's grammar (llama-server's `json_schema`, vLLM's structured
outputs), so the answer parses. The schema's shape is checked here, so a plain mistake is a 400
naming it; what an engine's grammar cannot express it refuses when the call starts."""

from __future__ import annotations

import json
import re
from dataclasses import replace
from typing import Any

from domain.answer_options import AnswerOptions
from edge.openai_errors import OpenAIError

PARAM = "response_format"
NAME_PATTERN = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
# A schema is sent to the engine with every call; past this it is a mistake, not a format.
MAX_SCHEMA_CHARS = 32_768
JSON_TYPES = {"object", "array", "string", "number", "integer", "boolean", "null"}


def _types_known(kind: Any) -> bool:
    kinds = kind if isinstance(kind, list) else [kind]
    return bool(kinds) and all(isinstance(k, str) and k in JSON_TYPES for k in kinds)


def _refuse(message: str, param: str = PARAM) -> OpenAIError:
    return OpenAIError(400, message, None, param)


def _schema_of(spec: Any) -> str:
    param = f"{PARAM}.json_schema"
    if not isinstance(spec, dict):
        raise _refuse(f"'{param}' must be an object with 'name' and 'schema'", param)
    name = spec.get("name")
    if not isinstance(name, str) or not NAME_PATTERN.match(name):
        raise _refuse(f"'{param}.name' must be 1-64 letters, digits, _ or -", f"{param}.name")
    if not isinstance(spec.get("strict", False), bool | None):
        raise _refuse(f"'{param}.strict' must be a boolean", f"{param}.strict")
    schema = spec.get("schema", {"type": "object"})
    if not isinstance(schema, dict) or not _types_known(schema.get("type", "object")):
        raise _refuse(
            f"'{param}.schema' must be a JSON Schema object whose type is one of "
            f"{', '.join(sorted(JSON_TYPES))}",
            f"{param}.schema",
        )
    text = json.dumps(schema, separators=(",", ":"), ensure_ascii=False)
    if len(text) > MAX_SCHEMA_CHARS:
        raise _refuse(f"'{param}.schema' is over {MAX_SCHEMA_CHARS} characters", f"{param}.schema")
    return text


def with_format(options: AnswerOptions, value: Any) -> AnswerOptions:
    """options with the body's response_format applied."""
    if value is None:
        return options
    kind = value.get("type") if isinstance(value, dict) else None
    if kind == "text":
        return options
    if kind == "json_object":
        return replace(options, json_object=True)
    if kind == "json_schema":
        return replace(options, json_object=True, json_schema=_schema_of(value.get("json_schema")))
    raise _refuse(f"'{PARAM}.type' must be text, json_object or json_schema", f"{PARAM}.type")
