"""Protobuf <-> the HTTP API's values: the requests the edge sends a gateway, and the JSON of
its replies.

One JSON style for the whole HTTP API, the events' (edge/sse.py): camelCase names
(`messageId`), the serving replica as `replica`, enums as the domain's short lowercase names
(`"finish": "stop"`, `"role": "user"`, `"tier": "free"`), every field present (`""` for an
id that is not there, null for a finish a turn does not have)."""

from __future__ import annotations

from typing import Any, NamedTuple

from chat.v1 import chat_service_pb2 as pb
from chat.v1 import common_pb2
from domain.answer_options import PLAIN, AnswerOptions, ToolCall
from domain.feedback import Rating
from infra.convert import (
    FINISH_NAMES,
    MODEL_CHOICES,
    RATING_FROM_PB,
    RATING_TO_PB,
    ROLE_NAMES,
    TIER_NAMES,
    options_to_pb,
    tool_call_to_pb,
)

FINISH_ERROR = common_pb2.FINISH_REASON_ERROR
# The OpenAI-compatible API's roles; "developer" is what newer OpenAI clients send in place
# of "system".
OPENAI_ROLES = {
    "system": common_pb2.ROLE_SYSTEM,
    "developer": common_pb2.ROLE_SYSTEM,
    "user": common_pb2.ROLE_USER,
    "assistant": common_pb2.ROLE_ASSISTANT,
    "tool": common_pb2.ROLE_TOOL,
}
NO_OPTIONS = PLAIN
# The pool that serves an answer, and why it is not the one asked for (absent when it is), on
# every API's response: the meta event says the same, but OpenAI's clients never see it.
POOL_HEADER = "X-Pool"
POOL_REASON_HEADER = "X-Pool-Reason"


def pool_headers(meta: pb.MetaEvent) -> dict[str, str]:
    """None for an answer no model wrote (a refusal, "busy"): it ran on no pool."""
    if not meta.pool:
        return {}
    if not meta.pool_reason:
        return {POOL_HEADER: meta.pool}
    return {POOL_HEADER: meta.pool, POOL_REASON_HEADER: meta.pool_reason}


class CallerTurn(NamedTuple):
    """One message of a completion's history: role (one of OPENAI_ROLES) and text, and for
    tool use, an assistant's calls or the id of the call a tool message answers."""

    role: str
    text: str
    tool_calls: tuple[ToolCall, ...] = ()
    tool_call_id: str = ""


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


def rate_request(message_id: str, rating: str, comment: str) -> pb.RateMessageRequest:
    """rating: "up" or "down" (domain/feedback.py's Rating)."""
    return pb.RateMessageRequest(
        message_id=message_id, rating=RATING_TO_PB[Rating(rating)], comment=comment
    )


def rating_json(reply: pb.RateMessageResponse) -> dict[str, Any]:
    return {
        "messageId": reply.message_id,
        "rating": RATING_FROM_PB[reply.rating].value,
        "version": reply.version,
    }


def limits_request() -> pb.GetLimitsRequest:
    return pb.GetLimitsRequest()


def _turn_pb(turn: tuple[str, str] | CallerTurn) -> common_pb2.Turn:
    whole = CallerTurn(*turn)
    return common_pb2.Turn(
        role=OPENAI_ROLES[whole.role],
        content=whole.text,
        tool_calls=[tool_call_to_pb(call) for call in whole.tool_calls],
        tool_call_id=whole.tool_call_id,
    )


def completion_request(
    turns: list[tuple[str, str]] | list[CallerTurn],
    model: str,
    max_tokens: int,
    session_key: str,
    options: AnswerOptions = NO_OPTIONS,
) -> pb.CompleteRequest:
    """turns: (role, text) pairs or CallerTurns, the role one of OPENAI_ROLES; model: one of
    MODEL_CHOICES."""
    return pb.CompleteRequest(
        turns=[_turn_pb(turn) for turn in turns],
        model=MODEL_CHOICES[model],
        max_tokens=max_tokens,
        session_key=session_key,
        options=options_to_pb(options),
    )


def conversation_json(c: pb.Conversation) -> dict[str, Any]:
    return {
        "conversationId": c.conversation_id,
        "title": c.title,
        "model": c.model,
        "totalTokens": c.total_tokens,
        "createdAt": c.created_at.ToJsonString(),
        "updatedAt": c.updated_at.ToJsonString(),
    }


def message_json(m: pb.Message) -> dict[str, Any]:
    return {
        "messageId": m.message_id,
        "conversationId": m.conversation_id,
        "seq": m.seq,
        "parentId": m.parent_id,
        "role": ROLE_NAMES.get(m.role),
        "content": m.content,
        "tokens": m.tokens,
        "model": m.model,
        "replica": m.replica_id,
        # null for the user's turns: no model wrote them.
        "finish": FINISH_NAMES.get(m.finish),
        "createdAt": m.created_at.ToJsonString(),
        "region": m.region,
    }


def conversation_page_json(reply: pb.ListConversationsResponse) -> dict[str, Any]:
    """nextCursor: the `cursor` of the next page, "" after the last."""
    return {
        "conversations": [conversation_json(c) for c in reply.conversations],
        "nextCursor": reply.next_page_token,
    }


def conversation_reply_json(reply: pb.GetConversationResponse) -> dict[str, Any]:
    return {"conversation": conversation_json(reply.conversation)}


def messages_json(reply: pb.ListMessagesResponse) -> dict[str, Any]:
    return {"messages": [message_json(m) for m in reply.messages]}


def message_reply_json(reply: pb.GetMessageResponse) -> dict[str, Any]:
    return {"message": message_json(reply.message)}


def limits_json(reply: pb.GetLimitsResponse) -> dict[str, Any]:
    return {
        "tier": TIER_NAMES.get(reply.tier),
        "level": reply.level,
        "capacity": reply.capacity,
        "refillPerSecond": reply.refill_per_second,
        "fullInSeconds": reply.full_in_seconds,
    }
