"""The store, in the parts its callers need; every backend (SQLite, PostgreSQL) implements
them all, as `Store`.

A caller asks for the narrowest part it uses, so that what it may touch is read from its
signature, and so that a store that is not a whole one can stand in for the part it has: the
home region's conversations reached over HomeService (gateway/home_client.py) are a
`ConversationStore` and a `ResponseStore`, with no users, summaries or ratings."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from domain.types import Tier
from store.records import (
    CapturedPrompt,
    ConversationRecord,
    FeedbackRecord,
    FilePassage,
    FileRecord,
    MemoryRecord,
    MessageRecord,
    NewMessage,
    ServingRecord,
    UserRecord,
)


class UserStore(Protocol):
    """Users and their tokens' hashes: the admin API's (scheduler/users.py) and the gateway's
    token check (gateway/auth.py). A region's own: users never cross to another region's store
    (the global directory lists them)."""

    async def create_user(self, user_id: str, tier: Tier, token_hash: str) -> UserRecord: ...

    async def user_by_token_hash(self, token_hash: str) -> UserRecord | None: ...

    async def get_user(self, user_id: str) -> UserRecord: ...

    async def list_users(self) -> list[UserRecord]: ...

    async def set_user_tier(self, user_id: str, tier: Tier) -> UserRecord: ...

    async def set_user_token_hash(self, user_id: str, token_hash: str | None) -> None: ...

    async def delete_user(self, user_id: str) -> None:
        """Deletes the user and everything kept of them here, in one transaction: their
        conversations and with them every message, rating, serving record and captured
        prompt, their memories, and their files with their passages. NotFound when there is
        no such user."""
        ...


class ConversationStore(Protocol):
    """Conversations and their messages, with what served each turn: what a message's pipeline
    reads and writes, and what the API lists and deletes. Every place a user's history is kept
    implements it, this region's database and another region's reached over HomeService."""

    async def get_conversation(self, user_id: str, conversation_id: str) -> ConversationRecord: ...

    async def list_conversations(
        self, user_id: str, limit: int, updated_before: float | None = None
    ) -> list[ConversationRecord]: ...

    async def delete_conversation(self, user_id: str, conversation_id: str) -> None: ...

    async def get_message(self, user_id: str, message_id: str) -> MessageRecord: ...

    async def list_messages(self, user_id: str, conversation_id: str) -> list[MessageRecord]: ...

    async def newest_message(self, user_id: str, conversation_id: str) -> MessageRecord | None: ...

    async def add_message(
        self, user_id: str, conversation_id: str, message: NewMessage, title: str = ""
    ) -> MessageRecord: ...

    async def record_serving(self, user_id: str, serving: ServingRecord) -> None:
        """What served a stored turn (its message must exist); once per message."""
        ...

    async def conversation_version(self, user_id: str, conversation_id: str) -> str:
        """The version of the conversation's first recorded turn; '' when none."""
        ...


class SummaryStore(ConversationStore, Protocol):
    """Conversations with the summaries compaction writes (gateway/compactor.py). Only the
    region that keeps a conversation compacts it, so only its own database implements this:
    a pipeline running away from home has no compactor."""

    async def set_summary(
        self,
        user_id: str,
        conversation_id: str,
        summary: str,
        summary_tokens: int,
        upto_seq: int,
        pinned: str,
        pinned_tokens: int,
        expected_upto_seq: int,
    ) -> bool:
        """Replaces the summary and pinned constraints only while summary_upto_seq still
        equals expected_upto_seq (compare-and-set: of two compactions of one conversation,
        one wins). False when another got there first; NotFound for no such conversation."""
        ...


class ResponseStore(Protocol):
    """The OpenAI Responses API's deletions: a response's id is its message's, and a deleted
    response stays in its conversation, marked. Read and written wherever the conversation is
    reached, beside a ConversationStore."""

    async def delete_response(self, user_id: str, response_id: str) -> None:
        """Marks a message deleted as a response of the OpenAI Responses API (its id is the
        response's); the conversation keeps it. NotFound for no such message, or one already
        deleted."""
        ...

    async def response_deleted(self, user_id: str, response_id: str) -> bool: ...


class FeedbackStore(ConversationStore, Protocol):
    """Users' ratings of their answers, with the version that served each (gateway/feedback.py).
    Kept with the answer, in the region that keeps the conversation: a rating given elsewhere
    is passed there (HomeService's RateAnswer)."""

    async def serving_of(self, user_id: str, message_id: str) -> ServingRecord:
        """NotFound when the turn has no record (refused at the door, or older)."""
        ...

    async def rate_message(self, user_id: str, feedback: FeedbackRecord) -> str:
        """Stores a rating of a message, replacing the user's earlier one; the earlier rating
        ('' when none). NotFound when the message does not exist."""
        ...

    async def feedback_of(self, user_id: str, message_id: str) -> FeedbackRecord:
        """NotFound when the message has no rating."""
        ...


class PromptStore(Protocol):
    """The exact prompts of answered turns (gateway/prompt_capture.py), kept with the user's
    message in the store that keeps the conversation, and gone with it."""

    async def capture_prompt(self, user_id: str, prompt: CapturedPrompt) -> None:
        """Keeps a turn's prompt, replacing one kept for the same message (a retry that ran
        again). NotFound when the message does not exist."""
        ...

    async def captured_prompt(self, user_id: str, message_id: str) -> CapturedPrompt:
        """NotFound when none is kept for the message (never captured, or forgotten)."""
        ...

    async def forget_prompts(self, captured_before: float) -> int:
        """Deletes every prompt captured before the time (seconds since the epoch); how many."""
        ...


class MemoryStore(Protocol):
    """A user's personal memory (gateway/memories.py): entries they see and edit, and the
    lexical search a turn reads them by. Kept in the user's home region, with their history."""

    async def add_memory(self, user_id: str, memory: MemoryRecord) -> None:
        """AlreadyExists when the user has an entry of that id."""
        ...

    async def list_memories(self, user_id: str) -> list[MemoryRecord]:
        """Every entry of the user's, the newest written first."""
        ...

    async def get_memory(self, user_id: str, memory_id: str) -> MemoryRecord:
        """NotFound when the user has no such entry."""
        ...

    async def update_memory(
        self, user_id: str, memory_id: str, text: str, pinned: bool, updated_at: float
    ) -> MemoryRecord:
        """Replaces the entry's text and pin; NotFound when the user has no such entry."""
        ...

    async def delete_memory(self, user_id: str, memory_id: str) -> None:
        """NotFound when the user has no such entry."""
        ...

    async def search_memories(
        self, user_id: str, terms: Sequence[str], limit: int, fresh_since: float
    ) -> list[MemoryRecord]:
        """The user's entries holding any of the terms (as the index stems them), the most
        relevant first, at most limit; an unpinned entry last written before fresh_since is
        left out. No terms: none."""
        ...


class FileStore(Protocol):
    """The files a user uploaded for the file_search tool: each kept whole and cut into
    passages, and the lexical search over the passages that a turn's file_search reads and its
    citations name. Kept in the user's home region, with their history."""

    async def add_file(
        self, user_id: str, record: FileRecord, content: str, passages: Sequence[str]
    ) -> None:
        """Keeps the file, its content and its passages (numbered from 0 in their order), all
        or nothing. AlreadyExists when the user has a file of that id; ValueError when the
        passages are not as many as the record says."""
        ...

    async def list_files(self, user_id: str) -> list[FileRecord]:
        """Every file of the user's, the newest first."""
        ...

    async def get_file(self, user_id: str, file_id: str) -> FileRecord:
        """NotFound when the user has no such file."""
        ...

    async def file_content(self, user_id: str, file_id: str) -> str:
        """The file's whole content; NotFound when the user has no such file."""
        ...

    async def delete_file(self, user_id: str, file_id: str) -> None:
        """Deletes the file and its passages, which no search finds after; NotFound when the
        user has no such file."""
        ...

    async def search_passages(
        self, user_id: str, terms: Sequence[str], limit: int
    ) -> list[FilePassage]:
        """The passages of the user's files holding any of the terms (as the index stems
        them), the most relevant first, at most limit. No terms: none."""
        ...

    async def get_passages(
        self, user_id: str, passage_refs: Sequence[tuple[str, int]]
    ) -> list[FilePassage]:
        """The passages named (file id, index) that the user's files have, in the order
        named; those they do not have are left out (a citation that does not resolve)."""
        ...


class Store(
    UserStore,
    SummaryStore,
    ResponseStore,
    FeedbackStore,
    PromptStore,
    MemoryStore,
    FileStore,
    Protocol,
):
    """A whole store, as a backend implements it: every part, opened (migrated) and closed by
    the service that owns it (store/factory.py)."""

    async def open(self) -> None: ...

    async def close(self) -> None: ...

    async def schema_version(self) -> int: ...
