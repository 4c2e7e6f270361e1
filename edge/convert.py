"""Protobuf <-> the HTTP API's values: the requests the edge sends a gateway, and the names
its JSON uses for protobuf's enums."""

from __future__ import annotations

from chat.v1 import chat_service_pb2 as pb
from chat.v1 import common_pb2
from infra.enums import MODEL_CHOICES

# How an answer ended, as server-sent events name it.
FINISH_NAMES = {
    common_pb2.FINISH_REASON_STOP: "stop",
    common_pb2.FINISH_REASON_LENGTH: "length",
    common_pb2.FINISH_REASON_CANCELLED: "cancelled",
    common_pb2.FINISH_REASON_REFUSED: "refused",
    common_pb2.FINISH_REASON_ERROR: "error",
}
FINISH_ERROR = common_pb2.FINISH_REASON_ERROR
# The OpenAI-compatible API's roles; "developer" is what newer OpenAI clients send in place
# of "system".
OPENAI_ROLES = {
    "system": common_pb2.ROLE_SYSTEM,
    "developer": common_pb2.ROLE_SYSTEM,
    "user": common_pb2.ROLE_USER,
    "assistant": common_pb2.ROLE_ASSISTANT,
}
# And its finish reasons: a stopped answer ends as OpenAI's do, a refusal is its content filter.
OPENAI_FINISH = {
    common_pb2.FINISH_REASON_STOP: "stop",
    common_pb2.FINISH_REASON_LENGTH: "length",
    common_pb2.FINISH_REASON_CANCELLED: "stop",
    common_pb2.FINISH_REASON_REFUSED: "content_filter",
}


def send_request(
    conversation_id: str, message_id: str, parent_id: str, content: str, model: str
) -> pb.SendMessageRequest:
    """model: one of MODEL_CHOICES."""
    return pb.SendMessageRequest(
        conversation_id=conversation_id,
        message_id=message_id,
        parent_id=parent_id,
        content=content,
        model=MODEL_CHOICES[model],
    )


def attach_request(message_id: str, after_event_id: int) -> pb.AttachMessageRequest:
    return pb.AttachMessageRequest(message_id=message_id, after_event_id=after_event_id)


def stop_request(message_id: str) -> pb.StopMessageRequest:
    return pb.StopMessageRequest(message_id=message_id)


def list_conversations_request(page_size: int, cursor: str) -> pb.ListConversationsRequest:
    return pb.ListConversationsRequest(page_size=page_size, page_token=cursor)


def get_conversation_request(conversation_id: str) -> pb.GetConversationRequest:
    return pb.GetConversationRequest(conversation_id=conversation_id)


def delete_conversation_request(conversation_id: str) -> pb.DeleteConversationRequest:
    return pb.DeleteConversationRequest(conversation_id=conversation_id)


def list_messages_request(conversation_id: str) -> pb.ListMessagesRequest:
    return pb.ListMessagesRequest(conversation_id=conversation_id)


def get_message_request(message_id: str) -> pb.GetMessageRequest:
    return pb.GetMessageRequest(message_id=message_id)


def limits_request() -> pb.GetLimitsRequest:
    return pb.GetLimitsRequest()


def completion_request(
    turns: list[tuple[str, str]], model: str, max_tokens: int, session_key: str
) -> pb.CompleteRequest:
    """turns: (role, text), the role one of OPENAI_ROLES; model: one of MODEL_CHOICES."""
    return pb.CompleteRequest(
        turns=[common_pb2.Turn(role=OPENAI_ROLES[role], content=text) for role, text in turns],
        model=MODEL_CHOICES[model],
        max_tokens=max_tokens,
        session_key=session_key,
    )
