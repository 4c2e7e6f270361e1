"""User administration behind the admin API: who may chat, on which tier, with which token.
The store keeps only a token's hash; the token itself is shown once, when it is made."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from domain.errors import FailedPrecondition, InvalidArgument
from domain.types import Tier
from infra.bearer import new_token, token_hash
from infra.directory import Directory, DirectoryUser
from store.base import UserStore
from store.records import UserRecord

MAX_USER_ID_CHARS = 128


class UserDirectory(Protocol):
    """Where users are listed for every region (the global directory), or nowhere."""

    async def put_user(self, user: DirectoryUser) -> None: ...

    async def delete_user(self, user_id: str) -> None: ...

    async def user(self, user_id: str) -> DirectoryUser | None: ...

    async def users(self) -> dict[str, DirectoryUser]: ...


class NoDirectory:
    """One region: the store alone knows its users."""

    async def put_user(self, user: DirectoryUser) -> None:
        return None

    async def delete_user(self, user_id: str) -> None:
        return None

    async def user(self, user_id: str) -> DirectoryUser | None:
        return None

    async def users(self) -> dict[str, DirectoryUser]:
        return {}


@dataclass(frozen=True, slots=True)
class ListedUser:
    """A user as an operator lists them: the store's record, and with regions the home region
    and residency the directory lists ('' and False without regions)."""

    record: UserRecord
    home: str = ""
    pinned: bool = False


class UserAdmin:
    def __init__(
        self, store: UserStore, directory: Directory | UserDirectory | None = None, region: str = ""
    ) -> None:
        self._store = store
        self._directory = directory or NoDirectory()
        # With regions: this scheduler's region, a new user's home unless another is named.
        self._region = region

    async def create(
        self, user_id: str, tier: Tier, home: str = "", pinned: bool = False
    ) -> tuple[UserRecord, str]:
        """The new user and its token; with regions, listed in the directory with its home
        (this region unless another is named) and residency."""
        if not user_id or len(user_id) > MAX_USER_ID_CHARS:
            raise InvalidArgument(f"user_id must be 1..{MAX_USER_ID_CHARS} characters")
        home = home or self._region
        if home != self._region:
            raise InvalidArgument(
                f"a user whose home is {home!r} is created by that region's scheduler, not "
                f"{self._region or 'this one'!r}: their history lives there"
            )
        token = new_token("u")
        digest = token_hash(token)
        record = await self._store.create_user(user_id, tier, digest)
        await self._directory.put_user(DirectoryUser(user_id, tier, home, pinned, digest))
        return record, token

    async def all(self) -> list[ListedUser]:
        records = await self._store.list_users()
        listed = await self._directory.users()
        return [_listed(record, listed.get(record.user_id)) for record in records]

    async def set_tier(self, user_id: str, tier: Tier) -> UserRecord:
        record = await self._store.set_user_tier(user_id, tier)
        await self._list(user_id, lambda u: DirectoryUser(u.user_id, tier, u.home, u.pinned,
                                                          u.token_hash))  # fmt: skip
        return record

    async def rotate_token(self, user_id: str) -> str:
        """A new token for the user; the ones before it stop working."""
        token = new_token("u")
        digest = token_hash(token)
        await self._store.set_user_token_hash(user_id, digest)
        await self._list(user_id, lambda u: DirectoryUser(u.user_id, u.tier, u.home, u.pinned,
                                                          digest))  # fmt: skip
        return token

    async def revoke_tokens(self, user_id: str) -> None:
        """The user keeps its conversations but can no longer call until given a new token."""
        await self._store.set_user_token_hash(user_id, None)
        await self._list(user_id, lambda u: DirectoryUser(u.user_id, u.tier, u.home, u.pinned))

    async def delete(self, user_id: str) -> None:
        """The user and everything kept of them in this region's store (conversations,
        ratings, captured prompts), and their directory listing. With regions, only the
        user's home region's scheduler may: their history lives there."""
        listed = await self._directory.user(user_id)
        if listed is not None and listed.home != self._region:
            raise FailedPrecondition(
                f"user {user_id!r} lives in region {listed.home!r}: delete them with that "
                "region's scheduler, where their history is kept"
            )
        await self._store.delete_user(user_id)
        await self._directory.delete_user(user_id)

    async def _list(self, user_id: str, change: Callable[[DirectoryUser], DirectoryUser]) -> None:
        """The directory's copy changed as the store's was (a user it lists)."""
        listed = await self._directory.user(user_id)
        if listed is not None:
            await self._directory.put_user(change(listed))


def _listed(record: UserRecord, listed: DirectoryUser | None) -> ListedUser:
    return ListedUser(record) if listed is None else ListedUser(record, listed.home, listed.pinned)
