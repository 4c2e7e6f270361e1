"""Protobuf <-> store records for HomeService (a conversation's history kept at home)."""

from __future__ import annotations

from chat.v1 import common_pb2
from chat.v1 import home_service_pb2 as pb
from domain.errors import InvalidArgument
from domain.feedback import Rating
from domain.types import Role
from gateway.convert import rating_from_pb
from infra.convert import (
    RATING_TO_PB,
    ROLE_FROM_PB,
    ROLE_TO_PB,
    tool_definition_to_pb,
    tools_from_pb,
    turn_from_pb,
    turn_to_pb,
)
from store.records import (
    CapturedPrompt,
    ConversationRecord,
    FeedbackRecord,
    MessageRecord,
    NewMessage,
    ServingRecord,
)


def conversation_to_pb(record: ConversationRecord) -> pb.StoredConversation:
    return pb.StoredConversation(
        conversation_id=record.conversation_id, title=record.title, model=record.model,
        summary=record.summary, summary_upto_seq=record.summary_upto_seq,
        total_tokens=record.total_tokens, created_at=record.created_at,
        updated_at=record.updated_at, pool=record.pool, summary_tokens=record.summary_tokens,
        pinned=record.pinned, pinned_tokens=record.pinned_tokens, region=record.region,
    )  # fmt: skip


def conversation_from_pb(user_id: str, c: pb.StoredConversation) -> ConversationRecord:
    return ConversationRecord(
        user_id, c.conversation_id, c.title, c.model, c.summary, c.summary_upto_seq,
        c.total_tokens, c.created_at, c.updated_at, c.pool, c.summary_tokens, c.pinned,
        c.pinned_tokens, c.region,
    )  # fmt: skip


def message_to_pb(record: MessageRecord) -> pb.StoredMessage:
    return pb.StoredMessage(
        conversation_id=record.conversation_id, seq=record.seq, message_id=record.message_id,
        parent_seq=record.parent_seq or 0, role=ROLE_TO_PB[record.role], content=record.content,
        tokens=record.tokens, model=record.model, replica_id=record.replica_id,
        finish=record.finish, created_at=record.created_at, region=record.region,
    )  # fmt: skip


def message_from_pb(m: pb.StoredMessage) -> MessageRecord:
    return MessageRecord(
        m.conversation_id, m.seq, m.message_id, m.parent_seq or None, _role(m.role), m.content,
        m.tokens, m.model, m.replica_id, m.finish, m.created_at, m.region,
    )  # fmt: skip


def new_message_to_pb(message: NewMessage) -> pb.StoredMessage:
    return pb.StoredMessage(
        message_id=message.message_id, parent_seq=message.parent_seq or 0,
        role=ROLE_TO_PB[message.role], content=message.content, tokens=message.tokens,
        model=message.model, replica_id=message.replica_id, finish=message.finish,
        region=message.region, pool=message.pool, parent_tokens=message.parent_tokens,
    )  # fmt: skip


def new_message_from_pb(m: pb.StoredMessage) -> NewMessage:
    return NewMessage(
        m.message_id, _role(m.role), m.content, m.tokens, m.parent_seq or None, m.model,
        m.replica_id, m.finish, m.pool, m.region, m.parent_tokens,
    )  # fmt: skip


def serving_to_pb(record: ServingRecord) -> pb.StoredServing:
    return pb.StoredServing(
        message_id=record.message_id, conversation_id=record.conversation_id,
        version=record.version, slice=record.slice, routed_pool=record.routed_pool,
        budget=record.budget, served_pool=record.served_pool,
    )  # fmt: skip


def serving_from_pb(s: pb.StoredServing) -> ServingRecord:
    return ServingRecord(s.message_id, s.conversation_id, s.version, s.slice, s.routed_pool,
                         s.budget, s.served_pool)  # fmt: skip


def prompt_to_pb(prompt: CapturedPrompt) -> pb.StoredPrompt:
    return pb.StoredPrompt(
        message_id=prompt.message_id, conversation_id=prompt.conversation_id,
        version=prompt.version, model=prompt.model, node_id=prompt.node_id,
        temperature=prompt.temperature, max_tokens=prompt.max_tokens,
        turns=[pb.StoredPromptTurn(turn=turn_to_pb(t), tokens=t.tokens) for t in prompt.turns],
        tools=[tool_definition_to_pb(tool) for tool in prompt.tools],
    )  # fmt: skip


def prompt_from_pb(p: pb.StoredPrompt) -> CapturedPrompt:
    return CapturedPrompt(p.message_id, p.conversation_id, p.version, p.model, p.node_id,
                          p.temperature, p.max_tokens,
                          tuple(turn_from_pb(t.turn, t.tokens) for t in p.turns),
                          tools=tools_from_pb(p.tools))  # fmt: skip


def feedback_to_pb(record: FeedbackRecord) -> pb.RateAnswerResponse:
    return pb.RateAnswerResponse(
        message_id=record.message_id, conversation_id=record.conversation_id,
        rating=RATING_TO_PB[Rating(record.rating)], comment=record.comment,
        version=record.version,
    )  # fmt: skip


def feedback_from_pb(reply: pb.RateAnswerResponse) -> FeedbackRecord:
    rating = rating_from_pb(reply.rating).value
    return FeedbackRecord(reply.message_id, reply.conversation_id, rating, reply.comment,
                          reply.version)  # fmt: skip


def _role(value: common_pb2.Role) -> Role:
    role = ROLE_FROM_PB.get(value)
    if role is None:
        raise InvalidArgument("a stored message's role must be system, user or assistant")
    return role
