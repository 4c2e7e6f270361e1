"""Bearer token -> user and tier, checked against the user store."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import grpc

from domain.errors import Unauthenticated
from domain.types import User
from infra.bearer import bearer_from_metadata, token_hash
from store.base import UserStore


async def _nobody(digest: str) -> User | None:
    return None


class Authenticator:
    def __init__(
        self, store: UserStore, elsewhere: Callable[[str], Awaitable[User | None]] = _nobody
    ) -> None:
        self._store = store
        # Users this region's store does not hold (with regions: the global directory's).
        self._elsewhere = elsewhere

    async def user_of(self, context: grpc.aio.ServicerContext) -> User:
        return await self.user_of_token(bearer_from_metadata(context.invocation_metadata()))

    async def user_of_token(self, token: str | None) -> User:
        """The user a bearer token names (None: the caller sent none)."""
        if token is None:
            raise Unauthenticated("send 'authorization: Bearer <token>'")
        digest = token_hash(token)
        record = await self._store.user_by_token_hash(digest)
        if record is not None:
            return User(record.user_id, record.tier)
        found = await self._elsewhere(digest)
        if found is None:
            raise Unauthenticated("the bearer token is not valid")
        return found
