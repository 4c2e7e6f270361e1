"""The one store interface every backend (SQLite, PostgreSQL) implements."""

from __future__ import annotations

from typing import Protocol

from domain.types import Tier
from store.records import (
    ConversationRecord,
    FeedbackRecord,
    MessageRecord,
    NewMessage,
    ServingRecord,
    UserRecord,
)


class ConversationStore(Protocol):
    """The part of the store that the gateway's pipeline and compactor use: conversations,
    their messages and what served them."""

    async def get_conversation(self, user_id: str, conversation_id: str) -> ConversationRecord: ...

    async def get_message(self, user_id: str, message_id: str) -> MessageRecord: ...

    async def list_messages(self, user_id: str, conversation_id: str) -> list[MessageRecord]: ...

    async def newest_message(self, user_id: str, conversation_id: str) -> MessageRecord | None: ...

    async def add_message(
        self, user_id: str, conversation_id: str, message: NewMessage, title: str = ""
    ) -> MessageRecord: ...

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

    async def record_serving(self, user_id: str, serving: ServingRecord) -> None:
        """What served a stored turn (its message must exist); once per message."""
        ...

    async def conversation_version(self, user_id: str, conversation_id: str) -> str:
        """The version of the conversation's first recorded turn; '' when none."""
        ...


class Store(ConversationStore, Protocol):
    """The one store interface every backend implements."""

    async def open(self) -> None: ...

    async def close(self) -> None: ...

    async def schema_version(self) -> int: ...

    async def create_user(self, user_id: str, tier: Tier, token_hash: str) -> UserRecord: ...

    async def user_by_token_hash(self, token_hash: str) -> UserRecord | None: ...

    async def get_user(self, user_id: str) -> UserRecord: ...

    async def list_users(self) -> list[UserRecord]: ...

    async def set_user_tier(self, user_id: str, tier: Tier) -> UserRecord: ...

    async def set_user_token_hash(self, user_id: str, token_hash: str | None) -> None: ...

    async def list_conversations(
        self, user_id: str, limit: int, updated_before: float | None = None
    ) -> list[ConversationRecord]: ...

    async def delete_conversation(self, user_id: str, conversation_id: str) -> None: ...

    async def delete_response(self, user_id: str, response_id: str) -> None:
        """Marks a message deleted as a response of the OpenAI Responses API (its id is the
        response's); the conversation keeps it. NotFound for no such message, or one already
        deleted."""
        ...

    async def response_deleted(self, user_id: str, response_id: str) -> bool: ...

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
