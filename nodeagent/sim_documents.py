"""The simulated engine's JSON answers and tool calls: a document a JSON Schema accepts, drawn
from the same seeded generator as its prose, so the platform's paths for structured answers
(the output check's hold-back, a failover, a refusal) can be tested without a model.

It covers what OpenAI's strict structured outputs allow (objects with properties, arrays,
strings, numbers, integers, booleans, null, enum, const, anyOf, $ref to $defs); a keyword it
does not know is left out of the document, never answered with an invalid one where it can
be avoided.

A tool's string parameter named `query` is the text of the newest user turn (bounded by its
minLength and maxLength), as a model asks a search tool what the user asked; so a search
the simulator makes finds what the user asked about. Every other value is drawn as before:
the query's drawn words are drawn and dropped, so the values after it do not change."""

from __future__ import annotations

import json
import random
import re
from typing import Any

from domain.answer_options import AnswerOptions, ToolCall, ToolChoice, ToolDefinition

_WORDS = "blue water light paper river stone cloud green quiet early bright small".split()
# Past this a schema is recursive ($ref to itself) or absurd: the value is cut short there.
MAX_DEPTH = 8
MAX_ITEMS = 1000
# The chunks of a document: each token with the white space before it, so they join to it.
_CHUNK = re.compile(r"\s*(?:\w+|[^\w\s])")


class _Writer:
    def __init__(self, root: dict[str, Any], rng: random.Random, free: bool, query: str) -> None:
        self._root = root
        self._rng = rng
        # A top-level object with no properties given gets one (a json_object answer).
        self._free = free
        # What a top-level string property named "query" says; empty: drawn like the others.
        self._query = query

    def value(self, schema: Any, depth: int = 0) -> Any:
        if not isinstance(schema, dict) or depth > MAX_DEPTH:
            return None
        if isinstance(schema.get("$ref"), str):
            return self.value(self._resolve(schema["$ref"]), depth + 1)
        if "const" in schema:
            return schema["const"]
        if isinstance(schema.get("enum"), list) and schema["enum"]:
            return self._rng.choice(schema["enum"])
        for key in ("anyOf", "oneOf", "allOf"):
            if isinstance(schema.get(key), list) and schema[key]:
                return self.value(schema[key][0], depth + 1)
        kind = schema.get("type", "object")
        if isinstance(kind, list):
            kind = next((k for k in kind if k != "null"), "null")
        return self._typed(kind, schema, depth)

    def _typed(self, kind: str, schema: dict[str, Any], depth: int) -> Any:
        if kind == "object":
            properties = schema.get("properties")
            properties = properties if isinstance(properties, dict) else {}
            if not properties and depth == 0 and self._free:
                return {"answer": self._words(schema)}
            return {name: self._property(name, sub, depth) for name, sub in properties.items()}
        if kind == "array":
            fewest = _int(schema, "minItems", 0)
            count = min(MAX_ITEMS, max(fewest, min(2, _int(schema, "maxItems", 2))))
            return [self.value(schema.get("items", {}), depth + 1) for _ in range(count)]
        if kind == "string":
            return self._words(schema)
        if kind == "integer":
            low = _int(schema, "minimum", 0)
            return self._rng.randint(low, max(low, _int(schema, "maximum", low + 99)))
        if kind == "number":
            low = float(_int(schema, "minimum", 0, exact=True))
            high = max(low, float(_int(schema, "maximum", low + 99, exact=True)))
            # Rounded inward, so the bounds hold.
            return min(high, max(low, round(self._rng.uniform(low, high), 2)))
        if kind == "boolean":
            return self._rng.random() < 0.5
        return None

    def _property(self, name: str, schema: Any, depth: int) -> Any:
        value = self.value(schema, depth + 1)
        if depth == 0 and name == "query" and self._query and isinstance(value, str):
            if isinstance(schema, dict) and schema.get("type") == "string":
                return _bounded(self._query, schema)
        return value

    def _words(self, schema: dict[str, Any]) -> str:
        text = " ".join(self._rng.choice(_WORDS) for _ in range(self._rng.randint(1, 4)))
        return _bounded(text, schema)

    def _resolve(self, ref: str) -> Any:
        node: Any = self._root
        for part in ref.removeprefix("#/").split("/"):
            node = node.get(part, {}) if isinstance(node, dict) and part else node
        return node


def _bounded(text: str, schema: dict[str, Any]) -> str:
    low = min(_int(schema, "minLength", 0), 1000)
    return text.ljust(low, "a")[: max(0, _int(schema, "maxLength", 10**6))]


def _int(schema: dict[str, Any], key: str, default: float, exact: bool = False) -> Any:
    """A numeric keyword, bounded; an int unless exact (a number's bounds keep fractions)."""
    value = schema.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int | float):
        value = default
    bounded = max(-(10**9), min(10**9, value))
    return bounded if exact else int(bounded)


def document(schema_text: str, rng: random.Random, free: bool = True, query: str = "") -> str:
    """A JSON document the schema (JSON text; empty: any object) accepts. free: an object
    without properties gets an "answer" (a json_object answer) rather than none (a tool's
    arguments). query: what a top-level string property "query" says (empty: drawn)."""
    schema = json.loads(schema_text) if schema_text else {"type": "object"}
    value = _Writer(schema, rng, free, query).value(schema)
    return json.dumps(value, ensure_ascii=False)


def chunks(text: str) -> list[str]:
    """The document as the simulator streams it, one token a chunk; they join to the text."""
    return _CHUNK.findall(text)


def _called(options: AnswerOptions) -> list[ToolDefinition]:
    if options.tool_choice is ToolChoice.NAMED:
        return [t for t in options.tools if t.name == options.tool_choice_name]
    return list(options.tools[: 2 if options.parallel_tool_calls else 1])


def tool_calls(
    options: AnswerOptions, answers_tool: bool, rng: random.Random, query: str = ""
) -> list[ToolCall]:
    """The calls the simulated model makes: under `auto` it calls a tool when the newest turn
    is the user's and answers in prose after a tool's result (a model that used what it got);
    `required` and a named tool always call. With parallel calls allowed it calls the first
    two tools at once. query: the newest user turn's text, which a `query` parameter asks."""
    if not options.calls_tools:
        return []
    if options.tool_choice is ToolChoice.AUTO and answers_tool:
        return []
    calls = []
    for tool in _called(options):
        arguments = document(tool.parameters, rng, free=False, query=query)
        calls.append(ToolCall(f"call_{rng.getrandbits(48):012x}", tool.name, arguments))
    return calls
