from chat.v1 import chat_service_pb2 as _chat_service_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class EdgeLinkRequest(_message.Message):
    __slots__ = ("open", "close")
    OPEN_FIELD_NUMBER: _ClassVar[int]
    CLOSE_FIELD_NUMBER: _ClassVar[int]
    open: EdgeLinkOpen
    close: EdgeLinkClose
    def __init__(self, open: _Optional[_Union[EdgeLinkOpen, _Mapping]] = ..., close: _Optional[_Union[EdgeLinkClose, _Mapping]] = ...) -> None: ...

class EdgeLinkOpen(_message.Message):
    __slots__ = ("stream_id", "authorization", "send_message", "attach_message", "complete")
    STREAM_ID_FIELD_NUMBER: _ClassVar[int]
    AUTHORIZATION_FIELD_NUMBER: _ClassVar[int]
    SEND_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    ATTACH_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    COMPLETE_FIELD_NUMBER: _ClassVar[int]
    stream_id: int
    authorization: str
    send_message: _chat_service_pb2.SendMessageRequest
    attach_message: _chat_service_pb2.AttachMessageRequest
    complete: _chat_service_pb2.CompleteRequest
    def __init__(self, stream_id: _Optional[int] = ..., authorization: _Optional[str] = ..., send_message: _Optional[_Union[_chat_service_pb2.SendMessageRequest, _Mapping]] = ..., attach_message: _Optional[_Union[_chat_service_pb2.AttachMessageRequest, _Mapping]] = ..., complete: _Optional[_Union[_chat_service_pb2.CompleteRequest, _Mapping]] = ...) -> None: ...

class EdgeLinkClose(_message.Message):
    __slots__ = ("stream_id",)
    STREAM_ID_FIELD_NUMBER: _ClassVar[int]
    stream_id: int
    def __init__(self, stream_id: _Optional[int] = ...) -> None: ...

class EdgeLinkResponse(_message.Message):
    __slots__ = ("parts",)
    PARTS_FIELD_NUMBER: _ClassVar[int]
    parts: _containers.RepeatedCompositeFieldContainer[EdgeLinkPart]
    def __init__(self, parts: _Optional[_Iterable[_Union[EdgeLinkPart, _Mapping]]] = ...) -> None: ...

class EdgeLinkPart(_message.Message):
    __slots__ = ("stream_id", "events", "end")
    STREAM_ID_FIELD_NUMBER: _ClassVar[int]
    EVENTS_FIELD_NUMBER: _ClassVar[int]
    END_FIELD_NUMBER: _ClassVar[int]
    stream_id: int
    events: _containers.RepeatedCompositeFieldContainer[_chat_service_pb2.ChatEvent]
    end: EdgeLinkEnd
    def __init__(self, stream_id: _Optional[int] = ..., events: _Optional[_Iterable[_Union[_chat_service_pb2.ChatEvent, _Mapping]]] = ..., end: _Optional[_Union[EdgeLinkEnd, _Mapping]] = ...) -> None: ...

class EdgeLinkEnd(_message.Message):
    __slots__ = ("code", "message", "status")
    CODE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    code: int
    message: str
    status: bytes
    def __init__(self, code: _Optional[int] = ..., message: _Optional[str] = ..., status: _Optional[bytes] = ...) -> None: ...
