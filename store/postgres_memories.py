"""PostgresStore's personal memory (store/base.py's MemoryStore): the table's generated
tsvector under a GIN index (migration 009), ranked by ts_rank."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import asyncpg

from domain.errors import AlreadyExists, NotFound
from store import memories
from store.records import MemoryRecord


class PostgresMemories:
    """Mixed into PostgresStore, whose bounded calls (`_fetch`, `_execute`) it uses."""

    if TYPE_CHECKING:  # PostgresStore's own, declared for the type checker

        async def _fetch(self, sql: str, *args: object) -> list[asyncpg.Record]: ...

        async def _execute(self, sql: str, *args: object) -> int: ...

    async def add_memory(self, user_id: str, memory: MemoryRecord) -> None:
        try:
            await self._execute(
                f"INSERT INTO memories (user_id, {memories.COLUMNS}) "
                "VALUES ($1, $2, $3, $4, $5, $6, $7)",
                user_id, *memories.row_values(memory),
            )  # fmt: skip
        except asyncpg.UniqueViolationError as exc:
            raise AlreadyExists(f"a memory {memory.memory_id!r} exists already") from exc

    async def list_memories(self, user_id: str) -> list[MemoryRecord]:
        rows = await self._fetch(
            f"SELECT {memories.COLUMNS} FROM memories WHERE user_id = $1 "
            "ORDER BY updated_at DESC, memory_id",
            user_id,
        )
        return [memories.from_row(row) for row in rows]

    async def get_memory(self, user_id: str, memory_id: str) -> MemoryRecord:
        rows = await self._fetch(
            f"SELECT {memories.COLUMNS} FROM memories WHERE user_id = $1 AND memory_id = $2",
            user_id, memory_id,
        )  # fmt: skip
        if not rows:
            raise NotFound(f"no memory {memory_id!r}")
        return memories.from_row(rows[0])

    async def update_memory(
        self, user_id: str, memory_id: str, text: str, pinned: bool, updated_at: float
    ) -> MemoryRecord:
        rows = await self._fetch(
            "UPDATE memories SET text = $1, pinned = $2, updated_at = $3 "
            f"WHERE user_id = $4 AND memory_id = $5 RETURNING {memories.COLUMNS}",
            text, pinned, updated_at, user_id, memory_id,
        )  # fmt: skip
        if not rows:
            raise NotFound(f"no memory {memory_id!r}")
        return memories.from_row(rows[0])

    async def delete_memory(self, user_id: str, memory_id: str) -> None:
        changed = await self._execute(
            "DELETE FROM memories WHERE user_id = $1 AND memory_id = $2", user_id, memory_id
        )
        if changed == 0:
            raise NotFound(f"no memory {memory_id!r}")

    async def search_memories(
        self, user_id: str, terms: Sequence[str], limit: int, fresh_since: float
    ) -> list[MemoryRecord]:
        query = memories.tsquery(terms)
        if not query or limit <= 0:
            return []
        # A query of stop words only is empty: it matches nothing, as FTS5's would.
        rows = await self._fetch(
            f"SELECT {memories.COLUMNS} FROM memories, to_tsquery('english', $2) AS query "
            "WHERE user_id = $1 AND lexemes @@ query AND (pinned OR updated_at >= $3) "
            "ORDER BY ts_rank(lexemes, query) DESC, created_at, memory_id LIMIT $4",
            user_id, query, fresh_since, limit,
        )  # fmt: skip
        return [memories.from_row(row) for row in rows]
