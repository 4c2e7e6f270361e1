"""The parts of a prompt read from a stored conversation: the branch a message answers (its
parent links back to the first message, without refused or empty turns), and the summary,
pinned constraints and turns after the summary that fit on that branch."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from domain.types import Finish, Role, Turn
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
