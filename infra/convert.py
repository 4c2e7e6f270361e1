"""Protobuf <-> domain values shared by every service and client, defined once: common.proto's
enums, the short names callers read for them, and the model names callers choose from."""

from __future__ import annotations

from collections.abc import Iterable

from chat.v1 import chat_service_pb2, common_pb2
from domain.answer_options import AnswerOptions, ToolCall, ToolChoice, ToolDefinition
from domain.feedback import Rating
from domain.types import Finish, Role, Tier, Turn, Usage

ROLE_FROM_PB = {
    common_pb2.ROLE_SYSTEM: Role.SYSTEM,
    common_pb2.ROLE_USER: Role.USER,
    common_pb2.ROLE_ASSISTANT: Role.ASSISTANT,
    common_pb2.ROLE_TOOL: Role.TOOL,
}
ROLE_TO_PB = {v: k for k, v in ROLE_FROM_PB.items()}
TIER_FROM_PB = {common_pb2.TIER_FREE: Tier.FREE, common_pb2.TIER_PLUS: Tier.PLUS}
TIER_TO_PB = {v: k for k, v in TIER_FROM_PB.items()}
FINISH_TO_PB = {
    Finish.STOP: common_pb2.FINISH_REASON_STOP,
    Finish.LENGTH: common_pb2.FINISH_REASON_LENGTH,
    Finish.CANCELLED: common_pb2.FINISH_REASON_CANCELLED,
    Finish.REFUSED: common_pb2.FINISH_REASON_REFUSED,
    Finish.ERROR: common_pb2.FINISH_REASON_ERROR,
}
FINISH_FROM_PB = {v: k for k, v in FINISH_TO_PB.items()}
RATING_FROM_PB = {chat_service_pb2.RATING_UP: Rating.UP, chat_service_pb2.RATING_DOWN: Rating.DOWN}
RATING_TO_PB = {v: k for k, v in RATING_FROM_PB.items()}
# What callers read: the domain's short lowercase names ("stop", "user", "free"), never
# protobuf's FINISH_REASON_STOP. The HTTP API's JSON and events and the Python client use them.
ROLE_NAMES = {value: role.value for value, role in ROLE_FROM_PB.items()}
TIER_NAMES = {value: tier.value for value, tier in TIER_FROM_PB.items()}
FINISH_NAMES = {value: finish.value for value, finish in FINISH_FROM_PB.items()}
# The model a caller asks for, by name: "auto" lets the router choose the pool, the others
# are pool names. The HTTP API, the OpenAI-compatible API and the Python client take these.
AUTO_MODEL = "auto"
MODEL_CHOICES = {
    AUTO_MODEL: chat_service_pb2.MODEL_CHOICE_AUTO,
    "small": chat_service_pb2.MODEL_CHOICE_SMALL,
    "large": chat_service_pb2.MODEL_CHOICE_LARGE,
}
TOOL_CHOICE_TO_PB = {
    ToolChoice.AUTO: common_pb2.TOOL_CHOICE_UNSPECIFIED,
    ToolChoice.NONE: common_pb2.TOOL_CHOICE_NONE,
    ToolChoice.REQUIRED: common_pb2.TOOL_CHOICE_REQUIRED,
    ToolChoice.NAMED: common_pb2.TOOL_CHOICE_NAMED,
}
TOOL_CHOICE_FROM_PB = {v: k for k, v in TOOL_CHOICE_TO_PB.items()}


def tool_call_to_pb(call: ToolCall) -> common_pb2.ToolCall:
    return common_pb2.ToolCall(id=call.call_id, name=call.name, arguments=call.arguments)


def tool_call_from_pb(call: common_pb2.ToolCall) -> ToolCall:
    return ToolCall(call.id, call.name, call.arguments)


def usage_to_pb(usage: Usage) -> common_pb2.Usage:
    return common_pb2.Usage(
        input_tokens=usage.input_tokens,
        cached_tokens=usage.cached_tokens,
        output_tokens=usage.output_tokens,
    )


def turn_to_pb(turn: Turn) -> common_pb2.Turn:
    return common_pb2.Turn(
        role=ROLE_TO_PB[turn.role],
        content=turn.text,
        tool_calls=[tool_call_to_pb(call) for call in turn.tool_calls],
        tool_call_id=turn.tool_call_id,
    )


def turn_from_pb(turn: common_pb2.Turn, tokens: int) -> Turn:
    calls = tuple(tool_call_from_pb(call) for call in turn.tool_calls)
    return Turn(ROLE_FROM_PB[turn.role], turn.content, tokens, calls, turn.tool_call_id)


def options_to_pb(options: AnswerOptions) -> common_pb2.AnswerOptions:
    return common_pb2.AnswerOptions(
        temperature=options.temperature,
        top_p=options.top_p,
        stop=options.stop,
        seed=options.seed,
        frequency_penalty=options.frequency_penalty,
        presence_penalty=options.presence_penalty,
        json_object=options.json_object,
        json_schema=options.json_schema,
        tools=[tool_definition_to_pb(t) for t in options.tools],
        tool_choice=TOOL_CHOICE_TO_PB[options.tool_choice],
        tool_choice_name=options.tool_choice_name,
        single_tool_call=not options.parallel_tool_calls,
        citation_ids=options.citation_ids,
    )


def _optional(message: common_pb2.AnswerOptions, name: str) -> float | None:
    return getattr(message, name) if message.HasField(name) else None


def tool_definition_to_pb(tool: ToolDefinition) -> common_pb2.ToolDefinition:
    return common_pb2.ToolDefinition(name=tool.name, description=tool.description,
                                     parameters=tool.parameters, strict=tool.strict)  # fmt: skip


def tools_from_pb(tools: Iterable[common_pb2.ToolDefinition]) -> tuple[ToolDefinition, ...]:
    return tuple(ToolDefinition(t.name, t.description, t.parameters, t.strict) for t in tools)


def options_from_pb(message: common_pb2.AnswerOptions) -> AnswerOptions:
    return AnswerOptions(
        temperature=_optional(message, "temperature"),
        top_p=_optional(message, "top_p"),
        stop=tuple(message.stop),
        seed=message.seed if message.HasField("seed") else None,
        frequency_penalty=_optional(message, "frequency_penalty"),
        presence_penalty=_optional(message, "presence_penalty"),
        json_object=message.json_object,
        json_schema=message.json_schema,
        tools=tools_from_pb(message.tools),
        tool_choice=TOOL_CHOICE_FROM_PB.get(message.tool_choice, ToolChoice.AUTO),
        tool_choice_name=message.tool_choice_name,
        parallel_tool_calls=not message.single_tool_call,
        citation_ids=tuple(message.citation_ids),
    )
