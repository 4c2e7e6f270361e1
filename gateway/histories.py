"""Where a user's kept history is read and rated, seen from one gateway: this region's store
for a user at home (or one the directory does not know), the home region's through HomeService
(gateway/home_client.py) for a user who reached this region from another. So a user sees one
list of conversations on every device, and a rating is stored with the answer and counted in
the tallies of the region that keeps it, wherever the user gave it (docs/decisions.md,
"Regions")."""

from __future__ import annotations

from typing import Protocol

from domain.feedback import Rating
from domain.types import User
from gateway.feedback import RatingDesk
from gateway.home_client import HomeStore
from store.base import Store
from store.records import ConversationRecord, FeedbackRecord, MessageRecord


class Homes(Protocol):
    """gateway/regions.py's routers: the user's home store, None when it is this region's;
    Unavailable while home is out."""

    async def home_of(self, user: User) -> HomeStore | None: ...


class History(Protocol):
    """A user's conversations as the API reads (and deletes) them: this region's Store, or a
    HomeStore."""

    async def list_conversations(
        self, user_id: str, limit: int, updated_before: float | None = None
    ) -> list[ConversationRecord]: ...

    async def get_conversation(self, user_id: str, conversation_id: str) -> ConversationRecord: ...

    async def list_messages(self, user_id: str, conversation_id: str) -> list[MessageRecord]: ...

    async def get_message(self, user_id: str, message_id: str) -> MessageRecord: ...

    async def delete_conversation(self, user_id: str, conversation_id: str) -> None: ...

    async def response_deleted(self, user_id: str, response_id: str) -> bool: ...

    async def delete_response(self, user_id: str, response_id: str) -> None: ...


class Histories:
    def __init__(self, store: Store, ratings: RatingDesk, homes: Homes) -> None:
        self._store = store
        self._ratings = ratings
        self._homes = homes

    async def of(self, user: User) -> History:
        """Where the user's conversations are read. Home out: Unavailable, since nothing of
        theirs is kept anywhere else (gateway/regions.py refuses their messages meanwhile)."""
        home = await self._homes.home_of(user)
        return self._store if home is None else home

    async def rate(
        self, user: User, message_id: str, rating: Rating, comment: str
    ) -> FeedbackRecord:
        """Stores the user's rating of their answer where the answer is kept."""
        home = await self._homes.home_of(user)
        if home is None:
            return await self._ratings.rate(user, message_id, rating, comment)
        return await home.rate_answer(user, message_id, rating, comment)
