"""The parts of a prompt read from a stored conversation: the message a new one answers, the
branch it ends (its parent links back to the first message, without refused or empty turns),
and the summary, pinned constraints and turns after the summary that fit on that branch."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from domain.errors import NotFound
from domain.types import Finish, Role, Turn
from store.base import ConversationStore
from store.records import ConversationRecord, MessageRecord


def branch(messages: Sequence[MessageRecord], tip: MessageRecord | None) -> list[MessageRecord]:
    """The messages from the conversation's first to tip along parent links, oldest first,
    without refused or empty ones (no prompt includes them)."""
    by_seq = {m.seq: m for m in messages}
    chain: list[MessageRecord] = []
    cursor = tip
    while cursor is not None:
        if cursor.content and cursor.finish != Finish.REFUSED.value:
            chain.append(cursor)
        cursor = by_seq.get(cursor.parent_seq) if cursor.parent_seq else None
    chain.reverse()
    return chain


def as_turn(message: MessageRecord) -> Turn:
    return Turn(message.role, message.content, message.tokens)


def folded_count(conversation: ConversationRecord, chain: Sequence[MessageRecord]) -> int:
    """How many of the chain's messages the stored summary holds; 0 when it holds none of
    this branch (no summary, or one made on a branch the user has since left)."""
    upto = conversation.summary_upto_seq
    if not conversation.summary or upto <= 0:
        return 0
    for index, message in enumerate(chain):
        if message.seq == upto:
            return index + 1
    return 0


@dataclass(frozen=True, slots=True)
class ContextParts:
    """What ContextBuilder.build takes from a stored conversation."""

    summary: Turn | None
    pinned: Turn | None
    # The turns after the summary point, oldest first.
    history: list[Turn]
    # The user's memory entries relevant to the new message (gateway/memories.py), or None.
    memories: Turn | None = None


def context_parts(
    conversation: ConversationRecord | None, chain: Sequence[MessageRecord]
) -> ContextParts:
    """Summary turn, pinned turn and history for a prompt on `chain` (see `branch`)."""
    if conversation is None:
        return ContextParts(None, None, [as_turn(m) for m in chain])
    folded = folded_count(conversation, chain)
    if folded == 0:
        return ContextParts(None, None, [as_turn(m) for m in chain])
    summary = Turn(Role.SYSTEM, conversation.summary, conversation.summary_tokens)
    pinned = (
        Turn(Role.SYSTEM, conversation.pinned, conversation.pinned_tokens)
        if conversation.pinned
        else None
    )
    return ContextParts(summary, pinned, [as_turn(m) for m in chain[folded:]])


async def read_parent(
    store: ConversationStore, user_id: str, conversation_id: str, parent_id: str
) -> tuple[ConversationRecord | None, MessageRecord | None]:
    """The conversation (None when this message starts it) and the message answered: the one
    named, or ('') the conversation's newest."""
    try:
        conversation = await store.get_conversation(user_id, conversation_id)
    except NotFound:
        conversation = None
    if parent_id:
        parent = await store.get_message(user_id, parent_id)
        if parent.conversation_id != conversation_id:
            raise NotFound(f"no message {parent_id!r} in this conversation")
        return conversation, parent
    if conversation is None:
        return None, None
    return conversation, await store.newest_message(user_id, conversation_id)


async def read_context(
    store: ConversationStore,
    user_id: str,
    conversation: ConversationRecord | None,
    parent: MessageRecord | None,
) -> ContextParts:
    """The conversation's summary, pinned constraints and the turns after the summary on
    the branch that ends at parent (regenerations make other branches). Refused turns are
    left out: blocked text must never reach a model."""
    if conversation is None or parent is None:
        return ContextParts(None, None, [])
    messages = await store.list_messages(user_id, conversation.conversation_id)
    return context_parts(conversation, branch(messages, parent))
