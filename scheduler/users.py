"""User administration behind the admin API: who may chat, on which tier, with which token.
The store keeps only a token's hash; the token itself is shown once, when it is made."""

from __future__ import annotations

from domain.errors import InvalidArgument
from domain.types import Tier
from infra.bearer import new_token, token_hash
from store.base import Store
from store.records import UserRecord

MAX_USER_ID_CHARS = 128


class UserAdmin:
    def __init__(self, store: Store) -> None:
        self._store = store

    async def create(self, user_id: str, tier: Tier) -> tuple[UserRecord, str]:
        """The new user and its token."""
        if not user_id or len(user_id) > MAX_USER_ID_CHARS:
            raise InvalidArgument(f"user_id must be 1..{MAX_USER_ID_CHARS} characters")
        token = new_token("u")
        return await self._store.create_user(user_id, tier, token_hash(token)), token

    async def all(self) -> list[UserRecord]:
        return await self._store.list_users()

    async def set_tier(self, user_id: str, tier: Tier) -> UserRecord:
        return await self._store.set_user_tier(user_id, tier)

    async def rotate_token(self, user_id: str) -> str:
        """A new token for the user; the ones before it stop working."""
        token = new_token("u")
        await self._store.set_user_token_hash(user_id, token_hash(token))
        return token

    async def revoke_tokens(self, user_id: str) -> None:
        """The user keeps its conversations but can no longer call until given a new token."""
        await self._store.set_user_token_hash(user_id, None)
