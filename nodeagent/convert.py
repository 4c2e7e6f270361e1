"""Protobuf <-> domain values for the node's API."""

from __future__ import annotations

from chat.v1 import common_pb2, node_service_pb2
from domain.types import Tier, Usage
from infra.convert import (
    FINISH_TO_PB,
    ROLE_FROM_PB,
    TIER_FROM_PB,
    options_from_pb,
    tool_call_from_pb,
    tool_call_to_pb,
    usage_to_pb,
)
from nodeagent.engine import Finished, GenerationRequest, PromptTurn


def usage_from_pb(usage: common_pb2.Usage) -> Usage:
    return Usage(usage.input_tokens, usage.cached_tokens, usage.output_tokens)


def request_from_pb(
    start: node_service_pb2.GenerateStart, stream_interval_s: float = 0.0
) -> GenerationRequest:
    return GenerationRequest(
        request_id=start.request_id,
        turns=tuple(_turn(t) for t in start.turns),
        max_tokens=start.max_tokens,
        tier=TIER_FROM_PB.get(start.tier, Tier.FREE),
        continue_from=start.continue_from,
        temperature=start.temperature,
        prompt_tokens=start.prompt_tokens,
        options=options_from_pb(start.options),
        stream_interval_s=stream_interval_s,
    )


def _turn(turn: common_pb2.Turn) -> PromptTurn:
    calls = tuple(tool_call_from_pb(call) for call in turn.tool_calls)
    return PromptTurn(ROLE_FROM_PB[turn.role], turn.content, calls, turn.tool_call_id)


def finish_to_pb(finished: Finished, model: str) -> node_service_pb2.GenerateResponse:
    return node_service_pb2.GenerateResponse(
        finish=node_service_pb2.GenerateFinish(
            finish=FINISH_TO_PB[finished.finish],
            usage=usage_to_pb(finished.usage),
            model=model,
            tool_calls=[tool_call_to_pb(call) for call in finished.tool_calls],
            engine_lost=finished.engine_lost,
        )
    )
