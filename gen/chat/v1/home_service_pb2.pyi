from chat.v1 import chat_service_pb2 as _chat_service_pb2
from chat.v1 import common_pb2 as _common_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class StoredConversation(_message.Message):
    __slots__ = ("conversation_id", "title", "model", "summary", "summary_upto_seq", "total_tokens", "created_at", "updated_at", "pool", "summary_tokens", "pinned", "pinned_tokens", "region")
    CONVERSATION_ID_FIELD_NUMBER: _ClassVar[int]
    TITLE_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    SUMMARY_FIELD_NUMBER: _ClassVar[int]
    SUMMARY_UPTO_SEQ_FIELD_NUMBER: _ClassVar[int]
    TOTAL_TOKENS_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    UPDATED_AT_FIELD_NUMBER: _ClassVar[int]
    POOL_FIELD_NUMBER: _ClassVar[int]
    SUMMARY_TOKENS_FIELD_NUMBER: _ClassVar[int]
    PINNED_FIELD_NUMBER: _ClassVar[int]
    PINNED_TOKENS_FIELD_NUMBER: _ClassVar[int]
    REGION_FIELD_NUMBER: _ClassVar[int]
    conversation_id: str
    title: str
    model: str
    summary: str
    summary_upto_seq: int
    total_tokens: int
    created_at: float
    updated_at: float
    pool: str
    summary_tokens: int
    pinned: str
    pinned_tokens: int
    region: str
    def __init__(self, conversation_id: _Optional[str] = ..., title: _Optional[str] = ..., model: _Optional[str] = ..., summary: _Optional[str] = ..., summary_upto_seq: _Optional[int] = ..., total_tokens: _Optional[int] = ..., created_at: _Optional[float] = ..., updated_at: _Optional[float] = ..., pool: _Optional[str] = ..., summary_tokens: _Optional[int] = ..., pinned: _Optional[str] = ..., pinned_tokens: _Optional[int] = ..., region: _Optional[str] = ...) -> None: ...

class StoredMessage(_message.Message):
    __slots__ = ("conversation_id", "seq", "message_id", "parent_seq", "role", "content", "tokens", "model", "replica_id", "finish", "created_at", "region", "pool", "parent_tokens")
    CONVERSATION_ID_FIELD_NUMBER: _ClassVar[int]
    SEQ_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_ID_FIELD_NUMBER: _ClassVar[int]
    PARENT_SEQ_FIELD_NUMBER: _ClassVar[int]
    ROLE_FIELD_NUMBER: _ClassVar[int]
    CONTENT_FIELD_NUMBER: _ClassVar[int]
    TOKENS_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    REPLICA_ID_FIELD_NUMBER: _ClassVar[int]
    FINISH_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    REGION_FIELD_NUMBER: _ClassVar[int]
    POOL_FIELD_NUMBER: _ClassVar[int]
    PARENT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    conversation_id: str
    seq: int
    message_id: str
    parent_seq: int
    role: _common_pb2.Role
    content: str
    tokens: int
    model: str
    replica_id: str
    finish: str
    created_at: float
    region: str
    pool: str
    parent_tokens: int
    def __init__(self, conversation_id: _Optional[str] = ..., seq: _Optional[int] = ..., message_id: _Optional[str] = ..., parent_seq: _Optional[int] = ..., role: _Optional[_Union[_common_pb2.Role, str]] = ..., content: _Optional[str] = ..., tokens: _Optional[int] = ..., model: _Optional[str] = ..., replica_id: _Optional[str] = ..., finish: _Optional[str] = ..., created_at: _Optional[float] = ..., region: _Optional[str] = ..., pool: _Optional[str] = ..., parent_tokens: _Optional[int] = ...) -> None: ...

class ReadConversationRequest(_message.Message):
    __slots__ = ("user_id", "conversation_id", "with_messages", "with_version")
    USER_ID_FIELD_NUMBER: _ClassVar[int]
    CONVERSATION_ID_FIELD_NUMBER: _ClassVar[int]
    WITH_MESSAGES_FIELD_NUMBER: _ClassVar[int]
    WITH_VERSION_FIELD_NUMBER: _ClassVar[int]
    user_id: str
    conversation_id: str
    with_messages: bool
    with_version: bool
    def __init__(self, user_id: _Optional[str] = ..., conversation_id: _Optional[str] = ..., with_messages: _Optional[bool] = ..., with_version: _Optional[bool] = ...) -> None: ...

class ReadConversationResponse(_message.Message):
    __slots__ = ("conversation", "messages", "version")
    CONVERSATION_FIELD_NUMBER: _ClassVar[int]
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    conversation: StoredConversation
    messages: _containers.RepeatedCompositeFieldContainer[StoredMessage]
    version: str
    def __init__(self, conversation: _Optional[_Union[StoredConversation, _Mapping]] = ..., messages: _Optional[_Iterable[_Union[StoredMessage, _Mapping]]] = ..., version: _Optional[str] = ...) -> None: ...

class ReadMessageRequest(_message.Message):
    __slots__ = ("user_id", "message_id")
    USER_ID_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_ID_FIELD_NUMBER: _ClassVar[int]
    user_id: str
    message_id: str
    def __init__(self, user_id: _Optional[str] = ..., message_id: _Optional[str] = ...) -> None: ...

class AppendMessageRequest(_message.Message):
    __slots__ = ("user_id", "conversation_id", "message", "title")
    USER_ID_FIELD_NUMBER: _ClassVar[int]
    CONVERSATION_ID_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    TITLE_FIELD_NUMBER: _ClassVar[int]
    user_id: str
    conversation_id: str
    message: StoredMessage
    title: str
    def __init__(self, user_id: _Optional[str] = ..., conversation_id: _Optional[str] = ..., message: _Optional[_Union[StoredMessage, _Mapping]] = ..., title: _Optional[str] = ...) -> None: ...

class ReadMessageResponse(_message.Message):
    __slots__ = ("message",)
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    message: StoredMessage
    def __init__(self, message: _Optional[_Union[StoredMessage, _Mapping]] = ...) -> None: ...

class AppendMessageResponse(_message.Message):
    __slots__ = ("message",)
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    message: StoredMessage
    def __init__(self, message: _Optional[_Union[StoredMessage, _Mapping]] = ...) -> None: ...

class ReserveTokensRequest(_message.Message):
    __slots__ = ("user_id", "tier", "amount")
    USER_ID_FIELD_NUMBER: _ClassVar[int]
    TIER_FIELD_NUMBER: _ClassVar[int]
    AMOUNT_FIELD_NUMBER: _ClassVar[int]
    user_id: str
    tier: _common_pb2.Tier
    amount: float
    def __init__(self, user_id: _Optional[str] = ..., tier: _Optional[_Union[_common_pb2.Tier, str]] = ..., amount: _Optional[float] = ...) -> None: ...

class ReserveTokensResponse(_message.Message):
    __slots__ = ("admitted", "level", "retry_after_seconds")
    ADMITTED_FIELD_NUMBER: _ClassVar[int]
    LEVEL_FIELD_NUMBER: _ClassVar[int]
    RETRY_AFTER_SECONDS_FIELD_NUMBER: _ClassVar[int]
    admitted: bool
    level: float
    retry_after_seconds: float
    def __init__(self, admitted: _Optional[bool] = ..., level: _Optional[float] = ..., retry_after_seconds: _Optional[float] = ...) -> None: ...

class SettleTokensRequest(_message.Message):
    __slots__ = ("user_id", "tier", "reserved", "actual")
    USER_ID_FIELD_NUMBER: _ClassVar[int]
    TIER_FIELD_NUMBER: _ClassVar[int]
    RESERVED_FIELD_NUMBER: _ClassVar[int]
    ACTUAL_FIELD_NUMBER: _ClassVar[int]
    user_id: str
    tier: _common_pb2.Tier
    reserved: float
    actual: float
    def __init__(self, user_id: _Optional[str] = ..., tier: _Optional[_Union[_common_pb2.Tier, str]] = ..., reserved: _Optional[float] = ..., actual: _Optional[float] = ...) -> None: ...

class SettleTokensResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class RateAnswerRequest(_message.Message):
    __slots__ = ("user_id", "tier", "message_id", "rating", "comment")
    USER_ID_FIELD_NUMBER: _ClassVar[int]
    TIER_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_ID_FIELD_NUMBER: _ClassVar[int]
    RATING_FIELD_NUMBER: _ClassVar[int]
    COMMENT_FIELD_NUMBER: _ClassVar[int]
    user_id: str
    tier: _common_pb2.Tier
    message_id: str
    rating: _chat_service_pb2.Rating
    comment: str
    def __init__(self, user_id: _Optional[str] = ..., tier: _Optional[_Union[_common_pb2.Tier, str]] = ..., message_id: _Optional[str] = ..., rating: _Optional[_Union[_chat_service_pb2.Rating, str]] = ..., comment: _Optional[str] = ...) -> None: ...

class RateAnswerResponse(_message.Message):
    __slots__ = ("message_id", "conversation_id", "rating", "comment", "version")
    MESSAGE_ID_FIELD_NUMBER: _ClassVar[int]
    CONVERSATION_ID_FIELD_NUMBER: _ClassVar[int]
    RATING_FIELD_NUMBER: _ClassVar[int]
    COMMENT_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    message_id: str
    conversation_id: str
    rating: _chat_service_pb2.Rating
    comment: str
    version: str
    def __init__(self, message_id: _Optional[str] = ..., conversation_id: _Optional[str] = ..., rating: _Optional[_Union[_chat_service_pb2.Rating, str]] = ..., comment: _Optional[str] = ..., version: _Optional[str] = ...) -> None: ...

class ListStoredConversationsRequest(_message.Message):
    __slots__ = ("user_id", "limit", "updated_before")
    USER_ID_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    UPDATED_BEFORE_FIELD_NUMBER: _ClassVar[int]
    user_id: str
    limit: int
    updated_before: float
    def __init__(self, user_id: _Optional[str] = ..., limit: _Optional[int] = ..., updated_before: _Optional[float] = ...) -> None: ...

class ListStoredConversationsResponse(_message.Message):
    __slots__ = ("conversations",)
    CONVERSATIONS_FIELD_NUMBER: _ClassVar[int]
    conversations: _containers.RepeatedCompositeFieldContainer[StoredConversation]
    def __init__(self, conversations: _Optional[_Iterable[_Union[StoredConversation, _Mapping]]] = ...) -> None: ...

class StoredServing(_message.Message):
    __slots__ = ("message_id", "conversation_id", "version", "slice", "routed_pool", "budget", "served_pool")
    MESSAGE_ID_FIELD_NUMBER: _ClassVar[int]
    CONVERSATION_ID_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    SLICE_FIELD_NUMBER: _ClassVar[int]
    ROUTED_POOL_FIELD_NUMBER: _ClassVar[int]
    BUDGET_FIELD_NUMBER: _ClassVar[int]
    SERVED_POOL_FIELD_NUMBER: _ClassVar[int]
    message_id: str
    conversation_id: str
    version: str
    slice: str
    routed_pool: str
    budget: str
    served_pool: str
    def __init__(self, message_id: _Optional[str] = ..., conversation_id: _Optional[str] = ..., version: _Optional[str] = ..., slice: _Optional[str] = ..., routed_pool: _Optional[str] = ..., budget: _Optional[str] = ..., served_pool: _Optional[str] = ...) -> None: ...

class RecordServingRequest(_message.Message):
    __slots__ = ("user_id", "serving")
    USER_ID_FIELD_NUMBER: _ClassVar[int]
    SERVING_FIELD_NUMBER: _ClassVar[int]
    user_id: str
    serving: StoredServing
    def __init__(self, user_id: _Optional[str] = ..., serving: _Optional[_Union[StoredServing, _Mapping]] = ...) -> None: ...

class RecordServingResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class StoredPrompt(_message.Message):
    __slots__ = ("message_id", "conversation_id", "version", "model", "node_id", "temperature", "max_tokens", "turns", "tools")
    MESSAGE_ID_FIELD_NUMBER: _ClassVar[int]
    CONVERSATION_ID_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    TEMPERATURE_FIELD_NUMBER: _ClassVar[int]
    MAX_TOKENS_FIELD_NUMBER: _ClassVar[int]
    TURNS_FIELD_NUMBER: _ClassVar[int]
    TOOLS_FIELD_NUMBER: _ClassVar[int]
    message_id: str
    conversation_id: str
    version: str
    model: str
    node_id: str
    temperature: float
    max_tokens: int
    turns: _containers.RepeatedCompositeFieldContainer[StoredPromptTurn]
    tools: _containers.RepeatedCompositeFieldContainer[_common_pb2.ToolDefinition]
    def __init__(self, message_id: _Optional[str] = ..., conversation_id: _Optional[str] = ..., version: _Optional[str] = ..., model: _Optional[str] = ..., node_id: _Optional[str] = ..., temperature: _Optional[float] = ..., max_tokens: _Optional[int] = ..., turns: _Optional[_Iterable[_Union[StoredPromptTurn, _Mapping]]] = ..., tools: _Optional[_Iterable[_Union[_common_pb2.ToolDefinition, _Mapping]]] = ...) -> None: ...

class StoredPromptTurn(_message.Message):
    __slots__ = ("turn", "tokens")
    TURN_FIELD_NUMBER: _ClassVar[int]
    TOKENS_FIELD_NUMBER: _ClassVar[int]
    turn: _common_pb2.Turn
    tokens: int
    def __init__(self, turn: _Optional[_Union[_common_pb2.Turn, _Mapping]] = ..., tokens: _Optional[int] = ...) -> None: ...

class CapturePromptRequest(_message.Message):
    __slots__ = ("user_id", "prompt")
    USER_ID_FIELD_NUMBER: _ClassVar[int]
    PROMPT_FIELD_NUMBER: _ClassVar[int]
    user_id: str
    prompt: StoredPrompt
    def __init__(self, user_id: _Optional[str] = ..., prompt: _Optional[_Union[StoredPrompt, _Mapping]] = ...) -> None: ...

class CapturePromptResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class DeleteStoredConversationRequest(_message.Message):
    __slots__ = ("user_id", "conversation_id")
    USER_ID_FIELD_NUMBER: _ClassVar[int]
    CONVERSATION_ID_FIELD_NUMBER: _ClassVar[int]
    user_id: str
    conversation_id: str
    def __init__(self, user_id: _Optional[str] = ..., conversation_id: _Optional[str] = ...) -> None: ...

class DeleteStoredConversationResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ReadTokensRequest(_message.Message):
    __slots__ = ("user_id", "tier")
    USER_ID_FIELD_NUMBER: _ClassVar[int]
    TIER_FIELD_NUMBER: _ClassVar[int]
    user_id: str
    tier: _common_pb2.Tier
    def __init__(self, user_id: _Optional[str] = ..., tier: _Optional[_Union[_common_pb2.Tier, str]] = ...) -> None: ...

class ReadTokensResponse(_message.Message):
    __slots__ = ("level",)
    LEVEL_FIELD_NUMBER: _ClassVar[int]
    level: float
    def __init__(self, level: _Optional[float] = ...) -> None: ...

class ReadResponseDeletedRequest(_message.Message):
    __slots__ = ("user_id", "response_id")
    USER_ID_FIELD_NUMBER: _ClassVar[int]
    RESPONSE_ID_FIELD_NUMBER: _ClassVar[int]
    user_id: str
    response_id: str
    def __init__(self, user_id: _Optional[str] = ..., response_id: _Optional[str] = ...) -> None: ...

class ReadResponseDeletedResponse(_message.Message):
    __slots__ = ("deleted",)
    DELETED_FIELD_NUMBER: _ClassVar[int]
    deleted: bool
    def __init__(self, deleted: _Optional[bool] = ...) -> None: ...

class DeleteStoredResponseRequest(_message.Message):
    __slots__ = ("user_id", "response_id")
    USER_ID_FIELD_NUMBER: _ClassVar[int]
    RESPONSE_ID_FIELD_NUMBER: _ClassVar[int]
    user_id: str
    response_id: str
    def __init__(self, user_id: _Optional[str] = ..., response_id: _Optional[str] = ...) -> None: ...

class DeleteStoredResponseResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class StoredMemory(_message.Message):
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
    created_at: float
    updated_at: float
    def __init__(self, memory_id: _Optional[str] = ..., text: _Optional[str] = ..., pinned: _Optional[bool] = ..., source: _Optional[str] = ..., created_at: _Optional[float] = ..., updated_at: _Optional[float] = ...) -> None: ...

class ListStoredMemoriesRequest(_message.Message):
    __slots__ = ("user_id",)
    USER_ID_FIELD_NUMBER: _ClassVar[int]
    user_id: str
    def __init__(self, user_id: _Optional[str] = ...) -> None: ...

class ListStoredMemoriesResponse(_message.Message):
    __slots__ = ("memories",)
    MEMORIES_FIELD_NUMBER: _ClassVar[int]
    memories: _containers.RepeatedCompositeFieldContainer[StoredMemory]
    def __init__(self, memories: _Optional[_Iterable[_Union[StoredMemory, _Mapping]]] = ...) -> None: ...

class ReadMemoryRequest(_message.Message):
    __slots__ = ("user_id", "memory_id")
    USER_ID_FIELD_NUMBER: _ClassVar[int]
    MEMORY_ID_FIELD_NUMBER: _ClassVar[int]
    user_id: str
    memory_id: str
    def __init__(self, user_id: _Optional[str] = ..., memory_id: _Optional[str] = ...) -> None: ...

class ReadMemoryResponse(_message.Message):
    __slots__ = ("memory",)
    MEMORY_FIELD_NUMBER: _ClassVar[int]
    memory: StoredMemory
    def __init__(self, memory: _Optional[_Union[StoredMemory, _Mapping]] = ...) -> None: ...

class AddMemoryRequest(_message.Message):
    __slots__ = ("user_id", "memory")
    USER_ID_FIELD_NUMBER: _ClassVar[int]
    MEMORY_FIELD_NUMBER: _ClassVar[int]
    user_id: str
    memory: StoredMemory
    def __init__(self, user_id: _Optional[str] = ..., memory: _Optional[_Union[StoredMemory, _Mapping]] = ...) -> None: ...

class AddMemoryResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ChangeMemoryRequest(_message.Message):
    __slots__ = ("user_id", "memory_id", "text", "pinned", "updated_at")
    USER_ID_FIELD_NUMBER: _ClassVar[int]
    MEMORY_ID_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    PINNED_FIELD_NUMBER: _ClassVar[int]
    UPDATED_AT_FIELD_NUMBER: _ClassVar[int]
    user_id: str
    memory_id: str
    text: str
    pinned: bool
    updated_at: float
    def __init__(self, user_id: _Optional[str] = ..., memory_id: _Optional[str] = ..., text: _Optional[str] = ..., pinned: _Optional[bool] = ..., updated_at: _Optional[float] = ...) -> None: ...

class ChangeMemoryResponse(_message.Message):
    __slots__ = ("memory",)
    MEMORY_FIELD_NUMBER: _ClassVar[int]
    memory: StoredMemory
    def __init__(self, memory: _Optional[_Union[StoredMemory, _Mapping]] = ...) -> None: ...

class DeleteStoredMemoryRequest(_message.Message):
    __slots__ = ("user_id", "memory_id")
    USER_ID_FIELD_NUMBER: _ClassVar[int]
    MEMORY_ID_FIELD_NUMBER: _ClassVar[int]
    user_id: str
    memory_id: str
    def __init__(self, user_id: _Optional[str] = ..., memory_id: _Optional[str] = ...) -> None: ...

class DeleteStoredMemoryResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class SearchMemoriesRequest(_message.Message):
    __slots__ = ("user_id", "terms", "limit", "fresh_since")
    USER_ID_FIELD_NUMBER: _ClassVar[int]
    TERMS_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    FRESH_SINCE_FIELD_NUMBER: _ClassVar[int]
    user_id: str
    terms: _containers.RepeatedScalarFieldContainer[str]
    limit: int
    fresh_since: float
    def __init__(self, user_id: _Optional[str] = ..., terms: _Optional[_Iterable[str]] = ..., limit: _Optional[int] = ..., fresh_since: _Optional[float] = ...) -> None: ...

class SearchMemoriesResponse(_message.Message):
    __slots__ = ("memories",)
    MEMORIES_FIELD_NUMBER: _ClassVar[int]
    memories: _containers.RepeatedCompositeFieldContainer[StoredMemory]
    def __init__(self, memories: _Optional[_Iterable[_Union[StoredMemory, _Mapping]]] = ...) -> None: ...
