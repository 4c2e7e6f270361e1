"""Where a user's kept history is read and rated, seen from one gateway: this region's store
for a user at home (or one the directory does not know), the home region's through HomeService
(gateway/home_client.py) for a user who reached this region from another. So a user sees one
list of conversations on every device, and a rating is stored with the answer and counted in
the tallies of the region that keeps it, wherever the user gave it (docs/decisions.md,
"Regions")."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Protocol

from domain.errors import NotFound, Unavailable
from domain.feedback import Rating
from domain.types import User
from gateway.feedback import RatingDesk
from gateway.home_client import HomeStore
from store.base import Store
from store.records import ConversationRecord, FeedbackRecord, MessageRecord


class Homes(Protocol):
    """gateway/regions.py's routers: the user's home store, None when it is this region's."""

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
        """Where the user's conversations are read."""
        try:
            home = await self._homes.home_of(user)
        except Unavailable as out:
            return KeptWhileOut(self._store, out)
        return self._store if home is None else home

    async def rate(
        self, user: User, message_id: str, rating: Rating, comment: str
    ) -> FeedbackRecord:
        """Stores the user's rating of their answer where the answer is kept."""
        try:
            home = await self._homes.home_of(user)
        except Unavailable as out:
            # An answer given here while home is out is kept (and rated) here.
            with _elsewhere_is(out):
                return await self._ratings.rate(user, message_id, rating, comment)
        if home is None:
            return await self._ratings.rate(user, message_id, rating, comment)
        return await home.rate_answer(user, message_id, rating, comment)


class KeptWhileOut:
    """A user's history while their home region is out: the conversations this region served
    meanwhile (kept here, docs/decisions.md, "Regions"); anything else is at home, and is
    neither read nor deleted: home's unavailability, as for the whole list."""

    def __init__(self, store: Store, out: Unavailable) -> None:
        self._store = store
        self._out = out

    async def list_conversations(
        self, user_id: str, limit: int, updated_before: float | None = None
    ) -> list[ConversationRecord]:
        raise Unavailable(self._out.reason)

    async def get_conversation(self, user_id: str, conversation_id: str) -> ConversationRecord:
        with _elsewhere_is(self._out):
            return await self._store.get_conversation(user_id, conversation_id)

    async def list_messages(self, user_id: str, conversation_id: str) -> list[MessageRecord]:
        with _elsewhere_is(self._out):
            return await self._store.list_messages(user_id, conversation_id)

    async def get_message(self, user_id: str, message_id: str) -> MessageRecord:
        with _elsewhere_is(self._out):
            return await self._store.get_message(user_id, message_id)

    async def delete_conversation(self, user_id: str, conversation_id: str) -> None:
        with _elsewhere_is(self._out):
            await self._store.delete_conversation(user_id, conversation_id)

    async def response_deleted(self, user_id: str, response_id: str) -> bool:
        return await self._store.response_deleted(user_id, response_id)

    async def delete_response(self, user_id: str, response_id: str) -> None:
        with _elsewhere_is(self._out):
            await self._store.delete_response(user_id, response_id)


@contextlib.contextmanager
def _elsewhere_is(out: Unavailable) -> Iterator[None]:
    """What is not kept here is at the home region that is out."""
    try:
        yield
    except NotFound as error:
        raise Unavailable(out.reason) from error
