"""Bearer token -> user and tier, checked against the user store."""

from __future__ import annotations

import grpc

from domain.errors import Unauthenticated
from domain.types import User
from infra.bearer import bearer_from_metadata, token_hash
from store.base import Store


class Authenticator:
    def __init__(self, store: Store) -> None:
        self._store = store

    async def user_of(self, context: grpc.aio.ServicerContext) -> User:
        token = bearer_from_metadata(context.invocation_metadata())
        if token is None:
            raise Unauthenticated("send 'authorization: Bearer <token>'")
        record = await self._store.user_by_token_hash(token_hash(token))
        if record is None:
            raise Unauthenticated("the bearer token is not valid")
        return User(record.user_id, record.tier)
