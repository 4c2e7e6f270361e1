from chat.v1 import common_pb2 as _common_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class GenerateRequest(_message.Message):
    __slots__ = ("start", "cancel", "attach")
    START_FIELD_NUMBER: _ClassVar[int]
    CANCEL_FIELD_NUMBER: _ClassVar[int]
    ATTACH_FIELD_NUMBER: _ClassVar[int]
    start: GenerateStart
    cancel: GenerateCancel
    attach: GenerateAttach
    def __init__(self, start: _Optional[_Union[GenerateStart, _Mapping]] = ..., cancel: _Optional[_Union[GenerateCancel, _Mapping]] = ..., attach: _Optional[_Union[GenerateAttach, _Mapping]] = ...) -> None: ...

class GenerateStart(_message.Message):
    __slots__ = ("request_id", "turns", "max_tokens", "tier", "continue_from", "temperature", "prompt_tokens", "options", "count_texts", "stream_interval_ms")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    TURNS_FIELD_NUMBER: _ClassVar[int]
    MAX_TOKENS_FIELD_NUMBER: _ClassVar[int]
    TIER_FIELD_NUMBER: _ClassVar[int]
    CONTINUE_FROM_FIELD_NUMBER: _ClassVar[int]
    TEMPERATURE_FIELD_NUMBER: _ClassVar[int]
    PROMPT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    OPTIONS_FIELD_NUMBER: _ClassVar[int]
    COUNT_TEXTS_FIELD_NUMBER: _ClassVar[int]
    STREAM_INTERVAL_MS_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    turns: _containers.RepeatedCompositeFieldContainer[_common_pb2.Turn]
    max_tokens: int
    tier: _common_pb2.Tier
    continue_from: str
    temperature: float
    prompt_tokens: int
    options: _common_pb2.AnswerOptions
    count_texts: _containers.RepeatedScalarFieldContainer[str]
    stream_interval_ms: int
    def __init__(self, request_id: _Optional[str] = ..., turns: _Optional[_Iterable[_Union[_common_pb2.Turn, _Mapping]]] = ..., max_tokens: _Optional[int] = ..., tier: _Optional[_Union[_common_pb2.Tier, str]] = ..., continue_from: _Optional[str] = ..., temperature: _Optional[float] = ..., prompt_tokens: _Optional[int] = ..., options: _Optional[_Union[_common_pb2.AnswerOptions, _Mapping]] = ..., count_texts: _Optional[_Iterable[str]] = ..., stream_interval_ms: _Optional[int] = ...) -> None: ...

class GenerateCancel(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class GenerateAttach(_message.Message):
    __slots__ = ("request_id", "after_chunk_index")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    AFTER_CHUNK_INDEX_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    after_chunk_index: int
    def __init__(self, request_id: _Optional[str] = ..., after_chunk_index: _Optional[int] = ...) -> None: ...

class GenerateResponse(_message.Message):
    __slots__ = ("chunk", "finish")
    CHUNK_FIELD_NUMBER: _ClassVar[int]
    FINISH_FIELD_NUMBER: _ClassVar[int]
    chunk: TokenChunk
    finish: GenerateFinish
    def __init__(self, chunk: _Optional[_Union[TokenChunk, _Mapping]] = ..., finish: _Optional[_Union[GenerateFinish, _Mapping]] = ...) -> None: ...

class TokenChunk(_message.Message):
    __slots__ = ("index", "text", "pieces")
    INDEX_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    PIECES_FIELD_NUMBER: _ClassVar[int]
    index: int
    text: str
    pieces: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, index: _Optional[int] = ..., text: _Optional[str] = ..., pieces: _Optional[_Iterable[str]] = ...) -> None: ...

class GenerateFinish(_message.Message):
    __slots__ = ("finish", "usage", "model", "tool_calls", "engine_lost", "text_tokens")
    FINISH_FIELD_NUMBER: _ClassVar[int]
    USAGE_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    TOOL_CALLS_FIELD_NUMBER: _ClassVar[int]
    ENGINE_LOST_FIELD_NUMBER: _ClassVar[int]
    TEXT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    finish: _common_pb2.FinishReason
    usage: _common_pb2.Usage
    model: str
    tool_calls: _containers.RepeatedCompositeFieldContainer[_common_pb2.ToolCall]
    engine_lost: bool
    text_tokens: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, finish: _Optional[_Union[_common_pb2.FinishReason, str]] = ..., usage: _Optional[_Union[_common_pb2.Usage, _Mapping]] = ..., model: _Optional[str] = ..., tool_calls: _Optional[_Iterable[_Union[_common_pb2.ToolCall, _Mapping]]] = ..., engine_lost: _Optional[bool] = ..., text_tokens: _Optional[_Iterable[int]] = ...) -> None: ...

class TokenizeRequest(_message.Message):
    __slots__ = ("texts",)
    TEXTS_FIELD_NUMBER: _ClassVar[int]
    texts: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, texts: _Optional[_Iterable[str]] = ...) -> None: ...

class TokenizeResponse(_message.Message):
    __slots__ = ("token_counts", "model")
    TOKEN_COUNTS_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    token_counts: _containers.RepeatedScalarFieldContainer[int]
    model: str
    def __init__(self, token_counts: _Optional[_Iterable[int]] = ..., model: _Optional[str] = ...) -> None: ...

class GetTokenizerRequest(_message.Message):
    __slots__ = ("have_sha256",)
    HAVE_SHA256_FIELD_NUMBER: _ClassVar[int]
    have_sha256: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, have_sha256: _Optional[_Iterable[str]] = ...) -> None: ...

class GetTokenizerResponse(_message.Message):
    __slots__ = ("model", "sha256", "part")
    MODEL_FIELD_NUMBER: _ClassVar[int]
    SHA256_FIELD_NUMBER: _ClassVar[int]
    PART_FIELD_NUMBER: _ClassVar[int]
    model: str
    sha256: str
    part: bytes
    def __init__(self, model: _Optional[str] = ..., sha256: _Optional[str] = ..., part: _Optional[bytes] = ...) -> None: ...

class LinkRequest(_message.Message):
    __slots__ = ("start", "attach", "cancel", "detach")
    START_FIELD_NUMBER: _ClassVar[int]
    ATTACH_FIELD_NUMBER: _ClassVar[int]
    CANCEL_FIELD_NUMBER: _ClassVar[int]
    DETACH_FIELD_NUMBER: _ClassVar[int]
    start: GenerateStart
    attach: GenerateAttach
    cancel: LinkCancel
    detach: LinkDetach
    def __init__(self, start: _Optional[_Union[GenerateStart, _Mapping]] = ..., attach: _Optional[_Union[GenerateAttach, _Mapping]] = ..., cancel: _Optional[_Union[LinkCancel, _Mapping]] = ..., detach: _Optional[_Union[LinkDetach, _Mapping]] = ...) -> None: ...

class LinkCancel(_message.Message):
    __slots__ = ("request_id",)
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    def __init__(self, request_id: _Optional[str] = ...) -> None: ...

class LinkDetach(_message.Message):
    __slots__ = ("request_id",)
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    def __init__(self, request_id: _Optional[str] = ...) -> None: ...

class LinkResponse(_message.Message):
    __slots__ = ("updates",)
    UPDATES_FIELD_NUMBER: _ClassVar[int]
    updates: _containers.RepeatedCompositeFieldContainer[AnswerUpdate]
    def __init__(self, updates: _Optional[_Iterable[_Union[AnswerUpdate, _Mapping]]] = ...) -> None: ...

class AnswerUpdate(_message.Message):
    __slots__ = ("request_id", "chunk", "finish", "error", "working")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    CHUNK_FIELD_NUMBER: _ClassVar[int]
    FINISH_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    WORKING_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    chunk: TokenChunk
    finish: GenerateFinish
    error: AnswerError
    working: bool
    def __init__(self, request_id: _Optional[str] = ..., chunk: _Optional[_Union[TokenChunk, _Mapping]] = ..., finish: _Optional[_Union[GenerateFinish, _Mapping]] = ..., error: _Optional[_Union[AnswerError, _Mapping]] = ..., working: _Optional[bool] = ...) -> None: ...

class AnswerError(_message.Message):
    __slots__ = ("code", "reason", "message")
    CODE_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    code: int
    reason: str
    message: str
    def __init__(self, code: _Optional[int] = ..., reason: _Optional[str] = ..., message: _Optional[str] = ...) -> None: ...
