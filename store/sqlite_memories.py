"""SqliteStore's personal memory (store/base.py's MemoryStore): the table with an FTS5 index
kept in step by triggers (migration 009), ranked by FTS5's bm25."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Sequence
from typing import TYPE_CHECKING

import aiosqlite

from domain.errors import AlreadyExists, NotFound
from store import memories
from store.records import MemoryRecord


class SqliteMemories:
    """Mixed into SqliteStore, whose connection (`db`), reads (`_all`) and write lock
    (`_writing`) it uses."""

    if TYPE_CHECKING:  # SqliteStore's own, declared for the type checker

        @property
        def db(self) -> aiosqlite.Connection: ...

        _writing: asyncio.Lock

        async def _all(self, sql: str, params: tuple[object, ...] = ()) -> list[sqlite3.Row]: ...

    async def add_memory(self, user_id: str, memory: MemoryRecord) -> None:
        try:
            await self._write(
                f"INSERT INTO memories (user_id, {memories.COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?)",
                (user_id, *memories.row_values(memory)),
            )
        except sqlite3.IntegrityError as exc:
            raise AlreadyExists(f"a memory {memory.memory_id!r} exists already") from exc

    async def list_memories(self, user_id: str) -> list[MemoryRecord]:
        rows = await self._all(
            f"SELECT {memories.COLUMNS} FROM memories WHERE user_id = ? "
            "ORDER BY updated_at DESC, memory_id",
            (user_id,),
        )
        return [memories.from_row(row) for row in rows]

    async def get_memory(self, user_id: str, memory_id: str) -> MemoryRecord:
        rows = await self._all(
            f"SELECT {memories.COLUMNS} FROM memories WHERE user_id = ? AND memory_id = ?",
            (user_id, memory_id),
        )
        if not rows:
            raise NotFound(f"no memory {memory_id!r}")
        return memories.from_row(rows[0])

    async def update_memory(
        self, user_id: str, memory_id: str, text: str, pinned: bool, updated_at: float
    ) -> MemoryRecord:
        changed = await self._write(
            "UPDATE memories SET text = ?, pinned = ?, updated_at = ? "
            "WHERE user_id = ? AND memory_id = ?",
            (text, pinned, updated_at, user_id, memory_id),
        )
        if changed == 0:
            raise NotFound(f"no memory {memory_id!r}")
        return await self.get_memory(user_id, memory_id)

    async def delete_memory(self, user_id: str, memory_id: str) -> None:
        changed = await self._write(
            "DELETE FROM memories WHERE user_id = ? AND memory_id = ?", (user_id, memory_id)
        )
        if changed == 0:
            raise NotFound(f"no memory {memory_id!r}")

    async def search_memories(
        self, user_id: str, terms: Sequence[str], limit: int, fresh_since: float
    ) -> list[MemoryRecord]:
        match = memories.fts5_match(terms)
        if not match or limit <= 0:
            return []
        columns = ", ".join(f"m.{name.strip()}" for name in memories.COLUMNS.split(","))
        rows = await self._all(
            f"SELECT {columns} FROM memories_index JOIN memories AS m "
            "ON m.rowid = memories_index.rowid "
            "WHERE memories_index MATCH ? AND m.user_id = ? AND (m.pinned OR m.updated_at >= ?) "
            "ORDER BY bm25(memories_index), m.created_at, m.memory_id LIMIT ?",
            (match, user_id, fresh_since, limit),
        )
        return [memories.from_row(row) for row in rows]

    async def _write(self, sql: str, params: tuple[object, ...]) -> int:
        async with self._writing:
            try:
                cursor = await self.db.execute(sql, params)
                await self.db.commit()
            except BaseException:
                await self.db.rollback()
                raise
        return cursor.rowcount
