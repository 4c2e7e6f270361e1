"""Reading a stored conversation for a prompt: the branch a message answers, and the summary,
pinned turn and history on it (pure: no platform needed)."""

from __future__ import annotations

from domain.types import Finish, Role, Turn
from gateway.stored_context import ContextParts, branch, context_parts
from store.records import ConversationRecord, MessageRecord

USER = "alice"


def record(seq: int, parent: int | None, role: Role, finish: str = "") -> MessageRecord:
    return MessageRecord("c", seq, f"m{seq}", parent, role, f"text {seq}", seq, "m", "", finish,
                         0.0)  # fmt: skip


def conversation_with(summary: str, upto: int, pinned: str = "") -> ConversationRecord:
    return ConversationRecord(USER, "c", "", "m", summary, upto, 0, 0.0, 0.0, "small", 7,
                              pinned, 3)  # fmt: skip


def test_branch_follows_parents_and_leaves_refused_messages_out() -> None:
    messages = [
        record(1, None, Role.USER),
        record(2, 1, Role.ASSISTANT),
        record(3, 2, Role.USER, Finish.REFUSED.value),
        record(4, 3, Role.ASSISTANT, Finish.REFUSED.value),
        record(5, 4, Role.USER),
        record(6, 2, Role.USER),  # a regeneration's branch
        record(7, 5, Role.ASSISTANT),
    ]
    assert [m.seq for m in branch(messages, messages[-1])] == [1, 2, 5, 7]
    assert [m.seq for m in branch(messages, messages[5])] == [1, 2, 6]
    assert branch(messages, None) == []


def test_context_parts_use_the_summary_only_on_its_own_branch() -> None:
    messages = [record(seq, seq - 1 or None, Role.USER if seq % 2 else Role.ASSISTANT)
                for seq in range(1, 9)]  # fmt: skip
    summarized = conversation_with("the summary", upto=4, pinned="pins")
    parts = context_parts(summarized, messages)
    assert parts.summary == Turn(Role.SYSTEM, "the summary", 7)
    assert parts.pinned == Turn(Role.SYSTEM, "pins", 3)
    assert [t.text for t in parts.history] == [f"text {seq}" for seq in range(5, 9)]
    # A branch that left the conversation before the summary point gets no summary.
    other = [*messages[:2], record(9, 2, Role.USER)]
    assert context_parts(summarized, other) == ContextParts(
        None, None, [Turn(m.role, m.content, m.tokens) for m in other]
    )
    plain = context_parts(conversation_with("", 0), messages)
    assert plain.summary is None and plain.pinned is None and len(plain.history) == 8
    assert context_parts(None, []).history == []
