"""Protobuf <-> domain values shared by every service and client, defined once: common.proto's
enums, the short names callers read for them, and the model names callers choose from."""

from __future__ import annotations

from chat.v1 import chat_service_pb2, common_pb2
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
