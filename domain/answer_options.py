"""What a caller of the OpenAI-compatible API may ask of one answer beyond its prompt: the
sampling, a JSON answer (any object, or one a JSON Schema accepts), tools the model may call,
and the passages it may cite. Plain values; the edge parses them, the nodeagent's engine
adapters apply them."""

from __future__ import annotations

import enum
import json
from dataclasses import dataclass

from domain import citations
from domain.errors import InvalidArgument


class ToolChoice(enum.StrEnum):
    AUTO = "auto"
    NONE = "none"
    REQUIRED = "required"
    NAMED = "named"


@dataclass(frozen=True, slots=True)
class ToolCall:
    """One function call the model asked for; arguments is a JSON object as text."""

    call_id: str
    name: str
    arguments: str


@dataclass(frozen=True, slots=True)
class ToolDefinition:
    name: str
    description: str = ""
    # A JSON Schema as text; empty: no parameters.
    parameters: str = ""
    strict: bool = False


@dataclass(frozen=True, slots=True)
class AnswerOptions:
    """Every field at its default: the platform's sampling and free text."""

    temperature: float | None = None
    top_p: float | None = None
    stop: tuple[str, ...] = ()
    seed: int | None = None
    frequency_penalty: float | None = None
    presence_penalty: float | None = None
    json_object: bool = False
    # A JSON Schema as text (implies json_object).
    json_schema: str = ""
    tools: tuple[ToolDefinition, ...] = ()
    tool_choice: ToolChoice = ToolChoice.AUTO
    tool_choice_name: str = ""
    parallel_tool_calls: bool = True
    # The ids the answer may cite (`[[cite:ID]]`, domain/citations.py): it is decoded under a
    # grammar that allows no other citation, so an answer cannot cite a passage it was not
    # given.
    citation_ids: tuple[str, ...] = ()

    @property
    def constrained(self) -> bool:
        """The engine decodes under a grammar that starts at the answer's first character (a
        JSON answer, or tool calls): a partial answer cannot be continued on another replica,
        since the grammar's state is not carried over. Text that may cite only given ids is
        not: its grammar is back at its start after every character outside a citation, and
        a continuation cut inside one can at worst write a citation the resolver then removes
        (domain/citations.py), so such an answer is continued like any text."""
        return self.json_object or bool(self.json_schema) or self.calls_tools

    @property
    def calls_tools(self) -> bool:
        return bool(self.tools) and self.tool_choice is not ToolChoice.NONE


# The options of a request that asks for nothing: the platform's sampling, free text.
PLAIN = AnswerOptions()


def _json_object(text: str) -> bool:
    try:
        return isinstance(json.loads(text), dict)
    except ValueError:
        return False


def check(options: AnswerOptions) -> None:
    """What every service checks of options that came over gRPC: the schemas are JSON objects
    and a named tool is among the tools; an engine would otherwise fail mid-call."""
    if options.json_schema and not _json_object(options.json_schema):
        raise InvalidArgument("options.json_schema must be a JSON object")
    names = set()
    for tool in options.tools:
        if not tool.name:
            raise InvalidArgument("every tool needs a name")
        if tool.parameters and not _json_object(tool.parameters):
            raise InvalidArgument(f"the parameters of tool {tool.name!r} must be a JSON object")
        names.add(tool.name)
    if options.tool_choice is ToolChoice.NAMED and options.tool_choice_name not in names:
        raise InvalidArgument(f"tool_choice names {options.tool_choice_name!r}, not a tool")
    if options.tool_choice is ToolChoice.REQUIRED and not names:
        raise InvalidArgument("tool_choice is required but there are no tools")
    _check_citation_ids(options)


def _check_citation_ids(options: AnswerOptions) -> None:
    """The ids go into the engine's grammar: few enough, each of the form the grammar and the
    resolver rely on, and only for a text answer, since a grammar for text and one for a JSON
    document or a call cannot both hold."""
    if not options.citation_ids:
        return
    if len(options.citation_ids) > citations.MOST_IDS:
        raise InvalidArgument(f"options.citation_ids holds more than {citations.MOST_IDS} ids")
    for passage_id in options.citation_ids:
        if not citations.ID_PATTERN.fullmatch(passage_id):
            raise InvalidArgument(f"options.citation_ids: {passage_id!r} is not a passage id")
    if options.json_object or options.json_schema:
        raise InvalidArgument("options.citation_ids cannot go with a JSON answer")
    if options.calls_tools:
        raise InvalidArgument("options.citation_ids cannot go with tools the model may call")
