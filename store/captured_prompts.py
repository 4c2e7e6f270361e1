"""A captured prompt as the stores keep it, one row, for both backends alike: its turns one
JSON array, each turn an object with its role, text and token count, and its tool calls
where it has any, so a capture reads the same wherever it was written."""

from __future__ import annotations

import json
from typing import Any

from domain.answer_options import ToolCall, ToolDefinition
from domain.types import Role, Turn
from store.records import CapturedPrompt

COLUMNS = (
    "message_id, conversation_id, version, model, node_id, temperature, max_tokens, turns, "
    "created_at, tools"
)
# A retry that ran again replaces the turn's capture.
ON_CONFLICT = (
    "ON CONFLICT (user_id, message_id) DO UPDATE SET conversation_id = excluded.conversation_id, "
    "version = excluded.version, model = excluded.model, node_id = excluded.node_id, "
    "temperature = excluded.temperature, max_tokens = excluded.max_tokens, "
    "turns = excluded.turns, created_at = excluded.created_at, tools = excluded.tools"
)


def row_values(prompt: CapturedPrompt, now: float) -> tuple[object, ...]:
    """The row's values in COLUMNS' order."""
    return (prompt.message_id, prompt.conversation_id, prompt.version, prompt.model,
            prompt.node_id, prompt.temperature, prompt.max_tokens, turns_to_json(prompt.turns),
            now, tools_to_json(prompt.tools))  # fmt: skip


def from_row(row: Any) -> CapturedPrompt:
    values = dict(row)
    values["turns"] = turns_from_json(values["turns"])
    values["tools"] = tools_from_json(values["tools"])
    return CapturedPrompt(**values)


def tools_to_json(tools: tuple[ToolDefinition, ...]) -> str:
    return json.dumps([[t.name, t.description, t.parameters, t.strict] for t in tools],
                      ensure_ascii=False, separators=(",", ":"))  # fmt: skip


def tools_from_json(text: str) -> tuple[ToolDefinition, ...]:
    return tuple(ToolDefinition(*item) for item in json.loads(text))


def turns_to_json(turns: tuple[Turn, ...]) -> str:
    return json.dumps([_turn(t) for t in turns], ensure_ascii=False, separators=(",", ":"))


def turns_from_json(text: str) -> tuple[Turn, ...]:
    return tuple(_read_turn(item) for item in json.loads(text))


def _turn(turn: Turn) -> dict[str, Any]:
    kept: dict[str, Any] = {"role": turn.role.value, "text": turn.text, "tokens": turn.tokens}
    if turn.tool_calls:
        kept["tool_calls"] = [[c.call_id, c.name, c.arguments] for c in turn.tool_calls]
    if turn.tool_call_id:
        kept["tool_call_id"] = turn.tool_call_id
    return kept


def _read_turn(item: dict[str, Any]) -> Turn:
    calls = tuple(ToolCall(*call) for call in item.get("tool_calls", ()))
    return Turn(Role(item["role"]), item["text"], int(item["tokens"]), calls,
                item.get("tool_call_id", ""))  # fmt: skip
