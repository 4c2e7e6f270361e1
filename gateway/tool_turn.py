"""The state of one turn of the tool loop (gateway/tool_loop.py): the tools offered, the
turns and their origins so far, the events numbered as one answer, and what one model call
asked for; and how a call's result reads to the model and to the trifecta check."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from domain.answer_options import ToolCall, ToolDefinition
from domain.capabilities import Capability, CapabilitySet, ToolSpec
from domain.trifecta import ContextPart, Origin
from domain.types import Role, Usage
from gateway.completions import CallerTurn
from gateway.runs import Done, Event
from gateway.tool_ports import ToolOutcome, ToolServer
from gateway.turn_citations import TurnCitations


@dataclass(slots=True)
class Offered:
    """A tool the model is offered this turn: its server, its definition as listed, and its
    name in the capability set."""

    server: ToolServer
    server_label: str
    definition: ToolDefinition
    qualified: str
    needs_approval: bool = False


@dataclass(slots=True)
class TurnState:
    """One turn's state: the servers opened, the tools offered, the context so far."""

    capabilities: CapabilitySet
    confirmed: frozenset[str]
    turns: list[CallerTurn]
    parts: list[ContextPart]
    citations: TurnCitations
    servers: list[ToolServer] = field(default_factory=list)
    offered: dict[str, Offered] = field(default_factory=dict)
    usage: Usage = field(default_factory=Usage)
    next_id: int = 1
    meta_sent: bool = False
    version: str = ""  # the first step's, which the turn's citations count for
    listings: list[Event] = field(default_factory=list)

    def numbered(self, events: Sequence[Event]) -> list[tuple[int, Event]]:
        batch = list(enumerate(events, start=self.next_id))
        self.next_id += len(batch)
        return batch

    def add_usage(self, usage: Usage) -> None:
        self.usage = Usage(self.usage.input_tokens + usage.input_tokens,
                           self.usage.cached_tokens + usage.cached_tokens,
                           self.usage.output_tokens + usage.output_tokens)  # fmt: skip

    def add(self, turn: CallerTurn, origins: frozenset[Origin] | None = None) -> None:
        self.turns.append(turn)
        self.parts.append(ContextPart(turn.counted_text(), origins or origin(turn)))


@dataclass(slots=True)
class Step:
    """What one model call asked for and how it ended."""

    text: str = ""
    calls: list[ToolCall] = field(default_factory=list)
    done: Done | None = None
    failed: bool = False


def origin(turn: CallerTurn, leading: bool = False) -> frozenset[Origin]:
    """Where a turn of the prompt comes from: the leading system turn is the operator's (or
    the caller's instructions); a later one (a conversation's summary, its pinned
    constraints) is the conversation's, as its user and assistant turns are."""
    if turn.role is Role.SYSTEM and leading:
        return frozenset({Origin.OPERATOR})
    if turn.role is Role.TOOL:
        return frozenset({Origin.TOOL_RESULT})
    return frozenset({Origin.CONVERSATION})


def arguments_of(call: ToolCall) -> dict[str, Any] | None:
    try:
        value = json.loads(call.arguments or "{}")
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def result_origins(spec: ToolSpec) -> frozenset[Origin]:
    """Where a result's text comes from, by what its tool can do: a tool that brings in
    outside content gives untrusted text, one that reads the user's data gives private text;
    one that does neither (send_email's receipt) gives the platform's own words."""
    origins = set()
    if Capability.BRINGS_UNTRUSTED in spec.capabilities:
        origins.add(Origin.TOOL_RESULT)
    if Capability.READS_PRIVATE in spec.capabilities:
        origins.add(Origin.USER_FILE)
    return frozenset(origins or {Origin.OPERATOR})


def result_text(outcome: ToolOutcome) -> str:
    """What the model reads of a call: its output, or that it failed and why."""
    if outcome.error:
        return f"The tool failed: {outcome.error}"
    return outcome.output or "(the tool gave no output)"
