import datetime

from chat.v1 import common_pb2 as _common_pb2
from google.protobuf import timestamp_pb2 as _timestamp_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class NodeState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    NODE_STATE_UNSPECIFIED: _ClassVar[NodeState]
    NODE_STATE_STARTING: _ClassVar[NodeState]
    NODE_STATE_READY: _ClassVar[NodeState]
    NODE_STATE_DRAINING: _ClassVar[NodeState]
    NODE_STATE_DEAD: _ClassVar[NodeState]

class NodeCommand(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    NODE_COMMAND_UNSPECIFIED: _ClassVar[NodeCommand]
    NODE_COMMAND_DRAIN: _ClassVar[NodeCommand]
    NODE_COMMAND_UNDRAIN: _ClassVar[NodeCommand]

class PickReason(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    PICK_REASON_UNSPECIFIED: _ClassVar[PickReason]
    PICK_REASON_AFFINITY: _ClassVar[PickReason]
    PICK_REASON_ESCAPED_QUEUE: _ClassVar[PickReason]
    PICK_REASON_ESCAPED_KV_ROOM: _ClassVar[PickReason]
    PICK_REASON_NO_REPLICA: _ClassVar[PickReason]
    PICK_REASON_MOVED: _ClassVar[PickReason]
    PICK_REASON_COLD: _ClassVar[PickReason]

class PickRefusal(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    PICK_REFUSAL_UNSPECIFIED: _ClassVar[PickRefusal]
    PICK_REFUSAL_INVALID_ARGUMENT: _ClassVar[PickRefusal]
    PICK_REFUSAL_NO_REPLICA: _ClassVar[PickRefusal]
NODE_STATE_UNSPECIFIED: NodeState
NODE_STATE_STARTING: NodeState
NODE_STATE_READY: NodeState
NODE_STATE_DRAINING: NodeState
NODE_STATE_DEAD: NodeState
NODE_COMMAND_UNSPECIFIED: NodeCommand
NODE_COMMAND_DRAIN: NodeCommand
NODE_COMMAND_UNDRAIN: NodeCommand
PICK_REASON_UNSPECIFIED: PickReason
PICK_REASON_AFFINITY: PickReason
PICK_REASON_ESCAPED_QUEUE: PickReason
PICK_REASON_ESCAPED_KV_ROOM: PickReason
PICK_REASON_NO_REPLICA: PickReason
PICK_REASON_MOVED: PickReason
PICK_REASON_COLD: PickReason
PICK_REFUSAL_UNSPECIFIED: PickRefusal
PICK_REFUSAL_INVALID_ARGUMENT: PickRefusal
PICK_REFUSAL_NO_REPLICA: PickRefusal

class GetCapturedPromptRequest(_message.Message):
    __slots__ = ("user_id", "message_id")
    USER_ID_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_ID_FIELD_NUMBER: _ClassVar[int]
    user_id: str
    message_id: str
    def __init__(self, user_id: _Optional[str] = ..., message_id: _Optional[str] = ...) -> None: ...

class GetCapturedPromptResponse(_message.Message):
    __slots__ = ("message_id", "conversation_id", "version", "model", "node_id", "temperature", "max_tokens", "turns", "captured_at", "tools")
    MESSAGE_ID_FIELD_NUMBER: _ClassVar[int]
    CONVERSATION_ID_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    TEMPERATURE_FIELD_NUMBER: _ClassVar[int]
    MAX_TOKENS_FIELD_NUMBER: _ClassVar[int]
    TURNS_FIELD_NUMBER: _ClassVar[int]
    CAPTURED_AT_FIELD_NUMBER: _ClassVar[int]
    TOOLS_FIELD_NUMBER: _ClassVar[int]
    message_id: str
    conversation_id: str
    version: str
    model: str
    node_id: str
    temperature: float
    max_tokens: int
    turns: _containers.RepeatedCompositeFieldContainer[CapturedTurn]
    captured_at: _timestamp_pb2.Timestamp
    tools: _containers.RepeatedCompositeFieldContainer[_common_pb2.ToolDefinition]
    def __init__(self, message_id: _Optional[str] = ..., conversation_id: _Optional[str] = ..., version: _Optional[str] = ..., model: _Optional[str] = ..., node_id: _Optional[str] = ..., temperature: _Optional[float] = ..., max_tokens: _Optional[int] = ..., turns: _Optional[_Iterable[_Union[CapturedTurn, _Mapping]]] = ..., captured_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., tools: _Optional[_Iterable[_Union[_common_pb2.ToolDefinition, _Mapping]]] = ...) -> None: ...

class CapturedTurn(_message.Message):
    __slots__ = ("turn", "tokens")
    TURN_FIELD_NUMBER: _ClassVar[int]
    TOKENS_FIELD_NUMBER: _ClassVar[int]
    turn: _common_pb2.Turn
    tokens: int
    def __init__(self, turn: _Optional[_Union[_common_pb2.Turn, _Mapping]] = ..., tokens: _Optional[int] = ...) -> None: ...

class NodeRegistration(_message.Message):
    __slots__ = ("node_id", "address", "model", "pool", "context_tokens", "kv_capacity_tokens", "max_running_requests")
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    POOL_FIELD_NUMBER: _ClassVar[int]
    CONTEXT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    KV_CAPACITY_TOKENS_FIELD_NUMBER: _ClassVar[int]
    MAX_RUNNING_REQUESTS_FIELD_NUMBER: _ClassVar[int]
    node_id: str
    address: str
    model: str
    pool: str
    context_tokens: int
    kv_capacity_tokens: int
    max_running_requests: int
    def __init__(self, node_id: _Optional[str] = ..., address: _Optional[str] = ..., model: _Optional[str] = ..., pool: _Optional[str] = ..., context_tokens: _Optional[int] = ..., kv_capacity_tokens: _Optional[int] = ..., max_running_requests: _Optional[int] = ...) -> None: ...

class LoadReport(_message.Message):
    __slots__ = ("kv_usage", "free_kv_tokens", "queued_prefill_tokens", "running_requests", "waiting_requests", "prefix_hit_rate", "state", "prefill_tokens_per_second", "decode_step_seconds", "answer_seconds")
    KV_USAGE_FIELD_NUMBER: _ClassVar[int]
    FREE_KV_TOKENS_FIELD_NUMBER: _ClassVar[int]
    QUEUED_PREFILL_TOKENS_FIELD_NUMBER: _ClassVar[int]
    RUNNING_REQUESTS_FIELD_NUMBER: _ClassVar[int]
    WAITING_REQUESTS_FIELD_NUMBER: _ClassVar[int]
    PREFIX_HIT_RATE_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    PREFILL_TOKENS_PER_SECOND_FIELD_NUMBER: _ClassVar[int]
    DECODE_STEP_SECONDS_FIELD_NUMBER: _ClassVar[int]
    ANSWER_SECONDS_FIELD_NUMBER: _ClassVar[int]
    kv_usage: float
    free_kv_tokens: int
    queued_prefill_tokens: int
    running_requests: int
    waiting_requests: int
    prefix_hit_rate: float
    state: NodeState
    prefill_tokens_per_second: float
    decode_step_seconds: float
    answer_seconds: float
    def __init__(self, kv_usage: _Optional[float] = ..., free_kv_tokens: _Optional[int] = ..., queued_prefill_tokens: _Optional[int] = ..., running_requests: _Optional[int] = ..., waiting_requests: _Optional[int] = ..., prefix_hit_rate: _Optional[float] = ..., state: _Optional[_Union[NodeState, str]] = ..., prefill_tokens_per_second: _Optional[float] = ..., decode_step_seconds: _Optional[float] = ..., answer_seconds: _Optional[float] = ...) -> None: ...

class ConnectNodeRequest(_message.Message):
    __slots__ = ("registration", "load")
    REGISTRATION_FIELD_NUMBER: _ClassVar[int]
    LOAD_FIELD_NUMBER: _ClassVar[int]
    registration: NodeRegistration
    load: LoadReport
    def __init__(self, registration: _Optional[_Union[NodeRegistration, _Mapping]] = ..., load: _Optional[_Union[LoadReport, _Mapping]] = ...) -> None: ...

class ConnectNodeResponse(_message.Message):
    __slots__ = ("command",)
    COMMAND_FIELD_NUMBER: _ClassVar[int]
    command: NodeCommand
    def __init__(self, command: _Optional[_Union[NodeCommand, str]] = ...) -> None: ...

class PickReplicaRequest(_message.Message):
    __slots__ = ("conversation_id", "pool", "tier", "prompt_tokens", "reusable_prefix_tokens", "exclude_node_ids", "model")
    CONVERSATION_ID_FIELD_NUMBER: _ClassVar[int]
    POOL_FIELD_NUMBER: _ClassVar[int]
    TIER_FIELD_NUMBER: _ClassVar[int]
    PROMPT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    REUSABLE_PREFIX_TOKENS_FIELD_NUMBER: _ClassVar[int]
    EXCLUDE_NODE_IDS_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    conversation_id: str
    pool: str
    tier: _common_pb2.Tier
    prompt_tokens: int
    reusable_prefix_tokens: int
    exclude_node_ids: _containers.RepeatedScalarFieldContainer[str]
    model: str
    def __init__(self, conversation_id: _Optional[str] = ..., pool: _Optional[str] = ..., tier: _Optional[_Union[_common_pb2.Tier, str]] = ..., prompt_tokens: _Optional[int] = ..., reusable_prefix_tokens: _Optional[int] = ..., exclude_node_ids: _Optional[_Iterable[str]] = ..., model: _Optional[str] = ...) -> None: ...

class PickReplicaResponse(_message.Message):
    __slots__ = ("node_id", "address", "reason", "expected_wait_seconds", "ladder_rung", "model", "context_tokens")
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    EXPECTED_WAIT_SECONDS_FIELD_NUMBER: _ClassVar[int]
    LADDER_RUNG_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    CONTEXT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    node_id: str
    address: str
    reason: PickReason
    expected_wait_seconds: float
    ladder_rung: int
    model: str
    context_tokens: int
    def __init__(self, node_id: _Optional[str] = ..., address: _Optional[str] = ..., reason: _Optional[_Union[PickReason, str]] = ..., expected_wait_seconds: _Optional[float] = ..., ladder_rung: _Optional[int] = ..., model: _Optional[str] = ..., context_tokens: _Optional[int] = ...) -> None: ...

class PickReplicasRequest(_message.Message):
    __slots__ = ("pick_id", "pick")
    PICK_ID_FIELD_NUMBER: _ClassVar[int]
    PICK_FIELD_NUMBER: _ClassVar[int]
    pick_id: int
    pick: PickReplicaRequest
    def __init__(self, pick_id: _Optional[int] = ..., pick: _Optional[_Union[PickReplicaRequest, _Mapping]] = ...) -> None: ...

class PickReplicasResponse(_message.Message):
    __slots__ = ("pick_id", "pick", "refusal", "detail")
    PICK_ID_FIELD_NUMBER: _ClassVar[int]
    PICK_FIELD_NUMBER: _ClassVar[int]
    REFUSAL_FIELD_NUMBER: _ClassVar[int]
    DETAIL_FIELD_NUMBER: _ClassVar[int]
    pick_id: int
    pick: PickReplicaResponse
    refusal: PickRefusal
    detail: str
    def __init__(self, pick_id: _Optional[int] = ..., pick: _Optional[_Union[PickReplicaResponse, _Mapping]] = ..., refusal: _Optional[_Union[PickRefusal, str]] = ..., detail: _Optional[str] = ...) -> None: ...

class NodeStatus(_message.Message):
    __slots__ = ("registration", "load", "last_report_at")
    REGISTRATION_FIELD_NUMBER: _ClassVar[int]
    LOAD_FIELD_NUMBER: _ClassVar[int]
    LAST_REPORT_AT_FIELD_NUMBER: _ClassVar[int]
    registration: NodeRegistration
    load: LoadReport
    last_report_at: _timestamp_pb2.Timestamp
    def __init__(self, registration: _Optional[_Union[NodeRegistration, _Mapping]] = ..., load: _Optional[_Union[LoadReport, _Mapping]] = ..., last_report_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class ListNodesRequest(_message.Message):
    __slots__ = ("pool",)
    POOL_FIELD_NUMBER: _ClassVar[int]
    pool: str
    def __init__(self, pool: _Optional[str] = ...) -> None: ...

class ListNodesResponse(_message.Message):
    __slots__ = ("nodes",)
    NODES_FIELD_NUMBER: _ClassVar[int]
    nodes: _containers.RepeatedCompositeFieldContainer[NodeStatus]
    def __init__(self, nodes: _Optional[_Iterable[_Union[NodeStatus, _Mapping]]] = ...) -> None: ...

class DrainNodeRequest(_message.Message):
    __slots__ = ("node_id",)
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    node_id: str
    def __init__(self, node_id: _Optional[str] = ...) -> None: ...

class DrainNodeResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class UndrainNodeRequest(_message.Message):
    __slots__ = ("node_id",)
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    node_id: str
    def __init__(self, node_id: _Optional[str] = ...) -> None: ...

class UndrainNodeResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class GetLadderRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class GetLadderResponse(_message.Message):
    __slots__ = ("rung", "busy_share", "pinned", "history", "leading")
    RUNG_FIELD_NUMBER: _ClassVar[int]
    BUSY_SHARE_FIELD_NUMBER: _ClassVar[int]
    PINNED_FIELD_NUMBER: _ClassVar[int]
    HISTORY_FIELD_NUMBER: _ClassVar[int]
    LEADING_FIELD_NUMBER: _ClassVar[int]
    rung: int
    busy_share: float
    pinned: bool
    history: _containers.RepeatedCompositeFieldContainer[LadderChange]
    leading: bool
    def __init__(self, rung: _Optional[int] = ..., busy_share: _Optional[float] = ..., pinned: _Optional[bool] = ..., history: _Optional[_Iterable[_Union[LadderChange, _Mapping]]] = ..., leading: _Optional[bool] = ...) -> None: ...

class LadderChange(_message.Message):
    __slots__ = ("at", "from_rung", "to_rung", "busy_share", "reason")
    AT_FIELD_NUMBER: _ClassVar[int]
    FROM_RUNG_FIELD_NUMBER: _ClassVar[int]
    TO_RUNG_FIELD_NUMBER: _ClassVar[int]
    BUSY_SHARE_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    at: _timestamp_pb2.Timestamp
    from_rung: int
    to_rung: int
    busy_share: float
    reason: str
    def __init__(self, at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., from_rung: _Optional[int] = ..., to_rung: _Optional[int] = ..., busy_share: _Optional[float] = ..., reason: _Optional[str] = ...) -> None: ...

class PinLadderRequest(_message.Message):
    __slots__ = ("rung",)
    RUNG_FIELD_NUMBER: _ClassVar[int]
    rung: int
    def __init__(self, rung: _Optional[int] = ...) -> None: ...

class PinLadderResponse(_message.Message):
    __slots__ = ("rung", "pinned")
    RUNG_FIELD_NUMBER: _ClassVar[int]
    PINNED_FIELD_NUMBER: _ClassVar[int]
    rung: int
    pinned: bool
    def __init__(self, rung: _Optional[int] = ..., pinned: _Optional[bool] = ...) -> None: ...

class User(_message.Message):
    __slots__ = ("user_id", "tier", "created_at", "has_token", "home_region", "pinned")
    USER_ID_FIELD_NUMBER: _ClassVar[int]
    TIER_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    HAS_TOKEN_FIELD_NUMBER: _ClassVar[int]
    HOME_REGION_FIELD_NUMBER: _ClassVar[int]
    PINNED_FIELD_NUMBER: _ClassVar[int]
    user_id: str
    tier: _common_pb2.Tier
    created_at: _timestamp_pb2.Timestamp
    has_token: bool
    home_region: str
    pinned: bool
    def __init__(self, user_id: _Optional[str] = ..., tier: _Optional[_Union[_common_pb2.Tier, str]] = ..., created_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., has_token: _Optional[bool] = ..., home_region: _Optional[str] = ..., pinned: _Optional[bool] = ...) -> None: ...

class CreateUserRequest(_message.Message):
    __slots__ = ("user_id", "tier", "home_region", "pinned")
    USER_ID_FIELD_NUMBER: _ClassVar[int]
    TIER_FIELD_NUMBER: _ClassVar[int]
    HOME_REGION_FIELD_NUMBER: _ClassVar[int]
    PINNED_FIELD_NUMBER: _ClassVar[int]
    user_id: str
    tier: _common_pb2.Tier
    home_region: str
    pinned: bool
    def __init__(self, user_id: _Optional[str] = ..., tier: _Optional[_Union[_common_pb2.Tier, str]] = ..., home_region: _Optional[str] = ..., pinned: _Optional[bool] = ...) -> None: ...

class CreateUserResponse(_message.Message):
    __slots__ = ("user", "token")
    USER_FIELD_NUMBER: _ClassVar[int]
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    user: User
    token: str
    def __init__(self, user: _Optional[_Union[User, _Mapping]] = ..., token: _Optional[str] = ...) -> None: ...

class ListUsersRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListUsersResponse(_message.Message):
    __slots__ = ("users",)
    USERS_FIELD_NUMBER: _ClassVar[int]
    users: _containers.RepeatedCompositeFieldContainer[User]
    def __init__(self, users: _Optional[_Iterable[_Union[User, _Mapping]]] = ...) -> None: ...

class SetUserTierRequest(_message.Message):
    __slots__ = ("user_id", "tier")
    USER_ID_FIELD_NUMBER: _ClassVar[int]
    TIER_FIELD_NUMBER: _ClassVar[int]
    user_id: str
    tier: _common_pb2.Tier
    def __init__(self, user_id: _Optional[str] = ..., tier: _Optional[_Union[_common_pb2.Tier, str]] = ...) -> None: ...

class SetUserTierResponse(_message.Message):
    __slots__ = ("user",)
    USER_FIELD_NUMBER: _ClassVar[int]
    user: User
    def __init__(self, user: _Optional[_Union[User, _Mapping]] = ...) -> None: ...

class RotateUserTokenRequest(_message.Message):
    __slots__ = ("user_id",)
    USER_ID_FIELD_NUMBER: _ClassVar[int]
    user_id: str
    def __init__(self, user_id: _Optional[str] = ...) -> None: ...

class RotateUserTokenResponse(_message.Message):
    __slots__ = ("token",)
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    token: str
    def __init__(self, token: _Optional[str] = ...) -> None: ...

class RevokeUserTokensRequest(_message.Message):
    __slots__ = ("user_id",)
    USER_ID_FIELD_NUMBER: _ClassVar[int]
    user_id: str
    def __init__(self, user_id: _Optional[str] = ...) -> None: ...

class RevokeUserTokensResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class UserServiceCreateUserRequest(_message.Message):
    __slots__ = ("user_id", "tier", "home_region", "pinned")
    USER_ID_FIELD_NUMBER: _ClassVar[int]
    TIER_FIELD_NUMBER: _ClassVar[int]
    HOME_REGION_FIELD_NUMBER: _ClassVar[int]
    PINNED_FIELD_NUMBER: _ClassVar[int]
    user_id: str
    tier: _common_pb2.Tier
    home_region: str
    pinned: bool
    def __init__(self, user_id: _Optional[str] = ..., tier: _Optional[_Union[_common_pb2.Tier, str]] = ..., home_region: _Optional[str] = ..., pinned: _Optional[bool] = ...) -> None: ...

class UserServiceCreateUserResponse(_message.Message):
    __slots__ = ("user", "token")
    USER_FIELD_NUMBER: _ClassVar[int]
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    user: User
    token: str
    def __init__(self, user: _Optional[_Union[User, _Mapping]] = ..., token: _Optional[str] = ...) -> None: ...

class UserServiceListUsersRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class UserServiceListUsersResponse(_message.Message):
    __slots__ = ("users",)
    USERS_FIELD_NUMBER: _ClassVar[int]
    users: _containers.RepeatedCompositeFieldContainer[User]
    def __init__(self, users: _Optional[_Iterable[_Union[User, _Mapping]]] = ...) -> None: ...

class UserServiceSetUserTierRequest(_message.Message):
    __slots__ = ("user_id", "tier")
    USER_ID_FIELD_NUMBER: _ClassVar[int]
    TIER_FIELD_NUMBER: _ClassVar[int]
    user_id: str
    tier: _common_pb2.Tier
    def __init__(self, user_id: _Optional[str] = ..., tier: _Optional[_Union[_common_pb2.Tier, str]] = ...) -> None: ...

class UserServiceSetUserTierResponse(_message.Message):
    __slots__ = ("user",)
    USER_FIELD_NUMBER: _ClassVar[int]
    user: User
    def __init__(self, user: _Optional[_Union[User, _Mapping]] = ...) -> None: ...

class UserServiceRotateUserTokenRequest(_message.Message):
    __slots__ = ("user_id",)
    USER_ID_FIELD_NUMBER: _ClassVar[int]
    user_id: str
    def __init__(self, user_id: _Optional[str] = ...) -> None: ...

class UserServiceRotateUserTokenResponse(_message.Message):
    __slots__ = ("token",)
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    token: str
    def __init__(self, token: _Optional[str] = ...) -> None: ...

class UserServiceRevokeUserTokensRequest(_message.Message):
    __slots__ = ("user_id",)
    USER_ID_FIELD_NUMBER: _ClassVar[int]
    user_id: str
    def __init__(self, user_id: _Optional[str] = ...) -> None: ...

class UserServiceRevokeUserTokensResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ModelVersion(_message.Message):
    __slots__ = ("name", "model", "system_prompt", "temperature")
    NAME_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    SYSTEM_PROMPT_FIELD_NUMBER: _ClassVar[int]
    TEMPERATURE_FIELD_NUMBER: _ClassVar[int]
    name: str
    model: str
    system_prompt: str
    temperature: float
    def __init__(self, name: _Optional[str] = ..., model: _Optional[str] = ..., system_prompt: _Optional[str] = ..., temperature: _Optional[float] = ...) -> None: ...

class RolloutChange(_message.Message):
    __slots__ = ("at", "action", "version", "detail")
    AT_FIELD_NUMBER: _ClassVar[int]
    ACTION_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    DETAIL_FIELD_NUMBER: _ClassVar[int]
    at: _timestamp_pb2.Timestamp
    action: str
    version: str
    detail: str
    def __init__(self, at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., action: _Optional[str] = ..., version: _Optional[str] = ..., detail: _Optional[str] = ...) -> None: ...

class UserPin(_message.Message):
    __slots__ = ("user_id", "version")
    USER_ID_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    user_id: str
    version: str
    def __init__(self, user_id: _Optional[str] = ..., version: _Optional[str] = ...) -> None: ...

class Rollout(_message.Message):
    __slots__ = ("versions", "current", "candidate", "percent", "salt", "holdout_version", "holdout_salt", "holdout_percent", "pins", "history", "gates")
    class PercentEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: float
        def __init__(self, key: _Optional[str] = ..., value: _Optional[float] = ...) -> None: ...
    VERSIONS_FIELD_NUMBER: _ClassVar[int]
    CURRENT_FIELD_NUMBER: _ClassVar[int]
    CANDIDATE_FIELD_NUMBER: _ClassVar[int]
    PERCENT_FIELD_NUMBER: _ClassVar[int]
    SALT_FIELD_NUMBER: _ClassVar[int]
    HOLDOUT_VERSION_FIELD_NUMBER: _ClassVar[int]
    HOLDOUT_SALT_FIELD_NUMBER: _ClassVar[int]
    HOLDOUT_PERCENT_FIELD_NUMBER: _ClassVar[int]
    PINS_FIELD_NUMBER: _ClassVar[int]
    HISTORY_FIELD_NUMBER: _ClassVar[int]
    GATES_FIELD_NUMBER: _ClassVar[int]
    versions: _containers.RepeatedCompositeFieldContainer[ModelVersion]
    current: str
    candidate: str
    percent: _containers.ScalarMap[str, float]
    salt: str
    holdout_version: str
    holdout_salt: str
    holdout_percent: float
    pins: _containers.RepeatedCompositeFieldContainer[UserPin]
    history: _containers.RepeatedCompositeFieldContainer[RolloutChange]
    gates: _containers.RepeatedCompositeFieldContainer[GateResult]
    def __init__(self, versions: _Optional[_Iterable[_Union[ModelVersion, _Mapping]]] = ..., current: _Optional[str] = ..., candidate: _Optional[str] = ..., percent: _Optional[_Mapping[str, float]] = ..., salt: _Optional[str] = ..., holdout_version: _Optional[str] = ..., holdout_salt: _Optional[str] = ..., holdout_percent: _Optional[float] = ..., pins: _Optional[_Iterable[_Union[UserPin, _Mapping]]] = ..., history: _Optional[_Iterable[_Union[RolloutChange, _Mapping]]] = ..., gates: _Optional[_Iterable[_Union[GateResult, _Mapping]]] = ...) -> None: ...

class GetRolloutRequest(_message.Message):
    __slots__ = ("known_revision", "tallies", "wait_ms", "ratings")
    KNOWN_REVISION_FIELD_NUMBER: _ClassVar[int]
    TALLIES_FIELD_NUMBER: _ClassVar[int]
    WAIT_MS_FIELD_NUMBER: _ClassVar[int]
    RATINGS_FIELD_NUMBER: _ClassVar[int]
    known_revision: int
    tallies: _containers.RepeatedCompositeFieldContainer[VersionTally]
    wait_ms: int
    ratings: _containers.RepeatedCompositeFieldContainer[RatedAnswer]
    def __init__(self, known_revision: _Optional[int] = ..., tallies: _Optional[_Iterable[_Union[VersionTally, _Mapping]]] = ..., wait_ms: _Optional[int] = ..., ratings: _Optional[_Iterable[_Union[RatedAnswer, _Mapping]]] = ...) -> None: ...

class RatedAnswer(_message.Message):
    __slots__ = ("user_id", "message_id", "version", "tier", "up")
    USER_ID_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_ID_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    TIER_FIELD_NUMBER: _ClassVar[int]
    UP_FIELD_NUMBER: _ClassVar[int]
    user_id: str
    message_id: str
    version: str
    tier: _common_pb2.Tier
    up: bool
    def __init__(self, user_id: _Optional[str] = ..., message_id: _Optional[str] = ..., version: _Optional[str] = ..., tier: _Optional[_Union[_common_pb2.Tier, str]] = ..., up: _Optional[bool] = ...) -> None: ...

class VersionTally(_message.Message):
    __slots__ = ("version", "tier", "answers", "errors", "refusals", "slow", "thumbs_up", "thumbs_down", "failovers", "ttft_counts", "rate_counts", "citations", "bad_citations")
    VERSION_FIELD_NUMBER: _ClassVar[int]
    TIER_FIELD_NUMBER: _ClassVar[int]
    ANSWERS_FIELD_NUMBER: _ClassVar[int]
    ERRORS_FIELD_NUMBER: _ClassVar[int]
    REFUSALS_FIELD_NUMBER: _ClassVar[int]
    SLOW_FIELD_NUMBER: _ClassVar[int]
    THUMBS_UP_FIELD_NUMBER: _ClassVar[int]
    THUMBS_DOWN_FIELD_NUMBER: _ClassVar[int]
    FAILOVERS_FIELD_NUMBER: _ClassVar[int]
    TTFT_COUNTS_FIELD_NUMBER: _ClassVar[int]
    RATE_COUNTS_FIELD_NUMBER: _ClassVar[int]
    CITATIONS_FIELD_NUMBER: _ClassVar[int]
    BAD_CITATIONS_FIELD_NUMBER: _ClassVar[int]
    version: str
    tier: _common_pb2.Tier
    answers: int
    errors: int
    refusals: int
    slow: int
    thumbs_up: int
    thumbs_down: int
    failovers: int
    ttft_counts: _containers.RepeatedScalarFieldContainer[int]
    rate_counts: _containers.RepeatedScalarFieldContainer[int]
    citations: int
    bad_citations: int
    def __init__(self, version: _Optional[str] = ..., tier: _Optional[_Union[_common_pb2.Tier, str]] = ..., answers: _Optional[int] = ..., errors: _Optional[int] = ..., refusals: _Optional[int] = ..., slow: _Optional[int] = ..., thumbs_up: _Optional[int] = ..., thumbs_down: _Optional[int] = ..., failovers: _Optional[int] = ..., ttft_counts: _Optional[_Iterable[int]] = ..., rate_counts: _Optional[_Iterable[int]] = ..., citations: _Optional[int] = ..., bad_citations: _Optional[int] = ...) -> None: ...

class GetRolloutResponse(_message.Message):
    __slots__ = ("revision", "rollout")
    REVISION_FIELD_NUMBER: _ClassVar[int]
    ROLLOUT_FIELD_NUMBER: _ClassVar[int]
    revision: int
    rollout: Rollout
    def __init__(self, revision: _Optional[int] = ..., rollout: _Optional[_Union[Rollout, _Mapping]] = ...) -> None: ...

class CreateVersionRequest(_message.Message):
    __slots__ = ("version",)
    VERSION_FIELD_NUMBER: _ClassVar[int]
    version: ModelVersion
    def __init__(self, version: _Optional[_Union[ModelVersion, _Mapping]] = ...) -> None: ...

class CreateVersionResponse(_message.Message):
    __slots__ = ("rollout",)
    ROLLOUT_FIELD_NUMBER: _ClassVar[int]
    rollout: Rollout
    def __init__(self, rollout: _Optional[_Union[Rollout, _Mapping]] = ...) -> None: ...

class SplitChange(_message.Message):
    __slots__ = ("version", "tier", "percent")
    VERSION_FIELD_NUMBER: _ClassVar[int]
    TIER_FIELD_NUMBER: _ClassVar[int]
    PERCENT_FIELD_NUMBER: _ClassVar[int]
    version: str
    tier: _common_pb2.Tier
    percent: float
    def __init__(self, version: _Optional[str] = ..., tier: _Optional[_Union[_common_pb2.Tier, str]] = ..., percent: _Optional[float] = ...) -> None: ...

class PromoteChange(_message.Message):
    __slots__ = ("version", "force")
    VERSION_FIELD_NUMBER: _ClassVar[int]
    FORCE_FIELD_NUMBER: _ClassVar[int]
    version: str
    force: bool
    def __init__(self, version: _Optional[str] = ..., force: _Optional[bool] = ...) -> None: ...

class RollbackChange(_message.Message):
    __slots__ = ("reason",)
    REASON_FIELD_NUMBER: _ClassVar[int]
    reason: str
    def __init__(self, reason: _Optional[str] = ...) -> None: ...

class HoldoutChange(_message.Message):
    __slots__ = ("version",)
    VERSION_FIELD_NUMBER: _ClassVar[int]
    version: str
    def __init__(self, version: _Optional[str] = ...) -> None: ...

class PinChange(_message.Message):
    __slots__ = ("user_id", "version")
    USER_ID_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    user_id: str
    version: str
    def __init__(self, user_id: _Optional[str] = ..., version: _Optional[str] = ...) -> None: ...

class GateChange(_message.Message):
    __slots__ = ("candidate", "baseline", "passed", "summary", "sizes")
    CANDIDATE_FIELD_NUMBER: _ClassVar[int]
    BASELINE_FIELD_NUMBER: _ClassVar[int]
    PASSED_FIELD_NUMBER: _ClassVar[int]
    SUMMARY_FIELD_NUMBER: _ClassVar[int]
    SIZES_FIELD_NUMBER: _ClassVar[int]
    candidate: str
    baseline: str
    passed: bool
    summary: str
    sizes: GateSizes
    def __init__(self, candidate: _Optional[str] = ..., baseline: _Optional[str] = ..., passed: _Optional[bool] = ..., summary: _Optional[str] = ..., sizes: _Optional[_Union[GateSizes, _Mapping]] = ...) -> None: ...

class GateSizes(_message.Message):
    __slots__ = ("golden_pairs", "harmful_prompts", "harmless_prompts", "min_set_size")
    GOLDEN_PAIRS_FIELD_NUMBER: _ClassVar[int]
    HARMFUL_PROMPTS_FIELD_NUMBER: _ClassVar[int]
    HARMLESS_PROMPTS_FIELD_NUMBER: _ClassVar[int]
    MIN_SET_SIZE_FIELD_NUMBER: _ClassVar[int]
    golden_pairs: int
    harmful_prompts: int
    harmless_prompts: int
    min_set_size: int
    def __init__(self, golden_pairs: _Optional[int] = ..., harmful_prompts: _Optional[int] = ..., harmless_prompts: _Optional[int] = ..., min_set_size: _Optional[int] = ...) -> None: ...

class GateResult(_message.Message):
    __slots__ = ("candidate", "baseline", "passed", "at", "summary", "sizes")
    CANDIDATE_FIELD_NUMBER: _ClassVar[int]
    BASELINE_FIELD_NUMBER: _ClassVar[int]
    PASSED_FIELD_NUMBER: _ClassVar[int]
    AT_FIELD_NUMBER: _ClassVar[int]
    SUMMARY_FIELD_NUMBER: _ClassVar[int]
    SIZES_FIELD_NUMBER: _ClassVar[int]
    candidate: str
    baseline: str
    passed: bool
    at: _timestamp_pb2.Timestamp
    summary: str
    sizes: GateSizes
    def __init__(self, candidate: _Optional[str] = ..., baseline: _Optional[str] = ..., passed: _Optional[bool] = ..., at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., summary: _Optional[str] = ..., sizes: _Optional[_Union[GateSizes, _Mapping]] = ...) -> None: ...

class ChangeRolloutRequest(_message.Message):
    __slots__ = ("split", "promote", "rollback", "holdout", "pin", "gate")
    SPLIT_FIELD_NUMBER: _ClassVar[int]
    PROMOTE_FIELD_NUMBER: _ClassVar[int]
    ROLLBACK_FIELD_NUMBER: _ClassVar[int]
    HOLDOUT_FIELD_NUMBER: _ClassVar[int]
    PIN_FIELD_NUMBER: _ClassVar[int]
    GATE_FIELD_NUMBER: _ClassVar[int]
    split: SplitChange
    promote: PromoteChange
    rollback: RollbackChange
    holdout: HoldoutChange
    pin: PinChange
    gate: GateChange
    def __init__(self, split: _Optional[_Union[SplitChange, _Mapping]] = ..., promote: _Optional[_Union[PromoteChange, _Mapping]] = ..., rollback: _Optional[_Union[RollbackChange, _Mapping]] = ..., holdout: _Optional[_Union[HoldoutChange, _Mapping]] = ..., pin: _Optional[_Union[PinChange, _Mapping]] = ..., gate: _Optional[_Union[GateChange, _Mapping]] = ...) -> None: ...

class ChangeRolloutResponse(_message.Message):
    __slots__ = ("rollout",)
    ROLLOUT_FIELD_NUMBER: _ClassVar[int]
    rollout: Rollout
    def __init__(self, rollout: _Optional[_Union[Rollout, _Mapping]] = ...) -> None: ...

class GetVersionScoresRequest(_message.Message):
    __slots__ = ("version",)
    VERSION_FIELD_NUMBER: _ClassVar[int]
    version: str
    def __init__(self, version: _Optional[str] = ...) -> None: ...

class GetVersionScoresResponse(_message.Message):
    __slots__ = ("tallies", "window_seconds")
    TALLIES_FIELD_NUMBER: _ClassVar[int]
    WINDOW_SECONDS_FIELD_NUMBER: _ClassVar[int]
    tallies: _containers.RepeatedCompositeFieldContainer[VersionTally]
    window_seconds: float
    def __init__(self, tallies: _Optional[_Iterable[_Union[VersionTally, _Mapping]]] = ..., window_seconds: _Optional[float] = ...) -> None: ...

class UserServiceDeleteUserRequest(_message.Message):
    __slots__ = ("user_id",)
    USER_ID_FIELD_NUMBER: _ClassVar[int]
    user_id: str
    def __init__(self, user_id: _Optional[str] = ...) -> None: ...

class UserServiceDeleteUserResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class UserMemory(_message.Message):
    __slots__ = ("memory_id", "text", "pinned", "source", "created_at", "updated_at")
    MEMORY_ID_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    PINNED_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    UPDATED_AT_FIELD_NUMBER: _ClassVar[int]
    memory_id: str
    text: str
    pinned: bool
    source: str
    created_at: _timestamp_pb2.Timestamp
    updated_at: _timestamp_pb2.Timestamp
    def __init__(self, memory_id: _Optional[str] = ..., text: _Optional[str] = ..., pinned: _Optional[bool] = ..., source: _Optional[str] = ..., created_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., updated_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class UserServiceExportUserMemoriesRequest(_message.Message):
    __slots__ = ("user_id",)
    USER_ID_FIELD_NUMBER: _ClassVar[int]
    user_id: str
    def __init__(self, user_id: _Optional[str] = ...) -> None: ...

class UserServiceExportUserMemoriesResponse(_message.Message):
    __slots__ = ("memories",)
    MEMORIES_FIELD_NUMBER: _ClassVar[int]
    memories: _containers.RepeatedCompositeFieldContainer[UserMemory]
    def __init__(self, memories: _Optional[_Iterable[_Union[UserMemory, _Mapping]]] = ...) -> None: ...

class UserServiceDeleteUserMemoriesRequest(_message.Message):
    __slots__ = ("user_id", "memory_ids")
    USER_ID_FIELD_NUMBER: _ClassVar[int]
    MEMORY_IDS_FIELD_NUMBER: _ClassVar[int]
    user_id: str
    memory_ids: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, user_id: _Optional[str] = ..., memory_ids: _Optional[_Iterable[str]] = ...) -> None: ...

class UserServiceDeleteUserMemoriesResponse(_message.Message):
    __slots__ = ("deleted",)
    DELETED_FIELD_NUMBER: _ClassVar[int]
    deleted: int
    def __init__(self, deleted: _Optional[int] = ...) -> None: ...
