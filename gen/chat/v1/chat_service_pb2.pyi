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

class ModelChoice(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    MODEL_CHOICE_UNSPECIFIED: _ClassVar[ModelChoice]
    MODEL_CHOICE_AUTO: _ClassVar[ModelChoice]
    MODEL_CHOICE_SMALL: _ClassVar[ModelChoice]
    MODEL_CHOICE_LARGE: _ClassVar[ModelChoice]

class Rating(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    RATING_UNSPECIFIED: _ClassVar[Rating]
    RATING_UP: _ClassVar[Rating]
    RATING_DOWN: _ClassVar[Rating]
MODEL_CHOICE_UNSPECIFIED: ModelChoice
MODEL_CHOICE_AUTO: ModelChoice
MODEL_CHOICE_SMALL: ModelChoice
MODEL_CHOICE_LARGE: ModelChoice
RATING_UNSPECIFIED: Rating
RATING_UP: Rating
RATING_DOWN: Rating

class ChatEvent(_message.Message):
    __slots__ = ("event_id", "meta", "delta", "done", "error", "retract", "tools_listed", "tool_call", "tool_result", "approval_request")
    EVENT_ID_FIELD_NUMBER: _ClassVar[int]
    META_FIELD_NUMBER: _ClassVar[int]
    DELTA_FIELD_NUMBER: _ClassVar[int]
    DONE_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    RETRACT_FIELD_NUMBER: _ClassVar[int]
    TOOLS_LISTED_FIELD_NUMBER: _ClassVar[int]
    TOOL_CALL_FIELD_NUMBER: _ClassVar[int]
    TOOL_RESULT_FIELD_NUMBER: _ClassVar[int]
    APPROVAL_REQUEST_FIELD_NUMBER: _ClassVar[int]
    event_id: int
    meta: MetaEvent
    delta: DeltaEvent
    done: DoneEvent
    error: ErrorEvent
    retract: RetractEvent
    tools_listed: ToolsListedEvent
    tool_call: ToolCallEvent
    tool_result: ToolResultEvent
    approval_request: ToolApprovalRequestEvent
    def __init__(self, event_id: _Optional[int] = ..., meta: _Optional[_Union[MetaEvent, _Mapping]] = ..., delta: _Optional[_Union[DeltaEvent, _Mapping]] = ..., done: _Optional[_Union[DoneEvent, _Mapping]] = ..., error: _Optional[_Union[ErrorEvent, _Mapping]] = ..., retract: _Optional[_Union[RetractEvent, _Mapping]] = ..., tools_listed: _Optional[_Union[ToolsListedEvent, _Mapping]] = ..., tool_call: _Optional[_Union[ToolCallEvent, _Mapping]] = ..., tool_result: _Optional[_Union[ToolResultEvent, _Mapping]] = ..., approval_request: _Optional[_Union[ToolApprovalRequestEvent, _Mapping]] = ...) -> None: ...

class ToolApprovalRequestEvent(_message.Message):
    __slots__ = ("call_id", "server_label", "name", "arguments")
    CALL_ID_FIELD_NUMBER: _ClassVar[int]
    SERVER_LABEL_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    ARGUMENTS_FIELD_NUMBER: _ClassVar[int]
    call_id: str
    server_label: str
    name: str
    arguments: str
    def __init__(self, call_id: _Optional[str] = ..., server_label: _Optional[str] = ..., name: _Optional[str] = ..., arguments: _Optional[str] = ...) -> None: ...

class ToolApproval(_message.Message):
    __slots__ = ("call_id", "approve")
    CALL_ID_FIELD_NUMBER: _ClassVar[int]
    APPROVE_FIELD_NUMBER: _ClassVar[int]
    call_id: str
    approve: bool
    def __init__(self, call_id: _Optional[str] = ..., approve: _Optional[bool] = ...) -> None: ...

class ToolsListedEvent(_message.Message):
    __slots__ = ("server_label", "tools", "error")
    SERVER_LABEL_FIELD_NUMBER: _ClassVar[int]
    TOOLS_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    server_label: str
    tools: _containers.RepeatedCompositeFieldContainer[_common_pb2.ToolDefinition]
    error: str
    def __init__(self, server_label: _Optional[str] = ..., tools: _Optional[_Iterable[_Union[_common_pb2.ToolDefinition, _Mapping]]] = ..., error: _Optional[str] = ...) -> None: ...

class ToolCallEvent(_message.Message):
    __slots__ = ("call_id", "server_label", "name", "arguments")
    CALL_ID_FIELD_NUMBER: _ClassVar[int]
    SERVER_LABEL_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    ARGUMENTS_FIELD_NUMBER: _ClassVar[int]
    call_id: str
    server_label: str
    name: str
    arguments: str
    def __init__(self, call_id: _Optional[str] = ..., server_label: _Optional[str] = ..., name: _Optional[str] = ..., arguments: _Optional[str] = ...) -> None: ...

class ToolResultEvent(_message.Message):
    __slots__ = ("call_id", "output", "error")
    CALL_ID_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    call_id: str
    output: str
    error: str
    def __init__(self, call_id: _Optional[str] = ..., output: _Optional[str] = ..., error: _Optional[str] = ...) -> None: ...

class PlatformTool(_message.Message):
    __slots__ = ("server_label", "server_url", "headers", "allowed_tools", "name", "require_approval", "approval_exceptions")
    class HeadersEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    SERVER_LABEL_FIELD_NUMBER: _ClassVar[int]
    SERVER_URL_FIELD_NUMBER: _ClassVar[int]
    HEADERS_FIELD_NUMBER: _ClassVar[int]
    ALLOWED_TOOLS_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    REQUIRE_APPROVAL_FIELD_NUMBER: _ClassVar[int]
    APPROVAL_EXCEPTIONS_FIELD_NUMBER: _ClassVar[int]
    server_label: str
    server_url: str
    headers: _containers.ScalarMap[str, str]
    allowed_tools: _containers.RepeatedScalarFieldContainer[str]
    name: str
    require_approval: bool
    approval_exceptions: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, server_label: _Optional[str] = ..., server_url: _Optional[str] = ..., headers: _Optional[_Mapping[str, str]] = ..., allowed_tools: _Optional[_Iterable[str]] = ..., name: _Optional[str] = ..., require_approval: _Optional[bool] = ..., approval_exceptions: _Optional[_Iterable[str]] = ...) -> None: ...

class MetaEvent(_message.Message):
    __slots__ = ("message_id", "conversation_id", "model", "replica_id", "region", "region_notice", "version", "downgraded", "slice", "pool", "pool_reason", "platform_tools")
    MESSAGE_ID_FIELD_NUMBER: _ClassVar[int]
    CONVERSATION_ID_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    REPLICA_ID_FIELD_NUMBER: _ClassVar[int]
    REGION_FIELD_NUMBER: _ClassVar[int]
    REGION_NOTICE_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    DOWNGRADED_FIELD_NUMBER: _ClassVar[int]
    SLICE_FIELD_NUMBER: _ClassVar[int]
    POOL_FIELD_NUMBER: _ClassVar[int]
    POOL_REASON_FIELD_NUMBER: _ClassVar[int]
    PLATFORM_TOOLS_FIELD_NUMBER: _ClassVar[int]
    message_id: str
    conversation_id: str
    model: str
    replica_id: str
    region: str
    region_notice: str
    version: str
    downgraded: str
    slice: str
    pool: str
    pool_reason: str
    platform_tools: bool
    def __init__(self, message_id: _Optional[str] = ..., conversation_id: _Optional[str] = ..., model: _Optional[str] = ..., replica_id: _Optional[str] = ..., region: _Optional[str] = ..., region_notice: _Optional[str] = ..., version: _Optional[str] = ..., downgraded: _Optional[str] = ..., slice: _Optional[str] = ..., pool: _Optional[str] = ..., pool_reason: _Optional[str] = ..., platform_tools: _Optional[bool] = ...) -> None: ...

class DeltaEvent(_message.Message):
    __slots__ = ("text", "tool_calls", "refusal")
    TEXT_FIELD_NUMBER: _ClassVar[int]
    TOOL_CALLS_FIELD_NUMBER: _ClassVar[int]
    REFUSAL_FIELD_NUMBER: _ClassVar[int]
    text: str
    tool_calls: _containers.RepeatedCompositeFieldContainer[_common_pb2.ToolCall]
    refusal: bool
    def __init__(self, text: _Optional[str] = ..., tool_calls: _Optional[_Iterable[_Union[_common_pb2.ToolCall, _Mapping]]] = ..., refusal: _Optional[bool] = ...) -> None: ...

class DoneEvent(_message.Message):
    __slots__ = ("finish", "usage")
    FINISH_FIELD_NUMBER: _ClassVar[int]
    USAGE_FIELD_NUMBER: _ClassVar[int]
    finish: _common_pb2.FinishReason
    usage: _common_pb2.Usage
    def __init__(self, finish: _Optional[_Union[_common_pb2.FinishReason, str]] = ..., usage: _Optional[_Union[_common_pb2.Usage, _Mapping]] = ...) -> None: ...

class RetractEvent(_message.Message):
    __slots__ = ("withdrawn_chars",)
    WITHDRAWN_CHARS_FIELD_NUMBER: _ClassVar[int]
    withdrawn_chars: int
    def __init__(self, withdrawn_chars: _Optional[int] = ...) -> None: ...

class ErrorEvent(_message.Message):
    __slots__ = ("code", "message")
    CODE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    code: int
    message: str
    def __init__(self, code: _Optional[int] = ..., message: _Optional[str] = ...) -> None: ...

class SendMessageRequest(_message.Message):
    __slots__ = ("conversation_id", "message_id", "parent_id", "content", "model", "instructions", "hold_back", "max_tokens", "platform_tools")
    CONVERSATION_ID_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_ID_FIELD_NUMBER: _ClassVar[int]
    PARENT_ID_FIELD_NUMBER: _ClassVar[int]
    CONTENT_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    INSTRUCTIONS_FIELD_NUMBER: _ClassVar[int]
    HOLD_BACK_FIELD_NUMBER: _ClassVar[int]
    MAX_TOKENS_FIELD_NUMBER: _ClassVar[int]
    PLATFORM_TOOLS_FIELD_NUMBER: _ClassVar[int]
    conversation_id: str
    message_id: str
    parent_id: str
    content: str
    model: ModelChoice
    instructions: str
    hold_back: bool
    max_tokens: int
    platform_tools: _containers.RepeatedCompositeFieldContainer[PlatformTool]
    def __init__(self, conversation_id: _Optional[str] = ..., message_id: _Optional[str] = ..., parent_id: _Optional[str] = ..., content: _Optional[str] = ..., model: _Optional[_Union[ModelChoice, str]] = ..., instructions: _Optional[str] = ..., hold_back: _Optional[bool] = ..., max_tokens: _Optional[int] = ..., platform_tools: _Optional[_Iterable[_Union[PlatformTool, _Mapping]]] = ...) -> None: ...

class SendMessageResponse(_message.Message):
    __slots__ = ("event", "more")
    EVENT_FIELD_NUMBER: _ClassVar[int]
    MORE_FIELD_NUMBER: _ClassVar[int]
    event: ChatEvent
    more: _containers.RepeatedCompositeFieldContainer[ChatEvent]
    def __init__(self, event: _Optional[_Union[ChatEvent, _Mapping]] = ..., more: _Optional[_Iterable[_Union[ChatEvent, _Mapping]]] = ...) -> None: ...

class AttachMessageRequest(_message.Message):
    __slots__ = ("message_id", "after_event_id")
    MESSAGE_ID_FIELD_NUMBER: _ClassVar[int]
    AFTER_EVENT_ID_FIELD_NUMBER: _ClassVar[int]
    message_id: str
    after_event_id: int
    def __init__(self, message_id: _Optional[str] = ..., after_event_id: _Optional[int] = ...) -> None: ...

class AttachMessageResponse(_message.Message):
    __slots__ = ("event", "more")
    EVENT_FIELD_NUMBER: _ClassVar[int]
    MORE_FIELD_NUMBER: _ClassVar[int]
    event: ChatEvent
    more: _containers.RepeatedCompositeFieldContainer[ChatEvent]
    def __init__(self, event: _Optional[_Union[ChatEvent, _Mapping]] = ..., more: _Optional[_Iterable[_Union[ChatEvent, _Mapping]]] = ...) -> None: ...

class StopMessageRequest(_message.Message):
    __slots__ = ("message_id",)
    MESSAGE_ID_FIELD_NUMBER: _ClassVar[int]
    message_id: str
    def __init__(self, message_id: _Optional[str] = ...) -> None: ...

class StopMessageResponse(_message.Message):
    __slots__ = ("stopped",)
    STOPPED_FIELD_NUMBER: _ClassVar[int]
    stopped: bool
    def __init__(self, stopped: _Optional[bool] = ...) -> None: ...

class Conversation(_message.Message):
    __slots__ = ("conversation_id", "title", "model", "total_tokens", "created_at", "updated_at")
    CONVERSATION_ID_FIELD_NUMBER: _ClassVar[int]
    TITLE_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    TOTAL_TOKENS_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    UPDATED_AT_FIELD_NUMBER: _ClassVar[int]
    conversation_id: str
    title: str
    model: str
    total_tokens: int
    created_at: _timestamp_pb2.Timestamp
    updated_at: _timestamp_pb2.Timestamp
    def __init__(self, conversation_id: _Optional[str] = ..., title: _Optional[str] = ..., model: _Optional[str] = ..., total_tokens: _Optional[int] = ..., created_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., updated_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class Message(_message.Message):
    __slots__ = ("message_id", "conversation_id", "seq", "parent_id", "role", "content", "tokens", "model", "replica_id", "finish", "created_at", "region")
    MESSAGE_ID_FIELD_NUMBER: _ClassVar[int]
    CONVERSATION_ID_FIELD_NUMBER: _ClassVar[int]
    SEQ_FIELD_NUMBER: _ClassVar[int]
    PARENT_ID_FIELD_NUMBER: _ClassVar[int]
    ROLE_FIELD_NUMBER: _ClassVar[int]
    CONTENT_FIELD_NUMBER: _ClassVar[int]
    TOKENS_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    REPLICA_ID_FIELD_NUMBER: _ClassVar[int]
    FINISH_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    REGION_FIELD_NUMBER: _ClassVar[int]
    message_id: str
    conversation_id: str
    seq: int
    parent_id: str
    role: _common_pb2.Role
    content: str
    tokens: int
    model: str
    replica_id: str
    finish: _common_pb2.FinishReason
    created_at: _timestamp_pb2.Timestamp
    region: str
    def __init__(self, message_id: _Optional[str] = ..., conversation_id: _Optional[str] = ..., seq: _Optional[int] = ..., parent_id: _Optional[str] = ..., role: _Optional[_Union[_common_pb2.Role, str]] = ..., content: _Optional[str] = ..., tokens: _Optional[int] = ..., model: _Optional[str] = ..., replica_id: _Optional[str] = ..., finish: _Optional[_Union[_common_pb2.FinishReason, str]] = ..., created_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., region: _Optional[str] = ...) -> None: ...

class GetConversationRequest(_message.Message):
    __slots__ = ("conversation_id",)
    CONVERSATION_ID_FIELD_NUMBER: _ClassVar[int]
    conversation_id: str
    def __init__(self, conversation_id: _Optional[str] = ...) -> None: ...

class GetConversationResponse(_message.Message):
    __slots__ = ("conversation",)
    CONVERSATION_FIELD_NUMBER: _ClassVar[int]
    conversation: Conversation
    def __init__(self, conversation: _Optional[_Union[Conversation, _Mapping]] = ...) -> None: ...

class ListConversationsRequest(_message.Message):
    __slots__ = ("page_size", "page_token")
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    page_size: int
    page_token: str
    def __init__(self, page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class ListConversationsResponse(_message.Message):
    __slots__ = ("conversations", "next_page_token")
    CONVERSATIONS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    conversations: _containers.RepeatedCompositeFieldContainer[Conversation]
    next_page_token: str
    def __init__(self, conversations: _Optional[_Iterable[_Union[Conversation, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class DeleteConversationRequest(_message.Message):
    __slots__ = ("conversation_id",)
    CONVERSATION_ID_FIELD_NUMBER: _ClassVar[int]
    conversation_id: str
    def __init__(self, conversation_id: _Optional[str] = ...) -> None: ...

class DeleteConversationResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class GetMessageRequest(_message.Message):
    __slots__ = ("message_id",)
    MESSAGE_ID_FIELD_NUMBER: _ClassVar[int]
    message_id: str
    def __init__(self, message_id: _Optional[str] = ...) -> None: ...

class GetMessageResponse(_message.Message):
    __slots__ = ("message",)
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    message: Message
    def __init__(self, message: _Optional[_Union[Message, _Mapping]] = ...) -> None: ...

class ListMessagesRequest(_message.Message):
    __slots__ = ("conversation_id",)
    CONVERSATION_ID_FIELD_NUMBER: _ClassVar[int]
    conversation_id: str
    def __init__(self, conversation_id: _Optional[str] = ...) -> None: ...

class ListMessagesResponse(_message.Message):
    __slots__ = ("messages",)
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    messages: _containers.RepeatedCompositeFieldContainer[Message]
    def __init__(self, messages: _Optional[_Iterable[_Union[Message, _Mapping]]] = ...) -> None: ...

class CompleteRequest(_message.Message):
    __slots__ = ("turns", "model", "max_tokens", "session_key", "options", "resumable", "platform_tools", "tool_approvals")
    TURNS_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    MAX_TOKENS_FIELD_NUMBER: _ClassVar[int]
    SESSION_KEY_FIELD_NUMBER: _ClassVar[int]
    OPTIONS_FIELD_NUMBER: _ClassVar[int]
    RESUMABLE_FIELD_NUMBER: _ClassVar[int]
    PLATFORM_TOOLS_FIELD_NUMBER: _ClassVar[int]
    TOOL_APPROVALS_FIELD_NUMBER: _ClassVar[int]
    turns: _containers.RepeatedCompositeFieldContainer[_common_pb2.Turn]
    model: ModelChoice
    max_tokens: int
    session_key: str
    options: _common_pb2.AnswerOptions
    resumable: bool
    platform_tools: _containers.RepeatedCompositeFieldContainer[PlatformTool]
    tool_approvals: _containers.RepeatedCompositeFieldContainer[ToolApproval]
    def __init__(self, turns: _Optional[_Iterable[_Union[_common_pb2.Turn, _Mapping]]] = ..., model: _Optional[_Union[ModelChoice, str]] = ..., max_tokens: _Optional[int] = ..., session_key: _Optional[str] = ..., options: _Optional[_Union[_common_pb2.AnswerOptions, _Mapping]] = ..., resumable: _Optional[bool] = ..., platform_tools: _Optional[_Iterable[_Union[PlatformTool, _Mapping]]] = ..., tool_approvals: _Optional[_Iterable[_Union[ToolApproval, _Mapping]]] = ...) -> None: ...

class CompleteResponse(_message.Message):
    __slots__ = ("event", "more")
    EVENT_FIELD_NUMBER: _ClassVar[int]
    MORE_FIELD_NUMBER: _ClassVar[int]
    event: ChatEvent
    more: _containers.RepeatedCompositeFieldContainer[ChatEvent]
    def __init__(self, event: _Optional[_Union[ChatEvent, _Mapping]] = ..., more: _Optional[_Iterable[_Union[ChatEvent, _Mapping]]] = ...) -> None: ...

class GetLimitsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class GetLimitsResponse(_message.Message):
    __slots__ = ("tier", "level", "capacity", "refill_per_second", "full_in_seconds")
    TIER_FIELD_NUMBER: _ClassVar[int]
    LEVEL_FIELD_NUMBER: _ClassVar[int]
    CAPACITY_FIELD_NUMBER: _ClassVar[int]
    REFILL_PER_SECOND_FIELD_NUMBER: _ClassVar[int]
    FULL_IN_SECONDS_FIELD_NUMBER: _ClassVar[int]
    tier: _common_pb2.Tier
    level: float
    capacity: float
    refill_per_second: float
    full_in_seconds: float
    def __init__(self, tier: _Optional[_Union[_common_pb2.Tier, str]] = ..., level: _Optional[float] = ..., capacity: _Optional[float] = ..., refill_per_second: _Optional[float] = ..., full_in_seconds: _Optional[float] = ...) -> None: ...

class GetResponseRequest(_message.Message):
    __slots__ = ("response_id",)
    RESPONSE_ID_FIELD_NUMBER: _ClassVar[int]
    response_id: str
    def __init__(self, response_id: _Optional[str] = ...) -> None: ...

class GetResponseResponse(_message.Message):
    __slots__ = ("question", "answer", "answered")
    QUESTION_FIELD_NUMBER: _ClassVar[int]
    ANSWER_FIELD_NUMBER: _ClassVar[int]
    ANSWERED_FIELD_NUMBER: _ClassVar[int]
    question: Message
    answer: Message
    answered: bool
    def __init__(self, question: _Optional[_Union[Message, _Mapping]] = ..., answer: _Optional[_Union[Message, _Mapping]] = ..., answered: _Optional[bool] = ...) -> None: ...

class DeleteResponseRequest(_message.Message):
    __slots__ = ("response_id",)
    RESPONSE_ID_FIELD_NUMBER: _ClassVar[int]
    response_id: str
    def __init__(self, response_id: _Optional[str] = ...) -> None: ...

class DeleteResponseResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class RateMessageRequest(_message.Message):
    __slots__ = ("message_id", "rating", "comment")
    MESSAGE_ID_FIELD_NUMBER: _ClassVar[int]
    RATING_FIELD_NUMBER: _ClassVar[int]
    COMMENT_FIELD_NUMBER: _ClassVar[int]
    message_id: str
    rating: Rating
    comment: str
    def __init__(self, message_id: _Optional[str] = ..., rating: _Optional[_Union[Rating, str]] = ..., comment: _Optional[str] = ...) -> None: ...

class RateMessageResponse(_message.Message):
    __slots__ = ("message_id", "rating", "version")
    MESSAGE_ID_FIELD_NUMBER: _ClassVar[int]
    RATING_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    message_id: str
    rating: Rating
    version: str
    def __init__(self, message_id: _Optional[str] = ..., rating: _Optional[_Union[Rating, str]] = ..., version: _Optional[str] = ...) -> None: ...

class Memory(_message.Message):
    __slots__ = ("memory_id", "text", "pinned", "source", "created_at", "updated_at", "aged")
    MEMORY_ID_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    PINNED_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    UPDATED_AT_FIELD_NUMBER: _ClassVar[int]
    AGED_FIELD_NUMBER: _ClassVar[int]
    memory_id: str
    text: str
    pinned: bool
    source: str
    created_at: _timestamp_pb2.Timestamp
    updated_at: _timestamp_pb2.Timestamp
    aged: bool
    def __init__(self, memory_id: _Optional[str] = ..., text: _Optional[str] = ..., pinned: _Optional[bool] = ..., source: _Optional[str] = ..., created_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., updated_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., aged: _Optional[bool] = ...) -> None: ...

class ListMemoriesRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListMemoriesResponse(_message.Message):
    __slots__ = ("memories",)
    MEMORIES_FIELD_NUMBER: _ClassVar[int]
    memories: _containers.RepeatedCompositeFieldContainer[Memory]
    def __init__(self, memories: _Optional[_Iterable[_Union[Memory, _Mapping]]] = ...) -> None: ...

class CreateMemoryRequest(_message.Message):
    __slots__ = ("text", "pinned")
    TEXT_FIELD_NUMBER: _ClassVar[int]
    PINNED_FIELD_NUMBER: _ClassVar[int]
    text: str
    pinned: bool
    def __init__(self, text: _Optional[str] = ..., pinned: _Optional[bool] = ...) -> None: ...

class CreateMemoryResponse(_message.Message):
    __slots__ = ("memory",)
    MEMORY_FIELD_NUMBER: _ClassVar[int]
    memory: Memory
    def __init__(self, memory: _Optional[_Union[Memory, _Mapping]] = ...) -> None: ...

class UpdateMemoryRequest(_message.Message):
    __slots__ = ("memory_id", "text", "pinned", "update_mask")
    MEMORY_ID_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    PINNED_FIELD_NUMBER: _ClassVar[int]
    UPDATE_MASK_FIELD_NUMBER: _ClassVar[int]
    memory_id: str
    text: str
    pinned: bool
    update_mask: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, memory_id: _Optional[str] = ..., text: _Optional[str] = ..., pinned: _Optional[bool] = ..., update_mask: _Optional[_Iterable[str]] = ...) -> None: ...

class UpdateMemoryResponse(_message.Message):
    __slots__ = ("memory",)
    MEMORY_FIELD_NUMBER: _ClassVar[int]
    memory: Memory
    def __init__(self, memory: _Optional[_Union[Memory, _Mapping]] = ...) -> None: ...

class DeleteMemoryRequest(_message.Message):
    __slots__ = ("memory_id",)
    MEMORY_ID_FIELD_NUMBER: _ClassVar[int]
    memory_id: str
    def __init__(self, memory_id: _Optional[str] = ...) -> None: ...

class DeleteMemoryResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class File(_message.Message):
    __slots__ = ("file_id", "filename", "purpose", "bytes", "passages", "created_at")
    FILE_ID_FIELD_NUMBER: _ClassVar[int]
    FILENAME_FIELD_NUMBER: _ClassVar[int]
    PURPOSE_FIELD_NUMBER: _ClassVar[int]
    BYTES_FIELD_NUMBER: _ClassVar[int]
    PASSAGES_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    file_id: str
    filename: str
    purpose: str
    bytes: int
    passages: int
    created_at: _timestamp_pb2.Timestamp
    def __init__(self, file_id: _Optional[str] = ..., filename: _Optional[str] = ..., purpose: _Optional[str] = ..., bytes: _Optional[int] = ..., passages: _Optional[int] = ..., created_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class UploadFileRequest(_message.Message):
    __slots__ = ("filename", "purpose", "content")
    FILENAME_FIELD_NUMBER: _ClassVar[int]
    PURPOSE_FIELD_NUMBER: _ClassVar[int]
    CONTENT_FIELD_NUMBER: _ClassVar[int]
    filename: str
    purpose: str
    content: bytes
    def __init__(self, filename: _Optional[str] = ..., purpose: _Optional[str] = ..., content: _Optional[bytes] = ...) -> None: ...

class UploadFileResponse(_message.Message):
    __slots__ = ("file",)
    FILE_FIELD_NUMBER: _ClassVar[int]
    file: File
    def __init__(self, file: _Optional[_Union[File, _Mapping]] = ...) -> None: ...

class ListFilesRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListFilesResponse(_message.Message):
    __slots__ = ("files",)
    FILES_FIELD_NUMBER: _ClassVar[int]
    files: _containers.RepeatedCompositeFieldContainer[File]
    def __init__(self, files: _Optional[_Iterable[_Union[File, _Mapping]]] = ...) -> None: ...

class GetFileRequest(_message.Message):
    __slots__ = ("file_id",)
    FILE_ID_FIELD_NUMBER: _ClassVar[int]
    file_id: str
    def __init__(self, file_id: _Optional[str] = ...) -> None: ...

class GetFileResponse(_message.Message):
    __slots__ = ("file",)
    FILE_FIELD_NUMBER: _ClassVar[int]
    file: File
    def __init__(self, file: _Optional[_Union[File, _Mapping]] = ...) -> None: ...

class GetFileContentRequest(_message.Message):
    __slots__ = ("file_id",)
    FILE_ID_FIELD_NUMBER: _ClassVar[int]
    file_id: str
    def __init__(self, file_id: _Optional[str] = ...) -> None: ...

class GetFileContentResponse(_message.Message):
    __slots__ = ("content",)
    CONTENT_FIELD_NUMBER: _ClassVar[int]
    content: bytes
    def __init__(self, content: _Optional[bytes] = ...) -> None: ...

class DeleteFileRequest(_message.Message):
    __slots__ = ("file_id",)
    FILE_ID_FIELD_NUMBER: _ClassVar[int]
    file_id: str
    def __init__(self, file_id: _Optional[str] = ...) -> None: ...

class DeleteFileResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...
