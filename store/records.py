"""Rows as the stores return them."""

from __future__ import annotations

from dataclasses import dataclass

from domain.answer_options import ToolDefinition
from domain.types import Role, Tier, Turn


@dataclass(frozen=True, slots=True)
class UserRecord:
    user_id: str
    tier: Tier
    has_token: bool
    created_at: float


@dataclass(frozen=True, slots=True)
class ConversationRecord:
    user_id: str
    conversation_id: str
    title: str
    model: str
    summary: str
    summary_upto_seq: int
    total_tokens: int
    created_at: float
    updated_at: float
    # The model pool the router keeps it on; '' before its first routed message.
    pool: str = ""
    # The summary turn's tokens (summary is its whole text; summary_upto_seq the last folded
    # message), and the pinned constraints' turn and its tokens ('' and 0 until compacted).
    summary_tokens: int = 0
    pinned: str = ""
    pinned_tokens: int = 0
    # The region it runs in, when that is not the user's home ('' at home).
    region: str = ""


@dataclass(frozen=True, slots=True)
class MessageRecord:
    conversation_id: str
    seq: int
    message_id: str
    parent_seq: int | None
    role: Role
    content: str
    tokens: int
    model: str
    replica_id: str
    finish: str
    created_at: float
    # The region that served it ('' on a single-region platform).
    region: str = ""


@dataclass(frozen=True, slots=True)
class NewMessage:
    message_id: str
    role: Role
    content: str
    tokens: int
    parent_seq: int | None
    model: str = ""
    replica_id: str = ""
    finish: str = ""
    # Moves the conversation to this pool when not empty (the router's decision).
    pool: str = ""
    # The region that served the turn; it also becomes the conversation's region (the
    # region router's decision: '' or home's name at home).
    region: str = ""
    # The parent turn's exact token count, learnt while this answer was written (the parent
    # was stored with an upper bound); 0: the parent's stored count stands.
    parent_tokens: int = 0


@dataclass(frozen=True, slots=True)
class ServingRecord:
    """What served one turn: the version and the user's slice, the router's pool, the daily
    budget's outcome ("within", "over") and the pool that actually served."""

    message_id: str
    conversation_id: str
    version: str
    slice: str = ""
    routed_pool: str = ""
    budget: str = ""
    served_pool: str = ""
    created_at: float = 0.0


@dataclass(frozen=True, slots=True)
class FeedbackRecord:
    """A user's rating of one of their answers ("up" or "down", domain/feedback.py), with the
    version that served it ('' when none was recorded)."""

    message_id: str
    conversation_id: str
    rating: str
    comment: str = ""
    version: str = ""
    created_at: float = 0.0
    updated_at: float = 0.0


@dataclass(frozen=True, slots=True)
class CapturedPrompt:
    """What an engine was sent for one answered turn, kept so the turn can be read and sent
    again later (gateway/prompt_capture.py): the turns as the node received them (the
    version's system prompt first), the sampling, the version and model, and the replica
    that finished the answer. `message_id` is the user's message."""

    message_id: str
    conversation_id: str
    version: str
    model: str
    node_id: str
    temperature: float
    max_tokens: int
    turns: tuple[Turn, ...]
    created_at: float = 0.0
    # The tools offered with the prompt (a turn the tool loop ran); none for others.
    tools: tuple[ToolDefinition, ...] = ()


@dataclass(frozen=True, slots=True)
class MemoryRecord:
    """One entry of a user's personal memory (gateway/memories.py). `source` says who wrote
    it: "user" (their own list) or "model" (a `remember` call the user's turn ran).
    updated_at is when its text or pin last changed: an entry ages from there."""

    memory_id: str
    text: str
    pinned: bool
    source: str
    created_at: float
    updated_at: float


@dataclass(frozen=True, slots=True)
class FileRecord:
    """A file a user uploaded for the file_search tool. Its content is kept whole beside it
    (FileStore.file_content) and cut into passages, the units a search finds and a citation
    names."""

    file_id: str  # "file-" and 24 hex digits, chosen by the caller
    filename: str
    purpose: str  # as the uploader gave it ("user_data", "assistants", ...)
    bytes: int  # the content's size in UTF-8
    passages: int  # how many passages the content was cut into
    created_at: float


@dataclass(frozen=True, slots=True)
class FilePassage:
    """One passage of a user's file, as a search finds it or a citation names it."""

    file_id: str
    filename: str
    index: int  # its place in the file, from 0
    text: str
