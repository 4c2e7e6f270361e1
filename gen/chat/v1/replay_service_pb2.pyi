from chat.v1 import common_pb2 as _common_pb2
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ReplayPromptRequest(_message.Message):
    __slots__ = ("user_id", "message_id", "version")
    USER_ID_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_ID_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    user_id: str
    message_id: str
    version: str
    def __init__(self, user_id: _Optional[str] = ..., message_id: _Optional[str] = ..., version: _Optional[str] = ...) -> None: ...

class ReplayPromptResponse(_message.Message):
    __slots__ = ("version", "model", "node_id", "original", "replayed", "finish", "usage", "system_prompt_replaced")
    VERSION_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    ORIGINAL_FIELD_NUMBER: _ClassVar[int]
    REPLAYED_FIELD_NUMBER: _ClassVar[int]
    FINISH_FIELD_NUMBER: _ClassVar[int]
    USAGE_FIELD_NUMBER: _ClassVar[int]
    SYSTEM_PROMPT_REPLACED_FIELD_NUMBER: _ClassVar[int]
    version: str
    model: str
    node_id: str
    original: str
    replayed: str
    finish: _common_pb2.FinishReason
    usage: _common_pb2.Usage
    system_prompt_replaced: bool
    def __init__(self, version: _Optional[str] = ..., model: _Optional[str] = ..., node_id: _Optional[str] = ..., original: _Optional[str] = ..., replayed: _Optional[str] = ..., finish: _Optional[_Union[_common_pb2.FinishReason, str]] = ..., usage: _Optional[_Union[_common_pb2.Usage, _Mapping]] = ..., system_prompt_replaced: _Optional[bool] = ...) -> None: ...
