"""A user's personal memory for operators (UserService's memory calls, `chatctl users
memories` and `chatctl users forget`): exported whole, deleted whole or entry by entry. Only
at the user's home region, where it is kept, like the rest of their history."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from domain.errors import FailedPrecondition, NotFound
from infra.directory import Directory
from scheduler.users import NoDirectory, UserDirectory
from store.base import MemoryStore, UserStore
from store.records import MemoryRecord


class MemoryStoreOfUsers(MemoryStore, UserStore, Protocol):
    """The scheduler's store, in the two parts this uses."""


class UserMemories:
    def __init__(
        self,
        store: MemoryStoreOfUsers,
        directory: Directory | UserDirectory | None = None,
        region: str = "",
    ) -> None:
        self._store = store
        self._directory = directory or NoDirectory()
        self._region = region

    async def export(self, user_id: str) -> list[MemoryRecord]:
        await self._check(user_id)
        return await self._store.list_memories(user_id)

    async def delete(self, user_id: str, memory_ids: Sequence[str]) -> int:
        """How many were deleted. Every named entry is checked before any is deleted."""
        await self._check(user_id)
        kept = {record.memory_id for record in await self._store.list_memories(user_id)}
        unknown = [memory_id for memory_id in memory_ids if memory_id not in kept]
        if unknown:
            raise NotFound(f"user {user_id!r} has no memory {unknown[0]!r}: nothing deleted")
        doomed = list(dict.fromkeys(memory_ids)) or sorted(kept)
        for memory_id in doomed:
            await self._store.delete_memory(user_id, memory_id)
        return len(doomed)

    async def _check(self, user_id: str) -> None:
        await self._store.get_user(user_id)  # NotFound for no such user
        listed = await self._directory.user(user_id)
        if listed is not None and listed.home != self._region:
            raise FailedPrecondition(
                f"user {user_id!r} lives in region {listed.home!r}: their memory is kept "
                "there; ask that region's scheduler"
            )
