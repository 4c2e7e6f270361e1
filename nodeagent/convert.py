"""Protobuf <-> domain values for the node's API."""

from __future__ import annotations

from chat.v1 import common_pb2, node_service_pb2
from domain.types import Finish, Role, Tier, Usage
from nodeagent.engine import Finished, GenerationRequest, PromptTurn

ROLE_FROM_PB = {
    common_pb2.ROLE_SYSTEM: Role.SYSTEM,
    common_pb2.ROLE_USER: Role.USER,
    common_pb2.ROLE_ASSISTANT: Role.ASSISTANT,
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


def usage_to_pb(usage: Usage) -> common_pb2.Usage:
    return common_pb2.Usage(
        input_tokens=usage.input_tokens,
        cached_tokens=usage.cached_tokens,
        output_tokens=usage.output_tokens,
    )


def usage_from_pb(usage: common_pb2.Usage) -> Usage:
    return Usage(usage.input_tokens, usage.cached_tokens, usage.output_tokens)


def request_from_pb(start: node_service_pb2.GenerateStart) -> GenerationRequest:
    return GenerationRequest(
        request_id=start.request_id,
        turns=tuple(PromptTurn(ROLE_FROM_PB[t.role], t.content) for t in start.turns),
        max_tokens=start.max_tokens,
        tier=TIER_FROM_PB.get(start.tier, Tier.FREE),
        continue_from=start.continue_from,
        temperature=start.temperature,
        prompt_tokens=start.prompt_tokens,
    )


def finish_to_pb(finished: Finished, model: str) -> node_service_pb2.GenerateResponse:
    return node_service_pb2.GenerateResponse(
        finish=node_service_pb2.GenerateFinish(
            finish=FINISH_TO_PB[finished.finish], usage=usage_to_pb(finished.usage), model=model
        )
    )
