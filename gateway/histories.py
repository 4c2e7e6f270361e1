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
from store.base import ConversationStore, ResponseStore
from store.records import FeedbackRecord


class Homes(Protocol):
    """gateway/regions.py's routers: the user's home store, None when it is this region's;
    Unavailable while home is out."""

    async def home_of(self, user: User) -> HomeStore | None: ...


class History(ConversationStore, ResponseStore, Protocol):
    """A user's conversations as the API reads (and deletes) them, responses included: this
    region's store, or the home region's (HomeStore implements exactly this)."""


class Histories:
    def __init__(self, store: History, ratings: RatingDesk, homes: Homes) -> None:
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
