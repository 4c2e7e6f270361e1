"""The shared enums of common.proto <-> their domain values, defined once for every service."""

from __future__ import annotations

from chat.v1 import common_pb2
from domain.types import Finish, Role, Tier

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
